"""Forward-only soft-DTW and exact DTW of a table of pairs, read from the series themselves:
the CPU kernel behind :func:`sdtw.cdist` without gradients (squared Euclidean cost).

Pair ``p`` is ``(X[I[p], :n], Y[J[p], :m])``: no (P, N, M) cost tensor and no gathered copy
of the pairs' rows; the cost ``sum_d (x_d - y_d)^2`` is computed per cell (the cost path's
:func:`sdtw.distances.cost` rounds differently: values agree to a few ulps).

Pairs run as SIMD lanes (:mod:`sdtw.cpu_lanes`'s blocks): a thread takes ``LANES`` pairs at
once and sweeps the union of their tables row by row, each cell a loop over the lanes with the
pair index innermost, branch-free and without libm calls, which LLVM turns into AVX-512 (or
AVX2) vector code.  Each lane keeps to its own table and band, its value is taken at its own
last cell.  The group's rows are packed lane-innermost once per group (``(N + M) D LANES``
floats per thread); the DP keeps two rows.  ``prange`` over the groups.

GunPoint test x train (150 x 50, N = 150), 2 loaded cores, the same process, alternating:
soft-DTW (gamma = 1) 0.47-0.70 s against 3.5-6.1 s by the gathered rows and the cost path;
exact DTW 0.12-0.15 s against 0.61-0.65 s by one pair per thread (bitwise the same values).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sdtw._jit import parallel_and_serial
from sdtw._simd import LANE_FLAGS
from sdtw.cpu import _run, _serial
from sdtw.cpu_lanes import cost_row, group_tables, min_row, pack, soft_row, spans

__all__ = ["LANES", "pair_table_values"]


#: Pairs per group: four AVX-512 registers of float64 per cell, whose
#: independent chains overlap (one thread, GunPoint's N = 150: 16 lanes 3.5 ns per cell,
#: 32 lanes 3.1, 64 and 128 no faster; 8 lanes do not vectorise).
LANES = 32


def _kernel(X, Y, I, J, ns, ms, los, his, gamma, out) -> None:
    for q in prange((I.shape[0] + LANES - 1) // LANES):
        _group(X, Y, I, J, ns, ms, los, his, gamma, out, np.int64(q))


@njit(cache=True, nogil=True, **LANE_FLAGS)
def _group(X, Y, I, J, ns, ms, los, his, gamma, out, q):
    """:func:`_kernel`'s iteration ``q`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    P, D = I.shape[0], X.shape[2]
    ig = 1.0 / gamma if gamma > 0.0 else 0.0
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
        if gamma > 0.0:
            soft_row(prev, cur, C, j0, j1, a, b, gamma, ig)
        else:
            min_row(prev, cur, C, j0, j1, a, b)
        for g in range(LANES):
            if i == n[g] - 1:
                res[g] = cur[m[g], g]
        prev, cur = cur, prev
    out[p0 : p0 + k] = res[:k]


_parallel, _serial_kernel = parallel_and_serial(_kernel, **LANE_FLAGS)


def pair_table_values(X, Y, I, J, ns, ms, los, his, gamma: float = 0.0) -> np.ndarray:
    """Soft-DTW (``gamma > 0``) or exact DTW (``gamma = 0``) values (P,) float64 of the pairs
    ``(X[I[p], :ns[p]], Y[J[p], :ms[p]])`` with band offsets ``los``, ``his`` (int64 arrays
    (P,)); X (B1, N, D), Y (B2, M, D) float64 C-contiguous.  Groups of :data:`LANES` pairs,
    ``prange`` over the groups (one thread below a millisecond of work or for one group)."""
    P = I.shape[0]
    out = np.empty(P)
    serial = P <= LANES or _serial(P, X.shape[1], Y.shape[1])
    kernel = _serial_kernel if serial else _parallel
    _run(kernel, serial, X, Y, I, J, ns, ms, los, his, float(gamma), out)
    return out
