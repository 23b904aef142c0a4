"""The SIMD kernels' row loops are vector code: LLVM vectorising them is what makes the lanes
kernels fast (a change that stops it, e.g. a libm call or a branch in a cell, costs 4-10x and
no value changes), so each row function's machine code must hold packed float64 arithmetic."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (in a child process with an empty Numba cache: inspect_asm needs a fresh compile)
_PROBE = r"""
import re
import numpy as np
from sdtw.cpu import _tables
from sdtw import cpu_lanes, cpu_msm_lanes
B, N = 16, 24
rng = np.random.default_rng(0)
x, y = rng.standard_normal((B, N, 1)), rng.standard_normal((B, N, 1))
t = _tables(B, N, N, 10**9, 10**9, None)
v, R = cpu_lanes.lane_forward(x, y, 1.0, t)
cpu_lanes.lane_backward(x, y, 1.0, t, R, np.ones(B))
v, R = cpu_msm_lanes.msm_lane_forward(x, y, 1.0, 1.0, t)
cpu_msm_lanes.msm_lane_backward(x, y, 1.0, 1.0, t, R, np.ones(B))
packed = re.compile(r"\bv?(add|sub|mul|div|max|min|sqrt|fn?m(add|sub)\d{3})pd\b")
fns = {"soft_row": cpu_lanes, "push_row": cpu_lanes, "msm_row_shared": cpu_msm_lanes,
       "msm_row_units": cpu_msm_lanes, "msm_chain": cpu_msm_lanes, "msm_pushes": cpu_msm_lanes}
for name, mod in fns.items():
    asm = "\n".join(getattr(mod, name).inspect_asm().values())
    print(name, len(packed.findall(asm)))
"""


@pytest.mark.slow  # (compiles the lanes kernels in an empty cache: ~1 min)
def test_the_lanes_row_loops_are_vector_code(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    env.pop("NUMBA_DISABLE_JIT", None)
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    counts = {k: int(v) for k, v in (line.split() for line in res.stdout.split("\n") if line)}
    # (a cell's arithmetic in packed form: at least a few packed ops per function)
    assert set(counts) == {"soft_row", "push_row", "msm_row_shared", "msm_row_units",
                           "msm_chain", "msm_pushes"}  # fmt: skip
    assert all(n >= 2 for n in counts.values()), counts
    assert counts["msm_row_shared"] >= 40 and counts["soft_row"] >= 20, counts
