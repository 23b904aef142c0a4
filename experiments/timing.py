"""Timing one step: inputs, the step as a user runs it (eager, or a whole-step CUDA graph),
the timer, the instrumented step (peak memory, launches) and the statistics of timed steps.

Times come from CUDA events on a GPU and ``time.perf_counter`` on the CPU, each step
synchronised (the GPU idle at its start), so a step's time includes the host's work before its
first kernel.  Used by :mod:`experiments.measure` and by the probes (:mod:`experiments.probes`).
"""

from __future__ import annotations

import gc
import math
import time
import zlib
from collections.abc import Callable

import numpy as np
import torch

from experiments.impls import FORWARD, FORWARD_BACKWARD, Impl, simulator
from experiments.sweeps import Config

__all__ = [
    "Outputs",
    "back_to_back",
    "free_memory",
    "graph_step",
    "instrumented",
    "launch_count",
    "loss_step",
    "make_inputs",
    "repeats_for",
    "stats",
    "sync",
    "time_ms",
]

Row = dict[str, object]


def free_memory(device: str) -> None:
    """Collect garbage, and on a GPU give the allocator's cached blocks back."""
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def make_inputs(cfg: Config, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``randn`` x (B, N, D), y (B, M, D), the same for every implementation, mode and gamma."""
    seed = zlib.crc32(repr((cfg.B, cfg.N, cfg.M, cfg.D, cfg.dtype)).encode())
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, cfg.dtype)
    x = torch.randn(cfg.B, cfg.N, cfg.D, generator=gen, dtype=dtype)
    y = torch.randn(cfg.B, cfg.M, cfg.D, generator=gen, dtype=dtype)
    return x.to(device), y.to(device)


Outputs = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def loss_step(impl: Impl, x: torch.Tensor, y: torch.Tensor, gamma: float, mode: str) -> Outputs:
    """One training step as a user runs it: the loss, and for ``forward+backward`` the
    gradients of ``loss.sum()`` (``x``, ``y`` are then leaves that require grad)."""
    if mode == FORWARD:
        with torch.no_grad():
            return impl.loss(x, y, gamma), None, None
    x.grad = y.grad = None
    value = impl.loss(x, y, gamma)
    value.sum().backward()
    return value, x.grad, y.grad


def graph_step(
    impl: Impl, x: torch.Tensor, y: torch.Tensor, gamma: float, mode: str
) -> Callable[[], Outputs]:
    """:func:`loss_step` as one CUDA graph (PyTorch's whole-step capture, ``torch.cuda.graph``),
    the way a training loop with static shapes runs it: the returned step's first call warms
    up (three eager steps on a side stream, as PyTorch's CUDA-graph notes ask) and returns
    the last one's outputs; the second captures a step on static copies of ``x`` and ``y``;
    from then on (the second call included) a step copies ``x`` and ``y`` into the static
    inputs and replays the graph, whose outputs are the static value and gradients.  So the
    instrumented step's peak memory is what the graph keeps allocated (its private pool),
    its launches are the kernels captured in the graph, and a timed step is two copies and
    one graph launch of host time."""
    grad = mode == FORWARD_BACKWARD
    sx = x.detach().clone().requires_grad_(grad)
    sy = y.detach().clone().requires_grad_(grad)
    state: dict[str, object] = {}

    def step() -> Outputs:
        graph = state.get("graph")
        if graph is None and "warm" not in state:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    out = loss_step(impl, sx, sy, gamma, mode)
            torch.cuda.current_stream().wait_stream(side)
            state["warm"] = True
            return out
        if graph is None:
            sx.grad = sy.grad = None
            graph = state["graph"] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["out"] = loss_step(impl, sx, sy, gamma, mode)
        with torch.no_grad():
            sx.copy_(x)
            sy.copy_(y)
        graph.replay()
        return state["out"]

    return step


def time_ms(fn: Callable[[], object], device: str) -> float:
    """Milliseconds of one call of ``fn``, started on an idle device: CUDA events on a GPU,
    ``time.perf_counter`` on the CPU; its output is dropped inside the interval."""
    if device == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        out = fn()
        end.record()
        end.synchronize()
        del out
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - t0
    del out
    return 1e3 * elapsed


def launch_count(impl: Impl, device: str) -> int | None:
    """``impl``'s Numba launches so far, where they are counted (a GPU, or the simulator)."""
    if impl.launches is None or not (device == "cuda" or simulator()):
        return None
    return impl.launches()


def sync(device: str) -> None:
    """Wait for the GPU's queued work (nothing on the CPU)."""
    if device == "cuda":
        torch.cuda.synchronize()


def instrumented(step: Callable[[], object], impl: Impl, device: str) -> tuple[object, Row]:
    """Run ``step`` once: its output, and a row with its ``seconds``, ``peak_mem_bytes``
    (allocated during it; ``None`` on the CPU) and ``launches`` (``None`` where not counted)."""
    free_memory("cpu")
    peak = launches = None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    launches0 = launch_count(impl, device)
    t0 = time.perf_counter()
    out = step()
    sync(device)
    seconds = time.perf_counter() - t0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    if launches0 is not None:
        launches = launch_count(impl, device) - launches0
    return out, {"seconds": seconds, "peak_mem_bytes": peak, "launches": launches}


def repeats_for(repeats: int, budget_s: float, seconds: float) -> int:
    """Timed steps for a step of ``seconds``: ``repeats``, fewer (at least 3) if they would
    exceed ``budget_s``."""
    return max(min(3, repeats), min(repeats, math.ceil(budget_s / max(seconds, 1e-9))))


def stats(times: list[float]) -> Row:
    """Median, 20th and 80th percentiles (ms) of the timed steps; ``status`` ok."""
    p20, median, p80 = np.percentile(times, [20, 50, 80])
    return {"median": median, "p20": p20, "p80": p80, "repeats": len(times), "status": "ok"}


def back_to_back(step: Callable[[], object], device: str, n: int) -> float:
    """Milliseconds per step of ``n`` steps run back to back: one :func:`time_ms` interval
    around all of them, no synchronisation in between, so the host queues a step while the
    GPU runs the one before, as in a training loop that does not read a value back each
    step.  The step time is then the larger of its host and its GPU time, where a
    synchronised step pays both the host's head start and the GPU's work."""

    def steps() -> None:
        for _ in range(n):
            step()  # (outputs dropped as they come, as one timed step's are)

    return time_ms(steps, device) / n
