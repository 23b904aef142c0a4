"""The DP forward kernel: a band's wavefront, its staging and write-out, by mode.

Modes (where the costs come from; :class:`~sdtw.cuda.kernels.specs.ForwardSpec`):

* ``cost``: ``X`` is a cost tensor (B, N, M).
* ``fused``: ``X`` (B, N, D), ``Y`` (B, M, D); the band's warp computes the squared distances
  itself between its chunks' steps (:mod:`sdtw.cuda.kernels.distances`), so it needs no (N, M)
  buffer at all: the no-gradient fused forward of float64 inputs.
* ``split`` (float64): ``X`` is the float64 weights buffer ``P`` (B, 2, N, M) itself, plane 0
  holding each cell's float64 squared distance (written by the park kernel; plane 1 not read).
* ``hilo`` (float32): ``X`` is the float32 weights buffer ``P`` itself, each cell's float64
  squared distance held as the two 32-bit words of its bits, the high word in plane 1 and the
  low word in plane 0 (the float32 park kernel's).  The staging joins them, exactly.
* ``tiled`` (float32, with a mover): ``X`` (B, N, D), ``Y`` (B, M, D) flat, the weights into
  ``P`` (iff ``store``); the block's third warp, the *distance warp*, computes the distances a
  column chunk ahead of the mover: the fused float32 forward in one launch, no park kernel.

In modes ``split`` and ``hilo`` a band reads its cells' distances before it writes the same
cells' weights over them, so the distances take no memory beyond ``P``.  The weights are
written through ``X`` (the launcher passes placeholders for ``P`` and ``Y``: no two arguments
alias, which the simulator, copying each argument in and back out in turn, requires).

*Mover* (modes ``hilo`` and ``tiled``): blocks of three warps.  Warp 0 runs the band's steps;
warp 1, the *mover*, stages the costs and writes the weights out, which the one-warp kernel does
between its chunks' steps, so that those instructions no longer sit on the steps' warp; warp 2
leaves at once (it is there for the warp schedulers: with blocks of two warps, four blocks on
an SM would put their step warps on two of its four schedulers, if warps go to schedulers by
their slot modulo 4; with three, on four).  The steps' warp and the mover meet after every
group of ``G`` steps (two named barriers, one waited for by each warp).  In the time of group
``g`` the mover takes *item* ``g``: row group ``q = (g + 3) % 4`` (rows ``8 q .. 8 q + 7``)
of column chunk ``cc = (g + 3) // 4``.  It writes the weights of that row group's column chunk
``cc - 2`` out (their last step was in group ``g - 1``), stores the costs of column chunk
``cc`` into the same ring slots (loaded two items earlier), and issues the loads for item
``g + 2``.  Column chunk ``cc``'s row group ``q`` is first read in group ``4 cc + q = g + 3``.
In group ``g`` the steps of that row group touch only column chunk ``cc - 1``'s slots, so the
ring needs no more than its two chunks.  After the last group the mover writes out what is
left.  The results are the one-warp kernel's, bit for bit.

*Distance warp* (mode ``tiled``): the third warp computes column chunk ``c``'s 32 x 32 squared
distances in its registers and writes them to a shared tile ``T`` that the mover stages from.
One tile, handed over by a free/ready pair of barriers: the distance warp writes chunk 0's tile
and says *ready*; then, for each chunk ``c`` with a chunk ``c + 1``, it computes chunk
``c + 1``'s products while the band runs chunk ``c - 1``'s and ``c``'s steps, waits until the
mover says *free* (after item ``(c, 3 G)``, the tile's last reader), writes the tile and says
*ready*, which the mover waits for before item ``(c + 1, 0)``.  Column chunks past ``M`` stage
zeros.  The tile's values are the park kernel's bit for bit, so this mode gives mode
``hilo``'s results.
"""

from __future__ import annotations

from numba import cuda, float32, float64, int32, uint32, uint64

from sdtw.cuda.kernels import distances as dist
from sdtw.cuda.kernels.geometry import (
    BIG,
    DC,
    INF,
    LN2,
    LOG2E,
    PO1,
    PUBS,
    RING,
    RING1,
    TB,
    TB1,
    TW,
    TW1,
    G,
)
from sdtw.cuda.kernels.handoff import handoff, take_ticket
from sdtw.cuda.kernels.jit import device, kernel
from sdtw.cuda.kernels.primitives import (
    as_bits,
    band_view,
    bar_mover,
    bar_steps,
    below,
    free_arrive,
    free_wait,
    from_prev_lane,
    hi_word,
    lo_word,
    pack_f32,
    poll,
    ready_arrive,
    ready_wait,
    ring,
    slot,
    st_if,
    sync_band,
    u32,
    unpack_f32,
)
from sdtw.cuda.kernels.recurrence import RECURRENCES, min2
from sdtw.cuda.kernels.specs import COST, FUSED, HILO, SPLIT, TILED, ForwardSpec
from sdtw.cuda.kernels.staging import join8, join32, ld8, ld32, st8, st32


def _block_types(spec: ForwardSpec):
    """The staged block's type (cost, then p_diag), the upper weights' type, and whether a
    float32 p_diag is kept as its bits in a float64 block."""
    # float32 suffices when cost and weights are both float32 anyway: half the shared memory,
    # so twice the resident blocks per SM.  Fused distances are float64: the float64 block.
    blk_t = float32 if (spec.fast and spec.mode == COST) else float64
    w_t = float32 if spec.fast else float64  # (half size when fast)
    return blk_t, w_t, spec.fast and blk_t == float64


def _cells(spec: ForwardSpec):
    """The band's steps and the stored p_diag's reader: ``(group, get_pd)``."""
    fused = spec.mode == FUSED
    ckpt = spec.ckpt
    rec = RECURRENCES[spec.recurrence]
    softmin3 = rec.cell_fast if spec.fast else rec.cell
    msm = rec.costs == 3  # (the transition costs staged in ``cst``: see the recurrence)
    blk_t, w_t, packed = _block_types(spec)

    @device
    def put_pd(pd):
        return pack_f32(pd) if packed else blk_t(pd)

    @device
    def get_pd(v):
        return unpack_f32(v) if packed else v

    @device
    def step(sh, rowb, pb, tid, s, sl, top, st, lead, width, pub, scale, xch):
        """One anti-diagonal step of one lane: column ``s - tid`` of its row (at ``rowb`` in
        the flat blocks), ring slot ``sl``.

        ``st`` = (r_diag, r_left, up_next): R of the diagonal and left neighbours and what the
        lane above shuffled down last step; ``top`` is the row above the band at this column
        (lane 0's upper neighbour).  ``sh``: the shared ``(blk, wup, cst)``; Soft-MSM's ``cst``
        holds the cell's up and left costs (the high and low words of a float64 slot), ``blk``
        its match cost.  Branch-free: invalid cells select +inf and zero weights.  ``pub``:
        this lane publishes its R for the band below (the band's last row), through
        ``pb`` = (shared ring, boundary buffer, its row, the lane's lag ``plag``, M); with
        ``ckpt``, its R at the checkpoint columns (``j = M - 1 - 32 (c + 1)``, the left edge
        of the backward's position chunk ``c``) to ``pb[5] + 32 c``.
        """
        blk, wup, cst = sh
        r_diag, r_left, up_next = st
        if fused:
            cost = blk[rowb + sl]  # already scaled
        else:
            cost = float64(blk[rowb + sl]) * scale
        if msm:  # (the candidates shifted by the up cost, which takes the cost's place)
            w = cst[rowb + sl]
            cu = float64(hi_word(w)) * scale
            # An up cost past float32's range (+inf) closes the up edge: no shift then, and
            # an infinite upper value (one select on the chain, as lane 0's top).
            has_up = cu < INF
            cu = cu if has_up else 0.0
            rd = r_diag + (cost - cu)
            rl = r_left + (float64(lo_word(w)) * scale - cu)
            cost = cu
            m2 = min2(rd, rl)
            mm2 = min2(min2(rd, BIG), rl)
            up = top if tid == 0 else up_next  # (the next step's diagonal)
            alt = top if has_up else INF
            up_c = up_next if (tid != 0) & has_up else alt
        else:
            # Off the chain, while the upper value travels: r_left is this lane's value of the
            # step before, r_diag its upper value then (so min(r_diag, BIG) is older still,
            # and mm2 = min(m2, BIG) is one comparison after r_left, alongside m2's).
            rd = r_diag
            rl = r_left
            m2 = min2(r_diag, r_left)
            mm2 = min2(min2(r_diag, BIG), r_left)
            up = top if tid == 0 else up_next
            up_c = up
        ok = below(s - lead, width)
        r, pd, pu = softmin3(rd, rl, m2, mm2, up_c, cost, ok)  # (inf, 0, 0) where not ok
        if not fused:
            # (The fused mode runs without ``store`` only: its weights would be dead stores,
            # and without them the compiler drops their arithmetic too, the reciprocal
            # included.)
            blk[rowb + sl] = put_pd(pd)
            wup[rowb + sl] = w_t(pu)
        # The publishing lane's value (this lane's column s - tid): into its shared ring (the
        # other lanes to spare slots of their own; the last band's is the loss) and to the
        # boundary row (a predicated store: no branch).
        pubs, hand, own, plag, M = pb[0], pb[1], pb[2], pb[3], pb[4]
        pubs[sl if pub else uint32(RING + tid)] = r
        st_if(hand, uint64(own + s - plag), as_bits(r), pub & below(s - plag, M))
        if ckpt:
            q = M - 1 - (s - tid)  # this cell's position (the backward's column order)
            at = (q > 0) & (q < M) & ((q & (TW - 1)) == 0)
            st_if(hand, uint64(pb[5] + (q - TW)), as_bits(r), at)
        return up, r, from_prev_lane(r, xch, s & 1)

    @device
    def group(sh, rowb, pb, tid, s0, grp, st, lead, width, pub, scale, xch):
        """The G (= 8) steps of one group, unrolled by hand: constant slot offsets from the
        lane's row ``rowb``, and the row above read into registers up front, off the steps'
        dependency chain."""
        sb = ring(s0)  # s0 a multiple of G: the group's slots are sb .. sb + G - 1
        t0, t1, t2, t3 = grp[0], grp[1], grp[2], grp[3]
        t4, t5, t6, t7 = grp[4], grp[5], grp[6], grp[7]
        st = step(sh, rowb, pb, tid, s0, sb, t0, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 1, sb + 1, t1, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 2, sb + 2, t2, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 3, sb + 3, t3, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 4, sb + 4, t4, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 5, sb + 5, t5, st, lead, width, pub, scale, xch)
        st = step(sh, rowb, pb, tid, s0 + 6, sb + 6, t6, st, lead, width, pub, scale, xch)
        return step(sh, rowb, pb, tid, s0 + 7, sb + 7, t7, st, lead, width, pub, scale, xch)

    return group, get_pd


def _writes(get_pd):
    """The weights' write-out: ``(write8, write_w)``."""

    @device
    def wcell(w0, w1, blk, wup, jp, M, r):
        """Write row ``r``'s weights of column ``jp`` to the band views ``w0`` (p_diag) and
        ``w1`` (p_up) of ``P``'s two planes."""
        sl = slot(0, r, jp, 1)
        d = u32(jp + r * M)
        w0[d] = get_pd(blk[sl])
        w1[d] = wup[sl]

    @device
    def write8(w0, w1, blk, wup, jp, M, rmax, r0):
        """Rows ``min(r, rmax)``, ``r = r0 .. r0 + 7`` (a row past the table writes the last
        row's value again)."""
        wcell(w0, w1, blk, wup, jp, M, min(r0, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 1, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 2, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 3, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 4, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 5, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 6, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 7, rmax))

    @device
    def write_w(w0, w1, blk, wup, jp, Ml, M, nr1):
        """Column ``jp``'s weights of the band's rows, coalesced along columns (if ``jp`` is a
        column of the pair: below ``Ml``; rows ``M`` apart); a full band (``nr1 = TB - 1``)
        with constant row offsets."""
        if jp < Ml:
            if nr1 == TB - 1:
                write8(w0, w1, blk, wup, jp, M, TB - 1, 0)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 8)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 16)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 24)
            else:
                write8(w0, w1, blk, wup, jp, M, nr1, 0)
                write8(w0, w1, blk, wup, jp, M, nr1, 8)
                write8(w0, w1, blk, wup, jp, M, nr1, 16)
                write8(w0, w1, blk, wup, jp, M, nr1, 24)

    return write8, write_w


def _items(spec: ForwardSpec, write8):
    """The mover's items: ``(load8, item, titem, write_rest)``."""
    hilo = spec.mode == HILO
    msm = RECURRENCES[spec.recurrence].costs == 3

    @device
    def load8_msm(src, jn, Mu, nr1, r0):
        """The mover's loads of one item: rows ``r0 .. r0 + 7`` (clamped to ``nr1``) of
        column ``jn`` of the source ``src = (Xb, Xlo, Qu, Ql)``: the two words' planes of
        the match costs and Soft-MSM's up and left costs."""
        Xb, Xlo, Qu, Ql = src
        return (ld8(Xb, jn, Mu, nr1, r0), ld8(Xlo, jn, Mu, nr1, r0), ld8(Qu, jn, Mu, nr1, r0),
                ld8(Ql, jn, Mu, nr1, r0))  # fmt: skip

    @device
    def load8_one(src, jn, Mu, nr1, r0):
        """The mover's loads of one item: rows ``r0 .. r0 + 7`` (clamped to ``nr1``) of
        column ``jn`` of the source ``src = (Xb, Xlo, ..)`` (the two words' planes when
        ``hilo``)."""
        Xb, Xlo = src[0], src[1]
        hi = ld8(Xb, jn, Mu, nr1, r0)
        lo = ld8(Xlo, jn, Mu, nr1, r0) if hilo else hi
        return hi, lo

    @device
    def stage8_msm(blk, cst, v, r0, base):
        """Store :func:`load8_msm`'s values of rows ``r0 ..`` of column ``base`` in the
        rings."""
        st8(blk, 0, join8(v[0], v[1]), r0, base, 1)
        st8(cst, 0, join8(v[2], v[3]), r0, base, 1)

    @device
    def stage8_one(blk, cst, v, r0, base):
        """Store :func:`load8_one`'s values of rows ``r0 ..`` of column ``base`` in the ring."""
        hi, lo = v
        st8(blk, 0, join8(hi, lo) if hilo else hi, r0, base, 1)

    load8 = load8_msm if msm else load8_one
    stage8 = stage8_msm if msm else stage8_one

    @device
    def item(w0, w1, blk, wup, cst, src, h, cc, r0, Ml, M, Mu, nr1, v, store):
        """The mover's item (see the module docstring): row group ``r0 .. r0 + 7`` of column
        chunk ``cc``.  ``v`` holds its costs (from :func:`load8`, two items ago); returns the
        loads of the item two on, so that their latency spans two groups of steps.  ``Ml``:
        the pair's columns; ``M`` (``Mu``): the row stride."""
        # (A row group past the band's last row is not written: its rows would be that
        # row's again, whose slot holds the next chunk's cost by then.)
        jp = (cc - 2) * TW + h
        if store and cc >= 2 and jp < Ml and r0 <= nr1:
            write8(w0, w1, blk, wup, jp, M, nr1, r0)
        stage8(blk, cst, v, r0, cc * TW + h)
        if r0 >= 2 * G:
            cn, rn = cc + 1, r0 - 2 * G
        else:
            cn, rn = cc, r0 + 2 * G
        v = load8(src, uint32(min(cn * TW + h, Ml - 1)), Mu, nr1, rn)
        bar_mover()
        return v

    @device
    def titem(w0, w1, blk, wup, T, h, cc, r0, Ml, M, nr1, ncol, store):
        """:func:`item` in mode ``tiled``: the costs of row group ``r0 ..`` of column chunk
        ``cc`` come from the distance warp's tile ``T`` (zeros past ``Ml``)."""
        jp = (cc - 2) * TW + h
        if store and cc >= 2 and jp < Ml and r0 <= nr1:
            write8(w0, w1, blk, wup, jp, M, nr1, r0)
        st8(blk, 0, dist.tget8(T, r0, h, cc < ncol), r0, cc * TW + h, 1)
        bar_mover()

    @device
    def write_rest(w0, w1, blk, wup, h, Ml, M, nr1, nchunks):
        """The mover's last weights, after its last item: what no item wrote (column chunk
        ``cw``'s row group ``q`` was written by item ``4 cw + q + 5`` if that is below the
        number of items, ``4 nchunks``)."""
        for cw in range(max(nchunks - 3, 0), nchunks):
            jp = cw * TW + h
            if jp < Ml:
                for q in range(4):
                    if 4 * cw + q + 5 >= 4 * nchunks and q * G <= nr1:
                        write8(w0, w1, blk, wup, jp, M, nr1, q * G)

    return load8, stage8, item, titem, write_rest


def _mover(spec: ForwardSpec, load8, stage8, item, write_rest):
    """The mover warp of mode ``hilo`` (mode ``tiled``'s is written into the kernel, where it
    compiles to the same code as before it had a function of its own)."""

    @device
    def mover(w0, w1, blk, wup, cst, src, h, Ml, M, Mu, nr1, nchunks, store):
        """The mover (warp 1): column chunk 0's first three row groups now, the loads of
        items 0 and 1 in flight; then one item per group, a barrier after each (as many as
        the steps' warp: one after the staging, one per group)."""
        jn = uint32(min(h, Ml - 1))
        for q in range(3):
            stage8(blk, cst, load8(src, jn, Mu, nr1, q * G), q * G, h)
        v = load8(src, jn, Mu, nr1, 3 * G)
        v1 = load8(src, uint32(min(TW + h, Ml - 1)), Mu, nr1, 0)
        bar_mover()
        for c in range(nchunks):
            v = item(w0, w1, blk, wup, cst, src, h, c, 3 * G, Ml, M, Mu, nr1, v, store)
            v1 = item(w0, w1, blk, wup, cst, src, h, c + 1, 0, Ml, M, Mu, nr1, v1, store)
            v = item(w0, w1, blk, wup, cst, src, h, c + 1, G, Ml, M, Mu, nr1, v, store)
            v1 = item(w0, w1, blk, wup, cst, src, h, c + 1, 2 * G, Ml, M, Mu, nr1, v1, store)
        if store:
            write_rest(w0, w1, blk, wup, h, Ml, M, nr1, nchunks)

    return mover


def build(spec: ForwardSpec):
    """The forward kernel of ``spec`` (compiled on first launch)."""
    mode, mover, lengths, ckpt = spec.mode, spec.mover, spec.lengths, spec.ckpt
    fused, tiled, split, hilo = mode == FUSED, mode == TILED, mode == SPLIT, mode == HILO
    parked = split or hilo  # X is P, holding the park kernel's distances
    blk_t, w_t, _ = _block_types(spec)
    group, get_pd = _cells(spec)
    write8, write_w = _writes(get_pd)
    products, tile_acc = dist.build(tiled)
    load8, stage8, item, titem, write_rest = _items(spec, write8)
    move = _mover(spec, load8, stage8, item, write_rest)
    msm = RECURRENCES[spec.recurrence].costs == 3

    # (Soft-MSM's forward with a mover took 192 registers a thread: 3 blocks an SM, so that at
    # B = 32, N = 512 its 512 bands ran in two waves; 4 blocks need at most 170)
    @kernel(launch_bounds=(3 * TB, 4) if (msm and mover) else None)
    def forward(X, Y, N, M, D, gamma, lo, hi, P, Rb, out, store):
        """One block per (band, pair).

        cost: X = cost (B, N, M) flat, Y unused.  fused: X (B, N, D), Y (B, M, D).  tiled:
        X, Y the same, flat.  split, hilo: X = P holding the distances, flat, Y unused;
        Soft-MSM (hilo): Y (B, 2, N, M) flat, its up and left costs (float32).
        P (B, 2, N, M) weights, flat (written iff ``store``), Rb int64 boundary rows
        (B, nb, M + 1) flattened, plus one element, the ticket counter (float64 bits /
        counter, all pre-filled with ``SENTINEL``), out (B,) loss (any float dtype).

        ``lengths``: the pair's own lengths (n, m) sit in Rb before the counter (x's B, then
        y's B), ``lo`` is the band's radius (-1: none) and ``hi`` is unused; the band follows
        the pair's lengths, bands past n leave at once and a band's chunks stop at m.  N, M
        stay the padded sizes of the layout.

        ``ckpt``: Rb also holds, after its rows, the *column checkpoints* (B, nb,
        ceil(M / 32), 32): band k's R at column ``m - 1 - 32 (c + 1)`` for c = 0, 1, .. (while
        that column exists), by row (:mod:`sdtw.cuda.kernels.recompute`).
        """
        tx = cuda.threadIdx.x
        tid = tx & (TB - 1) if mover else tx  # the lane (in its warp, with a mover)
        B = out.shape[0]
        nb = (N + TB - 1) // TB
        scale = LOG2E / gamma  # R' = R log2(e) / gamma: see sdtw.cuda.kernels.recurrence
        tk = cuda.shared.array(1, int32)
        t = take_ticket(Rb, tk)
        k = t // B
        b = t - k * B
        i0 = k * TB
        if lengths:  # (the pair's own table: Nb x Mb, its own band)
            tail = Rb.shape[0] - 1 - 2 * B
            Nb = Rb[tail + b]
            Mb = Rb[tail + B + b]
            if lo < 0:
                lob = Nb + Mb
                hib = lob
            else:
                lob = lo + max(Nb - Mb, 0)
                hib = lo + max(Mb - Nb, 0)
            if i0 >= Nb:
                return  # a band past the pair's rows
        else:
            Nb = N
            Mb = M
            lob = lo
            hib = hi
        i = i0 + tid
        own = (b * nb + k) * (M + 1)  # this band's boundary row in the flat Rb
        # This lane's row has cells at columns [jlo, jhi) (the band; none past row Nb - 1): at
        # step s it computes column s - tid, a cell iff below(s - lead, width).
        jlo = max(i - lob, 0)
        jhi = min(i + hib + 1, Mb)
        width = jhi - jlo if (i < Nb and jhi > jlo) else 0
        lead = jlo + tid
        # The lane of the band's last row publishes it for the band below (the last band's,
        # row Nb - 1, is where the loss is read at the end).
        plag = min(TB - 1, Nb - 1 - i0)
        pub = tid == plag
        blk = cuda.shared.array(PO1, blk_t)  # cost, then p_diag; row r at r RING1
        if fused:
            # never read or written: the fused forward keeps no weights (8.3 KB less shared
            # memory per block: 8 blocks per SM instead of 6 on Hopper's 228 KB)
            wup = cuda.shared.array(1, w_t)
        else:
            wup = cuda.shared.array(PO1, w_t)  # p_up
        if msm:  # Soft-MSM's up and left costs (the high and low words of a float64 slot)
            cst = cuda.shared.array(PO1, float64)
        else:
            cst = cuda.shared.array(1, float64)  # (never read)
        sh = (blk, wup, cst)
        rowb = uint32(tid * RING1)  # this lane's row
        grp = cuda.shared.array(G, float64)
        pubs = cuda.shared.array(PUBS, float64)  # the band's last row (+ spare slots)
        xch = cuda.shared.array((2, TB), float64)
        acc = cuda.local.array(TB, float64)  # products of the next chunk's distances (fused)
        if fused or tiled:
            xsh = cuda.shared.array((DC, TB1), float64)
            ysh = cuda.shared.array((DC, TW1), float64)
        else:
            xsh = cuda.shared.array((1, 1), float64)  # placeholders: never read when unfused
            ysh = xsh
        if tiled:  # the distance warp's tile, its norms and their shares
            T = cuda.shared.array((TB, TW1), float64)
            txn = cuda.shared.array(TB, float64)
            tyn = cuda.shared.array(TW, float64)
            part = cuda.shared.array((8, TB), float64)
        else:
            T = cuda.shared.array((1, 1), float64)  # placeholders: never read
            txn = cuda.shared.array(1, float64)
            tyn = txn
            part = xsh
        if fused:  # |x_i|^2 of the band's rows, |y_j|^2 of the chunk's columns
            xn = cuda.shared.array(TB, float64)
            yn = cuda.shared.array(TW, float64)
        else:
            xn = txn  # placeholders: never read
            yn = tyn
        ncol = (Mb + TW - 1) // TW  # column chunks with cells
        nchunks = (Mb + TB - 1 + TW - 1) // TW
        # Band views (see staging): the weights' two planes, and where the costs come from.
        row0 = (2 * b * N + i0) * M  # P[b, 0, i0, 0] (flat)
        nr1 = uint32(min(TB, Nb - i0) - 1)  # the band's last row
        Wf = X if parked else P
        w0 = band_view(Wf, row0)
        w1 = band_view(Wf, row0 + N * M)
        Mu = uint32(M)
        if split or tiled:
            Xb = w0  # split: this pair's distances (plane 0); tiled: never read
            Xlo = Xb
        elif hilo:
            Xb = w1  # the distances' high words (plane 1)
            Xlo = w0  # and their low words (plane 0)
        elif not fused:
            Xb = band_view(X, (b * N + i0) * M)  # the band's rows of the cost
            Xlo = Xb
        if msm:  # Y (B, 2, N, M) flat: the up costs (plane 0) and the left costs (plane 1)
            Qu = band_view(Y, row0)
            Ql = band_view(Y, row0 + N * M)
        elif not fused:
            Qu = Xb  # (never read)
            Ql = Xb
        if mover and tx >= 2 * TB:
            if tiled:
                # The distance warp: chunk 0, then chunk c + 1 during chunk c, a meeting with
                # the mover after each.
                nq = cuda.local.array(8, float64)
                Xp = band_view(X, b * N * D)  # this pair's x and y
                Yp = band_view(Y, b * M * D)
                tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, 0, Nb, Mb, D, tid)
                dist.tile_out(acc, nq, T, txn, tyn, part, i0, 0, Nb, Mb, tid)
                ready_arrive()
                for c in range(nchunks):
                    if c + 1 < ncol:
                        j1 = (c + 1) * TW
                        tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, j1, Nb, Mb, D, tid)
                        free_wait()  # the mover is done with chunk c's tile
                        dist.tile_out(acc, nq, T, txn, tyn, part, i0, j1, Nb, Mb, tid)
                        ready_arrive()
            return  # the third warp (see the module docstring)
        if tiled and tx >= TB:
            # Mode tiled's mover: chunk 0's first three row groups from the distance warp's
            # tile, then one item per group, and a meeting with the distance warp before each
            # chunk's second item (chunk c + 1's tile ready).
            h = tid
            ready_wait()
            for q in range(3):
                st8(blk, 0, dist.tget8(T, q * G, h, True), q * G, h, 1)
            bar_mover()
            for c in range(nchunks):
                titem(w0, w1, blk, wup, T, h, c, 3 * G, Mb, M, nr1, ncol, store)
                if c + 1 < ncol:
                    free_arrive()  # chunk c's tile read
                    ready_wait()  # chunk c + 1's written
                titem(w0, w1, blk, wup, T, h, c + 1, 0, Mb, M, nr1, ncol, store)
                titem(w0, w1, blk, wup, T, h, c + 1, G, Mb, M, nr1, ncol, store)
                titem(w0, w1, blk, wup, T, h, c + 1, 2 * G, Mb, M, nr1, ncol, store)
            if store:
                write_rest(w0, w1, blk, wup, h, Mb, M, nr1, nchunks)
            return
        if mover and tx >= TB:
            move(w0, w1, blk, wup, cst, (Xb, Xlo, Qu, Ql), tid, Mb, M, Mu, nr1, nchunks, store)
            return
        if fused:
            xx = 0.0
            ii = min(i, Nb - 1)
            for d in range(D):
                xv = float64(X[b, ii, d])
                xx += xv * xv
            xn[tid] = xx  # read after the staging's first barrier
        if tid < G:
            grp[tid] = INF  # the top band's row above (k > 0 overwrites it group by group)
        # (r_diag, r_left, up_next); R[-1, -1] = 0 is lane 0's first diagonal in the top band
        st = (0.0 if (k == 0 and tid == 0) else INF, INF, INF)
        has = k > 0  # a band above to take the row from
        above = own - (M + 1) if has else own  # (the top band reads its own row, ignored)
        pref = poll(Rb, above + min(tid, Mb))
        if ckpt:  # (and this lane's column checkpoints: after the rows, by band, chunk, row)
            nck = (M + TW - 1) // TW
            pb = (pubs, Rb, own, plag, Mb, B * nb * (M + 1) + (b * nb + k) * nck * TW + tid)
        else:
            pb = (pubs, Rb, own, plag, Mb)  # where the publishing lane's steps put their values
        dd = tid % DC  # fused staging: lane (dd, rh) takes feature dd of rows rh, rh + 2, ..
        rh = tid // DC
        yy = 0.0
        if fused:
            Xf = X[b]  # this pair's (N, D) and (M, D) sequences
            Yf = Y[b]
            # Chunk 0's distances up front; chunk c + 1's after chunk c's steps.
            for r in range(TB):
                acc[r] = 0.0
            for d0 in range(0, D, DC):
                dist.stage_pass(Xf, Yf, xsh, ysh, i0, 0, Nb, Mb, D, d0, dd, rh)
                yy = products(acc, xsh, ysh, tid, yy, acc)
            yn[tid] = yy
            sync_band()  # every lane's column norm in yn
            dist.distances(acc, yn, xn, blk, i0, Nb, Mb, 0, tid, scale)
        if not fused and not mover:
            jn = uint32(min(tid, Mb - 1))
            a = ld32(Xb, jn, Mu, nr1)
            if hilo:
                a2 = ld32(Xlo, jn, Mu, nr1)
            else:
                a2 = a
            q1 = ld32(Qu, jn, Mu, nr1) if msm else a
            q2 = ld32(Ql, jn, Mu, nr1) if msm else a
        if mover:
            bar_steps()  # the mover's first staging
        for c in range(nchunks):
            j0 = c * TW
            jl = j0 + tid  # the column this thread stages
            jn0 = j0 + TW  # the next chunk's first column
            if not fused and not mover:
                # The registers hold chunk c (loaded one chunk ago): into the ring, then load
                # chunk c + 1, in flight during this chunk's steps (clamped, harmless past M).
                # (split, hilo: chunk c's distances were read one chunk ago; its weights go
                # over them one chunk from now, by this block: read before write, same cells.)
                # Rows and columns past the table stage copies of real values (the loads are
                # clamped): their cells are invalid, so the steps never use them.
                if hilo:
                    st32(blk, 0, join32(a, a2), jl, 1)
                else:
                    st32(blk, 0, a, jl, 1)
                if msm:
                    st32(cst, 0, join32(q1, q2), jl, 1)
                jn = uint32(min(jl + TW, Mb - 1))
                a = ld32(Xb, jn, Mu, nr1)
                if hilo:
                    a2 = ld32(Xlo, jn, Mu, nr1)
                if msm:
                    q1 = ld32(Qu, jn, Mu, nr1)
                    q2 = ld32(Ql, jn, Mu, nr1)
            if not mover:
                sync_band()
            # TW // G = 4 groups, unrolled (see handoff: no branch, no loop around it); with
            # a mover, a barrier after each (see item)
            pref = handoff(Rb, above, j0, Mb, pref, grp, INF, has)
            st = group(sh, rowb, pb, tid, j0, grp, st, lead, width, pub, scale, xch)
            if mover:
                bar_steps()
            pref = handoff(Rb, above, j0 + G, Mb, pref, grp, INF, has)
            st = group(sh, rowb, pb, tid, j0 + G, grp, st, lead, width, pub, scale, xch)
            if mover:
                bar_steps()
            pref = handoff(Rb, above, j0 + 2 * G, Mb, pref, grp, INF, has)
            st = group(sh, rowb, pb, tid, j0 + 2 * G, grp, st, lead, width, pub, scale, xch)
            if mover:
                bar_steps()
            pref = handoff(Rb, above, j0 + 3 * G, Mb, pref, grp, INF, has)
            st = group(sh, rowb, pb, tid, j0 + 3 * G, grp, st, lead, width, pub, scale, xch)
            if mover:
                bar_steps()
                continue
            if fused:
                sync_band()  # (this chunk's steps done, before the next chunk's distances)
            if fused and jn0 < Mb:
                # Chunk c + 1's distances, after this chunk's steps.  (Interleaving them with
                # the steps, two features per step, was 20-27% slower on the H200.)
                for r in range(TB):
                    acc[r] = 0.0
                yy = 0.0
                for d0 in range(0, D, DC):
                    dist.stage_pass(Xf, Yf, xsh, ysh, i0, jn0, Nb, Mb, D, d0, dd, rh)
                    yy = products(acc, xsh, ysh, tid, yy, acc)
                yn[tid] = yy  # (read after the barriers below)
            sync_band()
            # Chunk c - 1 is complete now: write its weights out, coalesced along columns.
            if store and c > 0:
                write_w(w0, w1, blk, wup, j0 - TW + tid, Mb, M, nr1)
            sync_band()
            if fused and jn0 < Mb:
                # chunk c + 1's distances, into chunk c - 1's slots (written out just above)
                dist.distances(acc, yn, xn, blk, i0, Nb, Mb, jn0, tid, scale)
        sync_band()
        if i == Nb - 1:  # the publishing lane of the last band: its own shared store
            out[b] = pubs[ring(Mb - 1 + plag)] * (gamma * LN2)
        if store and not mover:
            write_w(w0, w1, blk, wup, (nchunks - 1) * TW + tid, Mb, M, nr1)

    return forward
