"""Small fused and unfused steps, and fused forwards without gradients, for compute-sanitizer
(memcheck, racecheck, synccheck): every kernel (park, the forward modes, backward) with one
warp per band and with the mover warps (:func:`sdtw.cuda.policy.forward_mover`: mode ``hilo``,
the fused float32 forward with gradients; :func:`sdtw.cuda.policy.backward_mover`: the
backward, both dtypes); with the movers also mode ``tiled`` with gradients
(``overrides(tiled=True)``; without gradients the rule takes it on a GPU) and the gradients wrt
x and y from the backward's sweep (``overrides(sweep_grads=True)``, its gradient warp: float32,
``D <= 16``).  Each case forces its variants with :func:`sdtw.cuda.config.overrides`.

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
    """One step: the variants forced (``two``: the mover warps; ``tiled``: mode tiled with
    gradients too; ``sweep``: the gradients from the backward's sweep), then the softdtw
    options."""

    two: bool
    fused: bool
    D: int
    dtype: torch.dtype
    tiled: bool = False
    sweep: bool = False
    lengths: bool = False
    checkpoint: bool = False
    measure: str = "softdtw"

    def label(self) -> str:
        kind = "fused" if self.fused else "unfused"
        dt = str(self.dtype).removeprefix("torch.")
        extra = ", tiled forced" if self.tiled else ""
        extra += ", gradients in the sweep" if self.sweep else ""
        extra += ", per-pair lengths" if self.lengths else ""
        extra += ", checkpointed" if self.checkpoint else ""
        if self.measure != "softdtw":
            return f"{self.measure}, D={self.D}, {dt}{extra}"
        return f"{'movers' if self.two else 'one warp'}, {kind}, D={self.D}, {dt}{extra}"

    def forced(self) -> dict:
        """The :func:`sdtw.cuda.config.overrides` of this case.  One warp: every DP kernel
        without its mover, so the fused float32 forward without gradients takes mode
        ``fused`` (mode ``tiled`` always has one).  The gradients come from E unless the case
        is a sweep case (a GPU's rule would take the sweep for float32 ``D <= 16``)."""
        if not self.two:
            return dict(mover=False, backward_mover=False, tiled=False, sweep_grads=False)
        return dict(
            mover=True,
            backward_mover=True,
            tiled=True if self.tiled else None,
            sweep_grads=self.sweep,
        )


def cases(only_mover: bool = False) -> list[Case]:
    """Every case, in the order the whole run takes them: fused float32 (the park and the hilo
    forward, and without gradients mode fused or tiled; D = 20: a full pass of the distance
    warp and a tail), unfused float32, fused float64 (the park and the split forward; D = 20:
    two passes); with the movers also mode tiled with gradients, then the in-sweep gradients."""
    shapes = [(True, 5, torch.float32), (False, 5, torch.float32)]
    shapes += [(True, 20, torch.float64), (True, 20, torch.float32)]
    out = [Case(two, *s) for two in (False, True) for s in shapes if two or not only_mover]
    out.append(Case(True, True, 20, torch.float32, tiled=True))
    # the gradient warp's variants by feature tiles (sdtw.cuda.kernels.geometry.sweep_tiles:
    # D = 5, 8 one tile, D = 12, 16 two), and g_y's paired reductions on whole chunks (D a
    # multiple of 8: D = 8, 16; M = 45 > 32), fused and unfused
    out += [
        Case(True, fused, D, torch.float32, sweep=True)
        for fused, D in ((True, 5), (False, 5), (True, 8), (True, 12), (False, 16))
    ]
    # the per-pair lengths kernels (fused, unfused, float64) and the checkpointed mode's
    # recompute kernels, alone and with lengths, each with one warp and with the movers
    for two in (False, True) if not only_mover else (True,):
        out += [
            Case(two, True, 5, torch.float32, lengths=True),
            Case(two, False, 5, torch.float32, lengths=True),
            Case(two, True, 20, torch.float64, lengths=True),
            Case(two, True, 20, torch.float32, checkpoint=True),
            Case(two, True, 5, torch.float64, checkpoint=True),
            Case(two, True, 5, torch.float32, lengths=True, checkpoint=True),
        ]
    # the other recurrences' kernels: exact DTW (gamma = 0) and Soft-MSM, with and without
    # lengths (last, so that the soft-DTW cases keep their numbers)
    if not only_mover:
        out += [
            Case(False, False, D, dt, lengths=lengths, measure=measure)
            for measure, D in (("dtw", 5), ("softmsm", 3))
            for dt, lengths in ((torch.float32, False), (torch.float64, True))
        ]
    return out


def run(case: Case) -> None:
    """A step with gradients and a forward without them, on fresh inputs (B = 2, N = 70,
    M = 45, band 30, gamma 0.1; lengths (70, 33) and (45, 20) in the lengths cases), under the
    case's overrides."""
    import sdtw
    from sdtw.cuda.config import overrides

    with overrides(**case.forced()):
        x = torch.randn(2, 70, case.D, device="cuda", dtype=case.dtype, requires_grad=True)
        y = torch.randn(2, 45, case.D, device="cuda", dtype=case.dtype, requires_grad=True)
        kw = dict(gamma=0.1, fused=case.fused, bandwidth=30, backend="cuda")
        if case.lengths:
            kw.update(x_lengths=[70, 33], y_lengths=[45, 20])
        if case.checkpoint:
            kw.update(memory="checkpoint")
        fn = sdtw.softdtw
        if case.measure == "dtw":
            kw.update(gamma=0.0)
        elif case.measure == "softmsm":
            del kw["fused"]
            fn = sdtw.soft_msm
        fn(x, y, **kw).sum().backward()
        with torch.no_grad():
            fn(x, y, **kw)


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
