"""Forward-only all-pairs kernels: soft-DTW and exact DTW values of table pairs, read in place.

:func:`sdtw.cdist` without gradients asks the backend for the values of pairs
``(X[I[p]], Y[J[p]])``; these kernels compute them with no (P, N, M) cost or table and no
gathered copy of the rows.  Each pair is one warp: lane ``l`` owns a strip of ``ROWS``
consecutive rows (``ROWS`` a compile-time constant, so the strip's DP values and, for D = 1,
its inputs stay in registers) and sweeps the columns as a skewed wavefront: at step ``s`` it
computes column ``s - l`` for its rows top to bottom, taking the row above its strip from lane
``l - 1`` by one warp shuffle of that lane's bottom value of the step before (its value of
the step before that is the diagonal).  A pair takes ``M + ceil(N / ROWS) - 1`` steps; many
pairs in flight, not one pair's latency, set the throughput.

The squared Euclidean cost is computed per cell from the inputs.  Soft-DTW runs in the
scaled base-2 units of :mod:`sdtw.cuda.kernels.recurrence` (the inputs scaled by
``sqrt(log2(e) / gamma)``, so the costs arrive scaled), float64 values with float32
hardware ``ex2``/``lg2`` of float64 differences for float32 inputs, float64 throughout for
float64 inputs.  Exact DTW (gamma = 0) is a min-plus recurrence in the inputs' dtype, two
hardware minimums and an add per cell; the hardware minimum skips a NaN, so each lane flags a
NaN cost of its cells and a vote of the warp makes the value NaN.  Each pair's band follows
its own lengths (:func:`sdtw.band.pair_offsets`); a NaN anywhere on a pair's reachable cells
(every cell of its table and band) gives NaN.  A step whose strip lies inside the table and
the band runs its cells with no test per cell.
"""

from __future__ import annotations

import functools
import math

import torch
from numba import cuda, float32, float64

from sdtw.band import band_radius
from sdtw.cuda._launch import numba_stream as _stream
from sdtw.cuda._launch import numba_view as _arr
from sdtw.cuda.kernels.jit import device, kernel
from sdtw.cuda.kernels.primitives import (
    any_lane,
    exp2,
    fmin32,
    fmin64,
    from_prev_lane,
    log2,
    narrow,
)

__all__ = ["MAX_ROWS", "table_values"]

LANES = 32
#: Rows per lane of the widest kernel: N up to 32 x 32 = 1024 rows per pair.
MAX_ROWS = 32
INF = math.inf
LOG2E = 1.0 / math.log(2.0)


@device
def _soft_cell(diag, up, left, cost):
    """``cost + softmin(diag, up, left)`` in scaled base-2 units, float32 ``ex2``/``lg2`` of
    float64 differences (one of the three terms is the minimum's: 1, no exponential)."""
    lo1, hi1 = (diag, up) if diag <= up else (up, diag)
    m, o1 = (left, lo1) if left < lo1 else (lo1, left)
    s = float32(1.0) + exp2(narrow(m - o1)) + exp2(narrow(m - hi1))
    v = cost + m - float64(log2(s))
    return v if m != INF else INF  # (all three unreachable; a NaN stays NaN)


@device
def _soft_cell_wide(diag, up, left, cost):
    """:func:`_soft_cell` in float64 throughout."""
    lo1, hi1 = (diag, up) if diag <= up else (up, diag)
    m, o1 = (left, lo1) if left < lo1 else (lo1, left)
    s = 1.0 + math.exp2(m - o1) + math.exp2(m - hi1)
    v = cost + m - math.log2(s)
    return v if m != INF else INF


@functools.cache
def _kernel(rows: int, exact: bool, wide: bool, d1: bool):
    """The kernel for ``rows`` rows per lane; ``exact``: DTW, else soft-DTW; ``wide``: float64
    inputs; ``d1``: one feature (the lane's inputs in registers)."""
    T = float64 if (wide or not exact) else float32  # the DP values' type
    soft = _soft_cell_wide if wide else _soft_cell
    fmin = fmin64 if T is float64 else fmin32

    @device
    def cost(X, Y, xi, yj, i, j, D, xk, yv, scale):
        """Cell (i, j)'s squared Euclidean cost (``xk``, ``yv``: its inputs for D = 1)."""
        if d1:
            return (xk - yv) * (xk - yv)
        c = T(0.0)
        for d in range(D):
            t = (T(X[xi, i, d]) - T(Y[yj, j, d])) * T(scale)
            c += t * t
        return c

    @kernel
    def table(X, Y, I, J, XL, YL, radius, scale, back, out):
        p = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        xch = cuda.shared.array((2, LANES), float64)  # (the simulator's shuffles only)
        xi, yj = I[p], J[p]
        n, m = XL[xi], YL[yj]
        # the band of this pair (sdtw.band.pair_offsets)
        lo = hi = n + m
        if radius >= 0:
            r = min(radius, n + m)
            lo, hi = r + max(n - m, 0), r + max(m - n, 0)
        D = X.shape[2]
        i0 = lane * rows
        used = (n + rows - 1) // rows  # lanes with rows
        inf = T(INF)
        R = cuda.local.array(rows, T)
        xs = cuda.local.array(rows, T)
        for k in range(rows):
            R[k] = inf
            xs[k] = T(X[xi, min(i0 + k, n - 1), 0]) * T(scale) if d1 else T(0.0)
        bot = inf  # this lane's bottom row at the last column it computed
        up_prev = inf
        last = inf  # the pair's last cell, in the lane that holds row n - 1
        nan = False  # (exact DTW: a NaN cost on one of this lane's cells)
        # the next column's input, loaded a step ahead (off the step's dependency chain)
        y_next = T(Y[yj, 0, 0]) * T(scale) if (d1 and lane == 0) else T(0.0)
        for s in range(m + used - 1):
            up = from_prev_lane(bot, xch, s & 1)
            j = s - lane
            diag = up_prev
            if lane == 0:
                up = inf
                diag = T(0.0) if j == 0 else inf
            up_prev = up
            yv = y_next
            if d1 and 0 <= j + 1 and j + 1 < m:
                y_next = T(Y[yj, j + 1, 0]) * T(scale)
            if 0 <= j and j < m and i0 < n:
                # the whole strip inside the table and the band: no test per cell
                if i0 + rows <= n and j - hi <= i0 and i0 + rows - 1 <= j + lo:
                    for k in range(rows):
                        left = R[k]
                        c = cost(X, Y, xi, yj, i0 + k, j, D, xs[k], yv, scale)
                        if exact:
                            # (the hardware minimum skips a NaN: the flag keeps it)
                            v = c + fmin(fmin(diag, up), left)
                            nan |= c != c
                        else:
                            v = soft(diag, up, left, c)
                        diag = left
                        up = v
                        R[k] = v
                else:
                    for k in range(rows):
                        i = i0 + k
                        left = R[k]
                        ok = i < n and -lo <= j - i and j - i <= hi
                        c = cost(X, Y, xi, yj, min(i, n - 1), j, D, xs[k], yv, scale)
                        if exact:
                            v = c + fmin(fmin(diag, up), left) if ok else inf
                            nan |= ok and c != c
                        else:
                            v = soft(diag, up, left, c) if ok else inf
                        diag = left
                        up = v
                        R[k] = v
                bot = R[rows - 1]
                if j == m - 1:
                    for k in range(rows):
                        if i0 + k == n - 1:
                            last = R[k]
        if exact and any_lane(nan):
            last = T(math.nan)
        if i0 <= n - 1 and n - 1 < i0 + rows:
            out[p] = last * back

    return table


def _rows(N: int) -> int:
    """Rows per lane for tables of up to N rows: the smallest power of two with 32 of them
    covering N."""
    rows = 1
    while rows * LANES < N:
        rows *= 2
    return rows


def table_values(
    X: torch.Tensor,
    Y: torch.Tensor,
    i: torch.Tensor,
    j: torch.Tensor,
    x_lengths: torch.Tensor | None,
    y_lengths: torch.Tensor | None,
    gamma: float,
    bandwidth: float | None,
) -> torch.Tensor | None:
    """Values (P,) of the pairs ``(X[i[p]], Y[j[p]])``: soft-DTW at ``gamma`` > 0, exact DTW
    at 0, squared Euclidean cost, each pair's band from its own lengths (``x_lengths`` (B1,),
    ``y_lengths`` (B2,), or None: full length).  X (B1, N, D) and Y (B2, M, D) float32 or
    float64 on the GPU (the CPU under the simulator); the result in X's dtype.  None where N
    exceeds ``32 * MAX_ROWS`` (the caller gathers the rows instead).  No autograd."""
    B1, N, D = X.shape
    B2, M = Y.shape[:2]
    if N > LANES * MAX_ROWS or X.dtype not in (torch.float32, torch.float64):
        return None
    dev = X.device
    P = i.numel()
    out = torch.empty(P, dtype=X.dtype, device=dev)
    if P == 0:
        return out
    exact = gamma == 0.0
    wide = X.dtype == torch.float64
    xl = torch.full((B1,), N, dtype=torch.int64, device=dev) if x_lengths is None else x_lengths
    yl = torch.full((B2,), M, dtype=torch.int64, device=dev) if y_lengths is None else y_lengths
    scale = 1.0 if exact else math.sqrt(LOG2E / gamma)
    back = 1.0 if exact else gamma / LOG2E
    fn = _kernel(_rows(N), exact, wide, D == 1)
    args = [X.detach().contiguous(), Y.detach().contiguous(), i.contiguous(), j.contiguous()]
    args += [xl.to(dev, torch.int64).contiguous(), yl.to(dev, torch.int64).contiguous()]
    radius = band_radius(N, M, bandwidth)
    fn[P, LANES, _stream(dev)](*[_arr(a) for a in args], radius, scale, back, _arr(out))
    return out
