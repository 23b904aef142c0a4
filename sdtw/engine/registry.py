"""The backends by name, and the ``"auto"`` rule: the one place that names them.

``"auto"`` is ``"cuda"`` for CUDA tensors (``"cpu"``, with a warning, where the CUDA kernels
cannot run here) and ``"cpu"`` for any other tensors.
"""

from __future__ import annotations

import warnings

import torch

from sdtw.engine.backend import Backend
from sdtw.engine.cpu import CPUBackend
from sdtw.engine.cuda import CUDABackend
from sdtw.engine.reference import ReferenceBackend

__all__ = ["BACKENDS", "capabilities_table", "resolve"]

#: The backends by name (``backend=`` of the public functions).
BACKENDS: dict[str, Backend] = {
    b.name: b for b in (ReferenceBackend(), CPUBackend(), CUDABackend())
}


def resolve(name: str, device: torch.device) -> Backend:
    """The backend that runs a call on tensors on ``device`` (``name`` validated: a key of
    :data:`BACKENDS` or ``"auto"``), after checking that it can run here."""
    if name == "auto":
        if device.type != "cuda":
            return BACKENDS["cpu"]
        ok, why = BACKENDS["cuda"].usable(device)
        if ok:
            return BACKENDS["cuda"]
        warnings.warn(
            f"backend='auto': CUDA tensors but the CUDA kernels cannot run ({why}); "
            "falling back to the CPU backend (tensors are copied to the CPU)",
            RuntimeWarning,
            stacklevel=4,
        )
        return BACKENDS["cpu"]
    backend = BACKENDS[name]
    ok, why = backend.usable(device)
    if not ok:
        raise RuntimeError(f"backend={name!r} is not usable here: {why}")
    backend.check_device(device)
    return backend


def capabilities_table() -> str:
    """The backends' capabilities as a Markdown table (docs/design.md prints it)."""
    rows = [
        "| backend | fused costs | checkpointed costs | float64 inside | devices | band | "
        "lengths | recurrences |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in BACKENDS.values():
        c = b.caps
        rows.append(
            f"| {b.name} | {', '.join(c.fused) or '-'} | {', '.join(c.checkpoint) or '-'} | "
            f"{'yes' if c.float64 else 'no'} | {', '.join(c.devices)} | {c.band} | "
            f"{c.lengths} | {', '.join(c.recurrences)} |"
        )
    return "\n".join(rows)
