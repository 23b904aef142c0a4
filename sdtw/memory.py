"""The memory model of the backends and the ``memory="auto"`` rule.

``memory="full"`` stores per-cell state for the backward; ``memory="checkpoint"`` stores only
checkpoints of the DP and recomputes the rest in the backward (:mod:`sdtw.cpu_fused`).  The
byte counts here are the model the README's memory table and the tests hold the measured
peaks against.
"""

from __future__ import annotations

import os

__all__ = [
    "AUTO_FRACTION",
    "QUERY_FROM",
    "available_bytes",
    "cpu_checkpoint_bytes",
    "cpu_full_bytes",
    "cuda_checkpoint_bytes",
    "cuda_full_bytes",
]

#: ``memory="auto"`` checkpoints where the full mode's buffers would take more than this
#: fraction of the memory available now.
AUTO_FRACTION = 0.5
#: A call whose full mode needs fewer bytes than this takes it without asking the system (CPU)
#: or the driver (CUDA) for the free memory (a query per training step would be host time on
#: every step: on the CPU, reading /proc/meminfo cost a small call more than its kernels).
QUERY_FROM = 256 * 2**20


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


def cpu_full_bytes(B: int, N: int, M: int, grad: bool, lanes: int = 0) -> int:
    """Peak of the CPU backend's full mode from sequences, beyond the inputs: the float64 cost
    (B, N, M) and the DP table (B, N + 1, M + 1) in the forward; with ``grad`` the table and E
    (B, N, M) in the backward (the cost freed by then): the same size.  Where the pairs run as
    SIMD lanes (``lanes`` tables, whole groups: :mod:`sdtw.cpu_lanes`), no cost tensor but a
    table per lane: the larger of the two."""
    return 8 * max(B * N * M + B * (N + 1) * (M + 1), lanes * (N + 1) * (M + 1))


def cpu_checkpoint_bytes(B: int, N: int, M: int, K: int, threads: int, grad: bool) -> int:
    """Peak of the CPU backend's checkpointed mode, beyond the inputs (and their float64
    copies): with ``grad`` the checkpoints (B, ceil(N / K), M + 1) and, per thread, one
    segment's R and E rows (2 (K + 1) (M + 1)); without, two rows per thread."""
    if not grad:
        return 16 * (M + 1) * min(threads, B)
    return 8 * (B * -(-N // K) * (M + 1) + 2 * (K + 1) * (M + 1) * min(threads, B))


def _boundary_bytes(B: int, N: int, M: int) -> int:
    """One CUDA boundary buffer: (B, ceil(N / 32), M + 1) int64."""
    return 8 * B * -(-N // 32) * (M + 1)


def cuda_full_bytes(B: int, N: int, M: int, D: int, itemsize: int) -> int:
    """Peak of the CUDA backend's fused full mode with gradients, beyond the inputs: the
    weights ``P`` (B, 2, N, M) in the storage dtype (``itemsize`` 4 for float32 and below, 8
    for float64), the two boundary buffers and the gradients (B, N + M, D)."""
    return 2 * B * N * M * itemsize + 2 * _boundary_bytes(B, N, M) + B * (N + M) * D * itemsize


def cuda_checkpoint_bytes(B: int, N: int, M: int, D: int, itemsize: int) -> int:
    """Peak of the CUDA backend's checkpointed mode with gradients, beyond the inputs: the
    forward's boundary buffer with its column checkpoints (B, ceil(N / 32), ceil(M / 32),
    32) int64, the backward's, and the float64 gradients (B, N + M, D) (then copied to the
    storage dtype)."""
    ck = 8 * B * -(-N // 32) * -(-M // 32) * 32
    return 2 * _boundary_bytes(B, N, M) + ck + B * (N + M) * D * (8 + itemsize)
