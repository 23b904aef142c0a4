"""Shared parametrisation, tolerances and markers for the test suite."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

#: (B, N, M, D): N != M, odd, length 1, and just past the CUDA band/chunk size (32).
SHAPES = [(2, 5, 7, 3), (1, 1, 1, 2), (3, 1, 6, 2), (2, 6, 1, 1), (2, 9, 4, 5), (1, 33, 35, 2)]
#: Shapes for the (slow) CUDA simulator: one past every boundary, kept tiny.
SIM_SHAPES = [
    (2, 5, 7, 3),
    (1, 1, 1, 2),
    (2, 1, 33, 2),
    (1, 33, 1, 2),
    (1, 33, 40, 3),
    (1, 65, 34, 2),
]
GAMMAS = [1.0, 0.1, 0.01, 0.001]
#: relative tolerance (norm of difference / norm of reference) per input dtype
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
requires_sim = pytest.mark.skipif(not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1")
requires_gpu = pytest.mark.skipif(
    SIMULATOR or not torch.cuda.is_available(), reason="needs a CUDA GPU (and no simulator)"
)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.detach().double().cpu()
    b = b.detach().double().cpu()
    denom = b.norm()
    if denom == 0:
        return float(a.norm())
    return float((a - b).norm() / denom)


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A fresh generator per test: fresh random inputs every run (seed printed on failure)."""
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


def randn(rng: np.random.Generator, *shape: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.as_tensor(rng.standard_normal(shape), dtype=dtype, device=device)
