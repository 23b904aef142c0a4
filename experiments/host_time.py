"""Host time per call of the CPU backend: what the front door, the planner and the launchers
cost a small call, side by side for two versions of sdtw.

Calls (float32 inputs, gamma 1, ``backend="cpu"``): forward + backward of ``loss.sum()`` at
B = 1, N = M = 16, D = 2 and at B = 32, N = M = 128, D = 8, and a forward without gradients
at B = 1, N = M = 16, D = 2.  Each is the median of ``--calls`` wall-clock timings after a
warm-up (the kernels compiled or loaded from Numba's cache first).

``--ab OLD_TREE`` runs this script in fresh processes, alternating the other tree's
``sdtw`` package (A) with this tree's (B), ``--rounds`` times each, so that both see the same
machine; it prints each call's medians per process, the ratio B / A of their medians, and the
spread of each side (max / min over its processes): a ratio inside the spread is not a
difference.  ``OLD_TREE``: a folder holding the other version's ``sdtw/`` (for example
``git worktree add /tmp/base <commit>``).

Usage::

    python -m experiments.host_time [--calls 400]
    python -m experiments.host_time --ab OLD_TREE [--rounds 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CALLS = {
    "fwd+bwd B=1 N=16 D=2": (1, 16, 2, True),
    "fwd+bwd B=32 N=128 D=8": (32, 128, 8, True),
    "fwd B=1 N=16 D=2": (1, 16, 2, False),
}


def measure(calls: int) -> dict[str, float]:
    """Median microseconds per call of each of :data:`CALLS`, in this process."""
    import torch

    import sdtw

    torch.manual_seed(0)
    out = {}
    for name, (B, N, D, grad) in CALLS.items():
        x = torch.randn(B, N, D).requires_grad_(grad)
        y = torch.randn(B, N, D)

        def call(x=x, y=y, grad=grad) -> None:
            if grad:
                sdtw.softdtw(x, y, backend="cpu").sum().backward()
                x.grad = None
            else:
                with torch.no_grad():
                    sdtw.softdtw(x, y, backend="cpu")

        n = calls if B == 1 else max(calls // 10, 20)
        for _ in range(max(n // 10, 5)):  # (compile or load the kernels; warm the caches)
            call()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        out[name] = 1e6 * statistics.median(times)
    return out


def _child(tree: Path, calls: int) -> dict[str, float]:
    # (this tree's harness first, then the tree's sdtw ahead of any installed one)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]);"
        "from experiments.host_time import measure; sys.path.insert(0, sys.argv[1]);"
        "import sdtw; print(sdtw.__file__); print(json.dumps(measure(int(sys.argv[3]))))"
    )
    here = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code, str(tree), str(here), str(calls)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    where, result = done.stdout.strip().splitlines()[-2:]
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the process for {tree} imported sdtw from {where}")
    return json.loads(result)


def ab(old: Path, rounds: int, calls: int) -> str:
    """The A/B table (A: ``old``'s sdtw, B: this tree's), as text."""
    here = Path(__file__).resolve().parent.parent
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(rounds):
        for side, tree in (("A", old), ("B", here)):
            runs[side].append(_child(tree, calls))
    lines = ["call | A median us (per process) | B median us (per process) | B / A | spread A, B"]
    for name in CALLS:
        a = [r[name] for r in runs["A"]]
        b = [r[name] for r in runs["B"]]
        ma, mb = statistics.median(a), statistics.median(b)
        fa = " ".join(f"{v:.0f}" for v in a)
        fb = " ".join(f"{v:.0f}" for v in b)
        spread = f"{max(a) / min(a):.2f}, {max(b) / min(b):.2f}"
        lines.append(f"{name} | {ma:.0f} ({fa}) | {mb:.0f} ({fb}) | {mb / ma:.3f} | {spread}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.host_time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--ab", type=Path, metavar="OLD_TREE", help="compare with this tree's sdtw")
    p.add_argument("--rounds", type=int, default=4, help="processes per side (default: 4)")
    p.add_argument("--calls", type=int, default=400, help="timed calls (default: 400)")
    p.add_argument("--out", type=Path, help="also write the table here, with provenance")
    args = p.parse_args(argv)
    if args.ab is not None and not (args.ab / "sdtw" / "__init__.py").is_file():
        p.error(f"--ab {args.ab}: no sdtw/ package there")
    if args.ab is None:
        text = "\n".join(f"{k}: {v:.1f} us" for k, v in measure(args.calls).items())
    else:
        text = ab(args.ab, args.rounds, args.calls)
    print(text)
    if args.out is not None:
        from experiments.provenance import provenance

        prov = provenance()
        head = ", ".join(f"{k}={prov[k]}" for k in ("cpu", "torch", "numba", "git_sha", "date_utc")
                         if k in prov)  # fmt: skip
        args.out.write_text(f"# {head}\n# A = {args.ab}\n{text}\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
