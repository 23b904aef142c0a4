"""The designs we benchmark against, re-implemented from their published descriptions.

Every entry of :data:`BASELINES` has one signature,
``loss(x, y, *, gamma=1.0, bandwidth=None) -> (B,)`` for ``x`` (B, N, D) and ``y`` (B, M, D),
squared-Euclidean cost, differentiable in ``x`` and ``y``:

================  =============================================================  ===========
name              design                                                         device
================  =============================================================  ===========
``torch``         plain PyTorch anti-diagonal DP + autograd (:mod:`.torch_naive`) any
``paper-unfused`` SoftDTW-CUDA-Torch, launch per diagonal, log-space backward,   CUDA
                  torch cost (:mod:`.paper`)
``paper-fused``   same, distances recomputed in the kernels                      CUDA
``maghoumi``      pytorch-softdtw-cuda: block per pair, linear-space backward,   CUDA
                  (B, N, M, D) broadcast distance (:mod:`.maghoumi`)
``maghoumi-bmm``  same kernels, matrix-product distance                          CUDA
``reference``     float64 oracle, returns float64 (:mod:`.reference`)            any (CPU DP)
================  =============================================================  ===========

"CUDA" baselines take CUDA tensors, or CPU tensors under ``NUMBA_ENABLE_CUDASIM=1``.
:func:`launches` gives their Numba kernel launches per pass; :func:`count_launches` counts
them at run time.  Importing this package never touches a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from baselines import maghoumi, paper, reference, torch_naive
from baselines._cuda import count_launches, total_launches

__all__ = ["BASELINES", "CUDA_BASELINES", "count_launches", "launches", "total_launches"]

BASELINES: dict[str, Callable[..., torch.Tensor]] = {
    "torch": torch_naive.loss,
    "paper-unfused": partial(paper.loss, fused=False),
    "paper-fused": partial(paper.loss, fused=True),
    "maghoumi": partial(maghoumi.loss, dist="broadcast"),
    "maghoumi-bmm": partial(maghoumi.loss, dist="bmm"),
    "reference": reference.loss,
}
"""Name -> ``loss(x, y, *, gamma=1.0, bandwidth=None)``."""

_LAUNCHES: dict[str, Callable[[int, int], dict[str, int]]] = {
    "paper-unfused": paper.launches,
    "paper-fused": paper.launches,
    "maghoumi": maghoumi.launches,
    "maghoumi-bmm": maghoumi.launches,
}

CUDA_BASELINES: frozenset[str] = frozenset(_LAUNCHES)
"""Baselines made of Numba CUDA kernels (CUDA tensors, or CPU under the simulator)."""


def launches(name: str, N: int, M: int) -> dict[str, int] | None:
    """Numba kernel launches ``{"forward": n, "backward": n}`` of baseline ``name`` at lengths
    ``N``, ``M`` (any B, D, band); ``None`` for the baselines that launch no Numba kernel
    ("torch", "reference": their torch kernels are not counted)."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {sorted(BASELINES)}")
    counter = _LAUNCHES.get(name)
    return None if counter is None else counter(N, M)
