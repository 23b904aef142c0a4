"""Euclidean mean vs soft-DTW barycenter of shifted block waves (the paper's Figure 2 setting).

Every input is the same rectangular pulse, moved by a random shift and corrupted by noise.
The point-wise (Euclidean) mean smears the pulses into a ramp; the soft-DTW barycenter aligns
them and keeps one sharp pulse.

    python examples/barycenter.py                    # from any folder; examples/out/barycenter.png
    python -m examples.barycenter --device cuda --n-series 1000 --length 256   # (-m: from the root)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import torch

import sdtw
from examples import missing

DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "barycenter.png"


def block_waves(
    n_series: int, length: int, *, max_shift: float = 0.15, noise: float = 0.05, seed: int = 0
) -> torch.Tensor:
    """(S, N, 1) pulses of height 1 and width N/4, centres shifted by up to max_shift * N."""
    rng = np.random.default_rng(seed)
    t = np.arange(length)
    centre = length / 2 + rng.uniform(-max_shift, max_shift, size=(n_series, 1)) * length
    pulse = (np.abs(t[None, :] - centre) < length / 8).astype(np.float64)
    X = pulse + noise * rng.standard_normal((n_series, length))
    return torch.as_tensor(X[:, :, None], dtype=torch.float32)


def objective(Z: torch.Tensor, X: torch.Tensor, gamma: float) -> float:
    """Mean soft-DTW from Z (N, D) to the inputs (S, N, D): what the barycenter minimises."""
    with torch.no_grad():
        return float(sdtw.softdtw(Z.expand(len(X), -1, -1), X, gamma=gamma).mean())


def plot(X: torch.Tensor, mean: torch.Tensor, bary: torch.Tensor, gamma: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    X, mean, bary = (a.detach().cpu().numpy()[..., 0] for a in (X, mean, bary))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    panels = [
        (mean, "Euclidean mean", "tab:blue"),
        (bary, f"soft-DTW barycenter ($\\gamma$={gamma:g})", "tab:red"),
    ]
    for ax, (z, title, colour) in zip(axes, panels, strict=True):
        for x in X[:50]:
            ax.plot(x, color="0.6", alpha=0.3, lw=0.8)
        ax.plot(z, color=colour, lw=2.5)
        ax.set_title(title)
        ax.set_xlabel("time")
    axes[0].set_ylabel("value")
    fig.suptitle(f"{len(X)} shifted, noisy block waves")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-series", type=int, default=30)
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--gamma", type=float, default=0.1)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--method", choices=["adam", "lbfgs"], default="adam")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    problem = missing("python -m examples.barycenter")
    if problem:
        print(problem, file=sys.stderr)
        return 2

    X = block_waves(args.n_series, args.length, noise=args.noise, seed=args.seed).to(args.device)
    mean = X.mean(0)
    start = time.perf_counter()
    bary, history = sdtw.softdtw_barycenter(
        X,
        gamma=args.gamma,
        max_iter=args.max_iter,
        lr=args.lr,
        method=args.method,
        return_history=True,
    )
    if X.is_cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(
        f"{args.n_series} series, length {args.length}, on {args.device}: "
        f"{len(history) - 1} iterations in {elapsed:.2f} s"
    )
    print(f"mean soft-DTW to the inputs (gamma={args.gamma:g}):")
    print(f"  Euclidean mean       {objective(mean, X, args.gamma):10.4f}")
    print(f"  soft-DTW barycenter  {objective(bary, X, args.gamma):10.4f}")
    plot(X, mean, bary, args.gamma, args.out)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
