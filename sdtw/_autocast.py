"""Autocast at the front door: as PyTorch's own losses, sdtw runs in float32 under
``torch.autocast`` (float16/bfloat16 inputs are cast first, the loss comes back in float32)."""

from __future__ import annotations

import torch

__all__ = ["autocast_on", "float32"]


def autocast_on(t: object) -> bool:
    """Whether autocast is on for ``t``'s device type (a tensor on a device autocast knows;
    anything else: no)."""
    if not isinstance(t, torch.Tensor) or t.device.type not in ("cpu", "cuda"):
        return False
    return torch.is_autocast_enabled(t.device.type)


def float32(t: object) -> object:
    """A float16/bfloat16 tensor as float32 (anything else as it is: validation follows)."""
    if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16):
        return t.float()
    return t
