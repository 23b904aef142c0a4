"""CPU Soft-MSM against sdtw's CPU soft-DTW at the same size (issue 54's speed item: within 2x).

``python -m experiments.msm_speed [--rounds R] [--sizes 128 256 512] [--csv]`` times one
forward + backward step (float64 inputs requiring grad, ``.sum().backward()``, backend
``"cpu"``, gamma = 1, c = 1, random normal series) of :func:`sdtw.soft_msm` and of
:func:`sdtw.softdtw` for B = 32, D = 1, N = M in ``--sizes``, in one process, the two
alternating call by call (A B B A ...) for ``--rounds`` rounds after a warm-up step each, so
that both see the same load from the machine's other work.  Printed per size: each one's
median wall time with its spread (p20, p80), the median of the per-round ratios with their
p20 / p80, and the 1-minute load average before and after.  ``--csv`` writes the rows (long
format, metric ``time_ms`` per implementation and ``ratio``, with the harness's provenance
columns) to ``experiments/results/<machine>/msm-speed.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time

import torch

import sdtw
from experiments.provenance import committed_dir, provenance

__all__ = ["main", "measure"]

B, D, GAMMA, C = 32, 1, 1.0, 1.0


def _steps(N: int, M: int, seed: int = 0):
    """The two timed callables (Soft-MSM, soft-DTW), each one forward + backward step."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, N, D, generator=g, dtype=torch.float64)
    y = torch.randn(B, M, D, generator=g, dtype=torch.float64)

    def msm() -> None:
        a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
        sdtw.soft_msm(a, b, c=C, gamma=GAMMA, backend="cpu").sum().backward()

    def dtw() -> None:
        a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
        sdtw.softdtw(a, b, gamma=GAMMA, backend="cpu").sum().backward()

    return msm, dtw


def _time(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def _spread(v: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80)."""
    q = statistics.quantiles(v, n=5) if len(v) > 1 else [v[0]] * 4
    return statistics.median(v), q[0], q[3]


def measure(N: int, rounds: int) -> dict:
    """Per-round wall times (s) of both steps at N = M, alternating the order each round."""
    msm, dtw = _steps(N, N)
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.msm_speed", description=__doc__)
    p.add_argument("--rounds", type=int, default=15, help="alternating rounds per size")
    p.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512], help="N = M")
    p.add_argument("--csv", action="store_true", help="write msm-speed.csv (see above)")
    args = p.parse_args(argv)
    rows = []
    print(f"B = {B}, D = {D}, gamma = {GAMMA}, c = {C}, float64, fwd + bwd, wall time; "
          f"{torch.get_num_threads()} torch threads")  # fmt: skip
    for N in args.sizes:
        load0 = os.getloadavg()[0]
        times = measure(N, args.rounds)
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
        base = {"sweep": "msm-speed", "mode": "fwd+bwd", "B": B, "N": N, "M": N, "D": D,
                "gamma": GAMMA, "c": C, "dtype": "float64", "device": "cpu",
                "repeats": args.rounds, "load_1min": f"{load0:.2f}/{load1:.2f}"}  # fmt: skip
        for impl, unit, metric in (("softmsm", 1e3, "time_ms"), ("softdtw", 1e3, "time_ms"),
                                   ("softmsm/softdtw", 1.0, "ratio")):  # fmt: skip
            med, p20, p80 = stats[impl.split("/")[0] if metric == "time_ms" else "ratio"]
            rows.append({**base, "impl": impl, "metric": metric, "median": unit * med,
                         "p20": unit * p20, "p80": unit * p80, **provenance()})  # fmt: skip
    if args.csv:
        path = committed_dir() / "msm-speed.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
