"""Functional API: ``softdtw`` (sequences) and ``softdtw_from_cost`` (any cost matrix).

The front door: validate (:mod:`sdtw._validation`), plan (:mod:`sdtw.engine.plan`), call the
engine (:mod:`sdtw.engine`).  While torch compiles, exports or traces with fake tensors, the
same happens inside the PyTorch operators (:mod:`sdtw.ops`), one opaque node per loss.

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
when numba-cuda cannot run) and ``"cpu"`` for CPU tensors (:func:`sdtw.engine.resolve`).
``fused=None`` means fused when the backend has a fused kernel and ``dist="sqeuclidean"``,
unfused otherwise; on CUDA it is decided per call (:func:`sdtw.cuda.policy.fused_default`).
The capabilities of each backend: :func:`sdtw.engine.capabilities_table`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw import engine, ops
from sdtw._autocast import autocast_on, float32
from sdtw.engine import Options, Pairs

__all__ = ["Options", "softdtw", "softdtw_from_cost"]


def softdtw_options(
    x: torch.Tensor,
    y: torch.Tensor,
    opts: Options,
    x_lengths: object = None,
    y_lengths: object = None,
) -> torch.Tensor:
    """:func:`softdtw` with validated :class:`Options` (the module's entry: its settings were
    validated at construction)."""
    if ops.traced(x, y):  # torch.compile / torch.export / fake tensors: one operator
        return ops.pair_loss(x, y, opts, x_lengths, y_lengths)
    if autocast_on(x):  # as PyTorch's losses: float32 under autocast
        with torch.autocast(x.device.type, enabled=False):
            return softdtw_options(float32(x), float32(y), opts, x_lengths, y_lengths)
    x, y, unbatched = V.check_sequences(x, y)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    pairs = Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, x.device))
    grad = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)
    plan = engine.plan_pairs(opts, x, y, pairs.x_lengths is not None, grad)
    out = engine.pair_values(plan, x, y, pairs)
    return out[0] if unbatched else out


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
    x_lengths: object = None,
    y_lengths: object = None,
    memory: str = "auto",
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
        Smoothing, > 0.  ``gamma=0`` exactly is exact DTW, ``min_A <A, C>`` (a min-plus
        recurrence of its own, no exp or log; :mod:`sdtw.reference_dtw`): its gradient is
        the optimal alignment's 0/1 indicator (a subgradient where several paths tie: the one
        found by backtracking with ties to the diagonal, then up, then left, the same on every
        backend); ``memory="checkpoint"`` and ``fused=True`` are refused with it (the fused
        and checkpointed kernels are soft-DTW's), and the CUDA backend runs it by a simple
        kernel of its own (one block per pair, the table in global memory).
    bandwidth : float or None
        Sakoe-Chiba radius, a real number (``|i - j| <= 2.5`` for 2.5); for ``N != M`` the
        band follows tslearn's ``sakoe_chiba_mask`` (:func:`sdtw.sakoe_chiba_mask`).  ``None``
        or ``<= 0`` disables it.
    normalize : bool
        Return the soft-DTW divergence ``sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2``
        (any ``N``, ``M``).
    dist : {"sqeuclidean", "euclidean", "l1"} or callable
        Ground cost (:mod:`sdtw.distances`).  A callable gets ``(x, y)`` batched and must
        return (B, N, M).
    fused : bool or None
        ``True``: the fused squared-Euclidean kernels (CUDA only; no (B, N, M) cost tensor);
        ``False``: always build the cost tensor (on the CUDA backend with
        ``dist="sqeuclidean"``, by the fused path's float64 tensor-core kernel, each distance
        rounded once to x's dtype; elsewhere by :func:`sdtw.distances.pairwise`); ``None``
        (CUDA backend and ``dist="sqeuclidean"``, else unfused) picks per call: with
        gradients, fused (float64 distances in the weights buffer the backward needs anyway:
        a third less memory than unfused, about as fast, and for float32 inputs more
        accurate); without gradients, unfused when the cost tensor takes at most a quarter of
        the free GPU memory (its forward is faster), else fused (no (N, M) buffer at all).
        docs/performance.md ("Which variant a call takes") has the measurements behind it.
    backend : {"auto", "cpu", "cuda", "reference"}
        See the module docstring for the table and the ``"auto"`` rule.
    x_lengths, y_lengths : integer Tensor (B,) (any device), sequence of B ints, or None
        Each pair's own lengths in a padded batch, ``1 <= x_lengths[b] <= N`` and
        ``1 <= y_lengths[b] <= M`` (None: all N, or all M).  Pair b's value is that of
        ``x[b, :x_lengths[b]]`` and ``y[b, :y_lengths[b]]``; its band follows those lengths,
        ``normalize`` uses them in the self terms, what the padding holds never matters (NaN
        included) and the gradient there is exactly 0 for a finite upstream gradient (the
        CUDA squared-Euclidean path scales its zeros by it: a NaN or inf upstream gradient
        gives NaN there, as everywhere else in that pair's gradient).  Lengths on a CUDA
        device are checked with one read back to the host (pass them on the CPU to avoid
        that sync).
    memory : {"auto", "full", "checkpoint"}
        ``"full"``: the backward's per-cell state is stored (the fastest where it fits);
        ``"checkpoint"``: only checkpoints of the DP are stored and the backward recomputes
        the rest from x and y, memory growing like ``(N + M) sqrt(N)`` instead of ``N M`` per
        pair, at the price of a second forward (named ``dist`` only; not on the reference
        backend); ``"auto"``: checkpointed where the full mode's buffers would take more than
        half the memory available now.  The same values and gradients either way (to float64
        rounding).  See the README's memory table.

    Returns
    -------
    Tensor, shape (B,), or a 0-dim tensor for unbatched inputs; x's dtype.
    Differentiable with respect to x and y (once: a second derivative raises, on every
    backend).  Special values, the same on every backend: NaN in a pair's sequences gives that
    pair NaN; an infinite feature gives NaN or +inf (the cells it touches are ``inf - inf`` or
    ``inf + inf``); distances that overflow float64 are +inf, and a pair with no finite path is
    +inf.  ``gamma`` is limited to [1e-200, 1e200] (the CUDA kernels' DP runs in units of
    gamma).
    """
    opts = Options.make(
        gamma=gamma,
        bandwidth=bandwidth,
        normalize=normalize,
        dist=dist,
        fused=fused,
        backend=backend,
        memory=memory,
    )
    return softdtw_options(x, y, opts, x_lengths, y_lengths)


def softdtw_from_cost(
    cost: torch.Tensor,
    *,
    gamma: float = 1.0,
    bandwidth: int | None = None,
    backend: str = "auto",
    x_lengths: object = None,
    y_lengths: object = None,
) -> torch.Tensor:
    """Soft-DTW of a precomputed cost tensor.

    Parameters
    ----------
    cost : Tensor, shape (B, N, M) or (N, M)
        Any ground cost (it need not be a distance; entries may be negative).
    gamma, bandwidth, backend
        As in :func:`softdtw` (``gamma=0``: exact DTW, the gradient the optimal path's
        indicator).
    x_lengths, y_lengths
        Each pair's own rows and columns, as in :func:`softdtw`: pair b's value is that of
        ``cost[b, :x_lengths[b], :y_lengths[b]]`` (the rest is never read; its gradient is 0).

    Returns
    -------
    Tensor, shape (B,) (0-dim for an unbatched cost).  Its gradient with respect to
    ``cost`` is the expected alignment matrix ``E`` (B, N, M) times the upstream gradient
    (a second derivative raises).  Special values, the same on every backend: a +inf cell is
    never on a path (a pair with no finite path is +inf, gradient 0); NaN in a cell inside the
    band gives that pair NaN; a -inf cell gives -inf or NaN (a soft minimum that meets one
    -inf is -inf, one that meets two is NaN).
    """
    gamma, bandwidth = V.check_gamma(gamma), V.check_bandwidth(bandwidth)
    backend = V.check_backend(backend)
    if ops.traced(cost):
        return ops.cost_loss(cost, gamma, bandwidth, backend, x_lengths, y_lengths)
    if autocast_on(cost):
        with torch.autocast(cost.device.type, enabled=False):
            return softdtw_from_cost(
                float32(cost),
                gamma=gamma,
                bandwidth=bandwidth,
                backend=backend,
                x_lengths=x_lengths,
                y_lengths=y_lengths,
            )
    cost, unbatched = V.check_cost(cost)
    B, N, M = cost.shape
    pairs = Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, cost.device))
    plan = engine.plan_cost(gamma, bandwidth, backend, cost)
    guarded = plan.backend.prepare_cost(cost)
    out = engine.cost_values(plan, guarded, pairs)
    return out[0] if unbatched else out
