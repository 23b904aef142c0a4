"""Soft-DTW with pairs as SIMD lanes: the CPU building blocks, and the full mode's forward and
backward for the squared Euclidean cost built on them.

A thread takes a group of ``L`` pairs and sweeps the union of their tables row by row; every
array of the group has the lane (the pair) as its last, contiguous axis, and every cell is a
loop over the lanes whose body is branch-free and calls no libm function (the soft minimum and
the softmax weights of :mod:`sdtw._simd`), so LLVM turns it into vector code: 8 pairs per
AVX-512 register, the group's registers independent chains that overlap.  Each lane keeps to
its own table and band by a select: a cell outside it is ``+inf`` in the forward and pushes
nothing in the backward.  The lane count ``L`` is the last axis of the arrays a block takes
(a runtime trip count: 32 lanes run as fast as a compile-time 32, 16 lanes 10 % slower than a
compile-time 16, 8 lanes hardly vectorise).  The blocks are compiled on their own, not inlined
into the ``prange`` kernels (Numba's parfor passes on the inlined blocks took minutes).

Forward, lane ``g`` of cell ``(i, j)``, padded rows as in :mod:`sdtw.cpu`:

.. math::  R_{i+1,j+1} = C_{ij} + \\operatorname{softmin}_\\gamma(R_{ij}, R_{i,j+1}, R_{i+1,j})

Backward, the push form of :mod:`sdtw.cpu` (``E_s`` final when ``s`` is reached in reverse
row-major order; ``s`` pushes ``E_s P_s(p)`` to each predecessor ``p``, ``P_s`` the softmax of
its predecessors around their minimum, whose own weight is exactly 1), then each cell's share
of the gradients once its row of E is final:

.. math::  \\frac{\\partial}{\\partial x_i} \\mathrel{+}= 2 E_{ij} (x_i - y_j),\\qquad
           \\frac{\\partial}{\\partial y_j} \\mathrel{-}= 2 E_{ij} (x_i - y_j).

The cost is ``sum_d (x_d - y_d)^2`` (the CUDA table kernel's form; :func:`sdtw.distances.cost`
rounds differently: values agree to a few ulps).
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from sdtw._jit import parallel_and_serial
from sdtw._simd import LANE_FLAGS, exp_neg, order3, softmin3
from sdtw.cpu import _run, _serial

__all__ = [
    "FULL_LANES",
    "cost_row",
    "group_tables",
    "lane_backward",
    "lane_count",
    "lane_forward",
    "min_row",
    "pack",
    "push_row",
    "soft_row",
    "spans",
    "start_row",
    "use_lanes",
]

#: Pairs per group of the full mode: two groups at B = 32 for the 2 cores (32 lanes are 10-15 %
#: faster per thread, one thread).
FULL_LANES = 16


_block = njit(cache=True, nogil=True, **LANE_FLAGS)


@_block
def pack(X, I, lens, p0, k, out):
    """Rows ``X[I[p0 + g], :lens[g]]`` into ``out[:, :, g]`` (zeros past each length;
    lanes ``g >= k`` repeat the group's last pair)."""
    for g in range(out.shape[2]):
        x = X[I[p0 + min(g, k - 1)]]
        for t in range(lens[g]):
            for d in range(X.shape[2]):
                out[t, d, g] = x[t, d]


@_block
def spans(i, n, m, lo, hi, a, b):
    """Lane g's cells of row ``i``: ``a[g] <= j < b[g]`` (its table and band)."""
    for g in range(a.shape[0]):
        a[g] = max(0, i - lo[g])
        b[g] = min(m[g], i + hi[g] + 1) if i < n[g] else 0


@_block
def cost_row(xs, ys, i, j0, j1, C):
    """``C[j, g] = |xs[i, :, g] - ys[j, :, g]|^2`` for ``j0 <= j < j1``."""
    L = C.shape[1]
    for j in range(j0, j1):
        for g in range(L):
            C[j, g] = 0.0
        for d in range(xs.shape[1]):
            for g in range(L):
                t = xs[i, d, g] - ys[j, d, g]
                C[j, g] += t * t


@_block
def soft_row(prev, cur, C, j0, j1, a, b, gamma, ig):
    """Padded row ``cur`` from ``prev`` on columns ``j0 <= j < j1``: lane g's cell where
    ``a[g] <= j < b[g]``, +inf elsewhere."""
    L = C.shape[1]
    for j in range(j0, j1):
        for g in range(L):
            v = C[j, g] + softmin3(prev[j, g], prev[j + 1, g], cur[j, g], gamma, ig)
            cur[j + 1, g] = v if (j >= a[g]) & (j < b[g]) else math.inf


@_block
def min_row(prev, cur, C, j0, j1, a, b):
    """:func:`soft_row`'s exact-DTW twin: the hard minimum, NaN where a predecessor is NaN
    (:func:`sdtw.cpu_dtw._min3`)."""
    L = C.shape[1]
    for j in range(j0, j1):
        for g in range(L):
            p, q, r = prev[j, g], prev[j + 1, g], cur[j, g]
            m = p if p <= q else q
            m = m if m <= r else r
            nan = (p != p) | (q != q) | (r != r)
            v = C[j, g] + (math.nan if nan else m)
            cur[j + 1, g] = v if (j >= a[g]) & (j < b[g]) else math.inf


@_block
def push_row(R0, R1, E0, E1, j0, j1, ig):
    """Row ``i`` of the backward, columns ``j1 - 1`` down to ``j0``: ``R0``, ``R1`` the
    padded R rows ``i``, ``i + 1``; ``E1`` (final on entry at each cell) and ``E0`` the
    padded E rows of cells ``i`` and ``i - 1`` (``E[j + 1]`` is cell j, ``E[0]`` a sink).
    A cell not reached (``R = +inf``) or with ``E = 0`` pushes nothing, and its E is set
    to 0 (no share of the gradients)."""
    L = E1.shape[1]
    for j in range(j1 - 1, j0 - 1, -1):
        for g in range(L):
            e = E1[j + 1, g]
            rd, ru, rl = R0[j, g], R0[j + 1, g], R1[j, g]
            m, mid, top = order3(rd, ru, rl)
            # (each weight by value: the minimum's exactly 1, two exponentials per cell)
            w_mid = exp_neg((m - mid) * ig)
            w_top = exp_neg((m - top) * ig)
            wd = 1.0 if rd == m else (w_mid if rd == mid else w_top)
            wu = 1.0 if ru == m else (w_mid if ru == mid else w_top)
            wl = 1.0 if rl == m else (w_mid if rl == mid else w_top)
            live = (e != 0.0) & (R1[j + 1, g] != math.inf)
            scale = e / (wd + wu + wl) if live else 0.0
            E1[j + 1, g] = e if live else 0.0
            E0[j, g] += scale * wd
            E0[j + 1, g] += scale * wu
            E1[j, g] += scale * wl


@_block
def start_row(E1, i, n, m, gout, t0, k, D, lo_all, hi_all, M):
    """Row ``i``'s start in a backward over a group's lanes (tasks ``t0 ..``, ``k`` of them
    real, ``D`` channels a pair): each lane whose last row is ``i`` gets its pair's upstream
    gradient at its last cell of ``E1``; returns the columns ``(j0, j1)`` the row sweeps."""
    for g in range(E1.shape[1]):
        if i == n[g] - 1:
            E1[m[g], g] = gout[(t0 + min(g, k - 1)) // D]
    return max(0, i - lo_all), min(M - 1, i + hi_all) + 1


@_block
def grad_row(xs, ys, i, j0, j1, E1, gxs, gys):
    """Each cell of row ``i``'s share of the gradients, its E final (``E1[j + 1]``)."""
    L = E1.shape[1]
    for j in range(j0, j1):
        for d in range(xs.shape[1]):
            for g in range(L):
                v = (2.0 * E1[j + 1, g]) * (xs[i, d, g] - ys[j, d, g])
                gxs[i, d, g] += v
                gys[j, d, g] -= v


@njit(cache=True, nogil=True, inline="always")
def group_tables(ns, ms, los, his, p0, k, L):
    """The per-lane ``n, m, lo, hi`` of the group of pairs ``p0 ..`` (lanes past ``k`` repeat
    the last pair)."""
    n, m = np.empty(L, np.int64), np.empty(L, np.int64)
    lo, hi = np.empty(L, np.int64), np.empty(L, np.int64)
    for g in range(L):
        p = p0 + min(g, k - 1)
        n[g], m[g], lo[g], hi[g] = ns[p], ms[p], los[p], his[p]
    return n, m, lo, hi


@_block
def group(X, Y, ns, ms, los, his, p0, L):
    """Group ``p0 ..``'s pair count ``k``, per-lane ``n, m, lo, hi`` (:func:`group_tables`)
    and its inputs as lanes ``xs`` (N, D, L), ``ys`` (M, D, L) (:func:`pack`)."""
    B, D = X.shape[0], X.shape[2]
    I = np.arange(B)
    k = min(L, B - p0)
    n, m, lo, hi = group_tables(ns, ms, los, his, p0, k, L)
    xs, ys = np.zeros((n.max(), D, L)), np.zeros((m.max(), D, L))
    pack(X, I, n, p0, k, xs)
    pack(Y, I, m, p0, k, ys)
    return k, n, m, lo, hi, xs, ys


def _forward_kernel(X, Y, gamma, ns, ms, los, his, R, out):
    """Group q's padded tables into ``R[q]`` (N + 1, M + 1, L), values into ``out``."""
    for q in prange(R.shape[0]):
        _forward_group(X, Y, gamma, ns, ms, los, his, R, out, np.int64(q))


@_block
def _forward_group(X, Y, gamma, ns, ms, los, his, R, out, q):
    """:func:`_forward_kernel`'s iteration ``q`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    L = R.shape[3]
    ig = 1.0 / gamma
    p0 = q * L
    k, n, m, lo, hi, xs, ys = group(X, Y, ns, ms, los, his, p0, L)
    N, M, lo_all, hi_all = n.max(), m.max(), lo.max(), hi.max()
    Rq = R[q]
    Rq[0, :, :] = math.inf
    Rq[0, 0, :] = 0.0
    Rq[N + 1 :, :, :] = math.inf  # (R's rows past the group's tables)
    C = np.empty((M, L))
    a, b = np.empty(L, np.int64), np.empty(L, np.int64)
    for i in range(N):
        j0, j1 = max(0, i - lo_all), min(M - 1, i + hi_all) + 1
        # (only the cells outside the union of the bands are filled: one pass over R)
        Rq[i + 1, : j0 + 1, :] = math.inf
        Rq[i + 1, j1 + 1 :, :] = math.inf
        spans(i, n, m, lo, hi, a, b)
        cost_row(xs, ys, i, j0, j1, C)
        soft_row(Rq[i], Rq[i + 1], C, j0, j1, a, b, gamma, ig)
    for g in range(k):
        out[p0 + g] = Rq[n[g], m[g], g]


def _backward_kernel(X, Y, gamma, ns, ms, los, his, R, gout, GX, GY):
    """``GX``, ``GY`` (zeroed) += the gradients of ``gout[b] * value[b]`` wrt x, y."""
    for q in prange(R.shape[0]):
        _backward_group(X, Y, gamma, ns, ms, los, his, R, gout, GX, GY, np.int64(q))


@_block
def _backward_group(X, Y, gamma, ns, ms, los, his, R, gout, GX, GY, q):
    """:func:`_backward_kernel`'s iteration ``q`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    L = R.shape[3]
    ig = 1.0 / gamma
    p0 = q * L
    k, n, m, lo, hi, xs, ys = group(X, Y, ns, ms, los, his, p0, L)
    N, M, lo_all, hi_all = n.max(), m.max(), lo.max(), hi.max()
    gxs, gys = np.zeros_like(xs), np.zeros_like(ys)
    # E's two rows by index, not by swapping names: Numba's parfor passes took over ten
    # minutes to compile the swap inside the prange loop
    E = np.zeros((2, M + 1, L))
    cur = 0
    Rq = R[q]
    for i in range(N - 1, -1, -1):
        E1 = E[cur]
        j0, j1 = start_row(E1, i, n, m, gout, p0, k, 1, lo_all, hi_all, M)
        push_row(Rq[i], Rq[i + 1], E[1 - cur], E1, j0, j1, ig)
        grad_row(xs, ys, i, j0, j1, E1, gxs, gys)
        cur = 1 - cur
        E[1 - cur, :, :] = 0.0
    for g in range(k):
        GX[p0 + g, : n[g], :] = gxs[: n[g], :, g]
        GY[p0 + g, : m[g], :] = gys[: m[g], :, g]


_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel, **LANE_FLAGS)
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel, **LANE_FLAGS)


def use_lanes(B: int, dist: str) -> bool:
    """Whether the full mode runs as lanes: the squared Euclidean cost and at least half a
    group of pairs per thread (fewer would leave most lanes idle).  A part-full group still
    beats the scalar kernels by far (a lane costs a fifth of a scalar pair: 17 pairs took 3.3x
    longer in the scalar kernels than 32 as lanes); R holds a table per lane, no cost tensor,
    which :func:`sdtw.memory.cpu_full_bytes` counts."""
    return dist == "sqeuclidean" and B >= FULL_LANES // 2 * min(2, get_num_threads())


def lane_count(B: int) -> int:
    """Lanes (tables of R) for B pairs: whole groups."""
    return -(-B // FULL_LANES) * FULL_LANES


def lane_forward(x: np.ndarray, y: np.ndarray, gamma: float, tables: tuple) -> tuple:
    """Values (B,) of x (B, N, D), y (B, M, D) (float64, C-contiguous) over each pair's
    ``tables`` = (n, m, lo, hi), and the lanes' padded tables R (groups, N + 1, M + 1, L) for
    :func:`lane_backward`."""
    B, N, M, L = x.shape[0], x.shape[1], y.shape[1], FULL_LANES
    R = np.empty((lane_count(B) // L, N + 1, M + 1, L))
    out = np.empty(B)
    serial = R.shape[0] == 1 or _serial(B, N, M)
    kernel = _forward_serial if serial else _forward_parallel
    _run(kernel, serial, x, y, float(gamma), *tables, R, out)
    return out, R


def lane_backward(x, y, gamma: float, tables: tuple, R: np.ndarray, grad_out: np.ndarray):
    """The gradients (B, N, D), (B, M, D) of ``sum_b grad_out[b] values[b]`` wrt x and y from
    :func:`lane_forward`'s R (float64)."""
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    gx, gy = np.zeros_like(x), np.zeros_like(y)
    serial = R.shape[0] == 1 or _serial(B, N, M)
    kernel = _backward_serial if serial else _backward_parallel
    _run(kernel, serial, x, y, float(gamma), *tables, R, grad_out, gx, gy)
    return gx, gy
