"""Each pair's lengths and band offsets on the device, as the kernels of exact DTW and
Soft-MSM read them: one int64 tensor (4, B) of rows ``n, m, lo, hi``."""

from __future__ import annotations

import numpy as np
import torch

from sdtw.cuda._launch import kept

__all__ = ["device_tables"]

_uniform: dict[tuple, torch.Tensor] = {}


def device_tables(tables, dev: torch.device) -> torch.Tensor:
    """``tables`` on ``dev`` as one int64 tensor (4, B): a tensor (4, B) (per-pair lengths,
    made on the device) as it is, or four int64 NumPy arrays (B,).

    Where every pair of the arrays has the same entries (no per-pair lengths: the usual case)
    a tensor made by fills on the device, once per (device, B, entries) and kept (32 B bytes
    each, never freed: a captured CUDA graph may hold its address), the kernels only read it:
    a copy from host memory per call would cost a synchronisation (torch synchronises a
    blocking host-to-device copy, so the GPU's queue would drain before the kernels).  One
    first asked for while a CUDA graph is captured is made for that call only (its fills are
    the graph's nodes, run at each replay).  Other arrays go by a non-blocking copy (from
    pageable memory: staged before the call returns, usually without a sync)."""
    if isinstance(tables, torch.Tensor):
        if tables.dim() != 2 or tables.shape[0] != 4:
            raise ValueError(f"sdtw: tables must be a (4, B) tensor, got {tuple(tables.shape)}")
        return tables.to(dev, torch.int64).contiguous()
    arr = np.stack(tables).astype(np.int64)
    if arr.shape[1] == 0 or not (arr == arr[:, :1]).all():
        return torch.from_numpy(arr).to(dev, non_blocking=True)
    entries = arr[:, 0].tolist()

    def fills() -> torch.Tensor:
        t = torch.empty(arr.shape, dtype=torch.int64, device=dev)
        for row, value in zip(t, entries, strict=True):
            row.fill_(value)
        return t

    return kept(_uniform, (dev, arr.shape[1], *entries), dev, fills)
