"""The soft alignment itself: the expected alignment matrix E of soft-DTW (or Soft-MSM).

.. math::  E = \\frac{\\partial\\, \\mathrm{sdtw}_\\gamma(C)}{\\partial C}
           = \\mathbb{E}_{p_\\gamma}[A],\\qquad
           p_\\gamma(A) \\propto e^{-\\langle A, C \\rangle / \\gamma},

the average of the monotone alignment matrices A under the Gibbs distribution of their costs:
``E[i, j]`` is the probability that the soft alignment matches ``x_i`` with ``y_j``.  Its rows
and columns each sum to at least 1; as ``gamma -> 0`` it tends to the DTW path (0/1 entries).

Soft-MSM's (``measure="softmsm"``) is the occupancy of its match edges, the gradient of the
value wrt the match costs ``(x_i - y_j)^2``: ``E[i, j]`` is the probability that ``x_i`` is
matched with ``y_j`` (the other moves split or merge; a row or column may sum to less than 1),
``E[0, 0] = 1``; with several channels (each aligned on its own) the channels' mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw import engine, ops
from sdtw.engine import Pairs

__all__ = ["alignment"]


def alignment(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: float | None = None,
    dist: str | Callable = "sqeuclidean",
    backend: str = "auto",
    x_lengths: object = None,
    y_lengths: object = None,
    measure: str = "softdtw",
    c: float = 1.0,
) -> torch.Tensor:
    """The expected alignment matrix E of soft-DTW (or Soft-MSM) between x and y.

    Parameters
    ----------
    x : Tensor, shape (B, N, D) or (N, D)
    y : Tensor, shape (B, M, D) or (M, D)
    gamma, bandwidth, dist, backend, x_lengths, y_lengths
        As in :func:`sdtw.softdtw` (``normalize`` does not apply: the divergence is a
        combination of three alignments).
    measure : {"softdtw", "softmsm"}
        ``"softmsm"``: Soft-MSM's match occupancies (module docstring), stiffness ``c``,
        ``gamma > 0`` and the default ``dist``; on CUDA computed by the CPU backend (warns).
    c : float
        Soft-MSM's stiffness (read by ``measure="softmsm"`` only).

    Returns
    -------
    Tensor, shape (B, N, M), or (N, M) for unbatched inputs; x's dtype, not attached to
    autograd.  ``E[b, i, j]`` in [0, 1]; zero outside the band and past a pair's lengths.
    With ``gamma=0`` (exact DTW) the optimal path's 0/1 indicator, ties broken towards the
    diagonal, then up, then left (:mod:`sdtw.reference_dtw`).
    The same on every backend (the reference's to float64 rounding).
    """
    if ops.traced(x, y):
        raise RuntimeError(
            "sdtw.alignment returns E as data: it computes it eagerly and cannot be traced by "
            "torch.compile / torch.export or run on fake tensors; call it outside the compiled "
            "function, or differentiate softdtw_from_cost (its gradient is E)"
        )
    from sdtw.measures import measure_settings

    x, y, unbatched = V.check_sequences(x, y)
    opts, rec = measure_settings(measure, gamma=gamma, bandwidth=bandwidth, dist=dist,
                                 backend=backend, c=c)  # fmt: skip
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    pairs = Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, x.device))
    with torch.no_grad():
        plan = engine.plan_pairs(opts, x, y, pairs.x_lengths is not None, False, rec)
        E = engine.alignment_matrix(plan, x.detach(), y.detach(), pairs)
    return E[0] if unbatched else E
