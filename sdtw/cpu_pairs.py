"""Forward-only exact DTW of a table of pairs, read from the series themselves: the CPU kernel
behind :func:`sdtw.cdist` at ``gamma=0`` without gradients (squared Euclidean cost).

Pair ``p`` is ``(X[I[p], :n], Y[J[p], :m])``: the kernel reads both rows where they lie (no
gathered copies, no (P, N, M) cost tensor), computes each cell's cost as it goes and keeps two
rows of the DP per pair, so memory is ``O(M)`` per thread.  ``prange`` over the pairs.  The
cell update is :mod:`sdtw.cpu_dtw`'s; the cost is ``sum_d (x_d - y_d)^2`` directly (the cost
path's :func:`sdtw.distances.cost` rounds differently: values agree to a few ulps).

GunPoint test x train (150 x 50, N = 150), 2 loaded cores: 0.56-0.74 s against 2.2 s by the
gathered rows and the cost path.  The same kernel for soft-DTW was slower than the cost
path's (5.2-5.4 s against 6.8-7.3 s): one pair's chain of soft minima per thread, where the
cost path's forward sweeps four pairs at once to overlap their latencies; so soft-DTW keeps
the cost path.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sdtw.cpu import _run
from sdtw.cpu_dtw import _min3

__all__ = ["pair_table_values"]


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
