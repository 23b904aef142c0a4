"""Special values give one answer, values and gradients, on every backend (issue 52): a pair
with no finite path is +inf and its gradient is 0 (from a cost, with and without a band or
lengths), distances that overflow float64 are +inf with gradient 0, NaN in a pair makes it NaN.
The CUDA kernels run in Numba's simulator (marker ``cudasim``, tiny sizes) against the CPU
backend and the float64 reference, with an upstream gradient other than ones.

(The CUDA backward sees only the forward's stored weights, where the last cell of a pair with
no finite path looks like a reachable one: it used to seed E = 1 there and carry it along the
last row or into the finite cells, a gradient of 1e160 for ``x * 1e160``.)
"""

from __future__ import annotations

import math

import pytest
import torch

import sdtw
from sdtw.cuda.config import overrides
from tests.conftest import RTOL, randn, rel_err, requires_sim

# (The simulator runs the kernels' float arithmetic in numpy, which warns on overflow and
# inf - inf where a GPU computes silently: those warnings are ignored there.)
_SIM = [
    pytest.mark.cudasim,
    requires_sim,
    pytest.mark.filterwarnings("ignore:.*(invalid value|overflow|divide by zero):RuntimeWarning"),
]
GAMMA = 0.5
B, N, M = 3, 5, 6
#: upstream gradients, one per pair: none of them 1
GO = (0.7, -1.3, 2.0)

# (backend, dtype of the CUDA kernels' inputs, variant overrides): the CPU backend, and the CUDA
# kernels in float64 and float32 (float32 weights), one-warp and with the GPU's mover warp.
_COST_PATHS = [
    pytest.param("cpu", torch.float64, {}, id="cpu"),
    pytest.param("cuda", torch.float64, {}, id="cuda-f64", marks=_SIM),
    pytest.param("cuda", torch.float32, {}, id="cuda-f32", marks=_SIM),
    pytest.param("cuda", torch.float32, dict(backward_mover=True), id="cuda-f32-mover", marks=_SIM),
]


def _cost_case(rng, case: str) -> tuple[torch.Tensor, dict]:
    """A (B, N, M) cost and keywords: pair 0 has no finite path (but in ``case`` "none"),
    pair 1 a +inf cell that leaves it a finite path, pair 2 no +inf cell in its table."""
    cost = torch.as_tensor(rng.random((B, N, M))) + 0.1
    cost[1, 2, 3] = math.inf
    kw: dict = {}
    if case == "first row":
        cost[0, 0, :] = math.inf  # (the last cell's predecessors all +inf: weights (0, 0))
    elif case == "last cell":
        cost[0, N - 1, M - 1] = math.inf  # (its own cost: its weights are finite ones)
    elif case == "band":
        # the band's cells of row 2 only: without the band a path goes around them
        kw["bandwidth"] = 1
        cost[0, 2][sdtw.sakoe_chiba_mask(N, M, 1)[2]] = math.inf
        assert math.isfinite(sdtw.softdtw_from_cost(cost[:1], gamma=GAMMA, backend="cpu"))
    elif case == "lengths":
        # pair 0's own 3 x 4 table blocked at its row 1; pair 2's +inf only in its padding
        kw.update(x_lengths=[3, N, 4], y_lengths=[4, M, 2])
        cost[0, 1, :4] = math.inf
        cost[0, 1, 4:] = 0.0  # (padding: a path through it would be finite)
        cost[2, 4, :] = cost[2, :, 2:] = math.inf
    return cost, kw


def _cost_grad(backend, dtype, variant, cost, go, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    c = cost.to(dtype).requires_grad_()
    with overrides(**variant):
        v = sdtw.softdtw_from_cost(c, gamma=GAMMA, backend=backend, **kw)
        (g,) = torch.autograd.grad(v, c, torch.as_tensor(go, dtype=dtype))
    return v.detach().double(), g.double()


@pytest.mark.parametrize("backend, dtype, variant", _COST_PATHS)
@pytest.mark.parametrize("case", ["first row", "last cell", "band", "lengths"])
def test_no_finite_path_from_a_cost(rng, backend, dtype, variant, case):
    """Pair 0 has no finite path: +inf and a gradient of exactly 0 on every backend (the CUDA
    kernels gave E = 1 on +inf cells, or the upstream gradient spread over the finite ones).
    The other pairs are the reference's (pair 1 around a +inf cell)."""
    cost, kw = _cost_case(rng, case)
    want_v, want_g = _cost_grad("reference", torch.float64, {}, cost, GO, **kw)
    v, g = _cost_grad(backend, dtype, variant, cost, GO, **kw)
    assert want_v[0] == v[0] == math.inf
    assert torch.equal(g[0], torch.zeros_like(g[0])) and torch.equal(want_g[0], g[0])
    assert torch.isfinite(v[1:]).all()
    assert rel_err(v[1:], want_v[1:]) < RTOL[dtype]
    assert rel_err(g[1:], want_g[1:]) < RTOL[dtype]


@pytest.mark.parametrize(
    "backend",
    ["cpu", pytest.param("cuda", marks=_SIM), pytest.param("cuda-mover", marks=_SIM)],
)
@pytest.mark.parametrize("go0", [math.nan, math.inf])
def test_no_finite_path_whatever_the_upstream_gradient(rng, backend, go0):
    """A pair with no finite path has gradient 0 wrt its cost even where its upstream gradient
    is NaN or inf, on the CPU backend and the CUDA kernels alike.  (The reference, which
    differentiates the published recursions, gives NaN there.)"""
    cost, _ = _cost_case(rng, "first row")
    variant = dict(backward_mover=True) if backend == "cuda-mover" else {}
    v, g = _cost_grad(backend.split("-")[0], torch.float64, variant, cost, (go0, *GO[1:]))
    _, want_g = _cost_grad("cpu", torch.float64, {}, cost, GO)
    assert v[0] == math.inf and torch.equal(g[0], torch.zeros_like(g[0]))
    assert rel_err(g[1:], want_g[1:]) < RTOL[torch.float64]


# (backend, keywords, variant overrides) of softdtw(x, y): every path of each backend
_PAIR_PATHS = [
    pytest.param("cpu", {}, {}, id="cpu"),
    pytest.param("cpu", dict(memory="checkpoint"), {}, id="cpu-checkpoint"),
    pytest.param("cuda", dict(fused=True), {}, id="cuda-fused", marks=_SIM),
    pytest.param("cuda", dict(fused=False), {}, id="cuda-unfused", marks=_SIM),
    pytest.param("cuda", dict(memory="checkpoint"), {}, id="cuda-checkpoint", marks=_SIM),
]
# the float32 paths of the CUDA kernels, the backward's in-sweep gradients (a GPU's rule for
# D <= 16) among them
_PAIR_PATHS_F32 = [
    pytest.param("cpu", {}, {}, id="cpu"),
    pytest.param("cuda", dict(fused=True), {}, id="cuda-fused", marks=_SIM),
    pytest.param(
        "cuda",
        dict(fused=True),
        dict(sweep_grads=True, backward_mover=True),
        id="cuda-fused-sweep",
        marks=_SIM,
    ),
    pytest.param("cuda", dict(memory="checkpoint"), {}, id="cuda-checkpoint", marks=_SIM),
]


def _pair_grads(backend, kw, variant, x, y, go) -> tuple[torch.Tensor, ...]:
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    with overrides(**variant):
        v = sdtw.softdtw(xr, yr, gamma=GAMMA, backend=backend, **kw)
        gx, gy = torch.autograd.grad(v, (xr, yr), torch.as_tensor(go[: len(v)], dtype=v.dtype))
    return v.detach(), gx, gy


def _check_other_pairs(got, want, dtype) -> None:
    """Pairs 1 on: the reference's values and gradients."""
    for a, b in zip(got, want, strict=True):
        assert rel_err(a[1:], b[1:]) < RTOL[dtype]


@pytest.mark.parametrize("backend, kw, variant", _PAIR_PATHS)
def test_overflowing_distances(rng, backend, kw, variant):
    """``x * 1e160``: its squared distances overflow float64 to +inf, so the pair has no finite
    path: +inf and gradients of exactly 0 wrt x and y, fused, unfused and checkpointed (the
    CUDA kernels gave gradients summing to ~1e160)."""
    x, y = randn(rng, 2, 4, 3), randn(rng, 2, 5, 3)
    x[0] *= 1e160
    want = _pair_grads("reference", {}, {}, x, y, GO)
    got = _pair_grads(backend, kw, variant, x, y, GO)
    v, gx, gy = got
    assert want[0][0] == v[0] == math.inf
    assert not gx[0].any() and not gy[0].any()
    _check_other_pairs(got, want, torch.float64)


@pytest.mark.parametrize("backend, kw, variant", _PAIR_PATHS_F32)
def test_float32_value_past_its_range(rng, backend, kw, variant):
    """float32 ``x * 1e20``: the distances (~1e40) are finite in the float64 DP, the value is
    +inf only once rounded to float32: the gradients are the CPU backend's (finite, ~1e20),
    not the zeros of a pair with no finite path."""
    x, y = randn(rng, 2, 4, 3, dtype=torch.float32), randn(rng, 2, 5, 3, dtype=torch.float32)
    x[0] *= 1e20
    want = _pair_grads("cpu", {}, {}, x, y, GO)
    v, gx, gy = got = _pair_grads(backend, kw, variant, x, y, GO)
    assert v[0] == math.inf and torch.isfinite(gx[0]).all() and gx[0].abs().max() > 1e19
    assert rel_err(gx[0], want[1][0]) < RTOL[torch.float32]
    assert rel_err(gy[0], want[2][0]) < RTOL[torch.float32]
    _check_other_pairs(got, want, torch.float32)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.filterwarnings("ignore:.*(invalid value|overflow|divide by zero):RuntimeWarning")
def test_float32_cost_tensor_past_its_range(rng):
    """The unfused CUDA path's float32 cost tensor holds ``x * 1e20``'s distances as +inf: it
    answers as the CPU backend does for that cost, +inf and gradient 0 (the fused path's
    float64 distances keep them finite, above)."""
    x, y = randn(rng, 2, 4, 3, dtype=torch.float32), randn(rng, 2, 5, 3, dtype=torch.float32)
    # (every sample at least 0.5e20 in magnitude: a row of tiny samples would keep its
    # distances below float32's 3.4e38)
    x[0] = (x[0].abs() + 0.5).copysign(x[0]) * 1e20
    v, gx, gy = _pair_grads("cuda", dict(fused=False), {}, x, y, GO)
    cost = sdtw.distances.sqeuclidean(x.double(), y.double()).float()
    assert torch.isinf(cost[0]).all()
    want_v, want_g = _cost_grad("cpu", torch.float32, {}, cost, GO[:2])
    assert v[0] == want_v[0] == math.inf and not gx[0].any() and not gy[0].any()
    assert not want_g[0].any()


@pytest.mark.parametrize("backend, kw, variant", _PAIR_PATHS)
def test_nan_in_a_pair(rng, backend, kw, variant):
    """NaN in pair 0's x: its value and every gradient entry of that pair NaN on every path;
    the other pair untouched."""
    x, y = randn(rng, 2, 4, 3), randn(rng, 2, 5, 3)
    x[0, 2, 1] = math.nan
    want = _pair_grads("reference", {}, {}, x, y, GO)
    got = _pair_grads(backend, kw, variant, x, y, GO)
    for t in (*want, *got):
        assert t[0].isnan().all()
    _check_other_pairs(got, want, torch.float64)


@pytest.mark.parametrize("backend, dtype, variant", _COST_PATHS)
def test_nan_in_a_cost(rng, backend, dtype, variant):
    """A NaN cost cell: that pair's value NaN, its gradient NaN on every cell (the reference's),
    but that the CPU backend keeps the upstream gradient at the last cell (dR/dC there is 1
    whatever the rest); the other pairs are the reference's."""
    cost, _ = _cost_case(rng, "none")
    cost[0, 2, 3] = math.nan
    want_v, want_g = _cost_grad("reference", torch.float64, {}, cost, GO)
    v, g = _cost_grad(backend, dtype, variant, cost, GO)
    assert math.isnan(v[0]) and want_g[0].isnan().all()
    nan = g[0].isnan()
    if backend == "cpu":
        assert g[0, N - 1, M - 1] == GO[0]
        nan[N - 1, M - 1] = True
    assert nan.all()
    assert rel_err(v[1:], want_v[1:]) < RTOL[dtype]
    assert rel_err(g[1:], want_g[1:]) < RTOL[dtype]
