"""Fast CPU Soft-MSM: Numba kernels parallel over the batch and the channels.

Layers as for soft-DTW (:mod:`sdtw.cpu`): the ``_forward_kernel`` / ``_backward_kernel`` Numba
kernels (``prange`` over the (pair, channel) tasks: each channel is a DP of its own, the values
summed afterwards) -> the launchers :func:`msm_cpu_forward` / :func:`msm_cpu_backward` (NumPy
in, NumPy out, float64, internal asserts only).  The maths and the backward over edge
occupancies are those of the float64 oracle, :mod:`sdtw.msm_reference`.

Per cell the forward runs two transition costs (one ``exp``, one ``log1p`` and one ``sqrt``
each) and the soft minimum of three (two ``exp``, one ``log1p``); only the soft minimum is on
the row's dependency chain (a cell needs its left neighbour), so the costs of the next cells
overlap it.  The backward recomputes the costs and their partial derivatives from x and y
instead of storing them: it keeps the forward's ``R`` only, (B D, N, M), as soft-DTW's
backward does, and two rows of occupancies.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sdtw.cpu import _PARALLEL
from sdtw.msm_reference import GATE_EPS

__all__ = ["msm_cpu_backward", "msm_cpu_forward"]

#: Below this many cells (B D N M) one thread runs the kernels (a parallel launch costs more).
SERIAL_MAX_CELLS = 1 << 15


# The soft minimum of two around their minimum: min - g log1p(e), e = exp(-|a - b| / g) <= 1;
# +inf where both are +inf, NaN where one is NaN.
@njit(cache=True, nogil=True, inline="always")
def _softmin2(a: float, b: float, gamma: float, ig: float) -> float:
    m = a if a <= b else b
    if m == math.inf:
        return a + b
    return m - gamma * math.log1p(math.exp(-abs(a - b) * ig))


# The transition cost C(v, p, o) = c + (1 - s(u)) softmin_g((v - p)^2, (v - o)^2), the soft
# minimum of two around their minimum: S = min - g log1p(e), e = exp(-|a - b| / g), with the
# weights 1 / (1 + e) (the minimum's) and e / (1 + e).
@njit(cache=True, nogil=True, inline="always")
def _transition(v: float, p: float, o: float, c: float, gamma: float, ig: float) -> float:
    dp, do = v - p, v - o
    a, b = dp * dp, do * do
    S = min(a, b) - gamma * math.log1p(math.exp(-abs(a - b) * ig))
    u = dp * do
    s = 0.5 * (1.0 - u / math.sqrt(u * u + GATE_EPS))
    return c + (1.0 - s) * S


# Its value and partial derivatives (dv, dp, do):
#   dC = (1 - s) (w_a da + w_b db) - S s'(u) du,  s'(u) = -eps / 2 (u^2 + eps)^(-3/2),
#   da = 2 (v - p) (dv - dp), db = 2 (v - o) (dv - do), du = (v - o) dv - (v - o) dp ... :
#   du/dv = (v - o) + (v - p), du/dp = -(v - o), du/do = -(v - p).
@njit(cache=True, nogil=True, inline="always")
def _transition_grad(v: float, p: float, o: float, c: float, gamma: float, ig: float):
    dp, do = v - p, v - o
    a, b = dp * dp, do * do
    e = math.exp(-abs(a - b) * ig)
    S = min(a, b) - gamma * math.log1p(e)
    w_min = 1.0 / (1.0 + e)
    wa, wb = (w_min, e * w_min) if a <= b else (e * w_min, w_min)
    u = dp * do
    r2 = u * u + GATE_EPS
    r = math.sqrt(r2)
    keep = 1.0 - 0.5 * (1.0 - u / r)  # 1 - s(u)
    k = S * (-0.5 * GATE_EPS / (r2 * r))  # S s'(u)
    d_v = keep * 2.0 * (wa * dp + wb * do) - k * (dp + do)
    d_p = -keep * 2.0 * wa * dp + k * do
    d_o = -keep * 2.0 * wb * do + k * dp
    return c + keep * S, d_v, d_p, d_o


# The forward sweeps a row in two passes.  softmin3(a, b, c) = softmin2(softmin2(a, b), c)
# (a log-sum-exp of log-sum-exps), so the first pass, whose cells are independent, computes
# each cell's soft minimum of its match and up candidates and its left edge's cost; the second
# pass is the row's dependency chain, one softmin2 (one exp, one log1p) per cell: half the
# latency of soft-DTW's chain, which the first pass's independent work does not lengthen.
def _forward_kernel(x, y, c, gamma, ns, ms, los, his, R, values):
    """R (B D, N, M): task t = b D + d is pair b's channel d; ``+inf`` outside its table and
    band; ``values[t] = R[t, n_b - 1, m_b - 1]``."""
    B, _, D = x.shape
    M = y.shape[1]
    ig = 1.0 / gamma
    inf = math.inf
    for t in prange(B * D):
        b, d = t // D, t % D
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        Rt = R[t]
        Rt[:, :] = inf
        head, edge = np.empty(M), np.empty(M)  # softmin(match, up); the left edge's cost
        for i in range(n):
            xi = x[b, i, d]
            j0, j1 = max(0, i - lo), min(m - 1, i + hi)
            if i == 0:
                head[j0 : j1 + 1] = inf
                head[0] = (xi - y[b, 0, d]) * (xi - y[b, 0, d])  # R[0, 0]
            else:
                xp = x[b, i - 1, d]
                for j in range(j0, j1 + 1):
                    yj = y[b, j, d]
                    up = Rt[i - 1, j] + _transition(xi, xp, yj, c, gamma, ig)
                    match = Rt[i - 1, j - 1] + (xi - yj) * (xi - yj) if j > 0 else inf
                    head[j] = _softmin2(match, up, gamma, ig)
            for j in range(max(j0, 1), j1 + 1):
                edge[j] = _transition(y[b, j, d], y[b, j - 1, d], xi, c, gamma, ig)
            left = inf  # (R[i, j0 - 1] is outside the band or the table)
            for j in range(j0, j1 + 1):
                left = _softmin2(head[j], left + edge[j] if j > 0 else inf, gamma, ig)
                Rt[i, j] = left
        values[t] = Rt[n - 1, m - 1]


def _backward_kernel(x, y, c, gamma, ns, ms, los, his, R, grad_out, gx, gy):
    """Adds each task's gradient (times ``grad_out[b]``) into gx (B, N, D), gy (B, M, D)
    (zeroed by the caller).  Cells in reverse order; ``G`` of two rows: the row's own (which
    its left edges feed) and the row above (which its up and match edges feed)."""
    B, _, D = x.shape
    M = y.shape[1]
    ig = 1.0 / gamma
    for t in prange(B * D):
        b, d = t // D, t % D
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        Rt = R[t]
        cur, above = np.zeros(M), np.zeros(M)
        cur[m - 1] = grad_out[b]
        for i in range(n - 1, -1, -1):
            xi = x[b, i, d]
            xp = x[b, i - 1, d] if i > 0 else 0.0
            above[:] = 0.0
            gxi = 0.0
            for j in range(min(m - 1, i + hi), max(0, i - lo) - 1, -1):
                g = cur[j]
                if g == 0.0:
                    continue
                yj = y[b, j, d]
                r = Rt[i, j]
                if i == 0 and j == 0:
                    w = g * 2.0 * (xi - yj)
                    gxi += w
                    gy[b, 0, d] -= w
                    continue
                if i > 0:
                    cost, d_v, d_p, d_o = _transition_grad(xi, xp, yj, c, gamma, ig)
                    o = g * math.exp((r - Rt[i - 1, j] - cost) * ig)
                    above[j] += o
                    gxi += o * d_v
                    gx[b, i - 1, d] += o * d_p
                    gy[b, j, d] += o * d_o
                    if j > 0:
                        diff = xi - yj
                        o = g * math.exp((r - Rt[i - 1, j - 1] - diff * diff) * ig)
                        above[j - 1] += o
                        gxi += o * 2.0 * diff
                        gy[b, j, d] -= o * 2.0 * diff
                if j > 0:
                    yp = y[b, j - 1, d]
                    cost, d_v, d_p, d_o = _transition_grad(yj, yp, xi, c, gamma, ig)
                    o = g * math.exp((r - Rt[i, j - 1] - cost) * ig)
                    cur[j - 1] += o
                    gy[b, j, d] += o * d_v
                    gy[b, j - 1, d] += o * d_p
                    gxi += o * d_o
            gx[b, i, d] += gxi
            cur, above = above, cur


_forward_parallel = njit(parallel=True, cache=True, nogil=True)(_forward_kernel)
_forward_serial = njit(cache=True, nogil=True)(_forward_kernel)
_backward_parallel = njit(parallel=True, cache=True, nogil=True)(_backward_kernel)
_backward_serial = njit(cache=True, nogil=True)(_backward_kernel)


def _launch(parallel, serial, cells: int, *args) -> None:
    # (one parallel kernel at a time: Numba's workqueue layer aborts on concurrent entry;
    # the lock is the soft-DTW kernels' own, see sdtw.cpu)
    if cells <= SERIAL_MAX_CELLS:
        serial(*args)
        return
    with _PARALLEL:
        parallel(*args)


def _tables(B: int, N: int, M: int, lo, hi, lengths) -> tuple:
    if lengths is None:
        ns, ms = np.full(B, N, np.int64), np.full(B, M, np.int64)
    else:
        ns, ms = (np.ascontiguousarray(t, dtype=np.int64) for t in lengths)
    los = np.ascontiguousarray(np.broadcast_to(np.asarray(lo, np.int64), (B,)))
    his = np.ascontiguousarray(np.broadcast_to(np.asarray(hi, np.int64), (B,)))
    return ns, ms, los, his


def msm_cpu_forward(
    x: np.ndarray, y: np.ndarray, c: float, gamma: float, lo, hi, lengths=None
) -> tuple[np.ndarray, np.ndarray]:
    """Soft-MSM forward on the CPU.

    Parameters
    ----------
    x : ndarray, shape (B, N, D)
    y : ndarray, shape (B, M, D)
        float64, C-contiguous (anything else is converted).  Not modified.
    c, gamma : float
        Stiffness and smoothing, > 0.
    lo, hi : int or ndarray (B,)
        Band offsets (:func:`sdtw.band.band_offsets`, per pair :func:`sdtw.band.pair_offsets`).
    lengths : (ndarray (B,), ndarray (B,)) or None
        Each pair's own lengths (None: N, M).

    Returns
    -------
    values : ndarray (B,)
        The channels' values summed.
    R : ndarray (B D, N, M)
        Each channel's table (``+inf`` outside it): all :func:`msm_cpu_backward` needs.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    assert x.ndim == 3 and y.ndim == 3 and x.shape[2] == y.shape[2] and gamma > 0
    B, N, D = x.shape
    M = y.shape[1]
    tables = _tables(B, N, M, lo, hi, lengths)
    R = np.empty((B * D, N, M))
    values = np.empty(B * D)
    args = (x, y, float(c), float(gamma), *tables, R, values)
    _launch(_forward_parallel, _forward_serial, B * D * N * M, *args)
    return values.reshape(B, D).sum(axis=1), R


def msm_cpu_backward(
    x: np.ndarray, y: np.ndarray, R: np.ndarray, c: float, gamma: float, lo, hi, grad_out,
    lengths=None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Soft-MSM backward on the CPU: the gradients of ``grad_out . values`` wrt x (B, N, D)
    and y (B, M, D), float64, zero past each pair's lengths; arguments as
    :func:`msm_cpu_forward`'s, ``R`` its table and ``grad_out`` (B,) the upstream gradient."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    grad_out = np.ascontiguousarray(grad_out, dtype=np.float64)
    B, N, D = x.shape
    M = y.shape[1]
    tables = _tables(B, N, M, lo, hi, lengths)
    gx, gy = np.zeros(x.shape), np.zeros(y.shape)
    args = (x, y, float(c), float(gamma), *tables, R, grad_out, gx, gy)
    _launch(_backward_parallel, _backward_serial, B * D * N * M, *args)
    return gx, gy
