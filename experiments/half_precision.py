"""float16 / bfloat16 inputs: what the loss and its gradient lose, against float64.

    python -m experiments.half_precision [--backend cpu] [--out FILE]

Two comparisons per (gamma, dtype), each a relative error ``|a - b| / |b|`` over the batch:
against the float64 result *on the same rounded inputs* (what the computation itself adds:
sdtw computes in float64 on the CPU backends, float32 on CUDA, and rounds the result once to
the input's dtype), and against the float64 result on the original float64 inputs (what
rounding the inputs to half precision costs, which dominates).  B = 16, N = 128, M = 100,
D = 8, random normal inputs.  Prints a Markdown table with its provenance line.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
from pathlib import Path

import torch

import sdtw


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm())


def _run(x, y, gamma, backend):
    xr = x.clone().requires_grad_()
    v = sdtw.softdtw(xr, y, gamma=gamma, backend=backend)
    v.sum().backward()
    return v.detach(), xr.grad


def table(backend: str, device: str) -> str:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 128, 8, generator=g, dtype=torch.float64).to(device)
    y = torch.randn(16, 100, 8, generator=g, dtype=torch.float64).to(device)
    lines = [
        "| gamma | dtype | value vs float64, same inputs | gradient vs float64, same inputs "
        "| value vs float64 inputs | gradient vs float64 inputs |",
        "|---|---|---|---|---|---|",
    ]
    for gamma in (1.0, 0.1):
        v0, g0 = _run(x, y, gamma, "cpu")
        for dtype in (torch.float16, torch.bfloat16):
            xh, yh = x.to(dtype), y.to(dtype)
            v, gx = _run(xh, yh, gamma, backend)
            w, gw = _run(xh.double(), yh.double(), gamma, "cpu")
            name = str(dtype).split(".")[1]
            row = (_rel(v, w), _rel(gx, gw), _rel(v, v0), _rel(gx, g0))
            lines.append(f"| {gamma:g} | {name} | " + " | ".join(f"{e:.1e}" for e in row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda", "reference"])
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    device = "cuda" if args.backend == "cuda" else "cpu"
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    where = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu"
    text = table(args.backend, device) + (
        f"\n\nbackend {args.backend} on {where}; torch {torch.__version__}; "
        f"commit {sha.stdout.strip() or 'unknown'}; {datetime.date.today()}\n"
    )
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
