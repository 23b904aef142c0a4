"""1-NN and k-means on the UCR datasets that aeon ships in its package (issue 53), on the CPU.

``python -m experiments.ucr [--quick] [--out DIR] [--dataset NAME ...]`` writes one long-format
CSV, ``<out>/ucr.csv`` (default: the git-ignored ``experiments/results/local/<machine>/``; the
committed data, ``experiments/results/cpu-amd-epyc/``, only when ``--out`` names it: the nox
session ``ucr`` does), one row per measurement with the run's provenance;
``python -m experiments.ucr --report [--out DIR]`` turns ``DIR/ucr.csv`` (default: the
committed one) into ``docs/ucr.md``.

Data: aeon's bundled copies (``aeon.datasets.load_classification``, no download): GunPoint,
ArrowHead, ItalyPowerDemand, OSULeaf (univariate, equal lengths), JapaneseVowels (12 channels,
lengths 7-29) and PickupGestureWiimoteZ (univariate, lengths 29-361).  Every series is
z-normalised, per channel, over its own length.

1. 1-NN test error, train -> test, full window: sdtw's
   :class:`sdtw.estimators.KNeighborsTimeSeriesClassifier` with exact DTW (``gamma=0``) and
   with the soft-DTW divergence (``normalize=True``) at :data:`NN_GAMMAS`; aeon's
   ``KNeighborsTimeSeriesClassifier(distance="dtw")`` as the peer (``n_jobs=1``; sdtw runs
   Numba's threads: the ``threads`` column).  Times: fit + predict, after an untimed warm-up on
   two series (compilation).  ``agreement_aeon``: the fraction of test series where sdtw's
   exact-DTW prediction equals aeon's.  Where aeon's copy is not z-normalised already (to
   0.01: JapaneseVowels, PickupGestureWiimoteZ, and ItalyPowerDemand, z-normalised with the
   n - 1 standard deviation), exact DTW runs on the raw series too (column
   ``prep``: ``znorm`` or ``raw``): JapaneseVowels' per-channel levels over 7-29 points,
   which z-normalising takes away, are what tells its speakers apart.
2. k-means on the test set, k = the number of classes: sdtw's
   :class:`sdtw.estimators.SoftDTWKMeans` against tslearn's
   ``TimeSeriesKMeans(metric="softdtw")``, both on the plain soft-DTW value (tslearn's
   objective) at :data:`KM_GAMMA`, the same ``max_iter`` and barycenter iterations (sdtw: Adam;
   tslearn: L-BFGS), and the same initial centroids: the k series that
   ``numpy.random.default_rng(seed).choice(B, k, replace=False)`` draws, as SoftDTWKMeans
   draws them (given to tslearn as ``init``).  Metrics: adjusted Rand index against the true
   labels, wall time, iterations, and ``objective``: the mean soft-DTW value from each series
   to its centroid, computed by :func:`sdtw.cdist` for both centroid sets.

Variable lengths: sdtw takes a list of (n_b, D) series, aeon a list of (D, n_b) arrays,
tslearn one NaN-padded (B, max n, D) array (its initial centroids: the picked series padded
with zeros, as sdtw pads them); the ``input`` column says what each ran on.  :data:`PLANS`
caps what would not fit the ~20-minute budget on 2 cores (OSULeaf's long series); the
``capped`` column says what was capped.  ``loadavg`` is the machine's 1-minute load average
when a row was measured (other jobs share the cores: compare times within a run).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.provenance import REPO, RESULTS, default_out_dir, provenance

__all__ = ["DATASETS", "PLANS", "Plan", "classify", "load", "main", "report", "run"]

DATASETS = (
    "GunPoint",
    "ArrowHead",
    "ItalyPowerDemand",
    "OSULeaf",
    "JapaneseVowels",
    "PickupGestureWiimoteZ",
)
#: The divergence's gammas for 1-NN: 1 (smooth) and 0.1 (closer to DTW).
NN_GAMMAS = (1.0, 0.1)
#: k-means' gamma, both implementations.
KM_GAMMA = 0.1
KM_IMPLS = ("sdtw", "tslearn")
CSV_NAME = "ucr.csv"
COMMITTED_CSV = RESULTS / "cpu-amd-epyc" / CSV_NAME
DOC = REPO / "docs" / "ucr.md"
#: 1-NN test error with full-window DTW, the UCR archive's table (Dau et al., 2019), for the
#: bundled sets of equal length (the archive pads variable-length ones; JapaneseVowels is UEA's).
UCR_DTW_ERROR = {"GunPoint": 0.093, "ArrowHead": 0.297, "ItalyPowerDemand": 0.050,
                 "OSULeaf": 0.409}  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """What runs on one dataset; ``nn_train``/``nn_test``/``km_series``: at most that many
    series (None: all)."""

    nn_gammas: tuple[float, ...] = NN_GAMMAS
    seeds: tuple[int, ...] = (0, 1, 2)
    max_iter: int = 10
    barycenter_iter: int = 30
    km_series: int | None = None
    nn_train: int | None = None
    nn_test: int | None = None

    def caps(self) -> str:
        """What this plan leaves out against the default one, for the ``capped`` column."""
        full = Plan()
        return "; ".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(full, f.name)
        )


#: OSULeaf (427 points): one divergence gamma; k-means on 100 of its 242 test series, one
#: seed, 5 iterations of 10 barycenter steps (tslearn took ~2 min for 3 such iterations on all).
PLANS = {
    "OSULeaf": Plan(nn_gammas=(0.1,), seeds=(0,), max_iter=5, barycenter_iter=10, km_series=100)
}
#: ``--quick``: a few series of each set, seconds in all.
QUICK = Plan(nn_gammas=(0.1,), seeds=(0,), max_iter=2, barycenter_iter=3, km_series=12,
             nn_train=12, nn_test=8)  # fmt: skip


def _znorm(x: np.ndarray) -> np.ndarray:
    sd = x.std(axis=0, keepdims=True)
    return (x - x.mean(axis=0, keepdims=True)) / np.where(sd > 0, sd, 1.0)


def load(name: str, split: str, znorm: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """(series, labels): aeon's bundled split as float64 (n_b, D) series, z-normalised unless
    ``znorm`` is False (the raw series)."""
    from aeon.datasets import load_classification

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        X, y = load_classification(name, split=split)
    series = [np.asarray(x, dtype=np.float64).T for x in X]
    return [_znorm(s) for s in series] if znorm else series, np.asarray(y)


def _equal(series: Sequence[np.ndarray]) -> bool:
    return len({len(s) for s in series}) == 1


def sdtw_input(series: Sequence[np.ndarray]):
    """sdtw's estimators: one (B, N, D) array, or the list of (n_b, D) series."""
    return np.stack(series) if _equal(series) else list(series)


def aeon_input(series: Sequence[np.ndarray]):
    """aeon: one (B, D, N) array, or a list of (D, n_b) arrays."""
    return np.stack([s.T for s in series]) if _equal(series) else [s.T.copy() for s in series]


def _padded(series: Sequence[np.ndarray], fill: float) -> np.ndarray:
    out = np.full((len(series), max(len(s) for s in series), series[0].shape[1]), fill)
    for b, s in enumerate(series):
        out[b, : len(s)] = s
    return out


def _describe(impl: str, series: Sequence[np.ndarray]) -> str:
    B, D, n = len(series), series[0].shape[1], [len(s) for s in series]
    if _equal(series):
        shape = {"aeon": (B, D, n[0])}.get(impl, (B, n[0], D))
        return f"array {shape}"
    span = f"lengths {min(n)}-{max(n)}"
    if impl == "tslearn":
        return f"NaN-padded array {(B, max(n), D)}, {span}"
    return f"list of {B} {'(D, n)' if impl == 'aeon' else '(n, D)'} series, {span}"


def _subset(series: list, y: np.ndarray, n: int | None) -> tuple[list, np.ndarray]:
    """``n`` of the series (all where None), drawn by a permutation seeded 0, in their order
    (the sets are sorted by class: the first n would be one class)."""
    if n is None or n >= len(series):
        return series, y
    keep = np.sort(np.random.default_rng(0).permutation(len(series))[:n])
    return [series[i] for i in keep], y[keep]


def classify(impl: str, gamma: float, train: Sequence[np.ndarray], y_train: np.ndarray,
             test: Sequence[np.ndarray]) -> np.ndarray:  # fmt: skip
    """1-NN predictions for ``test``: ``impl`` "sdtw" (exact DTW at ``gamma=0``, else the
    divergence) or "aeon" (DTW; ``gamma`` must be 0), full window."""
    if impl == "sdtw":
        from sdtw.estimators import KNeighborsTimeSeriesClassifier

        clf = KNeighborsTimeSeriesClassifier(1, gamma=gamma, normalize=gamma > 0, backend="cpu")
        return clf.fit(sdtw_input(train), y_train).predict(sdtw_input(test))
    if impl == "aeon" and gamma == 0:
        from aeon.classification.distance_based import KNeighborsTimeSeriesClassifier

        clf = KNeighborsTimeSeriesClassifier(distance="dtw", n_neighbors=1, n_jobs=1)
        return clf.fit(aeon_input(train), y_train).predict(aeon_input(test))
    raise ValueError(f"no 1-NN {impl!r} at gamma={gamma}")


def _threads(impl: str) -> int:
    if impl == "sdtw":
        import numba

        return numba.get_num_threads()
    return 1


def _row(base: dict, **fields) -> dict:
    return {**base, **fields, "loadavg": round(os.getloadavg()[0], 2)}


def nn_rows(name: str, plan: Plan, base: dict) -> list[dict]:
    """The 1-NN rows of one dataset (see the module docstring)."""
    rows = []
    for prep in ("znorm", "raw"):
        train, y_train = _subset(*load(name, "train", prep == "znorm"), plan.nn_train)
        test, y_test = _subset(*load(name, "test", prep == "znorm"), plan.nn_test)
        if prep == "raw" and all(np.allclose(s, _znorm(s), atol=1e-2) for s in train + test):
            continue  # (aeon's copy is z-normalised already)
        gammas = plan.nn_gammas if prep == "znorm" else ()
        rows += _nn_prep({**base, "prep": prep}, train, y_train, test, y_test, gammas)
    return rows


def _nn_prep(base: dict, train: list, y_train: np.ndarray, test: list, y_test: np.ndarray,
             gammas: Sequence[float]) -> list[dict]:  # fmt: skip
    """The 1-NN rows of one preparation of a dataset: exact DTW (sdtw, aeon), then sdtw's
    divergence at ``gammas``."""
    base = {**base, "experiment": "1nn", "split": "train->test", "n_train": len(train),
            "n_series": len(test)}  # fmt: skip
    rows, predicted = [], {}
    two = np.unique(y_train, return_index=True)[1][:2]  # (aeon fits two classes at least)
    for impl, gamma in [("sdtw", 0.0), ("aeon", 0.0), *(("sdtw", g) for g in gammas)]:
        measure = "dtw" if gamma == 0 else "divergence"
        common = {**base, "impl": impl, "measure": measure, "gamma": gamma,
                  "input": _describe(impl, train), "threads": _threads(impl)}  # fmt: skip
        try:
            classify(impl, gamma, [train[i] for i in two], y_train[two], test[:2])  # (warm-up)
            t0 = time.perf_counter()
            pred = classify(impl, gamma, train, y_train, test)
            seconds = time.perf_counter() - t0
        except Exception as exc:  # (a failure is a row, not the end of the run)
            rows.append(_row(common, metric="error", status="error", note=repr(exc)[:200]))
            continue
        predicted[(impl, gamma)] = pred
        rows.append(_row(common, metric="error", value=float(np.mean(pred != y_test)),
                         status="ok"))  # fmt: skip
        rows.append(_row(common, metric="time_s", value=seconds, status="ok"))
    if ("sdtw", 0.0) in predicted and ("aeon", 0.0) in predicted:
        same = np.mean(predicted[("sdtw", 0.0)] == predicted[("aeon", 0.0)])
        common = {**base, "impl": "sdtw", "measure": "dtw", "gamma": 0.0}
        rows.append(_row(common, metric="agreement_aeon", value=float(same), status="ok"))
    return rows


def _objective(series: Sequence[np.ndarray], centers: np.ndarray, labels: np.ndarray) -> float:
    """Mean soft-DTW value (KM_GAMMA) from each series to its centroid, by sdtw.cdist."""
    import torch

    import sdtw

    lengths = torch.tensor([len(s) for s in series])
    X = torch.from_numpy(_padded(series, 0.0))
    C = torch.as_tensor(np.asarray(centers, dtype=np.float64))
    D = sdtw.cdist(X, C, gamma=KM_GAMMA, x_lengths=lengths, backend="cpu", progress=False)
    return float(D[torch.arange(len(series)), torch.as_tensor(labels)].mean())


def _kmeans(impl: str, series, k: int, seed: int, plan: Plan) -> tuple:
    """(labels, centroids (k, N, D), iterations) of one k-means run."""
    if impl == "sdtw":
        from sdtw.estimators import SoftDTWKMeans

        km = SoftDTWKMeans(k, gamma=KM_GAMMA, max_iter=plan.max_iter, random_state=seed,
                           barycenter_iter=plan.barycenter_iter, backend="cpu")  # fmt: skip
        km.fit(sdtw_input(series))
        return km.labels_, km.cluster_centers_.numpy(), km.n_iter_
    from tslearn.clustering import TimeSeriesKMeans

    picks = np.random.default_rng(seed).choice(len(series), k, replace=False)
    km = TimeSeriesKMeans(k, metric="softdtw", metric_params={"gamma": KM_GAMMA},
                          max_iter=plan.max_iter, max_iter_barycenter=plan.barycenter_iter,
                          init=_padded(series, 0.0)[picks], random_state=seed)  # fmt: skip
    km.fit(_padded(series, np.nan))
    if km.n_iter_ == 0:  # (every attempt hit an empty cluster: tslearn keeps no result)
        raise RuntimeError("tslearn: EmptyClusterError at each of its attempts (n_iter_ = 0)")
    return km.labels_, km.cluster_centers_, km.n_iter_


def km_rows(name: str, plan: Plan, base: dict, impls: Sequence[str] = KM_IMPLS) -> list[dict]:
    """The k-means rows of one dataset (see the module docstring)."""
    from sklearn.metrics import adjusted_rand_score

    series, y = _subset(*load(name, "test"), plan.km_series)
    base = {**base, "prep": "znorm"}
    k = len(np.unique(y))
    base = {**base, "experiment": "kmeans", "split": "test", "n_series": len(series),
            "max_iter": plan.max_iter, "barycenter_iter": plan.barycenter_iter}  # fmt: skip
    rows = []
    for impl in impls:
        common = {**base, "impl": impl, "measure": "softdtw", "gamma": KM_GAMMA,
                  "input": _describe(impl, series), "threads": _threads(impl)}  # fmt: skip
        try:
            _kmeans(impl, series[:4], 2, 0, dataclasses.replace(plan, max_iter=1,
                                                                barycenter_iter=1))  # fmt: skip
        except Exception as exc:
            rows.append(_row(common, metric="ari", status="error", note=repr(exc)[:200]))
            continue
        for seed in plan.seeds:
            one = {**common, "seed": seed}
            try:
                t0 = time.perf_counter()
                labels, centers, n_iter = _kmeans(impl, series, k, seed, plan)
                seconds = time.perf_counter() - t0
            except Exception as exc:
                rows.append(_row(one, metric="ari", status="error", note=repr(exc)[:200]))
                continue
            ari = float(adjusted_rand_score(y, labels))
            for metric, value in [("ari", ari), ("time_s", seconds), ("n_iter", n_iter),
                                  ("objective", _objective(series, centers, labels))]:  # fmt: skip
                rows.append(_row(one, metric=metric, value=value, status="ok"))
    return rows


def run(datasets: Sequence[str] = DATASETS, quick: bool = False,
        km_impls: Sequence[str] = KM_IMPLS) -> list[dict]:  # fmt: skip
    """Every row of the run (see the module docstring), with a progress line per dataset;
    ``km_impls``: the k-means implementations ("tslearn" alone compiles for ~12 s)."""
    rows, start = [], time.perf_counter()
    for name in datasets:
        plan = QUICK if quick else PLANS.get(name, Plan())
        train, test, y = load(name, "train")[0], *load(name, "test")
        n = [len(s) for s in train + test]
        base = {"dataset": name, "D": train[0].shape[1], "classes": len(np.unique(y)),
                "length": f"{min(n)}" if min(n) == max(n) else f"{min(n)}-{max(n)}",
                "capped": plan.caps(), **provenance()}  # fmt: skip
        got = nn_rows(name, plan, base) + km_rows(name, plan, base, km_impls)
        rows += got
        summary = ", ".join(
            f"{r['impl']} {r['measure']} g={r['gamma']:g} {r['metric']} {r['value']:.3f}"
            for r in got
            if r["status"] == "ok" and r["metric"] in ("error", "ari") and r.get("seed", 0) == 0
        )
        bad = sum(r["status"] != "ok" for r in got)
        print(f"[{time.perf_counter() - start:6.0f} s] {name}: {summary}"
              + (f"; {bad} failed" if bad else ""), flush=True)  # fmt: skip
    return rows


COLUMNS = ("experiment", "dataset", "prep", "impl", "measure", "gamma", "seed", "metric", "value",
           "status", "note", "split", "n_train", "n_series", "length", "D", "classes",
           "input", "max_iter", "barycenter_iter", "capped", "threads", "loadavg")  # fmt: skip


def write(rows: list[dict], path: Path) -> None:
    columns = list(dict.fromkeys([*COLUMNS, *(k for row in rows for k in row)]))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, columns)
        w.writeheader()
        w.writerows(rows)


# --- the report: docs/ucr.md from the CSV (standard library only) ---


def _values(rows, **match) -> list[float]:
    return [float(r["value"]) for r in rows
            if r["status"] == "ok" and all(r[k] == v for k, v in match.items())]  # fmt: skip


def _cell(values: list[float], fmt: str = ".3f") -> str:
    if not values:
        return ""
    mid = statistics.mean(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{mid:{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"


def _nn_table(rows: list[dict], names: list[str]) -> list[str]:
    """The 1-NN table: errors, then times (s), one line per dataset."""
    gammas = sorted({r["gamma"] for r in rows if r["measure"] == "divergence"}, key=float,
                    reverse=True)  # fmt: skip
    raw = any(r["prep"] == "raw" for r in rows)
    ucr = any(name in UCR_DTW_ERROR for name in names)
    keys = [("sdtw", "dtw", "0.0"), ("aeon", "dtw", "0.0")]
    keys += [("sdtw", "divergence", g) for g in gammas]
    head = ["dataset", "train/test, length, D", "DTW (sdtw)", "DTW (aeon)"]
    head += [f"divergence, g = {float(g):g}" for g in gammas]
    head += ["UCR table, DTW"] if ucr else []
    head += ["DTW, raw series (sdtw / aeon)"] if raw else []
    head += ["time: sdtw DTW / aeon DTW" + "".join(f" / g = {float(g):g}" for g in gammas)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        one = [r for r in rows if r["dataset"] == name and r["experiment"] == "1nn"]
        if not one:
            continue
        z = [r for r in one if r["prep"] == "znorm"]
        r0 = z[0]
        cells = [name, f"{r0['n_train']}/{r0['n_series']}, {r0['length']}, {r0['D']}"]
        cells += [_cell(_values(z, impl=i, measure=m, gamma=g, metric="error"))
                  for i, m, g in keys]  # fmt: skip
        cells += [f"{UCR_DTW_ERROR[name]:.3f}" if name in UCR_DTW_ERROR else ""] if ucr else []
        if raw:
            both = [
                _cell(_values(one, prep="raw", impl=i, metric="error")) for i in ("sdtw", "aeon")
            ]
            cells.append(" / ".join(both) if any(both) else "")
        cells.append(" / ".join(_cell(_values(z, impl=i, measure=m, gamma=g, metric="time_s"),
                                      ".3g") or "-" for i, m, g in keys))  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    return out


def _both(rows: list[dict], metric: str, fmt: str = ".3f", join: str = " / ") -> str:
    return join.join(_cell(_values(rows, impl=i, metric=metric), fmt) or "failed"
                     for i in ("sdtw", "tslearn"))  # fmt: skip


def _failed(rows: list[dict]) -> set[tuple[str, str, str]]:
    """(dataset, impl, seed) of the k-means runs that gave no clustering: an error row, or
    tslearn's ``n_iter_ = 0`` (recorded as such before the harness turned it into an error)."""
    none = [r for r in rows if r["experiment"] == "kmeans" and (
        r["status"] != "ok" or (r["metric"] == "n_iter" and float(r["value"]) == 0))]  # fmt: skip
    return {(r["dataset"], r["impl"], r["seed"]) for r in none}


def _km_table(rows: list[dict], names: list[str]) -> list[str]:
    """The k-means table: mean [min, max] over the seeds that gave a clustering."""
    failed = _failed(rows)
    out = ["| dataset | series (k) | seeds | ARI sdtw | ARI tslearn | objective sdtw / tslearn "
           "| iterations sdtw / tslearn | time sdtw / tslearn (s) |", "|" + "---|" * 8]  # fmt: skip
    for name in names:
        two = [r for r in rows if r["dataset"] == name and r["experiment"] == "kmeans"
               and (name, r["impl"], r["seed"]) not in failed]  # fmt: skip
        if not two:
            continue
        seeds = len({r["seed"] for r in two if r["seed"] != ""})
        out.append(f"| {name} | {two[0]['n_series']} ({two[0]['classes']}) | {seeds} | "
                   f"{_both(two, 'ari', join=' | ')} | {_both(two, 'objective', '.2f')} | "
                   f"{_both(two, 'n_iter', '.1f')} | {_both(two, 'time_s', '.3g')} |")  # fmt: skip
    return out


def _provenance_line(rows: list[dict]) -> str:
    p = rows[0]
    shas = sorted({r["git_sha"][:12] for r in rows})
    dirty = " (dirty tree)" if any(r["git_dirty"] == "true" for r in rows) else ""
    dates = sorted({r["date_utc"][:10] for r in rows})
    load_avg = [float(r["loadavg"]) for r in rows if r["loadavg"]]
    threads = max((int(r["threads"]) for r in rows if r["impl"] == "sdtw" and r["threads"]),
                  default="?")  # fmt: skip
    return (f"Provenance: commit {', '.join(shas)}{dirty}, {p['cpu']} ({threads} Numba threads "
            f"for sdtw), torch {p['torch']}, numba {p['numba']}, {', '.join(dates)}; load "
            f"average {min(load_avg):.1f}-{max(load_avg):.1f} while it ran (the cores are "
            "shared: times move with it).")  # fmt: skip


def report(path: Path = COMMITTED_CSV) -> str:
    """docs/ucr.md's Markdown from the CSV at ``path``."""
    path = Path(path).resolve()
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    source = path.relative_to(REPO) if REPO in path.parents else path.name
    agree = [f"{r['dataset']} {float(r['value']):.3f}" + (" (raw)" if r["prep"] == "raw" else "")
             for r in rows if r["metric"] == "agreement_aeon"]  # fmt: skip
    caps = list(dict.fromkeys(f"{r['dataset']}: {r['capped']}" for r in rows if r["capped"]))
    inputs = list(dict.fromkeys(f"{r['dataset']}, {r['experiment']}, {r['impl']}: {r['input']}"
                                for r in rows if "lengths" in r["input"]))  # fmt: skip
    ucr = [name for name in names if name in UCR_DTW_ERROR]
    return "\n".join([
        "# UCR datasets: 1-NN and k-means",
        "",
        f"<!-- generated by `python -m experiments.ucr --report` from {source}: do not edit -->",
        "",
        _provenance_line(rows),
        "",
        "The six UCR/UEA datasets that aeon 1.6 ships inside its package, each series "
        "z-normalised (per channel); `python -m experiments.ucr` (the nox session `ucr`) "
        "measures them, its docstring says how.",
        "",
        "## 1-NN test error (full window)",
        "",
        "sdtw's `KNeighborsTimeSeriesClassifier`: exact DTW (`gamma=0`) and the soft-DTW "
        'divergence (`normalize=True`); aeon\'s `KNeighborsTimeSeriesClassifier(distance="dtw")`'
        " (one thread) as the peer. Times in seconds, fit + predict, after a warm-up.",
        "",
        *_nn_table(rows, names),
        "",
        "sdtw's and aeon's exact-DTW predictions agree on this fraction of the test series: "
        + ", ".join(agree) + ".",
        *(["", "UCR table: the archive's full-window DTW error rates (Dau et al., \"The UCR Time "
           "Series Archive\", 2019)."] if ucr else []),
        *(["", "Raw series: where aeon's copy differs from the z-normalised series (by more "
           "than 0.01 somewhere), exact DTW on the series as they come. ItalyPowerDemand's copy "
           "is z-normalised with the sample standard deviation (n - 1): a uniform scale, the "
           "same neighbours. On JapaneseVowels, z-normalising 7-29 points per channel takes "
           "away the levels that tell the speakers apart."]
          if any(r["prep"] == "raw" for r in rows) else []),
        "",
        "## k-means: adjusted Rand index against the classes",
        "",
        f"On the test set, k = the number of classes, plain soft-DTW at gamma = {KM_GAMMA:g}: "
        "sdtw's `SoftDTWKMeans` (Adam barycenters) against tslearn's "
        '`TimeSeriesKMeans(metric="softdtw")` (L-BFGS barycenters), the same initial centroids '
        "per seed, the same iteration caps. Mean [min, max] over the seeds; objective: the mean "
        "soft-DTW value from each series to its centroid (lower is better), computed the same "
        "way for both.",
        "",
        *_km_table(rows, names),
        "",
        *(f"- {name}, {impl}, seed {seed}: no clustering (left out of its means)"
          for name, impl, seed in sorted(_failed(rows))),
        *([""] if _failed(rows) else []),
        "## What ran on what",
        "",
        "Equal-length sets ran as arrays: (B, N, D) for sdtw and tslearn, (B, D, N) for aeon. "
        "Variable-length ones:",
        "",
        *(f"- {line}" for line in inputs),
        "",
        *(["Capped (against the default plan, to keep the run near 20 minutes on 2 cores):",
           "", *(f"- {line}" for line in caps), ""] if caps else []),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.ucr", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="a few series per set (a smoke test)")
    p.add_argument("--out", type=Path, default=None, help="folder of ucr.csv (the module's "
                   "docstring: where it goes by default)")  # fmt: skip
    p.add_argument("--dataset", nargs="+", default=list(DATASETS), choices=DATASETS)
    doc = DOC.relative_to(REPO)
    p.add_argument("--report", action="store_true", help=f"write {doc} from ucr.csv")
    args = p.parse_args(argv)
    if args.report:
        DOC.write_text(report(args.out / CSV_NAME if args.out else COMMITTED_CSV))
        print(f"wrote {DOC}")
        return 0
    rows = run(args.dataset, quick=args.quick)
    path = (args.out or default_out_dir()) / CSV_NAME
    write(rows, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
