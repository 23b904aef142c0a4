"""Numba CUDA kernels: pipelined band wavefront for soft-DTW.

Design
------
The (N, M) table of a pair is cut into *bands* of ``TB`` rows.  One thread block of ``TB``
threads (one warp) owns one band, thread ``t`` owns row ``i0 + t``, and the block sweeps the
band's columns as a skewed wavefront: at step ``s`` thread ``t`` computes column ``s - t``.
The three DP neighbours come from the thread itself (left), from thread ``t - 1`` one step
earlier (up) and two steps earlier (diagonal), passed by a warp shuffle.  Each step is
branch-free (invalid cells select +inf and zero weights), and the staged columns live in a
64-column ring of shared memory indexed by ``column % 64``.  Costs (or fused distances) are
staged ``TW`` columns at a time with loads issued back to back; the weights go out coalesced one
chunk later.  Lane 0 takes the row above the band from the boundary buffer ``Rb`` that lane
``TB - 1`` of the band above writes cell by cell: values are float64 bits in an int64 buffer
pre-filled with a sentinel, read ``G`` = 8 columns at a time, one group ahead, with atomic
reads (L2) and a warp vote, so neither side waits on a counter or a fence (the band below runs
~40-50 steps behind the band above, the minimum being 32).  Blocks take a *ticket* from an
atomic counter and derive their (band, pair) from it, so a block only ever waits for blocks
that started before it: no deadlock whatever order the hardware schedules blocks in, and the
CUDA simulator (which runs blocks one at a time) works too.  One launch does the whole forward,
one the whole backward: launches per step are O(1), not O(N + M).

Accuracy
--------
The backward never forms ``(R[i+1, j] - R[i, j] - C[i+1, j]) / gamma`` (the published form,
which cancels catastrophically in float32 when ``R`` is large).  Instead the forward stores, per
cell, the soft-min *weights* of its three predecessors

.. math::  p_k = e^{-(r_k - m)/\\gamma} \\big/ \\textstyle\\sum_l e^{-(r_l - m)/\\gamma},
           \\quad m = \\min_l r_l,

computed from *differences of neighbouring R values in float64*, and the backward is the pure
linear recursion ``E[p] = sum_s E[s] p_s(p)`` over successors ``s``.  All DP arithmetic is
float64 whatever the input dtype (Hopper runs float64 at half the float32 rate); only the stored
weights take the input's precision (float32 weights have relative error 6e-8).  Fused squared
distances are float64 dot products ``|x|^2 + |y|^2 - 2 x.y`` with float64 norms.

Memory
------
``P`` (B, 2, N, M) holds (p_diag, p_up); p_left = 1 - p_diag - p_up.  The backward overwrites
plane 1 with ``E`` in place (each cell is read before it is written, by the same thread), so
``E = P[:, 1]`` needs no extra buffer.  Boundary buffers are (B, ceil(N/TB), M + 1) int64
(float64 bits; column ``M`` is a scratch slot for the lanes that do not publish).
"""

from __future__ import annotations

import math
import os

from numba import cuda, float32, float64, int32, uint32
from numba.cuda import libdevice

#: Numba's CPU simulator lacks warp shuffles and libdevice: two small device functions below
#: have simulator twins, chosen once at import.
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
TB = 32  # rows per band = threads per block (one warp)
TW = 32  # columns per chunk (published / staged together); TW == TB is assumed below
DC = 16  # features staged in shared memory per pass of the fused distance
TB1 = TB + 1  # padded row length (bank-conflict-free column writes)
TW1 = TW + 1
RING = 2 * TW  # ring of staged columns (two chunks)
RMASK = uint32(RING - 1)
G = 8  # boundary values handed between bands per group (TW is a multiple of G)
GMASK = uint32(G - 1)
INF = math.inf


@cuda.jit(device=True, inline=True)
def _min3(a, b, c):
    """Minimum by comparisons (a NaN argument is skipped here and caught by the exp sum)."""
    m = a
    if b < m:
        m = b
    if c < m:
        m = c
    return m


@cuda.jit(device=True, inline=True)
def _softmin3(r_diag, r_up, r_left, gamma, inv_gamma):
    """Soft-min of three float64 values and the weights of the first two (float64 math).

    NaN anywhere propagates to the value (it enters the sum of exponentials).  Branch-free:
    both outcomes are computed and selected, so the warp never diverges here.
    """
    m = _min3(r_diag, r_up, r_left)
    fin = m != INF
    # all +inf (unreachable), or NaN hidden behind +inf minima: the sum keeps the NaN
    mm = m if fin else 0.0
    ed = math.exp((mm - r_diag) * inv_gamma)
    eu = math.exp((mm - r_up) * inv_gamma)
    el = math.exp((mm - r_left) * inv_gamma)
    s = ed + eu + el
    s = s if fin else 1.0  # (all +inf: s = 0; the result is selected away below)
    inv_s = 1.0 / s
    val = m - gamma * math.log(s)
    if fin:
        return val, ed * inv_s, eu * inv_s
    return r_diag + r_up + r_left, 0.0, 0.0


@cuda.jit(device=True, inline=True)
def _exp2_gpu(x):
    return libdevice.exp2f(x)  # ex2.approx.f32


@cuda.jit(device=True, inline=True)
def _log2_gpu(x):
    return libdevice.fast_log2f(x)  # lg2.approx.f32


def _exp2_sim(x):
    return float32(2.0**x)


def _log2_sim(x):
    return float32(math.log2(x))


exp2 = _exp2_sim if SIMULATED else _exp2_gpu
log2 = _log2_sim if SIMULATED else _log2_gpu
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


@cuda.jit(device=True, inline=True)
def _constants(gamma):
    """The two constants :func:`_softmin3` takes: ``gamma`` and ``1 / gamma``."""
    return gamma, 1.0 / gamma


@cuda.jit(device=True, inline=True)
def _constants_fast(gamma):
    """The two constants :func:`_softmin3_fast` takes: ``gamma ln 2`` and ``log2(e) / gamma``."""
    return gamma * LN2, float32(LOG2E / gamma)


@cuda.jit(device=True, inline=True)
def _softmin3_fast(r_diag, r_up, r_left, gamma_ln2, c):
    """As :func:`_softmin3`, with float32 hardware exp2/log2 of the float64 *differences*.

    ``e^{(m - r_k) / gamma} = 2^{c (m - r_k)}`` with ``c = log2(e) / gamma`` (float32): the
    difference ``m - r_k <= 0`` is formed in float64 and rounded to float32, so each weight
    has a relative error of a few 1e-7 times the exponent (a large exponent means a weight
    below ~1e-30), not an absolute error that grows with ``R``; ``log(s) = ln 2 log2(s)`` with
    ``s`` in [1, 3] is good to ~2e-7 absolute.  R itself stays float64; the weights are
    float32 (what a float32 step stores).  These multi-function-unit instructions are the
    step's critical path (the accurate libm versions are ~10 dependent instructions each).
    """
    m = _min3(r_diag, r_up, r_left)
    fin = m != INF
    mm = m if fin else 0.0
    ed = exp2(float32(mm - r_diag) * c)
    eu = exp2(float32(mm - r_up) * c)
    el = exp2(float32(mm - r_left) * c)
    s = ed + eu + el
    s = s if fin else float32(1.0)
    inv_s = fast_rcp(s)
    val = m - gamma_ln2 * float64(log2(s))
    if fin:
        return val, ed * inv_s, eu * inv_s
    return r_diag + r_up + r_left, float32(0.0), float32(0.0)


# Neighbour exchange between the lanes of a band.  On a GPU the band is one warp and a shuffle
# moves the value (no barrier, no shared memory round trip); Numba's simulator has no
# shuffles, so there the same exchange goes through a 2-slot shared array and a barrier.  Both
# return lane (tid - 1)'s / (tid + 1)'s argument from this step (lane 0 / TB-1 get their own).
FULL_MASK = 0xFFFFFFFF


@cuda.jit(device=True, inline=True)
def _from_prev_lane_shfl(v, xch, parity):
    return cuda.shfl_up_sync(FULL_MASK, v, 1)


@cuda.jit(device=True, inline=True)
def _from_next_lane_shfl(v, xch, parity):
    return cuda.shfl_down_sync(FULL_MASK, v, 1)


@cuda.jit(device=True, inline=True)
def _from_prev_lane_smem(v, xch, parity):
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    cuda.syncthreads()
    return xch[parity, tid - 1] if tid > 0 else v


@cuda.jit(device=True, inline=True)
def _from_next_lane_smem(v, xch, parity):
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    cuda.syncthreads()
    return xch[parity, tid + 1] if tid < TB - 1 else v


from_prev_lane = _from_prev_lane_smem if SIMULATED else _from_prev_lane_shfl
from_next_lane = _from_next_lane_smem if SIMULATED else _from_next_lane_shfl


@cuda.jit(device=True, inline=True)
def _take_ticket(tick, tk):
    if cuda.threadIdx.x == 0:
        tk[0] = cuda.atomic.add(tick, 0, 1)
    cuda.syncthreads()
    return tk[0]


# Boundary rows between bands travel as float64 *bits* in an int64 buffer pre-filled with
# ``SENTINEL``, a signalling-NaN pattern that arithmetic never produces (a NaN result is a quiet
# NaN, and +inf is written as +inf), so each value says by itself whether it has been written:
# no progress counter, no fence, no barrier between producer and consumer.  The producer uses a
# plain store (global stores write through to L2; an atomic exchange per step measured ~2x
# slower, its return value serialising the producer) and the consumer reads with an atomic add
# of 0, an L2 operation that never sees a stale L1 line.
SENTINEL = 0x7FF00000DEAD0001


@cuda.jit(device=True, inline=True)
def _bits_gpu(x):
    return libdevice.double_as_longlong(x)


@cuda.jit(device=True, inline=True)
def _from_bits_gpu(n):
    return libdevice.longlong_as_double(n)


@cuda.jit(device=True, inline=True)
def _rcp_gpu(x):
    return libdevice.fast_fdividef(float32(1.0), x)


def _bits_sim(x):
    import numpy as np

    return np.float64(x).view(np.int64)


def _from_bits_sim(n):
    import numpy as np

    return np.int64(n).view(np.float64)


def _rcp_sim(x):
    return float32(1.0) / x


as_bits = _bits_sim if SIMULATED else _bits_gpu
from_bits = _from_bits_sim if SIMULATED else _from_bits_gpu
fast_rcp = _rcp_sim if SIMULATED else _rcp_gpu


@cuda.jit(device=True, inline=True)
def _ring_gpu(j):
    return uint32(j) & RMASK  # unsigned: no negative-index wraparound code in the indexing


@cuda.jit(device=True, inline=True)
def _in_group_gpu(kk):
    return uint32(kk) & GMASK


def _ring_sim(j):
    return j & (RING - 1)


def _in_group_sim(kk):
    return kk & (G - 1)


ring = _ring_sim if SIMULATED else _ring_gpu
in_group = _in_group_sim if SIMULATED else _in_group_gpu


@cuda.jit(device=True, inline=True)
def _handoff_gpu(hand, b, kh, col0, limit, pref, val, grp):
    """Take one group of ``G`` boundary values and prefetch the next group (one warp).

    Lanes ``0 .. G - 1`` hold in ``pref`` the bits of columns ``col0 + lane`` (read one group
    earlier; ``col0`` is this group's first column and ``limit`` decides which columns exist,
    see the callers).  Wait until all are written (re-reading the missing ones) and return
    (this lane's value, the bits of its column in the next group), the latter read now so that
    the read's latency overlaps this group's steps.  Warp vote and shuffles only: a block
    barrier would wait for the outstanding prefetch (measured: one round trip per group).
    """
    tid = cuda.threadIdx.x
    col = col0 + tid
    mine = (tid < G) & (col < limit)
    while True:
        bad = mine & (pref == SENTINEL)
        if not cuda.any_sync(FULL_MASK, bad):
            break
        if bad:
            pref = cuda.atomic.add(hand, (b, kh, col), 0)
    val = from_bits(pref) if mine else 0.0
    if (tid < G) & (col + G < limit):
        pref = cuda.atomic.add(hand, (b, kh, col + G), 0)
    return val, pref


@cuda.jit(device=True, inline=True)
def _group_value_gpu(val, q, grp):
    return cuda.shfl_sync(FULL_MASK, val, q)


@cuda.jit(device=True, inline=True)
def _handoff_sim(hand, b, kh, col0, limit, pref, val, grp):
    """Simulator twin of :func:`_handoff_gpu` (no warp vote or shuffle there): block barriers
    and the shared array ``grp``."""
    tid = cuda.threadIdx.x
    col = col0 + tid
    mine = tid < G and col < limit
    while True:
        bad = mine and pref == SENTINEL
        if not cuda.syncthreads_or(int32(1) if bad else int32(0)):
            break
        if bad:
            pref = cuda.atomic.add(hand, (b, kh, col), 0)
    if tid < G:
        grp[tid] = from_bits(pref) if mine else 0.0
    if tid < G and col + G < limit:
        pref = cuda.atomic.add(hand, (b, kh, col + G), 0)
    cuda.syncthreads()
    return val, pref


@cuda.jit(device=True, inline=True)
def _group_value_sim(val, q, grp):
    return grp[q]


handoff = _handoff_sim if SIMULATED else _handoff_gpu
group_value = _group_value_sim if SIMULATED else _group_value_gpu


@cuda.jit(device=True, inline=True)
def _sync_band_gpu():
    # A block is one warp: a warp barrier orders shared memory among its lanes, and (unlike a
    # block barrier) need not wait for the warp's outstanding global atomics.
    cuda.syncwarp(FULL_MASK)


@cuda.jit(device=True, inline=True)
def _sync_band_sim():
    cuda.syncthreads()


sync_band = _sync_band_sim if SIMULATED else _sync_band_gpu


def _build_forward(fused: bool, fast: bool):
    """Forward kernel; ``fused`` and ``fast`` are compile-time constants (closure).

    ``fast`` selects float32 transcendentals (:func:`_softmin3_fast`), used for float32
    inputs; float64 inputs get float64 throughout.
    """
    softmin3 = _softmin3_fast if fast else _softmin3
    constants = _constants_fast if fast else _constants
    # The staged block holds the cost and then the weights.  float32 suffices when both are
    # float32 anyway (unfused float32 cost, float32 weights): half the shared memory, so twice
    # the resident blocks per SM.  Fused distances are float64 and need the float64 block.
    blk_t = float32 if (fast and not fused) else float64

    @cuda.jit
    def forward(X, Y, XX, YY, N, M, D, gamma, lo, hi, P, Rb, tick, out, store):
        """One block per (band, pair).

        unfused: X = cost (B, N, M), Y/XX/YY unused.
        fused:   X (B, N, D), Y (B, M, D), XX (B, N) = |x|^2, YY (B, M) = |y|^2 (float64).
        P (B, 2, N, M) weights (written iff ``store``), Rb (B, nb, M + 1) int64 boundary rows
        (float64 bits, pre-filled with ``SENTINEL``), tick int32 [ticket], out (B,) loss.
        """
        tid = cuda.threadIdx.x
        B = out.shape[0]
        nb = (N + TB - 1) // TB
        sm_a, sm_b = constants(gamma)  # what softmin3 takes besides the three values
        zero = blk_t(0.0)
        tk = cuda.shared.array(1, int32)
        t = _take_ticket(tick, tk)
        k = t // B
        b = t - k * B
        i0 = k * TB
        i = i0 + tid
        row_ok = i < N
        publish = tid == TB - 1 and k < nb - 1
        # blk[0] holds the cost, overwritten by p_diag; blk[1] gets p_up.  Columns live at
        # ``j % RING``: a ring of two chunks (the band's skew spans two).
        blk = cuda.shared.array((2, TB, RING), blk_t)
        grp = cuda.shared.array(G, float64)
        xch = cuda.shared.array((2, TB), float64)
        if fused:
            xsh = cuda.shared.array((DC, TB1), float64)
            ysh = cuda.shared.array((DC, TW1), float64)
        if tid < G:
            grp[tid] = INF  # the top band's row above (k > 0 overwrites it group by group)
        gval = INF  # this lane's boundary value of the current group (GPU path)
        up_next = INF
        r_left = INF
        r_diag = INF
        r_last = INF
        if k == 0 and tid == 0:
            r_diag = 0.0  # R[-1, -1] = 0
        pref = SENTINEL
        if k > 0 and tid < G and tid < M:
            pref = cuda.atomic.add(Rb, (b, k - 1, tid), 0)
        nchunks = (M + TB - 1 + TW - 1) // TW
        for c in range(nchunks):
            j0 = c * TW
            jl = j0 + tid  # the column this thread stages
            ql = ring(jl)
            if j0 < M:
                # Loads are unconditional (clamped indices, zero selected afterwards) so that
                # they issue back to back instead of one round trip each.
                jc = min(jl, M - 1)
                if fused:
                    acc = cuda.local.array(TB, float64)
                    for r in range(TB):
                        acc[r] = 0.0
                    dd = tid % DC
                    rh = tid // DC
                    for d0 in range(0, D, DC):
                        d = d0 + dd
                        dc = min(d, D - 1)
                        sync_band()
                        for q in range(DC):  # TB // DC rows per pass over the lanes
                            r = rh + (TB // DC) * q
                            xv = float64(X[b, min(i0 + r, N - 1), dc])
                            yv = float64(Y[b, min(j0 + r, M - 1), dc])
                            xsh[dd, r] = xv if (d < D and i0 + r < N) else 0.0
                            ysh[dd, r] = yv if (d < D and j0 + r < M) else 0.0
                        sync_band()
                        for e in range(DC):
                            yv = ysh[e, tid]
                            for r in range(TB):
                                acc[r] += xsh[e, r] * yv
                    yy = YY[b, jc]
                    for r in range(TB):
                        v = XX[b, min(i0 + r, N - 1)] + yy - 2.0 * acc[r]
                        if v < 0.0:
                            v = 0.0
                        blk[0, r, ql] = v if (i0 + r < N and jl < M) else 0.0
                else:
                    for r0 in range(0, TB, 4):
                        v0 = X[b, min(i0 + r0, N - 1), jc]
                        v1 = X[b, min(i0 + r0 + 1, N - 1), jc]
                        v2 = X[b, min(i0 + r0 + 2, N - 1), jc]
                        v3 = X[b, min(i0 + r0 + 3, N - 1), jc]
                        blk[0, r0, ql] = v0 if (i0 + r0 < N and jl < M) else zero
                        blk[0, r0 + 1, ql] = v1 if (i0 + r0 + 1 < N and jl < M) else zero
                        blk[0, r0 + 2, ql] = v2 if (i0 + r0 + 2 < N and jl < M) else zero
                        blk[0, r0 + 3, ql] = v3 if (i0 + r0 + 3 < N and jl < M) else zero
            sync_band()
            for kk in range(TW):
                s = j0 + kk
                if k > 0 and kk % G == 0:
                    gval, pref = handoff(Rb, b, k - 1, s, M, pref, gval, grp)
                j = s - tid
                # Branch-free step: every lane computes, invalid cells select +inf / zero.
                # Cells outside [0, M) write their ring slot harmlessly: j < 0 only in chunk 0
                # (slots of the unused second half), j >= M only in chunks never written out.
                q = ring(j)
                top = group_value(gval, in_group(kk), grp)
                up = top if tid == 0 else up_next
                m, pd, pu = softmin3(r_diag, up, r_left, sm_a, sm_b)
                dj = j - i
                ok = row_ok & (j >= 0) & (j < M) & (dj >= -lo) & (dj <= hi)  # no short circuit
                cost = blk[0, tid, q]  # loaded unconditionally (no branch around it)
                r = cost + m if ok else INF
                blk[0, tid, q] = blk_t(pd) if ok else zero
                blk[1, tid, q] = blk_t(pu) if ok else zero
                # Lane TB - 1 publishes its cell; the other lanes (and columns outside the row)
                # store into the scratch slot M: one store instruction, no branch.
                Rb[b, k, uint32(j if (publish & (j >= 0) & (j < M)) else M)] = as_bits(r)
                r_last = r if j == M - 1 else r_last
                r_left = r
                r_diag = up
                up_next = from_prev_lane(r, xch, s & 1)
            sync_band()
            # Chunk c - 1 is complete now: write its weights out, coalesced along columns.
            if store and c > 0:
                jp = j0 - TW + tid
                qp = ring(jp)
                if jp < M:
                    for r in range(TB):
                        if i0 + r < N:
                            P[b, 0, i0 + r, jp] = blk[0, r, qp]
                            P[b, 1, i0 + r, jp] = blk[1, r, qp]
            sync_band()
        if i == N - 1:
            out[b] = r_last
        if store:
            jp = (nchunks - 1) * TW + tid
            qp = ring(jp)
            if jp < M:
                for r in range(TB):
                    if i0 + r < N:
                        P[b, 0, i0 + r, jp] = blk[0, r, qp]
                        P[b, 1, i0 + r, jp] = blk[1, r, qp]

    return forward


def _build_backward(fast: bool):
    """Backward kernel; ``fast`` (float32 weights) stages them in a float32 block."""
    blk_t = float32 if fast else float64

    @cuda.jit
    def backward(P, N, M, gout, Gb, tick):
        """Expected alignment, written in place: ``P[:, 1] <- E * gout``.

        Columns run right to left: *position* ``p = M - 1 - j``.  Lane ``t`` at step ``s``
        handles position ``s - (TB - 1 - t)`` (the bottom row leads).  Pull form:
        ``E[i, j] = E[i, j+1] p_left(i, j+1) + E[i+1, j] p_up(i+1, j)
        + E[i+1, j+1] p_diag(i+1, j+1)``.  Lane ``t`` hands lane ``t - 1`` the sum of the last two
        terms it owes it (``v``); the top lane hands the same ``v`` to the band above through
        ``Gb`` (B, nb, M + 1) int64 (float64 bits by position, pre-filled with ``SENTINEL``).
        """
        tid = cuda.threadIdx.x
        B = gout.shape[0]
        nb = (N + TB - 1) // TB
        zero = blk_t(0.0)
        tk = cuda.shared.array(1, int32)
        t = _take_ticket(tick, tk)
        kr = t // B
        k = nb - 1 - kr
        b = t - kr * B
        i0 = k * TB
        i = i0 + tid
        row_ok = i < N
        publish = tid == 0 and k > 0
        last_row = i == N - 1
        blk = cuda.shared.array((2, TB, RING), blk_t)
        grp = cuda.shared.array(G, float64)
        xch = cuda.shared.array((2, TB), float64)
        if tid < G:
            grp[tid] = 0.0  # the bottom band's row below (others overwrite it group by group)
        gval = 0.0
        inc_next = 0.0
        e_left = 0.0
        d_prev = 0.0
        g = gout[b]
        below_ok = k < nb - 1
        pref = SENTINEL
        if below_ok and tid < G and tid < M:
            pref = cuda.atomic.add(Gb, (b, k + 1, tid), 0)
        nchunks = (M + TB - 1 + TW - 1) // TW
        for c in range(nchunks):
            s0 = c * TW
            pl = s0 + tid  # the position this thread stages
            jl = M - 1 - pl
            ql = ring(pl)
            if s0 < M:
                jc = max(jl, 0)
                for r0 in range(0, TB, 2):
                    d0 = P[b, 0, min(i0 + r0, N - 1), jc]
                    u0 = P[b, 1, min(i0 + r0, N - 1), jc]
                    d1 = P[b, 0, min(i0 + r0 + 1, N - 1), jc]
                    u1 = P[b, 1, min(i0 + r0 + 1, N - 1), jc]
                    ok0 = i0 + r0 < N and jl >= 0
                    ok1 = i0 + r0 + 1 < N and jl >= 0
                    blk[0, r0, ql] = d0 if ok0 else zero
                    blk[1, r0, ql] = u0 if ok0 else zero
                    blk[0, r0 + 1, ql] = d1 if ok1 else zero
                    blk[1, r0 + 1, ql] = u1 if ok1 else zero
            sync_band()
            for kk in range(TW):
                s = s0 + kk
                if below_ok and kk % G == 0:
                    gval, pref = handoff(Gb, b, k + 1, s, M, pref, gval, grp)
                p = s - (TB - 1 - tid)
                q = ring(p)
                below = group_value(gval, in_group(kk), grp)
                inc = below if tid == TB - 1 else inc_next
                ok = row_ok & (p >= 0) & (p < M)
                pd = float64(blk[0, tid, q])
                pu = float64(blk[1, tid, q])
                e = e_left + inc
                e = e + g if (last_row & (p == 0)) else e
                e = e if ok else 0.0
                blk[1, tid, q] = blk_t(e)
                v = e * pu + d_prev if ok else 0.0
                d_prev = e * pd if ok else 0.0
                e_left = e * (1.0 - pd - pu) if ok else 0.0
                # the scratch slot M again: no branch
                Gb[b, k, uint32(p if (publish & ok) else M)] = as_bits(v)
                inc_next = from_next_lane(v, xch, s & 1)
            sync_band()
            if c > 0:
                pp = s0 - TW + tid
                jp = M - 1 - pp
                qp = ring(pp)
                if jp >= 0:
                    for r in range(TB):
                        if i0 + r < N:
                            P[b, 1, i0 + r, jp] = blk[1, r, qp]
            sync_band()
        pp = (nchunks - 1) * TW + tid
        jp = M - 1 - pp
        qp = ring(pp)
        if jp >= 0:
            for r in range(TB):
                if i0 + r < N:
                    P[b, 1, i0 + r, jp] = blk[1, r, qp]

    return backward


#: forward kernels by (fused, fast)
FORWARD = {(f, q): _build_forward(f, q) for f in (False, True) for q in (False, True)}
#: backward kernels by fast (float32 weights)
BACKWARD = {q: _build_backward(q) for q in (False, True)}
