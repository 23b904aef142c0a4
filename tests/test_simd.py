"""Pairs as SIMD lanes (:mod:`sdtw._simd`, :mod:`sdtw.cpu_lanes`, :mod:`sdtw.cpu_pairs`):
the branch-free ``exp``/``log`` within 1 ulp of the exact values (mpmath), their soft minimum
against the scalar one and the reference's special values, and the lane kernel against the
float64 reference on fresh random pairs (N != M, odd lengths, length 1, per-pair lengths,
bands, gamma down to 1e-3 and exact DTW, D > 1, groups part full, serial and parallel), and
the full mode's lanes (values and gradients)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from numba import njit

import sdtw
from sdtw import cpu_pairs
from sdtw._simd import LANE_FLAGS, exp_neg, log_pos, softmin3
from sdtw.band import pair_offsets
from sdtw.cpu import _softmin3 as scalar_softmin3
from sdtw.reference import _softmin3 as reference_softmin3
from sdtw.reference import reference_forward
from sdtw.reference_dtw import dtw_forward
from tests.conftest import randn, rel_err


# (a lane loop compiled with the kernels' flags: the arithmetic the kernels run)
@njit(cache=True, **LANE_FLAGS)
def _lanes_exp(x, out):
    for g in range(x.shape[0]):
        out[g] = exp_neg(x[g])


@njit(cache=True, **LANE_FLAGS)
def _lanes_log(x, out):
    for g in range(x.shape[0]):
        out[g] = log_pos(x[g])


@njit(cache=True, **LANE_FLAGS)
def _lanes_softmin(a, b, c, gamma, out):
    for g in range(a.shape[0]):
        out[g] = softmin3(a[g], b[g], c[g], gamma, 1.0 / gamma)


def _apply(f, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    f(x, out)
    return out


def _max_ulps(got: np.ndarray, x: np.ndarray, name: str) -> float:
    """The largest error of ``got`` in ulps of the exact ``mpmath.<name>(x)``."""
    mpmath = pytest.importorskip("mpmath")
    exact, worst = getattr(mpmath, name), 0.0
    with mpmath.workprec(120):
        for g, v in zip(got.tolist(), x.tolist(), strict=True):
            t = exact(mpmath.mpf(v))
            worst = max(worst, float(abs(mpmath.mpf(g) - t)) / math.ulp(float(t)))
    return worst


def test_exp_within_one_ulp(rng):
    x = np.concatenate(
        [
            -(rng.uniform(0, 1, 1500) ** 3) * 708.0,  # (dense near 0, down to -708)
            -rng.uniform(0, 40, 1500),
            -rng.uniform(0, 1e-6, 300),
            -np.arange(0, 708) * math.log(2) / 2,  # (halfway points of the rounding of k)
        ]
    )
    assert _max_ulps(_apply(_lanes_exp, x), x, "exp") <= 1.0
    special = np.array([0.0, -0.0, -math.inf, math.nan, -708.5, -1e300, -5e-324])
    got = _apply(_lanes_exp, special)  # (below -708: 0, see sdtw._simd)
    np.testing.assert_array_equal(got, [1.0, 1.0, 0.0, math.nan, 0.0, 0.0, 1.0])


def test_log_within_one_ulp(rng):
    x = np.concatenate(
        [
            rng.uniform(1, 3, 2500),  # (the soft-min's 1 + rest)
            1.0 + rng.uniform(0, 1e-6, 300),
            math.sqrt(2) * (1 + rng.uniform(-1e-12, 1e-12, 200)),  # (the reduction's switch)
            np.exp(rng.uniform(-700, 700, 500)),
        ]
    )
    assert _max_ulps(_apply(_lanes_log, x), x, "log") <= 1.0
    got = _apply(_lanes_log, np.array([1.0, 2.0, 0.5, 3.0, math.nan]))
    assert got[:3].tolist() == [0.0, math.log(2), -math.log(2)] and math.isnan(got[4])


@pytest.mark.parametrize("gamma", [1.0, 0.1, 1e-3])
def test_softmin_matches_the_scalar_one(rng, gamma):
    a, b, c = (rng.standard_normal(4000) * rng.choice([0.01, 1, 100], 4000) for _ in range(3))
    b[::7] = a[::7]  # (ties)
    c[::5] = math.inf
    got = np.empty_like(a)
    _lanes_softmin(a, b, c, gamma, got)
    want = np.array([scalar_softmin3(*t, gamma, 1 / gamma) for t in zip(a, b, c, strict=True)])
    # (the scale of the sum m - gamma log(...): its terms', not its own near a cancellation)
    scale = np.abs(np.minimum(np.minimum(a, b), c)) + gamma
    assert np.max(np.abs(got - want) / scale) < 4 * 2.0**-52
    # the reference's special values: +inf, NaN, -inf, NaN (two -inf), -inf (-inf and +inf)
    inf, nan = math.inf, math.nan
    s = np.array(
        [[inf, inf, inf], [nan, 1, 2], [1, nan, inf], [2, 1, nan], [-inf, 1, 2], [1, -inf, -inf]]
    )
    s = np.concatenate([s, [[-inf, inf, 3], [inf, inf, 2], [inf, 2, inf]]]).T.copy()
    got = np.empty(s.shape[1])
    _lanes_softmin(s[0], s[1], s[2], 0.5, got)
    want = reference_softmin3(s[0], s[1], s[2], 0.5)
    np.testing.assert_array_equal(got, want)


def _reference(X, Y, I, J, ns, ms, gamma, bandwidth) -> np.ndarray:
    out = []
    for p in range(I.shape[0]):
        x, y = X[I[p], : ns[p]], Y[J[p], : ms[p]]
        cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)[None]
        forward = reference_forward if gamma > 0 else dtw_forward
        out.append(forward(cost, gamma, bandwidth)[0, ns[p], ms[p]])
    return np.array(out)


@pytest.mark.parametrize(
    "B1, B2, N, M, D, gamma, bandwidth, lengths",
    [
        (3, 4, 7, 5, 1, 1.0, None, False),  # (one group, part full)
        (2, 1, 1, 1, 2, 0.5, None, False),  # (length 1)
        (5, 9, 9, 13, 1, 0.1, 2.5, True),  # (two groups, lengths, a band)
        (7, 6, 11, 4, 3, 1e-3, None, True),  # (small gamma, D > 1, N > M)
        (9, 8, 6, 8, 1, 0.01, 1, False),  # (72 pairs, bands in a group alike)
        (5, 9, 9, 13, 2, 0.0, 2.5, True),  # (exact DTW: lengths, a band)
        (3, 4, 7, 5, 1, 0.0, None, False),  # (exact DTW, one group)
    ],
)
def test_table_kernel_matches_the_reference(rng, B1, B2, N, M, D, gamma, bandwidth, lengths):
    X, Y = rng.standard_normal((B1, N, D)), rng.standard_normal((B2, M, D))
    I, J = np.repeat(np.arange(B1), B2), np.tile(np.arange(B2), B1)
    xl = rng.integers(1, N + 1, B1) if lengths else np.full(B1, N)
    yl = rng.integers(1, M + 1, B2) if lengths else np.full(B2, M)
    if lengths:
        xl[0], yl[-1] = 1, M  # (length 1 and full length in one group)
    ns, ms = xl[I], yl[J]
    los, his = pair_offsets(ns, ms, bandwidth)
    Xp = X.copy()
    for b in range(B1):
        Xp[b, xl[b] :] = math.nan  # (never read)
    got = cpu_pairs.pair_table_values(Xp, Y, I, J, ns, ms, los, his, gamma)
    want = _reference(X, Y, I, J, ns, ms, gamma, bandwidth)
    finite = np.isfinite(want)
    assert np.array_equal(finite, np.isfinite(got)) and np.all(got[~finite] == want[~finite])
    assert np.max(np.abs(got - want)[finite] / np.maximum(np.abs(want[finite]), 1.0)) < 1e-13
    # the parallel path (prange over groups) gives the same values bit for bit
    P = I.shape[0]
    par = np.empty(P)
    cpu_pairs._parallel(Xp, Y, I, J, ns, ms, los, his, float(gamma), par)
    assert np.array_equal(par, got, equal_nan=True)


def test_cdist_takes_the_lane_kernel(rng):
    """``sdtw.cdist`` without gradients, soft-DTW on the CPU: the lane kernel's values, equal
    to the reference backend's (lengths, a band), float32 out for float32 in; with gradients,
    the reference's values and gradients (an upstream gradient other than ones)."""
    X, Y = randn(rng, 37, 10, 2), randn(rng, 3, 7, 2)
    xl, yl = rng.integers(1, 11, 37).tolist(), [7, 1, 4]
    kw = dict(gamma=0.3, bandwidth=3, x_lengths=xl, y_lengths=yl)
    got = sdtw.cdist(X, Y, backend="cpu", **kw)
    assert rel_err(got, sdtw.cdist(X, Y, backend="reference", **kw)) < 1e-13
    I, J = np.repeat(np.arange(37), 3), np.tile(np.arange(3), 37)
    ns, ms = np.array(xl)[I], np.array(yl)[J]
    lanes = cpu_pairs.pair_table_values(
        X.numpy(), Y.numpy(), I, J, ns, ms, *pair_offsets(ns, ms, 3), 0.3
    )
    assert torch.equal(got.view(-1), torch.from_numpy(lanes))
    f32 = sdtw.cdist(X.float(), Y.float(), backend="cpu", **kw)
    assert f32.dtype == torch.float32 and rel_err(f32, got) < 1e-6
    # with gradients: the pairs' rows gathered, the full mode's lanes (111 pairs)
    W = torch.as_tensor(rng.uniform(0.5, 2.0, (37, 3)))
    grads = []
    for backend in ("cpu", "reference"):
        Xr, Yr = X.clone().requires_grad_(), Y.clone().requires_grad_()
        D = sdtw.cdist(Xr, Yr, backend=backend, **kw)
        grads.append((D, *torch.autograd.grad((D * W).sum(), (Xr, Yr))))
    for a, b in zip(*grads, strict=True):
        assert rel_err(a, b) < 1e-12


@pytest.mark.parametrize(
    "B, N, M, D, gamma, bandwidth, lengths",
    [
        (16, 7, 5, 1, 1.0, None, False),  # (one group of 16 lanes: serial)
        (28, 9, 13, 3, 0.1, 2.5, True),  # (a group part full, lengths, a band)
        (16, 1, 5, 2, 1e-3, None, False),  # (length 1, small gamma)
        (40, 33, 31, 1, 0.01, None, True),  # (three groups: the parallel kernels)
        (17, 12, 10, 2, 0.5, None, True),  # (a second group with one pair)
        (24, 10, 11, 1, 1.0, 3, False),  # (a half-full second group)
    ],
)
def test_full_mode_lanes_match_the_reference(rng, B, N, M, D, gamma, bandwidth, lengths):
    """Soft-DTW's full mode from the sequences, squared Euclidean, B >= 16: pairs as lanes
    (:mod:`sdtw.cpu_lanes`); values and gradients wrt x and y with an upstream gradient other
    than ones, against the float64 reference backend."""
    from sdtw.cpu_lanes import use_lanes

    assert use_lanes(B, "sqeuclidean") and not use_lanes(B, "l1")
    assert use_lanes(17, "sqeuclidean")  # (32 lanes for 17 pairs: still far faster)
    x, y = randn(rng, B, N, D), randn(rng, B, M, D)
    kw = dict(gamma=gamma, bandwidth=bandwidth)
    if lengths:
        kw.update(x_lengths=rng.integers(1, N + 1, B), y_lengths=rng.integers(1, M + 1, B))
    w = torch.as_tensor(rng.uniform(0.5, 2.0, B))
    out = []
    for backend in ("cpu", "reference"):
        xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = sdtw.softdtw(xr, yr, backend=backend, **kw)
        out.append((v, *torch.autograd.grad((v * w).sum(), (xr, yr))))
    # (the reference's own gradient error grows like 1 / gamma: its published backward form)
    for got, want, tol in zip(out[0], out[1], (1e-13, 1e-11, 1e-11), strict=True):
        assert rel_err(got, want) < tol


def test_full_mode_backward_follows_the_forward(rng):
    """The backward takes the forward's layout of R, whatever the thread count says by then
    (14 pairs: lanes on one thread, the scalar kernels on two)."""
    import numba

    threads = numba.get_num_threads()
    x, y = randn(rng, 14, 6, 1).requires_grad_(), randn(rng, 14, 5, 1).requires_grad_()
    numba.set_num_threads(1)
    try:
        v = sdtw.softdtw(x, y, gamma=0.5, backend="cpu")
    finally:
        numba.set_num_threads(threads)
    g = torch.autograd.grad(v.sum(), (x, y))
    xr, yr = x.detach().requires_grad_(), y.detach().requires_grad_()
    want = torch.autograd.grad(sdtw.softdtw(xr, yr, gamma=0.5, backend="reference").sum(), (xr, yr))
    assert rel_err(g[0], want[0]) < 1e-12 and rel_err(g[1], want[1]) < 1e-12
