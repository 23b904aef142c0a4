"""Where a run's results go, and the machine, software and source they come from.

Results folders
---------------
``experiments/results/<machine>/`` (``nvidia-h200``, ``cpu-amd-epyc``: :func:`machine_slug`)
holds the committed reference data of a machine class; ad-hoc runs write to the git-ignored
``experiments/results/local/<machine>/`` (:func:`default_out_dir`).  The harness writes into
committed data (:func:`is_committed`: those folders, and any file git tracks) only when told
to (``python -m experiments.run --replace-committed``).

Provenance
----------
:func:`provenance` gives the :data:`experiments.results_csv.PROVENANCE_COLUMNS` of a run.
``git_sha`` comes from the ``BENCH_GIT_SHA`` and ``BENCH_GIT_DIRTY`` environment variables
when set (a copy of the tree on another machine), else from ``git``.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

__all__ = [
    "LOCAL",
    "REPO",
    "RESULTS",
    "committed_dir",
    "default_out_dir",
    "git_revision",
    "is_committed",
    "machine_slug",
    "provenance",
]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "experiments" / "results"
#: Ad-hoc runs' results, one folder per machine (git-ignored).
LOCAL = RESULTS / "local"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _command(*args: str) -> str | None:
    """``args``' standard output in the repository, or ``None`` when it fails."""
    try:
        done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_revision() -> tuple[str, str]:
    """(SHA, dirty flag) of the code; results under experiments/results do not count as dirty.

    ``BENCH_GIT_SHA`` (and ``BENCH_GIT_DIRTY``), when set, win over the tree's own ``.git``: a
    copy of the tree sent to another machine may carry a stale ``.git`` (the GPU runner's copy's
    ``HEAD`` lagged the code it ran)."""
    if os.environ.get("BENCH_GIT_SHA"):
        return os.environ["BENCH_GIT_SHA"], os.environ.get("BENCH_GIT_DIRTY", "")
    sha = _command("git", "rev-parse", "HEAD")
    if sha is None:  # no .git and no BENCH_GIT_SHA
        return "unknown", ""
    status = _command("git", "status", "--porcelain", "--", ".", ":(exclude)experiments/results")
    return sha, ("" if status is None else str(bool(status)).lower())


def _driver() -> str:
    smi = _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    if smi:
        return smi.splitlines()[0]
    try:
        from numba import cuda

        major, minor = cuda.cudadrv.driver.driver.get_version()
        return f"cuda-driver-api-{major}.{minor}"
    except Exception:
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def provenance() -> dict[str, str]:
    """Machine, software and source of this run: the provenance columns of every row."""
    import numpy as np
    import torch

    has_gpu = torch.cuda.is_available()
    sha, dirty = git_revision()
    return {
        "gpu": torch.cuda.get_device_name() if has_gpu else "",
        "driver": _driver() if has_gpu else "",
        "cuda": torch.version.cuda or "",
        "torch": torch.__version__,
        "numba": _version("numba"),
        "numba_cuda": _version("numba-cuda"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "git_sha": sha,
        "git_dirty": dirty,
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": _cpu_model(),
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_slug() -> str:
    """This machine class's folder name: the GPU's name (``nvidia-h200``) on a GPU machine,
    ``cpu-<model>`` (``cpu-amd-epyc``) otherwise."""
    import torch

    if torch.cuda.is_available():
        return _slug(torch.cuda.get_device_name())
    return _slug(f"cpu {_cpu_model()}")


def committed_dir() -> Path:
    """``experiments/results/<machine>``: this machine class's committed results."""
    return RESULTS / machine_slug()


def default_out_dir() -> Path:
    """``experiments/results/local/<machine>``: where an ad-hoc run writes (git-ignored)."""
    return LOCAL / machine_slug()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def is_committed(path: Path) -> bool:
    """Whether writing ``path`` changes committed data: a file under ``experiments/results/``
    outside ``local/`` (the committed results folders, whether git tracks that file yet or
    not), or any file that git tracks."""
    path = Path(os.path.abspath(path))
    if _inside(path, RESULTS) and not _inside(path, LOCAL):
        return True
    if not _inside(path, REPO):
        return False
    return bool(_command("git", "ls-files", "--", str(path.relative_to(REPO))))
