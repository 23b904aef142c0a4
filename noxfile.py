"""nox sessions for sdtw: `tests` and `lint` by default; `bench`, `benchmark`, `gpu`, `figures`,
`paper` on request.

torch is never pulled implicitly: sessions see the interpreter's site-packages, so an installed
torch (CPU or CUDA) is reused; when none is installed, ``SDTW_TORCH_SPEC`` (default
``torch==2.13.0``, the local CPU wheel on our CI machines) is installed first.
"""

from __future__ import annotations

import importlib.util
import os

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

VENV = ["--system-site-packages"]
# Tools run as ``python -m``: where the machine has pytest (or ruff) outside the session's
# environment, pip does not install it into the environment, and a bare ``pytest`` would be
# the machine's, whose Python does not see what the session installed (a fresh CI machine
# with a system pytest failed the harness's tests on a missing tqdm that way).


def _install(session: nox.Session, extras: str) -> None:
    if importlib.util.find_spec("torch") is None:
        session.install(os.environ.get("SDTW_TORCH_SPEC", "torch==2.13.0"))
    session.install("-e", f".[{extras}]")


@nox.session(venv_params=VENV)
def tests(session: nox.Session) -> None:
    """Run the test suite on the CPU, CUDA kernels in Numba's simulator (GPU tests skip)."""
    _install(session, "test")
    # one worker process per core (pytest-xdist); ``nox -s tests -- -n 0`` runs in one process
    session.run(
        "python", "-m", "pytest", "-n", "auto", *session.posargs, env={"NUMBA_ENABLE_CUDASIM": "1"}
    )


@nox.session(venv_params=VENV)
def gpu(session: nox.Session) -> None:
    """Run the GPU tests (marker `cuda`) on a real GPU."""
    _install(session, "test,cuda")
    session.run(
        "python", "-m", "pytest", "-m", "cuda", *session.posargs, env={"NUMBA_ENABLE_CUDASIM": "0"}
    )


@nox.session(venv_params=VENV)
def lint(session: nox.Session) -> None:
    """Lint and format-check with ruff."""
    session.install("ruff>=0.5")
    session.run("python", "-m", "ruff", "check", ".")
    session.run("python", "-m", "ruff", "format", "--check", ".")


@nox.session(venv_params=VENV)
def bench(session: nox.Session) -> None:
    """Run the benchmark sweep for this machine (GPU: paper-grid + fig1; CPU: cpu)."""
    _install(session, "bench,cuda")
    session.run("python", "-m", "experiments.run", *session.posargs)


@nox.session(venv_params=VENV)
def benchmark(session: nox.Session) -> None:
    """pytest-benchmark suite: save this run, compare with the last saved one (fail > 20%)."""
    _install(session, "test")  # (the test extra brings the bench extra)
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
    """Draw the figures (PNG + PDF) into figures/ from the committed CSVs; no GPU needed."""
    _install(session, "bench")
    session.run("python", "-m", "figures.make_figures", *session.posargs)


@nox.session(venv_params=VENV)
def paper(session: nox.Session) -> None:
    """Regenerate paper/REPRODUCTION.md from the committed CSVs; no GPU needed."""
    _install(session, "bench")
    session.run("python", "-m", "paper.make_report", *session.posargs)
