"""What the report reads from our CSVs (:class:`experiments.load.Results`): cells and values
of the sweeps, gradient errors, fused / unfused ratios (ours and the cited ones), and the
barycenter measurements of RQ4, checked."""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from experiments.load import (
    BARYCENTER,
    BARYCENTER_MODES,
    ITERATION,
    NO_EARLY_STOP,
    REPO,
    Measurement,
    Point,
    Results,
    fmt_sig,
    impl_order,
    measurement,
    num,
    planned,
)
from paper.cited import CITED, published
from paper.markdown import DASH, fmt_gammas

__all__ = [
    "OURS_GPU",
    "PAPER_DESIGN",
    "Barycenters",
    "bary",
    "bary_incomplete",
    "bary_points",
    "bary_shapes",
    "barycenters",
    "cell",
    "gpu_values",
    "grad_err",
    "grid_points",
    "grid_ratio",
    "mem_mib",
    "ok_value",
    "on_gpu",
    "published_ratios",
    "results_label",
    "saving_pct",
    "their_ratios",
    "where_text",
    "worst_grad",
]


PAPER_DESIGN = ("paper-unfused", "paper-fused")


OURS_GPU = ("sdtw-fused", "sdtw-unfused")


def grid_points() -> list[tuple[int, int, int]]:
    return list(dict.fromkeys((p.B, p.N, p.D) for p in planned("paper-grid")))


def cell(
    results: Results, sweep: str, impl: str, column: str, scale: float = 1.0, **where: object
) -> str:
    """A measured cell: the number, or the row's status (``missing`` without a row)."""
    row = results.one(sweep, impl=impl, **where)
    if row is None:
        return "missing"
    if row["status"] != "ok":
        return row["status"]
    value = num(row[column])
    return DASH if value is None else fmt_sig(value * scale, 3)


def ok_value(results: Results, sweep: str, impl: str, column: str, **where: object) -> float | None:
    return results.value(sweep, column, impl=impl, **where)


def mem_mib(results: Results, sweep: str, impl: str, **where: object) -> float | None:
    value = ok_value(results, sweep, impl, "peak_mem_bytes", **where)
    return None if value is None else value / 2**20


def grad_err(row: dict[str, str] | None) -> float | None:
    """Worst of the x and y gradient errors; NaN when either is non-finite."""
    if row is None or row["status"] != "ok":
        return None
    values = [num(row[c]) for c in ("rel_err_grad_x", "rel_err_grad_y")]
    values = [v for v in values if v is not None]
    if not values:
        return None
    if any(not math.isfinite(v) for v in values):
        return math.nan
    return max(values)


def worst_grad(results: Results, impls: Sequence[str]) -> tuple[float, str, dict[str, str]]:
    """Largest gradient error of ``impls`` over every sweep: (error, sweep, row)."""
    best: tuple[float, str, dict[str, str]] | None = None
    for sweep, rows in results.sweeps.items():
        for row in rows:
            if row["impl"] not in impls or row["mode"] != "forward+backward":
                continue
            err = grad_err(row)
            if err is None:
                continue
            if best is None or not math.isfinite(err) or err > best[0]:
                best = (err, sweep, row)
                if not math.isfinite(err):
                    return best
    if best is None:
        raise ValueError(f"no gradient error recorded for {impls}")
    return best


def where_text(row: dict[str, str]) -> str:
    parts = [f"B = {row['B']}", f"N = {row['N']}", f"D = {row['D']}"]
    if float(row["gamma"]) != 1.0:
        parts.append(f"γ = {float(row['gamma']):g}")
    return ", ".join(parts)


def grid_ratio(results: Results, num_impl: str, den_impl: str, column: str) -> list[float]:
    out = []
    for B, N, D in grid_points():
        a = ok_value(results, "paper-grid", num_impl, column, B=B, N=N, D=D)
        b = ok_value(results, "paper-grid", den_impl, column, B=B, N=N, D=D)
        if a is not None and b:
            out.append(a / b)
    return out


def published_ratios(column_num: str, column_den: str) -> list[float]:
    return [
        row[column_num] / row[column_den]
        for row in published().values()
        if row[column_num] is not None and row[column_den]
    ]


def their_ratios(index: int) -> dict[tuple[int, int], float]:
    """fused / unfused of the authors' code on our H200, per (N, D); 0: time, 1: memory."""
    out = {}
    for key, entry in CITED["their_code_h200"]["grid"].items():
        fused, unfused = entry["fused"], entry["unfused"]
        if isinstance(fused, tuple) and isinstance(unfused, tuple):
            out[key] = fused[index] / unfused[index]
    return out


def saving_pct(ratios: Sequence[float]) -> list[float]:
    return [100 * (1 - r) for r in ratios]


def bary(results: Results, point: Point, mode: str) -> Measurement:
    """One barycenter measurement: every metric row of ``point`` in ``mode``."""
    where = {"B": point.B, "N": point.N, "M": point.M, "D": point.D, "gamma": point.gamma}
    return measurement(results, BARYCENTER, point.impl, mode, **where)


def on_gpu(m: Measurement) -> bool:
    return m.status == "ok" and m.device == "cuda"


def _gpu_value(results: Results, point: Point, mode: str, metric: str) -> float | None:
    """``metric`` of ``point`` in ``mode`` if measured ``ok`` on the GPU, else ``None``."""
    m = bary(results, point, mode)
    return m.values.get(metric) if on_gpu(m) else None


def gpu_values(results: Results, points: Sequence[Point], mode: str, metric: str) -> list[float]:
    values = [_gpu_value(results, p, mode, metric) for p in points]
    return [v for v in values if v is not None]


def bary_points(results: Results) -> list[Point]:
    """The planned barycenter points and any other (implementation, configuration) of the
    CSV, by configuration (γ descending), then implementation."""
    points = set(planned(BARYCENTER))
    for row in results.sweeps.get(BARYCENTER, []):
        shape = (int(row["B"]), int(row["N"]), int(row["M"]), int(row["D"]))
        points.add(Point(row["impl"], *shape, float(row["gamma"])))
    order = impl_order({p.impl for p in points})
    return sorted(points, key=lambda p: (p.B, p.N, p.M, p.D, -p.gamma, order.index(p.impl)))


def _bary_label(point: Point, mode: str) -> str:
    return f"`{point.impl}` {mode} (γ = {point.gamma:g})"


def bary_incomplete(results: Results) -> dict[tuple[str, str], list[str]]:
    """Barycenter measurements that are not ``ok``, by (status, note): each point, with its
    modes unless all of them share that status."""
    groups: dict[tuple[str, str], list[str]] = {}
    for point in bary_points(results):
        by_status: dict[tuple[str, str], list[str]] = {}
        for mode in BARYCENTER_MODES:
            m = bary(results, point, mode)
            if m.status != "ok":
                by_status.setdefault((m.status, m.note), []).append(mode)
        for key, modes in by_status.items():
            label = (
                f"`{point.impl}` (B = {point.B}, N = {point.N}, D = {point.D}, γ = {point.gamma:g})"
            )
            if len(modes) < len(BARYCENTER_MODES):
                label = f"{label[:-1]}, {', '.join(modes)})"
            groups.setdefault(key, []).append(label)
    return groups


def _sdtw_twin(point: Point) -> Point:
    """sdtw in the same mode (fused / unfused) as a paper-design point."""
    return dataclasses.replace(point, impl=point.impl.replace("paper-", "sdtw-"))


@dataclass
class Barycenters:
    """What RQ4 reads from ``barycenter.csv``: planned points, GPU rows only."""

    paper: list[Point]  # planned points of the paper design
    ours: list[Point]  # planned points of sdtw on the GPU
    failed: list[str]  # paper-design measurements without an ok GPU result, described
    diffs: list[tuple[float, Point]]  # |objective − sdtw's| / |sdtw's| after max_iter steps
    unchecked: list[Point]  # paper-design solves without an sdtw objective to compare with
    speedups: list[float]  # paper design ÷ sdtw, ms per iteration, same mode
    measured: bool  # any paper-design measurement at a planned point made on the GPU


def barycenters(results: Results) -> Barycenters:
    """The paper design's barycenter measurements at the planned points, checked: every mode
    ``ok`` on the GPU with finite results, and its objective after ``max_iter`` steps
    against sdtw's (the first of :data:`OURS_GPU` measured)."""
    points = planned(BARYCENTER)
    paper = [p for p in points if p.impl in PAPER_DESIGN]
    ours = [p for p in points if p.impl in OURS_GPU]
    failed, diffs, unchecked, speedups = [], [], [], []
    measured = False
    for point in paper:
        for mode in BARYCENTER_MODES:
            m = bary(results, point, mode)
            measured = measured or m.device == "cuda"
            if m.status != "ok":
                failed.append(f"{_bary_label(point, mode)}: **{m.status}** — {m.note}")
            elif m.device != "cuda":
                failed.append(f"{_bary_label(point, mode)}: ran on the {m.device}, not the GPU")
            elif not all(v is None or math.isfinite(v) for v in m.values.values()):
                failed.append(f"{_bary_label(point, mode)}: **non-finite** result")
        objective = _gpu_value(results, point, NO_EARLY_STOP, "objective")
        refs = [
            _gpu_value(results, dataclasses.replace(point, impl=impl), NO_EARLY_STOP, "objective")
            for impl in OURS_GPU
        ]
        refs = [v for v in refs if v is not None and math.isfinite(v)]
        if objective is not None and math.isfinite(objective):
            if refs:
                diffs.append((abs(objective - refs[0]) / (abs(refs[0]) or 1.0), point))
            else:
                unchecked.append(point)
        theirs = _gpu_value(results, point, ITERATION, "ms_per_iter")
        mine = _gpu_value(results, _sdtw_twin(point), ITERATION, "ms_per_iter")
        if theirs is not None and mine:
            speedups.append(theirs / mine)
    return Barycenters(paper, ours, failed, diffs, unchecked, speedups, measured)


def bary_shapes(points: Sequence[Point]) -> str:
    shapes = dict.fromkeys((p.B, p.N, p.D) for p in points)
    gammas = sorted({p.gamma for p in points}, reverse=True)
    text = "; ".join(f"{B} square waves, N = M = {N}, D = {D}" for B, N, D in shapes)
    return f"{text}; γ = {fmt_gammas(gammas)}"


def results_label(results: Results) -> str:
    try:
        return results.folder.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return results.folder.name
