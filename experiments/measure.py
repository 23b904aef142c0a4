"""One measurement: the gates before it, the float64 reference, and the rows of a group of
implementations measured on the same inputs (or of one barycenter measurement).

What is measured
----------------
For every (implementation, mode, configuration), mode being ``forward`` (inputs without
gradient) or ``forward+backward`` (``loss.sum().backward()``):

1. gates, before any allocation (:func:`gate`): ``unsupported`` beyond the design's length
   limit, ``skipped-slow`` beyond a slow oracle's size, ``skipped-memory`` when the
   implementation's memory model (:mod:`experiments.impls`) predicts more than ~92 % of the
   GPU (or 80 % of RAM for CPU paths);
2. one warm-up step (JIT compilation, allocator caches);
3. one instrumented step: peak memory (``torch.cuda.max_memory_allocated()`` after
   ``reset_peak_memory_stats``, minus what was allocated before it; blank on the CPU), Numba
   kernel launches (difference of the implementation's counter; blank where not counted), and
   the outputs, compared with a float64 reference on the same input;
4. ``repeats`` timed steps (:func:`experiments.timing.time_ms`), fewer (at least 3) when one
   step is so slow that they would exceed ``budget_s``; the CSV's ``repeats`` column says how
   many.  Median, 20th and 80th percentiles in milliseconds.  The implementations of one
   configuration and mode take their timed steps in turn, one step each per round
   (:func:`measure_group`; steps 2 and 3 come first, for each in order): the host's speed
   drifts within a process, and timed in turn they all see the same drift.  The eager
   implementations go in turn among themselves, the ``graphed`` ones (below) among themselves
   after them (:func:`experiments.runner.turn_groups`);
5. in sweeps with ``back_to_back`` (``targets``), as many steps again run back to back, with
   no synchronisation in between (a second row, metric ``time_ms_back_to_back``: one interval
   over all of them, no percentiles), which is what a training loop that does not read the
   loss back each step gets: the larger of the host's and the GPU's time per step.

Implementations marked ``graphed`` (``sdtw-fused-graph``, ``sdtw-unfused-graph``) run the same
steps captured in a CUDA graph (:func:`experiments.timing.graph_step`): the warm-up is three
eager steps on a side stream, the instrumented step is the capture and a replay (its peak
memory is what the graph keeps allocated, its launches the kernels captured), and a timed step
copies the inputs into the graph's static ones and replays it.

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
once per configuration from float64 copies of the same inputs (:func:`compute_oracle`).  The
``reference`` column names the one used: ``reference`` (the NumPy oracle, ``N M <= 16384``),
``sdtw-cpu-f64`` (sdtw's Numba CPU path in float64), or, for sizes too large for the CPU when a
GPU is present, ``sdtw-fused-f64`` (our fused kernel on float64 inputs: an independent
precision, not an independent algorithm).  Blank, with a note, when none is affordable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from experiments import barycenter
from experiments.impls import FORWARD_BACKWARD, IMPLS, Impl
from experiments.sweeps import Config
from experiments.timing import (
    Outputs,
    free_memory,
    graph_step,
    instrumented,
    loss_step,
    repeats_for,
    stats,
    sync,
    time_ms,
)
from experiments.timing import (
    back_to_back as time_back_to_back,
)

__all__ = [
    "Oracle",
    "barycenter_inputs",
    "classify",
    "compute_oracle",
    "gate",
    "measure_barycenter",
    "measure_group",
    "message",
    "rel_err",
]

REFERENCE_MAX_CELLS = 128 * 128  # N M: the NumPy oracle loops over cells in Python
CPU_F64_MAX_CELLS = 2**25  # B N M: sdtw-cpu in float64 (~10 s on 2 cores) when a GPU is here
CPU_F64_MAX_CELLS_NO_GPU = 2**26  # B N M: the same, when it is the only float64 path
GPU_BUDGET = 0.92  # fraction of the GPU's memory a step may be predicted to use
HOST_BUDGET = 0.80  # fraction of the RAM, for CPU paths

Row = dict[str, object]


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


def message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:400]


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


def compute_oracle(
    x: torch.Tensor,
    y: torch.Tensor,
    gamma: float,
    device: str,
    lengths: tuple[list[int], list[int]] | None = None,
) -> Oracle:
    """The float64 reference for inputs ``x``, ``y`` (see the module docstring for the rule),
    as a padded batch with per-pair ``lengths`` (x's, y's) where given."""
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
        if lengths is not None:
            kwargs["x_lengths"], kwargs["y_lengths"] = lengths
        value = softdtw(x64, y64, gamma=gamma, **kwargs)
        value.sum().backward()
        return Oracle(name, value.detach().cpu(), x64.grad.cpu(), y64.grad.cpu())
    except Exception as exc:
        note = f"float64 reference {name} failed ({classify(exc)}): {message(exc)}"
    free_memory(where)
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
    point.row = {"status": classify(exc), "note": message(exc)}
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
        step = graph_step(impl, x, y, cfg.gamma, mode)
    else:
        if mode == FORWARD_BACKWARD:
            x, y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()

        def step() -> Outputs:
            return loss_step(impl, x, y, cfg.gamma, mode)

    point = _Point(impl, {})
    try:
        step()  # warm-up
        sync(device)
        x.grad = y.grad = None  # the warm-up's gradients must not count as "before"
        (value, grad_x, grad_y), row = instrumented(step, impl, device)
        point.outputs = [None if t is None else t.detach().cpu() for t in (value, grad_x, grad_y)]
        del value, grad_x, grad_y
    except Exception as exc:
        _failed(point, exc)
        return point
    point.n = repeats_for(repeats, budget_s, row.pop("seconds"))
    point.row, point.step = row, step
    return point


def measure_group(
    impls: list[Impl],
    cfg: Config,
    mode: str,
    x: torch.Tensor,
    y: torch.Tensor,
    device: str,
    oracle: Callable[[Impl], Oracle],
    repeats: int,
    budget_s: float,
    back_to_back: bool = False,
) -> list[Row]:
    """The rows of ``impls`` on the same inputs and mode, one each: each implementation's
    warm-up and one instrumented step, then timed steps; a failure becomes a status.  The
    timed steps are taken in turn: one step of each implementation, then the next round,
    until each has its own number of steps.  With ``back_to_back``, as many steps again back
    to back (:func:`back_to_back`): their time per step is the row's ``back_to_back_ms``.

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
                    p.times.append(time_ms(p.step, device))
                except Exception as exc:
                    _failed(p, exc)
    for p in points:
        if p.step is None:
            continue
        p.row.update(stats(p.times))
        if back_to_back:
            try:
                p.row["back_to_back_ms"] = time_back_to_back(p.step, device, p.n)
            except Exception as exc:
                _failed(p, exc)
                continue
        p.step = None  # (its buffers and graph go before the next implementation's)
    rows = []
    for p in points:
        rows.append(p.row)
        if p.outputs is None or p.row.get("status") != "ok":
            continue
        ref = oracle(p.impl)
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
SOLVE_WARMUP = 2


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
        sync(device)
        if mode == barycenter.ITERATION:
            _, row = instrumented(solver.iterate, impl, device)
            n = repeats_for(repeats, budget_s, row.pop("seconds"))
            row.update(stats([time_ms(solver.iterate, device) for _ in range(n)]))
            return [{"metric": metrics[0], **row}]
        del solver
        # The solve's own calls warmed up too: one that runs out of iterations ends with an
        # objective without gradients, for the fused impl the fused forward without
        # gradients, whose kernel is compiled on first use (it had taken 7.7 s of the timed solve).
        impl.solve_barycenter(X, cfg.gamma, SOLVE_WARMUP, mode == barycenter.EARLY_STOP)
        sync(device)
        total = time_ms(solve, device)
    except Exception as exc:
        return [{"metric": metrics[0], "status": classify(exc), "note": message(exc)}]
    values = {"total_ms": total, "iterations": len(history) - 1, "objective": min(history)}
    note = f"one solve of max_iter = {max_iter}"
    return [
        {"metric": m, "median": values[m], "repeats": 1, "status": "ok", "note": note}
        for m in metrics
    ]
