"""Numba CUDA kernels for soft-DTW: a pipelined band wavefront.

Design
------
The (N, M) table of a pair is cut into *bands* of ``TB`` = 32 rows.  One thread block (one warp,
or three with a mover) owns one band, lane ``t`` owns row ``i0 + t``, and the warp sweeps the
band's columns as a skewed wavefront: at step ``s`` lane ``t`` computes column ``s - t``.  The
three DP neighbours come from the lane itself (left), from lane ``t - 1`` one step earlier (up)
and two steps earlier (diagonal), passed by a warp shuffle.

The step is what bounds the speed (one band's steps are a chain of dependent soft-mins), so it
is kept short:

* the DP runs in scaled base-2 units (``R log2(e) / gamma``), so the exponentials and the
  logarithm are the bare ``ex2``/``lg2``/``rcp`` instructions (inline PTX, flush-to-zero: no
  denormal fix-ups) with no multiply by ``1 / gamma`` on the chain;
* only the upper neighbour (the shuffled value) is on the chain: the sum of exponentials is
  taken relative to the smaller of the other two, whose terms are formed while the upper value
  travels, so one ``ex2``, one add and one ``lg2`` wait for it; an unreachable cell (all three
  ``+inf``) needs no branch (:mod:`~sdtw.cuda.kernels.recurrence`);
* steps are unrolled by hand in groups of ``G`` = 8, and row ``r`` keeps column ``j`` in ring
  slot ``(j + r) % 64`` (``= s % 64``, the same for every lane at a step), so a group's shared
  memory accesses are one base register plus constant offsets;
* invalid cells (band, table edges) select ``+inf`` and zero weights: no divergent branch.

Costs (or fused distances) are staged ``TW`` = 32 columns (a *chunk*) at a time into the
64-column ring; the weights go out coalesced one chunk later.  The one-warp kernels load the
next chunk into registers while the current chunk's steps run; the *mover* variants give that
staging and write-out a warp of its own (:mod:`~sdtw.cuda.kernels.forward`).  The squared
Euclidean distances of the fused path come from a tiled product on the float64 tensor cores:
with gradients, the park kernel puts each cell's float64 distance in the weights buffer ``P``
that the backward needs anyway (:mod:`~sdtw.cuda.kernels.park`), and the DP reads them from
there like a cost, overwriting each with its weights; without gradients, the forward computes
them itself (:mod:`~sdtw.cuda.kernels.distances`), with no (N, M) buffer at all.

Each band's last row goes to the band below through a boundary buffer of float64 bits that say
by themselves whether they have been written (:mod:`~sdtw.cuda.kernels.handoff`); blocks take
their band from a ticket counter, so a block only waits for blocks that started before it.  One
launch does the whole forward (two when fused with gradients: the park kernel first), one the
whole backward: launches per step are O(1), not O(N + M).

Accuracy
--------
The backward never forms ``(R[i+1, j] - R[i, j] - C[i+1, j]) / gamma`` (the published form,
which cancels catastrophically in float32 when ``R`` is large).  The forward stores, per cell,
the soft-min *weights* of its three predecessors

.. math::  p_k = e^{-(r_k - m)/\\gamma} \\big/ \\textstyle\\sum_l e^{-(r_l - m)/\\gamma},
           \\quad m = \\min_l r_l,

computed from *differences of neighbouring R values in float64*, and the backward is the pure
linear recursion ``E[p] = sum_s E[s] p_s(p)`` over successors ``s``
(:mod:`~sdtw.cuda.kernels.backward`).  All DP arithmetic is float64 whatever the input dtype
(Hopper runs float64 at half the float32 rate); only the stored weights take the input's
precision (float32 weights have relative error 6e-8).  The fused distances are float64 whatever
the input dtype: ``|x|^2 + |y|^2 - 2 x.y`` with float64 norms.  An unfused cost keeps the
caller's precision: a float32 cost has rounding errors of ~1e-7 of ``|x|^2 + |y|^2``, which the
weights see divided by gamma (gradients typically within ~1e-5 of the float64 result from x and
y, but up to ~1e-3 where two paths are tied to within that rounding at gamma = 1e-3).

Memory
------
``P`` (B, 2, N, M) holds (p_diag, p_up); p_left = 1 - p_diag - p_up.  The backward overwrites
plane 1 with ``E`` in place, so ``E = P[:, 1]`` needs no extra buffer; it also returns E's row
and column sums (B, N + M) when asked.  Boundary buffers are (B, ceil(N/TB), M + 1) int64
(float64 bits; column ``M`` is padding), flattened, plus the ticket counter.  The checkpointed
mode stores no ``P``: its forward keeps its boundary rows and column checkpoints, about
``N M / 2`` bytes per pair (:mod:`~sdtw.cuda.kernels.recompute`).

Layout
------
=========================================  ==================================================
module                                     role
=========================================  ==================================================
:mod:`~sdtw.cuda.kernels.geometry`         tile sizes, the ring, constants
:mod:`~sdtw.cuda.kernels.jit`              the ``device``/``kernel`` decorators, simulator flag
:mod:`~sdtw.cuda.kernels.ptx`              inline-PTX intrinsics (GPU)
:mod:`~sdtw.cuda.kernels.sim`              their simulator twins
:mod:`~sdtw.cuda.kernels.primitives`       the one place that picks a primitive or its twin
:mod:`~sdtw.cuda.kernels.staging`          global memory <-> the shared ring
:mod:`~sdtw.cuda.kernels.recurrence`       the cell update (the seam for other recurrences)
:mod:`~sdtw.cuda.kernels.handoff`          the hand-over between bands
:mod:`~sdtw.cuda.kernels.distances`        fused distances inside the forward
:mod:`~sdtw.cuda.kernels.forward`          the forward kernel
:mod:`~sdtw.cuda.kernels.sweep`            the backward's in-sweep gradients
:mod:`~sdtw.cuda.kernels.backward`         the backward kernel
:mod:`~sdtw.cuda.kernels.recompute`        the checkpointed backward (``memory="checkpoint"``)
:mod:`~sdtw.cuda.kernels.park`             the park kernel (distances into ``P`` or a cost)
:mod:`~sdtw.cuda.kernels.specs`            variants as frozen specs
:mod:`~sdtw.cuda.kernels.registry`         spec -> compiled kernel, on-disk cache
=========================================  ==================================================
"""

from __future__ import annotations

# (Light imports only: :mod:`sdtw.cuda.policy` reads the specs and the geometry without
# numba-cuda; :mod:`~sdtw.cuda.kernels.registry` and the kernels need it.)
from sdtw.cuda.kernels.geometry import PARK_THREADS, PS, SENTINEL, TB, sweep_tiles, threads
from sdtw.cuda.kernels.specs import (
    COST,
    FUSED,
    HILO,
    SPLIT,
    TILED,
    BackwardSpec,
    ForwardSpec,
    ParkSpec,
    RecomputeSpec,
)

__all__ = [
    "COST",
    "FUSED",
    "HILO",
    "PARK_THREADS",
    "PS",
    "SENTINEL",
    "SPLIT",
    "TB",
    "TILED",
    "BackwardSpec",
    "ForwardSpec",
    "ParkSpec",
    "RecomputeSpec",
    "sweep_tiles",
    "threads",
]
