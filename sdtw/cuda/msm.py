"""Soft-MSM on the GPU: the ``"softmsm"`` recurrence's CUDA kernels.

The edge costs are computed in the kernels from x and y (:mod:`sdtw.msm_reference` has the
maths); for float64 inputs ``R`` (P = B D, N, M) float64 is kept in global memory between the
forward and the backward, for float32 inputs each cell's three edge weights (float32; "Kept
weights" below).  R, its candidates and the occupancies are float64; the transcendentals are float64
(libdevice) for float64 inputs and the hardware's float32 ``ex2`` / ``lg2`` / ``rcp`` /
``rsqrt`` of float32 roundings of float64 differences for float32 inputs (the wavefront
kernels: :func:`_row_functions`), as soft-DTW's float32 kernels do.

Wavefront kernels (N up to ``MAX_N`` = 2048).  One block of ``W`` warps per (pair, channel)
task; its thread ``t`` owns the strip of ``ROWS`` consecutive rows ``t ROWS, ...,
t ROWS + ROWS - 1`` (``ROWS`` a compile-time power of two with ``32 W ROWS >= N``).  ``W`` =
1 when there are tasks enough to give every SM sub-partition a warp, else one per 32 rows
(rounded up to a power of two) up to 16 (N <= 512: a row a thread) or 4 warps (longer;
:func:`_shape`): the arithmetic is
float64 (libdevice ``exp``/``log1p``, a few hundred float64 instructions a cell), so a warp
runs at the 16 float64 lanes of its sub-partition, and a few tasks need several warps each
to use more than one sub-partition of their SM and to shorten a step's chain of rows.  The
row loops are unrolled (:func:`_unrolled`), so the strip's values on the
steps' dependency chains (``R``, and ``G`` in the backward) sit in registers; its samples
``x_i`` and its ``x`` gradients, off those chains, in shared memory (one column per thread);
``x_{i-1}`` of its first row in a register.
Neighbouring threads hand values over through shared memory, double-buffered by step parity,
one block barrier per step (a barrier serves the warps' boundaries; the barrier and the
waits it puts on a step are a large part of a step's time: ``docs/measures.md``).

* Forward, a skewed wavefront from the top left: at step ``s`` thread ``t`` computes column
  ``j = s - t`` for its rows top to bottom,
  ``R[i, j] = softmin(R[i-1, j-1] + (x_i - y_j)^2, R[i-1, j] + C(x_i, x_{i-1}, y_j),
  R[i, j-1] + C(y_j, y_{j-1}, x_i))``; ``R[i, j-1]`` is the thread's own value of the step
  before, the row above its strip is thread ``t - 1``'s bottom value of the step before, and
  the value received a step earlier is the diagonal.  ``y_j`` is loaded a step before its
  use (steps ahead: a step before the costs that read it).  Each cell is stored to ``R``.
* Backward, the mirror wavefront from the bottom right: thread ``t`` computes column
  ``j = (m - 1) - s + (L - t)`` (``L`` the last thread with rows: the threads below go first),
  its rows bottom to top.  A cell's ``G = d value / d R[i, j]`` is the sum of what its three
  successors pushed into it; once it is known, each edge into the cell carries the occupancy
  ``o = G[i, j] exp((R[i, j] - R[pred] - cost) / gamma)``, which is pushed to ``G`` of the
  edge's tail and, times the cost's partial derivatives, to the gradients of the samples the
  cost reads.  What is pushed into the row above the strip (the top row's up edge, and its
  match edge of the step before) goes to thread ``t - 1`` as one value; what goes left waits
  in the thread's registers for the next step; ``R`` is read from global memory a step
  before the step that needs it (steps ahead: before the weights that need it; the first
  columns also by the weights' set-up).
  Gradients: the thread accumulates its rows' ``x_i`` and writes them at the end (what its
  top row's up edges owe ``x_{i0-1}`` goes to thread ``t - 1`` at the end);
  ``y_j``'s partial sum travels up the threads with the wavefront (thread ``t`` adds its
  rows' part and hands it to thread ``t - 1``, which reaches column ``j`` a step later;
  thread 0 writes it), and what a step owes ``y_{j-1}`` waits for the thread's next step.  No
  atomics: the gradients are deterministic.  No ``G`` in memory.

A task takes ``M + ceil(N / ROWS) - 1`` steps in each direction.

Steps ahead (:func:`_depth`; up to 2 rows a thread two columns, 4 rows one, where the
registers hold them): a column's costs (forward: each row's three candidates' costs) and
edge weights with the costs' partial derivatives (backward) are computed that many steps
before its cells, after the step has written what it hands over; the step's chain is then
the softmin of three sums (forward) or ``G``'s products and sums (backward) alone, with the
later column's work no longer between it and the hand-over.  One column ahead is as fast as
two: that work is throughput (conversions and transcendentals, 35 a cell backward, on one
pipe), not latency a warp waits for; helper warps computing it beside the threads were no
faster either.  The same operations on the same values: the same bits at every depth in the
simulator; on a GPU the compiler fuses a multiply-add in the step that it cannot fuse across
steps (a rounding's difference: within 1e-13 relative).

Bands (:func:`_bands`: where the tasks leave SMs idle, e.g. B = 32 on an H100's 132): a task's
rows split into bands of ``32 W ROWS`` rows, a block each, so that a task's steps run on
several SMs with fewer cells each.  What crosses a band's edge goes through global memory as
float64 bits in int64 buffers pre-filled with ``SENTINEL`` (a value says by itself whether it
has been written, as in :mod:`sdtw.cuda.kernels.handoff`): forward, the band's last row, one
value per column, which the band below's first warp reads a group of 32 columns at a time,
one group ahead; backward, what the band's first row pushes into the row above and gy's
partial sums at each column (right to left), read the same way by the band above's last
thread's warp, and at the end what the first row's up edges owe ``x`` of the row above.
Blocks take tickets (an atomic counter) and derive their (band, task) from them, top band
first forward and bottom band first backward, so a block only waits for a block that started
before it, in any schedule (and in the simulator, which runs blocks one at a time).  The
cells' arithmetic and every sum's order are those of one block of the same rows per thread:
the same bits (with kept weights the gradients' parts, which torch sums, are as many as the
bands' warps: within rounding).

Kept weights (float32 inputs with gradients, the wavefront kernels where the kept kernels'
shared memory fits, :func:`_kept_fits`, on GPUs with ``cp.async``; ``kept``): the backward
above spends most of a step on the later columns' weights and costs' partial derivatives,
work that does not depend on the step before but sits in the steps of a chain.  So:

* a pass over every cell in parallel (:func:`_kept_costs`) writes its up and left edge
  costs (float32, as the forward's own function computes them) and 0 for the match (+inf in
  all three outside the band) where the weights will go;
* the forward (:func:`_kept_forward`) copies them and ``y_j`` to shared memory steps ahead
  (the match's cost from ``x_i - y_j`` in float64, ``x`` in registers) and stores
  each cell's three edge weights ``exp((R[i, j] - candidate) / gamma)`` (float32; from the
  softmin's own sum, :func:`_softmin3_split_fast`) over them;
* the backward (:func:`_kept_backward`) is ``G``'s wavefront alone, the same hand-overs as
  above: ``G[i, j]`` the sum of its successors' pushes, each incoming edge's occupancy
  ``G w`` stored over its weight;
* a gradients pass over every cell in parallel (:func:`_kept_gradients`) multiplies the
  occupancies by the costs' partial derivatives: a thread's rows' ``x`` sums in registers,
  ``y``'s column sums down a warp's lanes by shuffles, parts that torch sums (no atomics: the
  same bits on every run).

A step of the two wavefronts is a chain: the barrier, the hand-over's load, the cells, the
next hand-over's store.  Everything else a step does (the weights' or occupancies' stores,
the copies of later columns, reading the next column's values from shared memory and, in the
forward, its match and left candidates) is placed after the store or before the barrier,
since a warp issues in order; offsets are 32-bit from each band's view of the array
(``u32``, ``band_view``), keys advanced by a counter: 64-bit index work had been most of a
step's instructions.

The array is laid out by (task, band, key, edge, row of the strip, thread) with ``key = (j +
th) mod M`` (:func:`_kept_index`), so that the threads of a step, on columns ``s - th``, touch
consecutive addresses.  It takes 12 bytes a cell (over the rows of the blocks' strips)
against ``R``'s 8; the values are within a few 1e-9 (relative) of the float64 reference (the
match's difference is taken in float64 in the forward, as with ``R`` kept: rounded to
float32 in the costs pass it cost small gammas their accuracy), the gradients as those of
``R`` kept (``overrides(msm_kept=False)``).  The cell passes run in ``chunks`` of steps
(:func:`_chunks`) where the tasks' warps are too few to fill the GPU.

Float32 inputs with gradients whose tables come from the host with one band (or one radius)
take none of this module's kernels by default: :mod:`sdtw.cuda.msm_seam` runs them on
soft-DTW's band kernels (bands of 32 rows a warp, hand-overs by shuffles, no block barrier),
with a costs pass before and a gradients pass after.

Diagonal kernels (any N; the fallback past ``MAX_N`` rows), simple and slow: one block per task
sweeps its table by anti-diagonals (the cells of ``i + j = k`` depend only on diagonals
``k - 1`` and ``k - 2``), the threads striding over a diagonal's cells, a block barrier between
diagonals, ``G`` in global memory too; then one thread per sample sums the occupancies of the
edges whose costs read it.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from numba import cuda, float32, float64, int32, int64

from sdtw.cuda import msm_seam
from sdtw.cuda._launch import launch
from sdtw.cuda.config import current_overrides
from sdtw.cuda.kernels.geometry import SENTINEL
from sdtw.cuda.kernels.handoff import take_ticket
from sdtw.cuda.kernels.jit import SIMULATED, device, kernel
from sdtw.cuda.kernels.primitives import (
    any_lane,
    as_bits,
    band_view,
    below,
    cp_async,
    cp_async8,
    cp_commit,
    cp_wait_group,
    from_bits,
    from_prev_lane,
    narrow,
    poll,
    st_if,
    sync_band,
    u32,
)
from sdtw.cuda.msm_cells import (
    LOG2E,
    _edge_gradients,
    _exp_scaled,
    _softmin3,
    _softmin3_fast,
    _softmin3_split_fast,
    _transition,
    _transition_fast,
    _weights_fast,
)
from sdtw.cuda.tables import device_tables

__all__ = ["MAX_N", "msm_cuda"]

INF = math.inf
WARP = 32
#: Rows per thread of the widest wavefront kernel (ptxas, sm_90, 16 rows: float64 178 / 212
#: registers a thread forward / backward, no stack; the float32 backward 255 and a 68-byte
#: spill, its gate computed without branches; the 32-row backward spilled more).
MAX_ROWS = 16
#: The wavefront kernels' most rows: 16 rows per thread in 4 warps.
MAX_N = 4 * WARP * MAX_ROWS


@device
def _exp64(z):
    return math.exp(z)


@device
def _inside(i, j, n, m, lo, hi):
    return 0 <= i and i < n and 0 <= j and j < m and -lo <= j - i and j - i <= hi


# ---------------------------------------------------------------------------------------------
# Wavefront kernels: one block of W warps per task, ROWS rows per thread.


@functools.cache
def _unrolled(row, rows: int, upward: bool):
    """``row(k, args, carry) -> carry`` for the strip's rows ``k = 0 .. rows - 1`` in turn (from
    the bottom if ``upward``), unrolled: each call has a constant ``k`` once inlined, so the
    strip's local arrays are indexed by constants and stay in registers (NVVM does not unroll
    a loop this long itself)."""
    if rows == 1:
        return row
    half = _unrolled(row, rows // 2, upward)
    h = rows // 2
    first, second = (h, 0) if upward else (0, h)

    @device
    def strip(k, args, carry):
        return half(k + second, args, half(k + first, args, carry))

    return strip


@device
def _to_unit_sum(w_m, w_u, w_l):
    """The three weights scaled to sum 1 (all 0 for a cell of no weight): float32 inputs'
    backward recomputes a cell's weights from ``R``, whose float32 ``lg2`` is not the inverse
    of the weights' ``ex2``, so that their sum is 1 only within a float32 rounding; unscaled,
    the excess compounds along the path (the gradients' error grew as N: 1e-4 at N = 2048)."""
    s = w_m + w_u + w_l
    u = 1.0 / s if s > 0.0 else 0.0
    return w_m * u, w_u * u, w_l * u


@functools.cache
def _row_functions(fast: bool, depth: int = 1, store: bool = True) -> tuple:
    """The row updates of the wavefront kernels, with the float32 transcendentals (``fast``,
    float32 inputs; ``ig`` is then ``log2(e) / gamma``) or float64 ones; those that work
    ``depth`` columns ahead keep ``depth`` columns of costs (forward) or weights (backward),
    the step's first.  Without ``store`` the forward's cells are not written to ``R`` (a
    forward without gradients)."""
    transition = _transition_fast if fast else _transition
    softmin3 = _softmin3_fast if fast else _softmin3
    expo = _exp_scaled if fast else _exp64

    @device
    def _store(R, task, i, j, k, n, inside, diag, up, left, cm, cu, cl, gamma, ig):
        """Cell ``(i, j)``'s value from its candidates, stored to ``R`` (+inf outside the
        table or band); returns the value."""
        v = softmin3(diag + cm, up + cu, left + cl, gamma, ig)
        if not inside:
            v = INF
        if store and i < n:
            R[task, i, j] = v
        return v

    @device
    def _forward_row(k, args, carry):
        """Row ``i0 + k`` of column ``j``: ``R[i, j]`` from the row above's ``(diag, up)`` and the
        sample above, ``xp``; returns the next row's ``(diag, up, xp)``."""
        R, task, i0, j, n, lo, hi, Rs, xs, th, yv, yp, c, gamma, ig = args
        diag, up, xp = carry
        i = i0 + k
        xi = xs[k, th]
        left = Rs[k]
        inside = i < n and -lo <= j - i and j - i <= hi
        dm = up_c = left_c = 0.0
        if inside:
            dm = xi - yv
            up_c = transition(xi, xp, yv, c, gamma, ig)[0]
            left_c = transition(yv, yp, xi, c, gamma, ig)[0]
        v = _store(R, task, i, j, k, n, inside, diag, up, left, dm * dm, up_c, left_c, gamma, ig)
        Rs[k] = v
        return left, v, xi

    @device
    def _costs_row(k, args, xp):
        """Row ``i0 + k``'s candidates' costs (match, up, left) at a column (``yv = y_j``,
        ``yp = y_{j-1}``) into ``C[q, :, k]``, the ``C[1 .. moves]`` moved one place down
        first; returns the row's sample (the next row's ``x_{i-1}``)."""
        xs, th, yv, yp, c, gamma, ig, C, q, moves = args
        for t in range(moves):
            for u in range(3):
                C[t, u, k] = C[t + 1, u, k]
        xi = xs[k, th]
        dm = xi - yv
        C[q, 0, k] = dm * dm
        C[q, 1, k] = transition(xi, xp, yv, c, gamma, ig)[0]
        C[q, 2, k] = transition(yv, yp, xi, c, gamma, ig)[0]
        return xi

    @device
    def _forward_cell(k, args, carry):
        """:func:`_forward_row` with the costs of column ``j`` computed steps before (in
        ``C[0]``): the step's chain of ``R`` only."""
        R, task, i0, j, n, lo, hi, Rs, gamma, ig, C = args
        diag, up = carry
        i = i0 + k
        left = Rs[k]
        inside = i < n and -lo <= j - i and j - i <= hi
        v = _store(R, task, i, j, k, n, inside, diag, up, left, C[0, 0, k], C[0, 1, k],
                   C[0, 2, k], gamma, ig)  # fmt: skip
        Rs[k] = v
        return left, v

    @device
    def _backward_row(k, args, carry):
        """Row ``i = i0 + k`` of column ``j``: ``G[i, j]``, the occupancies of the cell's three
        incoming edges (pushed to ``G`` of their tails and to the gradients); ``carry``: what the
        row below pushed up and to the diagonal, what the strip's up edges owe ``x_{i0-1}``, and
        the step's sums for ``y_j`` and ``y_{j-1}``.  ``Rs``, ``Rn``: the strip's ``R`` of
        columns ``j`` and ``j - 1`` (``R_above``, ``R_above_next``: the row above's)."""
        R, task, i0, j, n, m, lo, hi, Rs, Rn, Gs, xs, gxs, th = args[:14]
        R_above, R_above_next, x_above, yj, yp, c, gamma, ig = args[14:]
        up_in, match_in, gx_above, gyj, gyp = carry
        i = i0 + k
        r = Rs[k]
        r_up = Rs[k - 1] if k > 0 else R_above
        left = Rn[k]
        diag = Rn[k - 1] if k > 0 else R_above_next
        xi = xs[k, th]
        xp = xs[k - 1, th] if k > 0 else x_above
        if i == 0 and j == 0:
            diag = 0.0  # (R[0, 0] = 0 + (x_0 - y_0)^2: a match from (-1, -1))
        o_match = o_up = o_left = 0.0
        if i < n and -lo <= j - i and j - i <= hi:
            g = Gs[k] + up_in
            if i == n - 1 and j == m - 1:
                g += 1.0
            dm = xi - yj
            w_m = expo((r - diag - dm * dm) * ig)
            cost, d_v, d_p, d_o = transition(xi, xp, yj, c, gamma, ig)
            w_u = expo((r - r_up - cost) * ig)
            cost, e_v, e_p, e_o = transition(yj, yp, xi, c, gamma, ig)
            w_l = expo((r - left - cost) * ig)
            if fast:
                w_m, w_u, w_l = _to_unit_sum(w_m, w_u, w_l)
            o_match = g * w_m
            o_up = g * w_u
            o_left = g * w_l
            g_match = o_match * 2.0 * dm
            gxs[k, th] += g_match + o_up * d_v + o_left * e_o
            if k > 0:
                gxs[k - 1, th] += o_up * d_p
            else:
                gx_above += o_up * d_p
            gyj += o_up * d_o + o_left * e_v - g_match
            gyp += o_left * e_p
        Gs[k] = o_left + match_in  # (i, j - 1)'s, from its left and its match successors
        Rs[k] = left
        # the next step's column j - 1, loaded a step ahead (row k + 1 is done with Rn[k] too)
        Rn[k] = R[task, i, j - 2] if (i < n and j >= 2) else INF
        return o_up, o_match, gx_above, gyj, gyp

    @device
    def _weights(W, q, k, i, j, n, lo, hi, r, r_up, left, diag, xi, xp, yj, yp, c, gamma, ig):
        """``W[q, :, k]``: cell ``(i, j)``'s edge weights ``exp((R - R_tail - cost) / gamma)``
        (match, up, left; 0 outside the table or band), ``x_i - y_j`` and its costs' partial
        derivatives (up's ``dv, dp, do``, left's), from ``R`` of the cell, the one above, the
        left and the diagonal."""
        if i == 0 and j == 0:
            diag = 0.0  # (R[0, 0] = 0 + (x_0 - y_0)^2: a match from (-1, -1))
        if not (0 <= j and i < n and -lo <= j - i and j - i <= hi):
            r = -INF  # (every weight 0, without inf - inf)
        dm = xi - yj
        cost_u, d_v, d_p, d_o = transition(xi, xp, yj, c, gamma, ig)
        cost_l, e_v, e_p, e_o = transition(yj, yp, xi, c, gamma, ig)
        w_m = expo((r - diag - dm * dm) * ig)
        w_u = expo((r - r_up - cost_u) * ig)
        w_l = expo((r - left - cost_l) * ig)
        if fast:
            w_m, w_u, w_l = _to_unit_sum(w_m, w_u, w_l)
        W[q, 0, k] = w_m
        W[q, 1, k] = w_u
        W[q, 2, k] = w_l
        W[q, 3, k] = dm
        W[q, 4, k] = d_v
        W[q, 5, k] = d_p
        W[q, 6, k] = d_o
        W[q, 7, k] = e_v
        W[q, 8, k] = e_p
        W[q, 9, k] = e_o

    @device
    def _first_weights_row(k, args, xp):
        """Row ``i0 + k``'s :func:`_weights` at column ``j`` (``m - 1 - j`` columns before the
        last) into ``W``, ``R`` read here; returns the row's sample (the next row's
        ``x_{i-1}``)."""
        R, task, i0, j, n, lo, hi, xs, th, W, q, yj, yp, c, gamma, ig = args
        i = i0 + k
        xi = xs[k, th]
        if 0 <= j:  # (else: a column that never comes)
            r = R[task, i, j] if i < n else INF
            r_up = R[task, i - 1, j] if (0 < i and i <= n) else INF
            left = R[task, i, j - 1] if (i < n and j >= 1) else INF
            diag = R[task, i - 1, j - 1] if (0 < i and i <= n and j >= 1) else INF
            _weights(W, q, k, i, j, n, lo, hi, r, r_up, left, diag, xi, xp, yj, yp, c, gamma, ig)
        return xi

    @device
    def _backward_chain(k, args, carry):
        """:func:`_backward_row` with the cell's weights and partials computed steps before
        (``W``, the step's column's ``W[0]``): ``G``'s sums and products, the occupancies
        into ``O`` (the ``x`` gradients' terms wait for :func:`_backward_next`, after the
        step's hand-over)."""
        i0, j, n, m, Gs, W, O = args
        up_in, match_in, gyj, gyp = carry
        i = i0 + k
        g = Gs[k] + up_in
        if i == n - 1 and j == m - 1:
            g += 1.0
        o_match = g * W[0, 0, k]
        o_up = g * W[0, 1, k]
        o_left = g * W[0, 2, k]
        g_match = o_match * 2.0 * W[0, 3, k]
        gyj += o_up * W[0, 6, k] + o_left * W[0, 7, k] - g_match
        gyp += o_left * W[0, 8, k]
        Gs[k] = o_left + match_in  # (i, j - 1)'s, from its left and its match successors
        O[0, k] = g_match
        O[1, k] = o_up
        O[2, k] = o_left
        return o_up, o_match, gyj, gyp

    @device
    def _backward_next(k, args, gx_above):
        """Row ``i0 + k``'s ``x`` gradients' terms of the step (:func:`_backward_chain`'s
        ``O``, in :func:`_backward_row`'s order); the later columns' weights moved one place
        down, then its :func:`_weights` at column ``jw = j - depth`` (``ya = y_jw``,
        ``yb = y_{jw-1}``) from ``Rs``, ``Rn``: the strip's ``R`` of columns ``jw`` and
        ``jw - 1`` (``A1``, ``A2``: the row above's); loads column ``jw - 2`` for the step
        after.  Returns what the strip's up edges owe ``x_{i0-1}``."""
        R, task, i0, j, n, lo, hi, Rs, Rn, xs, gxs, th, W, O = args[:14]
        A1, A2, x_above, ya, yb, c, gamma, ig = args[14:]
        i = i0 + k
        o_up = O[1, k]
        gxs[k, th] += O[0, k] + o_up * W[0, 4, k] + O[2, k] * W[0, 9, k]
        if k > 0:
            gxs[k - 1, th] += o_up * W[0, 5, k]
        else:
            gx_above += o_up * W[0, 5, k]
        for t in range(depth - 1):
            for u in range(10):
                W[t, u, k] = W[t + 1, u, k]
        xi = xs[k, th]
        xp = xs[k - 1, th] if k > 0 else x_above
        r_up = Rs[k - 1] if k > 0 else A1
        diag = Rn[k - 1] if k > 0 else A2
        jw = j - depth
        _weights(W, depth - 1, k, i, jw, n, lo, hi, Rs[k], r_up, Rn[k], diag, xi, xp, ya, yb,
                 c, gamma, ig)  # fmt: skip
        Rs[k] = Rn[k]  # (row k + 1 is done with Rs[k] and Rn[k])
        Rn[k] = R[task, i, jw - 2] if (i < n and jw >= 2) else INF
        return gx_above

    return (_forward_row, _backward_row, _forward_cell, _costs_row, _backward_chain,
            _backward_next, _first_weights_row)  # fmt: skip


@device
def _take_group(bnd, base, col0, limit, pref, grp):
    """The calling warp's group of 32 hand-over values, columns ``col0 + lane`` of the row at
    flat index ``base`` of ``bnd`` (float64 bits, ``SENTINEL`` until written; columns
    ``>= limit`` read as +inf): ``pref`` holds each lane's bits read a group earlier; wait
    until all are written, store them in the shared ``grp`` and return the bits of the next
    group, read now so that its latency overlaps this group's steps."""
    lane = cuda.threadIdx.x % WARP
    col = col0 + lane
    mine = col < limit
    while any_lane(mine and pref == SENTINEL):
        if mine and pref == SENTINEL:
            pref = poll(bnd, base + col)
    sync_band()  # (the warp is done with the group before)
    grp[lane] = from_bits(pref) if mine else INF
    sync_band()
    return poll(bnd, base + min(col + WARP, limit - 1))


@device
def _wait_value(bnd, idx):
    """``bnd[idx]`` as a float64 once written (one thread spins on it)."""
    v = poll(bnd, idx)
    while v == SENTINEL:
        v = poll(bnd, idx)
    return from_bits(v)


@device
def _band_task(hand, tk, bands, upward):
    """This block's (band, task) from its ticket (:func:`take_ticket` on ``hand``, ``tk`` a
    shared cell): the tasks' top bands first, or bottom bands first if ``upward``."""
    t = take_ticket(hand, tk)
    tasks = cuda.gridDim.x // bands
    band = t // tasks
    return (bands - 1 - band if upward else band), t % tasks


@functools.cache
def _wavefront(
    rows: int,
    warps: int,
    fast: bool = False,
    split: bool = False,
    depth: int = 0,
    store: bool = True,
) -> tuple:
    """The (forward, backward) kernels for ``rows`` rows per thread, ``warps`` warps per
    block, float32 transcendentals if ``fast`` (:func:`_row_functions`); with ``split``, a
    task's rows in bands of ``32 warps rows`` rows, a block each (:func:`_bands`); a column's
    costs (forward) and edge weights (backward) computed ``depth`` steps before its cells (0:
    in the step).  ``R`` kept between them (float64; without ``store``, a forward without
    gradients, not written: any (P, N, M) array will do, even (1, 1, 1)); kept weights have
    kernels of their own (:func:`_kept_forward`)."""
    T = WARP * warps
    BR = T * rows  # (a band's rows)
    ahead = depth > 0
    A = max(depth, 1)  # (the local arrays' columns)
    (forward_row, backward_row, forward_cell, costs_row, backward_chain, backward_next,
     first_w) = _row_functions(fast, A, store)  # fmt: skip
    # (ahead: a step's chain first, then its hand-over, then the next column's costs or
    # weights, in that order in the code: a warp issues in order)
    down = _unrolled(forward_cell if ahead else forward_row, rows, False)
    costs = _unrolled(costs_row, rows, False)
    up_strip = _unrolled(backward_chain if ahead else backward_row, rows, True)
    up_next = _unrolled(backward_next, rows, True)
    first_weights = _unrolled(first_w, rows, False)
    scale = LOG2E if fast else 1.0

    @kernel
    def forward(x, y, c, gamma, ns, ms, los, his, R, values, bnd, bands):
        th = cuda.threadIdx.x
        if split:  # (bands in ticket order: a band only waits for the one above, started first)
            band, task = _band_task(bnd, cuda.shared.array(1, int64), bands, False)
        else:
            band, task = 0, cuda.blockIdx.x
        D = x.shape[2]
        Mx = y.shape[1]
        b, d = task // D, task % D
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        top = band * BR
        if top >= n:
            return  # (the whole block: a band past this pair's rows)
        ig = scale / gamma
        i0 = top + th * rows
        used = min((n - top + rows - 1) // rows, T)  # threads with rows
        hand = cuda.shared.array((2, T), float64)  # each thread's bottom row, by step parity
        Rs = cuda.local.array(rows, float64)  # the strip's column j - 1, then j
        xs = cuda.shared.array((rows, T), float64)  # (off the chain: registers for Rs)
        grp = cuda.shared.array(WARP, float64)  # the row above the band, a group of columns
        for k in range(rows):
            Rs[k] = INF
            xs[k, th] = x[b, min(i0 + k, n - 1), d]
        x_above = x[b, max(min(i0, n) - 1, 0), d]
        # split: the band above's last row arrives through bnd, and this band's goes below
        fed = split and band > 0 and th < WARP  # (warp 0, for thread 0)
        feeds = split and th == T - 1 and top + BR < n
        row_in = (task * bands + band) * Mx
        row_out = row_in + Mx
        pref = poll(bnd, row_in + min(th % WARP, m - 1)) if fed else 0
        bot = INF  # this thread's bottom row at the last column it computed
        up_prev = INF
        yv = 0.0
        y_next = y[b, 0, d] if th == 0 else 0.0
        C = cuda.local.array((A, 3, rows), float64)  # (ahead: the next columns' costs)
        if ahead:  # (columns 0 .. A - 1's costs; y_{j+A-1}, y_{j+A} of step 0's j = -th)
            costs(0, (xs, th, y[b, 0, d], y[b, 0, d], c, gamma, ig, C, 0, 0), x_above)
            if A > 1:
                y1 = y[b, min(1, m - 1), d]
                costs(0, (xs, th, y1, y[b, 0, d], c, gamma, ig, C, 1, 0), x_above)
            y_next = y[b, min(max(A - 1 - th, 0), m - 1), d]
            y_after = y[b, min(max(A - th, 0), m - 1), d]
        hand[0, th] = hand[1, th] = INF  # (ahead: written by active steps only)
        for s in range(m + used - 1):
            if not ahead:
                hand[s & 1, th] = bot
            cuda.syncthreads()
            j = s - th
            if fed and (s & (WARP - 1)) == 0 and s < m:
                pref = _take_group(bnd, row_in, s, m, pref, grp)
            if th == 0:
                if split and band > 0:
                    up = grp[s & (WARP - 1)] if s < m else INF
                    diag = up_prev
                else:
                    up = INF
                    diag = 0.0 if j == 0 else INF  # (R[0, 0] = (x_0 - y_0)^2 exactly)
            else:
                up = hand[s & 1, th - 1]
                diag = up_prev
            up_prev = up
            if ahead:
                yv = y_next  # (y_{j+A-1}, y_{j+A}: any finite value where clamped)
                y_next = y_after
                y_after = y[b, min(max(j + A + 1, 0), m - 1), d]
            else:
                yp = yv  # y_{j-1}: any finite value at j = 0 (its edge's tail is +inf)
                yv = y_next
                if 0 <= j + 1 and j + 1 < m:
                    y_next = y[b, j + 1, d]
            if 0 <= j and j < m and i0 < n:
                if ahead:
                    down(0, (R, task, i0, j, n, lo, hi, Rs, gamma, ig, C), (diag, up))
                else:
                    args = (R, task, i0, j, n, lo, hi, Rs, xs, th, yv, yp, c, gamma, ig)
                    down(0, args, (diag, up, x_above))
                bot = Rs[rows - 1]
                if split:
                    st_if(bnd, row_out + j, as_bits(bot), feeds)
                if ahead:  # (the next step's hand-over now, then column j + A's costs)
                    hand[(s + 1) & 1, th] = bot
                    cargs = (xs, th, y_next, yv, c, gamma, ig, C, A - 1, A - 1)
                    costs(0, cargs, x_above)
        for k in range(rows):  # (the last column's R[n - 1, m - 1]: the task's value)
            if i0 + k == n - 1:
                values[task] = Rs[k]

    @kernel
    def backward(x, y, c, gamma, ns, ms, los, his, R, gx, gy, bnd_g, bnd_y, bnd_x, bands):
        th = cuda.threadIdx.x
        if split:  # (bottom band first: a band only waits for the one below, started first)
            band, task = _band_task(bnd_x, cuda.shared.array(1, int64), bands, True)
        else:
            band, task = 0, cuda.blockIdx.x
        D = x.shape[2]
        Mx = y.shape[1]
        b, d = task // D, task % D
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        top = band * BR
        if top >= n:
            return
        ig = scale / gamma
        i0 = top + th * rows
        last = min((n - top + rows - 1) // rows, T) - 1  # the last thread with rows
        mine = i0 < n
        hand = cuda.shared.array((2, T), float64)  # pushed into the row above, by step parity
        hand_y = cuda.shared.array((2, T), float64)  # gy's partial sums, by step parity
        Rs = cuda.local.array(rows, float64)  # R of the strip's column j, then j - 1
        Rn = cuda.local.array(rows, float64)  # R of the strip's column j - 1, then j - 2
        Gs = cuda.local.array(rows, float64)  # pushed into the strip's column j so far
        # (off the steps' dependency chains, in shared memory: registers for the rest)
        xs = cuda.shared.array((rows, T), float64)
        gxs = cuda.shared.array((rows, T), float64)
        grp_g = cuda.shared.array(WARP, float64)  # from the band below, a group of columns
        grp_y = cuda.shared.array(WARP, float64)
        sh = depth  # (Rs, Rn hold columns j - depth, j - depth - 1)
        for k in range(rows):
            i = i0 + k
            Rs[k] = R[task, i, m - 1 - sh] if (i < n and m >= 1 + sh) else INF
            Rn[k] = R[task, i, m - 2 - sh] if (i < n and m >= 2 + sh) else INF
            Gs[k] = 0.0
            xs[k, th] = x[b, min(i, n - 1), d]
            gxs[k, th] = 0.0
        above = 0 < i0 and i0 <= n
        x_above = x[b, i0 - 1, d] if above else 0.0
        R_above = R[task, i0 - 1, m - 1 - sh] if (above and m >= 1 + sh) else INF
        R_above_next = R[task, i0 - 1, m - 2 - sh] if (above and m >= 2 + sh) else INF
        W = cuda.local.array((A, 10, rows), float64)  # (ahead: the next columns' weights)
        O = cuda.local.array((3, rows), float64)  # (ahead: the step's x gradients' terms)
        if ahead:  # (columns m - 1 .. m - A)
            yl = (y[b, m - 1, d], y[b, max(m - 2, 0), d], y[b, max(m - 3, 0), d])
            for q in range(A):
                wargs = (R, task, i0, m - 1 - q, n, lo, hi, xs, th, W, q, yl[q], yl[q + 1], c,
                         gamma, ig)  # fmt: skip
                first_weights(0, wargs, x_above)
        gx_above = 0.0  # what the top row's up edges owe x_{i0-1}
        # split: what the band below pushes into this band's last row and gy's partial sums
        # arrive through bnd_g / bnd_y, columns right to left; this band's go to the band above
        fed_band = split and top + BR < n
        fed = fed_band and th // WARP == last // WARP  # (the last thread's warp)
        feeds = split and band > 0 and th == 0
        row_in = (task * bands + band) * Mx
        row_out = row_in - Mx
        lane_col = min(th % WARP, m - 1)
        pref_g = poll(bnd_g, row_in + lane_col) if fed else 0
        pref_y = poll(bnd_y, row_in + lane_col) if fed else 0
        j0 = (m - 1) + last - th  # the column at step 0
        if ahead:  # (y_{j-A}, y_{j-A-1} at step s, clamped)
            ya = y[b, min(max(j0 - A, 0), m - 1), d]
            yb = y[b, min(max(j0 - A - 1, 0), m - 1), d]
        else:
            ya = y[b, j0, d] if 0 <= j0 and j0 < m else 0.0
            yb = y[b, j0 - 1, d] if 0 <= j0 - 1 and j0 - 1 < m else 0.0
        send = 0.0  # pushed into row i0 - 1 at this step's column (thread - 1's next step's)
        match_top = 0.0  # the top row's match push of the step before (into the same cell)
        gy_send = 0.0  # gy at this step's column: this thread's part and the ones' below
        gy_carry = 0.0  # what the step before owed y_{j-1}: this step's y_j
        for s in range(m + last):
            if not ahead:  # (ahead: written by active steps, as soon as known)
                hand[s & 1, th] = send
                hand_y[s & 1, th] = gy_send
            cuda.syncthreads()
            if fed and (s & (WARP - 1)) == 0 and s < m:
                pref_g = _take_group(bnd_g, row_in, s, m, pref_g, grp_g)
                pref_y = _take_group(bnd_y, row_in, s, m, pref_y, grp_y)
            G_below = gy_below = 0.0
            if th < last:
                G_below = hand[s & 1, th + 1]
                gy_below = hand_y[s & 1, th + 1]
            elif fed_band and s < m:  # (the last thread, column m - 1 - s)
                G_below = grp_g[s & (WARP - 1)]
                gy_below = grp_y[s & (WARP - 1)]
            j = j0 - s
            yj, yp = ya, yb
            ya = yb
            if ahead:
                yb = y[b, min(max(j - A - 2, 0), m - 1), d]
            else:
                yb = y[b, j - 2, d] if 0 <= j - 2 and j - 2 < m else 0.0
            send = 0.0
            gy_send = 0.0
            if 0 <= j and j < m and mine:
                inputs = (R_above, R_above_next, x_above, yj, yp, c, gamma, ig)
                if ahead:
                    carry = (G_below, 0.0, gy_below + gy_carry, 0.0)
                    o_up, o_match, gyj, gyp = up_strip(0, (i0, j, n, m, Gs, W, O), carry)
                else:
                    strip = (R, task, i0, j, n, m, lo, hi, Rs, Rn, Gs, xs, gxs, th)
                    carry = (G_below, 0.0, gx_above, gy_below + gy_carry, 0.0)
                    o_up, o_match, gx_above, gyj, gyp = up_strip(0, (*strip, *inputs), carry)
                send = o_up + match_top
                match_top = o_match
                gy_send = gyj
                gy_carry = gyp
                if ahead:  # (the next step's hand-over now)
                    hand[(s + 1) & 1, th] = send
                    hand_y[(s + 1) & 1, th] = gyj
                if th == 0 and band == 0:
                    gy[b, j, d] = gyj
                if split:  # (columns right to left: index m - 1 - j)
                    st_if(bnd_g, row_out + (m - 1 - j), as_bits(send), feeds)
                    st_if(bnd_y, row_out + (m - 1 - j), as_bits(gyj), feeds)
                if ahead:  # (then column j - A's weights)
                    strip = (R, task, i0, j, n, lo, hi, Rs, Rn, xs, gxs, th, W, O)
                    gx_above = up_next(0, (*strip, *inputs), gx_above)
                R_above = R_above_next
                jn = j - 2 - sh  # (the column after Rn's)
                R_above_next = R[task, i0 - 1, jn] if (above and jn >= 0) else INF
        p = (m + last) & 1
        hand[p, th] = gx_above
        cuda.syncthreads()
        if split:
            st_if(bnd_x, task * bands + band - 1, as_bits(gx_above), feeds)
        if mine:
            extra = hand[p, th + 1] if th < last else 0.0  # what thread + 1 owes the last row
            if fed_band and th == last:
                extra = _wait_value(bnd_x, task * bands + band)
            for k in range(rows):
                i = i0 + k
                if i < n:
                    gx[b, i, d] = gxs[k, th] + (extra if k == rows - 1 else 0.0)

    return forward, backward


# ---------------------------------------------------------------------------------------------
# Kept weights (float32 inputs): the forward stores each cell's three edge weights; the
# backward's wavefront is then G's sums and products alone, and the gradients a pass of their
# own over the occupancies, every cell in parallel.


def _kept_index(task, band, bands, Mx, j, th, e, k, rows, T):
    """Where cell ``(band * T rows + th rows + k, j)`` of ``task`` keeps its weight (then
    occupancy) ``e`` (match, up, left) in the flat float32 array of ``tasks * bands * Mx * 3 *
    T * rows`` entries: by (task, band, key, e, k, th), ``key = (j + th) mod Mx``, so that a
    band's threads, at step ``s`` on columns ``s - th``, touch one key: coalesced."""
    key = (j + th) % Mx
    return ((((task * bands + band) * Mx + key) * 3 + e) * rows + k) * T + th


@functools.cache
def _kept_costs(rows: int, warps: int):
    """Every cell's up and left edge costs into the kept array's slots of their weights
    (float32, as :func:`_transition_fast` computes them) and 0 into the match's (the forward
    adds it to its float64 match candidate); +inf in all three outside the band and on the
    strips' rows past ``n`` (so the forward tests no cell): a block per (task, band, chunk
    of steps), mapped as :func:`_kept_gradients`."""
    T = WARP * warps
    BR = T * rows
    R1 = rows + 1
    inf32 = float32(INF)

    @device
    def cost_row(k, args, carry):
        W, at, i0, n, lo, hi, j, xv, yj, yp, c, gamma, ig = args
        i = i0 + k
        cm = cu = cl = inf32
        if i < n and -lo <= j - i and j - i <= hi:
            cm = float32(0.0)
            cu = narrow(_transition_fast(xv[k + 1], xv[k], yj, c, gamma, ig)[0])
            cl = narrow(_transition_fast(yj, yp, xv[k + 1], c, gamma, ig)[0])
        o = at + k * T
        W[u32(o)] = cm
        W[u32(o + BR)] = cu
        W[u32(o + 2 * BR)] = cl
        return carry

    cells = _unrolled(cost_row, rows, False)

    @kernel
    def costs(x, y, c, gamma, ns, ms, los, his, Wt, bands, chunks, span):
        th = cuda.threadIdx.x
        lane = th % WARP
        blk = cuda.blockIdx.x
        chunk, band = blk % chunks, (blk // chunks) % bands
        task = blk // (chunks * bands)
        D, Mx = x.shape[2], y.shape[1]
        b, d = task // D, task % D
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        top = band * BR
        i0 = top + th * rows
        if top >= n or i0 >= n:
            return
        ig = LOG2E / gamma
        xv = cuda.local.array(R1, float64)  # x_{i0-1} .. x_{i0+rows-1}
        xv[0] = x[b, max(i0 - 1, 0), d]
        for k in range(rows):
            xv[k + 1] = x[b, min(i0 + k, n - 1), d]
        s0 = chunk * span
        W = band_view(Wt, (task * bands + band) * (Mx * 3 * BR))
        key = (s0 + th - lane) % Mx  # (the key of column s - lane: every lane's, up by 1)
        for s in range(s0, min(s0 + span, m + WARP - 1)):
            j = s - lane
            if 0 <= j and j < m:
                yj = y[b, j, d]
                yp = y[b, j - 1, d] if j > 0 else yj
                cells(0, (W, key * (3 * BR) + th, i0, n, lo, hi, j, xv, yj, yp, c, gamma, ig), 0)
            key = key + 1
            key = 0 if key == Mx else key

    return costs


@functools.cache
def _kept_copies(rows: int, warps: int):
    """``copies(0, (S, s, W, w), carry)``: a strip's three values a row (of :func:`_kept_index`'s
    layout, from offset ``w`` of the band's view ``W``) copied to the shared ``S`` at ``s``
    by asynchronous copies, for :func:`_kept_forward` and :func:`_kept_backward`."""
    T = WARP * warps
    BR = T * rows

    @device
    def copy_row(k, args, carry):
        S, so, W, at = args
        for e in range(3):
            cp_async(S, u32(so + e * BR + k * T), W, u32(at + e * BR + k * T))
        return carry

    return _unrolled(copy_row, rows, False)


@functools.cache
def _kept_forward(rows: int, warps: int, split: bool, slots: int):
    """The forward of the kept weights: :func:`_wavefront`'s forward (bands, hand-overs and
    columns as there) on the costs of :func:`_kept_costs`' pass, storing each cell's three
    edge weights ``exp((R[i, j] - candidate) / gamma)`` (float32, from the softmin's own sum,
    :func:`_softmin3_split_fast`) over its costs.

    A column's costs are copied to shared memory (``slots`` columns) by
    asynchronous copies ``slots - 1`` steps before its cells (a block barrier waits for loads
    into registers, not for those).  At the end of a step the thread prepares the next
    column's match and left candidates, ``R[i-1, j-1] + (x_i - y_j)^2`` and ``R[i, j-1] +
    C_left`` (each operand known then: the row above's value came with this step's
    hand-over), so that after the next barrier only the up candidate and the soft minimum
    wait for the hand-over.  ``x_i`` sits in registers and ``y_j`` comes with the costs (by
    a copy of its own), so the match's difference is float64; a step tests no cell (a cell
    outside the band has +inf costs: its value +inf, its weights 0); its offsets are 32-bit
    (``u32``, from the band's own view of the array), since a step's integer work, issued in
    order by one warp, had outweighed its arithmetic."""
    T = WARP * warps
    BR = T * rows
    STEP = 3 * BR  # (a key's entries)
    A = slots - 1  # (steps ahead: a slot is free once its column's candidates are prepared)
    CN, HN, YN = slots * STEP, 2 * T, slots * T  # (shared arrays' lengths: constants)
    wait_costs = cp_wait_group(A - 1)

    @device
    def prep_row(k, args, diag):
        """Row ``k``'s next column: its up cost and its match and left candidates from the
        shared costs at ``cs`` and ``y_j`` (``yj``; the match's difference in float64, as the
        reference's); ``diag``: the row above's value at this column.  Returns the row's own
        (the next row's ``diag``)."""
        Cs, cs, Rs, Ca, Cu, Cc, Xs, yj = args
        o = cs + k * T
        dm = Xs[k] - yj
        Cu[k] = float64(Cs[u32(o + BR)])
        left = Rs[k]
        Ca[k] = (diag + dm * dm) + float64(Cs[u32(o)])  # (+0, or +inf outside the band)
        Cc[k] = left + float64(Cs[u32(o + 2 * BR)])
        return left

    @device
    def cell_row(k, args, up):
        """Row ``k``'s value from its prepared candidates and the row above's ``up``; the
        weights' parts into ``P``, ``Q``."""
        Ca, Cu, Cc, Rs, P, Q, gamma, ig = args
        v, P[0, k], P[1, k], P[2, k], Q[k] = _softmin3_split_fast(
            Ca[k], up + Cu[k], Cc[k], gamma, ig
        )
        Rs[k] = v
        return v

    @device
    def store_row(k, args, carry):
        """Row ``k``'s weights, after the step's hand-over (a warp issues in order: the
        reciprocal and the stores would delay it)."""
        W, at, P, Q = args
        wm, wu, wl = _weights_fast(P[0, k], P[1, k], P[2, k], Q[k])
        o = at + k * T
        W[u32(o)] = wm
        W[u32(o + BR)] = wu
        W[u32(o + 2 * BR)] = wl
        return carry

    prep = _unrolled(prep_row, rows, False)
    down = _unrolled(cell_row, rows, False)
    stores = _unrolled(store_row, rows, False)
    copies = _kept_copies(rows, warps)

    @kernel
    def forward(x, yf, ns, ms, Wt, values, bnd, bands, D, Mx, gamma):
        th = cuda.threadIdx.x
        if split:  # (bands in ticket order: a band only waits for the one above, started first)
            band, task = _band_task(bnd, cuda.shared.array(1, int64), bands, False)
        else:
            band, task = 0, cuda.blockIdx.x
        b, d = task // D, task % D
        n, m = ns[b], ms[b]
        top = band * BR
        if top >= n:
            return  # (the whole block: a band past this pair's rows)
        ig = LOG2E / gamma
        i0 = top + th * rows
        mine = i0 < n
        used = min((n - top + rows - 1) // rows, T)  # threads with rows
        hand = cuda.shared.array(HN, float64)  # each thread's bottom row, by step parity
        Cs = cuda.shared.array(CN, float32)  # the next columns' costs
        Ys = cuda.shared.array(YN, float64)  # their y_j, a slot per thread
        Xs = cuda.local.array(rows, float64)  # the strip's x_i
        for k in range(rows):
            Xs[k] = x[b, min(i0 + k, n - 1), d]
        Y = band_view(yf, (b * Mx) * D + d)  # (y_j at j D)
        grp = cuda.shared.array(WARP, float64)  # the row above the band, a group of columns
        Rs = cuda.local.array(rows, float64)  # the strip's column j - 1, then j
        Ca = cuda.local.array(rows, float64)  # the next column's match candidates
        Cu = cuda.local.array(rows, float64)  # its up costs
        Cc = cuda.local.array(rows, float64)  # its left candidates
        P = cuda.local.array((3, rows), float32)  # the step's weights' parts
        Q = cuda.local.array(rows, int32)
        for k in range(rows):
            Rs[k] = INF
        W = band_view(Wt, (task * bands + band) * (Mx * STEP))
        fed = split and band > 0 and th < WARP  # (warp 0, for thread 0)
        feeds = split and th == T - 1 and top + BR < n
        row_in = (task * bands + band) * Mx
        row_out = row_in + Mx
        pref = poll(bnd, row_in + min(th % WARP, m - 1)) if fed else 0
        if mine:  # (columns 0 .. A - 1: steps th ..; column j's key is (j + th) mod Mx)
            for q in range(A):
                if q < m:
                    at = ((th + q) % Mx) * STEP + th
                    copies(0, (Cs, ((th + q) % slots) * STEP + th, W, at), 0)
                    cp_async8(Ys, u32(((th + q) % slots) * T + th), Y, u32(q * D))
                cp_commit()
        if th == 0:  # (column 0 at step 0: R[0, 0] = 0 + (x_0 - y_0)^2 in the top band)
            wait_costs()
            yj = Ys[u32(th)]
            prep(0, (Cs, 0, Rs, Ca, Cu, Cc, Xs, yj), 0.0 if band == 0 else INF)
        hand[th] = INF
        hand[T + th] = INF
        key = 0  # (s mod Mx: every thread's key at step s)
        key_a = A % Mx  # ((s + A) mod Mx)
        sl = 0  # (s mod slots: the step's slot; s + A's is the one before it, s + 1's after)
        for s in range(m + used - 1):
            nxt = 0 if sl == slots - 1 else sl + 1
            cuda.syncthreads()
            p = s & 1
            j = s - th
            if fed and (s & (WARP - 1)) == 0 and s < m:
                pref = _take_group(bnd, row_in, s, m, pref, grp)
            up = INF  # (R[i0 - 1, j]: the row above the strip at this column)
            if th > 0:
                up = hand[u32(p * T + th - 1)]
            elif split and band > 0 and s < m:
                up = grp[s & (WARP - 1)]
            if mine and below(j, m):
                down(0, (Ca, Cu, Cc, Rs, P, Q, gamma, ig), up)
                bot = Rs[rows - 1]
                hand[u32((1 - p) * T + th)] = bot  # (the next step's hand-over first)
                stores(0, (W, key * STEP + th, P, Q), 0)
                if split:
                    st_if(bnd, row_out + j, as_bits(bot), feeds)
                if j + A < m:
                    pv = slots - 1 if sl == 0 else sl - 1
                    copies(0, (Cs, pv * STEP + th, W, key_a * STEP + th), 0)
                    cp_async8(Ys, u32(pv * T + th), Y, u32((j + A) * D))
                cp_commit()
            if mine and below(j + 1, m):  # (the next column's candidates, before the barrier)
                wait_costs()  # (column j + 1's copies; those of the next A - 1 may fly)
                yj = Ys[u32(nxt * T + th)]
                prep(0, (Cs, nxt * STEP + th, Rs, Ca, Cu, Cc, Xs, yj), up)
            sl = nxt
            key = key + 1
            key = 0 if key == Mx else key
            key_a = key_a + 1
            key_a = 0 if key_a == Mx else key_a
        for k in range(rows):  # (the last column's R[n - 1, m - 1]: the task's value)
            if i0 + k == n - 1:
                values[task] = Rs[k]

    return forward


@functools.cache
def _kept_backward(rows: int, warps: int, split: bool, slots: int):
    """The backward of the kept weights: the mirror wavefront of :func:`_wavefront`'s backward
    (bands, hand-overs and columns as there), each cell's ``G`` the sum of its successors'
    pushes and each incoming edge's occupancy ``G w`` stored over its weight.  A column's
    weights are copied to shared memory (``slots`` columns) by asynchronous copies ``slots -
    1`` steps before its cells (a block barrier waits for loads into registers, not for
    those) and read into registers at the end of the step before, so that after a barrier
    only ``G``'s sums and products wait for the hand-over (as :func:`_kept_forward`).
    32-bit offsets from the band's view of the array; the last cell's seed ``G = 1`` set
    before the steps, not tested a cell."""
    T = WARP * warps
    BR = T * rows
    STEP = 3 * BR
    A = slots - 1  # (steps ahead: a slot is free once its column's weights are read)
    CN, HN = slots * STEP, 2 * T  # (shared arrays' lengths: constants)
    wait_weights = cp_wait_group(A - 1)

    @device
    def read_row(k, args, carry):
        """Row ``k``'s weights of the next column, from the shared ``Ws`` at ``ws``."""
        Ws, ws, Wr = args
        for e in range(3):
            Wr[e, k] = float64(Ws[u32(ws + e * BR + k * T)])
        return carry

    @device
    def chain_row(k, args, carry):
        Gs, Wr, Ob = args
        up_in, match_in = carry
        g = Gs[k] + up_in
        o_match = g * Wr[0, k]
        o_up = g * Wr[1, k]
        o_left = g * Wr[2, k]
        Ob[0, k], Ob[1, k], Ob[2, k] = o_match, o_up, o_left
        Gs[k] = o_left + match_in  # (i, j - 1)'s, from its left and its match successors
        return o_up, o_match

    @device
    def out_row(k, args, carry):
        """Row ``k``'s occupancies stored over its weights, after the step's hand-over
        (their float32 conversions would delay it: a warp issues in order)."""
        W, at, Ob = args
        o = at + k * T
        W[u32(o)] = Ob[0, k]
        W[u32(o + BR)] = Ob[1, k]
        W[u32(o + 2 * BR)] = Ob[2, k]
        return carry

    loads = _kept_copies(rows, warps)
    reads = _unrolled(read_row, rows, False)
    chain = _unrolled(chain_row, rows, True)
    out = _unrolled(out_row, rows, False)

    @kernel
    def backward(D, Mx, ns, ms, Wt, bnd_g, bands):
        th = cuda.threadIdx.x
        if split:  # (bottom band first: a band only waits for the one below, started first)
            band, task = _band_task(bnd_g, cuda.shared.array(1, int64), bands, True)
        else:
            band, task = 0, cuda.blockIdx.x
        b = task // D
        n, m = ns[b], ms[b]
        top = band * BR
        if top >= n:
            return
        i0 = top + th * rows
        last = min((n - top + rows - 1) // rows, T) - 1  # the last thread with rows
        mine = i0 < n
        hand = cuda.shared.array(HN, float64)  # pushed into the row above, by step parity
        Gs = cuda.local.array(rows, float64)  # pushed into the strip's column j so far
        Ws = cuda.shared.array(CN, float32)  # the next columns' weights
        Wr = cuda.local.array((3, rows), float64)  # the step's weights
        Ob = cuda.local.array((3, rows), float64)  # the step's occupancies
        grp_g = cuda.shared.array(WARP, float64)  # from the band below, a group of columns
        for k in range(rows):  # (the last cell's G: 1 and nothing pushed into it)
            Gs[k] = 1.0 if i0 + k == n - 1 else 0.0
        W = band_view(Wt, (task * bands + band) * (Mx * STEP))
        fed_band = split and top + BR < n
        fed = fed_band and th // WARP == last // WARP  # (the last thread's warp)
        feeds = split and band > 0 and th == 0
        row_in = (task * bands + band) * Mx
        row_out = row_in - Mx
        pref_g = poll(bnd_g, row_in + min(th % WARP, m - 1)) if fed else 0
        j0 = (m - 1) + last - th  # the column at step 0
        key = (m - 1 + last) % Mx  # ((j + th) mod Mx at step s: every thread's, down by 1)
        if mine:  # (columns m - 1 .. m - A: steps last - th ..)
            for q in range(A):
                if q < m:
                    at = ((m - 1 - q + th) % Mx) * STEP + th
                    loads(0, (Ws, ((last - th + q) % slots) * STEP + th, W, at), 0)
                cp_commit()
        if th == last:  # (its first column at step 0)
            wait_weights()
            reads(0, (Ws, th, Wr), 0)
        key_a = (key + Mx - A % Mx) % Mx  # (the key of column j - A)
        match_top = 0.0  # the top row's match push of the step before (into the same cell)
        sl = 0  # (s mod slots: the step's slot; s + A's is the one before it, s + 1's after)
        for s in range(m + last):
            nxt = 0 if sl == slots - 1 else sl + 1
            cuda.syncthreads()
            p = s & 1
            if fed and (s & (WARP - 1)) == 0 and s < m:
                pref_g = _take_group(bnd_g, row_in, s, m, pref_g, grp_g)
            G_below = 0.0
            if th < last:
                G_below = hand[u32(p * T + th + 1)]
            elif fed_band and s < m:  # (the last thread, column m - 1 - s)
                G_below = grp_g[s & (WARP - 1)]
            j = j0 - s
            if mine and below(j, m):
                o_up, o_match = chain(0, (Gs, Wr, Ob), (G_below, 0.0))
                send = o_up + match_top
                match_top = o_match
                hand[u32((1 - p) * T + th)] = send  # (the next step's hand-over now)
                out(0, (W, key * STEP + th, Ob), 0)
                if split:  # (columns right to left: index m - 1 - j)
                    st_if(bnd_g, row_out + (m - 1 - j), as_bits(send), feeds)
                if j >= A:
                    ws = (slots - 1 if sl == 0 else sl - 1) * STEP + th
                    loads(0, (Ws, ws, W, key_a * STEP + th), 0)
                cp_commit()
            if mine and below(j - 1, m):  # (the next column's weights, before the barrier)
                wait_weights()  # (column j - 1's copies; those of the next A - 1 may fly)
                reads(0, (Ws, nxt * STEP + th, Wr), 0)
            sl = nxt
            key = Mx - 1 if key == 0 else key - 1
            key_a = Mx - 1 if key_a == 0 else key_a - 1

    return backward


@functools.cache
def _kept_gradients(rows: int, warps: int):
    """The gradients from the kept occupancies: a block per (task, band, chunk of steps), its
    threads on the wavefront's rows and columns (thread ``th`` at step ``s`` on column
    ``s - lane``, so that a warp reads one key: :func:`_kept_index`) but every step
    independent of the one before.  A cell's edges' occupancies times their costs' partial
    derivatives (:func:`_transition_fast`) go to its rows' ``x`` sums (a thread's own; what
    its top row's up edges owe ``x_{i0-1}`` to a slot of its own) and to ``y``'s: a column's
    sum runs down the warp's lanes by shuffles, a step a lane, and the last lane stores the
    warp's part.  Parts are stored, never added to (``gxp`` (B, 2 chunks, N, D), ``gyp``
    (B, bands chunks warps, Mx, D), zeroed before): the caller's sums are deterministic."""
    T = WARP * warps
    BR = T * rows
    R1 = rows + 1  # (a local array's length: a constant)

    @device
    def fetch_row(k, args, carry):
        W, at, On = args
        for e in range(3):
            On[e, k] = W[u32(at + e * BR + k * T)]
        return carry

    @device
    def cell_row(k, args, carry):
        Oc, i0, n, xv, gxl, yj, yp, c, gamma, ig = args
        gx_above, col, prev_col = carry
        if i0 + k < n:
            o_match = float64(Oc[0, k])
            o_up = float64(Oc[1, k])
            o_left = float64(Oc[2, k])
            if o_match != 0.0 or o_up != 0.0 or o_left != 0.0:
                xi, xp = xv[k + 1], xv[k]
                to_x, to_xp, to_y, to_yp = _edge_gradients(
                    o_match, o_up, o_left, xi, xp, yj, yp, c, gamma, ig
                )
                gxl[k] += to_x
                if k > 0:
                    gxl[k - 1] += to_xp
                else:
                    gx_above += to_xp
                col += to_y
                prev_col += to_yp
        return gx_above, col, prev_col

    cells = _unrolled(cell_row, rows, False)
    fetch = _unrolled(fetch_row, rows, False)

    @kernel
    def gradients(x, y, c, gamma, ns, ms, Wt, gxp, gyp, bands, chunks, span):
        th = cuda.threadIdx.x
        lane, w = th % WARP, th // WARP
        blk = cuda.blockIdx.x
        chunk, band = blk % chunks, (blk // chunks) % bands
        task = blk // (chunks * bands)
        D, Mx = x.shape[2], y.shape[1]
        b, d = task // D, task % D
        n, m = ns[b], ms[b]
        top = band * BR
        if top >= n:
            return
        i0 = top + th * rows
        ig = LOG2E / gamma
        xv = cuda.local.array(R1, float64)  # x_{i0-1} .. x_{i0+rows-1}
        gxl = cuda.local.array(rows, float64)
        xv[0] = x[b, max(min(i0, n) - 1, 0), d]
        for k in range(rows):
            xv[k + 1] = x[b, min(i0 + k, n - 1), d]
            gxl[k] = 0.0
        xch = cuda.shared.array((2, T), float64)  # (the simulator's shuffles)
        xch2 = cuda.shared.array((2, T), float64)
        W = band_view(Wt, (task * bands + band) * (Mx * 3 * BR))
        slot = (chunk * bands + band) * (T // WARP) + w  # (chunk-major: the bits of one band)
        s0 = chunk * span
        key = (s0 + th - lane) % Mx  # (the key of column s - lane: every lane's, up by 1)
        s1 = min(s0 + span, m + WARP - 1)
        gx_above = 0.0
        run = 0.0  # this lane's column's sum over the warp's rows above and its own
        # (a step's occupancies and y_j loaded a step before: no barrier waits for them here)
        On = cuda.local.array((3, rows), float32)
        Oc = cuda.local.array((3, rows), float32)
        jn = s0 - lane
        if 0 <= jn and jn < m and i0 < n:
            fetch(0, (W, key * (3 * BR) + th, On), 0)
        yn = y[b, min(max(jn, 0), m - 1), d]
        yq = y[b, min(max(jn - 1, 0), m - 1), d]  # (y of the column before)
        for s in range(s0, s1):
            j = s - lane
            yj = yn
            yp = yq if j > 0 else yn
            for e in range(3):
                for k in range(rows):
                    Oc[e, k] = On[e, k]
            jn = j + 1
            key = key + 1
            key = 0 if key == Mx else key
            if 0 <= jn and jn < m and i0 < n:
                fetch(0, (W, key * (3 * BR) + th, On), 0)
            yq = yn
            yn = y[b, min(max(jn, 0), m - 1), d]
            col = prev_col = 0.0
            if 0 <= j and j < m and i0 < n:
                args = (Oc, i0, n, xv, gxl, yj, yp, c, gamma, ig)
                gx_above, col, prev_col = cells(0, args, (gx_above, 0.0, 0.0))
            p = s & 1
            run_in = from_prev_lane(run, xch, p)  # (column j's sum, the lane above's last step)
            prev_in = from_prev_lane(prev_col, xch2, p)  # (the lane above's, for column j)
            if lane == WARP - 1 and 0 <= s - WARP and s - WARP < m:  # (column s - 32: done)
                gyp[b, slot, s - WARP, d] = run + prev_col
            run = (run_in + prev_in if lane > 0 else 0.0) + col
        if s1 > s0:  # (the columns still on their way down the lanes)
            j = s1 - 1 - lane
            if 0 <= j and j < m:
                gyp[b, slot, j, d] = run
        for k in range(rows):
            if i0 + k < n:
                gxp[b, 2 * chunk, i0 + k, d] = gxl[k]
        if 0 < i0 and i0 < n:
            gxp[b, 2 * chunk + 1, i0 - 1, d] = gx_above

    return gradients


def _kept_smem(rows: int, warps: int, slots: int) -> int:
    """:func:`_kept_forward`'s static shared memory in bytes (the backward's is less):
    ``slots`` columns of a band's costs (float32, three a cell) and of its threads' ``y_j``
    (float64), the hand-over by step parity and a group of the band above's row."""
    T = WARP * warps
    return slots * 3 * T * rows * 4 + slots * T * 8 + 2 * T * 8 + WARP * 8


def _kept_slots(rows: int, warps: int) -> int:
    """Columns of costs (:func:`_kept_forward`) or weights (:func:`_kept_backward`) in a
    block's shared memory, copied ``slots - 1`` steps before their cells: 4 up to 4 rows a
    thread where they fit 48 KB, else 3 (with 2, a copy would be waited for in the step that
    issued it)."""
    return 4 if rows <= 4 and _kept_smem(rows, warps, 4) <= 48 * 1024 else 3


def _kept_fits(rows: int, warps: int) -> bool:
    """Whether the kept kernels' shared memory (:func:`_kept_smem`) fits a block's 48 KB of
    static shared memory: not for 2048 rows a block (16 rows x 4 warps, 8 x 8); those keep
    ``R``."""
    return _kept_smem(rows, warps, _kept_slots(rows, warps)) <= 48 * 1024


def _async_copies(device: torch.device) -> bool:
    """Whether the GPU has ``cp.async`` (compute capability 8.0 and later; the simulator's
    twin everywhere)."""
    return SIMULATED or torch.cuda.get_device_capability(device) >= (8, 0)


def _chunks(steps: int, blocks: int, warps: int, sms: int) -> int:
    """Chunks of steps for the cell passes (:func:`_kept_costs`, :func:`_kept_gradients`):
    enough for about 24 warps an SM (what their registers allow: each step's cells are a
    chain of latencies, a load's first) where the blocks are fewer, a chunk at least 64 steps
    (a column's sum is stored once more a chunk); 1 in the simulator (``sms = 0``)."""
    if sms == 0:
        return 1
    want = -(-24 * sms // (blocks * warps))
    return max(1, min(want, steps // 64))


#: A band's rows where a task's rows are split over several SMs (:func:`_bands`): 4 warps of a
#: row a thread, a warp for each of the SM's sub-partitions.
BAND_ROWS = 4 * WARP


def _bands(N: int, tasks: int, sms: int) -> int:
    """Bands per task: 1 where the tasks give at least every other SM one (or in the
    simulator, ``sms = 0``, or past ``MAX_N`` rows), else up to one per ``BAND_ROWS`` rows and
    at most the SMs per task.

    A task's rows are a chain of dependencies that one block runs a step at a time; at B = 32,
    N = 512 one block of 16 warps per task leaves most of an H100's 132 SMs idle, and bands on
    SMs of their own take less time (``docs/measures.md``), the band below trailing the one
    above by its own rows' steps plus a group of hand-over values (the module's docstring)."""
    if sms == 0 or 2 * tasks > sms or N <= BAND_ROWS or N > MAX_N:
        return 1  # (past MAX_N: the diagonal kernels)
    return min(-(-N // BAND_ROWS), sms // tasks)


def _depth(rows: int) -> int:
    """How many steps ahead the wavefront kernels compute a column's costs and weights
    (:func:`_wavefront`) for ``rows`` rows a thread: as many as the registers hold without a
    spill (ptxas, sm_90, backward, float64 / float32: 2 columns of 2 rows a thread 230 / 214
    registers, of 4 rows 255 and a spill; 1 column of 4 rows 232 / 244, of 8 rows a spill;
    2 columns of a row, 16 warps: 124 / 118 of the 128 that 512 threads leave).  One column
    ahead measured as fast as two (module docstring)."""
    return 2 if rows <= 2 else 1 if rows <= 4 else 0


def _shape(N: int, tasks: int, sms: int, warps: int | None = None) -> tuple[int, int] | None:
    """``(rows, warps)`` of the wavefront kernels for N rows and ``tasks`` (pair, channel)
    tables on ``sms`` multiprocessors (None past ``MAX_N`` rows).  ``warps`` per task, unless
    given: one once the tasks give each of the SMs' 4 sub-partitions a warp (the fewest
    steps), else one per 32 rows, rounded up to a power of two (a warp's float64 arithmetic
    runs on one sub-partition's 16 float64 lanes, and a step's rows are a chain of latencies
    that more warps shorten): up to 16 for N <= 512 (a row a thread; on an H100 at B = 32,
    N = 512 a step took 5.6 ms with 16 warps, 6.7 with 8, 9.2 with 4), 4 beyond (not measured
    wider: a block of 16 warps must fit its registers, 128 a thread), and more where
    ``MAX_ROWS`` rows per thread do not cover N; an override up to 16.  ``rows``: the smallest
    power of two that covers N."""
    if N > MAX_N:
        return None
    if warps is None:
        few = 1
        if tasks < 4 * sms:  # (a power of two: few kernels to compile)
            while few < min(16 if N <= 16 * WARP else 4, -(-N // WARP)):
                few *= 2
        warps = max(few, -(-N // (WARP * MAX_ROWS)))
    rows = 1
    while WARP * warps * rows < N:
        rows *= 2
    # (registers: 16 rows at most; shared memory: the strips' x and x gradients, 32 KB at most)
    assert rows <= MAX_ROWS and warps <= 16 and rows * warps <= 64, (N, warps)
    if warps == 16 and rows > 1:
        # (512 threads leave 128 registers a thread: the float64 backward of 2 rows took 130,
        # and such a launch failed with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on an H100)
        raise ValueError(f"sdtw: 16 warps a block take one row a thread, got {rows} rows for "
                         f"N = {N}; give 8 warps or fewer")  # fmt: skip
    return rows, warps


# ---------------------------------------------------------------------------------------------
# Diagonal kernels: one block per task, any N.


@kernel
def _forward(x, y, c, gamma, ns, ms, los, his, R):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    ig = 1.0 / gamma
    for k in range(n + m - 1):  # the anti-diagonal i + j = k
        for i in range(max(0, k - (m - 1)) + t, min(n - 1, k) + 1, T):
            j = k - i
            v = INF
            if _inside(i, j, n, m, lo, hi):
                xi, yj = x[b, i, d], y[b, j, d]
                diag = 0.0 if i == 0 and j == 0 else INF
                up = left = INF
                if i > 0:
                    up = R[task, i - 1, j] + _transition(xi, x[b, i - 1, d], yj, c, gamma, ig)[0]
                    if j > 0:
                        diag = R[task, i - 1, j - 1]
                if j > 0:
                    left_c = _transition(yj, y[b, j - 1, d], xi, c, gamma, ig)[0]
                    left = R[task, i, j - 1] + left_c
                v = _softmin3(diag + (xi - yj) * (xi - yj), up, left, gamma, ig)
            R[task, i, j] = v
        cuda.syncthreads()


@device
def _weight(G, R, task, s_i, s_j, r, cost, ig):
    """G of successor (s_i, s_j) times the weight of its edge from a cell of value r."""
    g = G[task, s_i, s_j]
    if g == 0.0:
        return 0.0
    return g * math.exp((R[task, s_i, s_j] - r - cost) * ig)


@kernel
def _occupancy(x, y, c, gamma, ns, ms, los, his, R, G):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    ig = 1.0 / gamma
    if t == 0:
        G[task, n - 1, m - 1] = 1.0
    cuda.syncthreads()
    for k in range(n + m - 3, -1, -1):
        for i in range(max(0, k - (m - 1)) + t, min(n - 1, k) + 1, T):
            j = k - i
            total = 0.0
            if _inside(i, j, n, m, lo, hi):
                r = R[task, i, j]
                xi, yj = x[b, i, d], y[b, j, d]
                if _inside(i + 1, j, n, m, lo, hi):  # (i + 1, j) by its up edge
                    cost = _transition(x[b, i + 1, d], xi, yj, c, gamma, ig)[0]
                    total += _weight(G, R, task, i + 1, j, r, cost, ig)
                if _inside(i, j + 1, n, m, lo, hi):  # (i, j + 1) by its left edge
                    cost = _transition(y[b, j + 1, d], yj, xi, c, gamma, ig)[0]
                    total += _weight(G, R, task, i, j + 1, r, cost, ig)
                if _inside(i + 1, j + 1, n, m, lo, hi):  # (i + 1, j + 1) by its match
                    diff = x[b, i + 1, d] - y[b, j + 1, d]
                    total += _weight(G, R, task, i + 1, j + 1, r, diff * diff, ig)
            G[task, i, j] = total
        cuda.syncthreads()


@kernel
def _gradients(x, y, c, gamma, ns, ms, los, his, R, G, gx, gy):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    ig = 1.0 / gamma
    for i in range(t, n, T):  # gx[b, i, d]: every edge whose cost reads x_i
        xi = x[b, i, d]
        acc = 0.0
        for j in range(m):
            if not _inside(i, j, n, m, lo, hi):
                continue
            r, g, yj = R[task, i, j], G[task, i, j], y[b, j, d]
            if _inside(i + 1, j, n, m, lo, hi):  # up edge into (i + 1, j): p = x_i
                g1 = G[task, i + 1, j]
                if g1 != 0.0:
                    cost, d_v, d_p, d_o = _transition(x[b, i + 1, d], xi, yj, c, gamma, ig)
                    acc += g1 * math.exp((R[task, i + 1, j] - r - cost) * ig) * d_p
            if g == 0.0:
                continue
            if i == 0 and j == 0:
                acc += g * 2.0 * (xi - yj)
                continue
            if i > 0 and j > 0:
                o = g * math.exp((r - R[task, i - 1, j - 1] - (xi - yj) * (xi - yj)) * ig)
                acc += o * 2.0 * (xi - yj)
            if i > 0:  # up edge into (i, j): C(x_i, x_{i-1}, y_j), v = x_i
                cost, d_v, d_p, d_o = _transition(xi, x[b, i - 1, d], yj, c, gamma, ig)
                acc += g * math.exp((r - R[task, i - 1, j] - cost) * ig) * d_v
            if j > 0:  # left edge into (i, j): C(y_j, y_{j-1}, x_i), o = x_i
                cost, d_v, d_p, d_o = _transition(yj, y[b, j - 1, d], xi, c, gamma, ig)
                acc += g * math.exp((r - R[task, i, j - 1] - cost) * ig) * d_o
        gx[b, i, d] = acc
    for j in range(t, m, T):  # gy[b, j, d]: every edge whose cost reads y_j
        yj = y[b, j, d]
        acc = 0.0
        for i in range(n):
            if not _inside(i, j, n, m, lo, hi):
                continue
            r, g, xi = R[task, i, j], G[task, i, j], x[b, i, d]
            if _inside(i, j + 1, n, m, lo, hi):  # left edge into (i, j + 1): p = y_j
                g1 = G[task, i, j + 1]
                if g1 != 0.0:
                    cost, d_v, d_p, d_o = _transition(y[b, j + 1, d], yj, xi, c, gamma, ig)
                    acc += g1 * math.exp((R[task, i, j + 1] - r - cost) * ig) * d_p
            if g == 0.0:
                continue
            if i == 0 and j == 0:
                acc -= g * 2.0 * (xi - yj)
                continue
            if i > 0 and j > 0:
                o = g * math.exp((r - R[task, i - 1, j - 1] - (xi - yj) * (xi - yj)) * ig)
                acc -= o * 2.0 * (xi - yj)
            if i > 0:  # up edge into (i, j): o = y_j
                cost, d_v, d_p, d_o = _transition(xi, x[b, i - 1, d], yj, c, gamma, ig)
                acc += g * math.exp((r - R[task, i - 1, j] - cost) * ig) * d_o
            if j > 0:  # left edge into (i, j): v = y_j
                cost, d_v, d_p, d_o = _transition(yj, y[b, j - 1, d], xi, c, gamma, ig)
                acc += g * math.exp((r - R[task, i, j - 1] - cost) * ig) * d_v
        gy[b, j, d] = acc


# ---------------------------------------------------------------------------------------------
# Launcher.


def _multiprocessors(device: torch.device) -> int:
    if SIMULATED:
        return 0  # (the simulator: one warp per task)
    return torch.cuda.get_device_properties(device).multi_processor_count


_dummies: dict[torch.device, torch.Tensor] = {}


def _seam_band(tables, N: int, M: int) -> tuple | None:
    """The band of :func:`sdtw.cuda.msm_seam.msm_seam` for ``tables`` (NumPy arrays): ``(lo,
    hi)`` where every pair has the table's lengths and one band, ``(radius, -1, (ns, ms))``
    where the pairs' bands follow their own lengths with one radius
    (:func:`sdtw.band.pair_offsets`; -1: none); None otherwise (a tensor: lengths made on the
    device)."""
    if isinstance(tables, torch.Tensor):
        return None
    ns, ms, los, his = (np.asarray(t, dtype=np.int64) for t in tables)
    if len(ns) == 0:
        return None
    if (ns == N).all() and (ms == M).all() and (los == los[0]).all() and (his == his[0]).all():
        return int(los[0]), int(his[0])
    over, under = np.clip(ns - ms, 0, None), np.clip(ms - ns, 0, None)
    full = (los >= ns - 1) & (his >= ms - 1)  # (a band that holds the whole table: none)
    r = los - over
    banded = ~full
    if not banded.any():
        return -1, -1, (ns, ms)
    radius = int(r[banded][0])
    if radius < 0:  # (an empty band: the kernels take a negative radius for none)
        return None
    if not ((r[banded] == radius) & (his[banded] - under[banded] == radius)).all():
        return None
    if not ((radius + over[full] >= ns[full] - 1) & (radius + under[full] >= ms[full] - 1)).all():
        return None  # (a pair without a band that the radius would cut)
    return radius, -1, (ns, ms)


def msm_cuda(
    x,
    y,
    c: float,
    gamma: float,
    tables: tuple,
    need: bool,
    *,
    warps: int | None = None,
    bands: int | None = None,
    ahead: int | None = None,
    kept: bool | None = None,
    chunks: int | None = None,
    seam: bool | None = None,
) -> tuple:
    """Values (B,) and, with ``need``, the gradients wrt x (B, N, D) and y (B, M, D) of
    Soft-MSM, float64; ``tables``: each pair's lengths and band offsets ``(n, m, lo, hi)``,
    int64 NumPy arrays (B,) or a tensor (4, B) (:func:`sdtw.cuda.tables.device_tables`).  No
    autograd.

    The wavefront kernels where a band's rows fit (``MAX_N``): a (pair, channel) task's rows
    in ``bands`` bands (None: ``sdtw.cuda.config.overrides(msm_bands=...)``'s, else
    :func:`_bands`'s rule; 1 where the tasks fill the GPU), one block
    of ``warps`` warps each (None: :func:`_shape`'s rule for the band's rows, 1 to 16; an
    override up to 16, with rows times warps at most 64), with float32 transcendentals for
    float32 inputs (:func:`_row_functions`) and float64 ones otherwise, each column's costs
    and weights ``ahead`` steps before its cells (0 to :func:`_depth`'s; None: the override's,
    at most the rule's, else the rule's); beyond, the diagonal kernels (float64).  Float32
    inputs with ``need`` keep the forward's edge weights (``kept``; None: the override's, else
    where :func:`_kept_fits`, the GPU has ``cp.async`` and a band's part of the array has
    fewer than 2^32 entries (M below about 1.4 million at 1024 rows a block); 12 bytes a
    cell, float32, against
    ``R``'s 8) for a backward of ``G`` alone and a gradients pass over the cells in
    ``chunks`` of steps (None: :func:`_chunks`'s rule).

    ``seam``: float32 inputs with ``need`` whose tables are NumPy arrays with one band (or
    one radius, :func:`_seam_band`) run on soft-DTW's band kernels instead
    (:mod:`sdtw.cuda.msm_seam`; None: the override ``msm_seam``'s, else wherever none of the
    arguments above nor the overrides ``msm_bands``, ``msm_ahead``, ``msm_kept`` asks for a
    variant of these kernels)."""
    fast = x.dtype == torch.float32
    a = x.detach().to(torch.float64).contiguous()
    b = y.detach().to(torch.float64).contiguous()
    B, N, D = a.shape
    M = b.shape[1]
    dev = a.device
    forced = current_overrides()
    seam = forced.msm_seam if seam is None else seam
    if seam is None:  # (the rule: where no variant of these kernels is asked for)
        asked = (warps, bands, ahead, kept, chunks, forced.msm_bands, forced.msm_ahead,
                 forced.msm_kept)  # fmt: skip
        seam = all(v is None for v in asked)
    if seam and fast and need:
        band = _seam_band(tables, N, M)
        if band is not None:
            return msm_seam.msm_seam(a, b, c, gamma, *band)
    ns, ms, los, his = device_tables(tables, dev)
    args = (a, b, float(c), float(gamma), ns, ms, los, his)
    sms = _multiprocessors(dev)
    bands = forced.msm_bands if bands is None else bands
    if bands is not None and (bands < 1 or (bands > 1 and N > MAX_N)):
        raise ValueError(f"sdtw: bands must be 1, or >= 1 up to N = {MAX_N}, got {bands}")
    nb = _bands(N, B * D, sms) if bands is None else bands
    shape = _shape(-(-N // nb), B * D * nb, sms, warps)
    if shape is not None:
        nb = -(-N // (WARP * shape[1] * shape[0]))  # (the bands that have rows)
    grid = B * D * nb

    def hand_over(*sizes: int) -> list:
        """Buffers for the values handed between bands, one SENTINEL fill for all (a
        per-device dummy for each where there is one band)."""
        if nb == 1:
            dummy = _dummies.get(dev)
            if dummy is None:
                dummy = _dummies[dev] = torch.zeros(1, dtype=torch.int64, device=dev)
            return [dummy] * len(sizes)
        flat = torch.full((sum(sizes),), SENTINEL, dtype=torch.int64, device=dev)
        return list(flat.split(sizes))

    if shape is not None:
        depth = _depth(shape[0])
        if ahead is not None:
            if not 0 <= ahead <= depth:
                raise ValueError(f"sdtw: ahead must be 0 to {depth} (registers) for {shape[0]} "
                                 f"rows x {shape[1]} warps, got {ahead}")  # fmt: skip
            depth = ahead
        elif forced.msm_ahead is not None:  # (the override: up to its depth, registers allowing)
            if forced.msm_ahead < 0:
                raise ValueError(f"sdtw: msm_ahead must be >= 0, got {forced.msm_ahead}")
            depth = min(forced.msm_ahead, depth)
        # (the kernels' offsets within a band's part of the kept array are 32-bit)
        short = M * 3 * WARP * shape[1] * shape[0] < 2**32
        if kept is None:  # (the override: where the rule allows, as the rule)
            kept = (fast and need and forced.msm_kept is not False and _kept_fits(*shape)
                    and short and _async_copies(dev))  # fmt: skip
        if kept and not fast:
            raise ValueError("sdtw: kept weights are float32: float32 inputs only")
        if kept and not _kept_fits(*shape):
            raise ValueError(f"sdtw: kept weights take more than 48 KB of shared memory a "
                             f"block for {shape[0]} rows x {shape[1]} warps")  # fmt: skip
        if kept and not short:
            raise ValueError(f"sdtw: kept weights need M * 3 * {WARP * shape[1] * shape[0]} "
                             f"< 2**32 (32-bit offsets), got M = {M}")  # fmt: skip
        threads = WARP * shape[1]
        steps = M + WARP - 1  # (the cells' passes: a warp's steps)
        nc = _chunks(steps, grid, shape[1], sms) if chunks is None else chunks
        if nc < 1:
            raise ValueError(f"sdtw: chunks must be >= 1, got {nc}")
        span = -(-steps // nc)
        values = torch.empty(B * D, dtype=torch.float64, device=dev)
        if kept:  # (every cell that the kernels read is written first)
            R = torch.empty(grid * M * 3 * threads * shape[0], dtype=torch.float32, device=dev)
            launch(_kept_costs(*shape), grid * nc, threads, dev, *args, R, nb, nc, span)
            forward = _kept_forward(*shape, nb > 1, _kept_slots(*shape))
            launch(forward, grid, threads, dev, a, b.view(-1), ns, ms, R, values,
                   *hand_over(grid * M + 1), nb, D, M, float(gamma))  # fmt: skip
        else:
            forward, backward = _wavefront(*shape, fast, nb > 1, depth, need)
            # (a forward without gradients writes no R: a stand-in of one cell)
            R = torch.empty((B * D, N, M) if need else (1, 1, 1), dtype=torch.float64, device=dev)
            launch(forward, grid, threads, dev, *args, R, values, *hand_over(grid * M + 1), nb)
        values = values.view(B, D).sum(1) if D > 1 else values
    else:
        forward, threads = _forward, 8 if SIMULATED else 128
        R = torch.full((B * D, N, M), math.inf, dtype=torch.float64, device=dev)
        launch(forward, B * D, threads, dev, *args, R)
        values = R[torch.arange(B * D, device=dev), ns.repeat_interleave(D) - 1,
                   ms.repeat_interleave(D) - 1].reshape(B, D).sum(1)  # fmt: skip
    if not need:
        return values, None, None
    if shape is not None and kept:
        rows, warps_ = shape
        launch(_kept_backward(rows, warps_, nb > 1, _kept_slots(rows, warps_)), grid, threads, dev,
               D, M, ns, ms, R, hand_over(grid * M + 1)[0], nb)  # fmt: skip
        parts = torch.zeros(B * D * (2 * nc * N + nb * nc * warps_ * M), dtype=torch.float64,
                            device=dev)  # fmt: skip
        gxp = parts[: B * 2 * nc * N * D].view(B, 2 * nc, N, D)
        gyp = parts[B * 2 * nc * N * D :].view(B, nb * nc * warps_, M, D)
        launch(_kept_gradients(rows, warps_), grid * nc, threads, dev, a, b, float(c),
               float(gamma), ns, ms, R, gxp, gyp, nb, nc, span)  # fmt: skip
        return values, gxp.sum(1), gyp.sum(1)
    gx, gy = torch.zeros_like(a), torch.zeros_like(b)
    if shape is not None:
        hands = hand_over(grid * M, grid * M, grid + 1)
        launch(backward, grid, threads, dev, *args, R, gx, gy, *hands, nb)
        return values, gx, gy
    G = torch.zeros_like(R)
    launch(_occupancy, B * D, threads, dev, *args, R, G)
    launch(_gradients, B * D, threads, dev, *args, R, G, gx, gy)
    return values, gx, gy
