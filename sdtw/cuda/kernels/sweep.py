"""The backward's gradient warp: the gradients wrt x and y of a squared-Euclidean soft-DTW
computed during the backward's sweep, so that E is never written.

From x and y the gradients of a pair's value are

.. math::  g_x[i] = 2 (\\mathrm{rows}(E)_i x_i - \\textstyle\\sum_j E_{ij} y_j), \\qquad
           g_y[j] = 2 (\\mathrm{cols}(E)_j y_j - \\textstyle\\sum_i E_{ij} x_i).

The backward's mover variant has a third warp per band that is idle otherwise; with ``grads``
it becomes the *gradient warp*: the mover copies each position chunk's 32 x 32 block of E from
the ring into one of two shared tiles (float32, zeros outside the table) instead of writing it
to ``P``, and the gradient warp splits it into TF32 high parts and remainders as it loads its
fragments and multiplies them on the tensor cores (``mma.sync.m16n8k8`` TF32, three products
per block: the 3xTF32 split, float32 accumulation) while the band's warp runs the next chunk's
steps:

* g_x: the tile (band rows x positions) times y's chunk rows (positions x features),
  accumulated in registers over the band's sweep (2 x nt accumulator tiles of 16 x 8 for nt
  feature tiles of 8, a kernel variant for each nt in
  :data:`~sdtw.cuda.kernels.geometry.SWEEP_TILES`), written once at the end with the row sums
  (``2 (rows x - acc)``);
* g_y: the tile's transpose times x's band rows, per 8-feature tile, added to a zeroed g_y with
  float32 atomics (``2 (cols y - acc)``, each band its own share of the column sums).

The tiles pass from the mover to the gradient warp through the free/ready barriers: the mover
waits until the gradient warp has freed chunk k - 1 before it says chunk k is ready (so that
the gradient warp's arrivals never complete a generation on their own), and a tile is written
again only two chunks later.  The simulator has no warp-collective ``mma``: its twins of the
chunk products (``*_sim`` below) compute each lane's outputs from the tile directly.
"""

from __future__ import annotations

from numba import cuda, float32, uint32

from sdtw.cuda.kernels.geometry import TB, TS, TW
from sdtw.cuda.kernels.jit import SIMULATED, device
from sdtw.cuda.kernels.primitives import cp_async, cp_async4, red2, tf32, tmma, u32


@device
def split2(v0, v1):
    """TF32 high parts and float32 remainders of two values."""
    h0 = tf32(v0)
    h1 = tf32(v1)
    return (h0, h1), (v0 - h0, v1 - h1)


@device
def split4(v):
    """:func:`split2` of a fragment of four values."""
    h01, l01 = split2(v[0], v[1])
    h23, l23 = split2(v[2], v[3])
    return (h01[0], h01[1], h23[0], h23[1]), (l01[0], l01[1], l23[0], l23[1])


@device
def tfrag(T, base, down, right):
    """A lane's A fragment of a 16 x 8 block of the flat tile ``T`` at ``base`` (its element
    ``[g, t]``): ``[g, t], [g + 8, t], [g, t + 4], [g + 8, t + 4]``, row steps ``down``,
    column steps ``right``."""
    return (T[base], T[base + 8 * down], T[base + 4 * right], T[base + 8 * down + 4 * right])


@device
def mma_acc(acc, a, n, A, b0, b1):
    """``acc[a, n] += A B`` (one TF32 mma)."""
    c0, c1, c2, c3 = acc[a, n, 0], acc[a, n, 1], acc[a, n, 2], acc[a, n, 3]
    acc[a, n, 0], acc[a, n, 1], acc[a, n, 2], acc[a, n, 3] = tmma(
        A[0], A[1], A[2], A[3], b0, b1, c0, c1, c2, c3
    )


def staged_stride(nt_max: int) -> int:
    """The staged rows' stride for :func:`build` ``(nt_max)``: the features and 8 more (4 more
    words of 8 per row move each lane's fragment loads to their own banks: a stride of 8 or 24
    mod 32), 8 for one feature tile."""
    return 8 * nt_max + 8 if nt_max > 1 else 8


def _operands(nt_max: int, sw: int):
    """``(cp_rows, mma3_group, split_b)`` for ``D <= 8 nt_max``, ``sw`` the rows' stride."""
    ng = min(nt_max, 4)

    @device
    def cp_rows(S, A, o, step, cl, D, lane):
        """The gradient warp's copies of 32 rows of x or y into the staged rows ``S`` (row
        stride ``sw``, by :func:`cp_async`), a row per lane: lane ``k`` copies row ``o + step
        k`` clamped to ``cl`` (at most ``cl`` for ``step > 0``, at least for ``step < 0``: a
        real row, whose products with E's zeros vanish), its ``D`` features; 16 bytes a copy
        where ``D`` is a multiple of 4 (``A``'s rows then 16-byte aligned: the launcher's
        ``x`` and ``y`` are), else 4.  Features past ``D`` are left as they are: they only
        meet output columns that are never stored."""
        r = o + step * lane
        r = min(r, cl) if step > 0 else max(r, cl)
        src = u32(r * D)
        dst = uint32(lane * sw)
        if D & 3 == 0:
            for q in range(D >> 2):
                f = uint32(4 * q)
                cp_async4(S, dst + f, A, src + f)
        else:
            for f in range(D):
                cp_async(S, uint32(dst + f), A, src + f)

    @device
    def mma3_group(acc, n0, ah0, al0, ah1, al1, bh, bl):
        """``acc[a, n0 + n] += A_a B_n`` for TF32-split operands (``A = ah + al``, ``B = bh +
        bl``): ``al bh + ah bl + ah bh``, the small products first (3xTF32; ``al bl``
        dropped), of the row halves' A fragments ``a`` and ``ng`` B fragments (``bh[n]``,
        ``bl[n]``), by kind: ``2 ng`` independent mma between two on the same accumulator.
        (The three products of one accumulator one after another, each waiting for the last,
        left the tensor cores idle: offline SASS, HMMA pairs and NOPs; the
        backward 3.5-4x the one that writes E.)"""
        for n in range(ng):
            mma_acc(acc, 0, n0 + n, al0, bh[n, 0], bh[n, 1])
            mma_acc(acc, 1, n0 + n, al1, bh[n, 0], bh[n, 1])
        for n in range(ng):
            mma_acc(acc, 0, n0 + n, ah0, bl[n, 0], bl[n, 1])
            mma_acc(acc, 1, n0 + n, ah1, bl[n, 0], bl[n, 1])
        for n in range(ng):
            mma_acc(acc, 0, n0 + n, ah0, bh[n, 0], bh[n, 1])
            mma_acc(acc, 1, n0 + n, ah1, bh[n, 0], bh[n, 1])

    @device
    def split_b(S, sb, bh, bl):
        """The B fragments of ``ng`` 8-feature tiles of the staged rows ``S`` (the lane's
        ``[t, g]`` of tile ``n`` at ``S[sb + 8 n]``, ``[t + 4, g]`` ``4 sw`` on), split."""
        for n in range(ng):
            (h0, h1), (l0, l1) = split2(S[sb + 8 * n], S[sb + 4 * sw + 8 * n])
            bh[n, 0] = h0
            bh[n, 1] = h1
            bl[n, 0] = l0
            bl[n, 1] = l1

    return cp_rows, mma3_group, split_b


def _gx(nt_max: int, sw: int, mma3_group, split_b):
    """``(gx_chunk, gx_out)``: g_x's products per chunk and its write-out."""
    ng = min(nt_max, 4)

    def gx_chunk_gpu(TH, tb, YS, nt, acc, g, t):
        """``acc += tile (rows x positions) @ y (positions x features)`` for one chunk: the
        lane's accumulators ``acc[a, n]`` of rows ``16 a + g (+ 8)``, features ``8 n + 2 t
        (+ 1)``, ``ng`` feature tiles at a time (:func:`mma3_group`).  ``YS``: the chunk's
        rows of y by position (staged; positions past the table hold a real row, and the tile
        zeros there); features past ``D`` hold whatever was there and only reach accumulators
        that are never stored."""
        bh = cuda.local.array((ng, 2), float32)
        bl = cuda.local.array((ng, 2), float32)
        for kk in range(TB // 8):
            base = uint32(tb + g * TS + 8 * kk + t)
            ah0, al0 = split4(tfrag(TH, base, TS, 1))
            ah1, al1 = split4(tfrag(TH, base + 16 * TS, TS, 1))
            yb = uint32((8 * kk + t) * sw + g)
            for h in range(nt_max // ng):
                if ng * h < nt:
                    split_b(YS, yb + 8 * ng * h, bh, bl)
                    mma3_group(acc, ng * h, ah0, al0, ah1, al1, bh, bl)

    def gx_chunk_sim(TH, tb, YS, nt, acc, g, t):
        """The simulator's twin of ``gx_chunk_gpu`` (no warp-collective mma there): the
        lane's outputs straight from the tile."""
        for a in range(2):
            for n in range(nt):
                for q in range(4):
                    r = 16 * a + g + 8 * (q >> 1)
                    f = 8 * n + 2 * t + (q & 1)
                    s = float32(0.0)
                    for p in range(TB):
                        e = TH[tb + r * TS + p]
                        s += e * YS[p * sw + f]
                    acc[a, n, q] += s

    @device
    def gx_out(acc, RS, XS, GXp, D, nt, nr1, g, t):
        """The band's g_x, ``2 (rows x - acc)`` (rows up to ``nr1``, features below ``D``)."""
        for a in range(2):
            for n in range(nt_max):
                if n < nt:
                    for q in range(4):
                        r = 16 * a + g + 8 * (q >> 1)
                        f = 8 * n + 2 * t + (q & 1)
                        if r <= nr1 and f < D:
                            v = RS[r] * XS[uint32(r * sw + f)] - acc[a, n, q]
                            GXp[u32(r * D + f)] = float32(2.0) * v

    gx_chunk = device(gx_chunk_sim if SIMULATED else gx_chunk_gpu)
    return gx_chunk, gx_out


def _gy(nt_max: int, sw: int, mma3_group, split_b):
    """``gy_chunk``: g_y's products per chunk, added to g_y."""
    ng = min(nt_max, 4)

    @device
    def gy_out(CS, cb, YS, GYp, jtop, D, n, g, t, p0, c):
        """Add the lane's share ``2 (cols y - c)`` of positions ``p0 + g (+ 8)``, features
        ``8 n + 2 t (+ 1)`` to ``GYp``."""
        for q in range(4):
            p = p0 + g + 8 * (q >> 1)
            f = 8 * n + 2 * t + (q & 1)
            j = jtop - p
            if j >= 0 and f < D:
                val = float32(2.0) * (CS[cb + p] * YS[uint32(p * sw + f)] - c[q])
                cuda.atomic.add(GYp, u32(j * D + f), val)

    @device
    def gy_out_full(CS, cb, YS, GYp, jtop, D, n, g, t, p0, c):
        """:func:`gy_out` where every position is a column of the table and every feature is
        below ``D`` (a whole chunk, ``D = 8 nt``): each position's two features as one
        :func:`red2` (an 8-byte aligned pair: ``D`` and ``f`` even), no tests.  (Four
        atomics with a test each took ~40 SASS instructions per accumulator tile, ~1340 of
        the ~3200 per chunk at ``D = 64``, offline SASS.)"""
        f = 8 * n + 2 * t
        for h in range(2):
            p = p0 + g + 8 * h
            cs = CS[cb + p]
            o = uint32(p * sw + f)
            v0 = float32(2.0) * (cs * YS[o] - c[2 * h])
            v1 = float32(2.0) * (cs * YS[o + 1] - c[2 * h + 1])
            red2(GYp, u32((jtop - p) * D + f), v0, v1)

    @device
    def whole_chunk(jtop, D, nt):
        """Whether the chunk whose position 0 is column ``jtop`` takes :func:`gy_out_full`:
        all its columns in the table and ``D = 8 nt``."""
        return jtop >= TW - 1 and D == 8 * nt

    def gy_chunk_gpu(TH, tb, CS, cb, XS, YS, GYp, jtop, D, nt, g, t):
        """``g_y[j] += 2 (cols_j y_j - sum_r tile[r, p] x_r)`` over this chunk's positions
        ``p`` (column ``j = jtop - p``) and the band's rows ``r`` (``XS``: staged, rows past
        the band's last a copy of it, which the tile's zeros multiply), ``ng`` 8-feature tiles
        at a time (the tile's fragments loaded and split once for them; :func:`mma3_group`),
        by float32 atomics into ``GYp`` (this pair's g_y, flat, zeroed; paired vector
        reductions on whole chunks with ``D = 8 nt``, :func:`gy_out_full`).  ``CS[cb + p]``:
        the band's column sums of E."""
        cy = cuda.local.array((2, ng, 4), float32)
        bh = cuda.local.array((ng, 2), float32)
        bl = cuda.local.array((ng, 2), float32)
        full = whole_chunk(jtop, D, nt)
        for h in range(nt_max // ng):
            if ng * h < nt:
                for a in range(2):
                    for n in range(ng):
                        for q in range(4):
                            cy[a, n, q] = float32(0.0)
                for kk in range(TB // 8):
                    # the tile's transpose as A: element [p, r] at T[r, p]
                    base = uint32(tb + (8 * kk + t) * TS + g)
                    ah0, al0 = split4(tfrag(TH, base, 1, TS))
                    ah1, al1 = split4(tfrag(TH, base + 16, 1, TS))
                    split_b(XS, uint32((8 * kk + t) * sw + 8 * ng * h + g), bh, bl)
                    mma3_group(cy, 0, ah0, al0, ah1, al1, bh, bl)
                for n in range(ng):
                    if ng * h + n < nt:
                        for a in range(2):
                            c = (cy[a, n, 0], cy[a, n, 1], cy[a, n, 2], cy[a, n, 3])
                            if full:
                                gy_out_full(CS, cb, YS, GYp, jtop, D, ng * h + n, g, t, 16 * a, c)
                            else:
                                gy_out(CS, cb, YS, GYp, jtop, D, ng * h + n, g, t, 16 * a, c)

    def gy_chunk_sim(TH, tb, CS, cb, XS, YS, GYp, jtop, D, nt, g, t):
        """The simulator's twin of ``gy_chunk_gpu``: the lane's outputs from the tile (by
        :func:`gy_out_full` where the GPU's takes it)."""
        full = whole_chunk(jtop, D, nt)
        for n in range(nt):
            for a in range(2):
                c = [float32(0.0)] * 4
                for q in range(4):
                    p = 16 * a + g + 8 * (q >> 1)
                    f = 8 * n + 2 * t + (q & 1)
                    for r in range(TB):
                        e = TH[tb + r * TS + p]
                        c[q] += e * XS[r * sw + f]
                out = gy_out_full if full else gy_out
                out(CS, cb, YS, GYp, jtop, D, n, g, t, 16 * a, (c[0], c[1], c[2], c[3]))

    return device(gy_chunk_sim if SIMULATED else gy_chunk_gpu)


def build(nt_max: int):
    """The gradient warp's device functions for ``D <= 8 nt_max``: its accumulators are
    ``(2, nt_max, 4)`` per lane, and its products take ``ng = min(nt_max, 4)`` feature tiles
    per group (``mma3_group``: ``6 ng`` independent mma).  Returns ``(sw, cp_rows, gx_chunk,
    gy_chunk, gx_out)``; ``sw``: the staged rows' stride."""
    sw = staged_stride(nt_max)
    cp_rows, mma3_group, split_b = _operands(nt_max, sw)
    gx_chunk, gx_out = _gx(nt_max, sw, mma3_group, split_b)
    gy_chunk = _gy(nt_max, sw, mma3_group, split_b)
    return sw, cp_rows, gx_chunk, gy_chunk, gx_out
