"""The checkpointed backward: the gradients wrt x and y of squared-Euclidean soft-DTW from the
forward's checkpoints, recomputing the weights tile by tile; no (N, M) buffer.

The checkpointed forward (``ForwardSpec(..., lengths=True, ckpt=True)``) keeps, besides the
boundary rows it hands between bands anyway (band ``k``'s last row, every column), each band's
R at every 32nd column counted from the pair's last one (the *column checkpoints*, band ``k``'s
rows at column ``m - 1 - 32 (c + 1)``).  Together they are the DP values on the edges of the
32 x 32 tiles that position chunk ``c`` of band ``k`` covers (columns ``m - 32 (c + 1)`` to
``m - 1 - 32 c``): its top row from the band above's boundary row, its left column from the
checkpoint.  So each tile's R and weights can be recomputed on its own, with the forward's
cell update, and nothing per cell is stored between the passes: a pair holds ``8 (M + 1)``
bytes per band of boundary row and ``8 M`` of checkpoints (about ``N M / 2`` bytes), against
``8 N M`` for the full mode's float32 weights.

One warp per band, lane ``r`` = the band's row ``r``; blocks take tickets bottom band first, as
the DP backward's, and a band waits only for the band below.  Per tile, right to left:

1. the scaled squared distances of the tile (the fused forward's form,
   ``max(|x|^2 + |y|^2 - 2 x.y, 0)`` in float64, NaN kept);
2. R and the weights ``p_diag``, ``p_up`` of its cells by a wavefront over its anti-diagonals
   (the forward's cell update: the same values where the distances are the same);
3. E by the pull form of :mod:`sdtw.cuda.kernels.backward`, over the anti-diagonals in reverse:
   ``E[i, j] = E[i, j+1] p_left(i, j+1) + E[i+1, j] p_up(i+1, j) + E[i+1, j+1] p_diag(i+1, j+1)``
   with the tile to the right (its left column, carried) and the band below (its hand-over
   ``v(j) = E[i0, j] p_up(i0, j) + E[i0, j+1] p_diag(i0, j+1)`` of its top row, polled from the
   boundary buffer) as inflows; lane 0 publishes this band's ``v`` for the band above; E = 0
   at a cell whose R is +inf, as in the CPU's backward (the last cell's too: a pair with no
   finite path gets no gradient, and no rounding of ``p_left = 1 - p_diag - p_up`` leaks E
   into a cell that no finite path reaches);
4. the tile's shares of the gradients: ``g_x[i] += 2 sum_j E[i, j] (x_i - y_j)`` (the band's
   rows: no other block writes them) and ``g_y[j] += 2 sum_i E[i, j] (y_j - x_i)`` (atomics:
   every band adds to column j).

Steps 1 and 4 read x's rows and y's columns through shared memory, ``RC`` features at a time
(every lane reads every column's features there, from one load each): a band's tiles follow one
another on the critical path (band ``k``'s tile ``c`` waits for band ``k + 1``'s), so each
tile's latency is the kernel's time.  The tile's wavefronts take ``32 + w - 1`` steps each,
against the full backward's ``w`` per chunk in steady state.
"""

from __future__ import annotations

from numba import cuda, float32, float64, int32, uint64

from sdtw.cuda.kernels.geometry import BIG, INF, LOG2E, SENTINEL, TB, TW, TW1
from sdtw.cuda.kernels.handoff import take_ticket
from sdtw.cuda.kernels.jit import device, kernel
from sdtw.cuda.kernels.primitives import as_bits, from_bits, poll, st_if, sync_band
from sdtw.cuda.kernels.recurrence import RECURRENCES, min2
from sdtw.cuda.kernels.specs import RecomputeSpec

RT_ROWS = TB + 1  # the tile's R with the row above


#: Features staged in shared memory per pass (x's rows and y's columns of the tile).
RC = 8
RC1 = RC + 1  # (an odd row of doubles: lanes reading their own rows meet few bank conflicts)


def _stage():
    @device
    def stage(X, Y, D, b, i, j, d0, Xs, Ys, r, real, col):
        """Features ``d0 .. d0 + RC - 1`` of lane ``r``'s row ``i`` (if ``real``) into
        ``Xs[r]`` and of its column ``j`` (if ``col``) into ``Ys[r]``; how many."""
        dn = min(RC, D - d0)
        for dd in range(dn):
            if real:
                Xs[r, dd] = float64(X[b, i, d0 + dd])
            if col:
                Ys[r, dd] = float64(Y[b, j, d0 + dd])
        return dn

    return stage


def _tile_costs():
    stage = _stage()

    @device
    def tile_costs(X, Y, D, b, i, jl, w, xx, Ct, Xs, Ys, Yn, r, scale, real):
        """Row ``r``'s scaled squared distances to columns ``jl .. jl + w - 1`` into
        ``Ct[r]``: ``max(|x_i|^2 + |y_j|^2 - 2 x_i . y_j, 0)``, each sum over the features in
        order; x's rows and y's columns staged in shared memory ``RC`` features at a time
        (every lane reads each column's features)."""
        col = r < w
        if real:
            for q in range(w):
                Ct[r, q] = 0.0
        yy = 0.0  # |y_j|^2 of this lane's column
        for d0 in range(0, D, RC):
            dn = stage(X, Y, D, b, i, jl + r, d0, Xs, Ys, r, real, col)
            if col:
                for dd in range(dn):
                    yv = Ys[r, dd]
                    yy += yv * yv
            sync_band()
            if real:
                for q in range(w):
                    xy = Ct[r, q]
                    for dd in range(dn):
                        xy += Xs[r, dd] * Ys[q, dd]
                    Ct[r, q] = xy
            sync_band()
        Yn[r] = yy
        sync_band()
        if real:
            for q in range(w):
                v = (xx + Yn[q]) - 2.0 * Ct[r, q]
                Ct[r, q] = (0.0 if v < 0.0 else v) * scale

    return tile_costs


def _tile_grads():
    stage = _stage()

    @device
    def tile_grads(X, Y, D, b, i, jl, w, nr1, Et, Xs, Ys, GX, GY, r, real):
        """The tile's shares of the gradients (see the module docstring), x's rows and y's
        columns staged as in :func:`tile_costs`."""
        col = r < w
        for d0 in range(0, D, RC):
            dn = stage(X, Y, D, b, i, jl + r, d0, Xs, Ys, r, real, col)
            sync_band()
            for dd in range(dn):
                if real:  # this lane's row
                    xv = Xs[r, dd]
                    a = 0.0
                    for q in range(w):
                        a += Et[r, q] * (xv - Ys[q, dd])
                    GX[b, i, d0 + dd] += 2.0 * a
                if col:  # this lane's column
                    yv = Ys[r, dd]
                    a = 0.0
                    for rr in range(nr1 + 1):
                        a += Et[rr, r] * (yv - Xs[rr, dd])
                    cuda.atomic.add(GY, (b, jl + r, d0 + dd), 2.0 * a)
            sync_band()

    return tile_grads


@device
def top(Rb, above, j, k):
    """R of the row above the band at column ``j`` (scaled): the top band's is the padded
    row (0 at column -1, +inf on), the others' the band above's boundary row (+inf at -1)."""
    if k == 0:
        return 0.0 if j < 0 else INF
    return INF if j < 0 else from_bits(Rb[above + j])


def build(spec: RecomputeSpec):
    """The checkpointed backward kernel of ``spec`` (compiled on first launch)."""
    rec = RECURRENCES["soft-dtw"]
    cell = rec.cell_fast if spec.fast else rec.cell
    w_t = float32 if spec.fast else float64
    tile_costs = _tile_costs()
    tile_grads = _tile_grads()

    @kernel
    def recompute(X, Y, N, M, D, gamma, lo, Rb, Gb, gout, GX, GY):
        """One block (one warp) per (band, pair): ``GX`` (B, N, D), ``GY`` (B, M, D) float64
        zeros get the gradients of ``gout[b]`` times pair b's value wrt x (B, N, D) and
        y (B, M, D).

        ``Rb``: the checkpointed forward's boundary buffer (rows, column checkpoints, the
        pairs' lengths, the ticket); ``Gb``: this kernel's, (B, nb, M + 1) hand-over rows
        then the pairs' lengths and the ticket, pre-filled with ``SENTINEL`` (but the
        lengths).  ``lo``: the band's radius (-1: none), each pair's band following its own
        lengths as in the forward.
        """
        r = cuda.threadIdx.x
        B = gout.shape[0]
        nb = (N + TB - 1) // TB
        nck = (M + TW - 1) // TW
        scale = LOG2E / gamma
        tk = cuda.shared.array(1, int32)
        t = take_ticket(Gb, tk)
        kr = t // B
        k = nb - 1 - kr
        b = t - kr * B
        i0 = k * TB
        tail = Gb.shape[0] - 1 - 2 * B
        Nb = Gb[tail + b]
        Mb = Gb[tail + B + b]
        if i0 >= Nb:
            return  # a band past the pair's rows
        if lo < 0:
            lob = Nb + Mb
            hib = lob
        else:
            lob = lo + max(Nb - Mb, 0)
            hib = lo + max(Mb - Nb, 0)
        nbb = (Nb + TB - 1) // TB
        nr1 = min(TB, Nb - i0) - 1  # the band's last row
        i = i0 + r
        real = r <= nr1
        jlo = max(i - lob, 0)  # this row's cells: columns jlo .. jhi
        jhi = min(i + hib, Mb - 1)
        own = (b * nb + k) * (M + 1)  # this band's hand-over row in Gb
        above = own - (M + 1)  # the band above's boundary row in Rb (k > 0)
        below_row = own + (M + 1)  # the band below's hand-over row in Gb
        has_below = k < nbb - 1
        ck = B * nb * (M + 1) + (b * nb + k) * nck * TW + r  # this row's checkpoints in Rb
        Rt = cuda.shared.array((RT_ROWS, TW1), float64)  # R: the top row, the left column
        Ct = cuda.shared.array((TB, TW), float64)  # scaled costs
        Wd = cuda.shared.array((TB, TW1), w_t)  # weights; column w: the carried one
        Wu = cuda.shared.array((TB, TW1), w_t)
        Et = cuda.shared.array((TB, TW1), float64)  # E; column w: the carried one
        vb = cuda.shared.array(TW, float64)  # the band below's hand-over
        Xs = cuda.shared.array((TB, RC1), float64)  # staged features of the band's rows
        Ys = cuda.shared.array((TW, RC1), float64)  # and of the tile's columns
        Yn = cuda.shared.array(TW, float64)  # |y_j|^2 of the tile's columns
        xx = 0.0  # |x_i|^2
        if real:
            for d in range(D):
                xv = float64(X[b, i, d])
                xx += xv * xv
        e_c = 0.0  # the carried column (the tile to the right's column 0): E and weights
        d_c = w_t(0.0)
        u_c = w_t(0.0)
        ntiles = (Mb + TW - 1) // TW
        for c in range(ntiles):
            jr = Mb - 1 - TW * c  # the tile's columns jl .. jr
            jl = max(jr - (TW - 1), 0)
            w = jr - jl + 1
            # the tile's edges: R of the row above (lane q: column jl + q; lane 0 the corner
            # too) and of the column to the left (none: +inf); its costs
            if r < w:
                Rt[0, r + 1] = top(Rb, above, jl + r, k)
            if r == 0:
                Rt[0, 0] = top(Rb, above, jl - 1, k)
            if real:
                Rt[r + 1, 0] = INF if jl == 0 else from_bits(Rb[ck + TW * c])
            tile_costs(X, Y, D, b, i, jl, w, xx, Ct, Xs, Ys, Yn, r, scale, real)
            Et[r, w] = e_c
            Wd[r, w] = d_c
            Wu[r, w] = u_c
            if has_below and r < w:  # the band below's hand-over of this tile's columns
                v = poll(Gb, below_row + jl + r)
                while v == SENTINEL:
                    v = poll(Gb, below_row + jl + r)
                vb[r] = from_bits(v)
            sync_band()
            for s in range(TB + w - 1):  # R and the weights, anti-diagonal by anti-diagonal
                q = s - r
                if real and q >= 0 and q < w:
                    r_diag = Rt[r, q]
                    r_left = Rt[r + 1, q]
                    m2 = min2(r_diag, r_left)
                    mm2 = min2(min2(r_diag, BIG), r_left)
                    ok = jl + q >= jlo and jl + q <= jhi
                    rv, pd, pu = cell(r_diag, r_left, m2, mm2, Rt[r, q + 1], Ct[r, q], ok)
                    Rt[r + 1, q + 1] = rv
                    Wd[r, q] = pd
                    Wu[r, q] = pu
                sync_band()
            for s in range(TB + w - 2, -1, -1):  # E, anti-diagonals in reverse
                q = s - r
                if real and q >= 0 and q < w:
                    right = Et[r, q + 1] * (1.0 - float64(Wd[r, q + 1]) - float64(Wu[r, q + 1]))
                    if r < nr1:
                        down = Et[r + 1, q] * float64(Wu[r + 1, q])
                        down += Et[r + 1, q + 1] * float64(Wd[r + 1, q + 1])
                    else:
                        down = vb[q] if has_below else 0.0
                    e = right + down
                    if i == Nb - 1 and jl + q == Mb - 1:
                        e = float64(gout[b])  # the last cell: E = the upstream gradient
                    if Rt[r + 1, q + 1] == INF:
                        e = 0.0  # an unreachable cell (R = +inf; out of the band too)
                    Et[r, q] = e
                    if r == 0 and k > 0:  # the hand-over to the band above
                        v0 = e * float64(Wu[0, q]) + Et[0, q + 1] * float64(Wd[0, q + 1])
                        st_if(Gb, uint64(own + jl + q), as_bits(v0), True)
                sync_band()
            tile_grads(X, Y, D, b, i, jl, w, nr1, Et, Xs, Ys, GX, GY, r, real)
            e_c = Et[r, 0]
            d_c = Wd[r, 0]
            u_c = Wu[r, 0]
            sync_band()

    return recompute
