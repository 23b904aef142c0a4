"""The soft alignment of two time series: soft-DTW's expected alignment matrix E at three
gammas, as a heat map under the two series.

x is a sine; y the same sine with its time warped (slow, then fast) and a little noise.  At a
large gamma E spreads over many paths; as gamma shrinks it concentrates on the DTW path.

    python examples/alignment.py                     # from any folder; examples/out/alignment.png
    python -m examples.alignment --gammas 1 0.1 0.01 --length 120   # (-m: from the repository root)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import torch

import sdtw
from examples import missing

DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "alignment.png"


def series(length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x (N, 1): a sine; y (M, 1), M = 4 N / 5: the sine at warped times, plus noise."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, length)
    u = np.linspace(0, 1, length * 4 // 5)
    warped = u**1.8  # slow at first, then fast
    x = np.sin(4 * np.pi * t)
    y = np.sin(4 * np.pi * warped) + 0.05 * rng.standard_normal(len(u))
    return torch.as_tensor(x[:, None]), torch.as_tensor(y[:, None])


def plot(x, y, alignments: list[tuple[float, torch.Tensor]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(alignments)
    fig = plt.figure(figsize=(4.2 * n, 4.6))
    grid = fig.add_gridspec(2, n, height_ratios=(1, 4), hspace=0.08)
    for k, (gamma, E) in enumerate(alignments):
        top = fig.add_subplot(grid[0, k])
        top.plot(y[:, 0].numpy(), color="tab:red", lw=1.2)
        top.set_xlim(-0.5, len(y) - 0.5)
        top.set_xticks([])
        top.set_yticks([])
        top.set_title(f"$\\gamma$ = {gamma:g}")
        ax = fig.add_subplot(grid[1, k])
        ax.imshow(E.numpy(), cmap="magma_r", aspect="auto", vmin=0, vmax=1)
        ax.set_xlabel("y index j")
        if k == 0:
            ax.set_ylabel("x index i")
    fig.suptitle("soft-DTW expected alignment E[i, j] (sdtw.alignment)")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--gammas", type=float, nargs="+", default=[1.0, 0.1, 0.01])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    problem = missing("python -m examples.alignment")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    x, y = series(args.length, args.seed)
    alignments = []
    for gamma in args.gammas:
        E = sdtw.alignment(x.to(args.device), y.to(args.device), gamma=gamma).cpu()
        alignments.append((gamma, E))
        # the expected number of matches per x step: 1 for a one-to-one path, more where the
        # alignment spreads or y is compressed against x
        print(
            f"gamma {gamma:g}: E sums to {float(E.sum()):.1f} over {len(x)} x steps, "
            f"largest entry {float(E.max()):.3f}"
        )
    plot(x, y, alignments, args.out)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
