"""The report's figures: the Markdown that embeds the PNGs (and links the PDFs) drawn by
:mod:`figures.make_figures`."""

# The text is typeset: γ, ×, –, − and ≤ are meant, not look-alikes of ASCII.
# ruff: noqa: RUF001

from __future__ import annotations

from pathlib import Path

__all__ = ["figure2", "section_figures"]


def section_figures() -> str:
    return """\
## Figures

Drawn by `python -m figures.make_figures` (`nox -s figures`) from the same CSVs; a PDF lies
beside each PNG.  Points without a measurement are marked in a band under the plots.

**Figure 1 on our GPU** — peak memory and runtime of a forward + backward step vs sequence
length (B = 32, D = 128; `fig1-length.csv`) and vs feature dimension (B = 32, L = 256;
`fig1-dim.csv`), every implementation ([PDF](../figures/fig1-memory-runtime.pdf)):

![Figure 1: memory and runtime vs L and D](../figures/fig1-memory-runtime.png)

**Accuracy vs γ (RQ2)** — relative error of the gradient (left) and of the loss value (right)
against float64, float32 inputs (`gamma.csv`); the four paper/Maghoumi-design curves lie on
top of each other ([PDF](../figures/accuracy-gamma.pdf)):

![Accuracy vs gamma](../figures/accuracy-gamma.png)

**Scaling** — runtime and peak memory vs N, log-log, with the least-squares slope over
N ≥ 512 in the legend (`paper-grid.csv` at B = 32, D = 64; `long.csv` at B = 8 and 1,
D = 64) ([PDF](../figures/scaling.pdf)):

![Scaling with N](../figures/scaling.png)

Figure 2 (barycenters) is under RQ4."""


def figure2(figures_dir: Path) -> str:
    """Figure 2 for RQ4: embedded when ``figures_dir`` holds it, else why it is not drawn."""
    if (figures_dir / "fig2-barycenter.png").exists():
        return (
            "Figure 2, drawn by `examples/barycenter.py` through `nox -s figures` "
            "(qualitative):\n\n"
            "![Figure 2: soft-DTW barycenter vs Euclidean mean](../figures/fig2-barycenter.png)"
        )
    return (
        "Figure 2 is not drawn yet: `nox -s figures` draws it by calling "
        "`examples/barycenter.py`, which is not in this tree yet."
    )
