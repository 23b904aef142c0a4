"""Timings of our own kernels: the eager N = 512 step in each fresh device process against
issue 3's 0.5 ms target, and the float32 gradients from E against D (Triton with and without
the multiple-of-4 hint, cuBLAS's float32 form)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from experiments.load import PROCESSES, TC_GRAD_SIZES, Results, num
from figures.common import data_line, impl_label, impl_style, repo_path, save

__all__ = ["TARGET_512_MS", "figure_processes", "figure_tc_grads"]

# --------------------------------------------------------------------------------------------
# The eager N = 512 step in each device process (issue 3's 0.5 ms target)
# --------------------------------------------------------------------------------------------

#: Issue 3's target for a forward + backward step at B = 32, N = M = 512, D = 64 (ms).
TARGET_512_MS = 0.5


def figure_processes(results: Results, out: Path) -> list[Path]:
    """The eager N = 512 step (B = 32, D = 64) in each fresh device process of
    ``targets-processes/``: synchronised medians with their p20-p80 and back-to-back
    medians, fused and unfused, against the 0.5 ms target."""
    runs = [(f"{date}\n#{process}", rows) for date, process, rows in results.processes()]
    if not runs:
        print(f"targets-processes: SKIPPED — no {PROCESSES}/*.csv in the results folder")
        return []
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    offsets = {"sdtw-fused": -0.12, "sdtw-unfused": 0.12}
    for impl, dx in offsets.items():
        style = impl_style(impl)
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
        *(Line2D([], [], label=f"{impl_label(i)}, synchronised: median, p20-p80", **impl_style(i))
          for i in offsets),
        *(Line2D([], [], ls="none", marker=impl_style(i)["marker"], color=impl_style(i)["color"],
                 markerfacecolor="none", label=f"{impl_label(i)}, back to back: median")
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

    where = repo_path(results.folder / PROCESSES)
    data_line(
        fig,
        f"data: {where}/*.csv; {distinct('gpu')}, torch {distinct('torch')}, "
        f"git {distinct('git_sha', 7)}, {distinct('date_utc', 10)}",
    )
    fig.subplots_adjust(left=0.09, right=0.98, top=0.92, bottom=0.16)
    return save(fig, out, "targets-processes")


# --------------------------------------------------------------------------------------------
# The float32 gradients from E against D (the Triton kernels and cuBLAS)
# --------------------------------------------------------------------------------------------

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
    path = repo_path(results.folder / TC_GRAD_SIZES)
    data_line(fig, f"data: {path} (runs {runs}); {gpus}, triton {tritons}, git {shas}")
    fig.subplots_adjust(left=0.1, right=0.98, top=0.92, bottom=0.17)
    return save(fig, out, "tc-grads")
