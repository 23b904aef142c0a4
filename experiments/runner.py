"""A sweep: its plan, its configurations one by one, and its rows appended to ``<out>/<sweep>.csv``
(:mod:`experiments.results_csv`), with a progress bar.

``resume=True`` keeps the CSV and skips the measurements already complete in it, after
dropping what a crash or an error left (:func:`experiments.results_csv.load_for_resume`: torn
rows, measurements with a row missing, and, unless ``retry_errors=False``, those that ended in
status ``error``), and says which ones it skips.  ``deadline`` stops starting new measurements
after that time (a device with a per-command limit): the CSV stays valid and a resumed run
completes it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from experiments import barycenter
from experiments.impls import FORWARD_BACKWARD, IMPLS, Impl
from experiments.measure import (
    Oracle,
    barycenter_inputs,
    compute_oracle,
    gate,
    measure_barycenter,
    measure_group,
)
from experiments.provenance import provenance
from experiments.results_csv import (
    BACK_TO_BACK,
    METRIC,
    Appender,
    Key,
    Row,
    describe,
    key,
    load_for_resume,
)
from experiments.sweeps import Config, Sweep
from experiments.timing import free_memory, make_inputs

if TYPE_CHECKING:
    from tqdm import tqdm

__all__ = ["expected_rows", "run_config", "run_sweep", "turn_groups"]


def expected_rows(sweep: Sweep, row: dict) -> int:
    """How many rows (metrics) the measurement of ``row`` writes in ``sweep``: one when it
    failed or was skipped; when ``ok``, each metric of its mode (barycenter) or the time and,
    in a ``back_to_back`` sweep, the back-to-back time."""
    if row["status"] != "ok":
        return 1
    if sweep.task == "barycenter":
        return len(barycenter.METRICS[str(row["mode"])])
    return 2 if sweep.back_to_back else 1


def _resume(sweep: Sweep, path: Path, retry_errors: bool) -> set[Key]:
    """The measurements of ``path`` to skip; prints what was dropped, retried and skipped."""

    def complete(rows: list[dict]) -> bool:
        return len(rows) == expected_rows(sweep, rows[0])

    state = load_for_resume(path, complete, retry_errors=retry_errors)
    name = sweep.name
    for line in state.dropped:
        print(f"resume: {name}: dropped from {path}: {line}", file=sys.stderr)
    for k in state.retried:
        print(f"resume: {name}: measuring again (it ended in status error): {describe(k)}")
    if state.done:
        print(f"resume: {name}: {len(state.done)} measurements already in {path}, skipped:")
        for k in sorted(state.done, key=describe):
            print(f"  {describe(k)}")
    return state.done


def run_sweep(
    sweep: Sweep,
    impls: list[str],
    out: Path,
    *,
    repeats: int,
    budget_s: float = 5.0,
    resume: bool = False,
    retry_errors: bool = True,
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
        Folder of the CSV; created if needed.
    repeats : int
        Timed steps per measurement (fewer, at least 3, for steps slower than ``budget_s``).
    budget_s : float
        Seconds of timed steps aimed at per measurement.
    resume : bool
        Keep the existing CSV and skip the measurements complete in it; without it, an
        existing file is replaced at the first measurement.
    retry_errors : bool
        With ``resume``: measure again what ended in status ``error`` (its rows replaced).
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
    out.mkdir(parents=True, exist_ok=True)
    done = _resume(sweep, path, retry_errors) if resume else set()
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
            if key({"impl": name, "mode": mode, **vars(cfg)}) not in done
        ]
        if points:
            plan.append((cfg, points))
    total = sum(len(points) for _, points in plan)
    max_iter = barycenter.QUICK_MAX_ITER if quick else barycenter.MAX_ITER
    writer = Appender(path, append=resume)
    bar = tqdm(total=total, desc=sweep.name, unit="pt", dynamic_ncols=True, mininterval=0.5)
    complete = True
    try:
        for cfg, points in plan:
            complete = run_config(
                sweep, cfg, points, device, writer.write, bar, repeats, budget_s, max_iter, deadline
            )
            if not complete:
                break
    finally:
        bar.close()
        writer.close()
    return path, complete


def run_config(
    sweep: Sweep,
    cfg: Config,
    points: list[tuple[str, str]],
    device: str,
    write_rows: Callable[[list[Row]], None],
    bar: tqdm,
    repeats: int,
    budget_s: float,
    max_iter: int,
    deadline: float | None,
) -> bool:
    """Every (impl, mode) of one configuration, sharing its inputs and its reference;
    ``False`` if the deadline stopped it.  The implementations of one mode are measured in
    groups (:func:`turn_groups`), the timed steps of each group's implementations in turn
    (:func:`experiments.measure.measure_group`); barycenter points one by one.  Each
    measurement's rows go to ``write_rows`` together."""
    is_barycenter = sweep.task == "barycenter"
    inputs: tuple[torch.Tensor, ...] | None = None
    cached: dict[object, Oracle] = {}

    def oracle(impl: Impl) -> Oracle:
        # (one reference per set of per-pair lengths: the full-length one is shared)
        if impl.lengths not in cached:
            lengths = None if impl.lengths is None else impl.lengths(cfg.B, cfg.N, cfg.M)
            cached[impl.lengths] = compute_oracle(*inputs, cfg.gamma, device, lengths)
        return cached[impl.lengths]

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
        write_rows(rows)
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
                free_memory(device)
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
        for turn in turn_groups(todo):
            inputs = inputs or make_inputs(cfg, device)
            group = [IMPLS[name] for name in turn]
            rows = measure_group(
                group, cfg, mode, *inputs, device, oracle, repeats, budget_s, sweep.back_to_back
            )
            measured.update(zip(turn, rows, strict=True))
            free_memory(device)
        for name in names:
            status, note, predicted = gates[name]
            row: Row = {"metric": METRIC, "status": status, "note": note, **measured.get(name, {})}
            rows = [row]
            if "back_to_back_ms" in row:
                rows.append(_back_to_back_row(row))
            write(name, mode, predicted, rows)
    return True


def turn_groups(names: list[str]) -> list[list[str]]:
    """``names`` (one configuration and mode) split into the groups whose timed steps go in
    turn: the eager calls, then the whole-step graph replays (:attr:`Impl.graphed`), each in
    the given order, empty groups left out.

    A graph replay is timed from an idle GPU, so its time includes the host's submission of
    the replay, and that takes longer right after another implementation's eager step: on the
    H200 at B = 32, N = 128, D = 64 the fused whole-step replay took 0.118 ms timed alone,
    0.110-0.117 in turn with the unfused one and 0.167-0.168 in turn with all six sdtw
    implementations.  Eager steps are timed in turn with eager steps, which are host-bound
    alike at small N."""
    eager = [n for n in names if not IMPLS[n].graphed]
    graphed = [n for n in names if IMPLS[n].graphed]
    return [g for g in (eager, graphed) if g]


def _back_to_back_row(row: Row) -> Row:
    """The ``time_ms_back_to_back`` row of a measurement: its back-to-back time per step as
    the median (one interval: no percentiles), the rest of ``row`` as measured."""
    ms = row.pop("back_to_back_ms")
    return {**row, "metric": BACK_TO_BACK, "median": ms, "p20": None, "p80": None}
