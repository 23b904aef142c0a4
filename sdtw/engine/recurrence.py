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
from dataclasses import dataclass, replace

from sdtw.msm_reference import soft_msm_alignment, soft_msm_backward, soft_msm_forward
from sdtw.reference import reference_backward, reference_forward
from sdtw.reference_dtw import dtw_backward, dtw_forward

__all__ = ["DTW", "RECURRENCES", "SOFTDTW", "SOFTMSM", "Recurrence"]


@dataclass(frozen=True)
class Recurrence:
    """One measure's dynamic programme, over a cost (B, N, M) or over the sequences themselves.

    ``kind="cost"``: ``oracle_forward(cost, gamma, bandwidth) -> R`` (B, N + 2, M + 2), the
    value at ``R[:, N, M]``; ``oracle_backward(cost, R, gamma, bandwidth) -> E`` (B, N, M).
    ``kind="sequences"`` (a measure whose costs sit on the DP's edges and read the neighbouring
    samples, as Soft-MSM's): ``oracle_forward(x, y, gamma, bandwidth, **params) -> (values,
    state)`` of x (B, N, D), y (B, M, D) and ``oracle_backward(x, y, state, gamma, bandwidth,
    **params) -> (gx, gy)``; backends run it by ``Backend.sequence_value_and_grads``, and its
    expected alignment (:func:`sdtw.alignment`) by ``Backend.sequence_alignment``, whose oracle
    is ``oracle_alignment(x, y, state, gamma, bandwidth, **params) -> A`` (B, N, M).  All are
    the float64 reference, written for clarity (NumPy), that every backend's kernels are tested
    against.  ``params``: the measure's own settings as ``(name, value)`` pairs (part of the
    plan's cache key: a recurrence with other params is another recurrence)."""

    name: str
    summary: str
    oracle_forward: Callable
    oracle_backward: Callable
    kind: str = "cost"
    params: tuple[tuple[str, float], ...] = ()
    oracle_alignment: Callable | None = None

    def with_params(self, **params: float) -> Recurrence:
        """This recurrence with its settings (``SOFTMSM.with_params(c=0.5)``)."""
        return replace(self, params=tuple(sorted(params.items())))

    def param(self, name: str) -> float:
        """One setting's value."""
        return dict(self.params)[name]


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

#: Soft-MSM (Holder & Bagnall, 2026): a recurrence over the sequences, its split and merge
#: costs on the edges reading x_{i-1} and y_{j-1} (:mod:`sdtw.msm_reference`); ``c``, the
#: stiffness, is its one setting.
SOFTMSM = Recurrence(
    name="softmsm",
    summary="Soft-MSM: softmin_gamma of match, split and merge edges (costs from x and y)",
    oracle_forward=soft_msm_forward,
    oracle_backward=soft_msm_backward,
    kind="sequences",
    params=(("c", 1.0),),
    oracle_alignment=soft_msm_alignment,
)

#: The recurrences by name.
RECURRENCES = {r.name: r for r in (SOFTDTW, DTW, SOFTMSM)}
