"""Baseline "reference": the float64 oracle on a float64 squared-Euclidean cost.

Wraps :func:`sdtw.reference.softdtw_reference` (Cuturi & Blondel's Algorithms 1 and 2, float64,
explicit loops over the cells, vectorised over the batch only) behind the common
``loss(x, y, gamma=...)`` interface, so that benchmarks and tests measure every other baseline
against it.

Design
------
* The cost is formed in float64 from float64 copies of the inputs as
  :math:`\\sum_d (x_{id} - y_{jd})^2` (broadcast difference, no cancellation), on the inputs'
  device; the DP runs on the CPU in NumPy.
* The loss is returned in **float64** whatever the input dtype, so that error measurements are
  not rounded by the oracle; gradients reach ``x`` and ``y`` in their own dtype (pass float64
  inputs to measure gradient errors).

Limits
------
* Slow: a Python loop over all ``N M`` cells forward and backward (seconds at N = M = 512);
  meant for correctness checks, not timing.
* The broadcast cost needs ``8 B N M D`` bytes.

Numerics
--------
Sound: float64 throughout, and the backward's cancellation ``R[i', j'] - R[i, j] - C[i', j']``
costs ~1e-16 ``|R| / gamma``, negligible until ``|R| / gamma`` ~ 1e12.
"""

from __future__ import annotations

import torch

from baselines._common import check_inputs, sqeuclidean_broadcast
from sdtw.reference import softdtw_reference

__all__ = ["loss"]


def loss(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: int | None = None,
) -> torch.Tensor:
    """Float64 reference soft-DTW with squared-Euclidean cost.

    Parameters
    ----------
    x : Tensor, shape (B, N, D)
    y : Tensor, shape (B, M, D)
        Any device, any floating dtype; gradients flow to both.
    gamma : float
        Smoothing, > 0.
    bandwidth : int or None
        Sakoe-Chiba radius (see :mod:`sdtw.band`); ``None``: no band.

    Returns
    -------
    Tensor, shape (B,), float64
    """
    check_inputs(
        "reference",
        x,
        y,
        gamma,
        dtypes=(torch.float16, torch.bfloat16, torch.float32, torch.float64),
    )
    cost = sqeuclidean_broadcast(x.to(torch.float64), y.to(torch.float64))
    return softdtw_reference(cost, gamma, bandwidth)
