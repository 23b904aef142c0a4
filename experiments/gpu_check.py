"""Quick GPU check of sdtw's CUDA kernels: accuracy vs float64 and paper-grid timings.

``python -m experiments.gpu_check --out DIR`` writes ``accuracy.csv`` and ``timing.csv`` (long
format, with provenance) and prints both tables.  Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import platform
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import torch

import sdtw
from sdtw.cuda import _launch


def provenance() -> dict[str, str]:
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "numba": numba.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "git_sha": (sha or "unknown") + ("-dirty" if dirty else ""),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
    }


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def accuracy(rows: list[dict], B=4, N=512, M=512, D=64) -> None:
    gen = torch.Generator().manual_seed(1234)
    for gamma in (1.0, 0.1, 0.01, 1e-3, 1e-4):
        x = torch.randn(B, N, D, generator=gen)
        y = torch.randn(B, M, D, generator=gen)
        go = torch.rand(B, generator=gen) + 0.5
        xr, yr = x.double().requires_grad_(), y.double().requires_grad_()
        vr = sdtw.softdtw(xr, yr, gamma=gamma, backend="cpu")
        gxr, gyr = torch.autograd.grad(vr, (xr, yr), go.double())
        for dtype in (torch.float32, torch.float64):
            for fused in (True, False):
                xc = x.to("cuda", dtype).requires_grad_()
                yc = y.to("cuda", dtype).requires_grad_()
                v = sdtw.softdtw(xc, yc, gamma=gamma, fused=fused, backend="cuda")
                gx, gy = torch.autograd.grad(v, (xc, yc), go.to("cuda", dtype))
                finite = bool(
                    torch.isfinite(v).all()
                    and torch.isfinite(gx).all()
                    and torch.isfinite(gy).all()
                )
                rows.append(
                    dict(
                        impl="sdtw-fused" if fused else "sdtw-unfused",
                        dtype=str(dtype)[6:],
                        B=B,
                        N=N,
                        M=M,
                        D=D,
                        gamma=gamma,
                        finite=finite,
                        err_value=rel(v, vr),
                        err_grad_x=rel(gx, gxr),
                        err_grad_y=rel(gy, gyr),
                    )
                )
                print(rows[-1], flush=True)
        # unfused from the same float32 cost: accuracy of the DP alone
        cost = sdtw.functional.pairwise_cost(x, y, "sqeuclidean")
        cr = cost.detach().double().requires_grad_()
        vr = sdtw.softdtw_from_cost(cr, gamma=gamma, backend="cpu")
        (er,) = torch.autograd.grad(vr, (cr,), go.double())
        cc = cost.detach().cuda().requires_grad_()
        v = sdtw.softdtw_from_cost(cc, gamma=gamma, backend="cuda")
        (e,) = torch.autograd.grad(v, (cc,), go.cuda())
        rows.append(
            dict(
                impl="sdtw-from-cost",
                dtype="float32",
                B=B,
                N=N,
                M=M,
                D=D,
                gamma=gamma,
                finite=bool(torch.isfinite(e).all()),
                err_value=rel(v, vr),
                err_grad_x=rel(e, er),
                err_grad_y=float("nan"),
            )
        )
        print(rows[-1], flush=True)


def odd_shapes(rows: list[dict]) -> None:
    gen = torch.Generator().manual_seed(99)
    for B, N, M, D, bw, gamma in [
        (3, 77, 1025, 5, None, 0.1),
        (2, 1, 300, 3, None, 1.0),
        (2, 513, 31, 7, 40, 0.01),
        (1, 1000, 1001, 2, 5, 1e-3),
        (5, 33, 65, 1, None, 1.0),
    ]:
        x = torch.randn(B, N, D, generator=gen)
        y = torch.randn(B, M, D, generator=gen)
        go = torch.randn(B, generator=gen)
        xr, yr = x.double().requires_grad_(), y.double().requires_grad_()
        vr = sdtw.softdtw(xr, yr, gamma=gamma, bandwidth=bw, backend="cpu", normalize=True)
        gxr, gyr = torch.autograd.grad(vr, (xr, yr), go.double())
        for fused in (True, False):
            xc, yc = x.cuda().requires_grad_(), y.cuda().requires_grad_()
            v = sdtw.softdtw(
                xc, yc, gamma=gamma, bandwidth=bw, fused=fused, backend="cuda", normalize=True
            )
            gx, gy = torch.autograd.grad(v, (xc, yc), go.cuda())
            rows.append(
                dict(
                    impl=("sdtw-fused" if fused else "sdtw-unfused") + "-normalized",
                    dtype="float32",
                    B=B,
                    N=N,
                    M=M,
                    D=D,
                    gamma=gamma,
                    finite=bool(torch.isfinite(gx).all()),
                    err_value=rel(v, vr),
                    err_grad_x=rel(gx, gxr),
                    err_grad_y=rel(gy, gyr),
                )
            )
            print(rows[-1], flush=True)


def time_step(fn, reps: int = 10) -> tuple[float, float, float]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    q = np.percentile(ts, [50, 20, 80])
    return float(q[0]), float(q[1]), float(q[2])


def timing(rows: list[dict], grid) -> None:
    for B, N, D in grid:
        for fused in (True, False):
            for mode in ("forward", "forward+backward"):
                torch.cuda.empty_cache()
                x = torch.randn(B, N, D, device="cuda", requires_grad=mode != "forward")
                y = torch.randn(B, N, D, device="cuda", requires_grad=mode != "forward")

                def step():
                    if mode == "forward":
                        with torch.no_grad():
                            sdtw.softdtw(x, y, gamma=1.0, fused=fused, backend="cuda")
                    else:
                        loss = sdtw.softdtw(x, y, gamma=1.0, fused=fused, backend="cuda").sum()
                        loss.backward()

                try:
                    med, p20, p80 = time_step(step)
                    torch.cuda.synchronize()
                    base = torch.cuda.memory_allocated()
                    torch.cuda.reset_peak_memory_stats()
                    l0 = dict(_launch.launch_counts)
                    step()
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base
                    launches = sum(_launch.launch_counts.values()) - sum(l0.values())
                    status = "ok"
                except Exception as exc:
                    med = p20 = p80 = float("nan")
                    peak, launches, status = -1, -1, f"error: {type(exc).__name__}: {exc}"[:200]
                x.grad = y.grad = None
                rows.append(
                    dict(
                        impl="sdtw-fused" if fused else "sdtw-unfused",
                        mode=mode,
                        B=B,
                        N=N,
                        M=N,
                        D=D,
                        gamma=1.0,
                        median_ms=med,
                        p20_ms=p20,
                        p80_ms=p80,
                        peak_mib=peak / 2**20,
                        launches=launches,
                        status=status,
                    )
                )
                print(rows[-1], flush=True)


def write(path: Path, rows: list[dict], prov: dict) -> None:
    if not rows:
        return
    keys = list(rows[0].keys()) + list(prov)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({**r, **prov})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-accuracy", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_check needs a CUDA GPU", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    print(prov, flush=True)
    acc: list[dict] = []
    if not args.skip_accuracy:
        accuracy(acc)
        odd_shapes(acc)
        write(args.out / "accuracy.csv", acc, prov)
    tim: list[dict] = []
    grid = [(B, N, D) for B in (16, 32) for N in (128, 512, 1024, 2048) for D in (1, 64)]
    grid = [(1, 1, 1), (1, 32, 1)] + grid + [(4, 8192, 64), (1, 16384, 64)]
    timing(tim, grid)
    write(args.out / "timing.csv", tim, prov)
    import pandas as pd

    df = pd.DataFrame(tim)
    print(
        df.pivot_table(index=["B", "N", "D"], columns=["impl", "mode"], values="median_ms")
        .round(3)
        .to_string()
    )
    print(
        df.pivot_table(index=["B", "N", "D"], columns=["impl", "mode"], values="peak_mib")
        .round(1)
        .to_string()
    )
    if acc:
        print(pd.DataFrame(acc).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
