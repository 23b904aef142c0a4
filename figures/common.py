"""What every figure shares: the fixed rcParams, one style per implementation, the band of
points without a measurement, the provenance line, and saving without timestamps.

Reproducibility: fixed rcParams (DejaVu Sans, shipped with matplotlib), no timestamps or
software versions in the files (PNG ``Software``, PDF ``Creator`` / ``Producer`` /
``CreationDate`` removed), so a rerun with the same matplotlib and FreeType gives
byte-identical PNG and PDF files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

# no display needed: every figure module imports this one before it draws anything
matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from experiments.load import REPO, Results, impl_order

__all__ = [
    "IMPL_STYLE",
    "STATUS_STYLE",
    "STYLE",
    "data_line",
    "impl_handles",
    "impl_label",
    "impl_style",
    "log2_axis",
    "repo_path",
    "save",
    "source_note",
    "status_band",
    "status_handles",
]

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


def impl_label(impl: str) -> str:
    return str(IMPL_STYLE.get(impl, {}).get("label", impl))


def impl_style(impl: str) -> dict[str, object]:
    style = dict(IMPL_STYLE.get(impl, {"color": "black", "marker": ".", "ls": "-"}))
    style.pop("label", None)
    return style


def source_note(results: Results, sweeps: Sequence[str]) -> str:
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


def log2_axis(ax: Axes, ticks: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(list(ticks)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(t) for t in ticks])
    pad = 2**0.3
    ax.set_xlim(min(ticks) / pad, max(ticks) * pad)


def status_band(
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


def status_handles(statuses: set[str]) -> list[Line2D]:
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


def impl_handles(impls: Sequence[str]) -> list[Line2D]:
    return [Line2D([], [], label=impl_label(i), **impl_style(i)) for i in impls]


def repo_path(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it, else its name."""
    path = path.resolve()
    return (path.relative_to(REPO) if path.is_relative_to(REPO) else Path(path.name)).as_posix()


def data_line(fig: Figure, text: str) -> None:
    """The figure's provenance line (data files, GPU, versions, git) at its foot."""
    fig.text(0.5, 0.01, text, ha="center", fontsize=6.5, color="#555555")


def save(fig: Figure, out: Path, stem: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    fig.savefig(paths[0], metadata=PNG_METADATA)
    fig.savefig(paths[1], metadata=PDF_METADATA)
    plt.close(fig)
    return paths
