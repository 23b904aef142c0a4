"""Beyond the paper: the checkpointed memory mode against N and padded batches with per-pair
lengths (the memory and lengths sweeps)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib.pyplot as plt

from experiments.load import Results, num
from figures.common import data_line, impl_label, impl_style, log2_axis, save, source_note

__all__ = ["LENGTHS_TARGET", "figure_beyond", "lengths_ratios"]

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
        ax_mem.plot(x, [num(r["peak_mem_bytes"]) / 2**20 for r in ok], label=impl_label(impl),
                    **impl_style(impl))  # fmt: skip
        ax_time.plot(x, [num(r["median"]) for r in ok], label=impl_label(impl), **impl_style(impl))
    for ax in (ax_mem, ax_time):
        if ns:
            log2_axis(ax, sorted(ns))
        ax.set_yscale("log")
        ax.set_xlabel("N = M (B = 1, D = 64)")
        ax.tick_params(axis="x", labelrotation=45)
    ax_mem.set_ylabel("peak memory of one step (MiB)")
    ax_time.set_ylabel("one step (ms, median)")
    ax_mem.set_title("Peak memory vs length")
    ax_time.set_title("Time vs length")
    ax_mem.legend(fontsize=7, loc="upper left", frameon=False)
    if statuses:
        note = "; ".join(f"{impl_label(i)} N = {n}: {s}" for i, n, s in statuses)
        ax_time.text(0.02, 0.98, textwrap.fill(note, 60), transform=ax_time.transAxes,
                     va="top", fontsize=6.5, color="#555555")  # fmt: skip
    labels = []
    for k, (full_name, padded_name) in enumerate(LENGTHS_PAIRS):
        ratios = lengths_ratios(results, full_name, padded_name)
        if not labels:
            labels = [label for label, _ in ratios]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(ratios))]
        ax_len.bar(xs, [r for _, r in ratios], width=0.36, color=impl_style(full_name)["color"],
                   label=impl_label(full_name))  # fmt: skip
    ax_len.axhline(1.0, color="#555555", lw=1)
    ax_len.axhline(LENGTHS_TARGET, color="#c92a2a", ls="--", lw=1.2,
                   label=f"target at B = 512, N = 512: ≤ {LENGTHS_TARGET}")  # fmt: skip
    ax_len.set_xticks(range(len(labels)))
    ax_len.set_xticklabels(labels, fontsize=8)
    ax_len.set_ylabel("padded step / full-length step")
    ax_len.set_title("Padded batch, lengths uniform in [N/4, N]")
    ax_len.legend(fontsize=7, loc="upper right", frameon=False)
    fig.suptitle("Beyond the paper: forward + backward of loss.sum(), float32, D = 64", fontsize=11)
    data_line(fig, source_note(results, ["memory", "lengths"]))
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.22, wspace=0.28)
    return save(fig, out, "beyond")
