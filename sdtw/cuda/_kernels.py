"""Numba CUDA kernels: pipelined band wavefront for soft-DTW.

Design
------
The (N, M) table of a pair is cut into *bands* of ``TB`` rows.  One thread block of ``TB``
threads (one warp) owns one band, thread ``t`` owns row ``i0 + t``, and the block sweeps the
band's columns as a skewed wavefront: at step ``s`` thread ``t`` computes column ``s - t``.
The three DP neighbours come from the thread itself (left), from thread ``t - 1`` one step
earlier (up) and two steps earlier (diagonal), passed by a warp shuffle: the 32 steps of a
chunk run without a barrier (each lane touches only its own row of the staged block).
Thread 0 reads the row above the band from a small boundary buffer ``Rb`` that the band above
publishes chunk by chunk (``TW`` columns) with a progress counter; the band below spins on
that counter.  Blocks take a *ticket* from an atomic counter and derive their
(band, pair) from it, so a block only ever waits for blocks that started before it: no
deadlock whatever order the hardware schedules blocks in, and the CUDA simulator (which runs
blocks one at a time) works too.  One launch does the whole forward, one the whole backward:
launches per step are O(1), not O(N + M).

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
``E = P[:, 1]`` needs no extra buffer.  Boundary buffers are (B, ceil(N/TB), Mp) float64 with
``Mp`` padded to a multiple of ``TW`` so that every chunk of a boundary row owns whole cache
lines (a stale-L1 read of a line shared with an earlier chunk is impossible).
"""

from __future__ import annotations

import math
import os

from numba import cuda, float32, float64, int32
from numba.cuda import libdevice

#: Numba's CPU simulator lacks warp shuffles and libdevice: two small device functions below
#: have simulator twins, chosen once at import.
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
TB = 32  # rows per band = threads per block (one warp)
TW = 32  # columns per chunk (published / staged together); TW == TB is assumed below
DC = 16  # features staged in shared memory per pass of the fused distance
TB1 = TB + 1  # padded row length (bank-conflict-free column writes)
TW1 = TW + 1
G = 8  # boundary values handed between bands per group (TW is a multiple of G)
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

    NaN anywhere propagates to the value (it enters the sum of exponentials).
    """
    m = _min3(r_diag, r_up, r_left)
    if m == INF:
        # all +inf (unreachable), or NaN hidden behind +inf minima: keep the NaN
        return r_diag + r_up + r_left, 0.0, 0.0
    ed = math.exp((m - r_diag) * inv_gamma)
    eu = math.exp((m - r_up) * inv_gamma)
    el = math.exp((m - r_left) * inv_gamma)
    s = ed + eu + el
    inv_s = 1.0 / s
    return m - gamma * math.log(s), ed * inv_s, eu * inv_s


@cuda.jit(device=True, inline=True)
def _fast_exp_gpu(x):
    return libdevice.fast_expf(x)


@cuda.jit(device=True, inline=True)
def _fast_log_gpu(x):
    return libdevice.fast_logf(x)


@cuda.jit(device=True, inline=True)
def _fast_exp_sim(x):
    return float32(math.exp(x))


@cuda.jit(device=True, inline=True)
def _fast_log_sim(x):
    return float32(math.log(x))


fast_exp = _fast_exp_sim if SIMULATED else _fast_exp_gpu
fast_log = _fast_log_sim if SIMULATED else _fast_log_gpu


@cuda.jit(device=True, inline=True)
def _softmin3_fast(r_diag, r_up, r_left, gamma, inv_gamma):
    """As :func:`_softmin3`, with float32 hardware exp/log of the float64 *differences*.

    The arguments of exp are ``(m - r_k) / gamma <= 0`` formed in float64, so rounding them to
    float32 and using ``ex2.approx`` costs a relative ~2e-7 of each weight, not an absolute
    error that grows with ``R``; ``log(s)`` with ``s`` in [1, 3] is good to ~2e-7 absolute.
    R itself stays float64.  These are the two multi-function-unit instructions on the
    step's critical path (the accurate libm versions are ~10 dependent instructions each).
    """
    m = _min3(r_diag, r_up, r_left)
    if m == INF:
        # all +inf (unreachable), or NaN hidden behind +inf minima: keep the NaN
        return r_diag + r_up + r_left, 0.0, 0.0
    ed = fast_exp(float32((m - r_diag) * inv_gamma))
    eu = fast_exp(float32((m - r_up) * inv_gamma))
    el = fast_exp(float32((m - r_left) * inv_gamma))
    s = ed + eu + el
    inv_s = fast_rcp(s)
    return m - gamma * float64(fast_log(s)), float64(ed * inv_s), float64(eu * inv_s)


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
# no progress counter, no fence, no barrier between producer and consumer.  The producer stores
# with an atomic exchange and the consumer reads with an atomic add of 0, so both are L2
# operations (never a stale L1 line).
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
def _handoff_group(hand, b, kh, col0, limit, pref, grp):
    """Take one group of ``G`` boundary values and prefetch the next group.

    Lanes ``0 .. G - 1`` hold in ``pref`` the bits of columns ``col0 + lane`` (read one group
    earlier; ``col0`` is this group's first column and ``limit`` decides which columns exist,
    see the callers).  Wait until all are written (re-reading the missing ones), publish the
    values in ``grp`` (shared), and return the bits of the next group's columns, read now so
    that their latency overlaps this group's steps.
    """
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
    return pref


def _build_forward(fused: bool, fast: bool):
    """Forward kernel; ``fused`` and ``fast`` are compile-time constants (closure).

    ``fast`` selects float32 transcendentals (:func:`_softmin3_fast`), used for float32
    inputs; float64 inputs get float64 throughout.
    """
    softmin3 = _softmin3_fast if fast else _softmin3
    # The staged block holds the cost and then the weights.  float32 suffices when both are
    # float32 anyway (unfused float32 cost, float32 weights): half the shared memory, so twice
    # the resident blocks per SM.  Fused distances are float64 and need the float64 block.
    blk_t = float32 if (fast and not fused) else float64

    @cuda.jit
    def forward(X, Y, XX, YY, N, M, D, gamma, lo, hi, P, Rb, tick, out, store):
        """One block per (band, pair).

        unfused: X = cost (B, N, M), Y/XX/YY unused.
        fused:   X (B, N, D), Y (B, M, D), XX (B, N) = |x|^2, YY (B, M) = |y|^2 (float64).
        P (B, 2, N, M) weights (written iff ``store``), Rb (B, nb, Mp) int64 boundary rows
        (float64 bits, pre-filled with ``SENTINEL``), tick int32 [ticket], out (B,) loss.
        """
        tid = cuda.threadIdx.x
        B = out.shape[0]
        inv_gamma = 1.0 / gamma
        zero = blk_t(0.0)
        tk = cuda.shared.array(1, int32)
        t = _take_ticket(tick, tk)
        k = t // B
        b = t - k * B
        i0 = k * TB
        i = i0 + tid
        row_ok = i < N
        # blk[buf, 0] holds the cost block, overwritten by p_diag; blk[buf, 1] gets p_up.
        blk = cuda.shared.array((2, 2, TB, TW), blk_t)
        grp = cuda.shared.array(G, float64)
        xch = cuda.shared.array((2, TB), float64)
        if fused:
            xsh = cuda.shared.array((DC, TB1), float64)
            ysh = cuda.shared.array((DC, TW1), float64)
        up_next = INF
        r_left = INF
        r_diag = INF
        if k == 0 and tid == 0:
            r_diag = 0.0  # R[-1, -1] = 0
        pref = SENTINEL
        if k > 0 and tid < G and tid < M:
            pref = cuda.atomic.add(Rb, (b, k - 1, tid), 0)
        nchunks = (M + TB - 1 + TW - 1) // TW
        for c in range(nchunks):
            buf = c % 2
            j0 = c * TW
            jl = j0 + tid  # the column this thread stages
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
                        cuda.syncthreads()
                        for q in range(DC):  # TB // DC rows per pass over the lanes
                            r = rh + (TB // DC) * q
                            xv = float64(X[b, min(i0 + r, N - 1), dc])
                            yv = float64(Y[b, min(j0 + r, M - 1), dc])
                            xsh[dd, r] = xv if (d < D and i0 + r < N) else 0.0
                            ysh[dd, r] = yv if (d < D and j0 + r < M) else 0.0
                        cuda.syncthreads()
                        for e in range(DC):
                            yv = ysh[e, tid]
                            for r in range(TB):
                                acc[r] += xsh[e, r] * yv
                    yy = YY[b, jc]
                    for r in range(TB):
                        v = XX[b, min(i0 + r, N - 1)] + yy - 2.0 * acc[r]
                        if v < 0.0:
                            v = 0.0
                        blk[buf, 0, r, tid] = v if (i0 + r < N and jl < M) else 0.0
                else:
                    for r0 in range(0, TB, 4):
                        v0 = X[b, min(i0 + r0, N - 1), jc]
                        v1 = X[b, min(i0 + r0 + 1, N - 1), jc]
                        v2 = X[b, min(i0 + r0 + 2, N - 1), jc]
                        v3 = X[b, min(i0 + r0 + 3, N - 1), jc]
                        blk[buf, 0, r0, tid] = v0 if (i0 + r0 < N and jl < M) else zero
                        blk[buf, 0, r0 + 1, tid] = v1 if (i0 + r0 + 1 < N and jl < M) else zero
                        blk[buf, 0, r0 + 2, tid] = v2 if (i0 + r0 + 2 < N and jl < M) else zero
                        blk[buf, 0, r0 + 3, tid] = v3 if (i0 + r0 + 3 < N and jl < M) else zero
            cuda.syncthreads()
            for kk in range(TW):
                s = j0 + kk
                if k > 0 and kk % G == 0:
                    pref = _handoff_group(Rb, b, k - 1, s, M, pref, grp)
                j = s - tid
                if tid == 0:
                    up = grp[kk % G] if k > 0 else INF
                else:
                    up = up_next
                r = INF
                if row_ok and j >= 0 and j < M:
                    if kk >= tid:
                        cb = buf
                        col = kk - tid
                    else:
                        cb = 1 - buf
                        col = kk - tid + TW
                    pd = 0.0
                    pu = 0.0
                    dj = j - i
                    if dj >= -lo and dj <= hi:
                        m, pd, pu = softmin3(r_diag, up, r_left, gamma, inv_gamma)
                        r = blk[cb, 0, tid, col] + m
                    blk[cb, 0, tid, col] = pd
                    blk[cb, 1, tid, col] = pu
                    if tid == TB - 1:
                        cuda.atomic.exch(Rb, (b, k, j), as_bits(r))
                    if i == N - 1 and j == M - 1:
                        out[b] = r
                r_left = r
                r_diag = up
                up_next = from_prev_lane(r, xch, s & 1)
            cuda.syncthreads()
            # Chunk c - 1 is complete now: write its weights out, coalesced along columns.
            if store and c > 0:
                jp = j0 - TW + tid
                if jp < M:
                    for r in range(TB):
                        if i0 + r < N:
                            P[b, 0, i0 + r, jp] = blk[1 - buf, 0, r, tid]
                            P[b, 1, i0 + r, jp] = blk[1 - buf, 1, r, tid]
            cuda.syncthreads()
        if store:
            c = nchunks - 1
            jp = c * TW + tid
            if jp < M:
                for r in range(TB):
                    if i0 + r < N:
                        P[b, 0, i0 + r, jp] = blk[c % 2, 0, r, tid]
                        P[b, 1, i0 + r, jp] = blk[c % 2, 1, r, tid]

    return forward


def _build_backward(fast: bool):
    """Backward kernel; ``fast`` (float32 weights) stages them in a float32 block."""
    blk_t = float32 if fast else float64

    @cuda.jit
    def backward(P, N, M, gout, Gb, tick):
        """Expected alignment, written in place: ``P[:, 1] <- E * gout``.

        Lane ``t`` at step ``s`` handles column ``M - 1 - s + (TB - 1 - t)`` (the bottom row leads).
        Pull form: ``E[i, j] = E[i, j+1] p_left(i, j+1) + E[i+1, j] p_up(i+1, j)
        + E[i+1, j+1] p_diag(i+1, j+1)``.  Lane ``t`` hands lane ``t - 1`` the sum of the last two
        terms it owes it (``v``); the top lane hands the same ``v`` to the band above through
        ``Gb`` (B, nb, Mp) int64 (float64 bits, pre-filled with ``SENTINEL``), indexed by
        position ``M - 1 - j`` so that both directions read their boundary in ascending order.
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
        blk = cuda.shared.array((2, 2, TB, TW), blk_t)
        grp = cuda.shared.array(G, float64)
        xch = cuda.shared.array((2, TB), float64)
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
            buf = c % 2
            s0 = c * TW
            jl = M - 1 - (s0 + tid)  # the column this thread stages (columns run right to left)
            if s0 < M:
                jc = max(jl, 0)
                for r0 in range(0, TB, 2):
                    d0 = P[b, 0, min(i0 + r0, N - 1), jc]
                    u0 = P[b, 1, min(i0 + r0, N - 1), jc]
                    d1 = P[b, 0, min(i0 + r0 + 1, N - 1), jc]
                    u1 = P[b, 1, min(i0 + r0 + 1, N - 1), jc]
                    ok0 = i0 + r0 < N and jl >= 0
                    ok1 = i0 + r0 + 1 < N and jl >= 0
                    blk[buf, 0, r0, tid] = d0 if ok0 else zero
                    blk[buf, 1, r0, tid] = u0 if ok0 else zero
                    blk[buf, 0, r0 + 1, tid] = d1 if ok1 else zero
                    blk[buf, 1, r0 + 1, tid] = u1 if ok1 else zero
            cuda.syncthreads()
            for kk in range(TW):
                s = s0 + kk
                if below_ok and kk % G == 0:
                    pref = _handoff_group(Gb, b, k + 1, s, M, pref, grp)
                j = M - 1 - s + (TB - 1 - tid)
                if tid == TB - 1:
                    inc = grp[kk % G] if below_ok else 0.0
                else:
                    inc = inc_next
                v = 0.0
                d_cur = 0.0
                if row_ok and j >= 0 and j < M:
                    lofs = kk - (TB - 1 - tid)
                    if lofs >= 0:
                        cb = buf
                        col = lofs
                    else:
                        cb = 1 - buf
                        col = lofs + TW
                    e = e_left + inc
                    if i == N - 1 and j == M - 1:
                        e += g
                    pd = blk[cb, 0, tid, col]
                    pu = blk[cb, 1, tid, col]
                    blk[cb, 1, tid, col] = e
                    v = e * pu + d_prev
                    d_cur = e * pd
                    e_left = e * (1.0 - pd - pu)
                    if tid == 0:
                        cuda.atomic.exch(Gb, (b, k, M - 1 - j), as_bits(v))
                else:
                    e_left = 0.0
                d_prev = d_cur
                inc_next = from_next_lane(v, xch, s & 1)
            cuda.syncthreads()
            if c > 0:
                jp = M - 1 - (s0 - TW + tid)
                if jp >= 0:
                    for r in range(TB):
                        if i0 + r < N:
                            P[b, 1, i0 + r, jp] = blk[1 - buf, 1, r, tid]
            cuda.syncthreads()
        c = nchunks - 1
        jp = M - 1 - (c * TW + tid)
        if jp >= 0:
            for r in range(TB):
                if i0 + r < N:
                    P[b, 1, i0 + r, jp] = blk[c % 2, 1, r, tid]

    return backward


#: forward kernels by (fused, fast)
FORWARD = {(f, q): _build_forward(f, q) for f in (False, True) for q in (False, True)}
#: backward kernels by fast (float32 weights)
BACKWARD = {q: _build_backward(q) for q in (False, True)}
