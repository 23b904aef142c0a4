"""The measures of the all-pairs entries (``measure=`` of :func:`sdtw.cdist`, :func:`sdtw.knn`,
:func:`sdtw.alignment` and the estimators), by name: each name's settings validated into the
engine's :class:`~sdtw.engine.Options` and the :class:`~sdtw.engine.Recurrence` to plan with.

===========  ====================================================================
measure      recurrence
===========  ====================================================================
"softdtw"    soft-DTW over the cost ``dist`` (exact DTW at ``gamma=0``, the
             planner's choice)
"softmsm"    Soft-MSM (:func:`sdtw.soft_msm`), stiffness ``c``; ``gamma > 0`` and
             the default ``dist`` (its match cost is the squared difference)
===========  ====================================================================

The entries never branch on the measure: they plan every call with the recurrence returned
here (:func:`sdtw.engine.plan_pairs`), and the engine runs it as any other.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtw import _validation as V
from sdtw.engine import SOFTDTW, Options, Recurrence
from sdtw.msm import soft_msm_settings

__all__ = ["MEASURES", "measure_settings"]


def _softdtw(*, gamma, bandwidth, dist, backend, c) -> tuple[Options, Recurrence]:
    opts = Options.make(gamma=gamma, bandwidth=bandwidth, normalize=False, dist=dist,
                        fused=None, backend=backend)  # fmt: skip
    return opts, SOFTDTW


def _softmsm(*, gamma, bandwidth, dist, backend, c) -> tuple[Options, Recurrence]:
    if V.check_dist(dist) != "sqeuclidean":
        raise ValueError(
            "dist applies to measure='softdtw'; measure='softmsm' has its own costs (the "
            f"squared difference and the split/merge costs): leave dist at its default, got "
            f"dist={dist!r}"
        )
    return soft_msm_settings(c=c, gamma=gamma, normalize=False, bandwidth=bandwidth,
                             backend=backend)  # fmt: skip


_SETTINGS = {"softdtw": _softdtw, "softmsm": _softmsm}
#: The measures by name (``measure=``).
MEASURES = tuple(_SETTINGS)


def measure_settings(
    measure: object,
    *,
    gamma: float,
    bandwidth: float | None,
    dist: str | Callable = "sqeuclidean",
    backend: str = "auto",
    c: float = 1.0,
) -> tuple[Options, Recurrence]:
    """The validated options (``normalize=False``: the all-pairs entries take the divergence's
    terms themselves) and the recurrence of ``measure``; each error names its argument.
    ``c`` is read by ``"softmsm"`` only."""
    if not isinstance(measure, str) or measure not in _SETTINGS:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    return _SETTINGS[measure](gamma=gamma, bandwidth=bandwidth, dist=dist, backend=backend, c=c)
