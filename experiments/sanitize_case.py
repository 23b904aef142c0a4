"""Small fused and unfused steps, and fused forwards without gradients, for compute-sanitizer
(memcheck, racecheck): every kernel (park, the five forward modes, backward), in both the
*quiet* and the *busy* variant (``sdtw.cuda._launch.busy``), the forward and the backward with
and without their mover warps (``sdtw.cuda._launch.mover``, ``backward_mover``); with the
movers, the fused float32 forward with gradients from parked distances (mode ``hilo``, the
default) and with its distance warp (``FORCE_TILED``, mode ``tiled``: without gradients it
takes that mode with the movers or without).

``compute-sanitizer --tool memcheck python3 -m experiments.sanitize_case [mover]``
(``mover``: only the mover variants).
"""

from __future__ import annotations

import sys

import torch

import sdtw
from sdtw.cuda import _launch


def main() -> None:
    only_mover = sys.argv[1:] == ["mover"]
    for force, two in ((False, False), (True, False), (False, True), (True, True)):
        if only_mover and not two:
            continue
        _launch.FORCE_BUSY, _launch.FORCE_MOVER, _launch.FORCE_BACKWARD_MOVER = force, two, two
        # fused float32: the park and the hilo forward, and without gradients mode tiled
        # (D = 20: a full pass of its distance warp and a tail); with the movers also mode
        # tiled with gradients (FORCE_TILED); float64: the park and the split forward
        # (D = 20: two passes)
        cases = [(True, 5, torch.float32, False), (False, 5, torch.float32, False)]
        cases += [(True, 20, torch.float64, False), (True, 20, torch.float32, False)]
        if two:
            cases.append((True, 20, torch.float32, True))
        for fused, D, dtype, forced in cases:
            _launch.FORCE_TILED = True if forced else None
            x = torch.randn(2, 70, D, device="cuda", dtype=dtype, requires_grad=True)
            y = torch.randn(2, 45, D, device="cuda", dtype=dtype, requires_grad=True)
            loss = sdtw.softdtw(x, y, gamma=0.1, fused=fused, bandwidth=30, backend="cuda")
            loss.sum().backward()
            with torch.no_grad():
                sdtw.softdtw(x, y, gamma=0.1, fused=fused, bandwidth=30, backend="cuda")
    _launch.FORCE_BUSY = _launch.FORCE_MOVER = _launch.FORCE_BACKWARD_MOVER = None
    _launch.FORCE_TILED = None
    torch.cuda.synchronize()
    print("sanitizer case ok")


if __name__ == "__main__":
    main()
