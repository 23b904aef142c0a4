"""The DP backward kernel: the expected alignment E by the pure linear recursion over the
forward's stored weights, a band's wavefront running right to left.

The backward never forms ``(R[i+1, j] - R[i, j] - C[i+1, j]) / gamma`` (the published form,
which cancels catastrophically in float32 when ``R`` is large).  The forward stores each cell's
soft-min weights ``p_diag``, ``p_up`` (``p_left = 1 - p_diag - p_up``), computed from
differences of neighbouring R values in float64, and the backward is

.. math::  E_{i,j} = E_{i,j+1}\\, p_\\mathrm{left}(i, j+1) + E_{i+1,j}\\, p_\\mathrm{up}(i+1, j)
           + E_{i+1,j+1}\\, p_\\mathrm{diag}(i+1, j+1),

the same for any recurrence whose cell is a soft-min over the three neighbours
(:mod:`sdtw.cuda.kernels.recurrence`).  It overwrites plane 1 of ``P`` with ``E`` in place
(each cell is read before it is written, by the same thread), and adds E's row and column sums
to ``sums`` when asked; with ``grads`` (:mod:`sdtw.cuda.kernels.sweep`) it computes the
gradients wrt x and y instead of writing E.

Columns run right to left: *position* ``p = M - 1 - j``.  Lane ``t`` at step ``s`` handles
position ``s - (TB - 1 - t)`` (the bottom row leads).  Lane ``t`` hands lane ``t - 1`` the sum
of the last two terms it owes it (``v``); the top lane hands the same ``v`` to the band above
through the boundary buffer (:mod:`sdtw.cuda.kernels.handoff`).  Row ``r`` keeps position ``p``
in ring slot ``(p + TB - 1 - r) % RING`` (``= s % RING``, as in the forward).

*Mover* (as the forward's: three-warp blocks, a barrier of the first two after every group),
with *lag groups* for row groups: the band's rows by their lag ``TB - 1 - r`` behind the
leading (bottom) row, lag group ``q`` being rows ``24 - 8 q .. 31 - 8 q``.  Item ``g`` writes E
of lag group ``q = (g + 3) % 4`` of position chunk ``cc - 2`` out (``cc = (g + 3) // 4``) and
stages that lag group's weights of position chunk ``cc``.  A column's sum over the band's rows
is four partial sums, one per item, added to ``sums`` after the fourth: in the one-warp
kernel's order for a full band, by lag group for the last, partial one (the one-warp kernel
adds its rows one by one there: the same sum, rounded differently).  The mover also zeroes the
ring first.
"""

from __future__ import annotations

from numba import cuda, float32, float64, int32, uint32, uint64

from sdtw.cuda.kernels import sweep
from sdtw.cuda.kernels.geometry import PO1, PO2, PUBS, RING1, TB, TB2, TS, TT, TT2, TW, G
from sdtw.cuda.kernels.handoff import handoff, take_ticket
from sdtw.cuda.kernels.jit import device, kernel
from sdtw.cuda.kernels.primitives import (
    SW_ALIGN,
    as_bits,
    band_view,
    bar_mover,
    bar_steps,
    below,
    cp_wait,
    fma,
    free_arrive,
    free_wait,
    from_next_lane,
    poll,
    ready_arrive,
    ready_wait,
    ring,
    slot,
    st_if,
    sync_band,
    u32,
)
from sdtw.cuda.kernels.specs import BackwardSpec
from sdtw.cuda.kernels.staging import ld8, ld32, st8, st32


def _e_out():
    """E's write-out and column sums: ``(write_e, wout, colsum)``."""

    @device
    def ecell(ev_view, blk, pp, jp, M, r):
        """Row ``r``'s E of position ``pp`` (column ``jp``) from the ring to ``E``'s band view;
        returns it as float64."""
        ev = blk[slot(PO1, r, pp + TB - 1, -1)]
        ev_view[u32(jp + r * M)] = ev
        return float64(ev)

    @device
    def ecol8(ev_view, blk, pp, jp, M, r0):
        """:func:`ecell` of rows ``r0 .. r0 + 7``, their sum."""
        c0 = ecell(ev_view, blk, pp, jp, M, r0) + ecell(ev_view, blk, pp, jp, M, r0 + 1)
        c1 = ecell(ev_view, blk, pp, jp, M, r0 + 2) + ecell(ev_view, blk, pp, jp, M, r0 + 3)
        c2 = ecell(ev_view, blk, pp, jp, M, r0 + 4) + ecell(ev_view, blk, pp, jp, M, r0 + 5)
        c3 = ecell(ev_view, blk, pp, jp, M, r0 + 6) + ecell(ev_view, blk, pp, jp, M, r0 + 7)
        return (c0 + c1) + (c2 + c3)

    @device
    def ecol8p(ev_view, blk, pp, jp, M, r0, nr1):
        """:func:`ecell` of the rows ``r0 .. r0 + 7`` up to ``nr1`` (a partial band), their sum
        in row order (the mover's)."""
        cs = 0.0
        for r in range(r0, r0 + G):
            if r <= nr1:
                cs += ecell(ev_view, blk, pp, jp, M, r)
        return cs

    @device
    def write_e(ev_view, blk, sums, b, N, Ml, M, pp, nr1, want_sums):
        """Write position ``pp``'s column of the band's E out (coalesced along columns) and, if
        ``want_sums``, add its sum over the band's rows to ``sums[b, N + j]``; a full band
        (``nr1 = TB - 1``) with constant row offsets.  ``Ml``: the pair's columns (position
        ``p`` is column ``Ml - 1 - p``); ``M``: the row stride."""
        jp = Ml - 1 - pp
        if jp >= 0:
            if nr1 == TB - 1:
                cs = (ecol8(ev_view, blk, pp, jp, M, 0) + ecol8(ev_view, blk, pp, jp, M, 8)) + (
                    ecol8(ev_view, blk, pp, jp, M, 16) + ecol8(ev_view, blk, pp, jp, M, 24)
                )
            else:
                cs = 0.0
                for r in range(TB):
                    if r <= nr1:
                        cs += ecell(ev_view, blk, pp, jp, M, r)
            if want_sums:
                cuda.atomic.add(sums, (b, N + jp), cs)

    @device
    def wout(Pu, blk, h, cw, r0, Ml, M, nr1):
        """The mover's write-out of E, rows ``r0 .. r0 + 7`` (up to ``nr1``; none if ``r0 >
        nr1``: those slots may hold the next chunk's weights by then) of position ``cw TW + h``
        of position chunk ``cw`` (none if ``cw < 0`` or past the table), and their sum."""
        pp = cw * TW + h
        jp = Ml - 1 - pp
        c8 = 0.0
        if cw >= 0 and jp >= 0 and r0 <= nr1:
            if nr1 == TB - 1:
                c8 = ecol8(Pu, blk, pp, jp, M, r0)
            else:
                c8 = ecol8p(Pu, blk, pp, jp, M, r0, nr1)
        return c8

    @device
    def colsum(sums, b, N, Ml, h, cw, cs, want_sums):
        """Add position chunk ``cw``'s column sum (this lane's column) to ``sums``."""
        jp = Ml - 1 - (cw * TW + h)
        if want_sums and cw >= 0 and jp >= 0:
            cuda.atomic.add(sums, (b, N + jp), cs)

    return write_e, wout, colsum


def _items(spec: BackwardSpec, wout):
    """The mover's items: ``(load8w, item, tout, tile_done)``."""
    grads = spec.grads

    @device
    def load8w(Pd, Pu, jn, Mu, nr1, r0):
        """The mover's loads of one item: rows ``r0 .. r0 + 7`` (clamped to ``nr1``) of
        column ``jn`` of both weight planes."""
        return ld8(Pd, jn, Mu, nr1, r0), ld8(Pu, jn, Mu, nr1, r0)

    @device
    def tout(TH, blk, h, cw, r0, Ml, nr1):
        """With ``grads``, :func:`wout`'s twin: rows ``r0 .. r0 + 7`` of position ``cw TW + h``
        of E into chunk ``cw``'s tile (parity ``cw & 1``), zeros past the table (stale shared
        memory times a zero could be NaN); their sum.  Nothing for ``cw < 0``."""
        pp = cw * TW + h
        ok = Ml - 1 - pp >= 0
        c8 = 0.0
        if cw >= 0:
            tb = uint32((cw & 1) * TT)
            for r in range(r0, r0 + G):
                e = blk[slot(PO1, r, pp + TB - 1, -1)]
                e = e if (ok and r <= nr1) else float32(0.0)
                TH[tb + uint32(r * TS + h)] = e
                c8 += float64(e)
        return c8

    @device
    def tile_done(CS, h, cw, cs):
        """With ``grads``: chunk ``cw``'s tile is complete (for ``cw >= 0``): its column sum
        (this lane's position) into ``CS``, then the hand-over: wait until the gradient warp
        has freed chunk ``cw - 1`` (whose tile parity the next chunk takes), say chunk ``cw``
        is ready.  In that order: were ``cw`` ready first, the gradient warp could arrive at
        ``free`` twice (chunks ``cw - 1`` and ``cw``) and complete a generation alone."""
        if cw >= 0:
            CS[(cw & 1) * TB + h] = float32(cs)
            if cw >= 1:
                free_wait()
            ready_arrive()

    @device
    def item(Pd, Pu, blk, h, cc, q, Ml, M, Mu, nr1, v, TH):
        """The mover's item (see :func:`_build_backward`): lag group ``q`` (rows ``r0 = 24 -
        8 q`` on) of position chunk ``cc``.  Writes E of position chunk ``cc - 2`` out
        (:func:`wout`), stages ``v`` (from :func:`load8w`, two items ago) and issues the loads
        of the item two on; returns those and the rows' sum of E."""
        r0 = 3 * G - q * G
        if grads:
            c8 = tout(TH, blk, h, cc - 2, r0, Ml, nr1)
        else:
            c8 = wout(Pu, blk, h, cc - 2, r0, Ml, M, nr1)
        wd, wu = v
        pl = cc * TW + h
        st8(blk, 0, wd, r0, pl + TB - 1, -1)
        st8(blk, PO1, wu, r0, pl + TB - 1, -1)
        if q >= 2:
            cn, qn = cc + 1, q - 2
        else:
            cn, qn = cc, q + 2
        jn = uint32(max(Ml - 1 - (cn * TW + h), 0))
        v = load8w(Pd, Pu, jn, Mu, nr1, 3 * G - qn * G)
        bar_mover()
        return v, c8

    return load8w, item, tout, tile_done


def _cells(spec: BackwardSpec):
    """The band's steps: ``group`` (of ``G`` steps)."""
    blk_t = float32 if spec.fast else float64

    @device
    def step(blk, rowb, pb, tid, s, sl, bot, st, lag, width, pub, xch):
        """One step of one lane: position ``s - lag`` of its row (at ``rowb`` in each plane of
        the flat block), ring slot ``sl``.

        ``st`` = (e_left, d_prev, inc_next, rs): the "from the right" term, this lane's previous
        ``E p_diag``, what the lane below shuffled up last step, and the row's sum of E so far;
        ``bot`` is what the band below hands over at this position (the last lane's ``inc``).
        ``pub``, ``pb``: as in the forward (lane 0 hands ``v`` to the band above).
        """
        e_left, d_prev, inc_next, rs = st
        inc = bot if tid == TB - 1 else inc_next
        p = s - lag
        ok = below(p, width)
        pd = float64(blk[rowb + sl])
        pu = float64(blk[PO1 + rowb + sl])
        e = e_left + inc if ok else 0.0
        blk[PO1 + rowb + sl] = blk_t(e)
        # (an explicit fma: contracted by the compiler, e * pu + d_prev became a multiply
        # on the chain and d_prev's own multiply fused into the add, one DMUL more
        # between the shuffles; offline SASS)
        v = fma(e, pu, d_prev)
        e_left = e * (1.0 - pd - pu) if ok else e_left
        _, hand, own, _, M = pb
        st_if(hand, uint64(own + p), as_bits(v), pub & below(p, M))
        return e_left, e * pd, from_next_lane(v, xch, s & 1), rs + e

    @device
    def group(blk, rowb, pb, tid, s0, grp, st, lag, width, pub, xch):
        """The G (= 8) steps of one group, unrolled as in the forward."""
        sb = ring(s0)
        t0, t1, t2, t3 = grp[0], grp[1], grp[2], grp[3]
        t4, t5, t6, t7 = grp[4], grp[5], grp[6], grp[7]
        st = step(blk, rowb, pb, tid, s0, sb, t0, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 1, sb + 1, t1, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 2, sb + 2, t2, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 3, sb + 3, t3, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 4, sb + 4, t4, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 5, sb + 5, t5, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 6, sb + 6, t6, st, lag, width, pub, xch)
        return step(blk, rowb, pb, tid, s0 + 7, sb + 7, t7, st, lag, width, pub, xch)

    return group


def _side_warps(spec: BackwardSpec, wout, colsum):
    """The roles of a block's other warps: ``(gradient_warp, mover)``."""
    grads = spec.grads
    ntm = max(grads, 1)  # (the gradient warp's code, compiled only with grads)
    sw, cp_rows, gx_chunk, gy_chunk, gx_out = sweep.build(ntm)
    load8w, item, tout, tile_done = _items(spec, wout)
    blk_t = float32 if spec.fast else float64

    @device
    def gradient_warp(X, Y, D, GX, GY, TH, CS, RS, XS, YS, b, N, Ml, M, i0, nr1, tid, nchunks):
        """The band's rows of x staged once; per chunk, its rows of y copied in
        (asynchronously, while the mover finishes the chunk's tile; in registers, 64 values a
        lane took 250 registers in all), and the chunk's products once the tile is ready, then
        the tile freed; g_x at the end."""
        g = tid >> 2
        tq = tid & 3
        nt = (D + 7) // 8
        acc = cuda.local.array((2, ntm, 4), float32)
        for a in range(2):
            for n in range(ntm):
                for q in range(4):
                    acc[a, n, q] = float32(0.0)
        Xp = band_view(X, (b * N + i0) * D)  # the band's rows of x
        Yp = band_view(Y, b * M * D)  # this pair's y
        GYp = band_view(GY, b * M * D)
        cp_rows(XS, Xp, 0, 1, nr1, D, tid)  # (rows past nr1: row nr1)
        for c in range(nchunks):
            jtop = Ml - 1 - c * TW  # the column of the chunk's position 0
            if jtop >= 0:
                sync_band()  # (the last chunk's reads of YS done)
                cp_rows(YS, Yp, jtop, -1, 0, D, tid)  # (columns below 0: column 0)
            ready_wait()
            if jtop >= 0:
                cp_wait()
                sync_band()
                tb = uint32((c & 1) * TT)
                gx_chunk(TH, tb, YS, nt, acc, g, tq)
                gy_chunk(TH, tb, CS, (c & 1) * TB, XS, YS, GYp, jtop, D, nt, g, tq)
            free_arrive()
        gx_out(acc, RS, XS, band_view(GX, (b * N + i0) * D), D, nt, nr1, g, tq)

    @device
    def mover(Pd, Pu, blk, TH, CS, sums, b, N, Ml, M, Mu, nr1, h, nchunks, want_sums):
        """The ring zeroed (as the one-warp kernel's lanes do), position chunk 0's first three
        lag groups staged, the loads of items 0 and 1 in flight; then one item per group.
        Column sums: each position chunk's four lag groups come in items 4 cw + 5 .. 4 cw + 8,
        summed as the one-warp write_e does."""
        zero = blk_t(0.0)
        for r in range(TB):
            for q in range(2):
                blk[uint32(r * RING1 + h + q * TW)] = zero
                blk[uint32(PO1 + r * RING1 + h + q * TW)] = zero
        sync_band()  # (the mover's lanes stage into slots that others zeroed)
        jn = uint32(max(Ml - 1 - h, 0))
        for q in range(3):
            wd, wu = load8w(Pd, Pu, jn, Mu, nr1, 3 * G - q * G)
            st8(blk, 0, wd, 3 * G - q * G, h + TB - 1, -1)
            st8(blk, PO1, wu, 3 * G - q * G, h + TB - 1, -1)
        v = load8w(Pd, Pu, jn, Mu, nr1, 0)
        v1 = load8w(Pd, Pu, uint32(max(Ml - 1 - (TW + h), 0)), Mu, nr1, 3 * G)
        bar_mover()
        p01 = 0.0
        c2 = 0.0
        for c in range(nchunks):
            v, c3 = item(Pd, Pu, blk, h, c, 3, Ml, M, Mu, nr1, v, TH)
            if grads:
                tile_done(CS, h, c - 2, p01 + (c2 + c3))
            else:
                colsum(sums, b, N, Ml, h, c - 2, p01 + (c2 + c3), want_sums)
            v1, c0 = item(Pd, Pu, blk, h, c + 1, 0, Ml, M, Mu, nr1, v1, TH)
            v, c1 = item(Pd, Pu, blk, h, c + 1, 1, Ml, M, Mu, nr1, v, TH)
            p01 = c0 + c1
            v1, c2 = item(Pd, Pu, blk, h, c + 1, 2, Ml, M, Mu, nr1, v1, TH)
        # what no item wrote: lag group 3 of position chunk nchunks - 2, all of the last
        cw = nchunks - 1
        if grads:
            c3 = tout(TH, blk, h, cw - 1, 0, Ml, nr1)
            tile_done(CS, h, cw - 1, p01 + (c2 + c3))
            c0 = tout(TH, blk, h, cw, 3 * G, Ml, nr1)
            c1 = tout(TH, blk, h, cw, 2 * G, Ml, nr1)
            c2 = tout(TH, blk, h, cw, G, Ml, nr1)
            c3 = tout(TH, blk, h, cw, 0, Ml, nr1)
            tile_done(CS, h, cw, (c0 + c1) + (c2 + c3))
            free_wait()  # the gradient warp is done with the last tile
            return
        c3 = wout(Pu, blk, h, cw - 1, 0, Ml, M, nr1)
        colsum(sums, b, N, Ml, h, cw - 1, p01 + (c2 + c3), want_sums)
        c0 = wout(Pu, blk, h, cw, 3 * G, Ml, M, nr1)
        c1 = wout(Pu, blk, h, cw, 2 * G, Ml, M, nr1)
        c2 = wout(Pu, blk, h, cw, G, Ml, M, nr1)
        c3 = wout(Pu, blk, h, cw, 0, Ml, M, nr1)
        colsum(sums, b, N, Ml, h, cw, (c0 + c1) + (c2 + c3), want_sums)

    return sw, gradient_warp, mover


def _zero_padding(blk_t):
    """``zero_padding``: with lengths, a band's cells of E past the pair's own table."""

    @device
    def zero_padding(P, b, N, M, i0, Nb, Mb):
        """Zero the band's cells of ``P[b, 1]`` (E) past the pair's rows ``Nb`` and columns
        ``Mb``, which the kernels never write otherwise (the forward's park kernel may have
        left distances there); every thread of the block takes a share."""
        Pu = band_view(P, (2 * b * N + i0) * M + N * M)
        step = cuda.blockDim.x
        zero = blk_t(0.0)
        for r in range(min(TB, N - i0)):
            c0 = 0 if i0 + r >= Nb else Mb
            for j in range(c0 + cuda.threadIdx.x, M, step):
                Pu[uint32(r * M + j)] = zero

    return zero_padding


def build(spec: BackwardSpec):
    """The backward kernel of ``spec`` (compiled on first launch)."""
    fast, mover, grads, lengths = spec.fast, spec.mover, spec.grads, spec.lengths
    blk_t = float32 if fast else float64
    write_e, wout, colsum = _e_out()
    group = _cells(spec)
    sw, gradient_warp, move = _side_warps(spec, wout, colsum)
    tsw = TB * sw
    zero_padding = _zero_padding(blk_t)

    @kernel(launch_bounds=(3 * TB, 4) if grads else None)
    def backward(P, N, M, gout, Gb, sums, X, Y, D, GX, GY):
        """Expected alignment, written in place: ``P[:, 1] <- E * gout``; if ``sums`` is
        (B, N + M) float64 zeros (not a (1, 1) placeholder), also its row sums ``sums[:, :N]``
        and column sums ``sums[:, N:]``.  With ``grads`` instead: E is not written, and
        ``GX`` (B, N, D) and ``GY`` (B, M, D) (flat; ``GY`` zeroed) get the gradients of
        ``gout``-weighted squared-Euclidean soft-DTW wrt ``X`` (B, N, D) and ``Y`` (B, M, D)
        (flat, float32, ``D <= SWEEP_MAX_D``); otherwise those five are unused placeholders.

        Columns run right to left: *position* ``p = M - 1 - j``.  Lane ``t`` at step ``s``
        handles position ``s - (TB - 1 - t)`` (the bottom row leads).  Pull form:
        ``E[i, j] = E[i, j+1] p_left(i, j+1) + E[i+1, j] p_up(i+1, j)
        + E[i+1, j+1] p_diag(i+1, j+1)``.  Lane ``t`` hands lane ``t - 1`` the sum of the last two
        terms it owes it (``v``); the top lane hands the same ``v`` to the band above through
        ``Gb`` ((B, nb, M + 1) int64 flattened, float64 bits by position, then the ticket; all
        pre-filled with ``SENTINEL``).
        Row ``r`` keeps position ``p`` in ring slot ``(p + TB - 1 - r) % RING`` (= ``s % RING``,
        as in the forward).

        ``lengths``: the pair's own lengths (n, m) sit in ``Gb`` before the ticket (x's B, then
        y's B); position ``p`` is then column ``m - 1 - p``, E starts at (n - 1, m - 1), bands
        past row n leave at once (after zeroing their rows of E) and a band's chunks stop at
        m (its E past column m zeroed first).  The weights past the pair's table are never
        read.  N, M stay the padded sizes of the layout.
        """
        tx = cuda.threadIdx.x
        tid = tx & (TB - 1) if mover else tx  # the lane (in its warp, with a mover)
        B = gout.shape[0]
        nb = (N + TB - 1) // TB
        zero = blk_t(0.0)
        tk = cuda.shared.array(1, int32)
        t = take_ticket(Gb, tk)
        kr = t // B
        k = nb - 1 - kr
        b = t - kr * B
        i0 = k * TB
        if lengths:  # (the pair's own table: Nb x Mb)
            tail = Gb.shape[0] - 1 - 2 * B
            Nb = Gb[tail + b]
            Mb = Gb[tail + B + b]
            if not grads:
                zero_padding(P, b, N, M, i0, Nb, Mb)
            if i0 >= Nb:
                return  # a band past the pair's rows
            nbb = (Nb + TB - 1) // TB  # the pair's bands
        else:
            Nb = N
            Mb = M
            nbb = nb
        i = i0 + tid
        own = (b * nb + k) * (M + 1)  # this band's boundary row in the flat Gb
        width = Mb if i < Nb else 0
        lag = TB - 1 - tid
        ups = k > 0  # a band above to hand to
        pub = tid == 0 and ups  # lane 0 hands its v to the band above
        blk = cuda.shared.array(PO2, blk_t)  # p_diag; p_up, then E (at PO1)
        rowb = uint32(tid * RING1)  # this lane's row in each plane
        grp = cuda.shared.array(G, float64)
        pubs = cuda.shared.array(PUBS, float64)  # lane 0's hand-overs (+ spare slots)
        xch = cuda.shared.array((2, TB), float64)
        nchunks = (Mb + TB - 1 + TW - 1) // TW
        row0 = (2 * b * N + i0) * M  # P[b, 0, i0, 0] (flat)
        Pd = band_view(P, row0)  # band views (see _ld8) of this pair's weights
        Pu = band_view(P, row0 + N * M)  # (and E, written over p_up)
        nr1 = uint32(min(TB, Nb - i0) - 1)  # the band's last row
        Mu = uint32(M)
        want_sums = sums.shape[1] == N + M
        if grads:  # the gradient warp's tiles (two, by chunk parity), column and row sums
            TH = cuda.shared.array(TT2, float32)
            CS = cuda.shared.array(TB2, float32)
            RS = cuda.shared.array(TB, float32)
            XS = cuda.shared.array(tsw, float32, alignment=SW_ALIGN)
            YS = cuda.shared.array(tsw, float32, alignment=SW_ALIGN)
        else:
            TH = cuda.shared.array(1, float32)  # placeholders: never read
            CS = TH
            RS = TH
            XS = TH
            YS = TH
        if mover and tx >= 2 * TB:
            if grads:
                gradient_warp(
                    X, Y, D, GX, GY, TH, CS, RS, XS, YS, b, N, Mb, M, i0, nr1, tid, nchunks
                )
            return
        if mover and tx >= TB:
            move(Pd, Pu, blk, TH, CS, sums, b, N, Mb, M, Mu, nr1, tid, nchunks, want_sums)
            return
        if tid < G:
            grp[tid] = 0.0  # the bottom band's row below (others overwrite it group by group)
        # Zero this lane's ring row: the first chunk's steps reach slots that no staged column
        # fills (positions p < 0 of the skew).  Their weights are multiplied by E = 0 there,
        # and 0 * (a NaN or inf left in shared memory) would be NaN.
        if not mover:
            for q in range(RING1):
                blk[rowb + q] = zero
                blk[PO1 + rowb + q] = zero
            sync_band()  # before the first chunk's staging writes other lanes' rows
        # (e_left, d_prev, inc_next, rs); E[N-1, M-1] = gout enters as the "from the right"
        # term of position 0.
        st = (float64(gout[b]) if i == Nb - 1 else 0.0, 0.0, 0.0, 0.0)
        below_ok = k < nbb - 1
        below_row = own + (M + 1) if below_ok else own  # (the bottom band: its own, ignored)
        pref = poll(Gb, below_row + min(tid, Mb))
        pb = (pubs, Gb, own, TB - 1, Mb)  # where lane 0's steps put their hand-overs
        if not mover:
            jn = uint32(max(Mb - 1 - tid, 0))
            wd, wu = ld32(Pd, jn, Mu, nr1), ld32(Pu, jn, Mu, nr1)
        else:
            bar_steps()  # the mover's zeroing and first staging
        for c in range(nchunks):
            s0c = c * TW
            pl = s0c + tid  # the position this thread stages
            jl = Mb - 1 - pl
            if not mover:
                # as in the forward: registers (chunk c) into the ring, then load chunk c + 1
                # (rows and columns past the table stage copies of real, finite weights: their
                # E is 0, and 0 times a finite weight adds nothing)
                st32(blk, 0, wd, pl + TB - 1, -1)
                st32(blk, PO1, wu, pl + TB - 1, -1)
                jn = uint32(max(jl - TW, 0))
                wd, wu = ld32(Pd, jn, Mu, nr1), ld32(Pu, jn, Mu, nr1)
                sync_band()
            # TW // G = 4 groups, unrolled as in the forward
            pref = handoff(Gb, below_row, s0c, Mb, pref, grp, 0.0, below_ok)
            st = group(blk, rowb, pb, tid, s0c, grp, st, lag, width, pub, xch)
            if mover:
                bar_steps()
            pref = handoff(Gb, below_row, s0c + G, Mb, pref, grp, 0.0, below_ok)
            st = group(blk, rowb, pb, tid, s0c + G, grp, st, lag, width, pub, xch)
            if mover:
                bar_steps()
            pref = handoff(Gb, below_row, s0c + 2 * G, Mb, pref, grp, 0.0, below_ok)
            st = group(blk, rowb, pb, tid, s0c + 2 * G, grp, st, lag, width, pub, xch)
            if mover:
                bar_steps()
            pref = handoff(Gb, below_row, s0c + 3 * G, Mb, pref, grp, 0.0, below_ok)
            st = group(blk, rowb, pb, tid, s0c + 3 * G, grp, st, lag, width, pub, xch)
            if grads:
                RS[tid] = float32(st[3])  # (the last chunk's: the row sums of E)
            if mover:
                bar_steps()
                continue
            sync_band()
            if c > 0:
                write_e(Pu, blk, sums, b, N, Mb, M, s0c - TW + tid, nr1, want_sums)
            sync_band()
        sync_band()
        if not mover:
            write_e(Pu, blk, sums, b, N, Mb, M, (nchunks - 1) * TW + tid, nr1, want_sums)
        if want_sums and i < Nb and not grads:
            sums[b, i] = st[3]

    return backward
