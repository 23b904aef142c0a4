"""Input checks and cost matrices shared by the baselines.

Every baseline takes ``x (B, N, D)`` and ``y (B, M, D)`` and, except the fused paper mode,
feeds a squared-Euclidean cost ``(B, N, M)`` computed by torch into its DP.  Two ways of
computing that cost are used by the designs we reproduce:

* :func:`sqeuclidean` -- the matrix-product form
  :math:`C_{ij} = \\|x_i\\|^2 + \\|y_j\\|^2 - 2 x_i \\cdot y_j`, clamped at 0.  Memory
  ``O(B N M)``; in float32 it loses absolute accuracy of order
  :math:`\\varepsilon (\\|x_i\\|^2 + \\|y_j\\|^2)` when ``x_i`` and ``y_j`` are close (and
  under TF32 matmul, if the user enabled it, much more).
* :func:`sqeuclidean_broadcast` -- Maghoumi's form
  :math:`\\sum_d (x_{id} - y_{jd})^2` through a broadcast ``(B, N, M, D)`` tensor: exact to
  rounding, but ``D`` times the memory (and autograd keeps the difference tensor alive).
"""

from __future__ import annotations

import torch

__all__ = ["check_inputs", "sqeuclidean", "sqeuclidean_broadcast"]


def check_inputs(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    gamma: float,
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float64),
) -> None:
    """Validate the common ``loss(x, y, gamma=...)`` arguments; raise naming ``name``."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"{name}: x and y must be torch tensors, got {type(x)} and {type(y)}")
    if x.ndim != 3 or y.ndim != 3:
        raise ValueError(
            f"{name}: x and y must be (B, N, D) and (B, M, D), got shapes "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.shape[0] != y.shape[0] or x.shape[2] != y.shape[2]:
        raise ValueError(
            f"{name}: x (B, N, D) and y (B, M, D) must agree on B and D, got shapes "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    if min(x.shape) < 1 or min(y.shape) < 1:
        raise ValueError(f"{name}: empty input, shapes {tuple(x.shape)} and {tuple(y.shape)}")
    if x.dtype != y.dtype or x.dtype not in dtypes:
        raise TypeError(
            f"{name}: x and y must share one dtype out of {dtypes}, got {x.dtype} and {y.dtype}"
        )
    if x.device != y.device:
        raise ValueError(f"{name}: x and y are on different devices ({x.device}, {y.device})")
    if not gamma > 0:
        raise ValueError(f"{name}: gamma must be > 0, got {gamma}")


def sqeuclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared-Euclidean cost (B, N, M) by one batched matrix product, clamped at 0."""
    x2 = (x * x).sum(-1)[:, :, None]
    y2 = (y * y).sum(-1)[:, None, :]
    return torch.baddbmm(x2 + y2, x, y.transpose(1, 2), alpha=-2).clamp_min(0)


def sqeuclidean_broadcast(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared-Euclidean cost (B, N, M) through a broadcast (B, N, M, D) difference tensor."""
    return ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
