"""Soft-MSM's CPU kernels with the (pair, channel) tasks as SIMD lanes (sdtw.cpu_msm_lanes),
through sdtw.soft_msm on the CPU backend, against the float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sdtw
from sdtw.cpu import _tables
from sdtw.cpu_msm import msm_cpu_backward, msm_cpu_forward
from sdtw.cpu_msm_lanes import MSM_LANES, msm_lane_backward, msm_lane_forward, use_msm_lanes


def _data(B, N, M, D, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)
    return x, y


def _value_and_grads(backend, x, y, upstream, **kw):
    x, y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    v = sdtw.soft_msm(x, y, backend=backend, **kw)
    return (v.detach(), *torch.autograd.grad(v, (x, y), upstream))


def test_the_lanes_serve_batches_of_sixteen_tasks_and_more():
    assert use_msm_lanes(MSM_LANES) and use_msm_lanes(5 * MSM_LANES)
    assert not use_msm_lanes(3)  # (mostly idle lanes)
    assert use_msm_lanes(MSM_LANES + 1)  # (a part-full group beats a task per thread)


# B D tasks: two groups, one with an idle lane; channels split across groups
@pytest.mark.parametrize(
    ("B", "N", "M", "D", "bandwidth", "gamma"),
    [
        (31, 9, 13, 1, None, 1.0),
        (16, 1, 6, 1, None, 0.5),  # (length 1: a first row only)
        (8, 11, 1, 2, None, 0.3),
        (10, 10, 7, 3, 2, 0.1),
        (16, 12, 12, 1, 3, 1e-3),
        (16, 8, 9, 1, None, 30.0),
        (17, 7, 8, 1, None, 1.0),  # (a second group with one task)
    ],
)
@pytest.mark.parametrize("normalize", [False, True])
def test_lanes_against_the_reference(B, N, M, D, bandwidth, gamma, normalize):
    assert use_msm_lanes(B * D)
    x, y = _data(B, N, M, D, seed=B + N + M)
    x = 2.0 * x  # (larger steps: the small-gamma transitions' exp(-a / gamma) underflow)
    upstream = torch.linspace(-1.0, 2.0, B, dtype=torch.float64)
    kw = dict(c=0.7, gamma=gamma, bandwidth=bandwidth, normalize=normalize)
    got = _value_and_grads("cpu", x, y, upstream, **kw)
    ref = _value_and_grads("reference", x, y, upstream, **kw)
    # (atol from the largest: the divergence cancels, the task-per-thread kernels err as much)
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-12 * (1.0 + b.abs().max()))


def test_lanes_with_each_pairs_lengths():
    """Per-pair lengths (NaN past them, never read): each pair as its own call."""
    B, N, M, D = 20, 9, 8, 1
    x, y = _data(B, N, M, D, seed=3)
    g = np.random.default_rng(3)
    xl, yl = g.integers(1, N + 1, B).tolist(), g.integers(1, M + 1, B).tolist()
    for b in range(B):
        x[b, xl[b] :] = math.nan
        y[b, yl[b] :] = math.nan
    upstream = torch.linspace(0.5, 1.5, B, dtype=torch.float64)
    kw = dict(gamma=0.2, bandwidth=3, x_lengths=xl, y_lengths=yl)
    v, gx, gy = _value_and_grads("cpu", x, y, upstream, **kw)
    for b in range(B):
        xb, yb = x[b : b + 1, : xl[b]], y[b : b + 1, : yl[b]]
        one, ex, ey = _value_and_grads("reference", xb, yb, upstream[b : b + 1], gamma=0.2,
                                       bandwidth=3)  # fmt: skip
        torch.testing.assert_close(v[b : b + 1], one, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx[b, : xl[b]], ex[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gy[b, : yl[b]], ey[0], rtol=1e-10, atol=1e-12)
        assert (gx[b, xl[b] :] == 0).all() and (gy[b, yl[b] :] == 0).all()


@pytest.mark.slow  # (compiles both kernels' parallel twins: ~40 s in a fresh cache)
def test_parallel_lanes_equal_the_task_per_thread_kernels():
    """Past the serial size (parallel kernels, several groups) the lanes agree with the
    kernels that take a task per thread, an upstream gradient other than ones."""
    B, N, M, D = 34, 70, 61, 1
    x, y = (t.numpy() for t in _data(B, N, M, D, seed=11))
    go = np.linspace(-1.0, 1.0, B)
    tables = _tables(B, N, M, 20, 25, None)
    values, R = msm_lane_forward(x, y, 1.3, 0.05, tables)
    gx, gy = msm_lane_backward(x, y, 1.3, 0.05, tables, R, go)
    v0, R0 = msm_cpu_forward(x, y, 1.3, 0.05, 20, 25)
    gx0, gy0 = msm_cpu_backward(x, y, R0, 1.3, 0.05, 20, 25, go)
    np.testing.assert_allclose(values, v0, rtol=1e-13)
    np.testing.assert_allclose(gx, gx0, rtol=1e-9, atol=1e-12 * np.abs(gx0).max())
    np.testing.assert_allclose(gy, gy0, rtol=1e-9, atol=1e-12 * np.abs(gy0).max())


def _lanes_and_tasks(x, y, gamma, c=1.0):
    """(value, gx) of 16 copies of one pair through the lanes and through the task-per-thread
    kernels (upstream gradient 1)."""
    B = 16
    a = np.repeat(np.asarray(x, np.float64)[None, :, None], B, 0)
    b = np.repeat(np.asarray(y, np.float64)[None, :, None], B, 0)
    tables = _tables(B, a.shape[1], b.shape[1], 10**9, 10**9, None)
    v, R = msm_lane_forward(a, b, c, gamma, tables)
    gx = msm_lane_backward(a, b, c, gamma, tables, R, np.ones(B))[0]
    v0, R0 = msm_cpu_forward(a, b, c, gamma, 10**9, 10**9)
    gx0 = msm_cpu_backward(a, b, R0, c, gamma, 10**9, 10**9, np.ones(B))[0]
    return (v, gx), (v0, gx0)


@pytest.mark.parametrize(
    ("x", "y", "gamma"),
    [
        # steps near sqrt(gamma * 300): each transition sum near the shared form's bound
        ([0, 0, 0, 2, 2, 2], [2, 2, 2, 0, 0, 0], 0.01),
        (np.sin(np.arange(20) * np.pi / 5), np.cos(np.arange(20) * np.pi / 5), 1e-3),
        ([0, 0.55, 1.1, 1.65], [1.65, 1.1, 0.55, 0], 1e-3),
        # large values: transition sums and gates' roots whose products leave float64's range
        (1e5 + 19.2 * np.arange(4), 19.2 * np.arange(4), 1.0),
        (1e5 + 19.3 * np.arange(4), 19.3 * np.arange(4), 1.0),
        ([0, 500, 1000], [-1e152] * 3, 1e3),
    ],
)
def test_lanes_at_the_edges_of_the_shared_exponential_form(x, y, gamma):
    """Where one division for four reciprocals would leave float64's normal range, the lanes
    take the stable form: values and gradients equal the task-per-thread kernels' (no NaN),
    and the reference's where its float64 holds."""
    (v, gx), (v0, gx0) = _lanes_and_tasks(x, y, gamma)
    assert np.isfinite(v).all() and np.isfinite(gx).all()
    np.testing.assert_allclose(v, v0, rtol=1e-13)
    np.testing.assert_allclose(gx, gx0, rtol=1e-9, atol=1e-11 * (1 + np.abs(gx0).max()))
    if max(np.abs(x).max(), np.abs(y).max()) < 10:
        xt = torch.tensor(np.asarray(x, np.float64))[None, :, None].requires_grad_()
        yt = torch.tensor(np.asarray(y, np.float64))[None, :, None]
        ref = sdtw.soft_msm(xt, yt, gamma=gamma, backend="reference")
        (gr,) = torch.autograd.grad(ref.sum(), xt)
        np.testing.assert_allclose(v[0], ref.item(), rtol=1e-12)
        np.testing.assert_allclose(gx[0], gr[0].numpy(), atol=1e-11 * (1 + gr.abs().max().item()))


@pytest.mark.parametrize(("N", "M", "band"), [(23, 17, 4), (1, 9, None), (12, 1, None)])
def test_values_only_keep_two_rows_and_equal_the_full_tables(N, M, band):
    """Without gradients (cdist, no_grad) the lanes keep two rows per task, not the table: the
    same values bit for bit, per-pair lengths and a band included."""
    B, D = 15, 2  # (30 tasks: two groups, the last with idle lanes)
    assert use_msm_lanes(B * D)
    x, y = (t.numpy() for t in _data(B, N, M, D, seed=N + M))
    g = np.random.default_rng(N)
    lengths = (g.integers(1, N + 1, B), g.integers(1, M + 1, B))
    lo, hi = (band, band + max(M - N, 0)) if band else (10**9, 10**9)
    tables = _tables(B, N, M, lo, hi, lengths)
    full, R = msm_lane_forward(x, y, 0.6, 0.2, tables)
    rows, none = msm_lane_forward(x, y, 0.6, 0.2, tables, keep=False)
    assert none is None and R.shape[1] == N + 1
    np.testing.assert_array_equal(rows, full)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    with torch.no_grad():
        v = sdtw.soft_msm(xt, yt, gamma=0.2, c=0.6, backend="cpu")
    vg = sdtw.soft_msm(xt.clone().requires_grad_(), yt, gamma=0.2, c=0.6, backend="cpu")
    assert torch.equal(v, vg.detach())


@pytest.mark.parametrize("gamma", [0.5, 1e-3])  # (the shared-exponential and the stable form)
def test_every_lane_count_gives_the_same_bits(gamma):
    """The row kernels run two vectors of lanes an iteration (sdtw._jit.interleaved), so
    groups of 5, 16 and 24 lanes take the vector loop and its remainder in different shares
    (which, depends on the vector width): every lane's value and gradients are the same bits
    whatever the group's width."""
    B, N, M = 24, 13, 9
    x, y = (t.numpy() for t in _data(B, N, M, 1, seed=7))
    tables = _tables(B, N, M, 10**9, 10**9, None)
    upstream = np.random.default_rng(1).standard_normal(B)
    results = []
    for lanes in (MSM_LANES, 5, 24):
        v, R = msm_lane_forward(x, y, 0.8, gamma, tables, lanes=lanes)
        results.append((v, *msm_lane_backward(x, y, 0.8, gamma, tables, R, upstream)))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)
