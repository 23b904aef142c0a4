"""The CPU backend: Numba kernels parallel over the batch (:mod:`sdtw.cpu`), and the
checkpointed mode from the sequences (:mod:`sdtw.cpu_fused`).  Float64 inside whatever the
inputs' dtype; CUDA tensors are copied to the CPU and back.  Band: offsets ``(lo, hi)``, one
pair per entry of a table in a padded batch (:func:`sdtw.band.pair_offsets`); lengths: NumPy
tables; padding: zeroed at the entry (the base rule)."""

from __future__ import annotations

import numpy as np
import torch

from sdtw import memory as memory_model
from sdtw.band import band_offsets, pair_offsets
from sdtw.cpu import CPUSoftDTW, _tables, cpu_backward, cpu_forward
from sdtw.cpu_fused import (
    DIST_CODES,
    CPUFusedSoftDTW,
    _numpy64,
    segment_rows,
    value_and_grads,
)
from sdtw.cpu_lanes import lane_count, use_lanes
from sdtw.engine.backend import Backend, Capabilities
from sdtw.engine.pairs import Pairs

__all__ = ["CPUBackend"]


def _band(plan, N: int, M: int, pairs: Pairs) -> tuple:
    """``(lo, hi, tables)``: the band's offsets (arrays (P,) per pair in a padded batch) and
    the lengths as the kernels take them (None at full length)."""
    if pairs.x_lengths is None:
        return (*band_offsets(N, M, plan.bandwidth), None)
    tables = (pairs.x_lengths.cpu().numpy(), pairs.y_lengths.cpu().numpy())
    return (*pair_offsets(*tables, plan.bandwidth), tables)


def _dtw_value_and_grad(c: np.ndarray, lo, hi, tables, need: bool, cost: torch.Tensor):
    """Exact DTW's values and E (:mod:`sdtw.cpu_dtw`) on the cost's device and dtype."""
    from sdtw.cpu_dtw import dtw_cpu_backward, dtw_cpu_forward, dtw_cpu_values

    if not need:
        return torch.from_numpy(dtw_cpu_values(c, lo, hi, tables)).to(cost.device, cost.dtype), None
    values, R = dtw_cpu_forward(c, lo, hi, tables)
    E = dtw_cpu_backward(R, np.ones(c.shape[0]), tables)
    as_cost = lambda a: torch.from_numpy(a).to(cost.device, cost.dtype)  # noqa: E731
    return as_cost(values), as_cost(E)


def _from_sequences(plan) -> bool:
    """Whether the kernels of :mod:`sdtw.cpu_fused` run the call from x and y: the
    checkpointed mode, and soft-DTW's full mode with a named cost (the cost built and its
    gradient taken inside the kernels: no E (B, N, M), no torch work between the kernels,
    whose OpenMP pools fight Numba's on a few cores; 1.3-2.5x faster than the cost path on
    2 cores at B = 32, N = 64 to 512)."""
    if plan.checkpoint:
        return True
    return (
        plan.recurrence.name == "softdtw" and isinstance(plan.dist, str) and plan.dist in DIST_CODES
    )


class CPUBackend(Backend):
    name = "cpu"
    caps = Capabilities(
        fused=(),
        checkpoint=("sqeuclidean", "euclidean", "l1"),
        float64=True,
        devices=("cpu", "cuda"),
        band="offsets (lo, hi), per pair with lengths",
        lengths="NumPy tables (n, m, lo, hi) per pair",
        recurrences=("softdtw", "dtw", "softmsm"),
    )

    def _full_bytes(self, opts, x, y, grad: bool) -> int:
        B = x.shape[0]
        lanes = lane_count(B) if use_lanes(B, opts.dist) else 0
        return memory_model.cpu_full_bytes(B, x.shape[1], y.shape[1], grad, lanes)

    def reads_memory(self, opts, x, y, grad: bool) -> bool:
        if opts.memory != "auto":
            return False
        return self._full_bytes(opts, x, y, grad) >= memory_model.QUERY_FROM

    def full_too_big(self, opts, x, y, grad: bool) -> bool:
        # (below QUERY_FROM the full mode is taken without reading the free memory: a read per
        # call would cost a small call more host time than its kernels)
        need = self._full_bytes(opts, x, y, grad)
        if need < memory_model.QUERY_FROM:
            return False
        free = memory_model.available_bytes()
        return free is not None and need > memory_model.AUTO_FRACTION * free

    def cost_values(self, plan, cost: torch.Tensor, pairs: Pairs) -> torch.Tensor:
        lo, hi, tables = _band(plan, cost.shape[1], cost.shape[2], pairs)
        if plan.recurrence.name == "dtw":
            from sdtw.cpu_dtw import CPUDTW

            return CPUDTW.apply(cost, lo, hi, tables)
        if cost.device.type != "cpu":
            return CPUSoftDTW.apply(cost.cpu(), plan.gamma, lo, hi, tables).to(cost.device)
        return CPUSoftDTW.apply(cost, plan.gamma, lo, hi, tables)

    def cost_value_and_grad(self, plan, cost: torch.Tensor, pairs: Pairs, need: bool):
        lo, hi, tables = _band(plan, cost.shape[1], cost.shape[2], pairs)
        c = cost.detach().to("cpu", torch.float64).contiguous().numpy()
        if plan.recurrence.name == "dtw":
            return _dtw_value_and_grad(c, lo, hi, tables, need, cost)
        values, R = cpu_forward(c, plan.gamma, lo, hi, tables)
        out = torch.from_numpy(values).to(cost.device, cost.dtype)
        if not need:
            return out, None
        E = cpu_backward(R, plan.gamma, lo, hi, np.ones(c.shape[0]), tables)
        return out, torch.from_numpy(E).to(cost.device, cost.dtype)

    def table_values(self, plan, X, Y, i, j, x_lengths, y_lengths):
        # (squared Euclidean cost; pairs as SIMD lanes, see sdtw.cpu_pairs)
        if plan.dist != "sqeuclidean" or plan.recurrence.name not in ("dtw", "softdtw"):
            return None
        from sdtw.cpu_pairs import pair_table_values

        N, M = X.shape[1], Y.shape[1]
        I, J = i.cpu().numpy(), j.cpu().numpy()
        ns = np.full(I.shape, N) if x_lengths is None else x_lengths.cpu().numpy()[I]
        ms = np.full(J.shape, M) if y_lengths is None else y_lengths.cpu().numpy()[J]
        los, his = pair_offsets(ns, ms, plan.bandwidth)
        a, b = (t.detach().to("cpu", torch.float64).contiguous().numpy() for t in (X, Y))
        gamma = plan.gamma if plan.recurrence.name == "softdtw" else 0.0
        values = pair_table_values(a, b, I, J, ns, ms, los, his, gamma)
        return torch.from_numpy(values).to(X.device, X.dtype)

    def _checkpoint_tables(self, plan, x, y, pairs: Pairs) -> tuple:
        B, N, M = x.shape[0], x.shape[1], y.shape[1]
        lo, hi, tables = _band(plan, N, M, pairs)
        return _tables(B, N, M, lo, hi, tables)

    def _segments(self, plan, x, y) -> int | None:
        """The from-sequences kernels' ``K``: rows per checkpoint segment, or None for the
        full table (a named cost: the cost built and its gradient taken inside the kernels,
        with no E (B, N, M) and no torch work between them)."""
        return segment_rows(x.shape[1], y.shape[1]) if plan.checkpoint else None

    def pair_values(self, plan, x, y, pairs: Pairs) -> torch.Tensor:
        if not _from_sequences(plan):
            return super().pair_values(plan, x, y, pairs)
        tables = self._checkpoint_tables(plan, x, y, pairs)
        K = self._segments(plan, x, y)
        return CPUFusedSoftDTW.apply(x, y, plan.dist, plan.gamma, tables, K)

    def pair_value_and_grads(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        if not _from_sequences(plan):
            return super().pair_value_and_grads(plan, x, y, pairs, need_x, need_y)
        tables = self._checkpoint_tables(plan, x, y, pairs)
        K = self._segments(plan, x, y)
        values, gx, gy = value_and_grads(
            _numpy64(x), _numpy64(y), plan.dist, plan.gamma, tables, K, need_x or need_y
        )
        out = torch.from_numpy(values).to(x.device, x.dtype)
        gx = torch.from_numpy(gx).to(x.device, x.dtype) if need_x else None
        gy = torch.from_numpy(gy).to(y.device, y.dtype) if need_y else None
        return out, gx, gy

    def sequence_value_and_grads(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        """Soft-MSM's Numba kernels, float64 inside: the (pair, channel) tasks as SIMD lanes
        (:mod:`sdtw.cpu_msm_lanes`) where there are enough of them, else a task per thread
        (:mod:`sdtw.cpu_msm`)."""
        from sdtw.cpu_msm import msm_cpu_backward, msm_cpu_forward
        from sdtw.cpu_msm_lanes import msm_lane_backward, msm_lane_forward, use_msm_lanes

        lo, hi, tables = _band(plan, x.shape[1], y.shape[1], pairs)
        c = plan.recurrence.param("c")
        a, b = _numpy64(x), _numpy64(y)
        B, N, D = a.shape
        ones = np.ones(B)
        keep = need_x or need_y
        # Values alone (cdist, knn, no_grad) always take the lanes, two rows per task: a lane's
        # value does not depend on the lanes beside it, so every chunking of an all-pairs
        # matrix gives the same bits (a kernel chosen by the chunk's size would not).
        if not keep or use_msm_lanes(B * D):
            per_pair = _tables(B, N, b.shape[1], lo, hi, tables)
            values, R = msm_lane_forward(a, b, c, plan.gamma, per_pair, keep=keep)
            values = values.reshape(B, D).sum(axis=1)
            backward = lambda: msm_lane_backward(a, b, c, plan.gamma, per_pair, R, ones)  # noqa: E731
        else:
            values, R = msm_cpu_forward(a, b, c, plan.gamma, lo, hi, tables)
            backward = lambda: msm_cpu_backward(a, b, R, c, plan.gamma, lo, hi, ones, tables)  # noqa: E731
        out = torch.from_numpy(values).to(x.device, x.dtype)
        if not (need_x or need_y):
            return out, None, None
        gx, gy = backward()
        gx = torch.from_numpy(gx).to(x.device, x.dtype) if need_x else None
        gy = torch.from_numpy(gy).to(y.device, y.dtype) if need_y else None
        return out, gx, gy

    def sequence_alignment(self, plan, x, y, pairs: Pairs) -> torch.Tensor:
        """Soft-MSM's match occupancies from the lanes' backward (:mod:`sdtw.cpu_msm_lanes`;
        as many lanes as tasks, up to a group's)."""
        from sdtw.cpu_msm_lanes import MSM_LANES, msm_lane_backward, msm_lane_forward

        lo, hi, tables = _band(plan, x.shape[1], y.shape[1], pairs)
        c = plan.recurrence.param("c")
        a, b = _numpy64(x), _numpy64(y)
        B, N, D = a.shape
        per_pair = _tables(B, N, b.shape[1], lo, hi, tables)
        lanes = min(MSM_LANES, B * D)
        _, R = msm_lane_forward(a, b, c, plan.gamma, per_pair, lanes)
        A = msm_lane_backward(a, b, c, plan.gamma, per_pair, R, np.ones(B), match=True)[2]
        return torch.from_numpy(A.mean(axis=1)).to(x.device, x.dtype)
