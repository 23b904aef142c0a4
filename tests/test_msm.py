"""Soft-MSM: the float64 reference against a brute force over alignments and finite
differences, the gamma -> 0 limit against a plain MSM with squared legs, the public entry
(validation, lengths, band, divergence, the module) and every backend against the reference."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import sdtw
from sdtw.band import sakoe_chiba_mask
from sdtw.msm_reference import GATE_EPS, soft_msm_backward, soft_msm_forward
from tests.conftest import SIMULATOR, requires_sim
from tests.oracles import all_paths

BACKENDS = ("reference", "cpu", pytest.param("cuda", marks=requires_sim))
#: (N, M, D, bandwidth): N != M, 1 on either side, several channels, a band.
SHAPES = ((1, 1, 1, None), (1, 4, 1, None), (5, 1, 2, None), (4, 3, 1, None), (6, 7, 3, 2))
#: The brute force's (every path enumerated: small tables only).
SMALL = ((1, 1, 1, None), (1, 4, 1, None), (5, 1, 2, None), (3, 4, 2, None), (5, 4, 1, 1))


def _cost_t(v, p, o, c, gamma):
    """The transition cost in torch (the brute force's, written again from the definition)."""
    a, b = (v - p) ** 2, (v - o) ** 2
    u = (v - p) * (v - o)
    s = (1 - u / torch.sqrt(u * u + GATE_EPS)) / 2
    return c + (1 - s) * (-gamma * torch.logsumexp(-torch.stack([a, b]) / gamma, 0))


def brute_force(x, y, c, gamma, bandwidth=None):
    """Soft-MSM of univariate x (N,), y (M,) (torch, float64): the soft minimum over every
    monotone path of its cost, (x_0 - y_0)^2 plus each move's: a match (i+1, j+1) costs
    (x_{i+1} - y_{j+1})^2, a move down (i+1, j) C(x_{i+1}, x_i, y_j), right (i, j+1)
    C(y_{j+1}, y_j, x_i)."""
    N, M = len(x), len(y)
    mask = sakoe_chiba_mask(N, M, bandwidth)
    totals = []
    for path in all_paths(N, M):
        if not all(mask[i, j] for i, j in path):
            continue
        total = (x[0] - y[0]) ** 2
        for (i, j), (k, m) in itertools.pairwise(path):
            if (k, m) == (i + 1, j + 1):
                total = total + (x[k] - y[m]) ** 2
            elif k == i + 1:
                total = total + _cost_t(x[k], x[i], y[j], c, gamma)
            else:
                total = total + _cost_t(y[m], y[j], x[i], c, gamma)
        totals.append(total)
    return -gamma * torch.logsumexp(-torch.stack(totals) / gamma, 0)


def hard_msm_squared(x: np.ndarray, y: np.ndarray, c: float) -> float:
    """MSM with squared legs (Soft-MSM's gamma -> 0 limit), plain float64: a split or merge
    costs c when the moved value lies between its neighbour and the other series' value,
    else c plus the nearer squared distance."""

    def C(v, p, o):
        between = min(p, o) <= v <= max(p, o)
        return c if between else c + min((v - p) ** 2, (v - o) ** 2)

    N, M = len(x), len(y)
    R = np.full((N, M), np.inf)
    R[0, 0] = (x[0] - y[0]) ** 2
    for i in range(N):
        for j in range(M):
            if (i, j) == (0, 0):
                continue
            cands = []
            if i and j:
                cands.append(R[i - 1, j - 1] + (x[i] - y[j]) ** 2)
            if i:
                cands.append(R[i - 1, j] + C(x[i], x[i - 1], y[j]))
            if j:
                cands.append(R[i, j - 1] + C(y[j], y[j - 1], x[i]))
            R[i, j] = min(cands)
    return float(R[-1, -1])


def _data(B, N, M, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    return x, y


@pytest.mark.parametrize(("N", "M", "D", "bandwidth"), SMALL)
@pytest.mark.parametrize(("c", "gamma"), [(1.0, 1.0), (0.3, 0.1)])
def test_reference_against_the_brute_force(N, M, D, bandwidth, c, gamma):
    x, y = _data(2, N, M, D)
    values, Rs = soft_msm_forward(x.numpy(), y.numpy(), gamma, bandwidth, c=c)
    gx, gy = soft_msm_backward(x.numpy(), y.numpy(), Rs, gamma, bandwidth, c=c)
    for b in range(2):
        xb, yb = x[b].clone().requires_grad_(), y[b].clone().requires_grad_()
        value = sum(brute_force(xb[:, d], yb[:, d], c, gamma, bandwidth) for d in range(D))
        ex, ey = torch.autograd.grad(value, (xb, yb))
        np.testing.assert_allclose(values[b], value.item(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gx[b], ex.numpy(), rtol=1e-10, atol=1e-11)
        np.testing.assert_allclose(gy[b], ey.numpy(), rtol=1e-10, atol=1e-11)


def test_reference_gradcheck():
    x, y = _data(2, 5, 4, 2, seed=1)
    x.requires_grad_()
    y.requires_grad_()

    def f(a, b):
        return sdtw.soft_msm(a, b, c=0.7, gamma=0.5, backend="reference")

    assert torch.autograd.gradcheck(f, (x, y))
    assert torch.autograd.gradcheck(
        lambda a, b: sdtw.soft_msm(
            a, b, gamma=0.5, backend="reference", bandwidth=1, x_lengths=[5, 3], y_lengths=[4, 2]
        ),
        (x, y),
    )


@pytest.mark.parametrize("c", [0.1, 1.0])
def test_gamma_to_zero_is_msm_with_squared_legs(c):
    x, y = _data(3, 6, 7, 1, seed=2)
    gamma = 1e-6
    values = sdtw.soft_msm(x, y, c=c, gamma=gamma, backend="reference")
    for b in range(3):
        hard = hard_msm_squared(x[b, :, 0].numpy(), y[b, :, 0].numpy(), c)
        # Each soft minimum is within gamma log 3 below the minimum; the gate is within
        # eps / (4 u^2) of 0 or 1.
        assert abs(values[b].item() - hard) <= 13 * gamma * math.log(3) + 1e-4 * c, (b, hard)


def test_channels_are_independent_and_summed():
    x, y = _data(2, 5, 6, 3, seed=3)
    whole = sdtw.soft_msm(x, y, gamma=0.3, backend="reference")
    parts = sum(
        sdtw.soft_msm(x[..., d : d + 1], y[..., d : d + 1], gamma=0.3, backend="reference")
        for d in range(3)
    )
    torch.testing.assert_close(whole, parts, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("N", "M", "D", "bandwidth"), SHAPES)
@pytest.mark.parametrize("normalize", [False, True])
def test_backend_against_the_reference(backend, N, M, D, bandwidth, normalize):
    x, y = _data(3, N, M, D, seed=4)
    x.requires_grad_()
    y.requires_grad_()
    upstream = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64)
    kw = dict(c=0.8, gamma=0.4, bandwidth=bandwidth, normalize=normalize)
    v = sdtw.soft_msm(x, y, backend=backend, **kw)
    gx, gy = torch.autograd.grad(v, (x, y), upstream)
    # the oracle itself, called directly (and the divergence written out)
    a, b = x.detach().numpy(), y.detach().numpy()

    def oracle(p, q):
        val, Rs = soft_msm_forward(p, q, 0.4, bandwidth, c=0.8)
        return val, *soft_msm_backward(p, q, Rs, 0.4, bandwidth, c=0.8)

    val, ex, ey = oracle(a, b)
    if normalize:
        vx, gx1, gx2 = oracle(a, a)
        vy, gy1, gy2 = oracle(b, b)
        val, ex, ey = val - (vx + vy) / 2, ex - (gx1 + gx2) / 2, ey - (gy1 + gy2) / 2
    u = upstream.numpy()[:, None, None]
    np.testing.assert_allclose(v.detach().numpy(), val, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), ex * u, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(gy.numpy(), ey * u, rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lengths_are_each_pairs_own_call(backend):
    x, y = _data(3, 7, 6, 2, seed=5)
    xl, yl = [7, 4, 1], [3, 6, 2]
    x = x.clone()
    y = y.clone()
    for b in range(3):  # the padding never matters, NaN included
        x[b, xl[b] :] = math.nan
        y[b, yl[b] :] = math.nan
    x.requires_grad_()
    y.requires_grad_()
    kw = dict(c=1.5, gamma=0.2, bandwidth=2, backend=backend)
    v = sdtw.soft_msm(x, y, x_lengths=xl, y_lengths=yl, normalize=True, **kw)
    gx, gy = torch.autograd.grad(v.sum(), (x, y))
    for b in range(3):
        xb = x[b : b + 1, : xl[b]].detach().requires_grad_()
        yb = y[b : b + 1, : yl[b]].detach().requires_grad_()
        one = sdtw.soft_msm(xb, yb, normalize=True, **kw)
        ex, ey = torch.autograd.grad(one.sum(), (xb, yb))
        torch.testing.assert_close(v[b : b + 1], one, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx[b, : xl[b]], ex[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gy[b, : yl[b]], ey[0], rtol=1e-10, atol=1e-12)
        assert (gx[b, xl[b] :] == 0).all() and (gy[b, yl[b] :] == 0).all()


def test_divergence_of_a_series_with_itself_is_zero():
    x, _ = _data(2, 6, 6, 2, seed=6)
    v = sdtw.soft_msm(x, x.clone(), gamma=0.5, normalize=True, backend="cpu")
    torch.testing.assert_close(v, torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-12)


def test_module_unbatched_and_dtype():
    x, y = _data(2, 5, 4, 1, seed=7)
    m = sdtw.SoftMSM(c=0.5, gamma=0.2)
    torch.testing.assert_close(m(x, y), sdtw.soft_msm(x, y, c=0.5, gamma=0.2))
    assert "c=0.5" in repr(m)
    one = sdtw.soft_msm(x[0], y[0], c=0.5, gamma=0.2)
    assert one.shape == () and one.item() == pytest.approx(m(x, y)[0].item(), rel=1e-14)
    f = sdtw.soft_msm(x.float(), y.float(), c=0.5, gamma=0.2)
    assert f.dtype == torch.float32
    torch.testing.assert_close(f.double(), m(x, y), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        (dict(c=0.0), ValueError, "c must be"),
        (dict(c=-1.0), ValueError, "c must be"),
        (dict(c=math.inf), ValueError, "c must be"),
        (dict(c="1"), TypeError, "c must be"),
        (dict(c=True), TypeError, "c must be"),
        (dict(gamma=0.0), ValueError, "gamma must be > 0"),
        (dict(gamma=-1.0), ValueError, "gamma"),
        (dict(normalize="yes"), TypeError, "normalize"),
        (dict(backend="gpu"), ValueError, "backend"),
    ],
)
def test_validation_names_the_argument(kw, error, match):
    x, y = _data(1, 3, 3, 1)
    with pytest.raises(error, match=match):
        sdtw.soft_msm(x, y, **kw)
    with pytest.raises(error, match=match):
        sdtw.SoftMSM(**kw)


def test_shapes_are_validated():
    x, y = _data(2, 3, 3, 1)
    with pytest.raises(ValueError):
        sdtw.soft_msm(x, y[:1])
    with pytest.raises(ValueError):
        sdtw.soft_msm(x, y, x_lengths=[4, 1], y_lengths=[3, 3])


def test_the_recurrence_is_on_the_seam():
    from sdtw.engine import RECURRENCES, capabilities_table

    rec = RECURRENCES["softmsm"]
    assert rec.kind == "sequences" and rec.param("c") == 1.0
    assert rec.with_params(c=2.0) != rec  # (another stiffness: another plan)
    assert "softmsm" in capabilities_table()


@pytest.mark.slow  # (the parallel kernels' first compile: ~30 s in a fresh cache)
def test_cpu_parallel_kernels_match_one_pair_at_a_time():
    # (B D N M past sdtw.cpu_msm.SERIAL_MAX_CELLS: the parallel kernels; one pair: the serial)
    x, y = _data(4, 90, 100, 1, seed=8)
    x.requires_grad_()
    y.requires_grad_()
    v = sdtw.soft_msm(x, y, gamma=0.1, bandwidth=30, backend="cpu")
    gx, gy = torch.autograd.grad(v.sum(), (x, y))
    for b in range(4):
        xb, yb = x[b : b + 1].detach().requires_grad_(), y[b : b + 1].detach().requires_grad_()
        one = sdtw.soft_msm(xb, yb, gamma=0.1, bandwidth=30, backend="cpu")
        ex, ey = torch.autograd.grad(one.sum(), (xb, yb))
        assert v[b].item() == one.item()
        assert torch.equal(gx[b], ex[0]) and torch.equal(gy[b], ey[0])


@pytest.mark.parametrize("gamma", [1e-3, 30.0])
def test_cpu_small_and_large_gamma(gamma):
    # (small gamma: the kernels' exp(-a / gamma) underflow, the stable form takes over)
    x, y = _data(2, 6, 5, 2, seed=9)
    x = (3 * x).requires_grad_()
    y = y.requires_grad_()
    out = {}
    for backend in ("reference", "cpu", *(("cuda",) if SIMULATOR else ())):
        v = sdtw.soft_msm(x, y, gamma=gamma, c=0.5, backend=backend)
        out[backend] = (v, *torch.autograd.grad(v.sum(), (x, y)))
    for backend in out:
        for a, b in zip(out[backend], out["reference"], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("method", ["adam", "lbfgs"])
def test_soft_msm_barycenter_lowers_its_objective(method):
    from sdtw.barycenter import soft_msm_barycenter

    x, _ = _data(5, 12, 12, 1, seed=10)
    Z, history = soft_msm_barycenter(
        x, c=0.5, gamma=0.1, max_iter=15, method=method, return_history=True
    )
    assert Z.shape == (12, 1) and history[-1] < history[0]
    objective = sdtw.soft_msm(Z.expand(5, 12, 1), x, c=0.5, gamma=0.1).mean()
    assert objective.item() == pytest.approx(history.min().item(), rel=1e-6)


def test_soft_msm_barycenter_groups_are_separate_calls():
    from sdtw.barycenter import soft_msm_barycenter

    x, y = _data(4, 10, 10, 1, seed=11)
    both = soft_msm_barycenter(torch.stack([x, y]), gamma=0.5, max_iter=5)
    one = soft_msm_barycenter(x, gamma=0.5, max_iter=5)
    torch.testing.assert_close(both[0], one, rtol=1e-10, atol=1e-10)


def test_barycenter_measure_is_validated():
    from sdtw.barycenter import soft_msm_barycenter, softdtw_barycenter

    x, _ = _data(3, 5, 5, 1)
    with pytest.raises(ValueError, match="measure"):
        softdtw_barycenter(x, measure="msm")
    with pytest.raises(ValueError, match="fused"):
        soft_msm_barycenter(x, fused=True)
    with pytest.raises(ValueError, match="c must be"):
        soft_msm_barycenter(x, c=0.0)
