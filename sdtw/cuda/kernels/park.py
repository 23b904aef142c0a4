"""Parking the fused distances (the fused forward with gradients) and the unfused path's
squared-Euclidean cost tensor.

``park`` fills plane 0 of a float64 ``P`` (B, 2, N, M) with each cell's squared distance
``max(|x_i|^2 + |y_j|^2 - 2 x_i.y_j, 0)`` for the ``split`` forward (float64 inputs); its
float32 variant (float32 inputs) writes the same float64 distance into a float32 ``P`` as
the two 32-bit words of its bits, the high word in plane 1 and the low word in plane 0, for
the ``hilo`` forward: 8 bytes per cell either way, what P holds anyway.  The dot products run
on the float64 tensor cores (``mma.sync.m16n8k8.f64``, ``DMMA.16x8x8`` on sm_90: IEEE
float64 products and sums): a block of 4 warps computes a PS x PS tile, each warp a 32 x 32
quarter as 2 x 4 tiles of 16 x 8.  The tile's rows' and columns' features are staged in
shared memory in the inputs' own dtype, PK of them per pass (float32: 64, so one pass for
D <= 64; float64: 32), by coalesced loads of the rows (contiguous in x and y); per 8
features a warp loads 16 fragment values per lane (converted to float64) and issues 8 mma.
The squared norms are float64 sums of the same staged features.  Each lane then writes its
own results straight from the mma accumulators: two adjacent columns of a row at a time,
as one 8-byte (float32 words) or 16-byte (float64) store per plane where M is even, two
scalar stores where it is odd (no shared-memory round trip, no barrier after the products).
Shared-memory indices are unsigned 32-bit and P is written through flat views (row bases
from :func:`band_view`), so that no 64-bit index arithmetic sits in the loops.  One launch,
no buffer besides ``P``.  (Ampere's m8n8k4 shape with 16 features per pass and the tile out
through shared memory took 324 us at B = 32, N = M = 1024, D = 64 on the H200.)
"""

from __future__ import annotations

from typing import NamedTuple

from numba import cuda, float32, float64, uint32

from sdtw.cuda.kernels.geometry import PARK_THREADS, PS
from sdtw.cuda.kernels.jit import SIMULATED, device, kernel
from sdtw.cuda.kernels.primitives import band_view, dmma, hi_word, lo_word, st2_if, u32
from sdtw.cuda.kernels.specs import ParkSpec


class _Layout(NamedTuple):
    """The park kernel's staging for float32 (``f32``) or float64 inputs."""

    PK: int  # features staged per pass: 64 float32 or 32 float64
    LD: int  # padded staged row: a fragment load's lanes fall in distinct banks
    NST: int  # one operand's staging (rows' features; the columns' follow)
    LOADS: int  # staged values per thread per operand and pass
    RPR: int  # rows staged per round of one load per thread
    RND: int  # of them in flight per round (float64: registers)
    KSH: int  # log2(PK)
    SDT: object  # the staged dtype

    @property
    def NS2(self) -> int:
        return 2 * self.NST


def _layout(f32: bool) -> _Layout:
    PK = 64 if f32 else 32
    LD = PK + 4
    return _Layout(
        PK, LD, PS * LD, PS * PK // PARK_THREADS, PARK_THREADS // PK, 16 if f32 else 8,
        PK.bit_length() - 1, float32 if f32 else float64,
    )  # fmt: skip


#: Eight norm shares per thread (see ``kstep``).
NPART = 8 * PARK_THREADS


def _fragments(f32: bool):
    """The products of one 8-feature step: ``kstep``."""
    LD = _layout(f32).LD

    # Shared-memory offsets are kept unsigned 32-bit (``u32``): Numba's 64-bit integer
    # expressions put 64-bit adds, shifts and compares into every fragment load otherwise
    # (~45 integer instructions per 8 mma in the k loop, sm_90).

    @device
    def afrag(S, base):
        """A lane's A fragment of a 16-row tile (rows ``g, g + 8``, features ``t, t + 4``
        from ``base`` = its row g, feature t), as float64."""
        return (
            float64(S[base]),
            float64(S[base + 8 * LD]),
            float64(S[base + 4]),
            float64(S[base + (8 * LD + 4)]),
        )

    @device
    def bfrag(S, base):
        """A lane's B fragment of an 8-column tile (column g, features ``t, t + 4``)."""
        return float64(S[base]), float64(S[base + 4])

    @device
    def mma_gpu(S, a, b, fa, fb, lane, c):
        return dmma(a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3])

    @device
    def mma_sim(S, a, b, fa, fb, lane, c):
        """The simulator's twin of one lane's ``mma`` (it has no warp-collective matrix op):
        the lane's four outputs (rows ``g, g + 8``, columns ``2 t, 2 t + 1`` of the 16 x 8
        tile) from the features at its A fragment ``S[fa]`` and B fragment ``S[fb]``."""
        g = lane >> 2
        t = lane & 3
        r0 = fa - t  # the tile's row g, from its first feature of the eight
        r1 = r0 + 8 * LD
        n0 = fb - g * LD - t + 2 * t * LD  # the tile's column 2 t
        n1 = n0 + LD
        c0, c1, c2, c3 = c
        for k in range(8):
            x0 = float64(S[r0 + k])
            x1 = float64(S[r1 + k])
            y0 = float64(S[n0 + k])
            y1 = float64(S[n1 + k])
            c0 += x0 * y0
            c1 += x0 * y1
            c2 += x1 * y0
            c3 += x1 * y1
        return c0, c1, c2, c3

    mma = mma_sim if SIMULATED else mma_gpu

    @device
    def kstep(S, acc, nq, fa, fb, lane):
        """Features ``kb .. kb + 7`` (the lane's fragments at ``S[fa]``, ``S[fb]``) into the
        accumulators of the warp's 2 x 4 tiles of 16 x 8, and the squares of the lane's
        fragment values into ``nq``: features ``t, t + 4`` of rows ``g + 8 m`` (``nq[m]``)
        and of columns ``g + 8 c`` (``nq[4 + c]``), the lane's share of their norms."""
        a0 = afrag(S, fa)
        a1 = afrag(S, fa + 16 * LD)
        for m in range(2):  # (one fused multiply-add per square)
            nq[m] += a0[m] * a0[m]
            nq[m] += a0[m + 2] * a0[m + 2]
            nq[m + 2] += a1[m] * a1[m]
            nq[m + 2] += a1[m + 2] * a1[m + 2]
        for c in range(4):
            bv = bfrag(S, fb + 8 * LD * c)
            nq[4 + c] += bv[0] * bv[0]
            nq[4 + c] += bv[1] * bv[1]
            for a in range(2):
                c_in = (acc[a, c, 0], acc[a, c, 1], acc[a, c, 2], acc[a, c, 3])
                r = mma(
                    S,
                    a0 if a == 0 else a1,
                    bv,
                    u32(fa + 16 * LD * a),
                    u32(fb + 8 * LD * c),
                    lane,
                    c_in,
                )
                acc[a, c, 0], acc[a, c, 1], acc[a, c, 2], acc[a, c, 3] = r

    return kstep


def _io(spec: ParkSpec):
    """Staging of the features and the write-out of the distances: ``(stage, put)``."""
    words = spec.f32 and not spec.cost
    PK, LD, NST, LOADS, RPR, RND, KSH, SDT = _layout(spec.f32)

    @device
    def stage(S, X, Y, xbase, ybase, rows, cols, D, d0, t):
        """Features ``d0 .. d0 + PK - 1`` of the tile's ``rows`` rows of the flat ``X`` (row
        r at ``xbase + r D``) into ``S[r LD + k]``, and of its ``cols`` rows of ``Y`` into
        ``S[NST + r LD + k]`` (zero past the rows or D): rounds of RND loads of each in flight."""
        Xb = band_view(X, xbase)
        Yb = band_view(Y, ybase)
        # thread t stages feature k = t % PK of rows t // PK + RPR q (q = 0 .. LOADS - 1)
        k = t & uint32(PK - 1)
        r0 = t >> uint32(KSH)
        kin = d0 + k < D
        src = u32(r0 * D + d0 + k)
        step = u32(RPR * D)
        dst = u32(r0 * LD + k)
        for g in range(LOADS // RND):
            vx = cuda.local.array(RND, SDT)
            vy = cuda.local.array(RND, SDT)
            for u in range(RND):
                vx[u] = 0
                vy[u] = 0
            if kin:  # (one branch per round, the loads predicated)
                for u in range(RND):
                    q = RND * g + u
                    r = u32(r0 + RPR * q)
                    at = u32(src + q * step)
                    if r < rows:
                        vx[u] = Xb[at]
                    if r < cols:
                        vy[u] = Yb[at]
            for u in range(RND):
                at = u32(dst + (RND * g + u) * (RPR * LD))
                S[at] = vx[u]
                S[u32(NST + at)] = vy[u]

    @device
    def pair(V, col, w0, w1, rok, j, M, even):
        """``V[col], V[col + 1] = w0, w1`` for cells (row, j), (row, j + 1) where they exist
        (``j < M``; the park passes the tile's column and its column count, 32-bit compares):
        one vector store for even M, two scalar ones for odd M."""
        if even:
            st2_if(V, col, w0, w1, rok and j < M)
        else:
            if rok and j < M:
                V[col] = w0
            if rok and j + 1 < M:
                V[col + uint32(1)] = w1

    @device
    def put(Pv, Pw, col, v0, v1, rok, j, M, even):
        """Cells (row, j), (row, j + 1) of the row views ``Pv`` (plane 0) and ``Pw``
        (plane 1) at ``col``."""
        if words:
            pair(Pw, col, hi_word(v0), hi_word(v1), rok, j, M, even)
            pair(Pv, col, lo_word(v0), lo_word(v1), rok, j, M, even)
        else:
            pair(Pv, col, SDT(v0), SDT(v1), rok, j, M, even)

    # float32: 4 blocks (16 warps) per SM, ptxas keeps to 128 registers (134 unbounded: 3)

    return stage, put


def build(spec: ParkSpec):
    """The park kernel of ``spec``: for float32 (``f32``) or float64 inputs, into a float64
    P's plane 0 (float64), into a float32 P as the high (plane 1) and low (plane 0) 32-bit
    words of each distance's float64 bits (float32, *words*); or, with ``cost``, into a plain
    (B, N, M) cost tensor of the inputs' dtype (the float64 distance rounded once)."""
    f32 = spec.f32
    words = f32 and not spec.cost
    PLANES = 1 if spec.cost else 2  # planes per pair in the output
    lay = _layout(f32)
    PK, LD, NST, NS2, SDT = lay.PK, lay.LD, lay.NST, lay.NS2, lay.SDT
    kstep = _fragments(f32)
    stage, put = _io(spec)

    # float32: 4 blocks (16 warps) per SM, ptxas keeps to 128 registers (134 unbounded: 3)
    @kernel(launch_bounds=(PARK_THREADS, 4) if f32 else None)
    def park(X, Y, Pf, N, M, D):
        """X (B N D,), Y (B M D,) flat -> P[:, 0] = squared distances (float64 P), or
        P[:, 1] and P[:, 0] = their bits' high and low 32-bit words (float32 P, ``words``),
        with ``Pf`` the flat view of P (B, 2, N, M); with ``cost``, ``Pf`` the flat (B, N, M)
        cost.  One block per (pair, row tile, column tile), ``B * nti * ntj`` blocks."""
        nti = (N + PS - 1) // PS
        ntj = (M + PS - 1) // PS
        q = cuda.blockIdx.x
        tj = q % ntj
        q = q // ntj
        ti = q % nti
        b = q // nti
        t = uint32(cuda.threadIdx.x)
        lane = t & uint32(31)
        w = t >> 5
        i0 = ti * PS
        j0 = tj * PS
        rows = u32(min(PS, N - i0))
        cols = u32(min(PS, M - j0))
        Du = u32(D)
        rw = (w >> 1) * uint32(32)  # this warp's 32 x 32 quarter of the tile
        cw = (w & 1) * uint32(32)
        S = cuda.shared.array(NS2, SDT)  # rows' features [r LD + k], columns' at NST + ...
        nrm = cuda.shared.array(PARK_THREADS, float64)  # rows' |x|^2, then columns' |y|^2
        part = cuda.shared.array(NPART, float64)  # lanes' norm shares, [e T + t]
        acc = cuda.local.array((2, 4, 4), float64)  # (row tile, column tile, lane's four)
        for a in range(2):
            for c in range(4):
                for e in range(4):
                    acc[a, c, e] = 0.0
        # the lane's fragments: A row rw + lane // 4 (+ 16 a, + 8), B column cw + lane // 4
        # (+ 8 c), features lane % 4 (+ 4) from kb
        fa0 = u32((rw + (lane >> 2)) * LD + (lane & uint32(3)))
        fb0 = u32((cw + (lane >> 2)) * LD + (lane & uint32(3)) + NST)
        # the norms come from the fragments' squares (kstep): no pass of their own over S
        nq = cuda.local.array(8, float64)
        for e in range(8):
            nq[e] = 0.0
        xbase = (b * N + i0) * D
        ybase = (b * M + j0) * D
        for d0 in range(0, D, PK):
            du = u32(d0)
            if d0 > 0:
                cuda.syncthreads()  # every thread is done with the previous pass
            stage(S, X, Y, xbase, ybase, rows, cols, Du, du, t)
            cuda.syncthreads()
            kend = min(PK, D - d0)
            if kend == PK:  # a full pass
                for kb in range(0, PK, 8):
                    kstep(S, acc, nq, u32(fa0 + kb), u32(fb0 + kb), lane)
            else:
                for kb in range(0, kend, 8):
                    kstep(S, acc, nq, u32(fa0 + kb), u32(fb0 + kb), lane)
        # Norm of row t (t < PS) or column t - PS: the four lanes t' = 0 .. 3 of group g of
        # warp 2 (r // 32) (rows; warp 2 (r // 32) + 1 has the same) or c // 32 (columns)
        # hold a share each, in nq[(r % 32) // 8] or nq[4 + (c % 32) // 8].
        for e in range(8):
            part[u32(e * PARK_THREADS + t)] = nq[e]
        cuda.syncthreads()
        o = t & uint32(PS - 1)
        isc = t >> uint32(6)  # 0: a row, 1: a column
        src_w = (o >> uint32(5)) << (uint32(1) - isc)  # rows: warp 2 (o // 32); cols: o // 32
        src_e = ((o & uint32(31)) >> uint32(3)) + uint32(4) * isc
        src_l = u32(src_e * PARK_THREADS + src_w * 32 + (o & uint32(7)) * 4)
        nrm[t] = (part[src_l] + part[src_l + 1]) + (part[src_l + 2] + part[src_l + 3])
        cuda.syncthreads()
        # the lane's cells: rows rw + lane // 4 + 8 m, columns cw + 2 (lane % 4) + 8 c (+ e)
        ra = rw + (lane >> 2)
        cb = cw + uint32(2) * (lane & uint32(3))
        even = (M & 1) == 0
        p0 = ((PLANES * b) * N + i0) * M + j0  # the tile's origin in plane 0, then in plane 1
        p1 = p0 + N * M
        for m in range(4):  # row m of the lane's: row tile m // 2, its row g + 8 (m % 2)
            r = ra + uint32(8 * m)
            rok = r < rows
            rr = min(r, rows - uint32(1))  # (a row view inside P even where nothing is stored)
            Pv = band_view(Pf, p0 + rr * M)
            Pw = band_view(Pf, p1 + rr * M) if words else Pv
            nx = nrm[r]
            for c in range(4):
                col = cb + uint32(8 * c)
                v0 = (nx + nrm[uint32(PS) + col]) - 2.0 * acc[m >> 1, c, 2 * (m & 1)]
                v1 = (nx + nrm[uint32(PS + 1) + col]) - 2.0 * acc[m >> 1, c, 2 * (m & 1) + 1]
                # clamped at 0, NaN kept (a NaN input gives a NaN loss)
                v0 = 0.0 if v0 < 0.0 else v0
                v1 = 0.0 if v1 < 0.0 else v1
                put(Pv, Pw, col, v0, v1, rok, col, cols, even)

    return park

    return park
