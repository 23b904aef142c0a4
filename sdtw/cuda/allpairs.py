"""Forward-only all-pairs kernels: soft-DTW and exact DTW values of table pairs, read in place.

:func:`sdtw.cdist` without gradients asks the backend for the values of pairs
``(X[I[p]], Y[J[p]])``; these kernels compute them with no (P, N, M) cost or table and no
gathered copy of the rows.  A pair is ``width`` consecutive lanes of a warp (``32 // width``
pairs a warp): its lane ``l`` owns a strip of ``rows`` consecutive rows (a compile-time
constant, so the strip's DP values and, for D = 1, its inputs stay in registers) and sweeps
the columns as a skewed wavefront: at step ``s`` it computes column ``s - l`` for its rows top
to bottom, taking the row above its strip from lane ``l - 1`` by one warp shuffle of that
lane's bottom value of the step before (its value of the step before that is the diagonal).  A
pair takes ``M + ceil(N / rows) - 1`` steps, and a warp the steps of its longest pair; many
pairs in flight, not one pair's latency, set the throughput.  :func:`_shape` picks ``rows``
and ``width`` from N: more rows a lane spread a step's fixed work over more cells.

The squared Euclidean cost is computed per cell from the inputs.  Soft-DTW runs in the
scaled base-2 units of :mod:`sdtw.cuda.kernels.recurrence` (the inputs scaled by
``sqrt(log2(e) / gamma)``, so the costs arrive scaled), float64 values with float32
hardware ``ex2``/``lg2`` of float64 differences for float32 inputs, float64 throughout for
float64 inputs.  Exact DTW (gamma = 0) is a min-plus recurrence in the inputs' dtype, two
hardware minimums and an add per cell.  Neither recurrence carries a NaN cost to the last cell
on its own (the hardware minimum skips a NaN; a soft minimum whose other terms are +inf gives
+inf), so each lane flags a NaN cost of its cells and a pair's flags meet in shared memory: a
NaN anywhere on a pair's reachable cells (every cell of its table and band) gives NaN.  Each
pair's band follows its own lengths (:func:`sdtw.band.pair_offsets`).  A step whose strip
lies inside the table and the band runs its cells with no test per cell.
"""

from __future__ import annotations

import functools
import math

import torch
from numba import cuda, float32, float64, int32

from sdtw.band import band_radius
from sdtw.cuda._launch import numba_stream as _stream
from sdtw.cuda._launch import numba_view as _arr
from sdtw.cuda.kernels.jit import device, kernel
from sdtw.cuda.kernels.primitives import (
    exp2,
    fmin32,
    fmin64,
    from_prev_lane,
    log2,
    narrow,
    sync_band,
)

__all__ = ["MAX_ROWS", "table_values"]

LANES = 32
#: Rows per lane of the widest kernel: N up to 32 x 32 = 1024 rows per pair.
MAX_ROWS = 32
#: The fewest rows per lane where N allows, by (exact, float64 inputs, D = 1): tables of at
#: most 16 x this rows (the padded N) put several pairs in a warp.  More rows a lane spread a
#: step's fixed work (the shuffle, the step's tests) over more cells, until the strip's
#: registers cost occupancy or spill (on an H100: exact DTW with D = 1 fastest with 32,
#: float64 too; soft-DTW and D > 1 with 8).
MIN_ROWS = {
    (True, False, True): 32,
    (True, True, True): 32,
    (True, False, False): 8,
    (True, True, False): 8,
    (False, False, True): 8,
    (False, True, True): 8,
    (False, False, False): 8,
    (False, True, False): 8,
}
#: One-warp blocks an SM must hold, by (exact, float64 inputs, rows per lane): ptxas caps the
#: registers to fit them (soft-DTW's float32 strips otherwise take a few registers past a step
#: of occupancy).
MIN_BLOCKS = {(False, False, 8): 24, (False, False, 16): 16}
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
def _kernel(rows: int, width: int, exact: bool, wide: bool, d1: bool, blocks: int | None = None):
    """The kernel for ``rows`` rows per lane and ``width`` lanes per pair (``32 // width``
    pairs per warp, a block); ``exact``: DTW, else soft-DTW; ``wide``: float64 inputs; ``d1``:
    one feature (the lane's inputs in registers); ``blocks``: one-warp blocks an SM must hold
    (ptxas caps the registers to fit them), or None."""
    T = float64 if (wide or not exact) else float32  # the DP values' type
    soft = _soft_cell_wide if wide else _soft_cell
    fmin = fmin64 if T is float64 else fmin32
    per_warp = LANES // width

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

    @device
    def shape(I, J, XL, YL, p, P):
        """Pair ``p``'s rows, columns and lanes with rows (0, 0, 0 past the last pair)."""
        if p >= P:
            return 0, 0, 0
        n = XL[I[p]]
        return n, YL[J[p]], (n + rows - 1) // rows

    @kernel(launch_bounds=None if blocks is None else (LANES, blocks))
    def table(X, Y, I, J, XL, YL, radius, scale, back, out):
        lane = cuda.threadIdx.x
        sl = lane % width  # this lane's place in its pair's lanes
        first = cuda.blockIdx.x * per_warp  # the warp's first pair
        p = first + lane // width
        P = out.shape[0]
        xch = cuda.shared.array((2, LANES), float64)  # (the simulator's shuffles only)
        flag = cuda.shared.array(LANES, int32)  # (a NaN cost on the pair's cells)
        n, m, used = shape(I, J, XL, YL, p, P)
        xi, yj = (I[p], J[p]) if p < P else (0, 0)
        # every lane of the warp runs the steps of its longest pair (the shuffles need all)
        steps = m + used - 1
        if per_warp > 1:
            steps = 0
            for g in range(per_warp):
                gn, gm, gu = shape(I, J, XL, YL, first + g, P)
                if gn > 0 and gm + gu - 1 > steps:
                    steps = gm + gu - 1
        # the band of this pair (sdtw.band.pair_offsets)
        lo = hi = n + m
        if radius >= 0:
            r = min(radius, n + m)
            lo, hi = r + max(n - m, 0), r + max(m - n, 0)
        D = X.shape[2]
        i0 = sl * rows
        inf = T(INF)
        R = cuda.local.array(rows, T)
        xs = cuda.local.array(rows, T)
        for k in range(rows):
            R[k] = inf
            xs[k] = T(X[xi, min(i0 + k, n - 1), 0]) * T(scale) if (d1 and n > 0) else T(0.0)
        if sl == 0:
            flag[lane] = 0
        sync_band()
        bot = inf  # this lane's bottom row at the last column it computed
        up_prev = inf
        last = inf  # the pair's last cell, in the lane that holds row n - 1
        nan = False  # (a NaN cost on one of this lane's cells)
        # the next column's input, loaded a step ahead (off the step's dependency chain)
        y_next = T(Y[yj, 0, 0]) * T(scale) if (d1 and sl == 0 and m > 0) else T(0.0)
        for s in range(steps):
            up = from_prev_lane(bot, xch, s & 1)
            j = s - sl
            diag = up_prev
            if sl == 0:
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
                            # (up, from the cell above, last: one minimum and the add on the
                            # chain)
                            v = c + fmin(up, fmin(diag, left))
                        else:
                            v = soft(diag, up, left, c)
                        nan |= c != c
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
                            v = c + fmin(up, fmin(diag, left)) if ok else inf
                        else:
                            v = soft(diag, up, left, c) if ok else inf
                        nan |= ok and c != c
                        diag = left
                        up = v
                        R[k] = v
                bot = R[rows - 1]
                if j == m - 1:
                    for k in range(rows):
                        if i0 + k == n - 1:
                            last = R[k]
        if nan:
            flag[lane - sl] = 1
        sync_band()
        if flag[lane - sl] != 0:
            last = T(math.nan)
        if p < P and i0 <= n - 1 and n - 1 < i0 + rows:
            out[p] = last * back

    return table


def _shape(N: int, exact: bool, wide: bool, d1: bool) -> tuple[int, int]:
    """(rows per lane, lanes per pair) for tables of up to N rows: the fewest rows (a power of
    two) with 32 lanes covering N, but at least :data:`MIN_ROWS` rows where N allows, so that
    short pairs share a warp and a step's fixed work spreads over more cells."""
    rows = 1
    while rows * LANES < N:
        rows *= 2
    floor = 1
    while floor < min(MIN_ROWS[exact, wide, d1], N):
        floor *= 2
    rows = max(rows, floor)
    width = 1
    while width * rows < N:
        width *= 2
    return rows, width


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
    rows, width = _shape(N, exact, wide, D == 1)
    fn = _kernel(rows, width, exact, wide, D == 1, MIN_BLOCKS.get((exact, wide, rows)))
    args = [X.detach().contiguous(), Y.detach().contiguous(), i.contiguous(), j.contiguous()]
    args += [xl.to(dev, torch.int64).contiguous(), yl.to(dev, torch.int64).contiguous()]
    radius = band_radius(N, M, bandwidth)
    blocks = -(-P // (LANES // width))
    fn[blocks, LANES, _stream(dev)](*[_arr(a) for a in args], radius, scale, back, _arr(out))
    return out
