"""Squared Euclidean cost of two batches of sequences as one batched matmul."""

from __future__ import annotations

import torch


def sqeuclidean(
    x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None, clamp: bool = True
) -> torch.Tensor:
    """``|x_i|^2 + |y_j|^2 - 2 x_i.y_j`` (B, N, M) of x (B, N, D) and y (B, M, D), clamped at 0
    unless ``clamp`` is False (a value of an identical pair can then be a rounding error
    below 0, which soft-DTW takes as it is).

    One batched matmul of the augmented features ``[x, |x|^2, 1]`` and ``[-2 y, 1, |y|^2]``
    (zero-padded to a multiple of 4 features), then an in-place clamp: one pass writing the
    (B, N, M) result and one clamping it.  ``out`` (any (B, N, M) view whose rows are
    contiguous, e.g. a plane of a larger buffer) receives the result; no gradient is tracked
    here (see ``sdtw.functional._SqEuclidean``).
    """
    B, N, D = x.shape
    M = y.shape[1]
    K = -(-(D + 2) // 4) * 4
    with torch.no_grad():
        xa = x.new_zeros((B, N, K))
        ya = y.new_zeros((B, M, K))
        xa[..., :D] = x
        xa[..., D] = (x * x).sum(-1)
        xa[..., D + 1] = 1.0
        ya[..., :D] = y * -2.0
        ya[..., D] = 1.0
        ya[..., D + 1] = (y * y).sum(-1)
        if out is None:
            out = torch.bmm(xa, ya.transpose(1, 2))
        else:
            torch.bmm(xa, ya.transpose(1, 2), out=out)
        return out.clamp_min_(0.0) if clamp else out
