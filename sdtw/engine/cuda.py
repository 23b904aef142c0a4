"""The CUDA backend: Numba CUDA kernels (:mod:`sdtw.cuda`, imported on first use: nothing
touches numba.cuda at ``import sdtw``).  Band: offsets ``(lo, hi)`` at full length, the radius
with per-pair lengths (each pair's offsets derived in the kernels); lengths: one int64 (2 P,)
tensor on the device, x's then y's; padding: the squared-Euclidean kernels zero their own
copies (inside a replayed graph's work), the cost path gets it zeroed at the entry.  The
squared Euclidean is fused (computed in the kernels) or built by the park kernel; any other
cost is built by :func:`sdtw.distances.pairwise` in the inputs' dtype."""

from __future__ import annotations

import torch

from sdtw import memory as memory_model
from sdtw._validation import zero_padding
from sdtw.band import band_offsets, band_radius, pair_offsets
from sdtw.engine.backend import Backend, Capabilities
from sdtw.engine.pairs import Pairs

__all__ = ["CUDABackend"]

_cuda = None


def kernels():
    """:mod:`sdtw.cuda`, imported on first use, then kept (an import statement per call is
    host time on every step)."""
    global _cuda
    if _cuda is None:
        from sdtw import cuda

        _cuda = cuda
    return _cuda


def _band(plan, N: int, M: int, pairs: Pairs) -> tuple:
    """``(lo, hi, lengths)`` as the kernels take them: the offsets and None at full length;
    the radius, 0 and the (2 P,) lengths in a padded batch."""
    if pairs.x_lengths is None:
        return (*band_offsets(N, M, plan.bandwidth), None)
    lens = torch.cat([pairs.x_lengths, pairs.y_lengths])
    return band_radius(N, M, plan.bandwidth), 0, lens


def _pair_tables(pairs: Pairs, bandwidth) -> torch.Tensor:
    """Each pair's ``n, m, lo, hi`` as one int64 tensor (4, B) on the lengths' device, made
    there (no copy to the host and back, each a synchronisation)."""
    ns, ms = pairs.x_lengths.long(), pairs.y_lengths.long()
    return torch.stack([ns, ms, *pair_offsets(ns, ms, bandwidth)])


def _dtw(plan, cost: torch.Tensor, pairs: Pairs, need: bool, grad_out=None) -> tuple:
    """Exact DTW's values and E by its own kernels (:mod:`sdtw.cuda.dtw`), each pair's band
    offsets and lengths in NumPy tables as the CPU kernels take them, or, with per-pair
    lengths, in a tensor made on the device (:func:`_pair_tables`)."""
    from sdtw.cpu import _tables
    from sdtw.cuda.dtw import dtw_cuda

    B, N, M = cost.shape
    if pairs.x_lengths is None:
        lo, hi = band_offsets(N, M, plan.bandwidth)
        tables = _tables(B, N, M, lo, hi, None)
    else:
        tables = _pair_tables(pairs, plan.bandwidth)
    values, E = dtw_cuda(cost, tables, need, grad_out)
    return values.to(cost.dtype), None if E is None else E.to(cost.dtype)


class _DTWFunction(torch.autograd.Function):
    """Exact DTW of a cost on the GPU, attached to autograd (its backward backtracks with the
    upstream gradient folded in; the table is kept only when the cost needs a gradient)."""

    @staticmethod
    def forward(ctx, cost: torch.Tensor, plan, pairs: Pairs) -> torch.Tensor:
        values, E = _dtw(plan, cost, pairs, cost.requires_grad)
        ctx.E = E
        return values

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        return ctx.E * grad_out[:, None, None].to(ctx.E.dtype), None, None


class CUDABackend(Backend):
    name = "cuda"
    table_cells = 2**32  # (a launch's host cost hidden behind a ms or more of the kernel's work)
    caps = Capabilities(
        fused=("sqeuclidean",),
        checkpoint=("sqeuclidean",),
        float64=False,
        devices=("cuda",),
        band="offsets (lo, hi); the radius with per-pair lengths",
        lengths="one int64 (2 P,) device tensor",
        recurrences=("softdtw", "dtw", "softmsm"),
    )

    def usable(self, device: torch.device) -> tuple[bool, str]:
        return kernels().cuda_usable()

    def check_device(self, device: torch.device) -> None:
        if device.type != "cuda" and not kernels().simulator_enabled():
            raise ValueError(
                f"backend='cuda' needs CUDA tensors, got tensors on {device} "
                "(or set NUMBA_ENABLE_CUDASIM=1 to run the kernels in the CPU simulator)"
            )

    def fused_default(self, x, y, grad: bool) -> bool:
        if grad:
            return True
        B, N, M = x.shape[0], x.shape[1], y.shape[1]
        return not kernels().cost_fits(B, N, M, x.dtype, x.device)

    def _auto_query(self, opts, x, y, grad: bool) -> bool:
        """Whether ``memory="auto"`` asks the GPU for its free memory here: with gradients,
        the fused squared Euclidean, on a GPU, from :data:`sdtw.memory.QUERY_FROM` bytes."""
        if not grad or opts.dist != "sqeuclidean" or opts.fused is False:
            return False
        if x.device.type != "cuda":
            return False
        itemsize = 8 if x.dtype == torch.float64 else 4
        B, N, M = x.shape[0], x.shape[1], y.shape[1]
        need = memory_model.cuda_full_bytes(B, N, M, x.shape[2], itemsize)
        return need >= memory_model.QUERY_FROM

    def full_too_big(self, opts, x, y, grad: bool) -> bool:
        if not self._auto_query(opts, x, y, grad):
            return False
        itemsize = 8 if x.dtype == torch.float64 else 4
        B, N, M = x.shape[0], x.shape[1], y.shape[1]
        need = memory_model.cuda_full_bytes(B, N, M, x.shape[2], itemsize)
        free, _ = torch.cuda.mem_get_info(x.device)
        return need > memory_model.AUTO_FRACTION * free

    def reads_memory(self, opts, x, y, grad: bool) -> bool:
        if opts.memory == "auto" and self._auto_query(opts, x, y, grad):
            return True
        # fused=None without gradients asks whether the cost tensor fits
        return opts.fused is None and not grad and x.device.type == "cuda"

    def check_checkpoint(self, opts) -> None:
        super().check_checkpoint(opts)
        if opts.dist != "sqeuclidean" or opts.fused is False:
            raise ValueError(
                "memory='checkpoint' on the CUDA backend runs the fused squared-Euclidean "
                "kernels: it needs dist='sqeuclidean' and fused=None or True; got "
                f"dist={opts.dist!r}, fused={opts.fused!r}"
            )

    def prepare(self, x, y, plan, pairs: Pairs) -> tuple:
        # (the CUDA nodes refuse a second derivative themselves; the squared-Euclidean
        # kernels zero the padding on their own copies)
        own = plan.dist == "sqeuclidean" and plan.recurrence.name == "softdtw"
        if pairs.x_lengths is not None and not own:
            x, y = zero_padding(x, pairs.x_lengths), zero_padding(y, pairs.y_lengths)
        return x, y

    def cost_values(self, plan, cost: torch.Tensor, pairs: Pairs) -> torch.Tensor:
        if plan.recurrence.name == "dtw":
            return _DTWFunction.apply(cost, plan, pairs)
        lo, hi, lens = _band(plan, cost.shape[1], cost.shape[2], pairs)
        return kernels().softdtw_cost(cost, plan.gamma, lo, hi, lens)

    def cost_value_and_grad(self, plan, cost: torch.Tensor, pairs: Pairs, need: bool):
        if plan.recurrence.name == "dtw":
            return _dtw(plan, cost, pairs, need)
        lo, hi, lens = _band(plan, cost.shape[1], cost.shape[2], pairs)
        return kernels().cost_value_and_grad(cost, plan.gamma, lo, hi, lens, need)

    def _sqeuclidean_args(self, plan, x, y, pairs: Pairs) -> tuple:
        N, M = x.shape[1], y.shape[1]
        if plan.checkpoint:  # (the lengths kernels' band, a radius, whatever the lengths)
            lens = None if pairs.x_lengths is None else torch.cat(pairs.lengths)
            return band_radius(N, M, plan.bandwidth), 0, lens
        return _band(plan, N, M, pairs)

    def pair_values(self, plan, x, y, pairs: Pairs) -> torch.Tensor:
        if plan.dist != "sqeuclidean" or plan.recurrence.name != "softdtw":
            return super().pair_values(plan, x, y, pairs)
        lo, hi, lens = self._sqeuclidean_args(plan, x, y, pairs)
        return kernels().softdtw_sqeuclidean(
            x, y, plan.gamma, lo, hi, plan.fused, lens, plan.checkpoint
        )

    def pair_value_and_grads(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        if plan.dist != "sqeuclidean" or plan.recurrence.name != "softdtw":
            return super().pair_value_and_grads(plan, x, y, pairs, need_x, need_y)
        lo, hi, lens = self._sqeuclidean_args(plan, x, y, pairs)
        return kernels().sqeuclidean_value_and_grads(
            x, y, plan.gamma, lo, hi, plan.fused, need_x, need_y, lens, plan.checkpoint
        )

    def table_values(self, plan, X, Y, i, j, x_lengths, y_lengths):
        # (soft-DTW and exact DTW, squared Euclidean: the forward-only all-pairs kernels)
        if plan.dist != "sqeuclidean" or plan.recurrence.name not in ("softdtw", "dtw"):
            return None
        from sdtw.cuda.allpairs import table_values

        return table_values(X, Y, i, j, x_lengths, y_lengths, plan.gamma, plan.bandwidth)

    def sequence_value_and_grads(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        """Soft-MSM's kernels (:mod:`sdtw.cuda.msm`: float64 R, float32 transcendentals for
        float32 inputs), each pair's band offsets and lengths in NumPy tables as the CPU
        kernels take them, or, with per-pair lengths, in a tensor made on the device."""
        values, gx, gy = self._msm(plan, x, y, pairs, need_x, need_y)
        gx = gx.to(x.dtype) if need_x else None
        gy = gy.to(y.dtype) if need_y else None
        return values.to(x.dtype), gx, gy

    def sequence_step(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        """:meth:`sequence_value_and_grads` from a replayed CUDA graph of its GPU work where
        the same call (no per-pair lengths) has run eagerly twice (:mod:`sdtw.cuda._graphs`,
        as soft-DTW's calls; ``sdtw.cuda.set_graphs(False)`` turns it off): the kernels'
        launches and torch's small ops cost host time that a small step waits for.  The
        gradients are copied out of the graph's buffers (into the inputs' dtypes) under the
        graph's lock."""
        if pairs.x_lengths is not None:
            return self.sequence_value_and_grads(plan, x, y, pairs, need_x, need_y)
        from sdtw.cuda import _graphs

        def compute(xk, yk):
            return self._msm(plan, xk, yk, pairs, need_x, need_y)

        rec = plan.recurrence
        params = (rec.name, rec.params, plan.gamma, plan.bandwidth, need_x, need_y)
        # (memory: a table per channel, 12 bytes a cell over rows rounded up to the blocks'
        # strips (at most twice N), in soft-DTW's cells of 8 bytes)
        cells = 3 * x.shape[0] * x.shape[2] * x.shape[1] * y.shape[1]
        dtypes = (x.dtype, y.dtype)
        done = _graphs.call((x, y), params, dtypes, compute, cells=cells, copies=dtypes)
        if done is None:
            return self.sequence_value_and_grads(plan, x, y, pairs, need_x, need_y)
        values, (gx, gy) = done
        return values.to(x.dtype), gx, gy

    def _msm(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        """:func:`sdtw.cuda.msm.msm_cuda`'s values and float64 gradients (None where not
        asked for)."""
        from sdtw.cpu import _tables
        from sdtw.cuda.msm import msm_cuda

        B, N, M = x.shape[0], x.shape[1], y.shape[1]
        if pairs.x_lengths is None:
            tables = _tables(B, N, M, *band_offsets(N, M, plan.bandwidth), None)
        else:
            tables = _pair_tables(pairs, plan.bandwidth)
        c = plan.recurrence.param("c")
        values, gx, gy = msm_cuda(x, y, c, plan.gamma, tables, need_x or need_y)
        return values, gx if need_x else None, gy if need_y else None

    def sequence_alignment(self, plan, x, y, pairs: Pairs) -> torch.Tensor:
        """Soft-MSM's alignment has no CUDA kernel: the CPU backend's (the same float64
        kernels' answer), on x's device, with a warning."""
        import warnings

        from sdtw.engine.cpu import CPUBackend

        warnings.warn(
            "sdtw.alignment(measure='softmsm') has no CUDA kernels: the alignment is computed "
            "by the CPU backend (inputs copied to the host) and returned on the GPU",
            RuntimeWarning,
            stacklevel=4,
        )
        # (the CPU backend reads the lengths' tables to the host itself)
        return CPUBackend().sequence_alignment(plan, x.cpu(), y.cpu(), pairs).to(x.device)
