"""Each pair's lengths and band offsets on the device, as the kernels of exact DTW and
Soft-MSM read them: one int64 tensor (4, B) of rows ``n, m, lo, hi``."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["device_tables"]

_uniform: dict[tuple, torch.Tensor] = {}


def device_tables(tables, dev: torch.device) -> torch.Tensor:
    """``tables`` on ``dev`` as one int64 tensor (4, B): a tensor (4, B) (per-pair lengths,
    computed on the device) as it is, or four int64 NumPy arrays (B,).  Where every pair of
    the arrays has the same entries (no per-pair lengths: the usual case) a tensor kept from an
    earlier call (read only): torch synchronises a blocking copy from host memory, so a copy
    per call would drain the stream's queued work before the kernels; other arrays go by a
    non-blocking copy (from pageable memory: staged before the call returns, no sync)."""
    if isinstance(tables, torch.Tensor):
        return tables.to(dev, torch.int64)
    arr = np.stack(tables).astype(np.int64)
    if arr.shape[1] == 0 or not (arr == arr[:, :1]).all():
        return torch.from_numpy(arr).to(dev, non_blocking=True)
    key = (dev, arr.shape[1], *arr[:, 0].tolist())
    t = _uniform.get(key)
    if t is None:
        if len(_uniform) >= 64:  # (shapes come and go: keep the table small)
            _uniform.clear()
        t = _uniform[key] = torch.from_numpy(arr).to(dev)
    return t
