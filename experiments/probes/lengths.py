"""Where does a padded batch's step spend its time, against the same batch at full length?

For B = 32, N = M = 512, D = 64 (unless given), float32, fused: the median of synchronised
forward + backward steps at full length and as a padded batch (per-pair lengths uniform in
[N / 4, N], as CPU tensors and as CUDA tensors), with the library's graphs on and off; then
the PyTorch profiler's table of one padded and one full-length step (graphs off), CPU and CUDA
time per operator and kernel, so that the extra work of a padded batch shows by name.

Usage::

    python -m experiments.probes.lengths [N ...] [--batch 32] [--dim 64]
"""

from __future__ import annotations

import torch

from experiments import probes


def _step(x, y, **kw):
    import sdtw

    def step():
        xr = x.detach().requires_grad_()
        sdtw.softdtw(xr, y, backend="cuda", **kw).sum().backward()

    return step


def main(argv: list[str] | None = None) -> int:
    p = probes.parser(__doc__, "lengths", (512,))
    p.add_argument("--dim", type=int, default=64, metavar="D", help="features (default: 64)")
    args = p.parse_args(argv)
    if (code := probes.no_gpu("lengths")) is not None:
        return code
    for N in args.sizes:
        _probe(args.batch, N, args.dim)
    return 0


def _probe(B: int, N: int, D: int) -> None:
    import sdtw.cuda

    was = sdtw.cuda.graphs_enabled()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, N, D, generator=g).cuda()
    y = torch.randn(B, N, D, generator=g).cuda()
    xl = torch.randint(N // 4, N + 1, (B,), generator=g)
    yl = torch.randint(N // 4, N + 1, (B,), generator=g)
    cases = {
        "full length": {},
        "padded, CPU lengths": {"x_lengths": xl, "y_lengths": yl},
        "padded, CUDA lengths": {"x_lengths": xl.cuda(), "y_lengths": yl.cuda()},
    }
    for graphs in (True, False):
        sdtw.cuda.set_graphs(graphs)
        for name, kw in cases.items():
            ms = probes.median_ms(_step(x, y, **kw), 30)
            print(f"B={B} N={N} D={D} graphs={'on' if graphs else 'off'} {name}: {ms:.3f} ms")
    sdtw.cuda.set_graphs(False)
    from torch.profiler import ProfilerActivity, profile

    for name in ("full length", "padded, CPU lengths"):
        step = _step(x, y, **cases[name])
        step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        print(f"== profile, 5 steps, graphs off: {name}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    sdtw.cuda.set_graphs(was)


if __name__ == "__main__":
    raise SystemExit(main())
