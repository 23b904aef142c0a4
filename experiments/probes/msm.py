"""Where does a Soft-MSM CUDA training step's time go, against soft-DTW's?

For B pairs of N = M samples (D = 1, gamma = 1, c = 1, float32 inputs or ``--float64``): the
wall time of a forward-only call and of a forward + backward step (``soft_msm(x, y).sum()
.backward()``, synchronised; median of ``--repeats`` per round, ``--rounds`` rounds
alternating the variants) and torch.profiler's GPU time per kernel in a step, for Soft-MSM
by the rules (float32 inputs with gradients: on soft-DTW's band kernels,
``sdtw.cuda.msm_seam``), on its own kernels (``sdtw.cuda.config.overrides(msm_seam=False)``:
a task's rows as bands on blocks of their own where the tasks leave SMs idle, the forward
keeping its edge weights for the backward), with ``--all`` also those with ``R`` kept and
the weights recomputed in the backward (``overrides(msm_kept=False)``), as one block a task
(``overrides(msm_bands=1)``) and in bands of 32 and of 64 rows, and ``sdtw.softdtw`` (every
one with the library's CUDA graphs on, as by default).  The
difference between a step's wall time and its kernels' GPU time is host work that the GPU
waited for.

Usage::

    python -m experiments.probes.msm [N ...] [--batch 32] [--float64] [--rounds 3] [--all]
"""

from __future__ import annotations

import statistics

import torch

from experiments import probes
from experiments.probes.kernels import kernel_times


def _steps(B: int, N: int, dtype: torch.dtype) -> dict:
    import sdtw

    x, y = probes.inputs(B, N, 1, dtype, grad=False)

    def call(f, grad: bool):
        def run() -> None:
            if grad:
                a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
                f(a, b).sum().backward()
            else:
                f(x, y)

        return run

    def msm(a, b):
        return sdtw.soft_msm(a, b, c=1.0, gamma=1.0, backend="cuda")

    def dtw(a, b):
        return sdtw.softdtw(a, b, gamma=1.0, backend="cuda")

    return {"msm": lambda grad: call(msm, grad), "dtw": lambda grad: call(dtw, grad)}


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "msm", (512,))
    p.add_argument("--float64", action="store_true", help="float64 inputs")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: 3)")
    p.add_argument("--repeats", type=int, default=7, help="timings per round (default: 7)")
    p.add_argument("--all", action="store_true", help="also the Soft-MSM kernels' variants")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("msm")) is not None:
        return code
    from sdtw.cuda.config import overrides

    dtype = torch.float64 if args.float64 else torch.float32
    print(f"{torch.cuda.get_device_name()}; B = {args.batch}, D = 1, {str(dtype)[6:]}")
    for N in args.sizes:
        variants = {"Soft-MSM, the rules": ("msm", {}),
                    "Soft-MSM, its own kernels": ("msm", {"msm_seam": False})}  # fmt: skip
        if args.all:
            variants["Soft-MSM, R kept (weights recomputed)"] = ("msm", {"msm_kept": False})
            variants["Soft-MSM, one block a task"] = ("msm", {"msm_bands": 1})
            for rows in (32, 64):  # (bands of one warp, of two)
                if N > rows:
                    variants[f"Soft-MSM, bands of {rows} rows"] = (
                        "msm", {"msm_bands": -(-N // rows)})  # fmt: skip
        variants["soft-DTW"] = ("dtw", {})
        steps = _steps(args.batch, N, dtype)
        for grad, label in ((False, "forward"), (True, "forward + backward")):
            times: dict = {k: [] for k in variants}
            for _ in range(args.rounds):
                for name, (which, forced) in variants.items():
                    with overrides(**forced):
                        times[name].append(probes.median_ms(steps[which](grad), args.repeats))
            for name, ts in times.items():
                rounds = " ".join(f"{t:.3f}" for t in ts)
                print(f"N = {N} {label}: {name}: {statistics.median(ts):.3f} ms ({rounds})")
        for name, (which, forced) in variants.items():
            with overrides(**forced):
                kt = kernel_times(steps[which](True), 5)
            total = sum(t for t, _ in kt)
            top = "; ".join(f"{t:.1f} us {k}" for t, k in kt[:4])
            print(f"N = {N} step kernels: {name}: {total / 1e3:.3f} ms GPU: {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
