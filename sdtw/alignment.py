"""The soft alignment itself: the expected alignment matrix E of soft-DTW.

.. math::  E = \\frac{\\partial\\, \\mathrm{sdtw}_\\gamma(C)}{\\partial C}
           = \\mathbb{E}_{p_\\gamma}[A],\\qquad
           p_\\gamma(A) \\propto e^{-\\langle A, C \\rangle / \\gamma},

the average of the monotone alignment matrices A under the Gibbs distribution of their costs:
``E[i, j]`` is the probability that the soft alignment matches ``x_i`` with ``y_j``.  Its rows
and columns each sum to at least 1; as ``gamma -> 0`` it tends to the DTW path (0/1 entries).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw import engine, ops
from sdtw.engine import Options, Pairs

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
) -> torch.Tensor:
    """The expected alignment matrix E of soft-DTW between x and y.

    Parameters
    ----------
    x : Tensor, shape (B, N, D) or (N, D)
    y : Tensor, shape (B, M, D) or (M, D)
    gamma, bandwidth, dist, backend, x_lengths, y_lengths
        As in :func:`sdtw.softdtw` (``normalize`` does not apply: the divergence is a
        combination of three alignments).

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
    x, y, unbatched = V.check_sequences(x, y)
    opts = Options.make(
        gamma=gamma,
        bandwidth=bandwidth,
        normalize=False,
        dist=dist,
        fused=None,
        backend=backend,
    )
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    pairs = Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, x.device))
    with torch.no_grad():
        plan = engine.plan_pairs(opts, x, y, pairs.x_lengths is not None, False)
        E = engine.alignment_matrix(plan, x.detach(), y.detach(), pairs)
    return E[0] if unbatched else E
