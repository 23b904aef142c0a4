"""What surrounds a CUDA kernel launch: launches per pass, the toolkit error of a first launch,
the fast launch's parameter buffer, torch's current stream, what a forward keeps, the fused
default rule, ``cuda.jit`` options, the on-disk kernel cache, input alignment.

``cudasim`` tests run in Numba's CPU simulator; ``cuda`` tests need a GPU and skip without one.
"""

from __future__ import annotations

import ast
import os

import numpy as np
import pytest
import torch

import sdtw
from tests.conftest import randn, rel_err, requires_gpu, requires_sim
from tests.cuda_helpers import TOL


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize(
    "fused,dtype,forward_launches",
    [(True, torch.float64, 2), (True, torch.float32, 2), (False, torch.float64, 2)],
)
def test_sim_launches_per_pass(rng, fused, dtype, forward_launches):
    """A constant number of Numba launches per pass, whatever N: the fused forward with
    gradients parks the distances (one launch) and then runs the DP (one); the unfused one
    writes the squared Euclidean cost (one) and then runs the DP on it (one)."""
    x = randn(rng, 1, 33, 2, dtype=dtype).requires_grad_()  # two bands
    before = dict(sdtw.cuda.launch_counts())
    y = randn(rng, 1, 5, 2, dtype=dtype)
    sdtw.softdtw(x, y, backend="cuda", fused=fused).sum().backward()
    after = sdtw.cuda.launch_counts()
    assert after["forward"] - before.get("forward", 0) == forward_launches
    assert after["backward"] - before.get("backward", 0) == 1


@requires_sim
@pytest.mark.cudasim
def test_first_launch_says_which_toolkit_piece_is_missing():
    """A kernel's first launch that fails for want of NVVM, NVRTC or libdevice (numba-cuda's
    compile) raises a RuntimeError naming them and the extras that install them; any other
    error passes through unchanged."""
    from sdtw.cuda import _launch, _private

    def launcher(kernel):
        return _private.Launcher(kernel, True, False, _launch._toolkit_error)

    class Failing:
        def __init__(self, exc):
            self.exc = exc

        def __getitem__(self, config):
            def run(*args):
                raise self.exc

            return run

    t = torch.zeros(3)
    missing = OSError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12"')
    with pytest.raises(RuntimeError, match=r"NVRTC: pip install 'sdtw\[cuda13\]'") as info:
        launcher(Failing(missing))(1, 32, (0, 0), t, 4)
    assert info.value.__cause__ is missing
    with pytest.raises(RuntimeError, match="NVVM, libdevice"):
        launcher(Failing(ValueError("libNVVM cannot find libdevice")))(1, 32, (0, 0), t)
    other = ValueError("bad argument")
    with pytest.raises(ValueError, match="bad argument") as info:
        launcher(Failing(other))(1, 32, (0, 0), t)
    assert info.value is other


@requires_sim
@pytest.mark.cudasim
def test_launch_parameter_buffer():
    """The fast launch's parameter packing (used on a GPU, where every kernel test goes
    through it; here on its own): Numba's flattening of the arguments, the buffer layout from
    the driver's (offset, size) list, and one buffer per thread."""
    import struct
    import threading

    from sdtw.cuda import _private as P

    t = torch.zeros(2, 3, dtype=torch.float32)
    key, flat = P.signature((t, 5, 0.5, True))
    assert flat == [0, 0, 6, 4, t.data_ptr(), 2, 3, 12, 4, 5, 0.5, True]
    assert key == ((torch.float32, 2, True), int, float, bool)
    fmt = P.param_format(flat, [(8 * k, 8) for k in range(11)] + [(88, 1)])
    buf = bytearray(fmt.size)
    fmt.pack_into(buf, 0, *flat)
    assert fmt.size == 89 and buf[88] == 1
    assert struct.unpack_from("<q", buf, 72)[0] == 5
    assert struct.unpack_from("<d", buf, 80)[0] == 0.5
    assert P.param_format([True, 7], [(0, 1), (8, 8)]).size == 16  # aligned after a bool
    with pytest.raises(ValueError):
        P.param_format([1.0], [(0, 4)])  # a 4-byte parameter for a double
    with pytest.raises(ValueError):
        P.param_format([1, 2], [(0, 8)])  # more values than parameters
    with pytest.raises(TypeError):
        P.signature((np.int64(3),))
    # a View packs exactly what its torch view would (key and flat values)
    base = torch.arange(40, dtype=torch.float64)
    for shape, offset in [((2, 3), 12), ((7,), 0), ((3, 1), 5), ((1, 1), 39), ((2, 1, 4), 1)]:
        v = P.View(base, shape, offset)
        n = int(np.prod(shape))
        assert torch.equal(v.tensor(), base[offset : offset + n].view(shape))
        assert P.signature((v, 3)) == P.signature((v.tensor(), 3))
        # the (shape, dtype) layout is cached: another base gets its own address
        w = P.View(base.clone(), shape, offset)
        assert P.signature((w, 3)) == P.signature((w.tensor(), 3))
        assert P.signature((w, 3))[1][4] != P.signature((v, 3))[1][4]
    params = P._ParamBuffer(16)
    other = []
    worker = threading.Thread(target=lambda: other.append(params.buf))
    worker.start()
    worker.join()
    assert other[0] is not params.buf and len(other[0]) == len(params.buf) == 16


def test_fused_default_rule(monkeypatch, rng):
    """``fused=None``: fused when a backward will follow; without one, unfused while the cost
    tensor takes at most a quarter of the free GPU memory (free memory faked here)."""
    from sdtw import cuda as sc
    from sdtw.engine import BACKENDS

    cuda = BACKENDS["cuda"]
    x = randn(rng, 2, 5, 3).requires_grad_()
    y = randn(rng, 2, 4, 3)
    assert cuda.fused_default(x, y, grad=True)
    # CPU tensors (simulator): the cost always fits
    assert not cuda.fused_default(x, y, grad=False)
    dev = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (4 * 2 * 100 * 100 * 4, 0))
    assert sc.cost_fits(2, 100, 100, torch.float32, dev)
    assert not sc.cost_fits(2, 100, 101, torch.float32, dev)
    assert not sc.cost_fits(2, 100, 100, torch.float64, dev)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize("fused", [True, False])
def test_sim_no_grad_stores_nothing(monkeypatch, rng, fused):
    """Under ``torch.no_grad()`` (inputs that require grad notwithstanding) the forward keeps no
    weights: ``store`` off; fused, one launch (no park); unfused, two (the cost, then the
    DP)."""
    from sdtw.cuda import _launch

    stores = []
    forward = _launch.forward
    counts = sdtw.cuda.launch_counts()

    def spy(*args, store, **kw):
        stores.append(store)
        return forward(*args, store=store, **kw)

    monkeypatch.setattr(_launch, "forward", spy)
    x = randn(rng, 1, 6, 2).requires_grad_()
    y = randn(rng, 1, 5, 2).requires_grad_()
    before = counts["forward"]
    with torch.no_grad():
        v = sdtw.softdtw(x, y, backend="cuda", fused=fused)
    assert stores == [False] and counts["forward"] - before == (1 if fused else 2)
    assert not v.requires_grad
    assert rel_err(v, sdtw.softdtw(x.detach(), y.detach(), backend="cpu")) <= 1e-9


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
def test_gpu_forward_keeps_only_gradients(rng, fused):
    """From x, y the forward call computes the gradients and frees its (N, M) buffers before it
    returns: until the backward, a pair holds only its value and its gradients (the weights
    alone would be 8 N M bytes per pair, 2.4 MB here)."""
    B, N, M, D = 4, 300, 257, 16
    x = randn(rng, B, N, D, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, B, M, D, dtype=torch.float32, device="cuda").requires_grad_()
    sdtw.softdtw(x, y, backend="cuda", fused=fused).sum().backward()  # compile, fill caches
    x.grad = y.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    v = sdtw.softdtw(x, y, backend="cuda", fused=fused)
    held = torch.cuda.memory_allocated() - before
    assert held <= 4 * B * (N + M) * D + 64 * 1024, held
    gx, gy = torch.autograd.grad(v, (x, y), torch.ones_like(v))
    assert torch.isfinite(gx).all() and torch.isfinite(gy).all()


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
def test_gpu_runs_on_current_stream(rng, fused):
    """The kernels go on torch's current stream (a side stream here, whose work the default
    stream does not wait for): the launcher's raw stream query names that stream, and the
    values and gradients computed there match the CPU backend's."""
    from sdtw.cuda import _launch

    B, N, M, D = 3, 97, 70, 8
    x = randn(rng, B, N, D, dtype=torch.float64, device="cuda").requires_grad_()
    y = randn(rng, B, M, D, dtype=torch.float64, device="cuda").requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        assert _launch._stream(x.device)[1] == side.cuda_stream
        v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=fused)
        gx, gy = torch.autograd.grad(v.sum(), (x, y))
    side.synchronize()
    xc, yc = x.detach().cpu().requires_grad_(), y.detach().cpu().requires_grad_()
    vc = sdtw.softdtw(xc, yc, gamma=0.1, backend="cpu")
    gxc, gyc = torch.autograd.grad(vc.sum(), (xc, yc))
    assert rel_err(v.cpu(), vc) <= 1e-9
    assert rel_err(gx.cpu(), gxc) <= 1e-9 and rel_err(gy.cpu(), gyc) <= 1e-9
    assert _launch._stream(x.device)[1] == torch.cuda.current_stream().cuda_stream


@requires_gpu
@pytest.mark.cuda
def test_gpu_default_rule_without_grad(rng):
    """``fused=None`` under ``no_grad`` asks the driver for free memory and takes the unfused
    path when the cost fits; the value is the same either way."""
    x = randn(rng, 3, 300, 16, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 3, 257, 16, dtype=torch.float32, device="cuda")
    ref = sdtw.softdtw(x.detach().cpu().double(), y.cpu().double(), gamma=0.1, backend="cpu")
    with torch.no_grad():
        v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda")
    assert not v.requires_grad
    assert rel_err(v.cpu().double(), ref) <= TOL[torch.float32]


@requires_sim
@pytest.mark.cudasim
def test_sim_missing_jit_option_warns():
    """A ``cuda.jit`` option this numba-cuda lacks is dropped with a warning that says what
    it costs, once (no silent fallback)."""
    from sdtw.cuda.kernels import jit as K

    with pytest.warns(RuntimeWarning, match="no no_such_option; it costs this"):
        assert not K._has_jit_option("no_such_option", "it costs this")
    assert not K._has_jit_option("no_such_option", "it costs this")  # remembered, no warning


_CACHE_KEY_SCRIPT = """
import sys
from numba.core import types
from sdtw.cuda import _private
from sdtw.cuda.kernels import BackwardSpec, ForwardSpec, ParkSpec, registry as R


class Codegen:
    def magic_tuple(self):
        return ("nvptx64", "sm_90", "")


sig = (types.float32[::1], types.int64)
specs = (ForwardSpec("fused", True), BackwardSpec(True, True), ParkSpec(True))
kernels = [R.get(s) for s in specs]
print(R.DISK_CACHE, R.disk_cache_problem())
for d in kernels:
    print(_private.cache_index_key(d, sig, Codegen()) if R.DISK_CACHE else "-")
"""


def _run_kernels_script(script: str, **env) -> str:
    import subprocess
    import sys

    full_env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", **env}
    done = subprocess.run(
        [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_kernel_disk_cache_keys_are_the_same_in_every_process(tmp_path):
    """The kernels' on-disk cache keys (:func:`sdtw.cuda._private.variant_cache`) come out the
    same in two processes (numba-cuda's own key, a pickle of each kernel's closure, did not),
    differ between kernel variants, and carry a digest of the kernel package's sources;
    ``SDTW_KERNEL_CACHE=0`` turns the cache off.  Needs no GPU (no kernel is compiled)."""
    first = _run_kernels_script(_CACHE_KEY_SCRIPT, NUMBA_CACHE_DIR=str(tmp_path))
    second = _run_kernels_script(_CACHE_KEY_SCRIPT, NUMBA_CACHE_DIR=str(tmp_path))
    lines = first.splitlines()
    assert first == second and lines[0] == "True None"
    keys = lines[1:]
    assert len(keys) == 3 and len(set(keys)) == 3
    for key, spec in zip(keys, ("ForwardSpec(", "BackwardSpec(", "ParkSpec("), strict=True):
        assert key.startswith("((Array(float32") and spec in key, key
    from sdtw.cuda.kernels import registry

    digest = registry.source_digest()
    assert len(digest) == 64 and all(digest in k for k in keys)
    off = _run_kernels_script(_CACHE_KEY_SCRIPT, SDTW_KERNEL_CACHE="0")
    assert off.splitlines()[0] == "False None"


_CACHE_USE_SCRIPT = """
import torch, sdtw, sdtw.cuda

sdtw.cuda.set_graphs(False)
g = torch.Generator(device="cuda").manual_seed(7)
x = torch.randn(3, 70, 9, device="cuda", generator=g).requires_grad_()
y = torch.randn(3, 45, 9, device="cuda", generator=g).requires_grad_()
out = []
for fused in (True, False):
    v = sdtw.softdtw(x, y, gamma=0.1, fused=fused)
    gx, gy = torch.autograd.grad(v.sum(), (x, y))
    with torch.no_grad():
        w = sdtw.softdtw(x, y, gamma=0.1, fused=fused)
    out += [v, gx, gy, w]
torch.cuda.synchronize()
print(*sdtw.cuda.cache_counts())
print(repr([t.double().sum().item() for t in out]))
"""


@requires_gpu
@pytest.mark.cuda
def test_gpu_kernel_disk_cache_round_trip(tmp_path):
    """A second process loads every kernel the first compiled from the on-disk cache (no
    compilation), and gives the same values bit for bit and the same gradients (to float32
    rounding: the backward's column sums add partial bands in whatever order they finish),
    fused and unfused, with and without gradients; ``SDTW_KERNEL_CACHE=0`` compiles again."""

    def run(**env) -> tuple[int, int, list[float]]:
        out = _run_kernels_script(_CACHE_USE_SCRIPT, NUMBA_CACHE_DIR=str(tmp_path), **env)
        counts, sums = out.splitlines()[:2]
        hits, misses = map(int, counts.split())
        return hits, misses, ast.literal_eval(sums)

    h1, m1, sums1 = run()
    h2, m2, sums2 = run()
    assert h1 == 0 and m1 >= 4  # park, forward and backward, and the no-grad fused forward
    assert (h2, m2) == (m1, 0)
    values = [0, 3, 4, 7]  # v and w, fused then unfused; the others are gradients' sums
    assert [sums2[i] for i in values] == [sums1[i] for i in values]
    assert sums2 == pytest.approx(sums1, rel=1e-6)
    h3, m3, sums3 = run(SDTW_KERNEL_CACHE="0")
    assert (h3, m3) == (0, m1) and sums3 == pytest.approx(sums1, rel=1e-6)


def test_sweep_grads_inputs_16_byte_aligned():
    """The gradient warp copies x's and y's rows 16 bytes at a time where D % 4 == 0, so the
    launcher hands it aligned data: a view that starts 4 bytes in becomes an aligned copy
    with the same values; an aligned tensor is passed as it is."""
    from sdtw.cuda import _launch

    base = torch.randn(4 * 8 + 1)
    view = base[1:].view(4, 8)
    assert view.data_ptr() % 16 == 4
    out = _launch._aligned16(view)
    assert out.data_ptr() % 16 == 0
    assert torch.equal(out, view)
    aligned = torch.randn(4, 8)
    assert _launch._aligned16(aligned) is aligned
