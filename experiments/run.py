"""Benchmark harness: time, memory, launches and error of every implementation on a sweep.

Usage
-----
::

    python -m experiments.run [--sweep NAME ...] [--impl NAME ...] [--out DIR]
                              [--repeats N] [--budget-s S] [--time-limit-s S]
                              [--resume] [--quick] [--list]

Without ``--sweep``: ``paper-grid``, ``fig1-length`` and ``fig1-dim`` on a machine with a CUDA
GPU, ``cpu`` otherwise.  Without ``--impl``: each sweep's own list (those that run on its
device).  Results go to ``<out>/<sweep>.csv``, by default under
``experiments/results/<machine>/`` (``nvidia-h200``, ``cpu-<model>``).

What is measured
----------------
For every (implementation, mode, configuration), mode being ``forward`` (inputs without
gradient) or ``forward+backward`` (``loss.sum().backward()``):

1. gates, before any allocation: ``unsupported`` beyond the design's length limit,
   ``skipped-slow`` beyond a slow oracle's size, ``skipped-memory`` when the implementation's
   memory model (:mod:`experiments.impls`) predicts more than ~92 % of the GPU (or 80 % of
   RAM for CPU paths);
2. one warm-up step (JIT compilation, allocator caches);
3. one instrumented step: peak memory (``torch.cuda.max_memory_allocated()`` after
   ``reset_peak_memory_stats``, minus what was allocated before it; blank on the CPU), Numba
   kernel launches (difference of the implementation's counter; blank where not counted), and
   the outputs, compared with a float64 reference on the same input;
4. ``repeats`` timed steps (CUDA events on a GPU, ``time.perf_counter`` on the CPU), fewer
   (at least 3) when one step is so slow that they would exceed ``--budget-s``; the CSV's
   ``repeats`` column says how many.  Median, 20th and 80th percentiles in milliseconds.
   Each step is synchronised (the GPU idle at its start): its time includes the host's work
   before the first kernel.  The implementations of one configuration and mode take their
   timed steps in turn, one step each per round (:func:`measure_group`; steps 2 and 3 come
   first, for each in order): the host's speed drifts within a process, and timed in turn
   they all see the same drift.  The eager implementations go in turn among themselves, the
   ``graphed`` ones (below) among themselves after them (:func:`_turn_groups`);
5. in sweeps with ``back_to_back`` (``targets``), as many steps again run back to back, with
   no synchronisation in between (a second row, metric ``time_ms_back_to_back``: one interval
   over all of them, no percentiles), which is what a training loop that does not read the
   loss back each step gets: the larger of the host's and the GPU's time per step.

Implementations marked ``graphed`` (``sdtw-fused-graph``, ``sdtw-unfused-graph``) run the same
steps captured in a CUDA graph (:func:`_graph_step`): the warm-up is three eager steps on a
side stream, the instrumented step is the capture and a replay (its peak memory is what the
graph keeps allocated, its launches the kernels captured), and a timed step copies the
inputs into the graph's static ones and replays it.

An out-of-memory error, a failed launch or a length refusal becomes a row with its status; so
does any other exception (status ``error``, the message in ``note``): a sweep never crashes.

The ``barycenter`` sweep measures soft-DTW barycenters instead (:mod:`experiments.barycenter`):
per implementation and configuration, an Adam iteration (the same gates, warm-up, instrumented
step and timed steps; ``metric`` ``ms_per_iter``) and two solves, with and without early
stopping (``total_ms``, ``iterations``, ``objective``), one row per metric.

Errors
------
``rel_err_*`` is the max-norm relative error ``max |a - r| / max |r|`` of the value (B,) and of
the gradients of ``loss.sum()`` with respect to x and y, against a float64 reference computed
once per configuration from float64 copies of the same inputs.  The ``reference`` column names
the one used: ``reference`` (the NumPy oracle, ``N M <= 16384``), ``sdtw-cpu-f64`` (sdtw's
Numba CPU path in float64), or, for sizes too large for the CPU when a GPU is present,
``sdtw-fused-f64`` (our fused kernel on float64 inputs: an independent precision, not an
independent algorithm).  Blank, with a note, when none is affordable.

CSV
---
Long format, one row per measurement: :data:`MEASURE_COLUMNS` then :data:`PROVENANCE_COLUMNS`.
Rows are appended and flushed one by one, so an interrupted run leaves a valid file that
``--resume`` completes (it skips every (impl, mode, B, N, M, D, gamma, dtype) already there);
``--time-limit-s`` stops starting new measurements after that long (a device with a per-command
limit), prints the summary and says INCOMPLETE.
Without ``--resume`` an existing file is replaced.  ``git_sha`` comes from the ``SDTW_GIT_SHA``
and ``SDTW_GIT_DIRTY`` environment variables when set (a copy of the tree on another machine),
else from ``git``.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import math
import os
import platform
import re
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
import torch

from experiments import barycenter
from experiments.impls import (
    FORWARD,
    FORWARD_BACKWARD,
    IMPLS,
    Impl,
    baselines_error,
    simulator,
)
from experiments.sweeps import SWEEPS, Config, Sweep, default_sweeps

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["COLUMNS", "main", "run_sweep", "summarize"]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"

MEASURE_COLUMNS = (
    "sweep impl mode B N M D gamma dtype device metric median p20 p80 repeats peak_mem_bytes "
    "predicted_mem_bytes launches rel_err_value rel_err_grad_x rel_err_grad_y reference "
    "status note"
).split()
PROVENANCE_COLUMNS = (
    "gpu driver cuda torch numba numba_cuda numpy python git_sha git_dirty date_utc host cpu"
).split()
COLUMNS = MEASURE_COLUMNS + PROVENANCE_COLUMNS
KEY_COLUMNS = ("impl", "mode", "B", "N", "M", "D", "gamma", "dtype")
METRIC = "time_ms"
#: Metric of a sweep's back-to-back timing (:func:`_back_to_back`).
BACK_TO_BACK = "time_ms_back_to_back"

REFERENCE_MAX_CELLS = 128 * 128  # N M: the NumPy oracle loops over cells in Python
CPU_F64_MAX_CELLS = 2**25  # B N M: sdtw-cpu in float64 (~10 s on 2 cores) when a GPU is here
CPU_F64_MAX_CELLS_NO_GPU = 2**26  # B N M: the same, when it is the only float64 path
GPU_BUDGET = 0.92  # fraction of the GPU's memory a step may be predicted to use
HOST_BUDGET = 0.80  # fraction of the RAM, for CPU paths


Key = tuple[str, str, int, int, int, int, float, str]
Row = dict[str, object]


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _command(*args: str) -> str | None:
    try:
        done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git() -> tuple[str, str]:
    """(SHA, dirty flag); results under experiments/results do not count as dirty.

    ``SDTW_GIT_SHA`` (and ``SDTW_GIT_DIRTY``), when set, win over the tree's own ``.git``: a
    copy of the tree sent to another machine may carry a stale ``.git`` (seen on our GPU
    runner, whose copy's ``HEAD`` lagged the code it ran)."""
    if os.environ.get("SDTW_GIT_SHA"):
        return os.environ["SDTW_GIT_SHA"], os.environ.get("SDTW_GIT_DIRTY", "")
    sha = _command("git", "rev-parse", "HEAD")
    if sha is None:  # no .git and no SDTW_GIT_SHA
        return "unknown", ""
    status = _command("git", "status", "--porcelain", "--", ".", ":(exclude)experiments/results")
    return sha, ("" if status is None else str(bool(status)).lower())


def _driver() -> str:
    smi = _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    if smi:
        return smi.splitlines()[0]
    try:
        from numba import cuda

        major, minor = cuda.cudadrv.driver.driver.get_version()
        return f"cuda-driver-api-{major}.{minor}"
    except Exception:
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def provenance() -> dict[str, str]:
    """Machine, software and source of this run: the :data:`PROVENANCE_COLUMNS`."""
    has_gpu = torch.cuda.is_available()
    sha, dirty = _git()
    return {
        "gpu": torch.cuda.get_device_name() if has_gpu else "",
        "driver": _driver() if has_gpu else "",
        "cuda": torch.version.cuda or "",
        "torch": torch.__version__,
        "numba": _version("numba"),
        "numba_cuda": _version("numba-cuda"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "git_sha": sha,
        "git_dirty": dirty,
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": _cpu_model(),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_out_dir() -> Path:
    """``experiments/results/<gpu name>`` on a GPU machine, ``.../cpu-<model>`` otherwise."""
    if torch.cuda.is_available():
        return RESULTS / _slug(torch.cuda.get_device_name())
    return RESULTS / _slug(f"cpu {_cpu_model()}")


# --------------------------------------------------------------------------------------------
# Failures as statuses
# --------------------------------------------------------------------------------------------

_NUMBA_CUDA_ERRORS = {"CudaAPIError", "CudaDriverError", "CudaSupportError"}


def classify(exc: BaseException) -> str:
    """Status of a failed measurement: ``oom``, ``launch-failed``, ``cuda-error``,
    ``unsupported`` (a ``ValueError``, e.g. a length limit) or ``error``."""
    msg = str(exc)
    if (
        isinstance(exc, torch.cuda.OutOfMemoryError | MemoryError)
        or "out of memory" in msg.lower()
        or "OUT_OF_MEMORY" in msg
        or "can't allocate memory" in msg
    ):
        return "oom"
    if "OUT_OF_RESOURCES" in msg:
        return "launch-failed"
    if {c.__name__ for c in type(exc).__mro__} & _NUMBA_CUDA_ERRORS:
        return "cuda-error"
    if isinstance(exc, ValueError):
        return "unsupported"
    return "error"


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:400]


def _free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# Memory gate
# --------------------------------------------------------------------------------------------


def _host_budget() -> int:
    try:
        return int(HOST_BUDGET * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**62


def _device_budget() -> int:
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    return int(GPU_BUDGET * total) - torch.cuda.memory_allocated()


def _input_bytes(cfg: Config) -> int:
    s = torch.finfo(getattr(torch, cfg.dtype)).bits // 8
    return cfg.B * (cfg.N + cfg.M) * cfg.D * s


def gate(impl: Impl, cfg: Config, mode: str, device: str) -> tuple[str, str, int]:
    """Decide, before allocating anything, whether to run: (status or "", note, predicted)."""
    dtype = getattr(torch, cfg.dtype)
    predicted = impl.peak_bytes(cfg.B, cfg.N, cfg.M, cfg.D, dtype, mode)
    if impl.max_len is not None and max(cfg.N, cfg.M) > impl.max_len:
        note = f"max(N, M) = {max(cfg.N, cfg.M)} exceeds the design's limit {impl.max_len}"
        return "unsupported", note, predicted
    if impl.max_cells is not None and cfg.N * cfg.M > impl.max_cells:
        note = f"N M = {cfg.N * cfg.M} > {impl.max_cells}: too slow to time"
        return "skipped-slow", note, predicted
    on_host = device == "cpu" or impl.host_memory
    budget = _host_budget() if on_host else _device_budget()
    need = predicted + 2 * _input_bytes(cfg)
    if need > budget:
        where = "RAM" if on_host else "GPU"
        note = f"predicted {need / 2**30:.3g} GiB > {budget / 2**30:.3g} GiB usable {where}"
        return "skipped-memory", note, predicted
    return "", "", predicted


# --------------------------------------------------------------------------------------------
# Float64 reference
# --------------------------------------------------------------------------------------------


@dataclass
class Oracle:
    """Float64 value (B,) and gradients of ``value.sum()`` on one input, all on the CPU."""

    name: str
    value: torch.Tensor | None = None
    grad_x: torch.Tensor | None = None
    grad_y: torch.Tensor | None = None
    note: str = ""


def compute_oracle(x: torch.Tensor, y: torch.Tensor, gamma: float, device: str) -> Oracle:
    """The float64 reference for inputs ``x``, ``y`` (see the module docstring for the rule)."""
    from sdtw import softdtw

    B, N, D = x.shape
    M = y.shape[1]
    cells = B * N * M
    fused = IMPLS["sdtw-fused"].peak_bytes(B, N, M, D, torch.float64, FORWARD_BACKWARD)
    if N * M <= REFERENCE_MAX_CELLS:
        name, where, kwargs = "reference", "cpu", {"backend": "reference"}
    elif cells <= CPU_F64_MAX_CELLS or (device == "cpu" and cells <= CPU_F64_MAX_CELLS_NO_GPU):
        name, where, kwargs = "sdtw-cpu-f64", "cpu", {"backend": "cpu"}
    elif device == "cuda" and fused + 2 * B * (N + M) * D * 8 < _device_budget():
        name, where, kwargs = "sdtw-fused-f64", "cuda", {"backend": "cuda", "fused": True}
    else:
        return Oracle("", note=f"no affordable float64 reference at B N M = {cells}")
    try:
        x64 = x.detach().to(where, torch.float64).requires_grad_()
        y64 = y.detach().to(where, torch.float64).requires_grad_()
        value = softdtw(x64, y64, gamma=gamma, **kwargs)
        value.sum().backward()
        return Oracle(name, value.detach().cpu(), x64.grad.cpu(), y64.grad.cpu())
    except Exception as exc:
        note = f"float64 reference {name} failed ({classify(exc)}): {_message(exc)}"
    _free_memory(where)
    return Oracle("", note=note)


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |actual - expected| / max |expected|`` (NaN or inf where ``actual`` is)."""
    a, e = actual.detach().to("cpu", torch.float64), expected.to(torch.float64)
    scale = e.abs().max().item()
    diff = (a - e).abs().max().item()
    return diff / scale if scale > 0 else diff


# --------------------------------------------------------------------------------------------
# One measurement
# --------------------------------------------------------------------------------------------


def make_inputs(cfg: Config, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``randn`` x (B, N, D), y (B, M, D), the same for every implementation, mode and gamma."""
    seed = zlib.crc32(repr((cfg.B, cfg.N, cfg.M, cfg.D, cfg.dtype)).encode())
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, cfg.dtype)
    x = torch.randn(cfg.B, cfg.N, cfg.D, generator=gen, dtype=dtype)
    y = torch.randn(cfg.B, cfg.M, cfg.D, generator=gen, dtype=dtype)
    return x.to(device), y.to(device)


Outputs = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


def _step(impl: Impl, x: torch.Tensor, y: torch.Tensor, gamma: float, mode: str) -> Outputs:
    """One training step as a user runs it: the loss, and for ``forward+backward`` the
    gradients of ``loss.sum()`` (``x``, ``y`` are then leaves that require grad)."""
    if mode == FORWARD:
        with torch.no_grad():
            return impl.loss(x, y, gamma), None, None
    x.grad = y.grad = None
    value = impl.loss(x, y, gamma)
    value.sum().backward()
    return value, x.grad, y.grad


def _graph_step(
    impl: Impl, x: torch.Tensor, y: torch.Tensor, gamma: float, mode: str
) -> Callable[[], Outputs]:
    """:func:`_step` as one CUDA graph (PyTorch's whole-step capture, ``torch.cuda.graph``),
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
                    out = _step(impl, sx, sy, gamma, mode)
            torch.cuda.current_stream().wait_stream(side)
            state["warm"] = True
            return out
        if graph is None:
            sx.grad = sy.grad = None
            graph = state["graph"] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                state["out"] = _step(impl, sx, sy, gamma, mode)
        with torch.no_grad():
            sx.copy_(x)
            sy.copy_(y)
        graph.replay()
        return state["out"]

    return step


def _time_ms(fn: Callable[[], object], device: str) -> float:
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


def _launch_count(impl: Impl, device: str) -> int | None:
    if impl.launches is None or not (device == "cuda" or simulator()):
        return None
    return impl.launches()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _instrumented(step: Callable[[], object], impl: Impl, device: str) -> tuple[object, Row]:
    """Run ``step`` once: its output, and a row with its ``seconds``, ``peak_mem_bytes``
    (allocated during it; ``None`` on the CPU) and ``launches`` (``None`` where not counted)."""
    _free_memory("cpu")
    peak = launches = None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    launches0 = _launch_count(impl, device)
    t0 = time.perf_counter()
    out = step()
    _sync(device)
    seconds = time.perf_counter() - t0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    if launches0 is not None:
        launches = _launch_count(impl, device) - launches0
    return out, {"seconds": seconds, "peak_mem_bytes": peak, "launches": launches}


def _repeats(repeats: int, budget_s: float, seconds: float) -> int:
    """Timed steps for a step of ``seconds``: ``repeats``, fewer (at least 3) if they would
    exceed ``budget_s``."""
    return max(min(3, repeats), min(repeats, math.ceil(budget_s / max(seconds, 1e-9))))


def _stats(times: list[float]) -> Row:
    """Median, 20th and 80th percentiles (ms) of the timed steps; ``status`` ok."""
    p20, median, p80 = np.percentile(times, [20, 50, 80])
    return {"median": median, "p20": p20, "p80": p80, "repeats": len(times), "status": "ok"}


def _back_to_back(step: Callable[[], object], device: str, n: int) -> float:
    """Milliseconds per step of ``n`` steps run back to back: one :func:`_time_ms` interval
    around all of them, no synchronisation in between, so the host queues a step while the
    GPU runs the one before, as in a training loop that does not read a value back each
    step.  The step time is then the larger of its host and its GPU time, where a
    synchronised step pays both the host's head start and the GPU's work."""

    def steps() -> None:
        for _ in range(n):
            step()  # (outputs dropped as they come, as one timed step's are)

    return _time_ms(steps, device) / n


@dataclass
class _Point:
    """One implementation's measurement in progress (:func:`measure_group`): its row so far,
    its step (None once it failed or is done), the instrumented step's outputs, how many
    timed steps it takes and their times."""

    impl: Impl
    row: Row
    step: Callable[[], Outputs] | None = None
    outputs: list | None = None
    n: int = 0
    times: list[float] = field(default_factory=list)


def _failed(point: _Point, exc: BaseException) -> None:
    point.row = {"status": classify(exc), "note": _message(exc)}
    point.step = None


def _prepare(
    impl: Impl,
    cfg: Config,
    mode: str,
    x: torch.Tensor,
    y: torch.Tensor,
    device: str,
    repeats: int,
    budget_s: float,
) -> _Point:
    """An implementation's step, its warm-up and its instrumented step (a failure becomes
    the row's status)."""
    if impl.graphed:
        step = _graph_step(impl, x, y, cfg.gamma, mode)
    else:
        if mode == FORWARD_BACKWARD:
            x, y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()

        def step() -> Outputs:
            return _step(impl, x, y, cfg.gamma, mode)

    point = _Point(impl, {})
    try:
        step()  # warm-up
        _sync(device)
        x.grad = y.grad = None  # the warm-up's gradients must not count as "before"
        (value, grad_x, grad_y), row = _instrumented(step, impl, device)
        point.outputs = [None if t is None else t.detach().cpu() for t in (value, grad_x, grad_y)]
        del value, grad_x, grad_y
    except Exception as exc:
        _failed(point, exc)
        return point
    point.n = _repeats(repeats, budget_s, row.pop("seconds"))
    point.row, point.step = row, step
    return point


def measure_group(
    impls: list[Impl],
    cfg: Config,
    mode: str,
    x: torch.Tensor,
    y: torch.Tensor,
    device: str,
    oracle: Callable[[], Oracle],
    repeats: int,
    budget_s: float,
    back_to_back: bool = False,
) -> list[Row]:
    """The rows of ``impls`` on the same inputs and mode, one each: each implementation's
    warm-up and one instrumented step, then timed steps; a failure becomes a status.  The
    timed steps are taken in turn: one step of each implementation, then the next round,
    until each has its own number of steps.  With ``back_to_back``, as many steps again back
    to back (:func:`_back_to_back`): their time per step is the row's ``back_to_back_ms``.

    The host's speed drifts within one process (on the H200 machine a host-bound step at
    N = 128 took 0.47-0.91 ms in one sweep), so implementations
    timed one after the other could see different hosts; timed in turn they see the same
    drift, and their ratio means what it says.  Every implementation is warmed up and
    instrumented first, in order, and keeps its state (inputs, gradients, a captured graph)
    until the group is done.  With ``back_to_back``, each one's back-to-back steps follow,
    one implementation after the other."""
    points = [_prepare(impl, cfg, mode, x, y, device, repeats, budget_s) for impl in impls]
    for r in range(max((p.n for p in points), default=0)):
        for p in points:
            if p.step is not None and r < p.n:
                try:
                    p.times.append(_time_ms(p.step, device))
                except Exception as exc:
                    _failed(p, exc)
    for p in points:
        if p.step is None:
            continue
        p.row.update(_stats(p.times))
        if back_to_back:
            try:
                p.row["back_to_back_ms"] = _back_to_back(p.step, device, p.n)
            except Exception as exc:
                _failed(p, exc)
                continue
        p.step = None  # (its buffers and graph go before the next implementation's)
    rows = []
    for p in points:
        rows.append(p.row)
        if p.outputs is None or p.row.get("status") != "ok":
            continue
        ref = oracle()
        p.row["reference"] = ref.name
        if ref.value is None:
            p.row["note"] = ref.note
            continue
        p.row["rel_err_value"] = rel_err(p.outputs[0], ref.value)
        if mode == FORWARD_BACKWARD:
            p.row["rel_err_grad_x"] = rel_err(p.outputs[1], ref.grad_x)
            p.row["rel_err_grad_y"] = rel_err(p.outputs[2], ref.grad_y)
    return rows


def barycenter_inputs(cfg: Config, device: str) -> torch.Tensor:
    """The ``barycenter`` sweep's sequences X (B, M, D), the same for every implementation:
    :func:`experiments.barycenter.square_waves`."""
    return barycenter.square_waves(cfg.B, cfg.M, cfg.D, dtype=getattr(torch, cfg.dtype)).to(device)


#: Iterations of the warm-up solve before a timed one (too few for early stopping to stop).
_SOLVE_WARMUP = 2


def measure_barycenter(
    impl: Impl,
    cfg: Config,
    mode: str,
    X: torch.Tensor,
    device: str,
    repeats: int,
    budget_s: float,
    max_iter: int,
) -> list[Row]:
    """The rows of one ``barycenter`` measurement (:mod:`experiments.barycenter` lists them);
    a failure becomes one row with its status, under the mode's first metric."""
    metrics = barycenter.METRICS[mode]
    history: list[float] = []

    def solve() -> None:
        early_stopping = mode == barycenter.EARLY_STOP
        history[:] = impl.solve_barycenter(X, cfg.gamma, max_iter, early_stopping)

    try:
        solver = barycenter.AdamBarycenter(impl.loss, X, cfg.gamma, max_iter)
        solver.iterate()  # warm-up: JIT compilation, allocator caches, Adam's state
        _sync(device)
        if mode == barycenter.ITERATION:
            _, row = _instrumented(solver.iterate, impl, device)
            n = _repeats(repeats, budget_s, row.pop("seconds"))
            row.update(_stats([_time_ms(solver.iterate, device) for _ in range(n)]))
            return [{"metric": metrics[0], **row}]
        del solver
        # The solve's own calls warmed up too: one that runs out of iterations ends with an
        # objective without gradients, for the fused impl the fused forward without
        # gradients, whose kernel is compiled on first use (it had taken 7.7 s of the timed solve).
        impl.solve_barycenter(X, cfg.gamma, _SOLVE_WARMUP, mode == barycenter.EARLY_STOP)
        _sync(device)
        total = _time_ms(solve, device)
    except Exception as exc:
        return [{"metric": metrics[0], "status": classify(exc), "note": _message(exc)}]
    values = {"total_ms": total, "iterations": len(history) - 1, "objective": min(history)}
    note = f"one solve of max_iter = {max_iter}"
    return [
        {"metric": m, "median": values[m], "repeats": 1, "status": "ok", "note": note}
        for m in metrics
    ]


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------


def _key(row: dict) -> Key:
    impl, mode, B, N, M, D, gamma, dtype = (row[c] for c in KEY_COLUMNS)
    return (str(impl), str(mode), int(B), int(N), int(M), int(D), float(gamma), str(dtype))


def read_keys(path: Path) -> set[Key]:
    """Keys of the rows already in ``path`` (empty if it does not exist)."""
    if not path.exists():
        return set()
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise SystemExit(
                f"error: {path} has other columns than this harness writes; "
                "move it away or run without --resume"
            )
        return {_key(row) for row in reader}


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    return value


class _Appender:
    """Writes rows to ``path`` one at a time, opening it (and its folder) at the first row."""

    def __init__(self, path: Path, append: bool) -> None:
        self.path, self.append = path, append
        self.file: TextIO | None = None
        self.writer: csv.DictWriter | None = None

    def write(self, row: Row) -> None:
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.file = self.path.open("a" if self.append else "w", newline="")
            self.writer = csv.DictWriter(self.file, fieldnames=COLUMNS)
            if not self.append:
                self.writer.writeheader()
        self.writer.writerow({c: _cell(row.get(c)) for c in COLUMNS})
        self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


# --------------------------------------------------------------------------------------------
# A sweep
# --------------------------------------------------------------------------------------------


def run_sweep(
    sweep: Sweep,
    impls: list[str],
    out: Path,
    *,
    repeats: int,
    budget_s: float = 5.0,
    resume: bool = False,
    quick: bool = False,
    deadline: float | None = None,
    dims: Sequence[int] | None = None,
) -> tuple[Path, bool]:
    """Measure ``impls`` on every configuration of ``sweep``; write ``<out>/<sweep>.csv``.

    Parameters
    ----------
    sweep : Sweep
        What to run (see :mod:`experiments.sweeps`).
    impls : list of str
        Names in :data:`experiments.impls.IMPLS` that run on the sweep's device.
    out : Path
        Folder of the CSV; created at the first row.
    repeats : int
        Timed steps per measurement (fewer, at least 3, for steps slower than ``budget_s``).
    budget_s : float
        Seconds of timed steps aimed at per measurement.
    resume : bool
        Keep the existing CSV and skip the measurements already in it.
    quick : bool
        Use the sweep's tiny grid.
    deadline : float or None
        ``time.monotonic()`` after which no new measurement starts (the CSV stays valid and
        ``resume=True`` completes it later).
    dims : sequence of int or None
        Only the configurations with these feature dimensions D (``None``: all of them).

    Returns
    -------
    path : Path
        The CSV (which may not exist if there was nothing to measure).
    complete : bool
        ``False`` if the deadline stopped the sweep before its end.
    """
    from tqdm import tqdm

    device = sweep.resolve_device(torch.cuda.is_available())
    path = out / f"{sweep.name}.csv"
    done = read_keys(path) if resume else set()
    plan: list[tuple[Config, list[tuple[str, str]]]] = []
    grid = sweep.grid(device, quick)
    if dims is not None:
        kept = [cfg for cfg in grid if cfg.D in dims]
        if not kept:
            have = sorted({cfg.D for cfg in grid})
            print(
                f"note: {sweep.name}: no configuration with D in {sorted(dims)} "
                f"(its D: {have}); nothing measured",
                file=sys.stderr,
            )
        grid = kept
    for cfg in grid:
        points = [
            (name, mode)
            for name in impls
            for mode in sweep.modes
            if _key({"impl": name, "mode": mode, **vars(cfg)}) not in done
        ]
        if points:
            plan.append((cfg, points))
    total = sum(len(points) for _, points in plan)
    max_iter = barycenter.QUICK_MAX_ITER if quick else barycenter.MAX_ITER
    writer = _Appender(path, append=resume and path.exists())
    bar = tqdm(total=total, desc=sweep.name, unit="pt", dynamic_ncols=True, mininterval=0.5)
    complete = True
    try:
        for cfg, points in plan:
            complete = _run_config(
                sweep, cfg, points, device, writer, bar, repeats, budget_s, max_iter, deadline
            )
            if not complete:
                break
    finally:
        bar.close()
        writer.close()
    return path, complete


def _run_config(
    sweep: Sweep,
    cfg: Config,
    points: list[tuple[str, str]],
    device: str,
    writer: _Appender,
    bar: tqdm,
    repeats: int,
    budget_s: float,
    max_iter: int,
    deadline: float | None,
) -> bool:
    """Every (impl, mode) of one configuration, sharing its inputs and its reference;
    ``False`` if the deadline stopped it.  The implementations of one mode are measured in
    groups (:func:`_turn_groups`), the timed steps of each group's implementations in turn
    (:func:`measure_group`); barycenter points one by one."""
    is_barycenter = sweep.task == "barycenter"
    inputs: tuple[torch.Tensor, ...] | None = None
    cached: list[Oracle] = []

    def oracle() -> Oracle:
        if not cached:
            cached.append(compute_oracle(*inputs, cfg.gamma, device))
        return cached[0]

    def write(name: str, mode: str, predicted: int | None, rows: list[Row]) -> None:
        for row in rows:
            row.update(
                sweep=sweep.name,
                impl=name,
                mode=mode,
                device=device,
                predicted_mem_bytes=predicted,
                **vars(cfg),
                **provenance(),
            )
            writer.write(row)
        bar.update()

    where = f"B={cfg.B} N={cfg.N} M={cfg.M} D={cfg.D}"
    if is_barycenter:
        for name, mode in points:
            if deadline is not None and time.monotonic() > deadline:
                return False
            impl = IMPLS[name]
            bar.set_postfix_str(f"{name} {mode} {where}", refresh=False)
            # A barycenter iteration is one forward + backward of the loss, as the model
            # predicts.
            status, note, predicted = gate(impl, cfg, FORWARD_BACKWARD, device)
            rows: list[Row] = [
                {"metric": barycenter.METRICS[mode][0], "status": status, "note": note}
            ]
            if not status:
                inputs = inputs or (barycenter_inputs(cfg, device),)
                rows = measure_barycenter(
                    impl, cfg, mode, *inputs, device, repeats, budget_s, max_iter
                )
                _free_memory(device)
            write(name, mode, predicted, rows)
        return True
    for mode in dict.fromkeys(m for _, m in points):
        if deadline is not None and time.monotonic() > deadline:
            return False
        names = [name for name, m in points if m == mode]
        gates = {name: gate(IMPLS[name], cfg, mode, device) for name in names}
        todo = [name for name in names if not gates[name][0]]
        bar.set_postfix_str(f"{mode} {where}: {', '.join(todo) or '-'}", refresh=False)
        measured: dict[str, Row] = {}
        for turn in _turn_groups(todo):
            inputs = inputs or make_inputs(cfg, device)
            group = [IMPLS[name] for name in turn]
            rows = measure_group(
                group, cfg, mode, *inputs, device, oracle, repeats, budget_s, sweep.back_to_back
            )
            measured.update(zip(turn, rows, strict=True))
            _free_memory(device)
        for name in names:
            status, note, predicted = gates[name]
            row: Row = {"metric": METRIC, "status": status, "note": note, **measured.get(name, {})}
            rows = [row]
            if "back_to_back_ms" in row:
                rows.append(_back_to_back_row(row))
            write(name, mode, predicted, rows)
    return True


def _turn_groups(names: list[str]) -> list[list[str]]:
    """``names`` (one configuration and mode) split into the groups whose timed steps go in
    turn: the eager calls, then the whole-step graph replays (:attr:`Impl.graphed`), each in
    the given order, empty groups left out.

    A graph replay is timed from an idle GPU, so its time includes the host's submission of
    the replay, and that takes longer right after another implementation's eager step: on the
    H200 at B = 32, N = 128, D = 64 the fused whole-step replay took 0.118 ms timed alone,
    0.110-0.117 in turn with the unfused one and 0.167-0.168 in turn with all six sdtw
    implementations.  Eager steps are timed in turn with eager
    steps, which are host-bound alike at small N."""
    eager = [n for n in names if not IMPLS[n].graphed]
    graphed = [n for n in names if IMPLS[n].graphed]
    return [g for g in (eager, graphed) if g]


def _back_to_back_row(row: Row) -> Row:
    """The ``time_ms_back_to_back`` row of a measurement: its back-to-back time per step as
    the median (one interval: no percentiles), the rest of ``row`` as measured."""
    ms = row.pop("back_to_back_ms")
    return {**row, "metric": BACK_TO_BACK, "median": ms, "p20": None, "p80": None}


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summarize(path: Path) -> str:
    """Tables of one sweep's CSV: median ms (or each metric's median), peak MiB and worst
    relative error per impl."""
    import pandas as pd

    df = pd.read_csv(path)
    lines = [f"== {path.stem} ({path}) =="]
    ok = df[df["status"] == "ok"].copy()
    by_metric = df["metric"].nunique() > 1  # the barycenter sweep: ms, iterations, objective
    index = ["mode"] + [c for c in ("B", "N", "M", "D", "gamma") if df[c].nunique() > 1]
    index += ["metric"] if by_metric else []
    order = [name for name in IMPLS if name in set(ok["impl"])]
    ok["peak_MiB"] = ok["peak_mem_bytes"] / 2**20
    ok["max_rel_err"] = ok[["rel_err_value", "rel_err_grad_x", "rel_err_grad_y"]].max(axis=1)
    median_title, median_fmt = (
        ("median, by metric", "{:.4g}") if by_metric else ("median ms", "{:.3g}")
    )
    for column, title, fmt in [
        ("median", median_title, median_fmt),
        ("peak_MiB", "peak MiB", "{:.4g}"),
        ("max_rel_err", "max relative error vs float64 (value, grad x, grad y)", "{:.1e}"),
    ]:
        if ok.empty or ok[column].isna().all():
            continue
        table = ok.pivot_table(index=index, columns="impl", values=column, aggfunc="first")
        table = table.reindex(columns=[c for c in order if c in table.columns])
        lines += [f"-- {title}", table.to_string(float_format=fmt.format, na_rep="-")]
    failed = df[df["status"] != "ok"]
    if not failed.empty:
        counts = failed.groupby(["impl", "status"]).size().rename("rows").reset_index()
        lines += ["-- not measured", counts.to_string(index=False)]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m experiments.run`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.run",
        description="Benchmark soft-DTW implementations over a sweep; write long-format CSVs.",
    )
    parser.add_argument(
        "--sweep",
        action="append",
        choices=list(SWEEPS),
        metavar="NAME",
        help=f"sweep to run, repeatable: {', '.join(SWEEPS)} "
        "(default: paper-grid, fig1-length, fig1-dim with a GPU, cpu without)",
    )
    parser.add_argument(
        "--impl",
        action="append",
        choices=list(IMPLS),
        metavar="NAME",
        help=f"implementation, repeatable: {', '.join(IMPLS)} (default: the sweep's list)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="output folder (default: experiments/results/<gpu name, or cpu-<model>>)",
    )
    parser.add_argument(
        "--repeats", type=int, help="timed steps per measurement (default: 10 GPU, 5 CPU)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=5.0,
        help="seconds of timed steps per measurement; slower steps get fewer repeats, "
        "at least 3 (default: %(default)s)",
    )
    parser.add_argument("--resume", action="store_true", help="skip rows already in the CSV")
    parser.add_argument(
        "--time-limit-s",
        type=float,
        help="start no new measurement after this many seconds; print the summary and exit 0 "
        "(rerun with --resume to finish)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        type=int,
        metavar="D",
        help="only the configurations with this feature dimension D, repeatable "
        "(default: all of the sweep's)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny grids (smoke test)")
    parser.add_argument("--list", action="store_true", help="list sweeps and implementations")
    return parser


def _listing() -> str:
    lines = ["sweeps:"]
    lines += [f"  {s.name:<12} {s.device:<5} {s.description}" for s in SWEEPS.values()]
    lines += ["implementations:"]
    lines += [f"  {i.name:<14} {i.device}" for i in IMPLS.values()]
    return "\n".join(lines)


def _choose_impls(
    sweep: Sweep, requested: list[str] | None, device: str
) -> tuple[list[str], list[str]]:
    """(implementations to run, notes on those left out) for ``sweep`` on ``device``."""
    wanted = set(requested or sweep.impls)
    chosen, notes = [], []
    for name, impl in IMPLS.items():
        if name not in wanted:
            continue
        if not impl.runs_on(device):
            notes.append(
                f"{name}: needs {impl.device} tensors, sweep {sweep.name} runs on {device}"
            )
        elif impl.baseline and baselines_error():
            notes.append(f"{name}: {baselines_error()}")
        elif impl.unavailable is not None and impl.unavailable():
            notes.append(f"{name}: {impl.unavailable()}")
        else:
            chosen.append(name)
    return chosen, notes


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse errors exit with 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    has_gpu = torch.cuda.is_available()
    names = list(dict.fromkeys(args.sweep or default_sweeps(has_gpu)))
    need_gpu = [n for n in names if SWEEPS[n].device == "cuda"]
    if need_gpu and not has_gpu:
        here = [n for n, s in SWEEPS.items() if s.device != "cuda"]
        print(
            f"error: sweep(s) {', '.join(need_gpu)} need a CUDA GPU, and there is none here "
            f"(torch {torch.__version__}: torch.cuda.is_available() is False). Nothing was run "
            f"or written. Sweeps that run on this machine: {', '.join(here)}.",
            file=sys.stderr,
        )
        return 1
    if args.impl and any(IMPLS[n].baseline for n in args.impl) and baselines_error():
        parser.error(f"requested baselines are unavailable: {baselines_error()}")
    plans = []
    for name in names:
        sweep = SWEEPS[name]
        device = sweep.resolve_device(has_gpu)
        chosen, notes = _choose_impls(sweep, args.impl, device)
        for note in notes:
            print(f"note: {name}: leaving out {note}", file=sys.stderr)
        if chosen:
            plans.append((sweep, chosen, device))
    if not plans:
        parser.error(f"no requested implementation runs on sweep(s) {', '.join(names)}; see --list")
    out = args.out or default_out_dir()
    deadline = None if args.time_limit_s is None else time.monotonic() + args.time_limit_s
    paths, complete = [], True
    for sweep, chosen, device in plans:
        if not complete:
            print(f"{sweep.name}: not started (time limit)")
            continue
        repeats = args.repeats or (10 if device == "cuda" else 5)
        print(f"{sweep.name}: {', '.join(chosen)} on {device} -> {out / sweep.name}.csv")
        path, complete = run_sweep(
            sweep,
            chosen,
            out,
            repeats=repeats,
            budget_s=args.budget_s,
            resume=args.resume,
            quick=args.quick,
            deadline=deadline,
            dims=args.dim,
        )
        paths.append(path)
    for path in paths:
        if path.exists():
            print(summarize(path))
    if not complete:
        print(
            f"INCOMPLETE: --time-limit-s {args.time_limit_s:g} reached; the CSVs are valid, "
            "rerun the same command with --resume to finish."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
