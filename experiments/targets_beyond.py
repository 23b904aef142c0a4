"""The targets of the capabilities beyond the paper, measured in one short GPU run: variable
lengths, checkpointed memory, and the compiled / autocast training step.

    python -m experiments.targets_beyond --out FILE.csv [--part lengths memory compile]
                                         [--quick]

Each point: correctness first (against the float64 result where it fits, or the other mode),
then the median of several timed steps (CUDA events; warm-up steps first) and the step's peak
memory (``max_memory_allocated`` above what was allocated before it).  Rows are appended to
``--out`` one at a time (long format, with the GPU, versions, commit and date), so a run cut
short keeps what it measured.  ``--quick`` shrinks every size (the CPU smoke test, under the
simulator).

Targets (forward + backward, float32, D = 64):

* lengths: a padded batch never slower than the same batch at full length; B = 512,
  N = M = 512, lengths uniform in [128, 512]: at most 0.6x the full-length step;
* memory: B = 32, N = M = 2048 checkpointed at most 128 MiB and 1.4x the full mode's time;
  B = 1, N = M = 65536 at most 0.5 s and 1 GiB; B = 1, N = M = 262144 runs;
* compile: a small model's training step compiled against eager, and under bf16 autocast
  against float32 (time and the loss's and gradient's difference).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import torch

import sdtw
from experiments.provenance import provenance
from experiments.timing import time_ms

FIELDS = ["part", "case", "B", "N", "M", "D", "metric", "value", "note"]


class Writer:
    """Rows appended one at a time (flushed), each with the run's provenance."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prov = provenance()
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "a", newline="")
        self.w = csv.DictWriter(self.f, fieldnames=FIELDS + sorted(self.prov))
        if new:
            self.w.writeheader()

    def row(self, part, case, B, N, M, D, metric, value, note="") -> None:
        self.w.writerow(
            dict(
                part=part,
                case=case,
                B=B,
                N=N,
                M=M,
                D=D,
                metric=metric,
                value=value,
                note=note,
                **self.prov,
            )
        )
        self.f.flush()
        print(f"{part:8s} {case:28s} B={B:<4} N={N:<7} {metric:10s} {value}", flush=True)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(step, device: str, reps: int = 5, warm: int = 2) -> tuple[float, float]:
    """Median ms of ``reps`` steps after ``warm`` warm-up steps, and the peak MiB of one step
    above what was allocated before it."""
    for _ in range(warm):
        step()
    _sync(device)
    peak = float("nan")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(time_ms(step, device) for _ in range(reps)), peak


def _loss_step(x, y, **kw):
    def step():
        xr = x.detach().requires_grad_()
        sdtw.softdtw(xr, y, **kw).sum().backward()
        return xr.grad

    return step


def part_lengths(w: Writer, device: str, quick: bool) -> None:
    g = torch.Generator(device="cpu").manual_seed(0)
    cases = [(8, 40, 4)] if quick else [(512, 512, 64), (32, 2048, 64), (32, 512, 64)]
    for B, N, D in cases:
        x = torch.randn(B, N, D, generator=g).to(device)
        y = torch.randn(B, N, D, generator=g).to(device)
        lo = N // 4
        xl = torch.randint(lo, N + 1, (B,), generator=g)
        yl = torch.randint(lo, N + 1, (B,), generator=g)
        # correctness: the padded batch with lengths against a loop over the unpadded pairs
        with torch.no_grad():
            got = sdtw.softdtw(x, y, x_lengths=xl, y_lengths=yl)
            k = min(B, 8)
            want = torch.stack(
                [sdtw.softdtw(x[b, : xl[b]].double(), y[b, : yl[b]].double()) for b in range(k)]
            )
        err = float(((got[:k].double() - want).abs() / want.abs().clamp_min(1e-12)).max())
        w.row("lengths", "padded-vs-unpadded-pairs", B, N, N, D, "max_rel_err", f"{err:.2e}")
        case = f"lengths U[{lo},{N}]"
        ms_l, mib_l = timed(_loss_step(x, y, x_lengths=xl, y_lengths=yl), device)
        ms_f, mib_f = timed(_loss_step(x, y), device)
        w.row("lengths", case, B, N, N, D, "ms", f"{ms_l:.3f}", f"peak {mib_l:.1f} MiB")
        w.row("lengths", "full length", B, N, N, D, "ms", f"{ms_f:.3f}", f"peak {mib_f:.1f} MiB")
        w.row("lengths", case, B, N, N, D, "ratio", f"{ms_l / ms_f:.3f}", "padded / full")


def part_memory(w: Writer, device: str, quick: bool) -> None:
    g = torch.Generator(device="cpu").manual_seed(1)
    if quick:
        cases = [(2, 70, 4, ("full", "checkpoint"))]
    else:
        cases = [
            (32, 2048, 64, ("full", "checkpoint")),
            (1, 65536, 64, ("full", "checkpoint")),
            (1, 262144, 64, ("checkpoint",)),
        ]
    for B, N, D, modes in cases:
        x = torch.randn(B, N, D, generator=g).to(device)
        y = torch.randn(B, N, D, generator=g).to(device)
        vals, times = {}, {}
        for mode in modes:
            xr = x.detach().requires_grad_()
            v = sdtw.softdtw(xr, y, memory=mode)
            v.sum().backward()
            vals[mode] = (v.detach().double().cpu(), xr.grad.double().cpu())
            del xr, v
            # (the long ones: the correctness step above was the warm-up; one timed step)
            reps, warm = (5, 1) if N <= 4096 else (1, 0)
            ms, mib = timed(_loss_step(x, y, memory=mode), device, reps=reps, warm=warm)
            times[mode] = ms
            w.row("memory", mode, B, N, N, D, "ms", f"{ms:.3f}", f"peak {mib:.1f} MiB")
            w.row("memory", mode, B, N, N, D, "peak_MiB", f"{mib:.1f}")
            if device == "cuda":
                torch.cuda.empty_cache()
        if len(vals) == 2:
            (v0, g0), (v1, g1) = vals["full"], vals["checkpoint"]
            ev = float(((v1 - v0).abs() / v0.abs()).max())
            eg = float((g1 - g0).norm() / g0.norm())
            w.row("memory", "checkpoint-vs-full", B, N, N, D, "value_rel_err", f"{ev:.2e}")
            w.row("memory", "checkpoint-vs-full", B, N, N, D, "grad_rel_err", f"{eg:.2e}")
            ratio = times["checkpoint"] / times["full"]
            w.row("memory", "checkpoint / full", B, N, N, D, "ratio", f"{ratio:.3f}")


def part_compile(w: Writer, device: str, quick: bool) -> None:
    B, N, D = (4, 40, 8) if quick else (32, 512, 64)
    g = torch.Generator(device="cpu").manual_seed(2)
    x = torch.randn(B, N, D, generator=g).to(device)
    y = torch.randn(B, N, D, generator=g).to(device)
    net = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.Tanh(), torch.nn.Linear(D, D))
    net = net.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)

    def make(model, autocast=False):
        def step():
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
                loss = sdtw.softdtw(model(x), y, gamma=0.1).mean()
            loss.backward()
            return loss

        return step

    compiled = torch.compile(net, fullgraph=True)
    grads = {}
    for name, step in (
        ("eager", make(net)),
        ("compiled", make(compiled)),
        ("eager-bf16-autocast", make(net, True)),
    ):
        loss = step()
        flat = torch.cat([p.grad.flatten() for p in net.parameters()])
        grads[name] = (float(loss.detach()), flat)
        ms, mib = timed(step, device)
        w.row("compile", name, B, N, N, D, "ms", f"{ms:.3f}", f"peak {mib:.1f} MiB")
    l0, g0 = grads["eager"]
    for name in ("compiled", "eager-bf16-autocast"):
        ln, gn = grads[name]
        w.row("compile", name, B, N, N, D, "loss_rel_err", f"{abs(ln - l0) / abs(l0):.2e}")
        eg = float((gn - g0).norm() / g0.norm())
        w.row("compile", name, B, N, N, D, "grad_rel_err", f"{eg:.2e}")


PARTS = {"lengths": part_lengths, "memory": part_memory, "compile": part_compile}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--part", nargs="+", choices=list(PARTS), default=list(PARTS))
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w = Writer(args.out)
    status = 0
    for part in args.part:
        try:
            PARTS[part](w, device, args.quick)
        except Exception as exc:  # one part's failure must not lose the others' rows
            status = 1
            w.row(part, "error", 0, 0, 0, 0, "error", type(exc).__name__, str(exc)[:300])
            print(f"{part}: {exc!r}", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
