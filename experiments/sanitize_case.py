"""Small fused and unfused steps, and fused forwards without gradients, for compute-sanitizer
(memcheck, racecheck, synccheck): every kernel (park, the five forward modes, backward), in
both the *quiet* and the *busy* variant (``sdtw.cuda._launch.busy``), the forward and the
backward with and without their mover warps (``sdtw.cuda._launch.mover``,
``backward_mover``); with the movers, the fused float32 forward with gradients from parked
distances (mode ``hilo``, the default) and with its distance warp (``FORCE_TILED``, mode
``tiled``: without gradients it takes that mode with the movers or without); and with the
gradients wrt x and y from the backward's sweep (``FORCE_SWEEP_GRADS``, its gradient warp).

``compute-sanitizer --tool memcheck python3 -m experiments.sanitize_case [mover] [--case K]``

``mover``: only the mover variants; ``--case K``: only case ``K`` of :func:`cases` (synccheck
ends the process at the first kernel it flags, so ``experiments/gpu_run.sh`` runs it one case
per process); ``--list``: the cases, one per line, without running them (no GPU needed).
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

import torch


class Case(NamedTuple):
    """One step: the launch variants forced (``busy``: the busy kernels; ``two``: the mover
    warps), then the softdtw options."""

    busy: bool
    two: bool
    fused: bool
    D: int
    dtype: torch.dtype
    tiled: bool  # FORCE_TILED: mode tiled with gradients too
    sweep: bool = False  # FORCE_SWEEP_GRADS: the gradients from the backward's sweep

    def label(self) -> str:
        kind = "fused" if self.fused else "unfused"
        dt = str(self.dtype).removeprefix("torch.")
        extra = ", tiled forced" if self.tiled else ""
        extra += ", gradients in the sweep" if self.sweep else ""
        return (
            f"{'busy' if self.busy else 'quiet'}, {'movers' if self.two else 'one warp'}, "
            f"{kind}, D={self.D}, {dt}{extra}"
        )


def cases(only_mover: bool = False) -> list[Case]:
    """Every case, in the order the whole run takes them: fused float32 (the park and the hilo
    forward, and without gradients mode tiled; D = 20: a full pass of its distance warp and a
    tail), unfused float32, fused float64 (the park and the split forward; D = 20: two
    passes); with the movers also mode tiled with gradients (``FORCE_TILED``)."""
    out = []
    for busy, two in ((False, False), (True, False), (False, True), (True, True)):
        if only_mover and not two:
            continue
        shapes = [(True, 5, torch.float32, False), (False, 5, torch.float32, False)]
        shapes += [(True, 20, torch.float64, False), (True, 20, torch.float32, False)]
        if two:
            shapes.append((True, 20, torch.float32, True))
        out += [Case(busy, two, *s) for s in shapes]
    # the gradients from the backward's sweep (its gradient warp, forced), last so that the
    # other cases keep their numbers; D = 20, 5, 12, 44: each of its variants by feature
    # tiles (sdtw.cuda._kernels.sweep_tiles: 4, 1, 2, 8), 16-byte copies and 4-byte ones;
    # D = 16, 64: D a multiple of 8, g_y's paired reductions (gy_out_full) on whole chunks
    out += [
        Case(busy, True, fused, D, torch.float32, False, True)
        for busy, fused, D in (
            (False, True, 20),
            (True, False, 20),
            (True, True, 5),
            (False, True, 12),
            (True, True, 44),
            (False, True, 16),
            (True, False, 64),
        )
    ]
    return out


def run(case: Case) -> None:
    """A step with gradients and a forward without them, on fresh inputs (B = 2, N = 70,
    M = 45, band 30, gamma 0.1)."""
    import sdtw
    from sdtw.cuda import _launch

    _launch.FORCE_BUSY = case.busy
    _launch.FORCE_MOVER = _launch.FORCE_BACKWARD_MOVER = case.two
    _launch.FORCE_TILED = True if case.tiled else None
    _launch.FORCE_SWEEP_GRADS = True if case.sweep else None
    try:
        x = torch.randn(2, 70, case.D, device="cuda", dtype=case.dtype, requires_grad=True)
        y = torch.randn(2, 45, case.D, device="cuda", dtype=case.dtype, requires_grad=True)
        loss = sdtw.softdtw(x, y, gamma=0.1, fused=case.fused, bandwidth=30, backend="cuda")
        loss.sum().backward()
        with torch.no_grad():
            sdtw.softdtw(x, y, gamma=0.1, fused=case.fused, bandwidth=30, backend="cuda")
    finally:
        _launch.FORCE_BUSY = _launch.FORCE_MOVER = _launch.FORCE_BACKWARD_MOVER = None
        _launch.FORCE_TILED = _launch.FORCE_SWEEP_GRADS = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mover", nargs="?", choices=["mover"], help="only the mover variants")
    parser.add_argument("--case", type=int, help="run only this case (see --list)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args(argv)
    todo = cases(only_mover=args.mover == "mover")
    if args.list:
        for k, case in enumerate(todo):
            print(f"{k}: {case.label()}")
        return
    if args.case is not None:
        if not 0 <= args.case < len(todo):
            parser.error(f"--case {args.case}: there are {len(todo)} cases (0 .. {len(todo) - 1})")
        todo = [todo[args.case]]
    for case in todo:
        run(case)
        print(f"case {case.label()}: ok", flush=True)
    torch.cuda.synchronize()
    print("sanitizer case ok")


if __name__ == "__main__":
    main()
