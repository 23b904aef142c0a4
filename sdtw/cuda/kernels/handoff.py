"""The hand-over between bands: each band's last row goes to the band below it (forward) or
its first row's hand-over values to the band above (backward) through a boundary buffer.

Values travel as float64 *bits* in an int64 buffer pre-filled with ``SENTINEL``, a
signalling-NaN pattern that arithmetic never produces (a NaN result is a quiet NaN, and +inf is
written as +inf), so each value says by itself whether it has been written: no progress
counter, no fence, no barrier between producer and consumer.  The publishing lane stores each
step's value with a plain (predicated) store, which writes through to L2 (an atomic exchange
per step measured ~2x slower, its return value serialising the producer); the consumer reads a
group of ``G`` columns at a time, one group ahead, with ``ld.relaxed.gpu`` loads (L2, never a
stale L1 line) and a warp vote, so neither side waits on a counter.  On the H200 the band below
trails the band above by 37-46 steps (per-block timer stamps), the minimum being 32.

(A *quiet* form, publishing a group at a time from shared memory and reading by atomics, was
the faster one on early kernels at few blocks per SM; from 16 blocks up the per-step stores
won on the current kernels, and they were taken everywhere.)

Blocks take a *ticket* from an atomic counter (the boundary buffer's last element) and derive
their (band, pair) from it, so a block only ever waits for blocks that started before it: no
deadlock whatever order the hardware schedules blocks in, and the CUDA simulator (which runs
blocks one at a time) works too.
"""

from __future__ import annotations

from numba import cuda

from sdtw.cuda.kernels.geometry import SENTINEL, G
from sdtw.cuda.kernels.jit import device
from sdtw.cuda.kernels.primitives import any_lane, from_bits, poll, sync_band


@device
def take_ticket(hand, tk):
    """This block's ticket: the boundary buffer's last element counts up from ``SENTINEL``."""
    if cuda.threadIdx.x == 0:
        tk[0] = cuda.atomic.add(hand, hand.shape[0] - 1, 1) - SENTINEL
    cuda.syncthreads()
    return tk[0]


@device
def handoff(hand, row, col0, limit, pref, grp, empty, has):
    """Take one group of the neighbouring band's boundary values into ``grp`` and prefetch the
    next.

    Lanes ``0 .. G - 1`` hold in ``pref`` the bits of columns ``col0 + lane`` of the boundary
    row that starts at flat index ``row`` of ``hand`` (read one group earlier; columns
    ``>= limit`` do not exist and read as ``empty``, and so does the whole group unless
    ``has``: a band at the table's edge calls this too, with ``row`` any valid row, so that the
    calls need no branch).  Wait until all are written (re-reading the missing ones), store
    them in the shared array ``grp`` for the group's steps, and return the bits of each lane's
    column in the next group, read now so that the read's latency overlaps this group's steps.
    The prefetch is issued after the last barrier, which therefore never waits for it, and by
    every lane, without a branch: lanes ``>= G`` read columns further on and columns past the
    row read its padding column ``limit`` (both ignored).  Issued under ``if``, the read's
    result was moved into ``pref``'s register inside the branch, so the warp waited for the L2
    round trip right there, once per group: about 20% of a band's time (the forward of
    2 bands x 8192 columns took 1.62 ms that way, 1.15 ms this way).  A value carried around a
    loop can get the same move, so the kernels call this four times per chunk in straight-line
    code, the result of one call going to the next.
    """
    tid = cuda.threadIdx.x
    col = col0 + tid
    mine = has & (tid < G) & (col < limit)
    while any_lane(mine & (pref == SENTINEL)):
        if mine & (pref == SENTINEL):
            pref = poll(hand, row + col)
    sync_band()  # every lane is done with the previous group
    if tid < G:
        grp[tid] = from_bits(pref) if mine else empty
    sync_band()
    return poll(hand, row + min(col + G, limit))
