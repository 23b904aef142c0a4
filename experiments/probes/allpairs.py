"""All-pairs matrices and Soft-MSM on the GPU: cells per second, and Soft-MSM against soft-DTW.

For each N: ``sdtw.cdist(X, Y)`` on the CUDA backend (X, Y of ``--batch`` series each, D =
``--dim``, float32, gamma 1 for soft-DTW and 0 for exact DTW, forward only), its wall time
(median of ``--steps`` synchronised CUDA-event timings after a warm-up call) and
``B1 B2 N M / time`` in G cells/s; then a training step (``.sum().backward()``, B = 32, D = 1)
of ``sdtw.soft_msm`` against ``sdtw.softdtw`` at the same size, and their ratio.

Usage::

    python -m experiments.probes.allpairs [N ...] [--batch 2000] [--dim 1] [--steps 3]
        [--step-batch 32] [--skip-cdist] [--skip-msm]
"""

from __future__ import annotations

import torch

from experiments import probes


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "allpairs", (128, 512))
    p.set_defaults(batch=2000)
    p.add_argument("--dim", type=int, default=1, metavar="D", help="features (default: 1)")
    p.add_argument("--steps", type=int, default=3, help="timed calls (default: 3)")
    p.add_argument("--step-batch", type=int, default=32, help="Soft-MSM step's B (default 32)")
    p.add_argument("--skip-cdist", action="store_true", help="only the Soft-MSM steps")
    p.add_argument("--skip-msm", action="store_true", help="only the all-pairs matrices")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("allpairs")) is not None:
        return code
    import sdtw

    print(torch.cuda.get_device_name(), "torch", torch.__version__, flush=True)
    for N in args.sizes:
        if not args.skip_cdist:
            X, Y = probes.inputs(args.batch, N, args.dim, grad=False)
            cells = args.batch * args.batch * N * N
            for name, gamma in (("soft-DTW", 1.0), ("exact DTW", 0.0)):

                def call(X=X, Y=Y, gamma=gamma):
                    with torch.no_grad():
                        sdtw.cdist(X, Y, gamma=gamma, backend="cuda", progress=False)

                ms = probes.median_ms(call, args.steps)
                print(
                    f"B1=B2={args.batch} N=M={N} D={args.dim} cdist {name}: {ms:.1f} ms "
                    f"{cells / ms / 1e6:.1f} G cells/s",
                    flush=True,
                )
        if not args.skip_msm:
            x, y = probes.inputs(args.step_batch, N, 1)

            def msm_step(x=x, y=y):
                sdtw.soft_msm(x, y, gamma=1.0, backend="cuda").sum().backward()
                x.grad = y.grad = None

            def dtw_step(x=x, y=y):
                sdtw.softdtw(x, y, gamma=1.0, backend="cuda").sum().backward()
                x.grad = y.grad = None

            # alternate, so that both see the same clocks
            t_msm, t_dtw = [], []
            for _ in range(3):
                t_msm.append(probes.median_ms(msm_step, 10))
                t_dtw.append(probes.median_ms(dtw_step, 10))
            a, b = min(t_msm), min(t_dtw)
            print(
                f"B={args.step_batch} N=M={N} D=1 step: soft_msm {a:.3f} ms, softdtw {b:.3f} ms, "
                f"ratio {a / b:.2f} (rounds msm {' '.join(f'{t:.3f}' for t in t_msm)}, "
                f"dtw {' '.join(f'{t:.3f}' for t in t_dtw)})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
