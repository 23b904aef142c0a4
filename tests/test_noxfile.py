"""noxfile.py's choice of torch: a CPU build where there is no GPU, never a CUDA one by surprise;
the figures and the report need none."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nox")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def noxfile():
    spec = importlib.util.spec_from_file_location("noxfile_under_test", REPO / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_the_cpu_build_from_the_cpu_index(noxfile) -> None:
    spec, index = noxfile.torch_requirement(False, {}, "linux")
    # (a local version: PyPI has none, so pip fails rather than take its CUDA build)
    assert spec == "torch==2.13.0+cpu" and index == "https://download.pytorch.org/whl/cpu"
    assert noxfile.torch_requirement(False, {}, "darwin") == ("torch==2.13.0", index)


def test_with_a_gpu_pypis_build_and_the_variables_win(noxfile) -> None:
    assert noxfile.torch_requirement(True, {}, "linux") == ("torch==2.13.0", "")
    environ = {"BENCH_TORCH_SPEC": "torch==2.12.0", "BENCH_TORCH_INDEX": ""}
    assert noxfile.torch_requirement(False, environ, "linux") == ("torch==2.12.0", "")


def test_sessions_say_what_they_do(noxfile) -> None:
    """Every session has a one-line docstring (``nox -l`` shows its first line); the figures
    and paper sessions install no torch."""
    listing = subprocess.run(
        [sys.executable, "-m", "nox", "-l"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for name in ("tests", "slow", "gpu", "lint", "bench", "benchmark", "figures", "paper"):
        assert f" {name} -> " in listing
    source = (REPO / "noxfile.py").read_text()
    for session in ("figures", "paper"):
        body = source.split(f"def {session}(", 1)[1].split("\n@nox.session", 1)[0]
        assert "_install(" not in body and "_provide_torch" not in body and "torch==" not in body


def test_the_report_and_the_figures_import_without_torch() -> None:
    """What the report and the figures read (the loader, the sweeps' and implementations'
    registries) imports with torch, numpy and pandas absent."""
    code = (
        "import sys\n"
        "for name in ('torch', 'numpy', 'pandas', 'numba'):\n"
        "    sys.modules[name] = None\n"
        "from experiments import load\n"
        "assert load.planned('paper-grid') and load.impl_order(['torch', 'sdtw-fused'])\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
