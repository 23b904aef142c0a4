"""CUDA kernels against the float64 reference.

``cudasim`` tests run the real kernel code in Numba's CPU simulator (NUMBA_ENABLE_CUDASIM=1,
tiny sizes: the simulator is slow); ``cuda`` tests run on a GPU and skip cleanly without one.
"""

from __future__ import annotations

import ast
import math
import os

import numpy as np
import pytest
import torch

import sdtw
from sdtw.cuda.config import overrides
from sdtw.distances import pairwise as pairwise_cost
from tests.conftest import GAMMAS, SIM_SHAPES, randn, rel_err, requires_gpu, requires_sim

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
TOL = {torch.float64: 1e-9, torch.float32: 1e-5}
# Unfused, float32 inputs get a float32 cost tensor, whose rounding (~1e-7 relative to
# |x|^2 + |y|^2) soft-DTW's weights see divided by gamma: on nearly tied paths at small gamma
# that alone moves the gradients by up to ~1e-3 (the fused path's float64 distances do not
# have it; sdtw.cuda._launch.forward).  Against the float64 reference *from x and y* the
# unfused float32 path gets the bar, 1e-4, at the small sizes used here; the paper
# case checks its kernel against the reference of the same float32 cost.
TOL_COST32 = 1e-4


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


def test_variant_rules():
    """The forward's mode and mover and the backward's mover by the rules of
    :mod:`sdtw.cuda.policy`, on a GPU and under the simulator, and what the overrides do:
    mode tiled only for the fused float32 forward without gradients on a GPU (with gradients
    too when forced); the mover for mode hilo on a GPU (forced, in the simulator too) and
    always for mode tiled, never for the others; the backward's mover on a GPU."""
    from sdtw.cuda import policy as R
    from sdtw.cuda.kernels import COST, FUSED, HILO, SPLIT, TILED

    # (fused, fast, store) -> mode on a GPU, then under the simulator
    modes = {
        (False, True, True): (COST, COST),
        (True, True, True): (HILO, HILO),
        (True, False, True): (SPLIT, SPLIT),
        (True, True, False): (TILED, FUSED),
        (True, False, False): (FUSED, FUSED),
    }
    for args, (gpu, sim) in modes.items():
        assert (R.forward_mode(*args, False), R.forward_mode(*args, True)) == (gpu, sim), args
    assert R.forward_mover(HILO, False) and R.forward_mover(TILED, False)
    assert R.forward_mover(TILED, True) and not R.forward_mover(HILO, True)
    for mode in (COST, SPLIT, FUSED):
        assert not R.forward_mover(mode, False)
    assert R.backward_mover(False) and not R.backward_mover(True)
    with overrides(tiled=True):
        assert R.forward_mode(True, True, True, False) == TILED
        assert R.forward_mode(True, False, True, False) == SPLIT  # float32 only
    with overrides(tiled=False):
        assert R.forward_mode(True, True, False, False) == FUSED
    with overrides(mover=True, backward_mover=True):
        assert R.forward_mover(HILO, True) and R.backward_mover(True)
        assert not R.forward_mover(COST, True) and not R.forward_mover(FUSED, False)
    with overrides(mover=False, backward_mover=False):
        assert not R.forward_mover(HILO, False) and not R.backward_mover(False)
        assert R.forward_mover(TILED, False)  # (tiled is a mover mode)
        with overrides(mover=True):  # an inner block keeps what it does not name
            assert R.forward_mover(HILO, False) and not R.backward_mover(False)
    assert R.forward_mover(HILO, False) and not R.forward_mover(HILO, True)  # restored
    with pytest.raises(TypeError, match="unknown rule"):
        with overrides(busy=True):
            pass


def _check_mover_matches_one_warp(rng, device, dtype, shapes, gamma=0.1, sums_tol=None):
    """The mover variant of the forward (mode hilo: fused float32 with gradients), and
    (``sums_tol`` given) the mover variants of the forward and the backward together, give the
    one-warp kernels' values, weights and gradients bit for bit (the same steps on the same
    costs), from a cost tensor with and without gradients and fused; the one-warp run is made
    once for both.  With the backward's mover the fused gradients go through E's column sums,
    float atomics added band by band in whatever order the bands get there: ``sums_tol`` is
    their relative tolerance.  Two cost pairs on a GPU, one in the simulator (which runs
    blocks one at a time)."""

    # (forward's mover, backward's mover, tolerance of the fused gradients; 0: equal)
    variants = [(False, False, 0.0), (True, False, 0.0)]
    if sums_tol is not None:
        variants.append((True, True, sums_tol))
    pairs = 1 if device == "cpu" else 2
    names = ("value", "grad", "no-grad value", "fused", "gx", "gy")
    for N, M in shapes:
        cost = torch.rand(pairs, N, M, dtype=dtype, device=device)
        x = randn(rng, 1, N, 3, dtype=dtype, device=device)
        y = randn(rng, 1, M, 3, dtype=dtype, device=device)
        go = randn(rng, pairs, dtype=dtype, device=device)
        got = []
        for forward_mover, backward_mover, _ in variants:
            with overrides(mover=forward_mover, backward_mover=backward_mover, sweep_grads=False):
                c = cost.clone().requires_grad_()
                v = sdtw.softdtw_from_cost(c, gamma=gamma, backend="cuda")
                (gc,) = torch.autograd.grad(v, c, go)
                with torch.no_grad():
                    v0 = sdtw.softdtw_from_cost(cost, gamma=gamma, backend="cuda")
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                vf = sdtw.softdtw(xs, ys, gamma=gamma, backend="cuda", fused=True)
                gf = torch.autograd.grad(vf, (xs, ys), go[:1])
            got.append((v, gc, v0, vf, *gf))
        for (forward_mover, backward_mover, tol), theirs in zip(variants[1:], got[1:], strict=True):
            where = (N, M, forward_mover, backward_mover)
            for name, a, b in zip(names, got[0], theirs, strict=True):
                if name in ("gx", "gy") and tol:
                    assert rel_err(b, a) <= tol, (*where, name)
                else:
                    assert torch.equal(a, b), (*where, name)


@requires_sim
@pytest.mark.cudasim
def test_sim_movers_match_one_warp(rng):
    """:func:`_check_mover_matches_one_warp` in the simulator, the forward's mover and both
    movers, at a shape with a one-row band (row groups past the band's last row), three
    column chunks written out by the movers' items and the last by their tails: E bit for
    bit, the fused gradients within float32 rounding with the backward's mover (a partial
    band's column sums are added in another order).  float32 only
    (:func:`test_gpu_mover_matches_one_warp` compares float64's backward movers, ~50 s of
    simulator time less on CI)."""
    _check_mover_matches_one_warp(rng, "cpu", torch.float32, [(33, 70)], sums_tol=1e-6)


def _check_tiled_matches_park(rng, device, shapes):
    """The fused float32 forward in mode tiled (its distances from its own third warp, one
    launch), with gradients (forced) and without, against the park kernel and the one-warp
    hilo forward (two launches): values and gradients bit for bit (the tile's float64
    distances are the park's, bit for bit), on fresh randn inputs of shapes (B, N, M, D), an
    upstream gradient other than ones."""
    counts = sdtw.cuda.launch_counts()
    for B, N, M, D in shapes:
        x = randn(rng, B, N, D, dtype=torch.float32, device=device)
        y = randn(rng, B, M, D, dtype=torch.float32, device=device)
        go = randn(rng, B, dtype=torch.float32, device=device)
        got = []
        for tiled in (False, True):
            with overrides(tiled=tiled, mover=False, backward_mover=False):
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                before = counts["forward"]
                v = sdtw.softdtw(xs, ys, gamma=0.1, backend="cuda", fused=True)
                assert counts["forward"] - before == (1 if tiled else 2)
                got.append((v, *torch.autograd.grad(v, (xs, ys), go)))
                if tiled:  # without gradients: the same kernel, no weights kept
                    with torch.no_grad():
                        v0 = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=True)
                    assert torch.equal(v0, v), (B, N, M, D, "no-grad value")
        for name, a, b in zip(("value", "gx", "gy"), *got, strict=True):
            assert torch.equal(a, b), (B, N, M, D, name)


@requires_sim
@pytest.mark.cudasim
def test_sim_tiled_matches_park(rng):
    """:func:`_check_tiled_matches_park` in the simulator: D with a tail pass (17, 40), a
    pass exactly (16), one feature; a one-row table; two bands, the second partial; M past
    a chunk boundary (two tiles)."""
    shapes = [(1, 5, 40, 17), (1, 33, 5, 40), (1, 1, 3, 16), (1, 3, 2, 1)]
    _check_tiled_matches_park(rng, "cpu", shapes)


@requires_gpu
@pytest.mark.cuda
def test_gpu_tiled_matches_park(rng):
    """:func:`_check_tiled_matches_park` on the GPU: lengths around the chunk and band
    boundaries, D around the passes of 16 features."""
    shapes = [(2, 1, 1, 1), (3, 33, 31, 16), (2, 70, 97, 17), (2, 95, 160, 64), (1, 300, 257, 130)]
    _check_tiled_matches_park(rng, "cuda", shapes)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_mover_matches_one_warp(rng, dtype):
    """:func:`_check_mover_matches_one_warp` on the GPU at lengths around the chunk and
    row-group boundaries."""
    shapes = [(1, 1), (8, 9), (33, 31), (70, 97), (95, 160)]
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    _check_mover_matches_one_warp(rng, "cuda", dtype, shapes, sums_tol=tol)


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
def test_gpu_tiny_gamma_finite(rng):
    x = randn(rng, 2, 300, 8, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 2, 257, 8, dtype=torch.float32, device="cuda").requires_grad_()
    v = sdtw.softdtw(x, y, gamma=1e-4, backend="cuda")
    v.sum().backward()
    assert torch.isfinite(v).all() and torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()


def test_fused_default_rule(monkeypatch, rng):
    """``fused=None``: fused when a backward will follow; without one, unfused while the cost
    tensor takes at most a quarter of the free GPU memory (free memory faked here)."""
    from sdtw import cuda as sc
    from sdtw.functional import _fused_by_default

    x = randn(rng, 2, 5, 3).requires_grad_()
    y = randn(rng, 2, 4, 3)
    assert _fused_by_default(x, y)
    with torch.no_grad():
        assert not _fused_by_default(x, y)  # CPU tensors (simulator): the cost always fits
    assert not _fused_by_default(x.detach(), y)
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

    def spy(*args, store):
        stores.append(store)
        return forward(*args, store=store)

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


# --------------------------------------------------------------------------------------------
# CUDA graphs
# --------------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.cuda
def test_gpu_constant_made_in_capture_not_kept():
    """A constant first asked for during a CUDA-graph capture belongs to that graph (its fill
    runs at replay): it is not cached for eager calls, and the replay writes it."""
    from sdtw.cuda import _launch

    dev = torch.device("cuda")
    key = ((3,), 2.5, torch.float32, dev)
    _launch._constants.pop(key, None)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = _launch._constant(*key)
    assert key not in _launch._constants
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), torch.full((3,), 2.5))
    assert torch.equal(_launch._constant(*key).cpu(), torch.full((3,), 2.5))
    assert key in _launch._constants


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("path", ["fused", "unfused", "cost", "fused-band-normalize"])
def test_gpu_cuda_graph_step(rng, path):
    """A training step (loss, an upstream gradient per pair, backward) captured once in a CUDA
    graph, after a warm-up on a side stream, then replayed on fresh inputs copied into the
    static ones, gives the eager step's values and gradients: nothing in a step reads the
    host or synchronises, and nothing outlives a replay in a cache."""
    B, N, M, D = 5, 70, 45, 6
    dt = torch.float32

    def inputs():
        x = randn(rng, B, N, D, dtype=dt, device="cuda")
        y = randn(rng, B, M, D, dtype=dt, device="cuda")
        return x, y

    def loss(x, y):
        if path == "cost":
            cost = pairwise_cost(x, y, "sqeuclidean")
            return sdtw.softdtw_from_cost(cost, gamma=0.1, backend="cuda")
        if path == "fused-band-normalize":
            return sdtw.softdtw(x, y, gamma=0.1, bandwidth=9, normalize=True, backend="cuda")
        return sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=path == "fused")

    w = randn(rng, B, dtype=dt, device="cuda")
    sx, sy = (t.requires_grad_() for t in inputs())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            (loss(sx, sy) * w).sum().backward()
    torch.cuda.current_stream().wait_stream(side)
    sx.grad = sy.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        value = loss(sx, sy)
        (value * w).sum().backward()
    for _ in range(2):
        x, y = inputs()
        with torch.no_grad():
            sx.copy_(x)
            sy.copy_(y)
        graph.replay()
        lx, ly = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = loss(lx, ly)
        gx, gy = torch.autograd.grad(v, (lx, ly), w)
        torch.cuda.synchronize()
        assert rel_err(value, v) <= 1e-6
        assert rel_err(sx.grad, gx) <= 1e-6 and rel_err(sy.grad, gy) <= 1e-6


@requires_gpu
@pytest.mark.cuda
def test_gpu_cuda_graph_no_grad_default_rule(rng):
    """A forward without gradients under ``fused=None`` (whose rule asks the driver for free
    memory) can be captured too, and its replays on fresh inputs match eager calls."""
    B, N, M, D = 3, 90, 61, 5

    def inputs():
        return (randn(rng, B, n, D, dtype=torch.float32, device="cuda") for n in (N, M))

    sx, sy = inputs()
    module = sdtw.SoftDTW(gamma=0.1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            module(sx, sy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        value = module(sx, sy)
    for _ in range(2):
        x, y = inputs()
        sx.copy_(x)
        sy.copy_(y)
        graph.replay()
        with torch.no_grad():
            expected = module(x, y)
        torch.cuda.synchronize()
        assert rel_err(value, expected) <= 1e-6


# --------------------------------------------------------------------------------------------
# The library's own CUDA graphs (sdtw.cuda._graphs)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def lib_graphs():
    """The library's graphs on, none kept before or after the test; ``eager()`` is a context
    in which calls run eagerly, the kept graphs staying (the reference)."""
    import contextlib

    from sdtw.cuda import _graphs

    _graphs.set_graphs(True)
    _graphs.clear_graphs()

    @contextlib.contextmanager
    def eager():
        _graphs.set_graphs(False)
        try:
            yield
        finally:
            _graphs.set_graphs(True)

    _graphs.eager = eager
    yield _graphs
    del _graphs.eager
    _graphs.set_graphs(True, max_cells=_graphs.MAX_CELLS)
    _graphs.clear_graphs()


_GRAPH_CASES = {
    "fused": dict(fused=True),
    "unfused": dict(fused=False),
    "x-only": dict(fused=True, grad_y=False),
    "no-grad": dict(fused=None, grad_x=False, grad_y=False),
    "band-normalize-f64": dict(bandwidth=9, normalize=True, dtype=torch.float64),
    "half-noncontiguous": dict(dtype=torch.float16, transpose=True),
    "unbatched": dict(unbatched=True),
}


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("case", list(_GRAPH_CASES))
def test_gpu_library_graph_replays_match_eager(rng, lib_graphs, case):
    """Repeated calls of one shape: the first two run eagerly, the third captures a graph,
    later ones replay it; on fresh inputs each time, values and gradients (upstream gradient
    per pair) are the eager ones.  One graph is kept, and a replay counts its launches."""
    opts = dict(_GRAPH_CASES[case])
    dt = opts.pop("dtype", torch.float32)
    gx_on, gy_on = opts.pop("grad_x", True), opts.pop("grad_y", True)
    transpose, unbatched = opts.pop("transpose", False), opts.pop("unbatched", False)
    B, N, M, D = 5, 70, 45, 6

    def inputs():
        def one(n):
            t = randn(rng, B, n, D, dtype=torch.float32, device="cuda").to(dt)
            if transpose:  # same values, strides (B, 1, n): the copy in makes it contiguous
                t = t.transpose(1, 2).contiguous().transpose(1, 2)
            return t[0] if unbatched else t

        return one(N), one(M)

    w = randn(rng, 1 if unbatched else B, dtype=dt, device="cuda")
    if unbatched:
        w = w[0]

    def run(x, y):
        x, y = x.clone().requires_grad_(gx_on), y.clone().requires_grad_(gy_on)
        v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", **opts)
        leaves = [t for t in (x, y) if t.requires_grad]
        grads = torch.autograd.grad(v, leaves, w) if leaves else ()
        return (v.detach(), *grads)

    keys = 3 if opts.get("normalize") else 1  # N != M: the xy, xx and yy terms
    for k in range(5):
        x, y = inputs()
        n0 = sum(sdtw.cuda.launch_counts().values())
        got = run(x, y)
        launched = sum(sdtw.cuda.launch_counts().values()) - n0
        with lib_graphs.eager():
            expected = run(x, y)
        torch.cuda.synchronize()
        assert lib_graphs.graph_count() == (keys if k >= 2 else 0)
        if k >= 3:  # replays: the kernels they ran (no-grad fused=None: unfused, 2)
            assert launched == (3 if (gx_on or gy_on) else 2) * keys
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b) or rel_err(a, b) <= 1e-6, (case, k, rel_err(a, b))


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_outputs_are_copies(rng, lib_graphs):
    """Two replayed calls of one shape before a single backward keep their own values and
    gradients (the graph's static outputs are cloned)."""
    B, N, D = 3, 40, 4
    for _ in range(3):  # capture
        sdtw.softdtw(*(randn(rng, B, N, D, device="cuda").float() for _ in range(2)))
    assert lib_graphs.graph_count() == 1
    xs = [randn(rng, B, N, D, device="cuda").float().requires_grad_() for _ in range(4)]
    v1, v2 = sdtw.softdtw(xs[0], xs[1]), sdtw.softdtw(xs[2], xs[3])
    (v1.sum() + 2 * v2.sum()).backward()
    with lib_graphs.eager():
        ys = [t.detach().clone().requires_grad_() for t in xs]
        e1, e2 = sdtw.softdtw(ys[0], ys[1]), sdtw.softdtw(ys[2], ys[3])
        (e1.sum() + 2 * e2.sum()).backward()
    assert rel_err(v1, e1) <= 1e-6 and rel_err(v2, e2) <= 1e-6
    for a, b in zip(xs, ys, strict=True):
        assert rel_err(a.grad, b.grad) <= 1e-6


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_limits(rng, lib_graphs, monkeypatch):
    """What is not captured: calls above ``max_cells``, calls while the caller captures a
    graph itself, calls with graphs turned off; streams get their own graphs; beyond
    ``MAX_GRAPHS`` the least recently used graph is dropped; ``clear_graphs`` drops all."""

    def calls(n, B=2, N=20, M=20, k=3):
        for _ in range(k):
            x = randn(rng, B, N, 3, device="cuda").float().requires_grad_()
            sdtw.softdtw(x, randn(rng, B, M, 3, device="cuda").float()).sum().backward()

    lib_graphs.set_graphs(True, max_cells=2 * 20 * 20 - 1)
    calls(3)
    assert lib_graphs.graph_count() == 0
    lib_graphs.set_graphs(True, max_cells=lib_graphs.MAX_CELLS)
    calls(3)
    assert lib_graphs.graph_count() == 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        calls(3)
    torch.cuda.current_stream().wait_stream(side)
    assert lib_graphs.graph_count() == 2  # one per stream
    # a caller's own capture of a fresh shape: recorded eagerly, nothing kept or counted
    x = randn(rng, 2, 30, 3, device="cuda").float().requires_grad_()
    y = randn(rng, 2, 30, 3, device="cuda").float()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    seen = dict(lib_graphs._seen)
    with torch.cuda.graph(graph):
        for _ in range(3):
            sdtw.softdtw(x, y).sum().backward()
    assert lib_graphs.graph_count() == 2 and lib_graphs._seen == seen
    monkeypatch.setattr(lib_graphs, "MAX_GRAPHS", 2)
    calls(3, N=21)
    assert lib_graphs.graph_count() == 2
    assert [k[5] for k in lib_graphs._graphs if k[0][1] == 20] == [side.cuda_stream]
    lib_graphs.set_graphs(False)
    calls(3, N=22)
    assert lib_graphs.graph_count() == 2 and not lib_graphs.graphs_enabled()
    lib_graphs.clear_graphs()
    assert lib_graphs.graph_count() == 0


@requires_gpu
@pytest.mark.cuda
def test_gpu_copy_into(rng, monkeypatch):
    """The replays' copy-in: one driver copy on the given stream for a contiguous source of
    the static input's dtype (after the source's producer on that stream), torch's ``copy_``
    for any other source (a converted dtype, a transposed layout)."""
    from sdtw.cuda import _private

    calls = []
    raw = _private._driver_memcpy()
    assert raw, "cuMemcpyDtoDAsync_v2 not found in libcuda"

    def counted(*args):
        calls.append(args)
        return raw(*args)

    monkeypatch.setattr(_private, "_driver_memcpy", lambda: counted)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    dst = torch.empty(7, 33, 5, device="cuda")
    with torch.cuda.stream(side):
        big = torch.randn(7 * 33 * 5, 4096, device="cuda")
        src = big.sum(1).view(7, 33, 5)  # its producer, queued on the side stream too
        _private.copy_into(dst, src, side.cuda_stream)
        assert len(calls) == 1 and calls[0][3] == side.cuda_stream
        half = randn(rng, 7, 5, 33, device="cuda").half().transpose(1, 2)
        dst2 = torch.empty(7, 33, 5, device="cuda")
        _private.copy_into(dst2, half, side.cuda_stream)
        assert len(calls) == 1  # torch's copy_
    side.synchronize()
    assert torch.equal(dst, src) and torch.equal(dst2, half.float())


@requires_sim
@pytest.mark.cudasim
def test_graph_copy_node_parameters_layout():
    """The memcpy node parameters passed to the driver (``CUDA_MEMCPY3D``): 200 bytes, the
    addresses at C's offsets (four size_t, an enum padded to 8, a host pointer: srcDevice at
    48; dstDevice at 136; WidthInBytes at 176)."""
    import ctypes

    from sdtw.cuda import _private

    M = _private._Memcpy3D
    assert ctypes.sizeof(M) == 200
    assert (M.srcDevice.offset, M.dstDevice.offset, M.WidthInBytes.offset) == (48, 136, 176)


def test_graph_lease_settles_only_for_a_node_that_can_still_use_it(rng):
    """The lent gradients of a replayed call (``_graphs.Lease``), on CPU tensors through the
    pair function itself: copied out before the next replay while the node's backward has not
    run (or ran with ``retain_graph=True``), left in place once autograd freed the node's saved
    token; the backward scales what the lease holds then, and a second backward through a
    freed graph raises torch's error."""
    from sdtw.cuda import _graphs, _PairFunction

    B, N, M, D = 3, 5, 4, 2
    static = (randn(rng, B, N, D).float(), randn(rng, B, M, D).float())

    def call():
        x = randn(rng, B, N, D).float().requires_grad_()
        y = randn(rng, B, M, D).float().requires_grad_()
        lease = _graphs.Lease(static)
        v = _PairFunction.apply(x, y, (randn(rng, B).float(), lease))
        return x, y, v, lease

    unbound = _graphs.Lease(static)
    unbound.settle()  # not attached to a node yet (another thread's call): copied out
    assert unbound.grads[0] is not static[0] and torch.equal(unbound.grads[0], static[0])

    w = randn(rng, B).float()
    x, y, v, lease = call()
    lease.settle()  # backward not run yet: copied out, and the backward reads the copies
    assert lease.grads[0] is not static[0]
    v.backward(w)
    assert torch.allclose(x.grad, static[0] * w.view(-1, 1, 1))
    assert torch.allclose(y.grad, static[1] * w.view(-1, 1, 1))

    x, y, v, lease = call()
    v.backward(w)  # graph freed: the token is gone, nothing to copy
    lease.settle()
    assert lease.grads[0] is static[0] and lease.token is None
    with pytest.raises(RuntimeError, match="second time"):
        v.backward(w)

    x, y, v, lease = call()
    v.backward(w, retain_graph=True)  # may run again: copied out
    lease.settle()
    assert lease.grads[0] is not static[0]
    v.backward(w)
    assert torch.allclose(x.grad, 2 * static[0] * w.view(-1, 1, 1))


def test_graph_lease_under_saved_tensor_hooks(rng):
    """Under saved-tensor hooks (``save_on_cpu`` here; non-reentrant checkpointing too) the
    token could be dropped at once, so a lease stays unbound: the next replay (simulated: the
    static buffers overwritten in place after ``settle``) must not change the first call's
    gradients."""
    from sdtw.cuda import _graphs, _PairFunction

    B, N, D = 2, 6, 3
    static = (randn(rng, B, N, D).float(), randn(rng, B, N, D).float())
    expected = tuple(t.clone() for t in static)
    with torch.autograd.graph.save_on_cpu():
        x = randn(rng, B, N, D).float().requires_grad_()
        y = randn(rng, B, N, D).float().requires_grad_()
        lease = _graphs.Lease(static)
        v = _PairFunction.apply(x, y, (randn(rng, B).float(), lease))
        assert lease.token is None
        lease.settle()  # the next replay of the same graph...
        for t in static:
            t.add_(1.0)  # ...overwrites its buffers
    v.sum().backward()
    assert torch.equal(x.grad, expected[0]) and torch.equal(y.grad, expected[1])


def test_library_graphs_off_the_gpu():
    """On CPU tensors (and so under the simulator) nothing is captured: the call says "run
    eagerly" without touching ``compute``; bad settings name the argument."""
    from sdtw.cuda import _graphs

    def compute(x, y):
        raise AssertionError("compute must not run here")

    x, y = torch.zeros(2, 5, 3), torch.zeros(2, 4, 3)
    for _ in range(4):
        assert _graphs.call(x, y, (1.0, 0, 0, True, True, True), torch.float32, compute) is None
    assert _graphs.graph_count() == 0 and not _graphs._seen
    with pytest.raises(TypeError, match="enabled must be a bool"):
        sdtw.cuda.set_graphs(1)
    with pytest.raises(ValueError, match="max_cells must be a positive int"):
        sdtw.cuda.set_graphs(True, max_cells=0)
    assert sdtw.cuda.graphs_enabled() == (os.environ.get("SDTW_CUDA_GRAPHS", "1") != "0")


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_inference_mode_is_its_own_key(rng, lib_graphs):
    """Calls under ``torch.inference_mode()`` and plain no-grad calls of the same shapes get
    separate graphs (a graph captured in inference mode has inference tensors, which a call
    outside it could not copy into), and both match eager calls."""
    x, y = (randn(rng, 3, n, 4, device="cuda").float() for n in (30, 41))
    with lib_graphs.eager(), torch.no_grad():
        expected = sdtw.softdtw(x, y, gamma=0.1)
    for _ in range(3):
        with torch.inference_mode():
            a = sdtw.softdtw(x, y, gamma=0.1)
        with torch.no_grad():
            b = sdtw.softdtw(x, y, gamma=0.1)
    assert lib_graphs.graph_count() == 2
    assert rel_err(a, expected) <= 1e-6 and rel_err(b, expected) <= 1e-6


def _only_graph(lib_graphs):
    (g,) = [g for g in lib_graphs._graphs.values() if g is not None]
    return g


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_copy_nodes_follow_the_inputs(rng, lib_graphs, monkeypatch):
    """The graph's own copy-in: re-pointed (one driver call per input) only when a call's x or
    y sits at another address than the last call's; the same tensors changed in place, fresh
    tensors, a float16 input (converted) and a transposed one all give the eager results."""
    from sdtw.cuda import _private

    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        pytest.skip("this torch's CUDAGraph cannot keep its CUgraph (keep_graph)")
    calls = []
    raw = _private._driver_set_copy()

    def counted(*args):
        calls.append(args)
        return raw(*args)

    monkeypatch.setattr(_private, "_driver_set_copy", lambda: counted)
    B, N, M, D = 3, 37, 52, 5
    x = randn(rng, B, N, D, device="cuda").float()
    y = randn(rng, B, M, D, device="cuda").float()

    def check(a, b):
        got = sdtw.softdtw(a, b, gamma=0.1)
        with lib_graphs.eager():
            expected = sdtw.softdtw(a, b, gamma=0.1)
        assert rel_err(got, expected) <= 1e-6

    for _ in range(3):
        check(x, y)
    g = _only_graph(lib_graphs)
    assert g.nodes is not None and calls == []
    assert [n.src for n in g.nodes] == [x.data_ptr(), y.data_ptr()]
    x.copy_(randn(rng, B, N, D, device="cuda"))  # same addresses: no driver call
    check(x, y)
    assert calls == []
    x2 = randn(rng, B, N, D, device="cuda").float()
    check(x2, y)
    assert len(calls) == 1 and g.nodes[0].src == x2.data_ptr()
    check(x2.half(), y.transpose(1, 2).contiguous().transpose(1, 2))
    check(x, y)
    assert g.nodes[0].src == x.data_ptr() and g.nodes[1].src == y.data_ptr()


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_without_copy_nodes(rng, lib_graphs, monkeypatch):
    """Where the graph's copy nodes cannot be found or re-pointed, the capture is made again
    without them (a warning says so once) and each call copies its inputs in before the
    replay: the eager results all the same, on fresh inputs each call."""
    from sdtw.cuda import _private

    monkeypatch.setattr(_private, "copy_nodes", lambda *args: None)
    monkeypatch.setattr(lib_graphs, "_warned_copy", False)
    B, N, M, D = 2, 33, 29, 4

    def check():
        x = randn(rng, B, N, D, device="cuda").float().requires_grad_()
        y = randn(rng, B, M, D, device="cuda").float()
        got = sdtw.softdtw(x, y, gamma=0.1)
        (gx,) = torch.autograd.grad(got.sum(), x)
        with lib_graphs.eager():
            x2 = x.detach().clone().requires_grad_()
            expected = sdtw.softdtw(x2, y, gamma=0.1)
            (ex,) = torch.autograd.grad(expected.sum(), x2)
        assert rel_err(got, expected) <= 1e-6 and rel_err(gx, ex) <= 1e-6

    check()
    check()
    with pytest.warns(RuntimeWarning, match="cannot re-point"):
        check()  # the capture
    g = _only_graph(lib_graphs)
    assert g.nodes is None
    check()
    check()


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_when_repointing_fails(rng, lib_graphs, monkeypatch):
    """A driver error when re-pointing a copy node at a call (simulated: the call returns
    CUDA_ERROR_INVALID_VALUE): both nodes are disabled, that call and the later ones copy
    their inputs in before the replay (a warning says so once), and the results stay the
    eager ones."""
    from sdtw.cuda import _private

    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        pytest.skip("this torch's CUDAGraph cannot keep its CUgraph (keep_graph)")
    monkeypatch.setattr(_private, "_driver_set_copy", lambda: lambda *args: 1)
    monkeypatch.setattr(lib_graphs, "_warned_point", False)
    B, N, M, D = 3, 21, 40, 5
    y = randn(rng, B, M, D, device="cuda").float()

    def check(x):
        got = sdtw.softdtw(x, y, gamma=0.1)
        with lib_graphs.eager():
            expected = sdtw.softdtw(x, y, gamma=0.1)
        assert rel_err(got, expected) <= 1e-6

    x = randn(rng, B, N, D, device="cuda").float()
    for _ in range(3):
        check(x)
    g = _only_graph(lib_graphs)
    assert g.nodes is not None
    with pytest.warns(RuntimeWarning, match="re-pointing"):
        check(randn(rng, B, N, D, device="cuda").float())  # another address
    assert g.nodes is None
    check(randn(rng, B, N, D, device="cuda").float())
    check(x)


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graph_lends_its_gradients(rng, lib_graphs):
    """A replayed call's gradients stay in the graph's buffers (no clone) when its backward ran
    before the next replay; with ``retain_graph=True`` or no backward yet, the next replay
    copies them out first, so a later backward still gets them; a second backward through a
    freed graph raises torch's own error."""
    B, N, D = 4, 45, 3

    def leaves():
        return [randn(rng, B, N, D, device="cuda").float().requires_grad_() for _ in range(2)]

    def eager_grads(a, b, w):
        a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        with lib_graphs.eager():
            return torch.autograd.grad(sdtw.softdtw(a, b), (a, b), w)

    w = randn(rng, B, device="cuda").float()
    for _ in range(3):
        x, y = leaves()
        sdtw.softdtw(x, y).sum().backward()
    g = _only_graph(lib_graphs)
    # a plain step: the next replay leaves the first call's lent buffers alone
    x, y = leaves()
    v = sdtw.softdtw(x, y)
    lease = g.pending()
    v.backward(w)
    sdtw.softdtw(*leaves())
    assert lease.grads[0] is g.outs[1] and lease.token is None
    for got, ref in zip((x.grad, y.grad), eager_grads(x, y, w), strict=True):
        assert rel_err(got, ref) <= 1e-6
    with pytest.raises(RuntimeError, match="second time"):
        v.backward(w)
    # retain_graph=True: copied out before the next replay, and a second backward is right
    x, y = leaves()
    v = sdtw.softdtw(x, y)
    lease = g.pending()
    v.backward(w, retain_graph=True)
    sdtw.softdtw(*leaves()).sum().backward()
    assert lease.grads[0] is not g.outs[1]
    v.backward(w)
    for got, ref in zip((x.grad, y.grad), eager_grads(x, y, w), strict=True):
        assert rel_err(got, 2 * ref) <= 1e-6  # two backward calls accumulated


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
import torch, sdtw

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


def _check_sweep_grads(monkeypatch, rng, device, cases):
    """The gradients wrt x and y from the backward's own sweep (its gradient warp, E never
    written; the rule forced on) against the float64 reference from x and y and against the
    gradients from E (forced off): fresh randn float32 inputs, (B, N, M, D, gamma, bandwidth,
    normalize, fused) cases, an upstream gradient other than ones.  Checks that the sweep's
    kernel ran (and only it: one backward launch per pass)."""
    from sdtw.cuda import _launch

    calls = []
    real = _launch.backward_grads
    monkeypatch.setattr(_launch, "backward_grads", lambda *a: calls.append(1) or real(*a))
    counts = sdtw.cuda.launch_counts()
    for B, N, M, D, gamma, bandwidth, normalize, fused in cases:
        x = randn(rng, B, N, D, dtype=torch.float32, device=device)
        y = randn(rng, B, M, D, dtype=torch.float32, device=device)
        go = randn(rng, B, dtype=torch.float32, device=device)
        kw = dict(gamma=gamma, bandwidth=bandwidth, normalize=normalize)
        xr, yr = (t.cpu().double().requires_grad_() for t in (x, y))
        vr = sdtw.softdtw(xr, yr, backend="cpu", **kw)
        ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.cpu().double()))
        got = {}
        for sweep in (True, False):
            with overrides(backward_mover=True, sweep_grads=sweep):
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                n_calls, n_bwd = len(calls), counts["backward"]
                v = sdtw.softdtw(xs, ys, backend="cuda", fused=fused, **kw)
                got[sweep] = (v, *torch.autograd.grad(v, (xs, ys), go))
            passes = 3 if normalize else 1
            assert len(calls) - n_calls == (passes if sweep else 0)
            assert counts["backward"] - n_bwd == passes
        tol = TOL_COST32 if not fused else TOL[torch.float32]
        for k, name in enumerate(("value", "grad_x", "grad_y")):
            case = (B, N, M, D, gamma, bandwidth, normalize, fused, name)
            assert torch.isfinite(got[True][k]).all(), case
            assert rel_err(got[True][k], ref[k]) <= tol, (*case, rel_err(got[True][k], ref[k]))
            # (the two paths' products are rounded differently: 3xTF32 against float32)
            assert rel_err(got[True][k], got[False][k]) <= 1e-5, case


@requires_sim
@pytest.mark.cudasim
def test_sim_sweep_grads_match_reference(monkeypatch, rng):
    """:func:`_check_sweep_grads` in the simulator (the gradient warp's twins compute each
    lane's outputs from the same tiles): N != M, lengths 1, one past the band and chunk size
    (32), D from 1 to 16 (partial 8-feature tiles; every variant of :func:`sweep_tiles`;
    whole chunks with D a multiple of 8, g_y's paired reductions), band, normalize, fused
    and unfused."""
    _check_sweep_grads(
        monkeypatch,
        rng,
        "cpu",
        [
            (2, 5, 7, 3, 1.0, None, False, True),
            (1, 1, 1, 2, 0.1, None, False, True),
            (1, 33, 40, 9, 0.01, 4, False, True),
            (2, 1, 33, 1, 1e-3, None, False, False),
            (1, 33, 1, 2, 0.1, None, True, True),
            (1, 3, 5, 15, 0.1, None, False, True),
            (2, 4, 3, 16, 1.0, 2, False, True),
            (1, 1, 40, 8, 0.1, None, False, True),  # a whole chunk, D = 8 nt: gy_out_full
        ],
    )


@requires_gpu
@pytest.mark.cuda
def test_gpu_sweep_grads_match_reference(monkeypatch, rng):
    """:func:`_check_sweep_grads` on the GPU (the tensor-core fragments): shapes past every
    tile (32 rows, 32 positions, 8 features), N != M, D up to 16 (each variant of
    :func:`sweep_tiles`, full and partial), all gammas of the issue, band, normalize, fused and
    unfused."""
    _check_sweep_grads(
        monkeypatch,
        rng,
        "cuda",
        [
            (3, 77, 1025, 5, 0.1, None, True, True),
            (2, 1, 300, 3, 1.0, None, False, True),
            (2, 513, 31, 7, 0.01, 40, True, True),
            (1, 1000, 1001, 16, 1e-3, 5, False, True),
            (5, 33, 65, 1, 1.0, None, False, False),
            (2, 64, 64, 15, 1e-4, None, False, True),
            (4, 512, 512, 16, 1.0, None, False, False),
            (2, 100, 97, 12, 0.1, None, False, True),
            (2, 65, 129, 16, 0.01, None, True, True),
            (2, 96, 50, 8, 1.0, 7, False, True),
            (1, 40, 41, 9, 0.1, None, False, False),
        ],
    )


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("gamma", GAMMAS)
def test_gpu_sweep_grads_paper_case(rng, gamma):
    """The issue's accuracy case (B = 4, N = M = 512, float32, randn) at D = 16, the largest
    with the gradients from the sweep: values and both gradients within 1e-4 of float64."""
    x = randn(rng, 4, 512, 16, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 4, 512, 16, dtype=torch.float32, device="cuda").requires_grad_()
    go = randn(rng, 4, dtype=torch.float32, device="cuda")
    xr, yr = (t.detach().cpu().double().requires_grad_() for t in (x, y))
    vr = sdtw.softdtw(xr, yr, gamma=gamma, backend="cpu")
    with overrides(sweep_grads=True, backward_mover=True):
        v = sdtw.softdtw(x, y, gamma=gamma, fused=True, backend="cuda")
        out = (v, *torch.autograd.grad(v, (x, y), go))
    ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.cpu().double()))
    for a, b in zip(out, ref, strict=True):
        assert rel_err(a, b) <= 1e-4


def test_sweep_grads_rule():
    """Which eager gradients come from the sweep: float32 with D <= 16 where the backward
    takes its mover variant (on a GPU, or forced); forced off, none; never float64 or
    D > 16, nor without the mover variant."""
    from sdtw.cuda import policy as R

    assert [R.sweep_grads(True, d, False) for d in (1, 16, 17, 64)] == [True, True, False, False]
    assert not R.sweep_grads(False, 16, False) and not R.sweep_grads(True, 1, True)
    with overrides(backward_mover=True):
        assert R.sweep_grads(True, 16, True) and not R.sweep_grads(True, 17, True)
        with overrides(sweep_grads=False):
            assert not R.sweep_grads(True, 1, True)
    with overrides(sweep_grads=True, backward_mover=False):
        assert not R.sweep_grads(True, 1, False)
    assert not R.sweep_grads(True, 1, False, capability=(8, 0))  # (sm_90's reductions)


def test_sweep_tiles():
    """The gradient warp's variant for D features: the fewest feature tiles of 8 among
    ``SWEEP_TILES`` that hold them (D = 1 does the products of one tile, not of two)."""
    from sdtw.cuda.kernels import geometry as K

    got = {D: K.sweep_tiles(D) for D in (1, 8, 9, 16)}
    assert got == {1: 1, 8: 1, 9: 2, 16: 2}
    assert K.SWEEP_TILES[-1] * 8 == K.SWEEP_MAX_D


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
