"""Soft-MSM: ``soft_msm`` and the ``SoftMSM`` module.

Soft-MSM (Holder & Bagnall, 2026) is a smooth relaxation of Move-Split-Merge.  It is a
recurrence over the sequences themselves (its split and merge costs sit on the DP's edges and
read the neighbouring samples), run by the engine like soft-DTW: validation here, then the
plan (:func:`sdtw.engine.plan_pairs` with :data:`sdtw.engine.recurrence.SOFTMSM`), then the
backend's kernels.  The maths: :mod:`sdtw.msm_reference`.

Backend table
-------------

============  ==================================================================
backend       Soft-MSM
============  ==================================================================
reference     float64 NumPy oracle (:mod:`sdtw.msm_reference`; slow)
cpu           Numba CPU kernels, float64 inside: (pair, channel) tasks as SIMD
              lanes where ``use_msm_lanes`` says (16 tasks and more:
              :mod:`sdtw.cpu_msm_lanes`), else a task per thread (:mod:`sdtw.cpu_msm`)
cuda          Numba CUDA kernels (:mod:`sdtw.cuda.msm`: one block per pair and
              channel, a wavefront of rows per thread up to N = 2048, anti-diagonals
              beyond; float64 R; float32 transcendentals for float32 inputs up to
              N = 2048, float64 ones otherwise)
============  ==================================================================

``backend="auto"`` picks ``"cuda"`` for CUDA tensors and ``"cpu"`` otherwise, as
:func:`sdtw.softdtw` (:func:`sdtw.engine.resolve`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import nn

from sdtw import _validation as V
from sdtw import engine, ops
from sdtw._autocast import autocast_on, float32
from sdtw.engine import Options, Pairs
from sdtw.engine.recurrence import SOFTMSM, Recurrence

__all__ = ["SoftMSM", "soft_msm"]


def check_c(c: object) -> float:
    """The stiffness: a finite real number > 0."""
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Real):
        raise TypeError(f"c must be a positive real number, got {c!r} ({type(c).__name__})")
    if not math.isfinite(float(c)) or float(c) <= 0.0:
        raise ValueError(f"c must be finite and > 0, got {c!r}")
    return float(c)


def soft_msm_settings(*, c, gamma, normalize, bandwidth, backend) -> tuple[Options, Recurrence]:
    """The validated options and the recurrence with its stiffness (each error names its
    argument)."""
    g = V.check_gamma(gamma)
    if g == 0.0:
        raise ValueError("gamma must be > 0 for soft_msm (hard MSM is its limit), got 0")
    opts = Options(
        gamma=g,
        bandwidth=V.check_bandwidth(bandwidth),
        normalize=V.check_flag("normalize", normalize),
        dist=None,  # (no ground cost: the recurrence reads the sequences)
        backend=V.check_backend(backend),
        memory="full",
    )
    return opts, SOFTMSM.with_params(c=check_c(c))


def soft_msm_options(x, y, opts: Options, rec: Recurrence, x_lengths=None, y_lengths=None):
    """:func:`soft_msm` with validated settings (the module's entry)."""
    if ops.traced(x, y):
        raise NotImplementedError(
            "soft_msm has no PyTorch operator yet: under torch.compile / torch.export or on "
            "fake tensors, call it outside the compiled region (torch.compiler.disable)"
        )
    if autocast_on(x):  # as soft-DTW: float32 under autocast
        with torch.autocast(x.device.type, enabled=False):
            return soft_msm_options(float32(x), float32(y), opts, rec, x_lengths, y_lengths)
    x, y, unbatched = V.check_sequences(x, y)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    pairs = Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, x.device))
    grad = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)
    plan = engine.plan_pairs(opts, x, y, pairs.x_lengths is not None, grad, rec)
    out = engine.pair_values(plan, x, y, pairs)
    return out[0] if unbatched else out


def soft_msm(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    c: float = 1.0,
    gamma: float = 1.0,
    normalize: bool = False,
    bandwidth: int | float | None = None,
    x_lengths: object = None,
    y_lengths: object = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Soft-MSM between batches of sequences.

    .. math::

        \\mathrm{smsm}_\\gamma(x, y) = \\sum_d R^{(d)}_{N-1,M-1},\\qquad
        R_{i,j} = \\operatorname{softmin}_\\gamma\\big(R_{i-1,j-1} + (x_i - y_j)^2,
            R_{i-1,j} + C(x_i, x_{i-1}, y_j), R_{i,j-1} + C(y_j, y_{j-1}, x_i)\\big),

    ``C(v, p, o) = c + (1 - s(u)) softmin_gamma((v - p)^2, (v - o)^2)`` with the gate
    ``s(u) = (1 - u / sqrt(u^2 + 1e-9)) / 2``, ``u = (v - p)(v - o)``; each channel ``d`` on
    its own (:mod:`sdtw.msm_reference` has the full definition).

    Parameters
    ----------
    x : Tensor, shape (B, N, D) or (N, D)
    y : Tensor, shape (B, M, D) or (M, D)
    c : float
        Stiffness, > 0: the cost of a split or merge.
    gamma : float
        Smoothing, > 0.  ``gamma -> 0`` tends to MSM with squared legs (not the
        absolute-value MSM of aeon's ``msm_distance``).
    normalize : bool
        The divergence ``smsm(x, y) - (smsm(x, x) + smsm(y, y)) / 2``.
    bandwidth : int, float or None
        Sakoe-Chiba radius, as in :func:`sdtw.softdtw`.
    x_lengths, y_lengths
        Each pair's own lengths in a padded batch, as in :func:`sdtw.softdtw`.
    backend : {"auto", "cpu", "cuda", "reference"}
        See the module docstring.

    Returns
    -------
    Tensor, shape (B,) (0-dim for unbatched inputs), x's dtype; differentiable wrt x and y
    (once).  With gradients asked, the backward recursion runs in the forward call and the
    gradients are kept, (B, N, D) + (B, M, D), instead of the DP table.
    """
    opts, rec = soft_msm_settings(
        c=c, gamma=gamma, normalize=normalize, bandwidth=bandwidth, backend=backend
    )
    return soft_msm_options(x, y, opts, rec, x_lengths, y_lengths)


class SoftMSM(nn.Module):
    """Soft-MSM loss module: settings as :func:`soft_msm`'s, validated at construction.

    ``forward(x, y, x_lengths=None, y_lengths=None)``: x (B, N, D), y (B, M, D) -> (B,).
    """

    def __init__(
        self,
        *,
        c: float = 1.0,
        gamma: float = 1.0,
        normalize: bool = False,
        bandwidth: int | float | None = None,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        self.options, self.recurrence = soft_msm_settings(
            c=c, gamma=gamma, normalize=normalize, bandwidth=bandwidth, backend=backend
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor, x_lengths=None, y_lengths=None):
        return soft_msm_options(x, y, self.options, self.recurrence, x_lengths, y_lengths)

    def extra_repr(self) -> str:
        o = self.options
        return (
            f"c={self.recurrence.param('c')}, gamma={o.gamma}, normalize={o.normalize}, "
            f"bandwidth={o.bandwidth}, backend={o.backend!r}"
        )
