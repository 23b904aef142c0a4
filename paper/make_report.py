"""Write ``paper/REPRODUCTION.md``: the paper's research questions, answered from our CSVs.

Usage
-----
::

    python -m paper.make_report [--results DIR] [--out FILE] [--figures DIR] [--check]

Every measured number in the report is read from the committed CSVs under
``experiments/results/<machine>/`` (:class:`experiments.load.Results`).  The only numbers
typed in are the ones we cite, all in :data:`paper.cited.CITED` (re-exported here), each with
its source: the authors' published benchmark (their CSV, verbatim, and their README headline)
and the measurements of the authors' released code on our H200 (``PAPER.md``).  The verdict of
each research question is computed from those numbers by the rules in
:func:`paper.verdicts.verdicts`, so a change of results changes the text.

The report is plain text generated deterministically (no dates, no absolute paths): a rerun
on any machine gives the same bytes; ``--check`` exits 1 when the file on disk differs
(``tests/test_report.py`` does the same in CI).

The package, by role:

=======================  ====================================================================
module                   what
=======================  ====================================================================
:mod:`paper.cited`       the cited numbers, each with its source, and their parsing
:mod:`paper.measured`    what the report reads from our CSVs (cells, ratios, barycenters)
:mod:`paper.verdicts`    the claims and the rules that turn the numbers into verdicts
:mod:`paper.sections`    the header, the verdict summary and the sections RQ1–RQ4
:mod:`paper.tables`      the paper grid side by side, disagreements, gaps, provenance
:mod:`paper.beyond`      the targets beyond the paper (padded batches, checkpoints, compile)
:mod:`paper.embed`       the figures, embedded
:mod:`paper.markdown`    number formatting and Markdown tables
this module              the report assembled, and the command line
=======================  ====================================================================
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.load import REPO, RESULTS, Results
from paper.beyond import section_beyond
from paper.cited import CITED
from paper.embed import section_figures
from paper.sections import (
    section_header,
    section_rq1,
    section_rq2,
    section_rq3,
    section_rq4,
    section_summary,
)
from paper.tables import section_disagreements, section_grid, section_not_measured, section_sources
from paper.verdicts import verdicts

__all__ = ["CITED", "main", "render"]

OUT = REPO / "paper" / "REPRODUCTION.md"
FIGURES = REPO / "figures"


def render(results: Results, figures_dir: Path = FIGURES) -> str:
    """The whole report, as text."""
    all_verdicts = verdicts(results)
    by_rq = {v.rq: v for v in all_verdicts}
    sections = [
        section_header(results),
        section_summary(all_verdicts),
        section_rq1(results, by_rq["RQ1"]),
        section_rq2(results, by_rq["RQ2"]),
        section_rq3(results, by_rq["RQ3a"], by_rq["RQ3b"]),
        section_rq4(results, by_rq["RQ4"], figures_dir),
        section_beyond(results),
        section_grid(results),
        section_disagreements(results),
        section_not_measured(results),
        section_figures(),
        section_sources(results),
    ]
    return "\n\n".join(s.rstrip() for s in sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write (or ``--check``) the report; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m paper.make_report",
        description="Write paper/REPRODUCTION.md from the committed benchmark CSVs.",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder with the CSVs")
    parser.add_argument("--out", type=Path, default=OUT, help="report path (%(default)s)")
    parser.add_argument(
        "--figures", type=Path, default=FIGURES, help="folder of the figures (%(default)s)"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if --out is out of date"
    )
    args = parser.parse_args(argv)
    if not (args.results / "paper-grid.csv").exists():
        parser.error(f"no paper-grid.csv in {args.results}")
    text = render(Results(args.results), args.figures)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else None
        if current != text:
            print(f"{args.out} is out of date: run python -m paper.make_report", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
