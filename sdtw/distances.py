"""Ground costs between two batches of sequences: (B, N, D) and (B, M, D) -> (B, N, M).

=================  ===================================================  ====================
name               cost ``C[b, i, j]``                                  gradient
=================  ===================================================  ====================
``sqeuclidean``    ``|x_i - y_j|^2`` (one batched matmul, clamped at 0)  its own backward
``euclidean``      ``|x_i - y_j|`` (``torch.cdist``)                    autograd
``l1``             ``sum_d |x_id - y_jd|`` (``torch.cdist``, p = 1)      autograd
=================  ===================================================  ====================

These are what :func:`sdtw.softdtw` builds for ``dist=`` by name on the unfused paths; the
fused CUDA path computes the squared Euclidean distances inside its kernels instead.  They are
public for code that builds a cost tensor itself (:func:`sdtw.softdtw_from_cost`, the
baselines).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw._sqeuclidean import sqeuclidean as _sqeuclidean_nograd
from sdtw._sqeuclidean import sqeuclidean_grads

__all__ = ["NAMES", "euclidean", "l1", "pairwise", "pairwise_vjp", "sqeuclidean"]

#: The costs by name (``dist=`` of :func:`sdtw.softdtw`).
NAMES = ("sqeuclidean", "euclidean", "l1")


class _SqEuclidean(torch.autograd.Function):
    """Squared Euclidean cost (B, N, M) of x (B, N, D) and y (B, M, D): three passes over the
    (B, N, M) tensor forward and two backward, against about eight for the same formula in
    plain autograd ops.

    Forward: :func:`sdtw._sqeuclidean.sqeuclidean` (the norms' broadcast sum, then an
    in-place batched matmul adding ``-2 x y^T``), clamped at 0.  Backward, for an upstream
    ``G`` (B, N, M): ``grad_x = 2 (rowsum(G) x - G y)`` and ``grad_y = 2 (colsum(G) y - G^T
    x)``, two reductions and two batched matmuls; nothing of size (B, N, M) is saved.  This is
    the gradient of ``|x_i - y_j|^2`` itself: where the clamp cut a rounding-negative value
    (``x_i`` equal to ``y_j`` up to rounding) that gradient is ``2 (x_i - y_j)``, about 0, and
    it is kept rather than zeroed.  The backward is written in differentiable ops (double
    backward works).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, y)
        return _sqeuclidean_nograd(x, y)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, y = ctx.saved_tensors
        need_x, need_y = ctx.needs_input_grad[:2]
        rows = g.sum(2, keepdim=True) if need_x else None
        cols = g.sum(1).unsqueeze(2) if need_y else None
        return sqeuclidean_grads(x, y, g, rows, cols, need_x, need_y)


def sqeuclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``max(|x_i|^2 + |y_j|^2 - 2 x_i.y_j, 0)`` (B, N, M) of x (B, N, D) and y (B, M, D), in
    x's dtype; differentiable (see :class:`_SqEuclidean`)."""
    return _SqEuclidean.apply(x, y)


def euclidean(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``|x_i - y_j|`` (B, N, M) of x (B, N, D) and y (B, M, D) (``torch.cdist``, p = 2)."""
    return torch.cdist(x, y, p=2.0)


def l1(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``sum_d |x_id - y_jd|`` (B, N, M) of x (B, N, D) and y (B, M, D) (``torch.cdist``,
    p = 1)."""
    return torch.cdist(x, y, p=1.0)


_BY_NAME = {"sqeuclidean": sqeuclidean, "euclidean": euclidean, "l1": l1}


def pairwise(x: torch.Tensor, y: torch.Tensor, dist: str | Callable) -> torch.Tensor:
    """Cost tensor (B, N, M) between x (B, N, D) and y (B, M, D): one of :data:`NAMES` (or
    an alias :func:`sdtw.softdtw` takes), or a callable called as ``dist(x, y)`` whose result
    must be a floating tensor of shape (B, N, M) on x's device (any floating dtype)."""
    return cost(x, y, V.check_dist(dist))


def cost(x: torch.Tensor, y: torch.Tensor, dist: str | Callable) -> torch.Tensor:
    """:func:`pairwise` of a validated ``dist`` (the backends' call: validated at the entry)."""
    if callable(dist):
        return V.check_dist_result(dist(x, y), x, y.shape[1])
    return _BY_NAME[dist](x, y)


def pairwise_vjp(
    x: torch.Tensor,
    y: torch.Tensor,
    dist: str,
    cost: torch.Tensor,
    E: torch.Tensor | None,
    need_x: bool = True,
    need_y: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of ``sum_bij E[b, i, j] C[b, i, j]`` wrt x and y for a named cost ``C =
    pairwise(x, y, dist)`` (given as ``cost``), without autograd: the same formulas as the
    costs' own backwards (:class:`_SqEuclidean`'s; ``torch.cdist``'s, which takes the
    Euclidean gradient as 0 where ``x_i = y_j``).  None where not needed (or ``E`` is None).

    .. math::  \\nabla_{x_i} = \\sum_j E_{ij} \\partial_{x_i} C(x_i, y_j),\\qquad
               \\nabla_{y_j} = \\sum_i E_{ij} \\partial_{y_j} C(x_i, y_j)
    """
    if E is None or not (need_x or need_y):
        return None, None
    if dist == "sqeuclidean":
        rows = E.sum(2, keepdim=True) if need_x else None
        cols = E.sum(1).unsqueeze(2) if need_y else None
        return sqeuclidean_grads(x, y, E, rows, cols, need_x, need_y)
    p = 2.0 if dist == "euclidean" else 1.0
    gx = gy = None
    if need_x:
        gx = torch.ops.aten._cdist_backward(E.contiguous(), x.contiguous(), y.contiguous(), p, cost)
    if need_y:
        gy = torch.ops.aten._cdist_backward(
            E.mT.contiguous(), y.contiguous(), x.contiguous(), p, cost.mT.contiguous()
        )
    return gx, gy
