"""CUDA kernels against the float64 reference: values and gradients from x and y and from a
cost tensor, float16/32/64, band and normalize, NaN, the park kernel's distances, the DP
step's soft-min, and the simulator's primitives.

``cudasim`` tests run the real kernel code in Numba's CPU simulator (NUMBA_ENABLE_CUDASIM=1,
tiny sizes: the simulator is slow); ``cuda`` tests run on a GPU and skip cleanly without one.
The other CUDA tests: ``test_cuda_launch.py`` (the launcher and what surrounds a launch),
``test_cuda_variants.py`` (kernel variants against each other), ``test_cuda_graphs.py``
(CUDA graphs); their shared tolerances are in ``cuda_helpers.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from numba import cuda as sim_cuda  # (the simulator's, where it is on)

import sdtw
from sdtw.cuda.config import overrides
from sdtw.distances import pairwise as pairwise_cost
from tests.conftest import GAMMAS, SIM_SHAPES, randn, rel_err, requires_gpu, requires_sim
from tests.cuda_helpers import TOL, TOL_COST32

# One combination of the other settings per shape keeps the simulator time down (each launch
# costs seconds there, and normalize=True triples the launches) while every setting is still
# covered: all gammas, band on/off, normalize on/off, both dtypes.
_SETTINGS = {
    (2, 5, 7, 3): (1.0, None, True, torch.float64),
    (1, 1, 1, 2): (0.1, 2, True, torch.float32),
    (2, 1, 33, 2): (0.01, None, False, torch.float64),
    (1, 33, 1, 2): (0.001, 3, False, torch.float32),
    (1, 33, 40, 3): (0.1, 2, False, torch.float64),
    (1, 65, 34, 2): (0.01, None, False, torch.float32),
    (1, 33, 40, 70): (0.1, 5, False, torch.float64),
}


SIM_CASES = [(*shape, *_SETTINGS[shape]) for shape in SIM_SHAPES]


def _check_against_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype, fused, device):
    x = randn(rng, B, N, D, dtype=dtype, device=device).requires_grad_()
    y = randn(rng, B, M, D, dtype=dtype, device=device).requires_grad_()
    go = randn(rng, B, dtype=dtype, device=device)
    kw = dict(gamma=gamma, bandwidth=bandwidth, normalize=normalize)
    xr = x.detach().cpu().double().requires_grad_()
    yr = y.detach().cpu().double().requires_grad_()
    vr = sdtw.softdtw(xr, yr, backend="cpu", **kw)
    ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.cpu().double()))
    v = sdtw.softdtw(x, y, backend="cuda", fused=fused, **kw)
    out = (v, *torch.autograd.grad(v, (x, y), go))
    for name, a, b in zip(("value", "grad_x", "grad_y"), out, ref, strict=True):
        assert a.dtype == dtype and a.device == x.device
        assert torch.isfinite(a).all(), name
        tol = TOL_COST32 if (dtype == torch.float32 and not fused) else TOL[dtype]
        assert rel_err(a, b) <= tol, (name, rel_err(a, b))


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("B,N,M,D,gamma,bandwidth,normalize,dtype", SIM_CASES)
def test_sim_matches_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype, fused):
    _check_against_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype, fused, "cpu")


@requires_sim
@pytest.mark.cudasim
def test_sim_cost_entry_and_no_grad(rng):
    cost = torch.as_tensor(rng.random((1, 34, 5))).requires_grad_()
    go = randn(rng, 1)
    ref = sdtw.softdtw_from_cost(cost, gamma=0.1, backend="reference")
    (e_ref,) = torch.autograd.grad(ref, cost, go)
    v = sdtw.softdtw_from_cost(cost, gamma=0.1, backend="cuda")
    (e,) = torch.autograd.grad(v, cost, go)
    assert rel_err(v, ref) < 1e-12 and rel_err(e, e_ref) < 1e-12
    with torch.no_grad():
        assert rel_err(sdtw.softdtw_from_cost(cost, gamma=0.1, backend="cuda"), ref) < 1e-12


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize("fused", [True, False])
def test_sim_half_inputs(rng, fused):
    """float16 inputs run the float32 kernels; value and gradients come back in float16, equal
    to the float64 reference of the same (float16) values up to float16 rounding."""
    x = randn(rng, 2, 5, 3, dtype=torch.float16).requires_grad_()
    y = randn(rng, 2, 4, 3, dtype=torch.float16).requires_grad_()
    go = randn(rng, 2, dtype=torch.float16)
    v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=fused)
    gx, gy = torch.autograd.grad(v, (x, y), go)
    xr, yr = x.detach().double().requires_grad_(), y.detach().double().requires_grad_()
    vr = sdtw.softdtw(xr, yr, gamma=0.1, backend="reference")
    ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.double()))
    for a, b in zip((v, gx, gy), ref, strict=True):
        assert a.dtype == torch.float16
        assert rel_err(a.double(), b) <= 2e-3


@requires_sim
@pytest.mark.cudasim
def test_sim_inputs_not_modified(rng):
    """float64 is the risky dtype: there ``x.double()`` is ``x`` itself, not a copy."""
    x = randn(rng, 2, 5, 3).requires_grad_()
    y = randn(rng, 2, 4, 3).requires_grad_()
    x0, y0 = x.detach().clone(), y.detach().clone()
    for fused in (True, False):
        sdtw.softdtw(x, y, backend="cuda", fused=fused).sum().backward()
    assert torch.equal(x.detach(), x0) and torch.equal(y.detach(), y0)


@requires_sim
@pytest.mark.cudasim
def test_sim_second_backward(rng):
    """From x and y the gradients are computed in the forward and kept: a second backward
    (retain_graph) gives them again.  The cost path's backward reuses its buffer in place and
    refuses a second call rather than return garbage."""
    x = randn(rng, 1, 3, 2).requires_grad_()
    y = randn(rng, 1, 4, 2)
    for fused in (True, False):
        v = sdtw.softdtw(x, y, backend="cuda", fused=fused).sum()
        (g1,) = torch.autograd.grad(v, x, retain_graph=True)
        (g2,) = torch.autograd.grad(v, x)
        assert torch.equal(g1, g2)
    cost = torch.as_tensor(rng.random((1, 3, 4))).requires_grad_()
    v = sdtw.softdtw_from_cost(cost, backend="cuda").sum()
    v.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward called twice"):
        v.backward()


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize(
    "B,N,M,D,bandwidth", [(1, 33, 40, 70, None), (2, 5, 7, 3, None), (1, 37, 21, 9, 6)]
)
def test_sim_fused_no_grad(rng, B, N, M, D, bandwidth):
    """Without gradients the fused forward computes the distances in the DP kernel itself (no
    (N, M) buffer): its own path, checked here (D = 70: several staging passes, one partial;
    a band)."""
    x, y = randn(rng, B, N, D), randn(rng, B, M, D)
    kw = {"bandwidth": bandwidth, "backend": "cuda", "fused": True}
    with torch.no_grad():
        v = sdtw.softdtw(x, y, gamma=0.1, **kw)
        v32 = sdtw.softdtw(x.float(), y.float(), gamma=0.1, **kw)
    ref = sdtw.softdtw(x, y, gamma=0.1, bandwidth=bandwidth, backend="cpu")
    assert rel_err(v, ref) <= TOL[torch.float64] and rel_err(v32, ref) <= TOL[torch.float32]


def _check_park(rng, device, dtype, N, M, B=2):
    """The park kernel's float64 squared distances, across its row and column tile (PS = 64)
    and feature pass (PK = 64 float32 or 32 float64 features) boundaries, for odd M (scalar
    stores) and even M (vector stores): float64, in P's plane 0 (plane 1 untouched);
    float32 inputs, as the high (plane 1) and low (plane 0) 32-bit words of the float64
    distance of the float32 inputs."""
    from sdtw.cuda import _launch
    from sdtw.cuda.kernels import park

    f32 = dtype == torch.float32
    D = park._layout(f32)[0] + 1  # one feature past the first pass
    x = randn(rng, B, N, D, dtype=dtype, device=device)
    y = randn(rng, B, M, D, dtype=dtype, device=device)
    P = torch.full((B, 2, N, M), float("nan"), dtype=dtype, device=device)
    _launch._park(f32, False, x, y, P, _launch._stream(x.device))
    ref = torch.cdist(x.cpu().double(), y.cpu().double()) ** 2
    if dtype == torch.float64:
        got = P[:, 0].cpu()
        assert P[:, 1].isnan().all()
    else:
        words = torch.stack([P[:, 0].cpu(), P[:, 1].cpu()], dim=-1)  # (low, high) per cell
        got = words.view(torch.int64).squeeze(-1).view(torch.float64)  # little-endian
    assert (got - ref).abs().max() <= 1e-12 * ref.abs().max()


def _check_sqeuclidean_cost(rng, device, dtype, N, M):
    """The unfused path's cost tensor from the park kernel: the float64 squared distances
    rounded once to the inputs' dtype, across tile and feature-pass boundaries, for odd and
    even M; a NaN input gives NaN cells (not a clamped 0)."""
    from sdtw.cuda import sqeuclidean_cost

    D = 33
    x = randn(rng, 2, N, D, dtype=dtype, device=device)
    y = randn(rng, 2, M, D, dtype=dtype, device=device)
    got = sqeuclidean_cost(x, y)
    assert got.shape == (2, N, M) and got.dtype == dtype
    ref = (torch.cdist(x.cpu().double(), y.cpu().double()) ** 2).to(dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    assert (got.cpu().double() - ref.double()).abs().max() <= tol * ref.double().abs().max()
    x[1, 0, 3] = float("nan")
    bad = sqeuclidean_cost(x, y).cpu()
    assert bad[1, 0].isnan().all() and not bad[0].isnan().any() and not bad[1, 1:].isnan().any()


@requires_sim
@pytest.mark.cudasim
def test_sim_sqeuclidean_cost(rng):
    """:func:`_check_sqeuclidean_cost` in the simulator (float32, odd M; float64 even M is
    covered on the GPU)."""
    _check_sqeuclidean_cost(rng, "cpu", torch.float32, 3, 67)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_sqeuclidean_cost(rng, dtype):
    for N, M in ((66, 65), (3, 70), (130, 128)):
        _check_sqeuclidean_cost(rng, "cuda", dtype, N, M)


def _check_nan_propagates(rng, device, fused, N, M):
    """A NaN in one pair's inputs gives that pair a NaN loss, the others finite (the park
    kernel's clamp at 0 keeps NaN), with and without gradients."""
    x = randn(rng, 2, N, 8, device=device)
    y = randn(rng, 2, M, 8, device=device)
    x[1, N // 2, 2] = float("nan")
    with torch.no_grad():
        v = sdtw.softdtw(x, y, backend="cuda", fused=fused)
    assert torch.isfinite(v[0]) and torch.isnan(v[1])
    v = sdtw.softdtw(x.requires_grad_(), y, backend="cuda", fused=fused)
    assert torch.isfinite(v[0]) and torch.isnan(v[1])


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize("fused", [True, False])
def test_sim_nan_propagates(rng, fused):
    _check_nan_propagates(rng, "cpu", fused, 5, 4)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
def test_gpu_nan_propagates(rng, fused):
    _check_nan_propagates(rng, "cuda", fused, 40, 33)


def _exact_softmin3(r_diag, r_left, up, cost):
    """``cost + softmin`` (scaled, base 2) and the diagonal and upper weights, in float64
    relative to the minimum of all three (the textbook form), for finite inputs."""
    m = min(r_diag, r_left, up)
    w = [2.0 ** (m - v) for v in (r_diag, up, r_left)]
    s = sum(w)
    return cost + m - math.log2(s), w[0] / s, w[1] / s


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize("fast", [False, True])
def test_sim_softmin3_against_exact(rng, fast):
    """The DP step's soft-min (the diagonal and left terms relative to the smaller of the two,
    the upper value through one exponent of -|t|) against the textbook form on fresh triples
    of either order and gaps up to ~200, and its +inf / NaN / invalid-cell cases."""
    from sdtw.cuda.kernels import geometry
    from sdtw.cuda.kernels import recurrence as K

    f64 = np.float64
    softmin = K.softmin3_fast if fast else K.softmin3

    def call(r_diag, r_left, up, cost, ok=True):
        m2 = K.min2(f64(r_diag), f64(r_left))
        mm2 = K.min2(K.min2(f64(r_diag), geometry.BIG), f64(r_left))
        r, pd, pu = softmin(f64(r_diag), f64(r_left), m2, mm2, f64(up), f64(cost), ok)
        return float(r), float(pd), float(pu)

    # float32: exponents rounded to float32 (a weight's relative error a few 1e-7 times its
    # exponent), log2 of a sum in [1, 3] to ~2e-7 (scaled units)
    tol_r, tol_w = (1e-6, 1e-6) if fast else (1e-12, 1e-15)
    base = rng.uniform(-1e4, 1e4, 400)
    gaps = rng.uniform(-100.0, 100.0, (400, 3)) * rng.choice([0.01, 0.1, 1.0, 2.0], (400, 1))
    for b, (gd, gu, gl) in zip(base, gaps, strict=True):
        r_diag, up, r_left = b + gd, b + gu, b + gl
        cost = rng.uniform(0.0, 100.0)
        r, pd, pu = call(r_diag, r_left, up, cost)
        er, ed, eu = _exact_softmin3(r_diag, r_left, up, cost)
        assert abs(r - er) <= tol_r + 1e-15 * abs(er), (r_diag, r_left, up, r, er)
        assert abs(pd - ed) <= tol_w and abs(pu - eu) <= tol_w, (r_diag, r_left, up)
        assert 0.0 <= pd <= 1.0 and 0.0 <= pu <= 1.0 and pd + pu <= 1.0 + tol_w

    inf, nan = math.inf, math.nan
    assert call(inf, inf, inf, 1.0) == (inf, 0.0, 0.0)  # unreachable
    assert call(inf, inf, 5.0, 1.0) == (6.0, 0.0, 1.0)  # from above only
    assert call(inf, 3.0, inf, 1.0) == (4.0, 0.0, 0.0)  # from the left only
    assert call(3.0, inf, inf, 1.0) == (4.0, 1.0, 0.0)  # diagonal only
    for args in ((nan, 1.0, 2.0), (1.0, nan, 2.0), (1.0, 2.0, nan), (inf, nan, 2.0)):
        assert math.isnan(call(*args, 1.0)[0]), args
        assert math.isnan(call(args[0], args[1], args[2] - 100.0, 1.0)[0]), args  # up smallest
    assert math.isnan(call(1.0, 2.0, 3.0, nan)[0])
    for args in ((1.0, 2.0, 3.0, 1.0), (nan, nan, nan, nan), (inf, inf, 1.0, 1.0)):
        assert call(*args, ok=False) == (inf, 0.0, 0.0), args


@requires_sim
@pytest.mark.cudasim
def test_sim_softmin_accuracy_script_emulates_the_kernel(rng):
    """``experiments.softmin_accuracy``'s numpy form of the float32 step is the kernel's: the
    same values and weights (to float32 rounding of its exponentials) on fresh triples with
    +inf among them, so the accuracy it reports is the kernel's arithmetic."""
    from experiments import softmin_accuracy as S
    from sdtw.cuda.kernels import geometry
    from sdtw.cuda.kernels import recurrence as K

    assert S.BIG == geometry.BIG
    v = rng.uniform(-50.0, 50.0, (3, 300))
    v[:, :30] = math.inf
    v[0, 30:60] = v[2, 60:90] = math.inf
    rng.shuffle(v, axis=1)
    rd, rl, up = v
    cost = rng.uniform(0.0, 10.0, 300)
    got = np.array(
        [
            K.softmin3_fast(
                *(
                    np.float64(a)
                    for a in (d, left, K.min2(d, left), K.min2(K.min2(d, geometry.BIG), left))
                ),
                np.float64(u),
                np.float64(c),
                True,
            )
            for d, left, u, c in zip(rd, rl, up, cost, strict=True)
        ]
    ).T
    want = np.array(S.after(rd, rl, up, cost), dtype=np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize(
    "dtype, N, M", [(torch.float64, 66, 65), (torch.float32, 66, 65), (torch.float64, 3, 70)]
)
def test_sim_park_distances(rng, dtype, N, M):
    """The park kernel in the simulator (with its per-lane twin of the tensor-core mma)."""
    _check_park(rng, "cpu", dtype, N, M, B=1)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_park_distances(rng, dtype):
    """The same on the GPU, where the dot products are float64 tensor-core mma (the simulator
    has a per-lane twin of it)."""
    for N, M in ((66, 65), (3, 70), (130, 128), (64, 1), (1, 2)):
        _check_park(rng, "cuda", dtype, N, M)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_gpu_float32_accuracy_paper_case(rng, gamma, fused):
    """B=4, N=M=512, D=64, randn: the case where the paper's float32 design fails.  Fused:
    values and gradients wrt x and y against the float64 reference from x and y, within the
    issue's 1e-4 (float64 distances: about 1e-7 on the H200).  Unfused: the kernel on the
    float32 cost tensor against the float64 reference of that same cost (value and gradient
    wrt the cost), within 1e-4; see TOL_COST32 for what a float32 cost itself costs."""
    x = randn(rng, 4, 512, 64, dtype=torch.float32, device="cuda")
    y = randn(rng, 4, 512, 64, dtype=torch.float32, device="cuda")
    go = randn(rng, 4, dtype=torch.float32, device="cuda")
    if fused:
        ins = (x.requires_grad_(), y.requires_grad_())
        refs = tuple(t.detach().cpu().double().requires_grad_() for t in ins)
        vr = sdtw.softdtw(*refs, gamma=gamma, backend="cpu")
        v = sdtw.softdtw(*ins, gamma=gamma, fused=True, backend="cuda")
    else:
        ins = (pairwise_cost(x, y, "sqeuclidean").detach().requires_grad_(),)
        refs = (ins[0].detach().cpu().double().requires_grad_(),)
        vr = sdtw.softdtw_from_cost(*refs, gamma=gamma, backend="cpu")
        v = sdtw.softdtw_from_cost(*ins, gamma=gamma, backend="cuda")
    ref = (vr, *torch.autograd.grad(vr, refs, go.cpu().double()))
    out = (v, *torch.autograd.grad(v, ins, go))
    for a, b in zip(out, ref, strict=True):
        assert rel_err(a, b) <= 1e-4


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    "B,N,M,D,gamma,bandwidth,normalize,dtype",
    [
        (3, 77, 1025, 5, 0.1, None, True, torch.float32),
        (2, 1, 300, 3, 1.0, None, False, torch.float64),
        (2, 513, 31, 7, 0.01, 40, True, torch.float32),
        (1, 1000, 1001, 2, 1e-3, 5, False, torch.float64),
        (5, 33, 65, 1, 1.0, None, False, torch.float32),
        (2, 64, 64, 130, 1e-4, None, False, torch.float32),
    ],
)
@pytest.mark.parametrize("mover", [False, True])
def test_gpu_matches_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype, fused, mover):
    """Both variants of the DP kernels (one warp per band; with the mover warp), forward and
    backward, at every case."""
    with overrides(mover=mover, backward_mover=mover):
        _check_against_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype, fused, "cuda")


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize(
    "B,N,M,D,dtype,bandwidth",
    [
        (3, 77, 1025, 5, torch.float32, None),
        (2, 513, 31, 70, torch.float32, None),
        (4, 512, 512, 64, torch.float32, None),
        (2, 300, 129, 17, torch.float64, None),
        (3, 257, 190, 9, torch.float32, 40),
        (2, 97, 161, 33, torch.float64, 25),
    ],
)
def test_gpu_fused_no_grad(rng, B, N, M, D, dtype, bandwidth):
    """Without gradients the fused forward computes the distances inside the DP kernel (their
    dot products on the float64 tensor cores, 8 features at a time: D past and short of
    multiples of 8), float32 and float64, with and without a band."""
    x = randn(rng, B, N, D, dtype=dtype, device="cuda")
    y = randn(rng, B, M, D, dtype=dtype, device="cuda")
    ref = sdtw.softdtw(
        x.cpu().double(), y.cpu().double(), gamma=0.01, bandwidth=bandwidth, backend="cpu"
    )
    with torch.no_grad():
        v = sdtw.softdtw(x, y, gamma=0.01, bandwidth=bandwidth, fused=True, backend="cuda")
    assert rel_err(v.cpu().double(), ref) <= TOL[dtype]


@requires_gpu
@pytest.mark.cuda
def test_gpu_tiny_gamma_matches_float64(rng):
    """gamma = 1e-4, float32 inputs: the fused kernels' values and gradients against the
    float64 CPU backend on the same inputs (measured: about 4e-8 at B = 4, N = 512, D = 64;
    float32 cost paths elsewhere give NaN or inf here), with an upstream gradient other than
    ones."""
    x = randn(rng, 2, 300, 8, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 2, 257, 8, dtype=torch.float32, device="cuda").requires_grad_()
    g = torch.tensor([0.5, -2.0], device="cuda")
    v = sdtw.softdtw(x, y, gamma=1e-4, backend="cuda")
    (v * g).sum().backward()
    x64 = x.detach().cpu().double().requires_grad_()
    y64 = y.detach().cpu().double().requires_grad_()
    w = sdtw.softdtw(x64, y64, gamma=1e-4, backend="cpu")
    (w * g.cpu().double()).sum().backward()
    assert rel_err(v, w) < 1e-6
    assert rel_err(x.grad, x64.grad) < 1e-5 and rel_err(y.grad, y64.grad) < 1e-5


def test_sim_async_copies_land_at_their_wait():
    """The simulator's ``cp.async`` copies stay pending until the thread's wait, as late as
    the hardware may land them: a read of the staged row before its wait sees the old
    contents (so the simulator tests fail where a wait is missing), and after it the source's
    values, read at issue."""
    from sdtw.cuda.kernels import sim as K

    S = np.zeros(8, dtype=np.float32)
    A = np.arange(10, 18, dtype=np.float32)
    K.cp_async(S, 0, A, 3)
    K.cp_async4(S, 4, A, 4)
    assert not S.any()
    K.cp_wait()
    assert S.tolist() == [13, 0, 0, 0, 14, 15, 16, 17]
    S[:] = 0
    K.cp_wait()  # (nothing pending any more)
    assert not S.any()


@requires_sim
@pytest.mark.cudasim
def test_sim_barrier_waits_for_every_live_thread_and_lets_early_exits_go():
    """The simulator's syncthreads (sdtw's condition-variable barrier): no thread passes a
    barrier before every live thread reaches one, threads that return early do not hold the
    others, syncthreads_count counts, and an exception in one thread reaches the caller."""
    from numba.cuda.simulator import kernel as simulator

    import sdtw.cuda.kernels.jit  # noqa: F401  (applies the patch, as the kernels' import does)

    assert simulator.BlockManager.run._sdtw_barrier

    @sim_cuda.jit
    def steps(out, counts):
        t = sim_cuda.threadIdx.x
        if t >= 20:  # (12 threads leave before any barrier)
            return
        for s in range(3):
            out[s, t] = out[s - 1, (t + 1) % 20] + 1 if s > 0 else t
            sim_cuda.syncthreads()
        counts[t] = sim_cuda.syncthreads_count(t % 2)

    out = np.zeros((3, 20), dtype=np.int64)
    counts = np.zeros(20, dtype=np.int64)
    steps[2, 32](out, counts)  # (two blocks: the barrier's state is each block's own)
    want = np.arange(20)
    for s in range(1, 3):
        want = np.roll(want, -1) + 1
        np.testing.assert_array_equal(out[s], want)  # (each read came after the barrier)
    assert (counts == 10).all()

    @sim_cuda.jit
    def fails(out):
        t = sim_cuda.threadIdx.x
        sim_cuda.syncthreads()
        if t == 5:
            out[100] = 1.0  # (out of bounds: IndexError in the simulator)
        sim_cuda.syncthreads()

    with pytest.raises(IndexError):
        fails[1, 8](np.zeros(4))


@requires_sim
@pytest.mark.cudasim
def test_sim_barrier_checks_the_simulator_layout_it_replaces():
    """The barrier patch is applied only where the simulator's thread and block classes have
    the members it uses; a changed constructor or a missing method means the simulator's own
    barrier stays (with a warning), not a patched one that misreads the threads."""
    import types

    from numba.cuda.simulator import kernel as simulator

    from sdtw.cuda import _private

    assert _private._sim_layout_known(simulator)

    class Thread(simulator.BlockThread):
        def __init__(self, f, manager, block, thread, debug, extra):  # (a new parameter)
            pass

    changed = types.SimpleNamespace(BlockThread=Thread, BlockManager=simulator.BlockManager)
    assert not _private._sim_layout_known(changed)
    no_run = types.SimpleNamespace(BlockThread=simulator.BlockThread, BlockManager=object)
    assert not _private._sim_layout_known(no_run)
