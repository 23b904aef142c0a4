"""The recurrence seam: a measure is a dynamic programme over a cost, and each backend
instantiates it with kernels of its own.

A :class:`Recurrence` names the measure, states its cell update and the backward that gives
its gradient (the docstrings hold the maths), and points at the float64 oracle of both.  A
backend declares, per recurrence name, the kernels that run it (``Backend.kernels``); the
planner refuses a backend that has none for the call's recurrence, naming what it has.  Adding
a measure is one file with its :class:`Recurrence` and the oracle, plus one kernel entry per
backend that runs it: the front door, the planner and the other backends do not change.

Soft-DTW (Cuturi & Blondel, ICML 2017), the first recurrence:

.. math::

    R_{0,0} = 0,\\quad R_{i,0} = R_{0,j} = +\\infty,\\quad
    R_{i,j} = C_{i,j} + \\operatorname{softmin}_\\gamma(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}),

and its gradient wrt the cost, the expected alignment ``E``, by the backward recursion over
the softmax weights of each cell's choice (:mod:`sdtw.cpu` derives the cancellation-free form
the fast backends use; :mod:`sdtw.reference` keeps the published one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sdtw.reference import reference_backward, reference_forward
from sdtw.reference_dtw import dtw_backward, dtw_forward

__all__ = ["DTW", "RECURRENCES", "SOFTDTW", "Recurrence"]


@dataclass(frozen=True)
class Recurrence:
    """One measure's dynamic programme over a cost (B, N, M).

    ``oracle_forward(cost, gamma, bandwidth) -> R`` (B, N + 2, M + 2), the value at
    ``R[:, N, M]``; ``oracle_backward(cost, R, gamma, bandwidth) -> E`` (B, N, M): the float64
    reference of both, written for clarity (NumPy), that every backend's kernels are tested
    against."""

    name: str
    summary: str
    oracle_forward: Callable[[np.ndarray, float, float | None], np.ndarray]
    oracle_backward: Callable[[np.ndarray, np.ndarray, float, float | None], np.ndarray]


SOFTDTW = Recurrence(
    name="softdtw",
    summary="soft-DTW: C + softmin_gamma of the three predecessors",
    oracle_forward=reference_forward,
    oracle_backward=reference_backward,
)

#: Exact DTW, soft-DTW's gamma -> 0 limit: C + min of the three predecessors, its gradient the
#: optimal path's indicator (ties: diagonal, up, left; :mod:`sdtw.reference_dtw`).  The
#: planner takes it for ``gamma=0``.
DTW = Recurrence(
    name="dtw",
    summary="exact DTW: C + min of the three predecessors (gamma = 0)",
    oracle_forward=dtw_forward,
    oracle_backward=dtw_backward,
)

#: The recurrences by name.
RECURRENCES = {r.name: r for r in (SOFTDTW, DTW)}
