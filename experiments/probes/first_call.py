"""How long does a fresh process wait for its first steps, and what does the kernel cache save?

In this process, the wall time (synchronised) of the first fused training step, the first
unfused one and the first fused forward without gradients (B = 32, N = M = 512, D = 64), each
compiling its kernels or loading them from numba-cuda's on-disk cache, then of a second fused
step, with the cache's hits and misses (``sdtw.cuda.cache_counts()``) before and after each.
Run it in a fresh process: twice in a row (the second run loads what the first compiled), and
with ``SDTW_KERNEL_CACHE=0`` (every kernel compiled), to see what the cache saves.

Usage::

    python -m experiments.probes.first_call [N] [--dim 64]
"""

from __future__ import annotations

import functools
import time

import torch

from experiments import probes


def forward(x: torch.Tensor, y: torch.Tensor, fused: bool) -> None:
    """A forward without gradients (CUDA backend, gamma 1)."""
    import sdtw

    with torch.no_grad():
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused)


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "first_call", (512,))
    p.add_argument("--dim", type=int, default=64, metavar="D", help="features (default: 64)")
    args = p.parse_args(argv)
    if len(args.sizes) != 1:
        p.error("one N: only the first size's steps are a process's first")
    if (code := probes.no_gpu("first_call")) is not None:
        return code
    import sdtw.cuda

    B, D = args.batch, args.dim
    config = sdtw.cuda.config.CONFIG
    print(
        f"on-disk kernel cache setting {config.kernel_cache} (SDTW_KERNEL_CACHE), line "
        f"information {config.lineinfo} (SDTW_LINEINFO=1 turns the cache off); cache hits, "
        f"misses before the first step: {sdtw.cuda.cache_counts()}",
        flush=True,
    )
    (N,) = args.sizes
    x, y = probes.inputs(B, N, D)
    torch.cuda.synchronize()
    steps = [
        ("first fused training step", probes.train_step(x, y, True)),
        ("first unfused training step", probes.train_step(x, y, False)),
        ("first fused forward without gradients", functools.partial(forward, x, y, True)),
        ("second fused training step", probes.train_step(x, y, True)),
    ]
    for label, step in steps:
        before = sdtw.cuda.cache_counts()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        print(
            f"B={B} N={N} D={D} {label}: {seconds:.3f} s (cache hits, misses "
            f"{before} -> {sdtw.cuda.cache_counts()})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
