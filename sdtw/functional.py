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
when numba-cuda cannot run) and ``"cpu"`` for CPU tensors (:func:`resolve_backend`).
``fused=None`` means fused when the backend has a fused kernel and ``dist="sqeuclidean"``,
unfused otherwise; on CUDA it is decided per call (:func:`sdtw.cuda.policy.fused_default`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sdtw import _validation as V
from sdtw import memory as memory_model
from sdtw import ops
from sdtw._autograd import guard
from sdtw.band import band_offsets, band_radius, pair_offsets
from sdtw.cpu import CPUSoftDTW, _tables
from sdtw.distances import pairwise
from sdtw.reference import softdtw_reference

__all__ = ["BACKENDS", "Backend", "Options", "resolve_backend", "softdtw", "softdtw_from_cost"]


@dataclass(frozen=True)
class Backend:
    """What a backend offers: ``fused`` kernels for the squared Euclidean cost, a ``float64``
    computation inside whatever the inputs' dtype, the ``device`` type its kernels take
    (``None``: any; the CPU paths copy CUDA tensors to the CPU)."""

    name: str
    fused: bool
    float64: bool
    device: str | None


#: The backend table as code (see the module docstring).
BACKENDS = {
    "reference": Backend("reference", fused=False, float64=True, device=None),
    "cpu": Backend("cpu", fused=False, float64=True, device=None),
    "cuda": Backend("cuda", fused=True, float64=False, device="cuda"),
}


@dataclass(frozen=True)
class Options:
    """The validated settings of one call (or of a :class:`~sdtw.SoftDTW` module).

    ``backend`` may still be ``"auto"`` here; :func:`resolve_backend` resolves it per call (the
    resolved name travels beside the options: a new frozen object per call costs host time).
    """

    gamma: float = 1.0
    bandwidth: int | None = None
    normalize: bool = False
    dist: str | Callable = "sqeuclidean"
    fused: bool | None = None
    backend: str = "auto"
    memory: str = "auto"

    @classmethod
    def make(cls, *, gamma, bandwidth, normalize, dist, fused, backend, memory="auto") -> Options:
        """The options after validation (each error names its argument)."""
        return cls(
            gamma=V.check_gamma(gamma),
            bandwidth=V.check_bandwidth(bandwidth),
            normalize=V.check_flag("normalize", normalize),
            dist=V.check_dist(dist),
            fused=V.check_fused(fused),
            backend=V.check_backend(backend),
            memory=V.check_memory(memory),
        )


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
    """The ``"auto"`` rule, and a check that the backend can run tensors on ``device``:
    ``"auto"`` is ``"cuda"`` for CUDA tensors (``"cpu"``, with a warning, where the CUDA
    kernels cannot run) and ``"cpu"`` otherwise."""
    if backend == "auto":
        if device.type != "cuda":
            return "cpu"
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


#: Validated per-pair lengths: (x_lengths, y_lengths), int64 (B,) on the inputs' device.
Lengths = tuple[torch.Tensor, torch.Tensor]


def _cost_loss(
    cost: torch.Tensor, opts: Options, backend: str, lengths: Lengths | None = None
) -> torch.Tensor:
    """Soft-DTW of a validated cost (B, N, M) on a resolved backend -> (B,); with
    ``lengths``, pair b's value is that of ``cost[b, :n_b, :m_b]`` (nothing past it is read,
    and its gradient there is zero)."""
    N, M = cost.shape[1], cost.shape[2]
    if backend == "reference":
        if lengths is None:
            return softdtw_reference(cost, opts.gamma, opts.bandwidth)
        ns, ms = (t.tolist() for t in lengths)
        return torch.cat(
            [
                softdtw_reference(cost[b : b + 1, :n, :m], opts.gamma, opts.bandwidth)
                for b, (n, m) in enumerate(zip(ns, ms, strict=True))
            ]
        )
    if backend == "cpu":
        if lengths is None:
            lo, hi = band_offsets(N, M, opts.bandwidth)
            tables = None
        else:
            tables = tuple(t.cpu().numpy() for t in lengths)
            lo, hi = pair_offsets(*tables, opts.bandwidth)
        if cost.device.type != "cpu":
            return CPUSoftDTW.apply(cost.cpu(), opts.gamma, lo, hi, tables).to(cost.device)
        return CPUSoftDTW.apply(cost, opts.gamma, lo, hi, tables)
    if lengths is None:
        return _cuda_module().softdtw_cost(cost, opts.gamma, *band_offsets(N, M, opts.bandwidth))
    radius = band_radius(N, M, opts.bandwidth)
    return _cuda_module().softdtw_cost(cost, opts.gamma, radius, 0, torch.cat(lengths))


def _fused_by_default(x: torch.Tensor, y: torch.Tensor) -> bool:
    """The ``fused=None`` rule (CUDA, squared Euclidean): see :func:`softdtw`."""
    cuda = _cuda_module()
    if cuda.needs_grad(x, y):
        return True
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    return not cuda.cost_fits(B, N, M, x.dtype, x.device)


def _checkpointed(x: torch.Tensor, y: torch.Tensor, opts: Options, name: str) -> bool:
    """Whether a call from sequences takes the checkpointed mode (see :func:`softdtw`'s
    ``memory``): where asked, or for ``"auto"`` where the full mode's buffers would take more
    than :data:`sdtw.memory.AUTO_FRACTION` of the memory available now (host memory on the
    CPU backend; on CUDA, with gradients and the fused squared Euclidean, the GPU's free
    memory, asked only from :data:`sdtw.memory.QUERY_FROM` bytes on).  It recomputes the DP,
    so it is slower where both fit."""
    if opts.memory == "full":
        return False
    if opts.memory == "checkpoint":
        if callable(opts.dist) or name == "reference":
            raise ValueError(
                "memory='checkpoint' recomputes the cost from x and y: it needs a named dist "
                f"and the cpu or cuda backend; got dist={opts.dist!r}, backend={name!r}"
            )
        return True
    if callable(opts.dist) or name == "reference":
        return False
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    grad = torch.is_grad_enabled() and (x.requires_grad or y.requires_grad)
    if name == "cpu":
        free = memory_model.available_bytes()
        need = memory_model.cpu_full_bytes(B, N, M, grad)
        return free is not None and need > memory_model.AUTO_FRACTION * free
    # CUDA: with gradients (without, the fused forward stores nothing anyway), fused, on a GPU
    if not grad or opts.dist != "sqeuclidean" or opts.fused is False or x.device.type != "cuda":
        return False
    itemsize = 8 if x.dtype == torch.float64 else 4
    need = memory_model.cuda_full_bytes(B, N, M, x.shape[2], itemsize)
    if need < memory_model.QUERY_FROM:
        return False
    free, _ = torch.cuda.mem_get_info(x.device)
    return need > memory_model.AUTO_FRACTION * free


def _cpu_checkpoint_loss(
    x: torch.Tensor, y: torch.Tensor, opts: Options, lengths: Lengths | None
) -> torch.Tensor:
    """The CPU backend's checkpointed mode (:mod:`sdtw.cpu_fused`) -> (B,) in x's dtype."""
    from sdtw.cpu_fused import CPUFusedSoftDTW, segment_rows

    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    if lengths is None:
        lo, hi = band_offsets(N, M, opts.bandwidth)
        tables = _tables(B, N, M, lo, hi, None)
    else:
        ns, ms = (t.cpu().numpy() for t in lengths)
        tables = _tables(B, N, M, *pair_offsets(ns, ms, opts.bandwidth), (ns, ms))
    return CPUFusedSoftDTW.apply(x, y, opts.dist, opts.gamma, tables, segment_rows(N, M))


def _cuda_checkpoint_loss(
    x: torch.Tensor, y: torch.Tensor, opts: Options, lengths: Lengths | None
) -> torch.Tensor:
    """The CUDA backend's checkpointed mode (fused kernels; :mod:`sdtw.cuda.kernels.recompute`)
    -> (B,) in x's dtype."""
    if opts.dist != "sqeuclidean" or opts.fused is False:
        raise ValueError(
            "memory='checkpoint' on the CUDA backend runs the fused squared-Euclidean kernels: "
            f"it needs dist='sqeuclidean' and fused=None or True; got dist={opts.dist!r}, "
            f"fused={opts.fused!r}"
        )
    N, M = x.shape[1], y.shape[1]
    lens = None if lengths is None else torch.cat(lengths)
    radius = band_radius(N, M, opts.bandwidth)  # (the lengths kernels' band, as with lengths)
    return _cuda_module().softdtw_sqeuclidean(x, y, opts.gamma, radius, 0, True, lens, True)


def _pair_loss(
    x: torch.Tensor, y: torch.Tensor, opts: Options, name: str, lengths: Lengths | None = None
) -> torch.Tensor:
    """Soft-DTW of validated batched sequences (no normalisation) on the resolved backend
    ``name`` -> (B,), each pair over its own ``lengths`` (None: all N, M)."""
    if _checkpointed(x, y, opts, name):
        if name == "cpu":
            return _cpu_checkpoint_loss(x, y, opts, lengths)
        return _cuda_checkpoint_loss(x, y, opts, lengths)
    backend = BACKENDS[name]
    can_fuse = backend.fused and opts.dist == "sqeuclidean"
    if opts.fused is True and not can_fuse:
        raise ValueError(
            "fused=True needs dist='sqeuclidean' and the CUDA backend; "
            f"got dist={opts.dist!r}, backend={name!r}"
        )
    if can_fuse:  # fused or not, the CUDA kernels build the squared distances
        fused = _fused_by_default(x, y) if opts.fused is None else opts.fused
        N, M = x.shape[1], y.shape[1]
        cuda = _cuda_module()
        if lengths is None:
            lo, hi = band_offsets(N, M, opts.bandwidth)
            return cuda.softdtw_sqeuclidean(x, y, opts.gamma, lo, hi, fused)
        radius = band_radius(N, M, opts.bandwidth)
        return cuda.softdtw_sqeuclidean(x, y, opts.gamma, radius, 0, fused, torch.cat(lengths))
    if backend.float64 and not callable(opts.dist):
        # The CPU paths work in float64 anyway: build the cost there too, so float32
        # inputs lose nothing to float32 rounding of the distances.
        cost = pairwise(x.double(), y.double(), opts.dist)
        return _cost_loss(cost, opts, name, lengths).to(x.dtype)
    cost = pairwise(x, y, opts.dist)  # (a callable's: any float dtype)
    out = _cost_loss(cost, opts, name, lengths)
    return out if out.dtype == x.dtype else out.to(x.dtype)


def _autocast_on(t: object) -> bool:
    """Whether autocast is on for ``t``'s device type (a tensor; anything else: no)."""
    if not isinstance(t, torch.Tensor) or t.device.type not in ("cpu", "cuda"):
        return False
    return torch.is_autocast_enabled(t.device.type)


def _f32(t: object) -> object:
    """A float16/bfloat16 tensor as float32 (anything else as it is: validation follows)."""
    if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    return t


def softdtw_options(
    x: torch.Tensor,
    y: torch.Tensor,
    opts: Options,
    x_lengths: object = None,
    y_lengths: object = None,
) -> torch.Tensor:
    """:func:`softdtw` with validated :class:`Options` (the module's entry: its settings were
    validated at construction)."""
    if torch.compiler.is_compiling():  # torch.compile / torch.export: one operator
        return ops.pair_loss(x, y, opts, x_lengths, y_lengths)
    if _autocast_on(x):  # as PyTorch's losses: float32 under autocast
        with torch.autocast(x.device.type, enabled=False):
            return softdtw_options(_f32(x), _f32(y), opts, x_lengths, y_lengths)
    x, y, unbatched = V.check_sequences(x, y)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    lengths = V.check_lengths(x_lengths, y_lengths, B, N, M, x.device)
    name = resolve_backend(opts.backend, x.device)
    if name != "cuda":  # (the CUDA path refuses a double backward in its own node)
        x, y = guard(x, name), guard(y, name)
    if lengths is not None:
        xl, yl = lengths
        if not (name == "cuda" and opts.dist == "sqeuclidean"):  # (those kernels zero it)
            x, y = V.zero_padding(x, xl), V.zero_padding(y, yl)
    if not opts.normalize:
        out = _pair_loss(x, y, opts, name, lengths)
    elif N == M:
        # One launch for the three terms: stack (x, y), (x, x), (y, y) along the batch.
        stacked = None if lengths is None else (torch.cat([xl, xl, yl]), torch.cat([yl, xl, yl]))
        both = _pair_loss(torch.cat([x, x, y]), torch.cat([y, x, y]), opts, name, stacked)
        out = both[:B] - 0.5 * (both[B : 2 * B] + both[2 * B :])
    else:
        xx = None if lengths is None else (xl, xl)
        yy = None if lengths is None else (yl, yl)
        selfs = _pair_loss(x, x, opts, name, xx) + _pair_loss(y, y, opts, name, yy)
        out = _pair_loss(x, y, opts, name, lengths) - 0.5 * selfs
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
        Smoothing, > 0.  ``gamma -> 0`` recovers DTW.
    bandwidth : int or None
        Sakoe-Chiba radius; for ``N != M`` the band follows tslearn's ``sakoe_chiba_mask``
        (:func:`sdtw.sakoe_chiba_mask`).  ``None`` or ``<= 0`` disables it.
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
        (CUDA backend and ``dist="sqeuclidean"``, else unfused) picks per call:

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
          the paper's grid), else fused, whose forward computes the distances inside the DP
          kernel (their dot products on the float64 tensor cores) and stores no (N, M) buffer
          at all.
    backend : {"auto", "cpu", "cuda", "reference"}
        See the module docstring for the table and the ``"auto"`` rule.
    x_lengths, y_lengths : integer Tensor (B,) (any device), sequence of B ints, or None
        Each pair's own lengths in a padded batch, ``1 <= x_lengths[b] <= N`` and
        ``1 <= y_lengths[b] <= M`` (None: all N, or all M).  Pair b's value is that of
        ``x[b, :x_lengths[b]]`` and ``y[b, :y_lengths[b]]``; its band follows those lengths,
        ``normalize`` uses them in the self terms, what the padding holds never matters (NaN
        included) and the gradient there is exactly 0 (for a finite upstream gradient: the
        CUDA squared-Euclidean path scales its zeros by it, so a pair whose upstream gradient
        is NaN or inf gets NaN there too, as everywhere else in that pair's gradient; the
        other paths keep 0).  Lengths on a CUDA device are checked
        with one read back to the host (pass them on the CPU to avoid that sync).
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
        As in :func:`softdtw`.
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
    if torch.compiler.is_compiling():
        backend = V.check_backend(backend)
        return ops.cost_loss(cost, gamma, bandwidth, backend, x_lengths, y_lengths)
    if _autocast_on(cost):
        with torch.autocast(cost.device.type, enabled=False):
            return softdtw_from_cost(
                _f32(cost),
                gamma=gamma,
                bandwidth=bandwidth,
                backend=backend,
                x_lengths=x_lengths,
                y_lengths=y_lengths,
            )
    cost, unbatched = V.check_cost(cost)
    opts = Options(gamma=gamma, bandwidth=bandwidth)
    B, N, M = cost.shape
    lengths = V.check_lengths(x_lengths, y_lengths, B, N, M, cost.device)
    name = resolve_backend(V.check_backend(backend), cost.device)
    out = _cost_loss(guard(cost, name), opts, name, lengths)
    return out[0] if unbatched else out
