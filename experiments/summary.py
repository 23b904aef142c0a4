"""What a run prints at its end: each sweep's tables (:func:`summarize`), how noisy its times
were (:func:`noise`) and how they compare with the committed numbers of the same machine class
(:func:`compare`)."""

from __future__ import annotations

import math
from pathlib import Path

from experiments.impls import IMPLS
from experiments.results_csv import describe, key

__all__ = ["compare", "noise", "summarize"]

#: Time metrics: rows whose median is milliseconds (the barycenter sweep also writes counts).
TIME_METRICS = ("time_ms", "ms_per_iter")


def summarize(path: Path) -> str:
    """Tables of one sweep's CSV: median ms (or each metric's median), peak MiB and worst
    relative error per impl."""
    import pandas as pd

    df = pd.read_csv(path)
    lines = [f"== {path.stem} ({path}) =="]
    ok = df[df["status"] == "ok"].copy()
    by_metric = df["metric"].nunique() > 1  # the barycenter sweep: ms, iterations, objective
    index = ["mode"] + [c for c in ("B", "N", "M", "D", "gamma") if df[c].nunique() > 1]
    index += ["metric"] if by_metric else []
    order = [name for name in IMPLS if name in set(ok["impl"])]
    ok["peak_MiB"] = ok["peak_mem_bytes"] / 2**20
    ok["max_rel_err"] = ok[["rel_err_value", "rel_err_grad_x", "rel_err_grad_y"]].max(axis=1)
    median_title, median_fmt = (
        ("median, by metric", "{:.4g}") if by_metric else ("median ms", "{:.3g}")
    )
    for column, title, fmt in [
        ("median", median_title, median_fmt),
        ("peak_MiB", "peak MiB", "{:.4g}"),
        ("max_rel_err", "max relative error vs float64 (value, grad x, grad y)", "{:.1e}"),
    ]:
        if ok.empty or ok[column].isna().all():
            continue
        table = ok.pivot_table(index=index, columns="impl", values=column, aggfunc="first")
        table = table.reindex(columns=[c for c in order if c in table.columns])
        lines += [f"-- {title}", table.to_string(float_format=fmt.format, na_rep="-")]
    failed = df[df["status"] != "ok"]
    if not failed.empty:
        counts = failed.groupby(["impl", "status"]).size().rename("rows").reset_index()
        lines += ["-- not measured", counts.to_string(index=False)]
    return "\n".join(lines)


def _timed(path: Path):
    """The ``ok`` rows of ``path`` with percentiles and a positive median time."""
    import pandas as pd

    df = pd.read_csv(path)
    df = df[(df["status"] == "ok") & df["metric"].isin(TIME_METRICS)]
    return df[(df["median"] > 0) & df["p20"].notna() & df["p80"].notna()]


def noise(path: Path) -> str:
    """One line on the spread of ``path``'s timed steps: ``(p80 - p20) / median`` over its
    measurements, median and worst (which one)."""
    df = _timed(path)
    if df.empty:
        return f"noise: {path.stem}: no timed measurement"
    spread = (df["p80"] - df["p20"]) / df["median"]
    worst = df.loc[spread.idxmax()]
    return (
        f"noise: {path.stem}: p20-p80 spread of the timed steps, relative to the median: "
        f"{spread.median():.0%} typical, {spread.max():.0%} at worst "
        f"({describe(key(worst))}), over {len(df)} measurements"
    )


def compare(path: Path, committed: Path) -> str:
    """How ``path``'s median times compare with those of ``committed`` (the committed CSV of
    this machine class) on the measurements both have: the ratio new / committed per
    implementation, as a geometric mean and a range."""
    if not committed.exists():
        return f"compare: {path.stem}: no committed results for this machine class ({committed})"
    if committed.resolve() == path.resolve():
        return f"compare: {path.stem}: these are the committed results ({committed})"
    new, old = _timed(path), _timed(committed)
    columns = ["impl", "mode", "B", "N", "M", "D", "gamma", "dtype", "metric"]
    both = new.merge(old, on=columns, suffixes=("", "_committed"))
    if both.empty:
        return (
            f"compare: {path.stem}: no measurement in common with {committed} "
            "(another grid: --quick, --dim or --impl)"
        )
    lines = [f"compare: {path.stem}: median time, this run / {committed} ({len(both)} in common)"]
    ratio = both["median"] / both["median_committed"]
    for impl in [name for name in IMPLS if name in set(both["impl"])]:
        r = ratio[both["impl"] == impl]
        mean = math.exp(sum(math.log(v) for v in r) / len(r))
        lines.append(
            f"  {impl:<14} x{mean:.2f} (geometric mean of {len(r)}; {r.min():.2f} to {r.max():.2f})"
        )
    return "\n".join(lines)
