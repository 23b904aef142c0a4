"""A process forked after the CPU kernels ran in parallel (a ``DataLoader`` worker,
``multiprocessing`` with ``fork``) runs them too (issue 52).  Numba's default threading layer
on Linux without TBB is GNU OpenMP, which is not fork-safe: the child was killed or hung.  sdtw
asks Numba for its ``"forksafe"`` layer unless the user chose one
(:func:`sdtw._compat.fork_safe_threading_layer`).  Each case runs in a fresh interpreter: the
layer is loaded once per process, by the first parallel kernel."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHILD_TIMEOUT = 120  # seconds; the child's kernels are compiled already (inherited)

# B N M = 65536 cells, past sdtw.cpu.SERIAL_MAX_CELLS: the parallel kernels, of the full and
# the checkpointed modes.  The child first does what a DataLoader worker does,
# torch.set_num_threads(1): torch's own OpenMP pool is not fork-safe either (without it the
# child can hang in torch's first parallel op, sdtw or not).
_SCRIPT = """
import multiprocessing, sys
import numba, torch
{before}
import sdtw

def work():
    x = torch.randn(16, 64, 4, requires_grad=True)
    y = torch.randn(16, 64, 4)
    for memory in ("full", "checkpoint"):
        sdtw.softdtw(x, y, backend="cpu", memory=memory).sum().backward()

def child():
    torch.set_num_threads(1)
    work()

if __name__ == "__main__":
    work()
    print(numba.threading_layer(), flush=True)
    if {fork}:
        p = multiprocessing.get_context("fork").Process(target=child)
        p.start()
        p.join({timeout})
        if p.is_alive():
            p.kill()
            p.join()
            print("the child hung", flush=True)
            sys.exit(3)
        print("child exit code", p.exitcode, flush=True)
        sys.exit(0 if p.exitcode == 0 else 4)
"""


def _run(before: str = "", fork: bool = True, layer: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    if layer is not None:
        env["NUMBA_THREADING_LAYER"] = layer
    script = _SCRIPT.format(before=before, fork=fork, timeout=CHILD_TIMEOUT)
    res = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT + 300,
    )
    return res.returncode, res.stdout + res.stderr


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_forked_child_runs_the_cpu_kernels():
    """The parent runs the parallel CPU kernels, then a forked child runs them: it finishes
    (killed and failed after ``CHILD_TIMEOUT`` s otherwise), under a fork-safe layer."""
    code, out = _run()
    assert code == 0, out
    layer = out.split()[0]
    assert layer != "omp" or sys.platform != "linux", out


@pytest.mark.parametrize(
    "before, layer",
    [("", "omp"), ("numba.config.THREADING_LAYER = 'omp'", None)],
    ids=["environment", "numba.config"],
)
def test_user_threading_layer_is_kept(before, layer):
    """A layer the user chose (``NUMBA_THREADING_LAYER``, or Numba's config set before
    ``import sdtw``) is the one the kernels run with (no fork here: OpenMP's child would not
    survive it)."""
    code, out = _run(before=before, fork=False, layer=layer)
    assert code == 0, out
    assert out.split()[0] == "omp", out
