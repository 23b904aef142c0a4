"""The memory model of the backends and the ``memory="auto"`` rule.

``memory="full"`` stores per-cell state for the backward; ``memory="checkpoint"`` stores only
checkpoints of the DP and recomputes the rest in the backward (:mod:`sdtw.cpu_fused`).  The
byte counts here are the model the README's memory table and the tests hold the measured
peaks against.
"""

from __future__ import annotations

import os

__all__ = ["AUTO_FRACTION", "available_bytes", "cpu_checkpoint_bytes", "cpu_full_bytes"]

#: ``memory="auto"`` checkpoints where the full mode's buffers would take more than this
#: fraction of the memory available now.
AUTO_FRACTION = 0.5


def available_bytes() -> int | None:
    """The host memory available now (Linux ``MemAvailable``; elsewhere the free pages), or
    None where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platform-specific
        return None


def cpu_full_bytes(B: int, N: int, M: int, grad: bool) -> int:
    """Peak of the CPU backend's full mode from sequences, beyond the inputs: the float64 cost
    (B, N, M) and the DP table (B, N + 1, M + 1) in the forward; with ``grad`` the table and E
    (B, N, M) in the backward (the cost freed by then): the same size."""
    return 8 * (B * N * M + B * (N + 1) * (M + 1))


def cpu_checkpoint_bytes(B: int, N: int, M: int, K: int, threads: int, grad: bool) -> int:
    """Peak of the CPU backend's checkpointed mode, beyond the inputs (and their float64
    copies): with ``grad`` the checkpoints (B, ceil(N / K), M + 1) and, per thread, one
    segment's R and E rows (2 (K + 1) (M + 1)); without, two rows per thread."""
    if not grad:
        return 16 * (M + 1) * min(threads, B)
    return 8 * (B * -(-N // K) * (M + 1) + 2 * (K + 1) * (M + 1) * min(threads, B))
