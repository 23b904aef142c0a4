"""Draw the reproduction figures from the committed benchmark CSVs (no GPU needed).

Usage
-----
::

    python -m figures.make_figures [--results DIR] [--out DIR] [--only NAME ...]

Writes PNG and PDF into ``--out`` (default ``figures/``):

=======================  ===================================================================
file stem                what
=======================  ===================================================================
``fig1-memory-runtime``  paper Figure 1 on our GPU: peak memory and runtime of a forward +
                         backward step vs L (D = 128) and vs D (L = 256), B = 32, every
                         implementation; points without a measurement marked in a band
``accuracy-gamma``       RQ2: relative error of the gradient (and value) against float64,
                         float32 inputs, every implementation, gamma 1e-4 .. 10
``scaling``              time and memory vs N up to the longest length measured, log-log,
                         fitted slope (N >= 512) in the legend
``targets-processes``    issue 3's eager N = 512 step (B = 32, D = 64) in each fresh device
                         process of ``targets-processes/``, against the 0.5 ms target
``tc-grads``             the float32 gradients wrt x and y from E (B = 32, N = M = 512) vs D:
                         the Triton kernel told that D is a multiple of 4, not told, and
                         cuBLAS's float32 form, from ``tc-grads-align/gradsizes.csv``
``fig2-barycenter``      paper Figure 2, drawn by ``examples.barycenter`` when it exists
=======================  ===================================================================

Figure 2 contract: if ``examples/barycenter.py`` exists, its ``main(argv)`` is called with
``["--out", "<out>/fig2-barycenter.png"]`` and is expected to save that figure (its data and
seed are its own); otherwise the step is skipped with a message.

Reproducibility: fixed rcParams (DejaVu Sans, shipped with matplotlib), no timestamps or
software versions in the files (PNG ``Software``, PDF ``Creator`` / ``Producer`` /
``CreationDate`` removed), so a rerun with the same matplotlib and FreeType gives
byte-identical PNG and PDF files.
"""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import argparse
import importlib
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from experiments.load import (
    PROCESSES,
    REPO,
    RESULTS,
    TC_GRAD_SIZES,
    Results,
    impl_order,
    not_ok,
    num,
    planned,
)

__all__ = ["FIGURES", "IMPL_STYLE", "main"]

OUT = REPO / "figures"

STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "axes.grid.which": "major",
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "lines.linewidth": 1.5,
    "lines.markersize": 5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "pdf.fonttype": 42,
    "svg.hashsalt": "sdtw",
}
PNG_METADATA = {"Software": None}
PDF_METADATA = {"Creator": None, "Producer": None, "CreationDate": None}

#: One colour, marker, line style and label per implementation, the same in every figure.
IMPL_STYLE: dict[str, dict[str, object]] = {
    "sdtw-fused": {"color": "#1c4e9c", "marker": "o", "ls": "-", "label": "sdtw fused (ours)"},
    "sdtw-unfused": {
        "color": "#4fa3e0",
        "marker": "s",
        "ls": "-",
        "label": "sdtw unfused (ours)",
    },
    "sdtw-cpu": {"color": "#7048a8", "marker": "D", "ls": "-", "label": "sdtw CPU (ours)"},
    "paper-unfused": {
        "color": "#d9480f",
        "marker": "^",
        "ls": "--",
        "label": "paper design, unfused (our re-impl.)",
    },
    "paper-fused": {
        "color": "#f59f00",
        "marker": "v",
        "ls": "--",
        "label": "paper design, fused (our re-impl.)",
    },
    "maghoumi": {
        "color": "#2b8a3e",
        "marker": "P",
        "ls": ":",
        "label": "Maghoumi design, broadcast distance",
    },
    "maghoumi-bmm": {
        "color": "#82c91e",
        "marker": "X",
        "ls": "-.",
        "label": "Maghoumi design, matmul distance",
    },
    "torch": {"color": "#6c6c6c", "marker": "*", "ls": ":", "label": "plain PyTorch autograd"},
    "sdtw-fused-full": {
        "color": "#1c4e9c",
        "marker": "o",
        "ls": "-",
        "label": "sdtw fused, memory='full' (ours)",
    },
    "sdtw-fused-checkpoint": {
        "color": "#0b7285",
        "marker": "s",
        "ls": "-",
        "label": "sdtw fused, memory='checkpoint' (ours)",
    },
}

#: How a point without a measurement is drawn in the status band.
STATUS_STYLE: dict[str, tuple[str, str]] = {
    "missing": ("o", "missing: not run (sweep stopped at its time limit)"),
    "unsupported": ("x", "unsupported by the design"),
    "oom": ("^", "out of memory"),
    "skipped-memory": ("v", "skipped: predicted not to fit"),
    "launch-failed": ("D", "kernel launch failed"),
    "non-finite": ("X", "gradient not finite (NaN / inf)"),
}
OTHER_STATUS = ("*", "error")

#: Scaling figure: (sweep, fixed columns, implementations) per series.
SCALING_SERIES: list[tuple[str, dict[str, int], tuple[str, ...]]] = [
    (
        "paper-grid",
        {"B": 32, "D": 64},
        ("sdtw-fused", "sdtw-unfused", "paper-fused", "paper-unfused"),
    ),
    ("long", {"B": 8, "D": 64}, ("sdtw-fused", "sdtw-unfused")),
    ("long", {"B": 1, "D": 64}, ("sdtw-fused", "sdtw-unfused")),
]
SCALING_LINESTYLE = {32: "-", 8: "--", 1: ":"}
SLOPE_MIN_N = 512


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _label(impl: str) -> str:
    return str(IMPL_STYLE.get(impl, {}).get("label", impl))


def _style(impl: str) -> dict[str, object]:
    style = dict(IMPL_STYLE.get(impl, {"color": "black", "marker": ".", "ls": "-"}))
    style.pop("label", None)
    return style


def _source_note(results: Results, sweeps: Sequence[str]) -> str:
    """One line naming the CSVs and the GPU / software / commit they come from."""
    try:
        where = results.folder.resolve().relative_to(REPO)
    except ValueError:
        where = Path(results.folder.name)
    provs = [results.provenance(s) for s in sweeps]

    def distinct(column: str, width: int | None = None) -> str:
        """The column's distinct values over all ``sweeps``, cut to ``width`` characters."""
        values = {v.strip()[:width] for p in provs for v in str(p[column]).split(" / ")}
        return " / ".join(sorted(v for v in values if v))

    files = ", ".join(f"{s}.csv" for s in sweeps)
    # short commit names and days: several runs' must fit on the line (the CSVs have them whole)
    return (
        f"data: {where.as_posix()}/{{{files}}}; {distinct('gpu')}, torch {distinct('torch')}, "
        f"numba-cuda {distinct('numba_cuda')}, git {distinct('git_sha', 7)}, "
        f"{distinct('date_utc', 10)}"
    )


def _log2_axis(ax: Axes, ticks: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(ticks)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(t) for t in ticks])
    pad = 2**0.3
    ax.set_xlim(min(ticks) / pad, max(ticks) * pad)


def _status_band(
    ax: Axes,
    entries: list[tuple[str, float, str]],
    xlabel: str,
    empty_text: str,
    title: str = "not measured",
) -> set[str]:
    """Draw (impl, x, status) marks, one row per implementation; return the statuses used."""
    ax.grid(False)
    ax.set_xlabel(xlabel)
    ax.spines["left"].set_visible(False)
    if not entries:
        ax.set_yticks([])
        ax.text(
            0.5,
            0.5,
            empty_text,
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=8,
            color="#444444",
        )
        return set()
    impls = impl_order(sorted({impl for impl, _, _ in entries}))
    used = set()
    for impl, x, status in entries:
        marker = STATUS_STYLE.get(status, OTHER_STATUS)[0]
        color = IMPL_STYLE.get(impl, {}).get("color", "black")
        filled = marker in ("x", "X", "*")
        ax.plot(
            [x],
            [impls.index(impl)],
            marker=marker,
            ls="none",
            color=color,
            markerfacecolor=color if filled else "none",
            markersize=6,
        )
        used.add(status if status in STATUS_STYLE else "error")
    ax.set_yticks(range(len(impls)))
    ax.set_yticklabels(impls, fontsize=7)
    ax.set_ylim(len(impls) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    ax.set_title(title, fontsize=8, loc="left", color="#444444")
    return used


def _status_handles(statuses: set[str]) -> list[Line2D]:
    handles = []
    for status in [*STATUS_STYLE, "error"]:
        if status not in statuses:
            continue
        marker, text = STATUS_STYLE.get(status, OTHER_STATUS)
        filled = marker in ("x", "X", "*")
        handles.append(
            Line2D(
                [],
                [],
                marker=marker,
                ls="none",
                color="black",
                markerfacecolor="black" if filled else "none",
                label=text,
            )
        )
    return handles


def _impl_handles(impls: Sequence[str]) -> list[Line2D]:
    return [Line2D([], [], label=_label(i), **_style(i)) for i in impls]


def _repo_path(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it, else its name."""
    path = path.resolve()
    return (path.relative_to(REPO) if path.is_relative_to(REPO) else Path(path.name)).as_posix()


def _data_line(fig: Figure, text: str) -> None:
    """The figure's provenance line (data files, GPU, versions, git) at its foot."""
    fig.text(0.5, 0.01, text, ha="center", fontsize=6.5, color="#555555")


def _save(fig: Figure, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    fig.savefig(paths[0], metadata=PNG_METADATA)
    fig.savefig(paths[1], metadata=PDF_METADATA)
    plt.close(fig)
    return paths


# --------------------------------------------------------------------------------------------
# Figure 1: memory and runtime vs L and vs D
# --------------------------------------------------------------------------------------------


def _series(results: Results, sweep: str, impl: str, axis: str, column: str) -> tuple[list, list]:
    """x (planned values of ``axis``) and y (``column``; NaN where not ok, so lines break)."""
    xs = sorted({getattr(p, axis) for p in planned(sweep) if p.impl == impl})
    ys = []
    for x in xs:
        row = results.one(sweep, impl=impl, **{axis: x})
        value = num(row[column]) if row is not None and row["status"] == "ok" else None
        ys.append(math.nan if value is None else value)
    return xs, ys


def figure1(results: Results, out: Path) -> list[Path]:
    """Paper Figure 1: peak memory and runtime vs L (D = 128) and vs D (L = 256), B = 32."""
    fig = plt.figure(figsize=(10, 9.2))
    grid = fig.add_gridspec(3, 2, height_ratios=[3, 3, 1.35], hspace=0.32, wspace=0.22)
    columns = [
        ("fig1-length", "N", "sequence length L = N = M", "vs length (B = 32, D = 128)"),
        ("fig1-dim", "D", "feature dimension D", "vs feature dimension (B = 32, L = 256)"),
    ]
    used_status: set[str] = set()
    impls_drawn: list[str] = []
    for col, (sweep, axis, xlabel, title) in enumerate(columns):
        impls = impl_order({p.impl for p in planned(sweep)})
        ticks = sorted({getattr(p, axis) for p in planned(sweep)})
        ax_mem = fig.add_subplot(grid[0, col])
        ax_time = fig.add_subplot(grid[1, col], sharex=ax_mem)
        ax_band = fig.add_subplot(grid[2, col], sharex=ax_mem)
        for impl in impls:
            for ax, column, scale in (
                (ax_mem, "peak_mem_bytes", 2**-20),
                (ax_time, "median", 1.0),
            ):
                xs, ys = _series(results, sweep, impl, axis, column)
                ax.plot(xs, np.asarray(ys) * scale, **_style(impl))
            if impl not in impls_drawn:
                impls_drawn.append(impl)
        ax_mem.set_yscale("log")
        ax_time.set_yscale("log")
        ax_mem.set_title(f"Peak memory {title}")
        ax_time.set_title(f"Runtime {title}")
        ax_mem.set_ylabel("peak memory of one step (MiB)")
        ax_time.set_ylabel("runtime of one step (ms, median)")
        _log2_axis(ax_mem, ticks)
        ax_mem.tick_params(labelbottom=False)
        ax_time.tick_params(labelbottom=False)
        entries = [(p.impl, getattr(p, axis), status) for p, status, _ in not_ok(results, sweep)]
        used_status |= _status_band(
            ax_band, entries, xlabel, f"every planned point measured ({len(impls)} impls)"
        )
    handles = _impl_handles(impls_drawn) + _status_handles(used_status)
    fig.legend(
        handles=handles, loc="lower center", ncol=3, frameon=False, bbox_to_anchor=(0.5, 0.0)
    )
    prov = results.provenance("fig1-length")
    fig.suptitle(
        f"Figure 1 on our GPU ({prov['gpu']}): forward + backward of loss.sum(), "
        "float32, γ = 1, M = N, squared Euclidean",
        fontsize=11,
        y=0.985,
    )
    fig.text(
        0.5,
        0.955,
        _source_note(results, ["fig1-length", "fig1-dim"]),
        ha="center",
        fontsize=7,
        color="#555555",
    )
    fig.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.14)
    return _save(fig, out, "fig1-memory-runtime")


# --------------------------------------------------------------------------------------------
# Accuracy vs gamma (RQ2)
# --------------------------------------------------------------------------------------------


def _worst(row: dict[str, str], columns: Sequence[str]) -> float | None:
    """Largest of the columns; NaN if any is non-finite; None if none was measured."""
    values = [num(row[c]) for c in columns]
    values = [v for v in values if v is not None]
    if not values:
        return None
    if any(not math.isfinite(v) for v in values):
        return math.nan
    return max(values)


def figure_accuracy(results: Results, out: Path) -> list[Path]:
    """Relative error of gradient and value vs float64, float32 inputs, against gamma."""
    rows = results.rows("gamma", dtype="float32")
    impls = impl_order({r["impl"] for r in rows})
    gammas = sorted({float(r["gamma"]) for r in rows})
    fig = plt.figure(figsize=(10, 5.6))
    grid = fig.add_gridspec(2, 2, height_ratios=[4, 1], hspace=0.35, wspace=0.22)
    ax_grad = fig.add_subplot(grid[0, 0])
    ax_value = fig.add_subplot(grid[0, 1], sharex=ax_grad)
    ax_band = fig.add_subplot(grid[1, 0], sharex=ax_grad)
    entries = []
    for impl in impls:
        for ax, columns in (
            (ax_grad, ("rel_err_grad_x", "rel_err_grad_y")),
            (ax_value, ("rel_err_value",)),
        ):
            ys = []
            for g in gammas:
                row = results.one("gamma", impl=impl, gamma=g, dtype="float32")
                worst = None if row is None or row["status"] != "ok" else _worst(row, columns)
                if worst is not None and math.isnan(worst):
                    if ax is ax_grad:
                        entries.append((impl, g, "non-finite"))
                    worst = None
                ys.append(math.nan if worst is None else worst)
            ax.plot(gammas, ys, **_style(impl), alpha=0.9)
    used = _status_band(
        ax_band, entries, "smoothing γ", "every gradient finite", title="gradient not finite"
    )
    eps32 = float(np.finfo(np.float32).eps)
    for ax in (ax_grad, ax_value):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(eps32, color="black", lw=0.8, ls=(0, (1, 3)))
        ax.annotate(
            "float32 ε",
            (1.0, eps32),
            xycoords=("axes fraction", "data"),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
        ax.set_xticks(gammas)
        ax.set_xticklabels([f"{g:g}" for g in gammas])
        ax.xaxis.set_minor_locator(NullLocator())
    ax_grad.tick_params(labelbottom=False)
    ax_value.set_xlabel("smoothing γ")
    ax_grad.set_ylabel("max |g − g64| / max |g64|  (worst of x, y)")
    ax_value.set_ylabel("max |v − v64| / max |v64|")
    ax_grad.set_title("Gradient error vs float64 (RQ2)")
    ax_value.set_title("Loss value error vs float64")
    any_row = rows[0] if rows else {"B": "?", "N": "?", "D": "?", "reference": "?"}
    fig.suptitle(
        f"Accuracy of float32 soft-DTW against a float64 reference: B = {any_row['B']}, "
        f"N = M = {any_row['N']}, D = {any_row['D']}, randn inputs",
        fontsize=11,
        y=0.985,
    )
    references = ", ".join(sorted({r["reference"] for r in rows}))
    fig.text(
        0.5,
        0.935,
        f"{_source_note(results, ['gamma'])}; float64 reference: {references}",
        ha="center",
        fontsize=7,
        color="#555555",
    )
    handles = _impl_handles(impls) + _status_handles(used)
    fig.legend(
        handles=handles,
        loc="center",
        bbox_to_anchor=(0.73, 0.14),
        ncol=2,
        frameon=False,
        fontsize=7.5,
    )
    fig.subplots_adjust(left=0.1, right=0.93, top=0.88, bottom=0.1)
    return _save(fig, out, "accuracy-gamma")


# --------------------------------------------------------------------------------------------
# Scaling
# --------------------------------------------------------------------------------------------


def slope(ns: Sequence[float], ys: Sequence[float], min_n: float = SLOPE_MIN_N) -> float | None:
    """Least-squares slope of log y against log N over points with N >= ``min_n``."""
    pts = [(n, y) for n, y in zip(ns, ys, strict=True) if n >= min_n and y and y > 0]
    if len(pts) < 2:
        return None
    logn, logy = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(logn, logy, 1)[0])


def figure_scaling(results: Results, out: Path) -> list[Path]:
    """Time and memory of a forward + backward step vs N, log-log, with fitted slopes."""
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 7.4))
    all_ns: set[int] = set()
    for sweep, fixed, impls in SCALING_SERIES:
        for impl in impls:
            rows = [r for r in results.rows(sweep, impl=impl, **fixed) if r["status"] == "ok"]
            rows.sort(key=lambda r: int(r["N"]))
            if not rows:
                continue
            ns = [int(r["N"]) for r in rows]
            all_ns |= set(ns)
            style = _style(impl)
            style["ls"] = SCALING_LINESTYLE.get(fixed["B"], "-")
            for ax, column, scale in ((ax_time, "median", 1.0), (ax_mem, "peak_mem_bytes", 2**-20)):
                ys = [num(r[column]) * scale for r in rows]
                s = slope(ns, ys)
                text = "n/a" if s is None else f"{s:.2f}"
                label = f"{_label(impl)}, B = {fixed['B']}: slope {text}"
                ax.plot(ns, ys, label=label, **style)
    ticks = sorted(all_ns)
    for ax in (ax_time, ax_mem):
        _log2_axis(ax, ticks)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N = M (D = 64)")
        ax.legend(
            fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False
        )
        ax.tick_params(axis="x", labelrotation=45)
    ax_time.set_ylabel("runtime of one step (ms, median)")
    ax_mem.set_ylabel("peak memory of one step (MiB)")
    ax_time.set_title("Runtime vs length")
    ax_mem.set_title("Peak memory vs length")
    fig.suptitle(
        "Scaling: forward + backward of loss.sum(), float32, γ = 1; "
        f"slope of log-log least squares over N ≥ {SLOPE_MIN_N}",
        fontsize=11,
        y=0.985,
    )
    fig.text(
        0.5,
        0.94,
        _source_note(results, ["paper-grid", "long"]),
        ha="center",
        fontsize=7,
        color="#555555",
    )
    fig.subplots_adjust(left=0.07, right=0.98, top=0.89, bottom=0.33, wspace=0.2)
    return _save(fig, out, "scaling")


# --------------------------------------------------------------------------------------------
# The eager N = 512 step in each device process (issue 3's 0.5 ms target)
# --------------------------------------------------------------------------------------------

#: Issue 3's target for a forward + backward step at B = 32, N = M = 512, D = 64 (ms).
TARGET_512_MS = 0.5


def figure_processes(results: Results, out: Path) -> list[Path]:
    """The eager N = 512 step (B = 32, D = 64) in each fresh device process of
    ``targets-processes/``: synchronised medians with their p20-p80 and back-to-back
    medians, fused and unfused, against the 0.5 ms target."""
    runs = [(f"run {run}\n#{process}", rows) for run, process, rows in results.processes()]
    if not runs:
        print(f"targets-processes: SKIPPED — no {PROCESSES}/*.csv in the results folder")
        return []
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    offsets = {"sdtw-fused": -0.12, "sdtw-unfused": 0.12}
    for impl, dx in offsets.items():
        style = _style(impl)
        for i, (_, rows) in enumerate(runs):
            for row in rows:
                if row["impl"] != impl or int(row["N"]) != 512 or row["status"] != "ok":
                    continue
                y = num(row["median"])
                if row["metric"] == "time_ms":
                    lo, hi = num(row["p20"]), num(row["p80"])
                    ax.errorbar(
                        [i + dx], [y], yerr=[[y - lo], [hi - y]], color=style["color"],
                        marker=style["marker"], ls="none", capsize=3,
                    )  # fmt: skip
                elif row["metric"] == "time_ms_back_to_back":
                    ax.plot(
                        [i + dx], [y], marker=style["marker"], ls="none",
                        color=style["color"], markerfacecolor="none",
                    )  # fmt: skip
    ax.axhline(TARGET_512_MS, color="#c92a2a", ls="--", lw=1.2)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([label for label, _ in runs], fontsize=7.5)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    ax.set_ylabel("forward + backward of loss.sum() (ms)")
    handles = [
        *(Line2D([], [], label=f"{_label(i)}, synchronised: median, p20-p80", **_style(i))
          for i in offsets),
        *(Line2D([], [], ls="none", marker=_style(i)["marker"], color=_style(i)["color"],
                 markerfacecolor="none", label=f"{_label(i)}, back to back: median")
          for i in offsets),
        Line2D([], [], color="#c92a2a", ls="--", label=f"target ≤ {TARGET_512_MS} ms (issue 3)"),
    ]  # fmt: skip
    ax.legend(handles=handles, fontsize=7, loc="upper right", frameon=False)
    ax.set_title(
        "Eager step at B = 32, N = M = 512, D = 64, float32, one fresh device process each",
        fontsize=9.5,
    )
    rows = [row for _, rs in runs for row in rs]

    def distinct(column: str, width: int | None = None) -> str:
        return " / ".join(sorted({r[column].strip()[:width] for r in rows if r[column].strip()}))

    where = _repo_path(results.folder / PROCESSES)
    _data_line(
        fig,
        f"data: {where}/*.csv; {distinct('gpu')}, torch {distinct('torch')}, "
        f"git {distinct('git_sha', 7)}, {distinct('date_utc', 10)}",
    )
    fig.subplots_adjust(left=0.09, right=0.98, top=0.92, bottom=0.16)
    return _save(fig, out, "targets-processes")


TC_SERIES = {
    "hint": ("Triton kernel (3xTF32), D passed as a multiple of 4", "#1c4e9c", "o", "-"),
    "plain": ("Triton kernel, D not known to be a multiple of 4", "#f59f00", "v", "--"),
    "cublas": ("cuBLAS float32 form (baddbmm)", "#6c6c6c", "s", ":"),
}


def _tc_points(rows: list[dict[str, str]]) -> dict[str, dict[int, float]]:
    """D -> us per series at B = 32, N = M = 512, at the settings
    :func:`sdtw.cuda.policy.tc_settings` picks there (``TC_SMALL`` up to D = 64, ``TC_LARGE``
    above); where D is a multiple of 16, the kernel with and without the hint is one (Triton
    knows such D itself).  A D measured in several runs takes the last run's value (the CSV is
    in run order)."""
    points: dict[str, dict[int, float]] = {k: {} for k in TC_SERIES}
    for r in rows:
        if (r["B"], r["N"], r["M"]) != ("32", "512", "512"):
            continue
        D, us, impl = int(r["D"]), float(r["us"]), r["impl"]
        settings = "triton-small" if D <= 64 else "triton-large"
        if impl == "cublas-float32":
            points["cublas"][D] = us
        elif impl == "triton-small-no-hint" and D <= 64:
            points["plain"][D] = us
        elif impl in (settings, "triton-settings-rule"):
            series = "hint" if D % 4 == 0 else "plain"
            points[series][D] = us
            if D % 16 == 0:
                points["plain"][D] = us
    return points


def figure_tc_grads(results: Results, out: Path) -> list[Path]:
    """Both float32 gradients from E against D at B = 32, N = M = 512: the Triton kernel
    with and without the multiple-of-4 hint, and cuBLAS's float32 form (GPU time of CUDA-graph
    replays of the gradients alone, ``tc-grads-align/gradsizes.csv``)."""
    rows = results.tc_grad_sizes()
    if rows is None:
        print(f"tc-grads: SKIPPED — no {TC_GRAD_SIZES} in the results folder")
        return []
    points = _tc_points(rows)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for key, (label, color, marker, ls) in TC_SERIES.items():
        ds = sorted(points[key])
        ax.plot(ds, [points[key][d] for d in ds], color=color, marker=marker, ls=ls, label=label)
    ax.set_xscale("log", base=2)
    ticks = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(d) for d in ticks])
    ax.set_xlabel("D (features)")
    ax.set_ylabel("both gradients wrt x and y from E (us)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7.5, loc="upper left", frameon=False)
    ax.set_title(
        "Gradients from E, B = 32, N = M = 512, float32: the library takes Triton for "
        "D = 2..15 or a multiple of 4",
        fontsize=8.5,
    )
    used = [r for r in rows if (r["B"], r["N"], r["M"]) == ("32", "512", "512")]
    gpus = " / ".join(sorted({r["gpu"] for r in used}))
    shas = " / ".join(sorted({r["git_sha"] for r in used}))
    runs = ", ".join(sorted({r["run"] for r in used}, key=int))
    tritons = " / ".join(sorted({r["triton"] for r in used}))
    path = _repo_path(results.folder / TC_GRAD_SIZES)
    _data_line(fig, f"data: {path} (runs {runs}); {gpus}, triton {tritons}, git {shas}")
    fig.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.17)
    return _save(fig, out, "tc-grads")


# --------------------------------------------------------------------------------------------
# Figure 2: barycenter (another module's job)
# --------------------------------------------------------------------------------------------


def figure2(results: Results, out: Path) -> list[Path]:
    """Paper Figure 2 through ``examples.barycenter.main``, or a skip message."""
    source = REPO / "examples" / "barycenter.py"
    if not source.exists():
        print(
            "figure 2 (barycenter): SKIPPED — examples/barycenter.py does not exist yet; "
            "it is drawn by that example once it lands (see this module's docstring)."
        )
        return []
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    module = importlib.import_module("examples.barycenter")
    path = out / "fig2-barycenter.png"
    out.mkdir(parents=True, exist_ok=True)
    module.main(["--out", str(path)])
    return [path]


# --------------------------------------------------------------------------------------------
# Beyond the paper: checkpointed memory and padded batches
# --------------------------------------------------------------------------------------------

MEMORY_IMPLS = ("sdtw-fused-full", "sdtw-fused-checkpoint", "paper-fused", "paper-unfused")
#: lengths sweep: (full-length row, padded-batch row) per implementation
LENGTHS_PAIRS = (("sdtw-fused", "sdtw-fused-lengths"), ("sdtw-unfused", "sdtw-unfused-lengths"))
#: The lengths target: a padded batch's step at most this fraction of the full-length one.
LENGTHS_TARGET = 0.6


def lengths_ratios(results: Results, full_name: str, padded_name: str) -> list[tuple[str, float]]:
    """(label, padded step / full-length step) per configuration of the lengths sweep where
    both rows are ok, in the CSV's order."""
    ratios = []
    for full in results.rows("lengths", impl=full_name):
        where = {c: full[c] for c in ("B", "N", "M", "D")}
        padded = results.one("lengths", impl=padded_name, **where)
        if full["status"] != "ok" or padded is None or padded["status"] != "ok":
            continue
        ratio = num(padded["median"]) / num(full["median"])
        ratios.append((f"B={full['B']}\nN={full['N']}", ratio))
    return ratios


def figure_beyond(results: Results, out: Path) -> list[Path]:
    """Left: peak memory and time of a forward + backward step against N at B = 1 (memory
    sweep), both memory modes of ours beside the paper's design.  Right: the step on a padded
    batch (per-pair lengths uniform in [N/4, N]) as a fraction of the same batch at full length
    (lengths sweep).  Skipped (a message, no file) without the two CSVs."""
    missing = [s for s in ("memory", "lengths") if not results.sweeps.get(s)]
    if missing:
        print(
            f"beyond: SKIPPED — no {', '.join(m + '.csv' for m in missing)} in the results folder"
        )
        return []
    fig, (ax_mem, ax_time, ax_len) = plt.subplots(1, 3, figsize=(14, 5.2))
    ns: set[int] = set()
    statuses: list[tuple[str, int, str]] = []
    for impl in MEMORY_IMPLS:
        rows = sorted(results.rows("memory", impl=impl, B=1), key=lambda r: int(r["N"]))
        ok = [r for r in rows if r["status"] == "ok"]
        ns |= {int(r["N"]) for r in rows}
        statuses += [(impl, int(r["N"]), r["status"]) for r in rows if r["status"] != "ok"]
        if not ok:
            continue
        x = [int(r["N"]) for r in ok]
        ax_mem.plot(x, [num(r["peak_mem_bytes"]) / 2**20 for r in ok], label=_label(impl),
                    **_style(impl))  # fmt: skip
        ax_time.plot(x, [num(r["median"]) for r in ok], label=_label(impl), **_style(impl))
    for ax in (ax_mem, ax_time):
        if ns:
            _log2_axis(ax, sorted(ns))
        ax.set_yscale("log")
        ax.set_xlabel("N = M (B = 1, D = 64)")
        ax.tick_params(axis="x", labelrotation=45)
    ax_mem.set_ylabel("peak memory of one step (MiB)")
    ax_time.set_ylabel("one step (ms, median)")
    ax_mem.set_title("Peak memory vs length")
    ax_time.set_title("Time vs length")
    ax_mem.legend(fontsize=7, loc="upper left", frameon=False)
    if statuses:
        note = "; ".join(f"{_label(i)} N = {n}: {s}" for i, n, s in statuses)
        ax_time.text(0.02, 0.98, textwrap.fill(note, 60), transform=ax_time.transAxes,
                     va="top", fontsize=6.5, color="#555555")  # fmt: skip
    labels = []
    for k, (full_name, padded_name) in enumerate(LENGTHS_PAIRS):
        ratios = lengths_ratios(results, full_name, padded_name)
        if not labels:
            labels = [label for label, _ in ratios]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(ratios))]
        ax_len.bar(xs, [r for _, r in ratios], width=0.36, color=_style(full_name)["color"],
                   label=_label(full_name))  # fmt: skip
    ax_len.axhline(1.0, color="#555555", lw=1)
    ax_len.axhline(LENGTHS_TARGET, color="#c92a2a", ls="--", lw=1.2,
                   label=f"target at B = 512, N = 512: ≤ {LENGTHS_TARGET}")  # fmt: skip
    ax_len.set_xticks(range(len(labels)))
    ax_len.set_xticklabels(labels, fontsize=8)
    ax_len.set_ylabel("padded step / full-length step")
    ax_len.set_title("Padded batch, lengths uniform in [N/4, N]")
    ax_len.legend(fontsize=7, loc="upper right", frameon=False)
    fig.suptitle("Beyond the paper: forward + backward of loss.sum(), float32, D = 64", fontsize=11)
    _data_line(fig, _source_note(results, ["memory", "lengths"]))
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.22, wspace=0.28)
    return _save(fig, out, "beyond")


FIGURES = {
    "fig1": figure1,
    "accuracy": figure_accuracy,
    "scaling": figure_scaling,
    "processes": figure_processes,
    "tcgrads": figure_tc_grads,
    "fig2": figure2,
    "beyond": figure_beyond,
}


def main(argv: list[str] | None = None) -> int:
    """Command line: draw the figures; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m figures.make_figures",
        description="Draw the reproduction figures (PNG + PDF) from committed benchmark CSVs.",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder with the CSVs")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (%(default)s)")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(FIGURES),
        metavar="NAME",
        help=f"draw only these, repeatable: {', '.join(FIGURES)} (default: all)",
    )
    args = parser.parse_args(argv)
    if not (args.results / "paper-grid.csv").exists():
        parser.error(f"no paper-grid.csv in {args.results}")
    results = Results(args.results)
    with plt.rc_context(STYLE):
        for name in args.only or list(FIGURES):
            for path in FIGURES[name](results, args.out):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
