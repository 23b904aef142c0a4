"""Moving a band's data between global memory and the shared ring: the staging loads and
stores of the DP kernels, and the feature loads of the fused distances.

Staging and write-out address a band through flat views of the global arrays that start at the
band's first row (``A[base:]``, one 64-bit base per band,
:func:`~sdtw.cuda.kernels.primitives.band_view`) with unsigned 32-bit offsets ``row M +
column`` (under ``32 M`` for any length), and the shared ring through flat arrays (row ``r``,
slot ``q`` at ``r RING1 + q``), so that each access costs an integer multiply-add or two:
2-D/3-D indexing computed 64-bit strided offsets and tested each row, about 50 instructions per
row of a chunk's write-out in the sm_90 code, 60% of all the instructions a chunk issued.  Rows
past the table's last read (and write) the last row again, so that the unconditional loads stay
in bounds.
"""

from __future__ import annotations

from numba import float64

from sdtw.cuda.kernels.jit import device
from sdtw.cuda.kernels.primitives import join_words, slot, u32


@device
def ld8(A, off, M, rmax, r0):
    """Rows ``min(r, rmax)``, ``r = r0 .. r0 + 7``, of column ``off`` of the band view ``A``
    (rows ``M`` apart): eight independent loads, issued back to back, into registers."""
    return (
        A[u32(off + min(r0, rmax) * M)],
        A[u32(off + min(r0 + 1, rmax) * M)],
        A[u32(off + min(r0 + 2, rmax) * M)],
        A[u32(off + min(r0 + 3, rmax) * M)],
        A[u32(off + min(r0 + 4, rmax) * M)],
        A[u32(off + min(r0 + 5, rmax) * M)],
        A[u32(off + min(r0 + 6, rmax) * M)],
        A[u32(off + min(r0 + 7, rmax) * M)],
    )


@device
def ld32(A, off, M, rmax):
    """The band's 32 rows of one column of ``A``: four :func:`ld8` loads."""
    return (
        ld8(A, off, M, rmax, 0),
        ld8(A, off, M, rmax, 8),
        ld8(A, off, M, rmax, 16),
        ld8(A, off, M, rmax, 24),
    )


@device
def st8(blk, po, v, r0, base, sgn):
    """Store :func:`ld8`'s values of rows ``r0 ..`` in their ring slots (see
    :func:`~sdtw.cuda.kernels.primitives.slot`)."""
    blk[slot(po, r0, base, sgn)] = v[0]
    blk[slot(po, r0 + 1, base, sgn)] = v[1]
    blk[slot(po, r0 + 2, base, sgn)] = v[2]
    blk[slot(po, r0 + 3, base, sgn)] = v[3]
    blk[slot(po, r0 + 4, base, sgn)] = v[4]
    blk[slot(po, r0 + 5, base, sgn)] = v[5]
    blk[slot(po, r0 + 6, base, sgn)] = v[6]
    blk[slot(po, r0 + 7, base, sgn)] = v[7]


@device
def st32(blk, po, v, base, sgn):
    """Store :func:`ld32`'s values (see :func:`st8`)."""
    st8(blk, po, v[0], 0, base, sgn)
    st8(blk, po, v[1], 8, base, sgn)
    st8(blk, po, v[2], 16, base, sgn)
    st8(blk, po, v[3], 24, base, sgn)


# A float64 distance in a float32 ``P`` travels as the two 32-bit words of its bits, the high
# word in plane 1 and the low word in plane 0 (as float32 bit patterns, never computed with):
# splitting and joining them are register moves, where a float32 high part plus a float32
# low part cost three 64-bit conversions to split and two and an add to join (quarter-rate
# instructions on the pipe of ex2/lg2).


@device
def join8(hi, lo):
    """The float64 values of two :func:`ld8` loads of high and low words."""
    return (
        join_words(hi[0], lo[0]),
        join_words(hi[1], lo[1]),
        join_words(hi[2], lo[2]),
        join_words(hi[3], lo[3]),
        join_words(hi[4], lo[4]),
        join_words(hi[5], lo[5]),
        join_words(hi[6], lo[6]),
        join_words(hi[7], lo[7]),
    )


@device
def join32(hi, lo):
    """:func:`join8` of two :func:`ld32` loads."""
    return (
        join8(hi[0], lo[0]),
        join8(hi[1], lo[1]),
        join8(hi[2], lo[2]),
        join8(hi[3], lo[3]),
    )


# A float32 weight kept in a float64 slot of the staged block (modes whose block holds float64
# distances and float32 weights) travels as its bits, not converted: two register moves
# instead of two conversions (a 64-bit conversion is a quarter-rate instruction on the same


@device
def feat16(A, first, lim, dc):
    """Feature ``dc`` of rows ``first, first + 2, .., first + 30`` of the 2-D array ``A`` (rows
    clamped to ``lim``): sixteen independent loads, issued back to back."""
    return (
        A[min(first, lim), dc],
        A[min(first + 2, lim), dc],
        A[min(first + 4, lim), dc],
        A[min(first + 6, lim), dc],
        A[min(first + 8, lim), dc],
        A[min(first + 10, lim), dc],
        A[min(first + 12, lim), dc],
        A[min(first + 14, lim), dc],
        A[min(first + 16, lim), dc],
        A[min(first + 18, lim), dc],
        A[min(first + 20, lim), dc],
        A[min(first + 22, lim), dc],
        A[min(first + 24, lim), dc],
        A[min(first + 26, lim), dc],
        A[min(first + 28, lim), dc],
        A[min(first + 30, lim), dc],
    )


@device
def put1(sh, dd, r, v, ok):
    sh[dd, r] = float64(v) if ok else 0.0


@device
def put16(sh, dd, rh, v, first, lim, d_ok):
    """Store :func:`feat16`'s values as float64 in ``sh[dd, rh + 2 q]`` (zero where the row is
    past ``lim`` or the feature does not exist).  Written out: a loop over ``q`` indexes the
    tuple ``v`` at run time, which Numba compiles to a chain of branches (ptxas 13.0 sm_90:
    ~1000 instructions per staging pass, ISETP 795, BRA 509, BREAK 256)."""
    put1(sh, dd, rh, v[0], d_ok and first <= lim)
    put1(sh, dd, rh + 2, v[1], d_ok and first + 2 <= lim)
    put1(sh, dd, rh + 4, v[2], d_ok and first + 4 <= lim)
    put1(sh, dd, rh + 6, v[3], d_ok and first + 6 <= lim)
    put1(sh, dd, rh + 8, v[4], d_ok and first + 8 <= lim)
    put1(sh, dd, rh + 10, v[5], d_ok and first + 10 <= lim)
    put1(sh, dd, rh + 12, v[6], d_ok and first + 12 <= lim)
    put1(sh, dd, rh + 14, v[7], d_ok and first + 14 <= lim)
    put1(sh, dd, rh + 16, v[8], d_ok and first + 16 <= lim)
    put1(sh, dd, rh + 18, v[9], d_ok and first + 18 <= lim)
    put1(sh, dd, rh + 20, v[10], d_ok and first + 20 <= lim)
    put1(sh, dd, rh + 22, v[11], d_ok and first + 22 <= lim)
    put1(sh, dd, rh + 24, v[12], d_ok and first + 24 <= lim)
    put1(sh, dd, rh + 26, v[13], d_ok and first + 26 <= lim)
    put1(sh, dd, rh + 28, v[14], d_ok and first + 28 <= lim)
    put1(sh, dd, rh + 30, v[15], d_ok and first + 30 <= lim)
