"""nox sessions for sdtw: `tests` and `lint` by default; `slow`, `bench`, `benchmark`, `gpu`,
`figures`, `paper` on request (CI's `.ci/run` runs `tests`, `slow` and `lint`).

torch is never a CUDA build by surprise.  `tests`, `slow`, `bench`, `benchmark` and `gpu` need
torch; each session, in this order:

1. reuses the torch its environment already imports: the interpreter's own site-packages,
   which the session sees (``--system-site-packages``);
2. else reuses the torch of the environment nox itself runs in (say, the virtualenv you
   installed torch and nox into): that environment's site-packages folder is added to the
   session's path (a ``.pth`` file), so pip counts its packages as installed;
3. else installs one: without an NVIDIA GPU (``nvidia-smi -L`` lists none), ``BENCH_TORCH_SPEC``
   (default ``torch==2.13.0+cpu`` on Linux, a version PyPI does not have, so it fails rather
   than take a CUDA build) with PyTorch's CPU-only index ``BENCH_TORCH_INDEX`` (default
   https://download.pytorch.org/whl/cpu, added to pip's own sources; set it empty to use
   only those, e.g. a local wheel in pip's ``find-links``); with a GPU, ``BENCH_TORCH_SPEC``
   (default ``torch==2.13.0``, PyPI's CUDA build), and `bench` adds the `cuda` extra.

`figures` and `paper` install no torch: the report reads the committed CSVs with the standard
library only, the figures need matplotlib; Figure 2, which runs ``examples/barycenter.py``,
is drawn where torch can be reused as above and left out, with a warning, where not.
pip's own output (downloads, progress) is shown.  The sessions use pip (nox's ``virtualenv``
backend) rather than uv: uv reads no ``pip.conf``, where a machine may keep its CPU wheel of
torch and its constraints.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

VENV = ["--system-site-packages"]
TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# aeon caps numba (< 0.64) and numpy (< 2.4) below the versions sdtw is measured with: it goes
# in without its pins (its one other need, deprecated, beside it); the harness's tests check it
AEON = ["--no-deps", "aeon>=1.6"]
AEON_NEEDS = ["deprecated"]
# Tools run as ``python -m``: where the machine has pytest (or ruff) outside the session's
# environment, pip does not install it into the environment, and a bare ``pytest`` would be
# the machine's, whose Python does not see what the session installed (a fresh CI machine
# with a system pytest failed the harness's tests on a missing tqdm that way).


def has_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU: ``nvidia-smi -L`` lists one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "GPU" in done.stdout


def torch_requirement(gpu: bool, environ: dict[str, str], platform: str) -> tuple[str, str]:
    """(requirement, extra index URL or "") of the torch to install where none can be reused:
    PyTorch's CPU build without a GPU, PyPI's (CUDA) build with one; ``BENCH_TORCH_SPEC`` and
    ``BENCH_TORCH_INDEX`` override them."""
    cpu_only = not gpu and platform.startswith("linux")  # (PyPI's other builds have no CUDA)
    default = f"torch=={TORCH_VERSION}+cpu" if cpu_only else f"torch=={TORCH_VERSION}"
    spec = environ.get("BENCH_TORCH_SPEC", default)
    index = environ.get("BENCH_TORCH_INDEX", "" if gpu else CPU_INDEX)
    return spec, index


def _reachable(url: str, timeout: float = 5.0) -> bool:
    """Whether a connection to ``url``'s host opens within ``timeout`` seconds (pip itself
    would retry an unreachable index for minutes)."""
    parts = urlparse(url)
    if parts.scheme not in ("http", "https"):
        return True  # (a file:// index)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _python(session: nox.Session, code: str) -> str:
    """The last line that ``code`` prints in the session's Python (warnings may come before)."""
    lines = session.run("python", "-c", code, silent=True, log=False).strip().splitlines()
    return lines[-1].strip() if lines else ""


_TORCH = """
try:
    import torch
except Exception as exc:
    print(f"- {type(exc).__name__}: {exc}")
else:
    print(torch.__version__, torch.__file__)
"""


def _session_torch(session: nox.Session) -> str:
    """``version file`` of the torch the session's Python imports, or "" (and why not)."""
    found = _python(session, _TORCH)
    return "" if found.startswith("- ") else found


def _reuse_torch(session: nox.Session) -> bool:
    """Make the session import a torch it can reuse (steps 1 and 2 of the module's docstring);
    ``False`` where there is none."""
    found = _session_torch(session)
    if found:
        session.log(f"reusing torch {found}")
        return True
    spec = importlib.util.find_spec("torch")  # in the environment nox runs in
    if spec is None or spec.origin is None:
        return False
    outer = Path(spec.origin).resolve().parent.parent
    purelib = _python(session, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    pth = Path(purelib) / "_outer_environment.pth"
    pth.write_text(f"{outer}\n")
    found = _session_torch(session)
    if found:
        session.log(f"reusing torch {found}: the environment nox runs in ({outer})")
        return True
    pth.unlink()
    session.warn(f"the torch of the environment nox runs in ({outer}) does not import here")
    return False


def _provide_torch(session: nox.Session, gpu: bool) -> None:
    """A torch for the session: reused, else installed (the module's docstring)."""
    if _reuse_torch(session):
        return
    spec, index = torch_requirement(gpu, dict(os.environ), sys.platform)
    options = []
    if index and _reachable(index):
        options = ["--extra-index-url", index]
    elif index:
        session.warn(
            f"{index} (BENCH_TORCH_INDEX) cannot be reached from here: installing {spec} "
            "from pip's own sources (a local wheel in find-links, a mirror)"
        )
    session.log(f"no torch to reuse here: installing {spec} ({'GPU' if gpu else 'no GPU'})")
    session.install(spec, *options, silent=False)


def _install(session: nox.Session, extras: str, gpu: bool = False, peers: bool = False) -> None:
    """torch (:func:`_provide_torch`), then this package with ``extras``, editable; with
    ``peers``, aeon (the second CPU peer: :data:`AEON`)."""
    _provide_torch(session, gpu)
    session.install("-e", f".[{extras}]", silent=False)
    if peers:
        session.install(*AEON_NEEDS, silent=False)
        session.install(*AEON, silent=False)


@nox.session(venv_params=VENV)
def tests(session: nox.Session) -> None:
    """The test suite but the slow tests, on the CPU (CUDA kernels in Numba's simulator)."""
    _install(session, "test", gpu=has_gpu(), peers=True)
    # the CPU kernels compiled once, a process per core (else each worker compiles them)
    session.run("python", "-m", "sdtw.warmup", "--jobs", str(len(os.sched_getaffinity(0))))
    # one worker process per core (pytest-xdist); ``nox -s tests -- -n 0`` runs in one process
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        "auto",
        "--dist",
        "worksteal",  # (an idle worker takes tests queued for the other: the long ones vary)
        "-m",
        "not slow",
        *session.posargs,
        env={"NUMBA_ENABLE_CUDASIM": "1"},
    )


@nox.session(venv_params=VENV)
def slow(session: nox.Session) -> None:
    """The slow tests (marker `slow`: SASS check with NVIDIA's compiler wheels, property test)."""
    _install(session, "test,sass", gpu=has_gpu())
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        "auto",
        "--dist",
        "worksteal",
        "-m",
        "slow",
        *session.posargs,
        env={"NUMBA_ENABLE_CUDASIM": "1"},
    )


@nox.session(venv_params=VENV)
def gpu(session: nox.Session) -> None:
    """Run the GPU tests (marker `cuda`) on a real GPU."""
    _install(session, "test,cuda", gpu=True)
    session.run(
        "python", "-m", "pytest", "-m", "cuda", *session.posargs, env={"NUMBA_ENABLE_CUDASIM": "0"}
    )


@nox.session(venv_params=VENV)
def lint(session: nox.Session) -> None:
    """Lint and format-check with ruff."""
    session.install("ruff>=0.5", silent=False)
    session.run("python", "-m", "ruff", "check", ".")
    session.run("python", "-m", "ruff", "format", "--check", ".")


@nox.session(venv_params=VENV)
def bench(session: nox.Session) -> None:
    """This machine's benchmark sweep (GPU: paper grid + Figure 1; CPU: cpu) to results/local/."""
    gpu = has_gpu()
    _install(session, "bench,cuda" if gpu else "bench", gpu=gpu, peers=True)
    session.run("python", "-m", "experiments.run", *session.posargs)


@nox.session(venv_params=VENV)
def benchmark(session: nox.Session) -> None:
    """pytest-benchmark suite: save this run, compare with the last saved one (fail > 20%)."""
    _install(session, "test", gpu=has_gpu())  # (the test extra brings the bench extra)
    session.run(
        "python",
        "-m",
        "pytest",
        "-m",
        "not cudasim",
        "--benchmark-enable",
        "--benchmark-only",
        "--benchmark-autosave",
        "--benchmark-compare",
        "--benchmark-compare-fail=median:20%",
        *session.posargs,
    )


@nox.session(venv_params=VENV)
def figures(session: nox.Session) -> None:
    """Draw figures/ from the committed CSVs: matplotlib, no torch (Figure 2 where it is)."""
    session.install("matplotlib>=3.7", silent=False)
    args = list(session.posargs)
    ready = "import importlib.util as u; print(u.find_spec('numba') is not None)"
    if not args and not (_reuse_torch(session) and _python(session, ready) == "True"):
        names = _python(session, "from figures.make_figures import FIGURES; print(*FIGURES)")
        others = [name for name in names.split() if name != "fig2"]
        session.warn(
            "no torch (and numba) to reuse here: Figure 2 (examples/barycenter.py computes "
            "it) is left out; python -m examples.barycenter draws it where sdtw is installed"
        )
        args = [arg for name in others for arg in ("--only", name)]
    session.run("python", "-m", "figures.make_figures", *args)


@nox.session
def paper(session: nox.Session) -> None:
    """Regenerate paper/REPRODUCTION.md from the committed CSVs (no install: standard library)."""
    session.run("python", "-m", "paper.make_report", *session.posargs)


@nox.session(venv_params=VENV)
def soft_msm(session: nox.Session) -> None:
    """Rerun the Soft-MSM reproduction (aeon's UCR datasets, CPU) and regenerate SOFT_MSM.md."""
    _install(session, "test", peers=True)  # (aeon: the datasets, MBA and the hard distances)
    session.run("python", "-m", "experiments.soft_msm_repro", *session.posargs)
    session.run("python", "-m", "paper.soft_msm_report")


@nox.session(venv_params=VENV)
def ucr(session: nox.Session) -> None:
    """Rerun 1-NN and k-means on aeon's UCR sets (2 CPU cores: 20-30 min), redo docs/ucr.md."""
    _install(session, "test", peers=True)  # (aeon: the datasets and 1-NN DTW; tslearn: k-means)
    out = "experiments/results/cpu-amd-epyc"  # (the committed data that docs/ucr.md reads)
    session.run("python", "-m", "experiments.ucr", "--out", out, *session.posargs)
    session.run("python", "-m", "experiments.ucr", "--report", "--out", out)
