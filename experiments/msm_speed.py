"""Soft-MSM against sdtw's soft-DTW at the same size, on one backend (the goal: within 2x).

``python -m experiments.msm_speed [--rounds R] [--processes K] [--sizes 128 256 512]
[--device cpu|cuda] [--dtype float64|float32] [--csv]``
times one forward + backward step (inputs requiring grad, ``.sum().backward()``, backend
``--device``, default the CPU in float64; on CUDA each step ends with a synchronisation;
gamma = 1, c = 1, random normal series) of :func:`sdtw.soft_msm` and of
:func:`sdtw.softdtw` for B = 32, D = 1, N = M in ``--sizes``, in one process, the two
alternating call by call (A B B A ...) for ``--rounds`` rounds after a warm-up step each, so
that both see the same load from the machine's other work.  Printed per size: each one's
median wall time with its spread (p20, p80), the median of the per-round ratios with their
p20 / p80, and the 1-minute load average before and after.  ``--processes K`` runs the rounds
in K fresh processes one after the other (this machine's speed varies between processes, not
only between calls) and adds each process's median ratio: the rows pool every round.
``--csv`` writes the rows (long format, metric ``time_ms`` per implementation and ``ratio``,
with the harness's provenance columns) to ``experiments/results/<machine>/msm-speed.csv``
(the CPU in float64; ``msm-speed-<device>-<dtype>.csv`` otherwise).  On a GPU:
``python -m experiments.msm_speed --device cuda --dtype float32 --processes 3 --csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

import sdtw
from experiments.provenance import committed_dir, provenance

__all__ = ["main", "measure"]

REPO = Path(__file__).resolve().parents[1]

B, D, GAMMA, C = 32, 1, 1.0, 1.0


def _steps(N: int, M: int, device: str = "cpu", dtype: str = "float64", seed: int = 0):
    """The two timed callables (Soft-MSM, soft-DTW), each one forward + backward step (on
    CUDA, synchronised at the end)."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    x = torch.randn(B, N, D, generator=g, dtype=dt).to(device)
    y = torch.randn(B, M, D, generator=g, dtype=dt).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def msm() -> None:
        a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
        sdtw.soft_msm(a, b, c=C, gamma=GAMMA, backend=device).sum().backward()
        sync()

    def dtw() -> None:
        a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
        sdtw.softdtw(a, b, gamma=GAMMA, backend=device).sum().backward()
        sync()

    return msm, dtw


def _time(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _spread(v: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80)."""
    q = statistics.quantiles(v, n=5) if len(v) > 1 else [v[0]] * 4
    return statistics.median(v), q[0], q[3]


def measure(N: int, rounds: int, device: str = "cpu", dtype: str = "float64") -> dict:
    """Per-round wall times (s) of both steps at N = M, alternating the order each round."""
    msm, dtw = _steps(N, N, device, dtype)
    msm(), dtw()  # (warm-up: compilation, caches)
    t_msm, t_dtw = [], []
    for r in range(rounds):
        if r % 2 == 0:
            t_msm.append(_time(msm))
            t_dtw.append(_time(dtw))
        else:
            t_dtw.append(_time(dtw))
            t_msm.append(_time(msm))
    ratios = [a / b for a, b in zip(t_msm, t_dtw, strict=True)]
    return {"softmsm": t_msm, "softdtw": t_dtw, "ratio": ratios}


def _in_processes(
    N: int, rounds: int, processes: int, device: str, dtype: str
) -> tuple[dict, list[float]]:
    """:func:`measure` in ``processes`` fresh processes, one after the other: every round's
    times pooled, and each process's median ratio."""
    pooled: dict = {"softmsm": [], "softdtw": [], "ratio": []}
    medians = []
    for _ in range(processes):
        cmd = [sys.executable, "-m", "experiments.msm_speed", "--child", str(N), str(rounds),
               "--device", device, "--dtype", dtype]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
        times = json.loads(out.strip().splitlines()[-1])
        for k in pooled:
            pooled[k] += times[k]
        medians.append(statistics.median(times["ratio"]))
    return pooled, medians


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.msm_speed", description=__doc__)
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds per size")
    p.add_argument("--processes", type=int, default=1, help="fresh processes per size")
    p.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512], help="N = M")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="the backend")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    p.add_argument("--csv", action="store_true", help="write the CSV (see above)")
    p.add_argument("--child", type=int, nargs=2, help=argparse.SUPPRESS)  # (N, rounds)
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU, and torch.cuda.is_available() is False here")
    if args.child:  # (one process of --processes: its times as JSON)
        print(json.dumps(measure(*args.child, args.device, args.dtype)))
        return 0
    if args.rounds < 1 or args.processes < 1:
        p.error(f"--rounds and --processes must be >= 1, got {args.rounds}, {args.processes}")
    rows = []
    print(f"B = {B}, D = {D}, gamma = {GAMMA}, c = {C}, {args.dtype} on {args.device}, "
          f"fwd + bwd, wall time; {torch.get_num_threads()} torch threads")  # fmt: skip
    for N in args.sizes:
        load0 = os.getloadavg()[0]
        if args.processes == 1:
            times, medians = measure(N, args.rounds, args.device, args.dtype), []
        else:
            times, medians = _in_processes(N, args.rounds, args.processes, args.device,
                                           args.dtype)  # fmt: skip
        load1 = os.getloadavg()[0]
        stats = {k: _spread(v) for k, v in times.items()}
        (mm, m20, m80), (dm, d20, d80), (rm, r20, r80) = (
            stats["softmsm"], stats["softdtw"], stats["ratio"]
        )  # fmt: skip
        print(
            f"N = M = {N:4d}: soft_msm {1e3 * mm:8.2f} ms [{1e3 * m20:.2f}, {1e3 * m80:.2f}]  "
            f"soft_dtw {1e3 * dm:8.2f} ms [{1e3 * d20:.2f}, {1e3 * d80:.2f}]  "
            f"ratio {rm:.2f} [{r20:.2f}, {r80:.2f}]  load {load0:.1f} -> {load1:.1f}"
        )
        if medians:
            print(f"  per process, median ratio: {', '.join(f'{r:.2f}' for r in medians)}")
        base = {"sweep": "msm-speed", "mode": "fwd+bwd", "B": B, "N": N, "M": N, "D": D,
                "gamma": GAMMA, "c": C, "dtype": args.dtype, "device": args.device,
                "repeats": args.rounds * args.processes, "processes": args.processes,
                "load_1min": f"{load0:.2f}/{load1:.2f}"}  # fmt: skip
        for impl, unit, metric in (("softmsm", 1e3, "time_ms"), ("softdtw", 1e3, "time_ms"),
                                   ("softmsm/softdtw", 1.0, "ratio")):  # fmt: skip
            med, p20, p80 = stats[impl.split("/")[0] if metric == "time_ms" else "ratio"]
            rows.append({**base, "impl": impl, "metric": metric, "median": unit * med,
                         "p20": unit * p20, "p80": unit * p80, **provenance()})  # fmt: skip
    if args.csv:
        default = (args.device, args.dtype) == ("cpu", "float64")
        name = "msm-speed.csv" if default else f"msm-speed-{args.device}-{args.dtype}.csv"
        path = committed_dir() / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
