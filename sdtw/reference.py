"""Float64 reference soft-DTW: the oracle every other path is tested against.

Written for clarity, not speed: two explicit loops over the cells, vectorised only over the
batch.  It follows Cuturi & Blondel (ICML 2017) literally:

Forward (their Algorithm 1), with ``R`` padded so that ``R[:, i + 1, j + 1]`` is cell ``(i, j)``:

.. math::

    R_{0,0} = 0,\\quad R_{i,0} = R_{0,j} = +\\infty,\\quad
    R_{i,j} = C_{i,j} + \\operatorname{softmin}_\\gamma(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}),

    \\operatorname{softmin}_\\gamma(a) = -\\gamma \\log \\sum_k e^{-a_k/\\gamma}.

Backward (their Algorithm 2): the expected alignment ``E = dR_{N,M} / dC`` from

.. math::

    E_{i,j} = \\sum_{(i',j') \\in \\{(i+1,j), (i,j+1), (i+1,j+1)\\}}
              E_{i',j'} \\exp\\big((R_{i',j'} - R_{i,j} - C_{i',j'})/\\gamma\\big).

This is deliberately the published form (it subtracts ``R_{i',j'} - C_{i',j'}``), which is fine
in float64; the fast paths use a different, cancellation-free form, so the two are independent
checks of each other.  Cells outside the Sakoe-Chiba band have ``R = +inf`` and ``E = 0``.
"""

from __future__ import annotations

import numpy as np
import torch

from sdtw.band import sakoe_chiba_mask

__all__ = ["reference_backward", "reference_forward", "softdtw_reference"]


def _softmin3(a: np.ndarray, b: np.ndarray, c: np.ndarray, gamma: float) -> np.ndarray:
    """Soft minimum of three arrays, stable; ``+inf`` where all three are ``+inf``, NaN where
    one is NaN; ``-inf`` where one is ``-inf``, NaN where two are (``-inf - -inf``): as the
    fast backends' float arithmetic gives it."""
    rmin = np.minimum(np.minimum(a, b), c)  # (NaN where one is NaN)
    finite = np.isfinite(rmin)
    safe = np.where(finite, rmin, 0.0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.exp(-(a - safe) / gamma) + np.exp(-(b - safe) / gamma) + np.exp(-(c - safe) / gamma)
        out = safe - gamma * np.log(s)
    minus = np.isneginf(a).astype(int) + np.isneginf(b) + np.isneginf(c)
    special = np.where(np.isposinf(rmin), np.inf, np.where(minus == 1, -np.inf, np.nan))
    return np.where(finite, out, np.where(np.isnan(rmin), np.nan, special))


def reference_forward(cost: np.ndarray, gamma: float, bandwidth: int | None = None) -> np.ndarray:
    """Forward DP.

    Parameters
    ----------
    cost : ndarray, shape (B, N, M)
        Any cost matrix, converted to float64.
    gamma : float
        Smoothing, > 0.
    bandwidth : int or None
        Sakoe-Chiba radius (``None`` or ``<= 0``: no band).

    Returns
    -------
    R : ndarray, shape (B, N + 2, M + 2)
        Padded DP table; the loss is ``R[:, N, M]``.  Row/column ``N + 1``/``M + 1`` are
        scratch for the backward pass (``+inf`` here; the backward sets its own copy).
    """
    cost = np.asarray(cost, dtype=np.float64)
    B, N, M = cost.shape
    mask = sakoe_chiba_mask(N, M, bandwidth)
    R = np.full((B, N + 2, M + 2), np.inf)
    R[:, 0, 0] = 0.0
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            if not mask[i - 1, j - 1]:
                continue
            R[:, i, j] = cost[:, i - 1, j - 1] + _softmin3(
                R[:, i - 1, j - 1], R[:, i - 1, j], R[:, i, j - 1], gamma
            )
    return R


def reference_backward(
    cost: np.ndarray, R: np.ndarray, gamma: float, bandwidth: int | None = None
) -> np.ndarray:
    """Backward DP (Algorithm 2): expected alignment ``E``, shape (B, N, M), float64."""
    cost = np.asarray(cost, dtype=np.float64)
    B, N, M = cost.shape
    mask = sakoe_chiba_mask(N, M, bandwidth)
    C = np.zeros((B, N + 2, M + 2))
    C[:, 1 : N + 1, 1 : M + 1] = cost
    R = R.copy()
    R[:, 1 : N + 1, M + 1] = -np.inf
    R[:, N + 1, 1 : M + 1] = -np.inf
    R[:, N + 1, M + 1] = R[:, N, M]
    E = np.zeros((B, N + 2, M + 2))
    E[:, N + 1, M + 1] = 1.0

    def weight(ii: int, jj: int, i: int, j: int) -> np.ndarray:
        # A successor outside the band (R = +inf) never chose (i, j): weight 0.
        succ = R[:, ii, jj]
        with np.errstate(invalid="ignore", over="ignore"):
            w = np.exp((succ - R[:, i, j] - C[:, ii, jj]) / gamma)
        return np.where(np.isposinf(succ), 0.0, w)

    for j in range(M, 0, -1):
        for i in range(N, 0, -1):
            if not mask[i - 1, j - 1]:
                continue
            E[:, i, j] = (
                weight(i + 1, j, i, j) * E[:, i + 1, j]
                + weight(i, j + 1, i, j) * E[:, i, j + 1]
                + weight(i + 1, j + 1, i, j) * E[:, i + 1, j + 1]
            )
    return E[:, 1 : N + 1, 1 : M + 1]


class _ReferenceSoftDTW(torch.autograd.Function):
    """Autograd wrapper: cost (B, N, M) -> loss (B,), gradient ``E * grad_out``."""

    @staticmethod
    def forward(ctx, cost: torch.Tensor, gamma: float, bandwidth: int | None) -> torch.Tensor:
        c = cost.detach().to("cpu", torch.float64).numpy()
        R = reference_forward(c, gamma, bandwidth)
        N, M = c.shape[1:]
        if cost.requires_grad:
            ctx.save_for_backward(torch.from_numpy(R))
            ctx.cost = c
            ctx.gamma, ctx.bandwidth = gamma, bandwidth
        return torch.from_numpy(R[:, N, M].copy()).to(cost.device, cost.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (R,) = ctx.saved_tensors
        E = reference_backward(ctx.cost, R.numpy(), ctx.gamma, ctx.bandwidth)
        g = grad_out.detach().to("cpu", torch.float64).numpy()
        grad = torch.from_numpy(E * g[:, None, None]).to(grad_out.device, grad_out.dtype)
        return grad, None, None


def softdtw_reference(
    cost: torch.Tensor, gamma: float = 1.0, bandwidth: int | None = None
) -> torch.Tensor:
    """Differentiable float64 reference soft-DTW of a cost tensor (B, N, M) -> (B,).

    No validation: this is the oracle, called by tests and by ``backend="reference"`` after
    the public entry has validated its inputs.
    """
    return _ReferenceSoftDTW.apply(cost, float(gamma), bandwidth)
