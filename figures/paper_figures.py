"""The paper's figures on our GPU: Figure 1 (memory and runtime vs L and vs D), accuracy vs
gamma (RQ2), scaling with N, and Figure 2 (the barycenter, drawn by ``examples.barycenter``).

Figure 2 contract: if ``examples/barycenter.py`` exists, its ``main(argv)`` is called with
``["--out", "<out>/fig2-barycenter.png"]`` and is expected to save that figure (its data and
seed are its own); otherwise the step is skipped with a message.
"""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullLocator

from experiments.load import REPO, Results, impl_order, not_ok, num, planned
from figures.common import (
    impl_handles,
    impl_label,
    impl_style,
    log2_axis,
    save,
    source_note,
    status_band,
    status_handles,
)

__all__ = ["figure1", "figure2", "figure_accuracy", "figure_scaling", "slope"]

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
                ax.plot(xs, np.asarray(ys) * scale, **impl_style(impl))
            if impl not in impls_drawn:
                impls_drawn.append(impl)
        ax_mem.set_yscale("log")
        ax_time.set_yscale("log")
        ax_mem.set_title(f"Peak memory {title}")
        ax_time.set_title(f"Runtime {title}")
        ax_mem.set_ylabel("peak memory of one step (MiB)")
        ax_time.set_ylabel("runtime of one step (ms, median)")
        log2_axis(ax_mem, ticks)
        ax_mem.tick_params(labelbottom=False)
        ax_time.tick_params(labelbottom=False)
        entries = [(p.impl, getattr(p, axis), status) for p, status, _ in not_ok(results, sweep)]
        used_status |= status_band(
            ax_band, entries, xlabel, f"every planned point measured ({len(impls)} impls)"
        )
    handles = impl_handles(impls_drawn) + status_handles(used_status)
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
        source_note(results, ["fig1-length", "fig1-dim"]),
        ha="center",
        fontsize=7,
        color="#555555",
    )
    fig.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.14)
    return save(fig, out, "fig1-memory-runtime")


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
            ax.plot(gammas, ys, **impl_style(impl), alpha=0.9)
    used = status_band(
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
        f"{source_note(results, ['gamma'])}; float64 reference: {references}",
        ha="center",
        fontsize=7,
        color="#555555",
    )
    handles = impl_handles(impls) + status_handles(used)
    fig.legend(
        handles=handles,
        loc="center",
        bbox_to_anchor=(0.73, 0.14),
        ncol=2,
        frameon=False,
        fontsize=7.5,
    )
    fig.subplots_adjust(left=0.1, right=0.93, top=0.88, bottom=0.1)
    return save(fig, out, "accuracy-gamma")


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
            style = impl_style(impl)
            style["ls"] = SCALING_LINESTYLE.get(fixed["B"], "-")
            for ax, column, scale in ((ax_time, "median", 1.0), (ax_mem, "peak_mem_bytes", 2**-20)):
                ys = [num(r[column]) * scale for r in rows]
                s = slope(ns, ys)
                text = "n/a" if s is None else f"{s:.2f}"
                label = f"{impl_label(impl)}, B = {fixed['B']}: slope {text}"
                ax.plot(ns, ys, label=label, **style)
    ticks = sorted(all_ns)
    for ax in (ax_time, ax_mem):
        log2_axis(ax, ticks)
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
        source_note(results, ["paper-grid", "long"]),
        ha="center",
        fontsize=7,
        color="#555555",
    )
    fig.subplots_adjust(left=0.07, right=0.98, top=0.89, bottom=0.33, wspace=0.2)
    return save(fig, out, "scaling")


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
