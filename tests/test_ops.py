"""sdtw as PyTorch operators: torch.compile (fullgraph, no graph break), torch.export,
FakeTensor/meta shapes, ``opcheck`` on every operator; half precision and autocast."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import sdtw
from tests.conftest import randn, requires_gpu, requires_sim

GAMMA = 0.5


class _Net(torch.nn.Module):
    def __init__(self, **kw) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3).double()
        self.loss = sdtw.SoftDTW(gamma=GAMMA, backend="cpu", **kw)

    def forward(self, x, y, xl=None, yl=None):
        return self.loss(self.lin(x), y, xl, yl).mean()


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"bandwidth": 3, "normalize": True},
        {"dist": "l1", "memory": "checkpoint"},
    ],
)
def test_compile_fullgraph_equals_eager(rng, kw):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = _Net(**kw)
    x, y = randn(rng, 4, 11, 3), randn(rng, 4, 9, 3)
    xl, yl = torch.tensor([11, 5, 1, 8]), torch.tensor([9, 9, 2, 4])
    eager = net(x, y, xl, yl)
    eager.backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    explain = torch._dynamo.explain(net)(x, y, xl, yl)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    got = torch.compile(net, fullgraph=True)(x, y, xl, yl)
    got.backward()
    torch.testing.assert_close(got, eager, rtol=1e-12, atol=1e-12)
    for p, g in zip(net.parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-10, atol=1e-12)


def test_compile_from_cost_and_no_grad(rng):
    torch._dynamo.reset()

    def f(c):
        return sdtw.softdtw_from_cost(c, gamma=GAMMA, bandwidth=2, backend="cpu").sum()

    c = torch.as_tensor(rng.random((3, 6, 5))).requires_grad_()
    eager = f(c)
    (want,) = torch.autograd.grad(eager, c)
    got = torch.compile(f, fullgraph=True)(c)
    (g,) = torch.autograd.grad(got, c)
    torch.testing.assert_close(got, eager)
    torch.testing.assert_close(g, want)
    with torch.no_grad():
        x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
        h = torch.compile(lambda a, b: sdtw.softdtw(a, b, backend="cpu"), fullgraph=True)
        torch.testing.assert_close(h(x, y), sdtw.softdtw(x, y, backend="cpu"))


def test_export_holds_one_sdtw_node(rng):
    net = _Net(bandwidth=2)
    x, y = randn(rng, 2, 7, 3), randn(rng, 2, 6, 3)
    ep = torch.export.export(net, (x, y))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets.count("sdtw.pair.default") == 1
    torch.testing.assert_close(ep.module()(x, y), net(x, y))


def test_fake_and_meta_inputs_give_the_output_shapes():
    with FakeTensorMode():
        x, y = torch.empty(5, 40, 3), torch.empty(5, 30, 3)
        v, gx, gy = torch.ops.sdtw.pair(x, y, None, None, 1.0, 0.0, False, "sqeuclidean", -1,
                                        "auto", "auto", True, False)  # fmt: skip
        assert v.shape == (5,) and gx.shape == (5, 40, 3) and gy.shape == (0,)
        c = torch.empty(2, 8, 9, dtype=torch.float64)
        v, E = torch.ops.sdtw.cost(c, None, None, 1.0, 0.0, "auto", True)
        assert v.shape == (2,) and v.dtype == torch.float64 and E.shape == (2, 8, 9)
    meta = torch.empty(2, 6, 3, device="meta")
    v, _, _ = torch.ops.sdtw.pair(meta, meta, None, None, 1.0, 0.0, False, "l1", -1, "auto",
                                  "auto", False, False)  # fmt: skip
    assert v.shape == (2,) and v.device.type == "meta"


@pytest.mark.parametrize("make", ["meta", "fake"])
def test_public_functions_take_fake_and_meta_tensors(make):
    """The public entry points trace through the operators: shapes and dtypes, no values."""

    def run():
        dev = "meta" if make == "meta" else "cpu"
        x = torch.empty(4, 9, 2, device=dev, requires_grad=True)
        y = torch.empty(4, 7, 2, device=dev)
        v = sdtw.softdtw(x, y, gamma=0.3, normalize=True, x_lengths=[9, 3, 1, 5])
        assert v.shape == (4,) and v.dtype == torch.float32 and v.device.type == dev
        v.sum().backward()
        assert x.grad.shape == x.shape
        m = sdtw.SoftDTW(gamma=0.3, bandwidth=2)(x[0], y[0])
        assert m.shape == () and m.device.type == dev
        c = torch.empty(3, 5, 6, device=dev, dtype=torch.float64)
        assert sdtw.softdtw_from_cost(c, gamma=0.5).shape == (3,)

    if make == "fake":
        with FakeTensorMode():
            run()
    else:
        run()


_PAIR_ARGS = [
    (False, None, 0.0, False, "sqeuclidean", -1, "cpu", "auto", True, True),
    (False, [7, 3, 1], 2.0, True, "l1", -1, "cpu", "checkpoint", True, False),
    (False, None, 0.0, False, "euclidean", -1, "reference", "full", False, True),
    (True, None, 1.0, False, "sqeuclidean", -1, "cpu", "auto", False, False),
]


@pytest.mark.parametrize("args", _PAIR_ARGS)
def test_opcheck_pair(rng, args):
    half, xl, *rest = args
    dtype = torch.float32 if half else torch.float64
    x = randn(rng, 3, 7, 2, dtype=dtype).requires_grad_()
    y = randn(rng, 3, 5, 2, dtype=dtype).requires_grad_()
    xl = None if xl is None else torch.tensor(xl)
    bw, norm, dist, fused, backend, memory, nx, ny = rest
    full = (x, y, xl, None, GAMMA, bw, norm, dist, fused, backend, memory, nx, ny)
    result = torch.library.opcheck(torch.ops.sdtw.pair.default, full)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("need", [True, False])
def test_opcheck_cost(rng, need):
    c = torch.as_tensor(rng.random((3, 6, 4))).requires_grad_(need)
    args = (c, None, torch.tensor([4, 4, 2]), 0.3, 1.0, "cpu", need)
    result = torch.library.opcheck(torch.ops.sdtw.cost.default, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_second_derivative_through_the_operator_raises(rng):
    x, y = randn(rng, 2, 5, 2).requires_grad_(), randn(rng, 2, 4, 2)
    v, _, _ = torch.ops.sdtw.pair(x, y, None, None, GAMMA, 0.0, False, "sqeuclidean", -1, "cpu",
                                  "auto", True, False)  # fmt: skip
    (g,) = torch.autograd.grad(v.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivatives"):
        g.pow(2).sum().backward()


def test_compiled_callable_dist_is_refused_clearly(rng):
    torch._dynamo.reset()
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)

    def f(a, b):
        return sdtw.softdtw(a, b, dist=lambda p, q: torch.cdist(p, q), backend="cpu")

    with pytest.raises(Exception, match="named dist"):
        torch.compile(f, fullgraph=True)(x, y)


# --------------------------------------------------------------------------------------------
# Half precision and autocast
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_half_inputs_match_float64_on_the_rounded_inputs(rng, dtype, backend):
    """float16/bfloat16 sequences are computed in float64 on the CPU backends and returned in
    their own dtype: the float64 result on the same rounded inputs, rounded once."""
    x, y = randn(rng, 3, 9, 2).to(dtype), randn(rng, 3, 7, 2).to(dtype)
    xr = x.clone().requires_grad_()
    v = sdtw.softdtw(xr, y, gamma=GAMMA, backend=backend)
    v.sum().backward()
    x64 = x.double().requires_grad_()
    w = sdtw.softdtw(x64, y.double(), gamma=GAMMA, backend="reference")
    w.sum().backward()
    assert v.dtype == dtype and xr.grad.dtype == dtype
    torch.testing.assert_close(v, w.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(xr.grad, x64.grad.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_the_loss_in_float32(rng, dtype):
    lin = torch.nn.Linear(2, 2)
    x, y = randn(rng, 3, 8, 2, dtype=torch.float32), randn(rng, 3, 6, 2, dtype=torch.float32)
    with torch.autocast("cpu", dtype=dtype):
        h = lin(x)
        assert h.dtype == dtype
        v = sdtw.softdtw(h, y, gamma=GAMMA, backend="cpu")
        c = sdtw.softdtw_from_cost(torch.cdist(h, y.to(dtype)) ** 2, backend="cpu")
    assert v.dtype == torch.float32 and c.dtype == torch.float32
    want = sdtw.softdtw(h.float(), y, gamma=GAMMA, backend="cpu")
    torch.testing.assert_close(v, want, rtol=0, atol=0)
    v.sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (simulator: nox -s slow)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_on_the_cuda_kernels(rng, dtype):
    x, y = randn(rng, 2, 33, 3).to(dtype), randn(rng, 2, 20, 3).to(dtype)
    xr = x.clone().requires_grad_()
    v = sdtw.softdtw(xr, y, gamma=GAMMA, backend="cuda")
    v.sum().backward()
    assert v.dtype == dtype and xr.grad.dtype == dtype
    x64 = x.double().requires_grad_()
    w = sdtw.softdtw(x64, y.double(), gamma=GAMMA, backend="cpu")
    w.sum().backward()
    np.testing.assert_allclose(v.detach().double(), w.detach().to(dtype).double(), rtol=1e-2)
    np.testing.assert_allclose(xr.grad.double(), x64.grad.to(dtype).double(), rtol=2e-2, atol=1e-2)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_gpu_compile_equals_eager(rng, mode):
    """On the GPU, compiled (and with PyTorch's cudagraph trees capturing the step, whose
    sdtw kernels then replay inside PyTorch's graph) against eager, over several steps."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(8, 8).cuda()

    def step(x, y, xl):
        return sdtw.softdtw(lin(x), y, gamma=GAMMA, x_lengths=xl).mean()

    compiled = torch.compile(step, mode=mode, fullgraph=True)
    for _ in range(4):
        x = randn(rng, 16, 200, 8, dtype=torch.float32, device="cuda")
        y = randn(rng, 16, 150, 8, dtype=torch.float32, device="cuda")
        xl = torch.as_tensor(rng.integers(100, 201, 16), device="cuda")
        lin.zero_grad()
        want = step(x, y, xl)
        want.backward()
        g_want = lin.weight.grad.clone()
        lin.zero_grad()
        got = compiled(x, y, xl)
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lin.weight.grad, g_want, rtol=1e-4, atol=1e-5)


@requires_sim
@pytest.mark.cudasim
def test_float16_cost_is_read_as_it_is_on_the_cuda_kernels(rng):
    """A float16 cost goes to the kernels without a (B, N, M) float32 copy; values and E come
    back in float16, the float64 result on the same cost to half precision."""
    c = torch.as_tensor(rng.random((2, 40, 35))).half().requires_grad_()
    v = sdtw.softdtw_from_cost(c, gamma=0.3, backend="cuda", bandwidth=5)
    v.sum().backward()
    c64 = c.detach().double().requires_grad_()
    w = sdtw.softdtw_from_cost(c64, gamma=0.3, backend="cpu", bandwidth=5)
    w.sum().backward()
    assert v.dtype == torch.float16 and c.grad.dtype == torch.float16
    np.testing.assert_allclose(v.detach().double(), w.detach(), rtol=1e-3)
    np.testing.assert_allclose(c.grad.double(), c64.grad, atol=1e-3)


_F16_PTX = """
from sdtw.cuda.kernels import COST, ForwardSpec, registry
sig = "f2[::1], f4[:, :, ::1], i8, i8, i8, f8, i8, i8, f4[::1], i8[::1], f2[::1], b1"
for lengths in (False, True):
    ptx = registry.compile_ptx(ForwardSpec(COST, True, lengths=lengths), sig, (9, 0))
    assert "cvt.f32.f16" in ptx
print("ok")
"""


@pytest.mark.slow  # (NVVM in a child process: nox -s slow)
def test_float16_cost_kernel_compiles_for_the_gpu():
    """The float16-cost signature of the cost forward through Numba's typing and NVVM (what
    the simulator never checks); skips where NVVM is missing."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    res = subprocess.run(
        [sys.executable, "-c", _F16_PTX], env=env, capture_output=True, text=True, timeout=600
    )
    if res.returncode and "nvvm" in (res.stderr + res.stdout).lower():
        pytest.skip("no NVVM here")
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# What compile and torch.func refuse, and how
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [[5.7, 2.2], [True, True], np.array([5.0, 2.0]), "ab"])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_bad_lengths_are_refused_as_in_eager(rng, bad, fullgraph):
    """Lengths of floats, bools, a float array or a string raise the eager TypeError under
    torch.compile too (with fullgraph=True inside dynamo's report), never truncated."""
    torch._dynamo.reset()
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
    f = torch.compile(
        lambda a, b: sdtw.softdtw(a, b, backend="cpu", x_lengths=bad), fullgraph=fullgraph
    )
    with pytest.raises(Exception) as info:
        f(x, y)
    assert "x_lengths must" in str(info.value)
    if not fullgraph:
        assert info.type is TypeError


def test_torch_func_transforms_are_refused_clearly(rng):
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
    for run in (
        lambda: torch.func.grad(lambda a: sdtw.softdtw(a, y).sum())(x),
        lambda: torch.func.vmap(lambda a, b: sdtw.softdtw(a, b))(x, y),
        lambda: torch.func.grad(lambda a: sdtw.alignment(a, y).sum())(x),
        lambda: torch.func.grad(lambda c: sdtw.softdtw_from_cost(c).sum())(
            x[:, :, :1] * y[:, :1, :1].mT
        ),
    ):
        with pytest.raises(RuntimeError, match=r"torch\.func transforms"):
            run()


def test_compiled_alignment_is_refused_clearly(rng):
    torch._dynamo.reset()
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
    for fullgraph in (False, True):
        f = torch.compile(lambda a, b: sdtw.alignment(a, b), fullgraph=fullgraph)
        with pytest.raises(Exception, match="computes it eagerly"):
            f(x, y)
