"""Compile the CPU backend's Numba kernels ahead of their first call.

``python -m sdtw.warmup [--jobs K] [--quiet]`` (or :func:`warmup`) calls each CPU code path
once on tiny inputs: soft-DTW's scalar kernels and SIMD lanes (full and checkpointed memory,
the fused Euclidean and L1 costs, a cost tensor), exact DTW, all pairs (soft and exact), the
alignment, and Soft-MSM's scalar kernels and lanes with its alignment, each at a size that
runs the serial kernel and at one that runs the parallel one.  Numba compiles each kernel and
writes it to its on-disk cache (next to the package, or ``NUMBA_CACHE_DIR``); a later process
loads it in well under a second instead of compiling it for seconds (a minute or more for all
of them on a 2-core machine).  ``--jobs K`` splits the paths over K processes (a compile runs
on one core).  The CUDA kernels compile on the GPU when first launched; this does not touch
them.

Useful before timing anything, in a container image or a cluster job's setup, and before a
test run on several workers (``nox -s tests``), whose workers would otherwise compile the
same kernels side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable

import torch

__all__ = ["PATHS", "warmup"]


def _pair(B: int, N: int, M: int, D: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64, requires_grad=True)
    return x, y


def _step(fn: Callable, B: int, N: int, M: int, D: int = 1, **kw) -> None:
    """One forward and backward of ``fn(x, y, backend="cpu", **kw).sum()``."""
    x, y = _pair(B, N, M, D)
    fn(x, y, backend="cpu", **kw).sum().backward()


def _softdtw(B: int, N: int, **kw) -> None:
    import sdtw

    _step(sdtw.softdtw, B, N, N + 1, **kw)


def _from_cost(B: int, N: int) -> None:
    import sdtw

    cost = torch.rand(B, N, N + 1, dtype=torch.float64, requires_grad=True)
    sdtw.softdtw_from_cost(cost, backend="cpu").sum().backward()


def _soft_msm(B: int, N: int) -> None:
    import sdtw

    _step(sdtw.soft_msm, B, N, N + 1)


def _cdist(B: int, N: int, **kw) -> None:
    import sdtw

    x, y = _pair(B, N, N + 1)
    sdtw.cdist(x.detach(), y.detach(), backend="cpu", progress=False, **kw)


def _alignment(B: int, N: int, **kw) -> None:
    import sdtw

    x, y = _pair(B, N, N + 1)
    sdtw.alignment(x.detach(), y.detach(), backend="cpu", **kw)


def _values(B: int, N: int, **kw) -> None:
    """The value only (no gradient: the values-only kernels where there are some)."""
    import sdtw

    x, y = _pair(B, N, N + 1)
    with torch.no_grad():
        sdtw.softdtw(x, y, backend="cpu", **kw)


#: name -> the call that compiles it.  Sizes: B = 2 pairs of 5 (serial kernels) or 200 rows
#: (parallel); B = 16 and 32 take the SIMD lanes (one group: serial; two: parallel).  Paths
#: that share kernels are one entry (the Euclidean and L1 costs are a runtime code of the
#: scalar kernels; the alignment is the cost tensor's backward; exact all pairs is soft's
#: kernel at gamma = 0), so that no two jobs compile the same kernel.
PATHS: dict[str, Callable[[], None]] = {
    "softdtw scalar": lambda: (_softdtw(2, 5), _softdtw(2, 200, dist="euclidean")),
    "softdtw lanes": lambda: (_softdtw(16, 5), _softdtw(32, 40)),
    "softdtw checkpoint": lambda: (
        _softdtw(2, 5, memory="checkpoint"),
        _softdtw(2, 200, memory="checkpoint"),
    ),
    "softdtw cost tensor, alignment": lambda: (
        _from_cost(2, 5),
        _from_cost(2, 200),
        _alignment(2, 5),
    ),
    "exact dtw": lambda: (
        _softdtw(2, 5, gamma=0.0),
        _softdtw(2, 200, gamma=0.0),
        _values(2, 5, gamma=0.0),
        _values(2, 200, gamma=0.0),
    ),
    "all pairs": lambda: (_cdist(3, 5), _cdist(40, 30)),
    "soft-msm scalar": lambda: (_soft_msm(2, 5), _soft_msm(2, 200)),
    "soft-msm lanes, alignment": lambda: (
        _soft_msm(16, 5),
        _soft_msm(32, 40),
        _alignment(2, 5, measure="softmsm"),
    ),
}


def warmup(paths: list[str] | None = None, *, verbose: bool = False) -> dict[str, float]:
    """Run each of ``paths`` (names of :data:`PATHS`; None: all) once in this process, so that
    Numba compiles and caches its kernels; returns each one's seconds."""
    names = list(PATHS) if paths is None else list(paths)
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        raise ValueError(f"paths must be names of sdtw.warmup.PATHS {list(PATHS)}, got {unknown}")
    took = {}
    for name in names:
        t0 = time.perf_counter()
        PATHS[name]()
        took[name] = time.perf_counter() - t0
        if verbose:
            print(f"  {name}: {took[name]:.1f} s", flush=True)
    return took


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sdtw.warmup", description=__doc__.split("\n")[0])
    p.add_argument("--jobs", type=int, default=1, help="processes to split the paths over")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.add_argument("--paths", nargs="+", choices=list(PATHS), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    t0 = time.perf_counter()
    if args.paths is not None or args.jobs == 1:
        warmup(args.paths, verbose=not args.quiet)
    else:
        # (round robin over the paths in their order: the costliest are spread out)
        shares = [list(PATHS)[k :: args.jobs] for k in range(args.jobs)]
        quiet = ["--quiet"] if args.quiet else []
        cmd = [sys.executable, "-m", "sdtw.warmup", *quiet, "--paths"]
        procs = [subprocess.Popen([*cmd, *share]) for share in shares if share]
        codes = [proc.wait() for proc in procs]
        if any(codes):
            print(f"sdtw.warmup: a job failed (exit codes {codes})", file=sys.stderr)
            return 1
    if not args.quiet and args.paths is None:
        print(
            f"sdtw.warmup: the CPU kernels compiled and cached in {time.perf_counter() - t0:.0f} s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
