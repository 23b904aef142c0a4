"""How long does an eager training step take, host work included?

The wall time of ``softdtw(x, y).sum().backward()`` (B = 32, D = 64, N = M given, float32,
gamma 1, CUDA backend), fused and unfused, with the library's CUDA graphs on and off, and of a
forward without gradients: the median of ``--steps`` CUDA-event timings (each synchronised
first) after a warm-up.  Unlike :mod:`~experiments.probes.kernels` (GPU time per kernel) this
counts the host's share, so ``experiments/ab.sh`` with ``AB_PROBE=step AB_GREP=^B=`` compares
two versions' launch paths.  It uses only ``sdtw.softdtw`` and ``sdtw.cuda.set_graphs``, which
older versions have too.

Usage::

    python -m experiments.probes.step [N ...] [--batch 32] [--dim 64] [--steps 30]
"""

from __future__ import annotations

import torch

from experiments import probes


def forward(x: torch.Tensor, y: torch.Tensor):
    """A forward without gradients on ``x``, ``y`` (CUDA backend, gamma 1)."""
    import sdtw

    def call() -> None:
        with torch.no_grad():
            sdtw.softdtw(x, y, gamma=1.0, backend="cuda")

    return call


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "step", (128, 512))
    p.add_argument("--dim", type=int, default=64, metavar="D", help="features (default: 64)")
    p.add_argument("--steps", type=int, default=30, help="timed steps (default: 30)")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("step")) is not None:
        return code
    import sdtw
    import sdtw.cuda

    B, D = args.batch, args.dim
    for N in args.sizes:
        x, y = probes.inputs(B, N, D)
        for graphs in (True, False):
            sdtw.cuda.set_graphs(graphs)
            tag = "on" if graphs else "off"
            for fused in (True, False):
                ms = probes.median_ms(probes.train_step(x, y, fused), args.steps)
                print(f"B={B} N={N} D={D} fused={fused} graphs={tag}: {ms:.3f} ms per step")
            ms = probes.median_ms(forward(x, y), args.steps)
            print(f"B={B} N={N} D={D} forward graphs={tag}: {ms:.3f} ms per call")
        del x, y
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
