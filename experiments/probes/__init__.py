"""GPU probes: one small module per open question about sdtw's CUDA backend.

Each probe is a diagnostic printout, not a benchmark (the benchmark numbers come from
``python -m experiments.run``), runs as ``python -m experiments.probes.<name> [N ...]
[options]`` on a machine with a CUDA GPU (without one it exits with status 2 and says so), and
uses sdtw's public names only; where it compares kernel variants it forces the tuning rules
with :func:`sdtw.cuda.config.overrides`.

* :mod:`~experiments.probes.allpairs` -- all-pairs matrices (:func:`sdtw.cdist`) in cells per
  second, soft-DTW and exact DTW, and a Soft-MSM training step against soft-DTW's;
* :mod:`~experiments.probes.kernels` -- each kernel's GPU time in a training step
  (torch.profiler), fused and unfused;
* :mod:`~experiments.probes.msm` -- a Soft-MSM training step's wall time and kernels' GPU time
  against soft-DTW's, with the rule's bands and as one block a task;
* :mod:`~experiments.probes.first_call` -- wall time of a fresh process's first steps, with
  the on-disk kernel cache's hits and misses;
* :mod:`~experiments.probes.tc_rule` -- the float32 gradients from E by the Triton kernel
  against cuBLAS's float32 form in whole-step CUDA-graph replays, at the sizes where the rule
  (:func:`sdtw.cuda.policy.tc_grads`) switches;
* :mod:`~experiments.probes.memory` -- a training step's peak memory, split into forward and
  backward;
* :mod:`~experiments.probes.lengths` -- a padded batch's step against the same batch at full
  length, library graphs on and off, and where the difference goes (torch.profiler);
* :mod:`~experiments.probes.step` -- an eager training step's wall time, host work included,
  graphs on and off (``experiments/ab.sh`` compares two versions' launch paths with it).

This module holds what they share: the command line, the GPU check, inputs and the timer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence

import torch

__all__ = ["inputs", "kernel_name", "median_ms", "no_gpu", "parser", "train_step"]


def parser(doc: str, name: str, sizes: Sequence[int]) -> argparse.ArgumentParser:
    """The command line of probe ``name``: its module docstring as the help, the lengths
    ``N`` (N = M; default ``sizes``) as positional arguments, and ``--batch``."""
    p = argparse.ArgumentParser(
        prog=f"python -m experiments.probes.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "sizes",
        nargs="*",
        type=int,
        default=list(sizes),
        metavar="N",
        help=f"sequence lengths N = M (default: {' '.join(map(str, sizes))})",
    )
    p.add_argument("--batch", type=int, default=32, metavar="B", help="pairs (default: 32)")
    return p


def no_gpu(name: str) -> int | None:
    """2 after a message on stderr where torch sees no CUDA GPU (None where it does)."""
    if torch.cuda.is_available():
        return None
    print(
        f"experiments.probes.{name} needs a CUDA GPU: torch.cuda.is_available() is False here",
        file=sys.stderr,
    )
    return 2


def inputs(
    B: int, N: int, D: int, dtype: torch.dtype = torch.float32, seed: int = 0, grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y (B, N, D) from a seeded randn on the GPU, leaves that require grad (``grad``)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=gen)
    y = torch.randn(B, N, D, device="cuda", dtype=dtype, generator=gen)
    return x.requires_grad_(grad), y.requires_grad_(grad)


def train_step(x: torch.Tensor, y: torch.Tensor, fused: bool) -> Callable[[], None]:
    """A training step on ``x``, ``y``: ``softdtw(x, y).sum().backward()`` (CUDA backend,
    gamma 1), the gradients dropped afterwards."""
    import sdtw

    def step() -> None:
        sdtw.softdtw(x, y, gamma=1.0, backend="cuda", fused=fused).sum().backward()
        x.grad = y.grad = None

    return step


def median_ms(fn: Callable[[], object], n: int = 10) -> float:
    """Median of ``n`` CUDA-event timings of ``fn`` (each synchronised first) after one
    warm-up call: the harness's timer (:func:`experiments.timing.time_ms`)."""
    from experiments.timing import time_ms

    fn()
    return statistics.median(time_ms(fn, "cuda") for _ in range(n))


def kernel_name(key: str, width: int = 80) -> str:
    """A kernel's name as torch.profiler reports it, shortened: a Numba kernel's ABI tags and
    argument types cut (``sdtw::cuda::kernels::forward::build::forward``), at most ``width``
    characters."""
    return key.split("[abi:")[0].replace("::_3clocals_3e", "")[:width]
