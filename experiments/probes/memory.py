"""How much memory does a training step take, and where: in the forward or in the backward?

The peak memory of a fused and of an unfused training step (B = 32, N = M = 2048, D = 64
unless given), split into the forward call (``softdtw(x, y).sum()``: the library computes
the gradients there too), what the step holds between forward and backward, the backward's
peak and what is held after the step (the gradients).  Bytes above what was allocated before
the step, as the harness counts them; the second step of each kind is the one reported (the
allocator and cuBLAS warm).  The library's CUDA graphs are off (``sdtw.cuda.set_graphs``): a
replayed graph keeps its buffers in a pool of its own, allocated before the step.

Usage::

    python -m experiments.probes.memory [N ...] [--dim 64] [--float64]
"""

from __future__ import annotations

import torch

from experiments import probes

MIB = 2.0**20


def step_memory(x: torch.Tensor, y: torch.Tensor, fused: bool) -> dict[str, float]:
    """MiB above the memory allocated before one training step: the forward's peak, held
    after the forward, the backward's peak, held after the step."""
    import sdtw

    x.grad = y.grad = None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum()
    torch.cuda.synchronize()
    out = {"forward peak": torch.cuda.max_memory_allocated() - before}
    out["held after forward"] = torch.cuda.memory_allocated() - before
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    out["backward peak"] = torch.cuda.max_memory_allocated() - before
    del loss
    out["held after the step (gradients)"] = torch.cuda.memory_allocated() - before
    return {k: v / MIB for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "memory", (2048,))
    p.add_argument("--dim", type=int, default=64, metavar="D", help="features (default: 64)")
    p.add_argument("--float64", action="store_true", help="float64 inputs")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("memory")) is not None:
        return code
    import sdtw.cuda

    sdtw.cuda.set_graphs(False)
    dtype = torch.float64 if args.float64 else torch.float32
    B, D = args.batch, args.dim
    for N in args.sizes:
        x, y = probes.inputs(B, N, D, dtype)
        for fused in (True, False):
            step_memory(x, y, fused)
            mib = step_memory(x, y, fused)
            parts = ", ".join(f"{k} {v:.1f} MiB" for k, v in mib.items())
            print(f"B={B} N={N} D={D} {str(dtype)[6:]} fused={fused}: {parts}", flush=True)
        del x, y
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
