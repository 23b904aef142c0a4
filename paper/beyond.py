"""The report's section on what goes beyond the paper: padded batches, checkpointed memory and
compiled steps, read from ``beyond/targets-beyond.csv`` (written by
:mod:`experiments.targets_beyond`), each target met or not by the rule stated beside it."""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from experiments.load import Results, fmt_sig
from paper.markdown import fmt_g, md_table

__all__ = ["TARGETS_CSV", "Target", "section_beyond", "targets"]

#: Largest relative error (against the unpadded pairs, or against the full mode) for a target
#: to count as met.
MAX_REL_ERR = 1e-5

#: Inside a results folder: the whole run, then later runs of some parts, whose rows replace
#: the same measurement's (part, case, B, N, metric) before them.
TARGETS_CSV = Path("beyond") / "targets-beyond.csv"
LATER_CSVS = (Path("beyond") / "targets-memory.csv",)


def _read(results: Results) -> list[dict[str, str]]:
    rows: dict[tuple, dict[str, str]] = {}
    for name in (TARGETS_CSV, *LATER_CSVS):
        path = results.folder / name
        if not path.exists():
            continue
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                rows[(r["part"], r["case"], r["B"], r["N"], r["metric"])] = r
    return list(rows.values())


@dataclass(frozen=True)
class Target:
    """One target: what it asks, the measured numbers as text, and whether it is met (None:
    not measured)."""

    name: str
    measured: str
    met: bool | None


def _value(rows: list[dict[str, str]], part: str, case: str, B: int, N: int, metric: str):
    for r in rows:
        if (r["part"], r["case"], int(r["B"]), int(r["N"]), r["metric"]) == (
            part, case, B, N, metric,
        ):  # fmt: skip
            return float(r["value"])
    return None


def targets(rows: list[dict[str, str]]) -> list[Target]:
    """The targets of ``rows`` (the CSV's), in a fixed order."""
    out = []
    ratios = [
        (int(r["B"]), int(r["N"]), float(r["value"]))
        for r in rows
        if r["part"] == "lengths" and r["metric"] == "ratio"
    ]
    text = "; ".join(f"{fmt_sig(v)}x at B = {B}, N = {N}" for B, N, v in ratios)
    # (a fast wrong answer meets nothing: each size's padded-vs-unpadded error must be small)
    exact = {
        (int(r["B"]), int(r["N"])): float(r["value"]) <= MAX_REL_ERR
        for r in rows
        if r["part"] == "lengths" and r["metric"] == "max_rel_err"
    }
    ok = {(B, N): exact.get((B, N), False) for B, N, _ in ratios}
    met = all(v <= 1.0 and ok[B, N] for B, N, v in ratios) if ratios else None
    out.append(Target("a padded batch never slower than full length (ratio <= 1)", text, met))
    big = [v for B, N, v in ratios if (B, N) == (512, 512)]
    out.append(
        Target(
            "B = 512, N = 512, lengths uniform in [128, 512]: at most 0.6x full length",
            f"{fmt_sig(big[0])}x" if big else "",
            big[0] <= 0.6 and ok[512, 512] if big else None,
        )
    )
    checks: list[tuple[str, int, int, Callable[[float, float], bool], str]] = [
        ("B = 32, N = 2048 checkpointed: at most 128 MiB and 1.4x the full mode", 32, 2048,
         lambda mib, ratio: mib <= 128 and ratio <= 1.4, "ratio"),
        ("B = 1, N = 65536 checkpointed: at most 0.5 s and 1 GiB", 1, 65536,
         lambda mib, ms: mib <= 1024 and ms <= 500, "ms"),
    ]  # fmt: skip
    for name, B, N, rule, second in checks:
        mib = _value(rows, "memory", "checkpoint", B, N, "peak_MiB")
        ms = _value(rows, "memory", "checkpoint", B, N, "ms")
        ratio = _value(rows, "memory", "checkpoint / full", B, N, "ratio")
        other = ratio if second == "ratio" else ms
        if mib is None or other is None:
            out.append(Target(name, "", None))
            continue
        text = f"{fmt_sig(mib)} MiB, {fmt_sig(ms)} ms"
        if ratio is not None:
            text += f", {fmt_sig(ratio)}x the full mode"
        err = _value(rows, "memory", "checkpoint-vs-full", B, N, "grad_rel_err")
        right = err is not None and err <= MAX_REL_ERR
        out.append(Target(name, text, rule(mib, other) and right))
    mib = _value(rows, "memory", "checkpoint", 1, 262144, "peak_MiB")
    ms = _value(rows, "memory", "checkpoint", 1, 262144, "ms")
    done = mib is not None and ms is not None
    out.append(
        Target(
            "B = 1, N = 262144 checkpointed runs",
            f"{fmt_sig(ms / 1e3)} s, {fmt_sig(mib / 1024)} GiB" if done else "",
            True if done else None,
        )
    )
    return out


def section_beyond(results: Results) -> str:
    """The section: the targets table, the compiled-step numbers and the provenance."""
    rows = _read(results)
    head = "## Beyond the paper: padded batches, checkpointed memory, compiled steps\n"
    if not rows:
        return head + f"\nNot measured: no `{TARGETS_CSV.as_posix()}` in the results folder.\n"
    verdict = {True: "met", False: "not met", None: "not measured"}
    body = md_table(
        ["target (forward + backward, float32, D = 64)", "measured", "verdict"],
        [[t.name, t.measured or "-", verdict[t.met]] for t in targets(rows)],
    )
    compiled = []
    for case, metric in (("eager", "ms"), ("compiled", "ms"), ("eager-bf16-autocast", "ms"),
                         ("eager-bf16-autocast", "loss_rel_err"),
                         ("eager-bf16-autocast", "grad_rel_err")):  # fmt: skip
        v = _value(rows, "compile", case, 32, 512, metric)
        if v is not None:
            shown = fmt_sig(v) if metric == "ms" else fmt_g(v)
            compiled.append(f"{case} {metric.replace('_', ' ')} {shown}")
    prov: dict[tuple, set[str]] = {}
    for r in rows:
        prov.setdefault((r["gpu"], r["git_sha"][:7], r["date_utc"][:10]), set()).add(r["part"])
    where = "; ".join(
        f"{', '.join(sorted(parts))}: {g}, commit {s}, {d}"
        for (g, s, d), parts in sorted(prov.items())
    )
    lines = [head, body, ""]
    if compiled:
        lines.append(
            "A small model's training step with the loss (B = 32, N = 512): "
            + ", ".join(compiled)
            + " (relative to float32).\n"
        )
    files = ", ".join(f"`{p.as_posix()}`" for p in (TARGETS_CSV, *LATER_CSVS))
    lines.append(f"Source: {files}, later rows replacing earlier ones ({where}).\n")
    return "\n".join(lines)
