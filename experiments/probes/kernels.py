"""Where does a training step's GPU time go, kernel by kernel?

Each kernel's GPU time in a fused and in an unfused training step (``softdtw(x, y).sum()
.backward()``, B = 32, D = 64, N = M given, float32 inputs or ``--float64``): torch.profiler's
self device time per kernel, averaged over ``--steps`` steps after an untraced one, and their
total.  The library's CUDA graphs are off (``sdtw.cuda.set_graphs(False)``): replays of them
under the profiler measured every kernel 5-20% slower than the same kernels launched eagerly
(N = 512 and 1024), and their copies would join the list.  ``experiments/ab.sh`` runs this
probe under two versions of sdtw in turn (it uses only ``sdtw.softdtw`` and
``sdtw.cuda.set_graphs``, which older versions have too).

Usage::

    python -m experiments.probes.kernels [N ...] [--float64] [--steps 5] [--dim 64]
"""

from __future__ import annotations

import torch

from experiments import probes


def profiled(step, steps: int):
    """torch.profiler (GPU activity only) of ``steps`` calls of ``step`` after one untraced
    call."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return prof


def kernel_times(step, steps: int) -> list[tuple[float, str]]:
    """(us per step, kernel name) for each kernel of ``step``, the longest first."""
    prof = profiled(step, steps)
    rows = [e for e in prof.key_averages() if str(e.device_type).endswith("CUDA")]
    times = [(e.self_device_time_total / steps, probes.kernel_name(e.key)) for e in rows]
    return sorted((t for t in times if t[0] > 0), reverse=True)


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "kernels", (1024,))
    p.add_argument("--dim", type=int, default=64, metavar="D", help="features (default: 64)")
    p.add_argument("--float64", action="store_true", help="float64 inputs")
    p.add_argument("--steps", type=int, default=5, help="profiled steps (default: 5)")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("kernels")) is not None:
        return code
    import sdtw.cuda

    sdtw.cuda.set_graphs(False)
    dtype = torch.float64 if args.float64 else torch.float32
    tag = " float64" if args.float64 else ""
    B, D = args.batch, args.dim
    for N in args.sizes:
        x, y = probes.inputs(B, N, D, dtype)
        for fused in (True, False):
            head = f"B={B} N={N} D={D}{tag} fused={fused}:"
            times = kernel_times(probes.train_step(x, y, fused), args.steps)
            for us, name in times:
                print(f"{head} {us:8.1f} us per step  {name}", flush=True)
            total = sum(us for us, _ in times)
            print(f"{head} {total:8.1f} us per step  (all kernels)", flush=True)
        del x, y
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
