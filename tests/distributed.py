"""Running a two-process gloo script on the CPU and reading what its processes saved.

torch's gloo teardown aborts a worker about one run in eight on these machines even with a
plain MSE loss: the tests judge the files the workers saved, not the script's exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def run_two_ranks(tmp_path: Path, name: str, script: str) -> tuple[dict, dict, dict]:
    """Run ``script`` (it saves ``single.pt`` from one process and ``rank0.pt``, ``rank1.pt``
    from two gloo ranks into the folder given as its argument); return the three dicts, and
    check that the ranks agree bit for bit and with the single process to 1e-12."""
    path = tmp_path / name
    path.write_text(script)
    res = subprocess.run(
        [sys.executable, str(path), str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    saved = [tmp_path / f for f in ("single.pt", "rank0.pt", "rank1.pt")]
    assert all(p.exists() for p in saved), res.stdout[-3000:] + res.stderr[-3000:]
    single, rank0, rank1 = (torch.load(p) for p in saved)
    for key, want in single.items():
        torch.testing.assert_close(rank0[key], want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rank1[key], rank0[key], rtol=0, atol=0)
    return single, rank0, rank1
