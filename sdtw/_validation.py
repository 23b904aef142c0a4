"""Input validation, done once at the public entry points.

Every error names the argument and shows the shapes involved.  Nothing here copies or
modifies the inputs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

DISTANCES = ("sqeuclidean", "euclidean", "l1")
BACKENDS = ("auto", "cpu", "cuda", "reference")


def check_gamma(gamma: object) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma must be a positive real number, got {type(gamma).__name__}")
    g = float(gamma)
    if not math.isfinite(g) or g <= 0.0:
        raise ValueError(f"gamma must be finite and > 0, got {gamma!r}")
    return g


def check_bandwidth(bandwidth: object) -> int | None:
    if bandwidth is None:
        return None
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Integral):
        if isinstance(bandwidth, numbers.Real) and float(bandwidth).is_integer():
            bandwidth = int(bandwidth)
        else:
            raise TypeError(
                f"bandwidth must be an int or None, got {bandwidth!r} ({type(bandwidth).__name__})"
            )
    b = int(bandwidth)
    return b if b > 0 else None


def check_backend(backend: object) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return str(backend)


def check_dist(dist: object) -> str | Callable:
    if callable(dist):
        return dist
    if dist not in DISTANCES:
        raise ValueError(
            f"dist must be one of {DISTANCES} or a callable (x, y) -> (B, N, M), got {dist!r}"
        )
    return str(dist)


def check_fused(fused: object) -> bool | None:
    if fused is None or isinstance(fused, bool):
        return fused
    raise TypeError(f"fused must be None, True or False, got {fused!r}")


def _check_float_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(
            f"{name} must have a floating dtype (float16/bfloat16/float32/float64), "
            f"got {t.dtype} with shape {tuple(t.shape)}"
        )
    return t


def check_sequences(x: object, y: object) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Validate a pair of sequences; return them batched (B, N, D), (B, M, D).

    The third value tells whether the inputs were unbatched (N, D)/(M, D).  (Every call of a
    training step runs this before its first GPU work: each shape and rank is read once.)
    """
    x = _check_float_tensor("x", x)
    y = _check_float_tensor("y", y)
    xs, ys = x.shape, y.shape
    rank = len(xs)
    if rank not in (2, 3) or len(ys) not in (2, 3):
        raise ValueError(
            "x and y must be (B, N, D)/(B, M, D) or unbatched (N, D)/(M, D); "
            f"got x {tuple(xs)} and y {tuple(ys)}"
        )
    if rank != len(ys):
        raise ValueError(f"x and y must have the same rank; got x {tuple(xs)} and y {tuple(ys)}")
    unbatched = rank == 2
    if unbatched:
        x, y = x.unsqueeze(0), y.unsqueeze(0)
        xs, ys = x.shape, y.shape
    if x.device != y.device:
        raise ValueError(
            f"x and y must be on the same device; got x on {x.device}, y on {y.device}"
        )
    if xs[0] != ys[0]:
        raise ValueError(
            f"batch sizes differ: x {tuple(xs)} has B={xs[0]}, y {tuple(ys)} has B={ys[0]}"
        )
    if xs[2] != ys[2]:
        raise ValueError(
            f"feature dimensions differ: x {tuple(xs)} has D={xs[2]}, y {tuple(ys)} has D={ys[2]}"
        )
    if not (xs[0] and xs[1] and ys[1] and xs[2]):
        raise ValueError(f"empty input: x {tuple(xs)}, y {tuple(ys)} (B, N, M and D must be >= 1)")
    return x, y, unbatched


def check_cost(cost: object) -> tuple[torch.Tensor, bool]:
    """Validate a cost tensor (B, N, M) or (N, M); return it batched and the unbatched flag."""
    cost = _check_float_tensor("cost", cost)
    if cost.dim() not in (2, 3):
        raise ValueError(f"cost must be (B, N, M) or (N, M), got {tuple(cost.shape)}")
    unbatched = cost.dim() == 2
    if unbatched:
        cost = cost.unsqueeze(0)
    if min(cost.shape) == 0:
        raise ValueError(f"empty cost: shape {tuple(cost.shape)} (B, N and M must be >= 1)")
    return cost, unbatched


def check_cost_shape(cost: torch.Tensor, B: int, N: int, M: int) -> None:
    """A callable distance must return (B, N, M)."""
    if not isinstance(cost, torch.Tensor) or tuple(cost.shape) != (B, N, M):
        shape = tuple(cost.shape) if isinstance(cost, torch.Tensor) else type(cost).__name__
        raise ValueError(
            f"dist callable must return a tensor of shape (B, N, M) = {(B, N, M)}, got {shape}"
        )
