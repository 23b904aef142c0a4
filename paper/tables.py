"""The report's reference sections: the paper grid side by side, where the paper's own numbers
disagree, the points without a measurement, and where the numbers come from."""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

import math

from experiments.load import BARYCENTER, Results, fmt_sig, not_ok
from paper.cited import CITED, published, their_cell, their_mib, their_ms
from paper.markdown import (
    DASH,
    fmt_mib,
    fmt_ms,
    fmt_pair,
    fmt_pct,
    fmt_ratio,
    fmt_span,
    fmt_times,
    fmt_x,
    indent,
    md_table,
)
from paper.measured import (
    bary_incomplete,
    cell,
    grad_err,
    grid_points,
    mem_mib,
    ok_value,
    published_ratios,
    results_label,
    saving_pct,
)

__all__ = [
    "IMPL_NAMES",
    "section_disagreements",
    "section_grid",
    "section_not_measured",
    "section_sources",
]


#: What each implementation is, as the report names it.
IMPL_NAMES = {
    "sdtw-fused": "sdtw, fused (ours)",
    "sdtw-unfused": "sdtw, unfused (ours)",
    "sdtw-cpu": "sdtw, CPU (ours)",
    "paper-unfused": "paper design, unfused (baselines/paper.py)",
    "paper-fused": "paper design, fused (baselines/paper.py)",
    "maghoumi": "Maghoumi design, broadcast distance (baselines/maghoumi.py)",
    "maghoumi-bmm": "Maghoumi design, matmul distance (baselines/maghoumi.py)",
    "torch": "plain PyTorch autograd (baselines/torch_naive.py)",
}


def section_grid(results: Results) -> str:
    pub = published()
    impls4 = ("paper-unfused", "paper-fused", "sdtw-unfused", "sdtw-fused")
    time_rows, mem_rows, ratio_rows, mag_rows = [], [], [], []
    for B, N, D in grid_points():
        p = pub.get((B, N, D), {})
        where = {"B": B, "N": N, "D": D}
        lead = [str(B), str(N), str(D)]
        time_rows.append(
            lead
            + [fmt_ms(p.get("ours_unfused_ms")), fmt_ms(p.get("ours_fused_ms"))]
            + [their_cell(N, D, "unfused", B, 0), their_cell(N, D, "fused", B, 0)]
            + [cell(results, "paper-grid", impl, "median", **where) for impl in impls4]
        )
        mem_rows.append(
            lead
            + [fmt_mib(p.get("ours_unfused_mb")), fmt_mib(p.get("ours_fused_mb"))]
            + [their_cell(N, D, "unfused", B, 1), their_cell(N, D, "fused", B, 1)]
            + [
                cell(results, "paper-grid", impl, "peak_mem_bytes", 2**-20, **where)
                for impl in impls4
            ]
        )
        t = {impl: ok_value(results, "paper-grid", impl, "median", **where) for impl in impls4}
        m = {impl: mem_mib(results, "paper-grid", impl, **where) for impl in impls4}
        ratio_rows.append(
            [
                *lead,
                fmt_ratio(p.get("ours_fused_ms"), p.get("ours_unfused_ms")),
                fmt_ratio(their_ms(N, D, "fused", B), their_ms(N, D, "unfused", B)),
                fmt_ratio(t["paper-fused"], t["paper-unfused"]),
                fmt_ratio(t["sdtw-fused"], t["sdtw-unfused"]),
                fmt_ratio(their_ms(N, D, "unfused", B), t["sdtw-unfused"]),
                fmt_ratio(their_ms(N, D, "fused", B), t["sdtw-fused"]),
                fmt_ratio(t["paper-unfused"], t["sdtw-unfused"]),
                fmt_ratio(t["paper-fused"], t["sdtw-fused"]),
                fmt_ratio(m["sdtw-fused"], their_mib(N, D, "fused", B)),
                fmt_ratio(m["sdtw-fused"], m["paper-fused"]),
            ]
        )
        mag_rows.append(
            lead
            + [
                fmt_pair(fmt_mib(p.get("maghoumi_mb")), fmt_ms(p.get("maghoumi_ms"))),
                fmt_pair(their_cell(N, D, "maghoumi", B, 1), their_cell(N, D, "maghoumi", B, 0)),
                fmt_pair(
                    their_cell(N, D, "maghoumi-bmm", B, 1),
                    their_cell(N, D, "maghoumi-bmm", B, 0),
                ),
            ]
            + [
                fmt_pair(
                    cell(results, "paper-grid", impl, "peak_mem_bytes", 2**-20, **where),
                    cell(results, "paper-grid", impl, "median", **where),
                )
                for impl in ("maghoumi", "maghoumi-bmm")
            ]
        )
    cols = ["B", "N", "D"]
    eight = [
        "published unfused",
        "published fused",
        "authors' code unfused",
        "authors' code fused",
        "paper design unfused",
        "paper design fused",
        "sdtw unfused",
        "sdtw fused",
    ]
    ratio_header = ["(a)", "(b)", "(c)", "(d)", "(e)", "(f)", "(g)", "(h)", "(i)", "(j)"]
    mag_header = [
        "published",
        "authors' run, H200",
        "authors' run + bmm, H200",
        "`maghoumi`",
        "`maghoumi-bmm`",
    ]
    return f"""\
## The paper grid, side by side

Forward + backward of `loss.sum()`, float32, γ = 1, M = N (`paper-grid.csv`).
"published": the authors' CSV, their GPU.  "authors' code": their released code on our H200
(PAPER.md; B = 32 only, five (N, D) points).  "paper design": `baselines/paper.py` on our
H200.  "sdtw": ours on our H200.  {DASH} = not in that source; `unsupported`, `missing`,
`fails`, `n/a` = as recorded there.

### Runtime (ms per step)

{md_table(cols + eight, time_rows, "r" * 11)}

### Peak memory (MiB per step)

{md_table(cols + eight, mem_rows, "r" * 11)}

### Ratios

Only ratios within one GPU.  Fused ÷ unfused runtime (the paper's "10–25×"): (a) published,
(b) authors' code on our H200, (c) paper design, (d) sdtw.  Speed-up of sdtw (> 1× = sdtw
faster): (e) authors' unfused ÷ sdtw unfused, (f) authors' fused ÷ sdtw fused, (g) paper
design unfused ÷ sdtw unfused, (h) paper design fused ÷ sdtw fused.  Memory of sdtw's fused
step (< 1× = sdtw smaller): (i) ÷ authors' fused, (j) ÷ paper design fused.  At N ≤ 1024
the paper design's unfused mode is much slower than the authors' (see "How to compare"
below), so (e) is the fair unfused speed-up where it exists.

{md_table(cols + ratio_header, ratio_rows, "r" * 13)}

### The block-per-pair (Maghoumi) design, peak MiB / ms

Our `maghoumi` baselines re-implement the design with our own kernels; they run at N = 1024,
where the authors' run of Maghoumi's code fails on the H200 (register limit, PAPER.md), and
refuse N > 1024 as the design does.  The published "67× faster, 97 % less memory than
Maghoumi" comes from Maghoumi's broadcast distance (a (B, N, M, D) tensor), not from its
kernels: compare the matmul-distance columns (PAPER.md).

{md_table(cols + mag_header, mag_rows, "r" * 8)}"""


def section_disagreements(results: Results) -> str:
    head = CITED["readme_headline"]
    pub = published()[(head["B"], head["N"], head["D"])]
    rows = []
    for label, key, csv_key in (
        ("Maghoumi", "maghoumi", "maghoumi"),
        ("unfused", "unfused", "ours_unfused"),
        ("fused", "fused", "ours_fused"),
    ):
        rows.append(
            [
                label,
                fmt_mib(head["mb"][key]),
                fmt_mib(pub[f"{csv_key}_mb"]),
                fmt_ms(head["ms"][key]),
                fmt_ms(pub[f"{csv_key}_ms"]),
                fmt_ratio(head["ms"][key], pub[f"{csv_key}_ms"]),
            ]
        )
    table = md_table(
        ["", "README MB", "CSV MB", "README ms", "CSV ms", "README ÷ CSV"], rows, "lrrrrr"
    )
    saving = saving_pct(published_ratios("ours_fused_mb", "ours_unfused_mb"))
    column = [r["fused_saving_pct"] for r in published().values() if r["fused_saving_pct"]]
    ratios = published_ratios("ours_fused_ms", "ours_unfused_ms")
    ratios_512 = [
        r["ours_fused_ms"] / r["ours_unfused_ms"]
        for (_, n, _), r in published().items()
        if n >= 512
    ]
    span_512 = fmt_span(ratios_512, fmt_times, "×")
    blanks = [
        f"B = {B}, N = {N}, D = {D}"
        + (f" (our re-implementation peaked at {fmt_mib(mib)} MiB there)" if mib else "")
        for (B, N, D), r in published().items()
        if r["maghoumi_ms"] is None and N <= 1024
        for mib in [mem_mib(results, "paper-grid", "maghoumi", B=B, N=N, D=D)]
    ]
    lo, hi = CITED["claims"]["RQ3a_range_pct"]
    tlo, thi = CITED["claims"]["RQ3b_range_x"]
    return f"""\
## Where the paper's own numbers disagree

- **README vs CSV, runtimes** (B = {head["B"]}, N = {head["N"]}, D = {head["D"]}): the memory
  agrees, the runtimes do not.  Both are the authors'; we quote both and measure ourselves.

{indent(table)}

- **"{lo:.0f}–{hi:.0f} % memory saving vs unfused"**: in their CSV fused mode saves
  {fmt_span(saving, fmt_pct, " %")} against unfused; its column `fused_saving_pct`
  ({fmt_span(column, fmt_pct, " %")}) is the saving against Maghoumi.
- **"{tlo:.0f}–{thi:.0f}× runtime cost"**: their CSV gives fused ÷ unfused =
  {fmt_span(ratios, fmt_times, "×")} ({span_512} at N ≥ 512); their README
  headline gives {fmt_x(head["ms"]["fused"] / head["ms"]["unfused"])}.
- Their CSV leaves Maghoumi blank at N = 2048 (the design's cap) and also at
  {"; ".join(blanks) or DASH}, with no reason given."""


def section_not_measured(results: Results) -> str:
    lines = ["## Points without a measurement", ""]
    for sweep in ("paper-grid", "fig1-length", "fig1-dim", "gamma", "long"):
        groups: dict[tuple[str, str], list[str]] = {}
        for point, status, note in not_ok(results, sweep):
            axis = "L" if sweep == "fig1-length" else "N"
            where = f"B = {point.B}, {axis} = {point.N}, D = {point.D}"
            if sweep == "gamma":
                where += f", γ = {point.gamma:g}"
            groups.setdefault((status, note), []).append(f"`{point.impl}` ({where})")
        for (status, note), points in groups.items():
            lines.append(f"- `{sweep}.csv`, **{status}** — {note}: {'; '.join(points)}.")
    nonfinite = [
        r for r in results.rows("gamma") if (e := grad_err(r)) is not None and math.isnan(e)
    ]
    if nonfinite:
        points = "; ".join(f"`{r['impl']}` (γ = {float(r['gamma']):g})" for r in nonfinite)
        lines.append(
            f"- `gamma.csv`, **ok, gradient non-finite** — the error column is `nan`: {points}."
        )
    if BARYCENTER in results.sweeps:
        for (status, note), points in bary_incomplete(results).items():
            lines.append(f"- `{BARYCENTER}.csv`, **{status}** — {note}: {'; '.join(points)}.")
    if len(lines) == 2:
        lines.append("Every planned point has an `ok` measurement.")
    lines += [
        "",
        "Planned points come from `experiments/sweeps.py`.  A point without a measurement is "
        "never drawn, interpolated or estimated, here or in the figures.  The Maghoumi-design "
        "points of `fig1-length` at L > 1024 would have been refused by the design limit, as "
        "in `paper-grid`; they are listed as missing because they were not run.",
    ]
    return "\n".join(lines)


def section_sources(results: Results) -> str:
    rows = []
    for sweep in results.sweeps:
        data = results.sweeps[sweep]
        if not data:
            rows.append([f"`{sweep}.csv`", "absent"] + [DASH] * 6)
            continue
        prov = results.provenance(sweep)
        ok = sum(r["status"] == "ok" for r in data)
        dirty = " (dirty)" if "true" in prov["git_dirty"] else ""
        rows.append(
            [
                f"`{sweep}.csv`",
                f"{len(data)} ({ok} ok)",
                prov["gpu"],
                prov["driver"],
                prov["torch"],
                f"{prov['numba']} / {prov['numba_cuda']}",
                f"`{prov['git_sha']}`{dirty}",
                prov["date_utc"],
            ]
        )
    header = ["CSV", "rows", "GPU", "driver", "torch", "numba / numba-cuda", "git", "date (UTC)"]
    impls = "\n".join(f"- `{name}`: {text}" for name, text in IMPL_NAMES.items())
    pub_grid = published()
    inputs_mib = max(2 * B * N * D * 4 for B, N, D in pub_grid) / 2**20
    head = CITED["readme_headline"]
    broadcast_mib = head["B"] * head["N"] ** 2 * head["D"] * 4 / 2**20
    reported = pub_grid[(head["B"], head["N"], head["D"])]["maghoumi_mb"]
    return f"""\
## Where the numbers come from

Our measurements ({results_label(results)}/, written by `python -m experiments.run`, one row
per implementation × mode × configuration):

{md_table(header, rows, "lr")}

Implementations (`experiments/impls.py`):

{impls}

Cited, not measured by us:

- **published**: {CITED["published_csv"]["source"]}.
- **published README**: {CITED["readme_headline"]["source"]}.
- **authors' code on our H200**: {CITED["their_code_h200"]["source"]}.

How to compare:

- Our `paper-*` baselines re-implement the paper's per-anti-diagonal-launch design at every
  length.  The authors' code uses that design only for long sequences; for N ≤ 1024 its
  unfused mode runs a block-per-pair kernel (Maghoumi's design), much faster there.  So at
  N ≤ 1024 our `paper-unfused` is far slower than the authors' unfused code, and the fair
  runtime comparison for sdtw is the "authors' code" column.  The re-implementation is what
  tests the design's own claims (fused vs unfused) at every grid point.
- Published numbers come from the authors' GPU (PAPER.md does not name it): only ratios
  within one source are compared, never absolute numbers across GPUs.
- Time: ours is the median of 3–10 steps timed with CUDA events after a warm-up (`repeats`
  column); theirs is the mean of 5 steps after a warm-up.  Memory: ours is
  `max_memory_allocated()` minus what was allocated before the step (inputs excluded); theirs
  is `max_memory_allocated()` as reported (PAPER.md does not say whether inputs are excluded;
  they are at most {fmt_sig(inputs_mib, 2)} MiB on their grid).  MiB = 2^20 bytes; their
  "MB" is MiB too (Maghoumi's broadcast at B = {head["B"]}, N = {head["N"]}, D = {head["D"]}
  is {fmt_sig(broadcast_mib, 4)} MiB; they report {fmt_sig(reported, 4)}).
- Errors: `max |a − r| / max |r|` against a float64 reference on the same input (value,
  gradient wrt x, gradient wrt y).  PAPER.md does not say which norm its error figures for the
  authors' code use."""
