"""The fused forward's squared distances, computed inside the DP kernels on the float64 tensor
cores: the no-gradient forward of float64 inputs (mode ``fused``: the band's own warp, between
its chunks' steps) and of float32 inputs (mode ``tiled``: a third warp per band, the *distance
warp*, a column chunk ahead of the steps; see :mod:`sdtw.cuda.kernels.forward`).

A warp computes a 32 x 32 tile of dot products as 2 x 4 tiles of 16 x 8 with
``mma.m16n8k8.f64`` (:func:`products`), features staged ``DC`` at a time in shared memory, and
forms ``max(|x_i|^2 + |y_j|^2 - 2 x_i.y_j, 0)`` (NaN kept) with float64 norms.  Mode
``tiled`` sums the norms from the lanes' fragment squares in the park kernel's order
(:mod:`sdtw.cuda.kernels.park`), so its distances are the park kernel's bit for bit.
"""

from __future__ import annotations

from numba import float64

from sdtw.cuda.kernels.geometry import DC, TB
from sdtw.cuda.kernels.jit import device
from sdtw.cuda.kernels.primitives import fmma, slot, sync_band, u32
from sdtw.cuda.kernels.staging import feat16, put16


@device
def cell_distance(acc, xn, yn, g, t, a, c, q):
    """Row ``r``, column ``cl`` and squared distance (clamped at 0, NaN kept) of lane
    ``(g, t)``'s accumulator ``(a, c, q)`` of the tile (see :func:`products`), from the
    norms ``xn`` (rows) and ``yn`` (columns)."""
    r = 16 * a + g + 8 * (q >> 1)
    cl = 8 * c + 2 * t + (q & 1)
    v = (xn[r] + yn[cl]) - 2.0 * acc[16 * a + 4 * c + q]
    return r, cl, (0.0 if v < 0.0 else v)


@device
def feat16u(A, o, st, lim):
    """``A[min(o + q st, lim)]``, ``q = 0 .. 15``, of the flat view ``A``: feature ``d`` of
    rows ``r0, r0 + 2, ..`` clamped to the last row, for ``o = r0 D + d``, ``st = 2 D`` and
    ``lim = (N - 1) D + d``.  The offsets are a chain from ``o``, which changes with each
    pass, so that no loop-invariant row offsets get hoisted into registers (clamping
    the rows themselves put ~60 registers of them into the distance warp)."""
    o1 = o + st
    o2 = o1 + st
    o3 = o2 + st
    o4 = o3 + st
    o5 = o4 + st
    o6 = o5 + st
    o7 = o6 + st
    o8 = o7 + st
    o9 = o8 + st
    o10 = o9 + st
    o11 = o10 + st
    o12 = o11 + st
    o13 = o12 + st
    o14 = o13 + st
    o15 = o14 + st
    return (
        A[u32(min(o, lim))],
        A[u32(min(o1, lim))],
        A[u32(min(o2, lim))],
        A[u32(min(o3, lim))],
        A[u32(min(o4, lim))],
        A[u32(min(o5, lim))],
        A[u32(min(o6, lim))],
        A[u32(min(o7, lim))],
        A[u32(min(o8, lim))],
        A[u32(min(o9, lim))],
        A[u32(min(o10, lim))],
        A[u32(min(o11, lim))],
        A[u32(min(o12, lim))],
        A[u32(min(o13, lim))],
        A[u32(min(o14, lim))],
        A[u32(min(o15, lim))],
    )


@device
def put16d(sh, dd, rh, v, d_ok):
    """:func:`_put16` without the rows' checks (rows past the table hold the last row's
    values: their cells are zeroed in :func:`tile_out`, and a cell's value depends on
    its own row and column only): zeros where the feature does not exist."""
    sh[dd, rh] = float64(v[0]) if d_ok else 0.0
    sh[dd, rh + 2] = float64(v[1]) if d_ok else 0.0
    sh[dd, rh + 4] = float64(v[2]) if d_ok else 0.0
    sh[dd, rh + 6] = float64(v[3]) if d_ok else 0.0
    sh[dd, rh + 8] = float64(v[4]) if d_ok else 0.0
    sh[dd, rh + 10] = float64(v[5]) if d_ok else 0.0
    sh[dd, rh + 12] = float64(v[6]) if d_ok else 0.0
    sh[dd, rh + 14] = float64(v[7]) if d_ok else 0.0
    sh[dd, rh + 16] = float64(v[8]) if d_ok else 0.0
    sh[dd, rh + 18] = float64(v[9]) if d_ok else 0.0
    sh[dd, rh + 20] = float64(v[10]) if d_ok else 0.0
    sh[dd, rh + 22] = float64(v[11]) if d_ok else 0.0
    sh[dd, rh + 24] = float64(v[12]) if d_ok else 0.0
    sh[dd, rh + 26] = float64(v[13]) if d_ok else 0.0
    sh[dd, rh + 28] = float64(v[14]) if d_ok else 0.0
    sh[dd, rh + 30] = float64(v[15]) if d_ok else 0.0


@device
def tget8(T, r0, h, ok):
    """Rows ``r0 .. r0 + 7`` of column ``h`` of the tile ``T`` (zeros where not ``ok``)."""
    if ok:
        return (
            T[r0, h],
            T[r0 + 1, h],
            T[r0 + 2, h],
            T[r0 + 3, h],
            T[r0 + 4, h],
            T[r0 + 5, h],
            T[r0 + 6, h],
            T[r0 + 7, h],
        )
    return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@device
def stage_pass(Xb, Yb, xsh, ysh, i0, jn0, N, M, D, d0, dd, rh):
    """Features ``d0 .. d0 + DC - 1`` of the band's rows and of columns ``jn0 ..`` into
    ``xsh``/``ysh`` (float64; lanes (dd, rh) take feature ``d0 + dd`` of rows rh, rh + 2, ..
    with all 32 loads issued before the first store)."""
    d = d0 + dd
    dc = min(d, D - 1)
    fx = feat16(Xb, i0 + rh, N - 1, dc)
    fy = feat16(Yb, jn0 + rh, M - 1, dc)
    sync_band()  # every lane is done with the previous pass
    put16(xsh, dd, rh, fx, i0 + rh, N - 1, d < D)
    put16(ysh, dd, rh, fy, jn0 + rh, M - 1, d < D)
    sync_band()


@device
def distances(acc, yn, xn, blk, i0, N, M, j0, tid, scale):
    """Scaled squared distances of this lane's 32 cells of the tile (see
    :func:`products`; columns from ``j0``), from the accumulated products and the norms
    ``xn`` (rows) and ``yn`` (columns, in shared memory), into the ring (zero outside
    the table)."""
    g = tid >> 2
    t = tid & 3
    for a in range(2):
        for c in range(4):
            for q in range(4):
                r, cl, v = cell_distance(acc, xn, yn, g, t, a, c, q)
                jl = j0 + cl
                blk[slot(0, r, jl, 1)] = v * scale if (i0 + r < N and jl < M) else 0.0


@device
def tile_out(acc, nq, T, xn, yn, part, i0, j0, N, M, tid):
    """:func:`tile_acc`'s squared distances into the tile ``T`` (row, column; float64,
    unscaled, clamped at 0 with NaN kept, zero outside the table): the park kernel's
    values bit for bit, from the same ``mma`` sequence over the features and each norm
    summed as ``(s0 + s1) + (s2 + s3)`` from the same four lanes' shares (``part``: the
    shares by lane; ``xn``/``yn``: the norms; the rows' are recomputed each chunk, the
    same values each time)."""
    for e in range(8):
        part[e, tid] = nq[e]
    sync_band()
    # row / column tid = g + 8 m: shares nq[m] / nq[4 + m] of lanes 4 g .. 4 g + 3
    m = tid >> 3
    s0 = (tid & 7) * 4
    xn[tid] = (part[m, s0] + part[m, s0 + 1]) + (part[m, s0 + 2] + part[m, s0 + 3])
    yn[tid] = (part[m + 4, s0] + part[m + 4, s0 + 1]) + (part[m + 4, s0 + 2] + part[m + 4, s0 + 3])
    sync_band()
    g = tid >> 2
    t = tid & 3
    for a in range(2):
        for c in range(4):
            for q in range(4):
                r, cl, v = cell_distance(acc, xn, yn, g, t, a, c, q)
                T[r, cl] = v if (i0 + r < N and j0 + cl < M) else 0.0


def build(tiled: bool):
    """The distance products' device functions that depend on the mode, ``(products,
    tile_acc)``; ``tiled``: the distance warp's form (its norms summed from the fragments)."""

    @device
    def products(acc, xsh, ysh, tid, yy, nq):
        """Add the staged pass's products to the warp's 32 x 32 tile of dot products, on the
        float64 tensor cores: for each 8 of its ``DC`` features, 8 ``mma.m16n8k8.f64`` (the
        tile as 2 x 4 tiles of 16 x 8, this lane's accumulators ``acc[16 a + 4 c + q]`` in
        the C layout of :func:`_dmma_intrinsic`: rows ``16 a + g (+ 8)``, columns
        ``8 c + 2 t (+ 1)``, ``g = tid // 4``, ``t = tid % 4``); and this lane's column's
        ``y^2`` to ``yy`` (returned).  Mode ``tiled`` (the distance warp) instead adds the
        squares of the lane's fragment values to the norm shares ``nq`` in the park kernel's
        order (its ``kstep``): features ``t``, then ``t + 4`` of each 8, of rows ``g + 8 m``
        (``nq[m]``) and columns ``g + 8 c`` (``nq[4 + c]``); ``nq`` is unused otherwise."""
        g = tid >> 2
        t = tid & 3
        for k0 in range(0, DC, 8):
            kt = k0 + t
            b = (
                ysh[kt, g],
                ysh[kt + 4, g],
                ysh[kt, g + 8],
                ysh[kt + 4, g + 8],
                ysh[kt, g + 16],
                ysh[kt + 4, g + 16],
                ysh[kt, g + 24],
                ysh[kt + 4, g + 24],
            )
            if tiled:
                for c in range(4):
                    nq[4 + c] += b[2 * c] * b[2 * c]
                    nq[4 + c] += b[2 * c + 1] * b[2 * c + 1]
            for a in range(2):
                r = 16 * a + g
                a0 = xsh[kt, r]
                a1 = xsh[kt, r + 8]
                a2 = xsh[kt + 4, r]
                a3 = xsh[kt + 4, r + 8]
                if tiled:
                    nq[2 * a] += a0 * a0
                    nq[2 * a] += a2 * a2
                    nq[2 * a + 1] += a1 * a1
                    nq[2 * a + 1] += a3 * a3
                for c in range(4):
                    q = 16 * a + 4 * c
                    d = fmma(
                        a0,
                        a1,
                        a2,
                        a3,
                        b[2 * c],
                        b[2 * c + 1],
                        acc[q],
                        acc[q + 1],
                        acc[q + 2],
                        acc[q + 3],
                        xsh,
                        ysh,
                        k0,
                        16 * a,
                        8 * c,
                        g,
                        t,
                    )
                    acc[q], acc[q + 1], acc[q + 2], acc[q + 3] = d
        if not tiled:
            for e in range(DC):
                yv = ysh[e, tid]
                yy += yv * yv
        return yy

    @device
    def tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, j0, N, M, D, tid):
        """The distance warp's products of its band's rows and columns ``j0 .. j0 + 31``
        (mode ``tiled``), into its registers: ``acc`` (see :func:`products`) and the norm
        shares ``nq`` (see :func:`products`).  ``Xp``, ``Yp``: flat views of the pair's
        x and y; staged ``DC`` features a pass as in :func:`stage_pass` (lane ``(dd, rh)``
        takes feature ``dd`` of rows ``rh, rh + 2, ..``: each load a few lines, where one
        row per lane made each load touch 32 lines)."""
        for r in range(TB):
            acc[r] = 0.0
        for e in range(8):
            nq[e] = 0.0
        dd = tid % DC
        rh = tid // DC
        Du = u32(D)
        st = u32(2 * D)
        xr = u32(i0 + rh)
        yr = u32(j0 + rh)
        xl = u32(N - 1)
        yl = u32(M - 1)
        for d0 in range(0, D, DC):
            d = d0 + dd
            dc = u32(min(d, D - 1))
            fx = feat16u(Xp, xr * Du + dc, st, xl * Du + dc)
            fy = feat16u(Yp, yr * Du + dc, st, yl * Du + dc)
            sync_band()  # every lane is done with the previous pass
            put16d(xsh, dd, rh, fx, d < D)
            put16d(ysh, dd, rh, fy, d < D)
            sync_band()
            products(acc, xsh, ysh, tid, 0.0, nq)

    return products, tile_acc
