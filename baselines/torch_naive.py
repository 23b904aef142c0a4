"""Baseline "torch": soft-DTW in plain PyTorch, differentiated by autograd.

What a user writes in an afternoon: the forward DP vectorised along anti-diagonals with torch
ops, and ``loss.backward()`` left to autograd.  Runs wherever torch runs (CPU, CUDA), any
``N``, ``M``, float32 or float64.

Design reproduced
-----------------
* Cost by one batched matrix product, :math:`\\|x_i\\|^2 + \\|y_j\\|^2 - 2 x_i \\cdot y_j` clamped
  at 0 (:func:`baselines._common.sqeuclidean`).
* The cost is gathered once into anti-diagonal-major order, (B, N + M + 1, N + 1), so that
  diagonal ``p`` of the padded table (cells ``i + j = p``, indexed by ``i``) is a contiguous
  slice.  Then for ``p = 2 .. N + M``, with all three neighbours read from the two previous
  diagonals,

  .. math::

      R^{(p)}_i = C_{i, p - i} + \\operatorname{softmin}_\\gamma\\big(
          R^{(p-2)}_{i-1}, R^{(p-1)}_{i-1}, R^{(p-1)}_{i}\\big),

  ``softmin`` being ``-gamma * logsumexp(-a / gamma)``.  Each diagonal is a new tensor (no
  in-place writes, which autograd would reject), so autograd records ``N + M - 1`` small steps
  and differentiates through all of them.
* Cells outside ``[1, N] x [1, M]`` or outside the band are ``+inf``.  Their softmin inputs are
  replaced by zeros *before* ``logsumexp`` so that its backward never sees an all-``-inf``
  row (which would give ``nan`` gradients even behind a ``torch.where``).

Limits
------
* ``N + M - 1`` sequential steps of ~10 small torch kernels each, forward and again backward:
  launch-bound on a GPU at every size.
* Autograd keeps every intermediate of every step: memory ``O(B (N + M) N)`` for the diagonals
  plus the logsumexp inputs and outputs, several times the size of ``R``.

Where it is numerically unsound
-------------------------------
Less than the CUDA designs, but not sound in float32.  Autograd differentiates each softmin as
it was computed: logsumexp's backward forms the weights ``exp(z_k - lse)`` from that step's own
inputs ``z_k = -R_k / gamma`` and output ``lse``, and never recovers them as
``(R[i', j'] - R[i, j] - C[i', j']) / gamma`` from stored tables, so it escapes the
cancellation that ruins Algorithm 2 in float32 (random ``randn`` inputs, N = M = 256, D = 64,
``R`` ~ 3e4: relative gradient error 3e-4 at gamma 1 and ~5e-8 at gamma 0.01 and 0.001,
where the paper's design is off by 1e-2 to 0.3 already at N = 32).  What remains: ``lse`` is
rounded to the input dtype, an absolute error of about ``6e-8 |R| / gamma``, invisible when one
predecessor dominates (its weight is then exactly 1) but not when several lie within ~gamma of
each other.  A long flat stretch of near-ties after a large accumulated ``R`` (``R`` ~ 4e6,
gamma 0.1) gives gradients wrong by a factor ~1e4 in float32 -- as wrong as the CUDA designs
there.  In float64 it is accurate.
"""

from __future__ import annotations

import math

import torch

from baselines._common import check_inputs, sqeuclidean
from sdtw.band import band_offsets

__all__ = ["loss"]


def _diagonal_layout(
    N: int, M: int, bandwidth: int | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index maps of the anti-diagonal layout, each (N + M + 1, N + 1).

    Entry ``[p, i]`` is padded cell ``(i, p - i)``; returns the 0-based cost row and column
    (clamped into range) and whether the cell is a real, in-band cell.
    """
    i = torch.arange(N + 1, device=device)[None, :]
    j = torch.arange(N + M + 1, device=device)[:, None] - i
    lo, hi = band_offsets(N, M, bandwidth)
    valid = (i >= 1) & (j >= 1) & (j <= M) & (j - i >= -lo) & (j - i <= hi)
    return (i - 1).clamp(0, N - 1).expand_as(j), (j - 1).clamp(0, M - 1), valid


def loss(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: int | None = None,
) -> torch.Tensor:
    """Soft-DTW with squared-Euclidean cost, plain PyTorch + autograd.

    Parameters
    ----------
    x : Tensor, shape (B, N, D)
    y : Tensor, shape (B, M, D)
        Any device, float32 or float64; gradients flow to both.
    gamma : float
        Smoothing, > 0.
    bandwidth : int or None
        Sakoe-Chiba radius (see :mod:`sdtw.band`); ``None``: no band.

    Returns
    -------
    Tensor, shape (B,)
        Soft-DTW losses, in the input dtype.
    """
    check_inputs("torch", x, y, gamma)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    cost = sqeuclidean(x, y)
    rows, cols, valid = _diagonal_layout(N, M, bandwidth, x.device)
    # One gather, one unbind: autograd then scatters the whole diagonal-major gradient back in
    # one step, instead of one full-size (B, N, M) scatter per diagonal.
    cost_diagonals = cost[:, rows, cols].unbind(1)

    inf = torch.full((B, 1), math.inf, dtype=x.dtype, device=x.device)
    # Diagonals 0 and 1 of the padded table: R[0, 0] = 0, the rest of the border +inf.
    prev2 = torch.cat([torch.zeros_like(inf), inf.expand(B, N)], dim=1)
    prev1 = inf.expand(B, N + 1)
    for p in range(2, N + M + 1):
        ok = valid[p, 1:]
        neighbours = torch.stack([prev2[:, :-1], prev1[:, :-1], prev1[:, 1:]])
        neighbours = torch.where(ok, neighbours, 0)
        softmin = -gamma * torch.logsumexp(-neighbours / gamma, dim=0)
        cells = torch.where(ok, cost_diagonals[p][:, 1:] + softmin, math.inf)
        prev2, prev1 = prev1, torch.cat([inf, cells], dim=1)
    return prev1[:, N]
