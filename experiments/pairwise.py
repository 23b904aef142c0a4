"""The ``pairwise`` sweep: all-pairs matrices on the CPU, sdtw's :func:`sdtw.cdist` against
tslearn's ``cdist_soft_dtw`` and aeon's ``soft_dtw_pairwise_distance`` /
``dtw_pairwise_distance``, on GunPoint test x train (aeon's bundled copy: 150 x 50 series of
length 150, univariate; ``--dataset OSULeaf``: 242 x 200, length 427), soft-DTW forward at
gamma = 1 and exact DTW.

``python -m experiments.pairwise [--quick] [--repeats R] [--dataset NAME] [--out DIR]`` writes
one long-format CSV, ``<out>/pairwise.csv`` (default: the git-ignored results folder of this
machine), one row per (dataset, implementation, measure, metric): ``time_s`` (median, p20, p80
of R timed calls after a warm-up call on two series each, which compiles), its
``cells_per_s`` (B1 B2 N M / time), and ``max_rel_diff`` against sdtw's matrix (tslearn and
aeon use the squared Euclidean cost too; aeon 1.6's soft-DTW is the absolute value of the
others', and 0 for identical series: compared with ``|sdtw|``), with the harness's provenance
columns.  The peers run single-threaded or with their own threading as installed; sdtw with
Numba's threads (all cores).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import sdtw
from experiments.provenance import default_out_dir, provenance

__all__ = ["IMPLS", "main", "run"]


def _sdtw(gamma: float):
    def f(test: np.ndarray, train: np.ndarray) -> np.ndarray:
        X, Y = torch.from_numpy(test), torch.from_numpy(train)
        return sdtw.cdist(X, Y, gamma=gamma, backend="cpu", progress=False).numpy()

    return f


def _tslearn(gamma: float):
    from tslearn.metrics import cdist_soft_dtw

    return lambda test, train: cdist_soft_dtw(test, train, gamma=gamma)


def _aeon_soft(gamma: float):
    from aeon.distances import soft_dtw_pairwise_distance

    # aeon: (B, channels, time)
    return lambda test, train: soft_dtw_pairwise_distance(
        test.transpose(0, 2, 1), train.transpose(0, 2, 1), gamma=gamma
    )


def _aeon_dtw(gamma: float):
    from aeon.distances import dtw_pairwise_distance

    return lambda test, train: dtw_pairwise_distance(
        test.transpose(0, 2, 1), train.transpose(0, 2, 1)
    )


#: (implementation, measure) -> (gamma, factory of f(test, train) -> (B1, B2) array)
IMPLS = {
    ("sdtw-cdist", "softdtw"): (1.0, _sdtw(1.0)),
    ("tslearn", "softdtw"): (1.0, _tslearn(1.0)),
    ("aeon", "softdtw"): (1.0, _aeon_soft(1.0)),
    ("sdtw-cdist", "dtw"): (0.0, _sdtw(0.0)),
    ("aeon", "dtw"): (0.0, _aeon_dtw(0.0)),
}


#: The datasets (aeon's bundled copies, equal lengths, univariate): test x train.
DATASETS = ("GunPoint", "OSULeaf")


def data(quick: bool, dataset: str = "GunPoint") -> tuple[np.ndarray, np.ndarray, str]:
    """``dataset``'s test and train as float64 (B, N, 1); ``quick``: the first 10 x 5."""
    from aeon.datasets import load_classification

    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    test = load_classification(dataset, split="test")[0].transpose(0, 2, 1).astype(np.float64)
    train = load_classification(dataset, split="train")[0].transpose(0, 2, 1).astype(np.float64)
    if quick:
        return np.ascontiguousarray(test[:10]), np.ascontiguousarray(train[:5]), f"{dataset}-quick"
    return np.ascontiguousarray(test), np.ascontiguousarray(train), dataset


def run(quick: bool = False, repeats: int = 3, dataset: str = "GunPoint") -> list[dict]:
    """Every implementation's rows (see the module docstring)."""
    test, train, name = data(quick, dataset)
    (B1, N, D), (B2, M) = test.shape, train.shape[:2]
    cells = B1 * B2 * N * M
    base = {"dataset": name, "B1": B1, "B2": B2, "N": N, "M": M, "D": D, **provenance()}
    rows, ours = [], {}
    for (impl, measure), (gamma, f) in IMPLS.items():
        try:
            f(test[:2], train[:2])  # (warm-up: compilation, on two series each)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                out = np.asarray(f(test, train))
                times.append(time.perf_counter() - t0)
        except Exception as exc:  # (a peer's failure is a row, not the end of the sweep)
            note = repr(exc)[:200]
            rows.append({**base, "impl": impl, "measure": measure, "gamma": gamma,
                         "metric": "time_s", "status": "error", "note": note})  # fmt: skip
            continue
        if impl == "sdtw-cdist":
            ours[measure] = out
        want = ours.get(measure)
        if impl == "aeon" and measure == "softdtw" and want is not None:
            want = np.abs(want)  # (aeon 1.6 returns |soft-DTW|, 0 for identical series)
        diff = float(np.abs(out - want).max() / np.abs(want).max()) if want is not None else None
        q = statistics.quantiles(times, n=5) if len(times) > 1 else [times[0]] * 4
        median = statistics.median(times)
        common = {**base, "impl": impl, "measure": measure, "gamma": gamma, "status": "ok"}
        rows.append({**common, "metric": "time_s", "median": median, "p20": q[0], "p80": q[3]})
        rows.append({**common, "metric": "cells_per_s", "median": cells / median})
        rows.append({**common, "metric": "max_rel_diff", "median": diff})
    return rows


def _write(rows: list[dict], path: Path) -> None:
    columns = list(dict.fromkeys(k for row in rows for k in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, columns)
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.pairwise", description=__doc__)
    p.add_argument("--quick", action="store_true", help="10 x 5 series (a smoke test)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per implementation")
    p.add_argument("--out", type=Path, default=None, help="folder of pairwise.csv")
    p.add_argument(
        "--dataset",
        action="append",
        choices=DATASETS,
        help="test x train of this dataset, repeatable (default: GunPoint)",
    )
    args = p.parse_args(argv)
    rows = [r for d in args.dataset or ["GunPoint"] for r in run(args.quick, args.repeats, d)]
    path = (args.out or default_out_dir()) / "pairwise.csv"
    _write(rows, path)
    for r in rows:
        if r["metric"] in ("time_s", "cells_per_s") and r.get("status") == "ok":
            print(f"{r['impl']:<11} {r['measure']:<8} {r['metric']:<12} {r['median']:.4g}")
        elif r.get("status") != "ok":
            print(f"{r['impl']:<11} {r['measure']:<8} error: {r['note']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
