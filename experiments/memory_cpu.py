"""Peak memory and time of the CPU backend's full and checkpointed modes against N (B = 1,
M = N, D = 2, float64, forward + backward), each point in a fresh process.

    python -m experiments.memory_cpu [--n 2000 5000 20000] [--modes full checkpoint]
                                     [--out FILE]

A point's peak is the process's peak resident memory during the step above its resident
memory before it (Linux: the high-water mark reset through ``/proc/self/clear_refs`` after a
warm-up step at a tiny size has compiled the kernels), beside the model's prediction
(:mod:`sdtw.memory`); the full mode is skipped where its model exceeds half the available
memory.  Prints one line per point and, with ``--out``, writes them with a provenance line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from pathlib import Path

_POINT = """
import gc, json, sys, time, torch, numba, sdtw
from sdtw import cpu_fused
from sdtw import memory as memory_model
N, mode = int(sys.argv[1]), sys.argv[2]
g = torch.Generator().manual_seed(0)
x = torch.randn(1, N, 2, generator=g, dtype=torch.float64, requires_grad=True)
y = torch.randn(1, N, 2, generator=g, dtype=torch.float64)
x0 = x[:, :50].detach().requires_grad_()
sdtw.softdtw(x0, y[:, :40], memory=mode, backend="cpu").sum().backward()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
gc.collect()
with open("/proc/self/clear_refs", "w") as f:  # forget the compilation's high-water mark
    f.write("5")
before = status("VmRSS:")
t = time.perf_counter()
v = sdtw.softdtw(x, y, memory=mode, backend="cpu")
forward = time.perf_counter() - t
v.sum().backward()
step = time.perf_counter() - t
peak = status("VmHWM:") - before
threads = numba.get_num_threads()
model = (memory_model.cpu_full_bytes(1, N, N, True) if mode == "full" else
         memory_model.cpu_checkpoint_bytes(1, N, N, cpu_fused.segment_rows(N, N), threads, True))
print(json.dumps(dict(N=N, mode=mode, forward_s=round(forward, 3), step_s=round(step, 3),
                      peak_MiB=round(peak / 2**20, 1), model_MiB=round(model / 2**20, 1),
                      value=float(v.detach()))))
"""


def main(argv: list[str] | None = None) -> int:
    from sdtw import memory as memory_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[2000, 5000, 20000])
    p.add_argument("--modes", nargs="+", default=["full", "checkpoint"])
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    lines = []
    for N in args.n:
        for mode in args.modes:
            free = memory_model.available_bytes() or 0
            if mode == "full" and memory_model.cpu_full_bytes(1, N, N, True) > free / 2:
                lines.append(
                    json.dumps(dict(N=N, mode=mode, skipped="model > half the free memory"))
                )
            else:
                res = subprocess.run(
                    [sys.executable, "-c", _POINT, str(N), mode],
                    capture_output=True,
                    text=True,
                )
                lines.append(
                    res.stdout.strip().splitlines()[-1]
                    if res.returncode == 0
                    else json.dumps(dict(N=N, mode=mode, failed=res.stderr[-300:]))
                )
            print(lines[-1], flush=True)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    import torch

    prov = (
        f"# {platform.machine()} {platform.processor() or 'cpu'}; torch {torch.__version__}; "
        f"commit {sha.stdout.strip()}; {datetime.date.today()}"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(prov + "\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
