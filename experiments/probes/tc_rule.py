"""Below 512^2 cells, should the float32 gradients from E still take the Triton kernel?

The rule (:func:`sdtw.cuda.policy.tc_grads`) sends the float32 gradients wrt x and y from E
to the Triton tensor-core kernel from ``N M = 512^2`` cells on and to cuBLAS's float32 form
below; yet at B = 32, N = 128, D = 64 the one-launch Triton kernel alone measured 13.3 us
against 20.3 for cuBLAS.  This probe times whole training steps both ways: fused and unfused
steps captured in CUDA graphs (the harness's :func:`experiments.timing.graph_step`), one with
``overrides(tc_grads=True)`` and one with ``overrides(tc_grads=False)`` (both with
``sweep_grads=False``: the gradients from E at every D), replayed in turn ``--reps`` times in
one process (the first 5 of each dropped), at B = 32, N = M in 128, 256, 512 and D in
``--dims``.  Each line gives both medians, what the rule picks, and the relative difference
of the two forms' gradients wrt x.

Usage::

    python -m experiments.probes.tc_rule [N ...] [--dims 64,24] [--reps 40]
"""

from __future__ import annotations

import importlib.util
import statistics
import sys

import torch

from experiments import probes


def dims_list(text: str) -> list[int]:
    """``"64,24"`` -> ``[64, 24]``."""
    return [int(d) for d in text.split(",")]


def graph_steps(x: torch.Tensor, y: torch.Tensor, fused: bool) -> dict:
    """{tc: whole-step graph} for the Triton kernel (True) and cuBLAS (False), each warmed up
    and captured under its overrides (the kernel choice is made at capture)."""
    from experiments.impls import FORWARD_BACKWARD, IMPLS
    from experiments.timing import graph_step
    from sdtw.cuda.config import overrides

    impl = IMPLS["sdtw-fused-graph" if fused else "sdtw-unfused-graph"]
    steps = {}
    for tc in (True, False):
        with overrides(tc_grads=tc, sweep_grads=False):
            steps[tc] = graph_step(impl, x, y, 1.0, FORWARD_BACKWARD)
            steps[tc]()  # warm-up
            steps[tc]()  # capture, and a replay
    return steps


def alternated_us(steps: dict, reps: int, drop: int = 5) -> dict:
    """{tc: median us of the timed replays}, the two graphs timed in turn."""
    from experiments.timing import time_ms

    times: dict = {tc: [] for tc in steps}
    for rep in range(reps):
        for tc, step in steps.items():
            ms = time_ms(step, "cuda")
            if rep >= drop:
                times[tc].append(1e3 * ms)
    return {tc: statistics.median(t) for tc, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "tc_rule", (128, 256, 512))
    p.add_argument(
        "--dims", type=dims_list, default=[64], help="features D, comma-separated (default: 64)"
    )
    p.add_argument("--reps", type=int, default=40, help="replays of each graph (default: 40)")
    args = p.parse_args(argv)
    if args.reps <= 5:
        p.error("--reps must be above 5 (the first 5 of each are dropped)")
    if (code := probes.no_gpu("tc_rule")) is not None:
        return code
    import sdtw.cuda

    if not sdtw.cuda.config.CONFIG.tc_grads:
        print("SDTW_TC_GRADS=0 turns the Triton kernel off: unset it", file=sys.stderr)
        return 2
    if importlib.util.find_spec("triton") is None:
        print("Triton is not installed: both forms would be cuBLAS's", file=sys.stderr)
        return 2
    sdtw.cuda.set_graphs(False)
    B = args.batch
    for D in args.dims:
        for N in args.sizes:
            x, y = probes.inputs(B, N, D, grad=False)
            rule = "Triton" if sdtw.cuda.policy.tc_grads(B, N, N, D) else "cuBLAS"
            for fused in (True, False):
                steps = graph_steps(x, y, fused)
                us = alternated_us(steps, args.reps)
                gx = {tc: step()[1].double() for tc, step in steps.items()}
                diff = float((gx[True] - gx[False]).norm() / gx[False].norm())
                print(
                    f"B={B} N={N} D={D} fused={fused}: whole-step graph, gradients by the "
                    f"Triton kernel {us[True]:.1f} / cuBLAS {us[False]:.1f} us (rule: {rule}; "
                    f"g_x relative difference {diff:.1e})",
                    flush=True,
                )
                del steps
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
