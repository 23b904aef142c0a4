"""Train a small forecaster on sine waves with soft-DTW as the loss.

Each sample is a sine wave of random amplitude, frequency and phase, plus noise; the model
sees the first ``--input-len`` points and predicts the next ``--horizon``.  The loss is the
soft-DTW divergence (``sdtw.SoftDTW(normalize=True)``: zero when the forecast equals the
target, never negative), or plain soft-DTW with ``--plain``.

    python examples/forecasting.py            # from any folder; saves examples/out/forecasting.png
    python examples/forecasting.py --quick    # an eighth of the steps (10 epochs on 512 series)
    python -m examples.forecasting --device cuda --epochs 50   # (-m: from the repository root)

The default run (40 epochs of 16 steps) takes about two minutes on a 2-core CPU;
it prints a line per epoch.
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
from torch import nn

import sdtw
from examples import missing

DEFAULT_OUT = Path(__file__).resolve().parent / "out" / "forecasting.png"


def sine_windows(n: int, input_len: int, horizon: int, *, noise: float, seed: int):
    """(n, input_len, 1) histories and (n, horizon, 1) continuations of random sine waves."""
    rng = np.random.default_rng(seed)
    t = np.arange(input_len + horizon)[None, :]
    amp = rng.uniform(0.5, 1.5, size=(n, 1))
    period = rng.uniform(15.0, 40.0, size=(n, 1))
    phase = rng.uniform(0.0, 2 * np.pi, size=(n, 1))
    y = amp * np.sin(2 * np.pi * t / period + phase) + noise * rng.standard_normal(t.shape)
    y = torch.as_tensor(y[..., None], dtype=torch.float32)
    return y[:, :input_len], y[:, input_len:]


class MLPForecaster(nn.Module):
    """History (B, input_len, 1) -> forecast (B, horizon, 1)."""

    def __init__(self, input_len: int, horizon: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(input_len, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, horizon),
        )

    def forward(self, history: torch.Tensor) -> torch.Tensor:
        return self.net(history).unsqueeze(-1)


def plot(history, target, forecast, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history, target, forecast = (
        a.detach().cpu().numpy()[..., 0] for a in (history, target, forecast)
    )
    n = min(4, len(history))
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3.0), sharey=True, squeeze=False)
    L, H = history.shape[1], target.shape[1]
    future = np.arange(L, L + H)
    for i, ax in enumerate(axes[0]):
        ax.plot(np.arange(L), history[i], color="0.4", label="input")
        ax.plot(future, target[i], color="tab:blue", label="truth")
        ax.plot(future, forecast[i], color="tab:red", ls="--", label="forecast")
        ax.axvline(L - 0.5, color="0.8", lw=0.8)
        ax.set_xlabel("time")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, help="default: 40 (--quick: 10)")
    p.add_argument("--n-train", type=int, help="training series, default: 1024 (--quick: 512)")
    p.add_argument("--quick", action="store_true", help="a short run: an eighth of the steps")
    p.add_argument("--n-test", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--input-len", type=int, default=40)
    p.add_argument("--horizon", type=int, default=20)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--gamma", type=float, default=0.1)
    p.add_argument("--plain", action="store_true", help="plain soft-DTW instead of the divergence")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.epochs is None:
        args.epochs = 10 if args.quick else 40
    if args.n_train is None:
        args.n_train = 512 if args.quick else 1024
    problem = missing("python -m examples.forecasting")
    if problem:
        print(problem, file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    data = dict(noise=args.noise)
    x_train, y_train = sine_windows(
        args.n_train, args.input_len, args.horizon, seed=args.seed, **data
    )
    x_test, y_test = sine_windows(
        args.n_test, args.input_len, args.horizon, seed=args.seed + 1, **data
    )
    x_train, y_train, x_test, y_test = (a.to(device) for a in (x_train, y_train, x_test, y_test))

    model = MLPForecaster(args.input_len, args.horizon).to(device)
    loss_fn = sdtw.SoftDTW(gamma=args.gamma, normalize=not args.plain)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    kind = "soft-DTW" if args.plain else "soft-DTW divergence"
    steps = -(-args.n_train // args.batch_size)
    print(
        f"training an MLP forecaster on {device} with the {kind} loss (gamma={args.gamma:g}): "
        f"{args.epochs} epochs of {steps} steps, a line per epoch",
        flush=True,
    )
    if device.type == "cpu" and args.epochs * steps > 200:
        print("(on a CPU that takes minutes; --quick trains an eighth as long)", flush=True)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(args.n_train, device=device)
        total = 0.0
        for i in range(0, args.n_train, args.batch_size):
            idx = order[i : i + args.batch_size]
            loss = loss_fn(model(x_train[idx]), y_train[idx]).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        model.eval()
        with torch.no_grad():
            pred = model(x_test)
            test_loss = float(loss_fn(pred, y_test).mean())
            test_mse = float(((pred - y_test) ** 2).mean())
        print(
            f"epoch {epoch:3d}  train {kind} {total / args.n_train:9.4f}  "
            f"test {kind} {test_loss:9.4f}  test MSE {test_mse:.4f}",
            flush=True,
        )
    print(f"trained in {time.perf_counter() - start:.1f} s")
    with torch.no_grad():
        pred = model(x_test[:4])
    title = f"MLP forecasts, {kind} loss ($\\gamma$={args.gamma:g}), {args.epochs} epochs"
    plot(x_test[:4], y_test[:4], pred, args.out, title)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
