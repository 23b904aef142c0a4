"""The kernels as a GPU would run them, checked without a GPU: offline PTX and sm_90 SASS
(``python -m experiments.sass``), in child processes (this one runs under the simulator)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# compiles every kernel variant with NVIDIA's compiler (the `sass` extra): about a minute of one
# core, run by nox -s slow, not by nox -s tests
pytestmark = pytest.mark.slow


def _run(*args: str, script: str | None = None) -> subprocess.CompletedProcess:
    """``python -m experiments.sass ARGS`` (or ``python -c SCRIPT ARGS``) without the
    simulator."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    cmd = ["-c", script] if script else ["-m", "experiments.sass"]
    return subprocess.run(
        [sys.executable, *cmd, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_sass_analysis_counts_loops() -> None:
    """``experiments.sass.analyse`` on a hand-written SASS fragment: opcodes counted, the
    body of a label a later branch returns to is a loop, a forward branch is not; and
    ``normalise`` keeps the code only, without addresses, symbol names or padding."""
    from experiments import sass

    text = """
//--------------------- .text._ZN4sdtw6kernelEv --------------------------
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_1:
        /*0010*/                   LDS R2, [R0] ;
        /*0020*/               @P0 DMMA.16x8x8 R8, R2, R4, R8 ;
        /*0030*/                   IADD3 R0, R0, 0x4, RZ ;
        /*0040*/               @P1 BRA `(.L_x_1) ;
        /*0050*/                   BRA `(.L_x_2) ;
.L_x_2:
        /*0060*/                   EXIT ;
//--------------------- .nv.global --------------------------
_ZN08NumbaEnv4sdtw3envE:
"""
    total, loops = sass.analyse(text)
    assert total == {"S2R": 1, "LDS": 1, "DMMA": 1, "IADD3": 1, "BRA": 2, "EXIT": 1}
    assert [(label, dict(body)) for label, body in loops] == [
        (".L_x_1", {"LDS": 1, "DMMA": 1, "IADD3": 1, "BRA": 1})
    ]
    code = sass.normalise(text)
    assert code[0] == "//--------------------- .text.SYM --------------------------"
    assert code[1] == "S2R R0, SR_TID.X ;" and code[-1] == "EXIT ;" and len(code) == 10
    moved = text.replace("/*0010*/", "/*0110*/").replace("_ZN4sdtw6kernelEv", "_ZN1aEv")
    assert sass.digest(moved) == sass.digest(text)
    assert sass.digest(text.replace("0x4", "0x8")) != sass.digest(text)


def test_production_kernels_sass_as_recorded() -> None:
    """Every kernel variant the tuning rules can choose (``production_specs``), compiled for
    sm_90 here, has the SASS recorded in ``tests/data/sass-sm90.json``: a change that changes
    what the GPU runs fails here, not on the GPU (re-record with ``python -m experiments.sass
    --record`` after a deliberate one, saying why in the commit).  Where this machine's
    toolchain differs from the recorded one, or ptxas or a disassembler is missing, the PTX of
    every variant must still compile (Numba's typing and NVVM: what the simulator never does);
    skips without NVVM."""
    res = _run("--check")
    if res.returncode == 2:
        res = _run("--compile-all")
        if res.returncode == 2:
            pytest.skip(res.stdout.strip()[:300])
        assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
        assert "FAIL" not in res.stdout and " kernel variants compiled" in res.stdout
        return
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    n = len(json.loads((REPO / "tests" / "data" / "sass-sm90.json").read_text())["sm_90"])
    assert f"{n} of {n} kernels' sm_90 SASS as recorded" in res.stdout


def test_sass_of_the_park_kernel() -> None:
    """The offline SASS tool compiles the float32 park kernel without a GPU: no spills, and
    its k loop holds the 8 float64 mma of a k step.  Skips where libNVVM, ptxas or a
    disassembler is missing (the tool exits 2)."""
    res = _run("park-f32")
    if res.returncode == 2:
        pytest.skip(res.stdout.strip()[:300])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "0 bytes spill stores" in res.stdout
    assert any(ln.strip().startswith("loop") and "DMMA 8" in ln for ln in res.stdout.splitlines())


_BARRIER_PTX = """
import sys
from experiments import sass
try:
    specs = sass.specs()
    ptx = {k: sass.ptx_of(specs[k], (9, 0)) for k in sys.argv[1:]}
except Exception as exc:  # no NVVM / NVRTC here
    print(f"cannot compile PTX here: {exc!r}"[:300])
    sys.exit(2)
for k, text in ptx.items():
    print(k, *(text.count(s) for s in (
        "bar.sync 1, 64; bar.arrive 4, 64;", "bar.arrive 1, 64; bar.sync 4, 64;",
        "bar.sync 1,", "bar.sync 4,", "bar.arrive 1,", "bar.arrive 4,")))
"""


def test_movers_meet_at_one_way_named_barriers() -> None:
    """A band's warp and its mover meet as two one-way named barriers (the steps wait at 1
    and arrive at 4, the mover arrives at 1 and waits at 4: one waiting warp per barrier,
    which PTX's aligned ``bar.sync`` requires; compute-sanitizer's synccheck flags one
    ``bar.sync 1`` waited at by both warps): no other instruction on barriers 1 and 4, as
    many meetings on each side.  The PTX of the training step's DP kernels for sm_90 (skips
    without NVVM)."""
    kernels = ("forward-hilo-f32-mover", "backward-f32-mover")
    res = _run(*kernels, script=_BARRIER_PTX)
    if res.returncode == 2:
        pytest.skip(res.stdout.strip()[:300])
    assert res.returncode == 0, res.stderr[-2000:]
    counts = {ln.split()[0]: [int(n) for n in ln.split()[1:]] for ln in res.stdout.splitlines()}
    assert set(counts) == set(kernels)
    for name, (steps, mover, sync1, sync4, arrive1, arrive4) in counts.items():
        assert steps > 0 and steps == mover, (name, counts[name])
        assert sync1 == arrive4 == steps and sync4 == arrive1 == mover, (name, counts[name])
