"""Draw the reproduction figures from the committed benchmark CSVs (no GPU needed).

Usage
-----
::

    python -m figures.make_figures [--results DIR] [--out DIR] [--only NAME ...]

Writes PNG and PDF into ``--out`` (default ``figures/``), one figure per ``--only`` name:

===============  =======================  ==========================================================
name (module)    file stem                what
===============  =======================  ==========================================================
``fig1``         ``fig1-memory-runtime``  paper Figure 1 on our GPU: peak memory and runtime of a
(paper_figures)                           forward + backward step vs L (D = 128) and vs D (L = 256),
                                          B = 32, every implementation; points without a
                                          measurement marked in a band
``accuracy``     ``accuracy-gamma``       RQ2: relative error of the gradient (and value) against
(paper_figures)                           float64, float32 inputs, every implementation,
                                          gamma 1e-4 .. 10
``scaling``      ``scaling``              time and memory vs N up to the longest length measured,
(paper_figures)                           log-log, fitted slope (N >= 512) in the legend
``processes``    ``targets-processes``    issue 3's eager N = 512 step (B = 32, D = 64) in each
(timings)                                 fresh device process of ``targets-processes/``, against
                                          the 0.5 ms target
``tcgrads``      ``tc-grads``             the float32 gradients wrt x and y from E (B = 32,
(timings)                                 N = M = 512) vs D: the Triton kernel told that D is a
                                          multiple of 4, not told, and cuBLAS's float32 form, from
                                          ``tc-grads-align/gradsizes.csv``
``fig2``         ``fig2-barycenter``      paper Figure 2, drawn by ``examples.barycenter`` when it
(paper_figures)                           exists (the contract is in :mod:`figures.paper_figures`)
``beyond``       ``beyond``               memory and time vs N at B = 1, both memory modes, and
(beyond)                                  padded-batch / full-length step ratios; skipped without
                                          ``memory.csv`` and ``lengths.csv``
===============  =======================  ==========================================================

The shared rcParams, implementation styles and timestamp-free saving are in
:mod:`figures.common`: a rerun with the same matplotlib and FreeType gives byte-identical PNG
and PDF files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt

from experiments.load import REPO, RESULTS, Results
from figures.beyond import figure_beyond
from figures.common import IMPL_STYLE, STYLE
from figures.paper_figures import figure1, figure2, figure_accuracy, figure_scaling
from figures.timings import figure_processes, figure_tc_grads

__all__ = ["FIGURES", "IMPL_STYLE", "main"]

OUT = REPO / "figures"

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
