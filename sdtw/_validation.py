"""Input validation, done once at the public entry points.

Every error names the argument and shows what it got (the value and its type, or the shapes).
Flags are read by type, never by truthiness: ``normalize="False"`` is an error, not ``True``.
Nothing here copies or modifies the inputs.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import numpy as np
import torch

DISTANCES = ("sqeuclidean", "euclidean", "l1")
#: Other spellings of the distance names (matched case-insensitively): the paper's library
#: takes these.
DISTANCE_ALIASES = {
    "sq_euclidean": "sqeuclidean",
    "squared_euclidean": "sqeuclidean",
    "sqeuclid": "sqeuclidean",
    "manhattan": "l1",
    "cityblock": "l1",
}
BACKENDS = ("auto", "cpu", "cuda", "reference")
MEMORY = ("auto", "full", "checkpoint")
#: The range of gamma.  The CUDA kernels run the DP in units of ``gamma / log2(e)`` and treat
#: scaled values from 1e300 on as unreachable, so ``|R| / gamma`` must stay below ~1e299: down
#: to 1e-200 that holds for any loss below ~1e99.  Up to 1e200 the values ``-gamma log(paths)``
#: stay finite.
GAMMA_MIN, GAMMA_MAX = 1e-200, 1e200


def _got(value: object) -> str:
    """``value`` as an error message shows it: its repr (shortened) and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def check_flag(name: str, value: object) -> bool:
    """A boolean argument: ``True`` or ``False`` (or a NumPy bool), nothing read by
    truthiness (``"False"``, 1, a tensor)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {_got(value)}")


def check_gamma(gamma: object, exact: bool = True) -> float:
    """The smoothing: a real number in [GAMMA_MIN, GAMMA_MAX], or exactly 0 (exact DTW, the
    ``"dtw"`` recurrence) where ``exact``; negatives, NaN and inf refused."""
    if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, numbers.Real):
        raise TypeError(f"gamma must be a positive real number or 0, got {_got(gamma)}")
    g = float(gamma)
    if exact and g == 0.0:
        return 0.0
    if not math.isfinite(g) or g <= 0.0:
        zero = " (0: exact DTW)" if exact else ""
        raise ValueError(f"gamma must be finite and > 0{zero}, got {gamma!r}")
    if not GAMMA_MIN <= g <= GAMMA_MAX:
        raise ValueError(
            f"gamma must be between {GAMMA_MIN:g} and {GAMMA_MAX:g} (the DP's values divided by "
            f"gamma must stay within float64's range), got {gamma!r}"
        )
    return g


def check_bandwidth(bandwidth: object) -> float | int | None:
    """The Sakoe-Chiba radius: a real number (cells with ``|i - j| <= bandwidth`` for N = M,
    i.e. an integer radius of ``floor(bandwidth)``); ``None``, ``<= 0`` or ``inf``: no band.
    A radius past the table's size is no band too (:func:`sdtw.band.band_offsets` clamps it)."""
    if bandwidth is None:
        return None
    if isinstance(bandwidth, (bool, np.bool_)) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(f"bandwidth must be a real number or None, got {_got(bandwidth)}")
    if isinstance(bandwidth, numbers.Integral):
        return int(bandwidth) if bandwidth > 0 else None
    b = float(bandwidth)
    if math.isnan(b):
        raise ValueError(f"bandwidth must be a number or None, got {bandwidth!r}")
    return b if 0.0 < b < math.inf else None


def check_backend(backend: object) -> str:
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {_got(backend)}")
    return backend


def check_memory(memory: object) -> str:
    if not isinstance(memory, str) or memory not in MEMORY:
        raise ValueError(f"memory must be one of {MEMORY}, got {_got(memory)}")
    return memory


def check_dist(dist: object) -> str | Callable:
    """A distance name (any case; the aliases of :data:`DISTANCE_ALIASES` too) or a callable."""
    if callable(dist):
        return dist
    if isinstance(dist, str):
        name = dist.strip().lower()
        name = DISTANCE_ALIASES.get(name, name)
        if name in DISTANCES:
            return name
    raise ValueError(
        f"dist must be one of {DISTANCES} or a callable (x, y) -> (B, N, M), got {_got(dist)}"
    )


def check_fused(fused: object) -> bool | None:
    if fused is None or isinstance(fused, (bool, np.bool_)):
        return None if fused is None else bool(fused)
    raise TypeError(f"fused must be None, True or False, got {_got(fused)}")


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


def check_dist_result(cost: object, x: torch.Tensor, M: int) -> torch.Tensor:
    """What a callable ``dist`` returned for x (B, N, D) and a y of length M: a floating
    tensor of shape (B, N, M) on x's device (its dtype may differ from x's: the soft-DTW runs
    on it as it is, and the loss comes back in x's dtype)."""
    B, N = x.shape[0], x.shape[1]
    if not isinstance(cost, torch.Tensor):
        raise TypeError(f"dist callable must return a torch.Tensor, got {type(cost).__name__}")
    if not cost.is_floating_point():
        raise TypeError(
            f"dist callable must return a floating tensor, got {cost.dtype} "
            f"(shape {tuple(cost.shape)})"
        )
    if tuple(cost.shape) != (B, N, M):
        raise ValueError(
            f"dist callable must return a tensor of shape (B, N, M) = {(B, N, M)}, "
            f"got {tuple(cost.shape)}"
        )
    if cost.device != x.device:
        raise ValueError(f"dist callable must return a tensor on {x.device}, got {cost.device}")
    return cost


def lengths_tensor(name: str, lengths: object, B: int) -> torch.Tensor:
    """``lengths`` as an int64 tensor (B,) on its own device (a sequence: on the CPU).  Written
    with torch and plain Python only, so that torch.compile traces it (with ``fullgraph=True``
    its error then shows as dynamo's "raised exception TypeError(...)", our message inside)."""
    if isinstance(lengths, np.ndarray):
        lengths = torch.as_tensor(lengths)  # (its dtype is checked as a tensor's, below)
    if isinstance(lengths, torch.Tensor):
        t = lengths
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise TypeError(
                f"{name} must hold integers, got a {t.dtype} tensor of shape {tuple(t.shape)}"
            )
    else:
        one = isinstance(lengths, numbers.Integral)
        if isinstance(lengths, (str, bytes, bool, np.bool_)) or not (
            one or isinstance(lengths, (list, tuple, range))
        ):
            raise TypeError(
                f"{name} must be an integer tensor or a sequence of ints, got {_got(lengths)}"
            )
        values = [lengths] if one else list(lengths)
        for v in values:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                raise TypeError(f"{name} must hold integers, got {_got(lengths)}")
        t = torch.tensor([int(v) for v in values], dtype=torch.int64)
        if one:
            t = t.reshape(())
    if t.dim() == 0 and B == 1:
        t = t.reshape(1)
    if tuple(t.shape) != (B,):
        raise ValueError(f"{name} must have shape (B,) = ({B},), got shape {tuple(t.shape)}")
    return t.to(torch.int64)


def check_one_lengths(name: str, lengths: object, B: int, size: int) -> tuple[torch.Tensor, bool]:
    """One lengths argument (see :func:`check_lengths`): the int64 tensor (B,) on its own
    device, and whether every length is ``size``."""
    t = lengths_tensor(name, lengths, B)
    if t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return t.clamp(1, size), False
    lo, hi = (int(v) for v in torch.stack([t.min(), t.max()]).tolist())
    if lo < 1 or hi > size:
        bad = int(t[(t < 1) | (t > size)][0])
        raise ValueError(
            f"{name} must be between 1 and the padded length {size}, got {bad} (min {lo}, max {hi})"
        )
    return t, lo == size


def zero_padding(t: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``t`` (B, L, D) with the steps from each pair's length on set to 0, a new tensor: what
    the padding holds (NaN, inf) then never reaches a value or a gradient (E is 0 there, but
    0 x NaN is NaN), and through autograd the gradient there is exactly 0 (masked_fill's)."""
    steps = torch.arange(t.shape[1], device=t.device)
    return t.masked_fill((steps[None, :] >= lengths[:, None]).unsqueeze(-1), 0)


def check_lengths(
    x_lengths: object, y_lengths: object, B: int, N: int, M: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Per-pair lengths of a padded batch: each None (all N, or all M), an integer tensor
    (B,) on any device or a sequence of B ints (an int for one pair), with ``1 <= x_lengths[b]
    <= N`` and ``1 <= y_lengths[b] <= M``.  Returns both as int64 tensors (B,) on ``device``,
    or None where every pair has the full lengths (nothing to do).

    The values are checked on the CPU (CUDA lengths: one device-to-host read, a sync; not
    while a CUDA graph is being captured, where they are clamped into range instead)."""
    if x_lengths is None and y_lengths is None:
        return None
    pairs = []
    for name, lengths, size in (("x_lengths", x_lengths, N), ("y_lengths", y_lengths, M)):
        if lengths is None:
            # (made on the device: no host-to-device copy, which a CUDA graph capture refuses)
            pairs.append((torch.full((B,), size, dtype=torch.int64, device=device), True))
        else:
            pairs.append(check_one_lengths(name, lengths, B, size))
    if pairs[0][1] and pairs[1][1]:
        return None
    # (pageable host memory: the copy is staged before the call returns, no stream sync)
    return tuple(t.to(device, non_blocking=True) for t, _ in pairs)


def check_device(name: str, device: object) -> torch.device:
    """A device argument that can hold tensors here (a CUDA device needs a CUDA GPU)."""
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"{name} must name a torch device, got {_got(device)} ({exc})") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"{name}={device!r} but no CUDA GPU is usable here (torch.cuda.is_available() is "
            "False); pass device='cpu' or leave it None"
        )
    if dev.type == "meta":
        raise NotImplementedError(f"{name}={device!r}: sdtw has no meta implementation")
    return dev
