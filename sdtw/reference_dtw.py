"""Float64 reference exact DTW (``gamma = 0``): the oracle of the ``"dtw"`` recurrence.

Written for clarity, as :mod:`sdtw.reference`: loops over the cells, vectorised over the batch.
Soft-DTW's ``gamma -> 0`` limit, a min-plus programme with no exp or log:

.. math::

    R_{0,0} = 0,\\quad R_{i,0} = R_{0,j} = +\\infty,\\quad
    R_{i,j} = C_{i,j} + \\min(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}).

The value ``R_{N,M}`` is the least cost ``<A, C>`` over monotone alignments ``A``.  Its
gradient wrt ``C`` is the indicator ``E`` of the optimal alignment (where that alignment is
unique; with ties it is a subgradient: the indicator of one optimal alignment).  ``E`` is found
by backtracking from ``(N, M)``: each cell of the path steps to its predecessor of least ``R``,
ties broken in a fixed order, the same on every backend (:data:`TIE_ORDER`): the diagonal
``(i-1, j-1)`` first, then up ``(i-1, j)``, then left ``(i, j-1)``.  A pair whose value is not
finite (no finite path, or NaN in the band) gets ``E = 0``.

The min propagates NaN (as ``np.minimum``): NaN in a cell inside the band makes the pair NaN,
as soft-DTW's does.  Cells outside the Sakoe-Chiba band hold ``+inf``.
"""

from __future__ import annotations

import numpy as np

from sdtw.band import sakoe_chiba_mask

__all__ = ["TIE_ORDER", "dtw_backward", "dtw_forward"]

#: The predecessor a backtracking step takes among those of least R: the first in this order.
TIE_ORDER = ("diagonal", "up", "left")


def dtw_forward(cost: np.ndarray, gamma: float = 0.0, bandwidth: float | None = None):
    """Forward DP of exact DTW.

    Parameters
    ----------
    cost : ndarray, shape (B, N, M)
        Any cost, converted to float64.
    gamma : float
        Ignored (0: the recurrence's signature is soft-DTW's).
    bandwidth : float or None
        Sakoe-Chiba radius (:func:`sdtw.band.band_offsets`).

    Returns
    -------
    R : ndarray, shape (B, N + 2, M + 2)
        Padded table, ``R[:, i + 1, j + 1]`` cell ``(i, j)``; the value is ``R[:, N, M]``.
    """
    cost = np.asarray(cost, dtype=np.float64)
    B, N, M = cost.shape
    mask = sakoe_chiba_mask(N, M, bandwidth)
    R = np.full((B, N + 2, M + 2), np.inf)
    R[:, 0, 0] = 0.0
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            if mask[i - 1, j - 1]:
                best = np.minimum(np.minimum(R[:, i - 1, j - 1], R[:, i - 1, j]), R[:, i, j - 1])
                R[:, i, j] = cost[:, i - 1, j - 1] + best
    return R


def dtw_backward(
    cost: np.ndarray, R: np.ndarray, gamma: float = 0.0, bandwidth: float | None = None
) -> np.ndarray:
    """The optimal alignment's indicator ``E`` (B, N, M), float64, by backtracking through
    ``R`` from :func:`dtw_forward` (ties: :data:`TIE_ORDER`; ``cost``, ``gamma`` and
    ``bandwidth`` unused: the band is in ``R``)."""
    B, N, M = np.shape(cost)
    E = np.zeros((B, N, M))
    for b in range(B):
        if not np.isfinite(R[b, N, M]):
            continue
        i, j = N - 1, M - 1
        while True:
            E[b, i, j] = 1.0
            if i == 0 and j == 0:
                break
            diag, up, left = R[b, i, j], R[b, i, j + 1], R[b, i + 1, j]
            if diag <= up and diag <= left:
                i, j = i - 1, j - 1
            elif up <= left:
                i -= 1
            else:
                j -= 1
    return E
