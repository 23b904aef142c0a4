"""Benchmark harness, the command line: time, memory, launches and error of every
implementation on a sweep.

Usage
-----
::

    python -m experiments.run [--sweep NAME ...] [--impl NAME ...] [--out DIR]
                              [--repeats N] [--budget-s S] [--time-limit-s S] [--dim D ...]
                              [--resume] [--keep-errors] [--replace-committed] [--quick]
                              [--list]

Without ``--sweep``: ``paper-grid``, ``fig1-length`` and ``fig1-dim`` on a machine with a CUDA
GPU, ``cpu`` otherwise.  Without ``--impl``: each sweep's own list (those that run on its
device).  Results go to ``<out>/<sweep>.csv``, by default under the git-ignored
``experiments/results/local/<machine>/`` (``nvidia-h200``, ``cpu-amd-epyc``); the committed
results (``experiments/results/<machine>/``, or any file git tracks) are written only with
``--replace-committed``, which without ``--out`` writes to this machine's committed folder.
The end of a run says where its rows went, how noisy its times were, and how they compare with
the committed numbers of this machine class, when there are any.

Everything that can be checked before measuring is (the arguments, the output folder and
files: writable?), so that a run fails at once rather than after its first point.  Rows are
appended as they are measured, so a crash or Ctrl-C keeps every measurement finished before it;
``--resume`` completes the file (:mod:`experiments.runner`), measuring again what ended in
status ``error`` unless ``--keep-errors``.  The modules: :mod:`experiments.measure` (what is
measured), :mod:`experiments.timing`, :mod:`experiments.results_csv` (the CSV),
:mod:`experiments.provenance`, :mod:`experiments.summary`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from experiments.impls import IMPLS, baselines_error
from experiments.provenance import committed_dir, default_out_dir, is_committed
from experiments.results_csv import check_writable
from experiments.runner import run_sweep
from experiments.summary import compare, noise, summarize
from experiments.sweeps import SWEEPS, Sweep, default_sweeps

__all__ = ["build_parser", "choose_impls", "main"]


# Each type below says what it wants in the error ("argument --dim: must be a whole number
# >= 1, got 'abc'"): a ValueError from int() or float() would make argparse print the
# function's name instead ("invalid _count value: 'abc'").


def _number(text: str, kind: type, want: str) -> int | float:
    """``kind(text)``, or argparse's error saying ``want``."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    value = _number(text, float, "a finite number of seconds > 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def _limit_seconds(text: str) -> float:
    value = _number(text, float, "a finite number of seconds >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _count(text: str) -> int:
    value = _number(text, int, "a whole number >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


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
        help="output folder (default: experiments/results/local/<gpu name, or cpu-<model>>, "
        "git-ignored)",
    )
    parser.add_argument(
        "--replace-committed",
        action="store_true",
        help="allow writing committed results (experiments/results/<machine>/, or a file git "
        "tracks); without --out, write this machine's committed folder",
    )
    parser.add_argument(
        "--repeats", type=_count, help="timed steps per measurement (default: 10 GPU, 5 CPU)"
    )
    parser.add_argument(
        "--budget-s",
        type=_positive_seconds,
        default=5.0,
        help="seconds of timed steps per measurement; slower steps get fewer repeats, "
        "at least 3 (default: %(default)s)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the CSV and skip the measurements complete in it (torn rows are dropped, "
        "rows with status error measured again)",
    )
    parser.add_argument(
        "--keep-errors",
        action="store_true",
        help="with --resume: keep rows with status error instead of measuring them again",
    )
    parser.add_argument(
        "--time-limit-s",
        type=_limit_seconds,
        help="start no new measurement after this many seconds; print the summary and exit 0 "
        "(rerun with --resume to finish)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        type=_count,
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


def choose_impls(
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


def _check_output(out: Path, names: list[str], args: argparse.Namespace) -> str | None:
    """Why the CSVs of sweeps ``names`` cannot be written in ``out``, or ``None``."""
    for name in names:
        path = out / f"{name}.csv"
        if is_committed(path) and not args.replace_committed:
            return (
                f"{path} is committed data (experiments/results/<machine>/, or tracked by git); "
                "pass --replace-committed to write it, or choose another --out"
            )
        try:
            check_writable(path)
        except OSError as exc:
            return f"--out {out}: cannot write {path} ({type(exc).__name__}: {exc})"
        if path.exists() and not args.resume:
            print(
                f"note: {name}: replacing {path} (an earlier run's; --resume completes it instead)",
                file=sys.stderr,
            )
    return None


def _report(paths: list[Path]) -> None:
    """Each sweep's summary, where its rows went, its noise and the committed comparison."""
    for path in paths:
        if not path.exists():
            continue
        print(summarize(path))
        with path.open(newline="") as f:
            rows = max(sum(1 for _ in f) - 1, 0)
        print(f"results: {rows} rows in {path}")
        print(noise(path))
        print(compare(path, committed_dir() / path.name))


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse errors exit with 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        print(_listing())
        return 0
    if args.keep_errors and not args.resume:
        parser.error("--keep-errors applies to --resume only")
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
        chosen, notes = choose_impls(sweep, args.impl, device)
        for note in notes:
            print(f"note: {name}: leaving out {note}", file=sys.stderr)
        if chosen:
            plans.append((sweep, chosen, device))
    if not plans:
        parser.error(f"no requested implementation runs on sweep(s) {', '.join(names)}; see --list")
    if args.out is not None:
        out = args.out
    else:
        out = committed_dir() if args.replace_committed else default_out_dir()
    problem = _check_output(out, [sweep.name for sweep, _, _ in plans], args)
    if problem:
        print(f"error: {problem}. Nothing was measured.", file=sys.stderr)
        return 2
    deadline = None if args.time_limit_s is None else time.monotonic() + args.time_limit_s
    paths, complete = [], True
    try:
        for sweep, chosen, device in plans:
            if not complete:
                print(f"{sweep.name}: not started (time limit)")
                continue
            repeats = args.repeats or (10 if device == "cuda" else 5)
            print(f"{sweep.name}: {', '.join(chosen)} on {device} -> {out / sweep.name}.csv")
            paths.append(out / f"{sweep.name}.csv")
            _, complete = run_sweep(
                sweep,
                chosen,
                out,
                repeats=repeats,
                budget_s=args.budget_s,
                resume=args.resume,
                retry_errors=not args.keep_errors,
                quick=args.quick,
                deadline=deadline,
                dims=args.dim,
            )
    except KeyboardInterrupt:
        where = ", ".join(str(p) for p in paths if p.exists()) or "no file yet"
        print(
            f"\ninterrupted: every measurement finished so far is kept ({where}); rerun the "
            "same command with --resume to finish.",
            file=sys.stderr,
        )
        return 130
    _report(paths)
    if not complete:
        print(
            f"INCOMPLETE: --time-limit-s {args.time_limit_s:g} reached; the CSVs are valid, "
            "rerun the same command with --resume to finish."
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
