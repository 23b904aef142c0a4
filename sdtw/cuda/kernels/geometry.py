"""Index geometry of the band wavefront: tile sizes, the shared ring, the park's tiles.

A pair's (N, M) table is cut into *bands* of ``TB`` rows, one thread block each; a band's
columns are staged ``TW`` at a time (a *chunk*) into a shared *ring* of ``RING`` slots per
row, row ``r`` keeping column ``j`` in slot ``(j + r) % RING`` (the step's slot, the same for
every lane of a step).  Rows of the ring are padded to ``RING1`` entries so that the lanes'
same-slot accesses fall in distinct banks.
"""

from __future__ import annotations

import math

from numba import uint32

TB = 32  # rows per band = threads per block (one warp)
TW = 32  # columns per chunk (published / staged together); TW == TB is assumed below
DC = 16  # features staged per pass of the fused distances
TB1 = TB + 2  # padded row (few bank conflicts on column writes; even, so 16-byte row pairs)
TW1 = TW + 1
RING = 2 * TW  # ring of staged columns (two chunks)
RING1 = RING + 1  # padded ring row (lanes' same-slot accesses in distinct banks)
PO1 = TB * RING1  # size of one plane of a staged block (flat; the backward's second at PO1)
PO2 = 2 * PO1
PUBS = RING + TB  # a publishing ring and a spare slot per lane (see the steps)
RMASK = uint32(RING - 1)
G = 8  # boundary values handed between bands per group (TW a multiple; steps unrolled for 8)

INF = math.inf
#: Stands in for ``min(r_diag, r_left)`` where both are ``+inf`` (see
#: :mod:`sdtw.cuda.kernels.recurrence`).
BIG = 1e300
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)

# Boundary rows between bands travel as float64 *bits* in an int64 buffer pre-filled with
# ``SENTINEL``, a signalling-NaN pattern that arithmetic never produces (a NaN result is a quiet
# NaN, and +inf is written as +inf), so each value says by itself whether it has been written
# (see :mod:`sdtw.cuda.kernels.handoff`).
SENTINEL = 0x7FF00000DEAD0001

# The in-sweep gradients' tiles of E (see :mod:`sdtw.cuda.kernels.sweep`).
TS = TB + 4  # tile row stride: the g_x fragment loads conflict-free, the g_y ones 2-way
TT = TB * TS  # one tile
TT2 = 2 * TT  # the two tiles (by chunk parity)
TB2 = 2 * TB
#: The gradient warp's variants by feature tiles of 8 (``D <= 8 nt``): up to ``D = 16``, where
#: the in-sweep gradients are the faster form (:func:`sdtw.cuda.policy.sweep_grads`).
SWEEP_TILES = (1, 2)
SWEEP_MAX_D = 8 * SWEEP_TILES[-1]

# The park kernel's tiles (see :mod:`sdtw.cuda.kernels.park`).
PS = 64  # rows (and columns) per tile
PARK_THREADS = 128  # 4 warps; (= 2 PS: one norm per thread)


def sweep_tiles(D: int) -> int:
    """The in-sweep gradients' variant (:data:`SWEEP_TILES`) for ``D <= SWEEP_MAX_D``
    features: the fewest feature tiles of 8 that hold them."""
    nt = (D + 7) // 8
    return next(n for n in SWEEP_TILES if n >= nt)


def threads(mover: bool) -> int:
    """Threads per block of a DP kernel: one warp, or three with a mover (see
    :mod:`sdtw.cuda.kernels.forward`)."""
    return 3 * TB if mover else TB
