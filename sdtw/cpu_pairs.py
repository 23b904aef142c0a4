"""Forward-only exact DTW of a table of pairs, read from the series themselves: the CPU kernel
behind :func:`sdtw.cdist` at ``gamma=0`` without gradients (squared Euclidean cost).

Pair ``p`` is ``(X[I[p], :n], Y[J[p], :m])``: the kernel reads both rows where they lie (no
gathered copies, no (P, N, M) cost tensor), computes each cell's cost as it goes and keeps two
rows of the DP per pair, so memory is ``O(M)`` per thread.  ``prange`` over the pairs.  The
cell update is :mod:`sdtw.cpu_dtw`'s; the cost is ``sum_d (x_d - y_d)^2`` directly (the cost
path's :func:`sdtw.distances.cost` rounds differently: values agree to a few ulps).

GunPoint test x train (150 x 50, N = 150), 2 loaded cores: 0.56-0.74 s against 2.2 s by the
gathered rows and the cost path.

Soft-DTW (:func:`pair_table_soft_values`) runs pairs as SIMD lanes (:mod:`sdtw.cpu_lanes`'s
blocks): a thread takes ``LANES`` pairs at once and sweeps the union of their tables row by
row, each cell a loop over the lanes with the pair index innermost, branch-free and without
libm calls, which LLVM turns into AVX-512 (or AVX2) vector code.  Each lane keeps to its own
table and band, its value is taken at its own last cell.  The group's rows are packed
lane-innermost once per group (``(N + M) D LANES`` floats per thread); the DP keeps two rows.
GunPoint test x train, gamma = 1, 2 loaded cores: 0.45-0.90 s, against 4.1-7.9 s by the
gathered rows and the cost path (the same process, alternating).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sdtw._simd import LANE_FLAGS
from sdtw.cpu import _run, _serial
from sdtw.cpu_dtw import _min3
from sdtw.cpu_lanes import cost_row, group_tables, pack, soft_row, spans

__all__ = ["LANES", "pair_table_soft_values", "pair_table_values"]


def _kernel(X, Y, I, J, ns, ms, los, his, out) -> None:
    D = X.shape[2]
    for p in prange(I.shape[0]):
        x, y = X[I[p]], Y[J[p]]
        n, m, lo, hi = ns[p], ms[p], los[p], his[p]
        prev = np.full(m + 1, math.inf)
        row = np.full(m + 1, math.inf)
        prev[0] = 0.0
        for i in range(n):
            row[:] = math.inf
            for j in range(max(0, i - lo), min(m - 1, i + hi) + 1):
                c = 0.0
                for d in range(D):
                    t = x[i, d] - y[j, d]
                    c += t * t
                row[j + 1] = c + _min3(prev[j], prev[j + 1], row[j])
            prev, row = row, prev
        out[p] = prev[m]


_parallel = njit(parallel=True, cache=True, nogil=True)(_kernel)


def pair_table_values(X, Y, I, J, ns, ms, los, his) -> np.ndarray:
    """Exact DTW values (P,) float64 of the pairs ``(X[I[p], :ns[p]], Y[J[p], :ms[p]])``
    with band offsets ``los``, ``his`` (int64 arrays (P,)); X (B1, N, D), Y (B2, M, D)
    float64 C-contiguous."""
    out = np.empty(I.shape[0])
    _run(_parallel, False, X, Y, I, J, ns, ms, los, his, out)
    return out


#: Pairs per group of the soft-DTW kernel: four AVX-512 registers of float64 per cell, whose
#: independent chains overlap (one thread, GunPoint's N = 150: 16 lanes 3.5 ns per cell,
#: 32 lanes 3.1, 64 and 128 no faster; 8 lanes do not vectorise).
LANES = 32


def _soft_kernel(X, Y, I, J, ns, ms, los, his, gamma, out) -> None:
    P, D = I.shape[0], X.shape[2]
    ig = 1.0 / gamma
    for q in prange((P + LANES - 1) // LANES):
        p0 = q * LANES
        k = min(LANES, P - p0)  # (the last group may have fewer pairs)
        n, m, lo, hi = group_tables(ns, ms, los, his, p0, k, LANES)
        N, M, lo_all, hi_all = n.max(), m.max(), lo.max(), hi.max()
        xs, ys = np.zeros((N, D, LANES)), np.zeros((M, D, LANES))
        pack(X, I, n, p0, k, xs)
        pack(Y, J, m, p0, k, ys)
        prev, cur = np.full((M + 1, LANES), math.inf), np.full((M + 1, LANES), math.inf)
        prev[0, :] = 0.0
        C = np.empty((M, LANES))
        a, b, res = np.empty(LANES, np.int64), np.empty(LANES, np.int64), np.empty(LANES)
        for i in range(N):
            # the union of the lanes' bands; each lane's own cells: a[g] <= j < b[g]
            j0, j1 = max(0, i - lo_all), min(M - 1, i + hi_all) + 1
            spans(i, n, m, lo, hi, a, b)
            cur[: j0 + 1, :] = math.inf
            cur[j1 + 1 :, :] = math.inf
            cost_row(xs, ys, i, j0, j1, C)
            soft_row(prev, cur, C, j0, j1, a, b, gamma, ig)
            for g in range(LANES):
                if i == n[g] - 1:
                    res[g] = cur[m[g], g]
            prev, cur = cur, prev
        out[p0 : p0 + k] = res[:k]


_soft_parallel = njit(parallel=True, cache=True, nogil=True, **LANE_FLAGS)(_soft_kernel)
_soft_serial = njit(cache=True, nogil=True, **LANE_FLAGS)(_soft_kernel)


def pair_table_soft_values(X, Y, I, J, ns, ms, los, his, gamma: float) -> np.ndarray:
    """Soft-DTW values (P,) float64 of the pairs ``(X[I[p], :ns[p]], Y[J[p], :ms[p]])``,
    arguments as :func:`pair_table_values`'s, ``gamma > 0``; groups of :data:`LANES` pairs,
    ``prange`` over the groups (one thread below a millisecond of work or for one group)."""
    P = I.shape[0]
    out = np.empty(P)
    serial = P <= LANES or _serial(P, X.shape[1], Y.shape[1])
    kernel = _soft_serial if serial else _soft_parallel
    _run(kernel, serial, X, Y, I, J, ns, ms, los, his, float(gamma), out)
    return out
