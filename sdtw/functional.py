"""Functional API: ``softdtw`` (sequences) and ``softdtw_from_cost`` (any cost matrix).

Backend table
-------------

============  =====================================  =======================================
backend       cost path (``fused=False``)            fused squared Euclidean
============  =====================================  =======================================
reference     float64 NumPy reference (slow oracle)  --
cpu           Numba CPU kernels, float64 inside      --
cuda          Numba CUDA kernels (wavefront bands)   Numba CUDA kernel, no (B, N, M) tensor
============  =====================================  =======================================

``backend="auto"`` picks ``"cuda"`` for CUDA tensors (warning and falling back to ``"cpu"``
when numba-cuda cannot run) and ``"cpu"`` for CPU tensors.  ``fused=None`` means fused when
the backend has a fused kernel and ``dist="sqeuclidean"``, unfused otherwise.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw._band import band_offsets
from sdtw._sqeuclidean import sqeuclidean, sqeuclidean_grads
from sdtw.cpu import CPUSoftDTW
from sdtw.reference import softdtw_reference

__all__ = ["pairwise_cost", "softdtw", "softdtw_from_cost"]


_cuda = None


def _cuda_module():
    """:mod:`sdtw.cuda`, imported on first use (numba.cuda must never be touched at ``import
    sdtw`` time), then kept: an import statement per call is host time on every step."""
    global _cuda
    if _cuda is None:
        from sdtw import cuda as sdtw_cuda

        _cuda = sdtw_cuda
    return _cuda


def resolve_backend(backend: str, device: torch.device) -> str:
    """Apply the ``"auto"`` rule and check the backend can run tensors on ``device``."""
    if backend == "auto":
        if device.type == "cuda":
            ok, why = _cuda_module().cuda_usable()
            if ok:
                return "cuda"
            warnings.warn(
                f"backend='auto': CUDA tensors but the CUDA kernels cannot run ({why}); "
                "falling back to the CPU backend (tensors are copied to the CPU)",
                RuntimeWarning,
                stacklevel=3,
            )
            return "cpu"
        return "cpu"
    if backend == "cuda":
        ok, why = _cuda_module().cuda_usable()
        if not ok:
            raise RuntimeError(f"backend='cuda' is not usable here: {why}")
        if device.type != "cuda" and not _cuda_module().simulator_enabled():
            raise ValueError(
                f"backend='cuda' needs CUDA tensors, got tensors on {device} "
                "(or set NUMBA_ENABLE_CUDASIM=1 to run the kernels in the CPU simulator)"
            )
    return backend


class _SqEuclidean(torch.autograd.Function):
    """Squared Euclidean cost (B, N, M) of x (B, N, D) and y (B, M, D): three passes over the
    (B, N, M) tensor forward and two backward, against about eight for the same formula in
    plain autograd ops.

    Forward: :func:`sdtw._sqeuclidean.sqeuclidean` (the norms' broadcast sum, then an
    in-place batched matmul adding ``-2 x y^T``), clamped at 0.  Backward,
    for an upstream ``G`` (B, N, M): ``grad_x = 2 (rowsum(G) x - G y)`` and
    ``grad_y = 2 (colsum(G) y - G^T x)``, two reductions and two batched matmuls; nothing of
    size (B, N, M) is saved.  This is the gradient of ``|x_i - y_j|^2`` itself: where the
    clamp cut a rounding-negative value (``x_i`` equal to ``y_j`` up to rounding) that
    gradient is ``2 (x_i - y_j)``, about 0, and it is kept rather than zeroed.  The backward
    is written in differentiable ops (double backward works).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, y)
        return sqeuclidean(x, y)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        x, y = ctx.saved_tensors
        need_x, need_y = ctx.needs_input_grad[:2]
        rows = g.sum(2, keepdim=True) if need_x else None
        cols = g.sum(1).unsqueeze(2) if need_y else None
        return sqeuclidean_grads(x, y, g, rows, cols, need_x, need_y)


def pairwise_cost(x: torch.Tensor, y: torch.Tensor, dist: str | Callable) -> torch.Tensor:
    """Cost tensor (B, N, M) between x (B, N, D) and y (B, M, D), in x's dtype.

    ``sqeuclidean`` is ``|x|^2 + |y|^2 - 2 x y^T`` as one batched matmul, clamped at 0, with
    its own backward (see ``_SqEuclidean``);
    ``euclidean`` and ``l1`` use ``torch.cdist``; a callable is called as ``dist(x, y)``.
    """
    if callable(dist):
        cost = dist(x, y)
        V.check_cost_shape(cost, x.shape[0], x.shape[1], y.shape[1])
        return cost
    if dist == "sqeuclidean":
        return _SqEuclidean.apply(x, y)
    if dist == "euclidean":
        return torch.cdist(x, y, p=2.0)
    return torch.cdist(x, y, p=1.0)


def _cost_loss(
    cost: torch.Tensor, gamma: float, bandwidth: int | None, backend: str
) -> torch.Tensor:
    """Soft-DTW of a validated cost (B, N, M) on a resolved backend -> (B,)."""
    N, M = cost.shape[1], cost.shape[2]
    if backend == "reference":
        return softdtw_reference(cost, gamma, bandwidth)
    lo, hi = band_offsets(N, M, bandwidth)
    if backend == "cpu":
        if cost.device.type != "cpu":
            return CPUSoftDTW.apply(cost.cpu(), gamma, lo, hi).to(cost.device)
        return CPUSoftDTW.apply(cost, gamma, lo, hi)
    return _cuda_module().softdtw_cost(cost, gamma, lo, hi)


def _fused_by_default(x: torch.Tensor, y: torch.Tensor) -> bool:
    """The ``fused=None`` rule (CUDA, squared Euclidean): see :func:`softdtw`."""
    cuda = _cuda_module()
    if cuda.needs_grad(x, y):
        return True
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    return not cuda.cost_fits(B, N, M, x.dtype, x.device)


def _pair_loss(
    x: torch.Tensor,
    y: torch.Tensor,
    gamma: float,
    bandwidth: int | None,
    dist: str | Callable,
    fused: bool | None,
    backend: str,
) -> torch.Tensor:
    """Soft-DTW of validated batched sequences (no normalisation) -> (B,)."""
    can_fuse = backend == "cuda" and dist == "sqeuclidean"
    if fused is True and not can_fuse:
        raise ValueError(
            "fused=True needs dist='sqeuclidean' and the CUDA backend; "
            f"got dist={dist!r}, backend={backend!r}"
        )
    if can_fuse:  # fused or not, the CUDA kernels build the squared distances
        if fused is None:
            fused = _fused_by_default(x, y)
        lo, hi = band_offsets(x.shape[1], y.shape[1], bandwidth)
        return _cuda_module().softdtw_sqeuclidean(x, y, gamma, lo, hi, fused)
    if backend in ("cpu", "reference") and not callable(dist):
        # The CPU paths work in float64 anyway: build the cost there too, so float32
        # inputs lose nothing to float32 rounding of the distances.
        cost = pairwise_cost(x.double(), y.double(), dist)
        return _cost_loss(cost, gamma, bandwidth, backend).to(x.dtype)
    return _cost_loss(pairwise_cost(x, y, dist), gamma, bandwidth, backend)


def softdtw(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: int | None = None,
    normalize: bool = False,
    dist: str | Callable = "sqeuclidean",
    fused: bool | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Soft-DTW between batches of sequences.

    .. math::

        \\mathrm{sdtw}_\\gamma(x, y) = \\operatorname{softmin}_\\gamma
            \\{\\langle A, C(x, y)\\rangle : A \\text{ monotone alignment}\\},
        \\qquad \\operatorname{softmin}_\\gamma(a) = -\\gamma \\log \\sum_k e^{-a_k/\\gamma}

    Parameters
    ----------
    x : Tensor, shape (B, N, D) or (N, D)
    y : Tensor, shape (B, M, D) or (M, D)
        Same batch size, feature size, device; floating dtype.  ``N != M`` is fine.
    gamma : float
        Smoothing, > 0.  ``gamma -> 0`` recovers DTW.
    bandwidth : int or None
        Sakoe-Chiba radius; for ``N != M`` the band follows tslearn's ``sakoe_chiba_mask``.
        ``None`` or ``<= 0`` disables it.
    normalize : bool
        Return the soft-DTW divergence ``sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2``
        (any ``N``, ``M``).
    dist : {"sqeuclidean", "euclidean", "l1"} or callable
        Ground cost.  A callable gets ``(x, y)`` batched and must return (B, N, M).
    fused : bool or None
        ``True``: the fused squared-Euclidean kernels (CUDA only; no (B, N, M) cost tensor);
        ``False``: always build the cost tensor (on the CUDA backend with
        ``dist="sqeuclidean"``, by the fused path's float64 tensor-core kernel, each distance
        rounded once to x's dtype; elsewhere by :func:`pairwise_cost`); ``None`` (CUDA backend and
        ``dist="sqeuclidean"``, else unfused) picks per call:

        * with gradients: fused.  It puts float64 distances (from a float64 tensor-core
          kernel, whatever the inputs' dtype) in the weights buffer that the backward needs
          anyway, so it stores no cost tensor and no separate gradient: a third less memory
          than unfused, about as fast (on an H200, 0.96-1.07x the unfused time on the paper's
          grid with the host's share removed by a CUDA graph of the whole step; eager calls,
          host-bound at small N, 1.01-1.45x), and for float32 inputs more accurate
          (gradients within ~1e-7 of float64, where the unfused float32 cost tensor gives
          ~1e-5, and more on nearly tied paths at small gamma).
        * without gradients: unfused when the cost tensor takes at most a quarter of the free
          GPU memory (on an H200, float32, its forward is 1.3-1.8x faster at N = 512-2048 on
          the paper's grid),
          else fused, whose forward computes the distances inside the DP kernel (their dot
          products on the float64 tensor cores) and stores no (N, M) buffer at all.
    backend : {"auto", "cpu", "cuda", "reference"}
        See the module docstring for the table and the ``"auto"`` rule.

    Returns
    -------
    Tensor, shape (B,), or a 0-dim tensor for unbatched inputs; x's dtype.
    Differentiable with respect to x and y.  NaN in the inputs gives NaN.
    """
    x, y, unbatched = V.check_sequences(x, y)
    gamma = V.check_gamma(gamma)
    bandwidth = V.check_bandwidth(bandwidth)
    dist = V.check_dist(dist)
    fused = V.check_fused(fused)
    backend = resolve_backend(V.check_backend(backend), x.device)
    args = (gamma, bandwidth, dist, fused, backend)
    if not normalize:
        out = _pair_loss(x, y, *args)
    elif x.shape[1] == y.shape[1]:
        # One launch for the three terms: stack (x, y), (x, x), (y, y) along the batch.
        B = x.shape[0]
        both = _pair_loss(torch.cat([x, x, y]), torch.cat([y, x, y]), *args)
        out = both[:B] - 0.5 * (both[B : 2 * B] + both[2 * B :])
    else:
        out = _pair_loss(x, y, *args) - 0.5 * (_pair_loss(x, x, *args) + _pair_loss(y, y, *args))
    return out[0] if unbatched else out


def softdtw_from_cost(
    cost: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Soft-DTW of a precomputed cost tensor.

    Parameters
    ----------
    cost : Tensor, shape (B, N, M) or (N, M)
        Any ground cost (it need not be a distance; entries may be negative).
    gamma, bandwidth, backend
        As in :func:`softdtw`.

    Returns
    -------
    Tensor, shape (B,) (0-dim for an unbatched cost).  Its gradient with respect to
    ``cost`` is the expected alignment matrix ``E`` (B, N, M) times the upstream gradient.
    """
    cost, unbatched = V.check_cost(cost)
    gamma = V.check_gamma(gamma)
    bandwidth = V.check_bandwidth(bandwidth)
    backend = resolve_backend(V.check_backend(backend), cost.device)
    out = _cost_loss(cost, gamma, bandwidth, backend)
    return out[0] if unbatched else out
