"""The examples run end to end at tiny sizes and write their figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from examples import alignment, barycenter, forecasting

REPO = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG_MAGIC


def test_forecasting_trains_and_plots(tmp_path, capsys):
    out = tmp_path / "figs" / "forecasting.png"  # the folder does not exist yet
    argv = ["--epochs", "2", "--n-train", "64", "--n-test", "8", "--device", "cpu"]
    assert forecasting.main([*argv, "--out", str(out)]) == 0
    assert _is_png(out)
    printed = capsys.readouterr().out
    assert "epoch   1" in printed and "epoch   2" in printed


def test_barycenter_example_beats_the_euclidean_mean(tmp_path, capsys):
    out = tmp_path / "barycenter.png"
    argv = ["--n-series", "6", "--length", "30", "--max-iter", "15", "--device", "cpu"]
    assert barycenter.main([*argv, "--out", str(out)]) == 0
    assert _is_png(out)
    lines = capsys.readouterr().out.splitlines()
    mean_obj = float(next(s for s in lines if "Euclidean mean" in s).split()[-1])
    bary_obj = float(next(s for s in lines if "soft-DTW barycenter" in s).split()[-1])
    assert bary_obj < mean_obj


def test_forecasting_quick_is_short(tmp_path, capsys):
    """``--quick``: 10 epochs (an eighth of the default's steps with its 512 series); the run
    says up front how many epochs and steps it will take."""
    out = tmp_path / "forecasting.png"
    argv = ["--quick", "--n-train", "64", "--n-test", "8", "--device", "cpu", "--out", str(out)]
    assert forecasting.main(argv) == 0
    printed = capsys.readouterr().out
    assert "10 epochs of 1 steps" in printed.splitlines()[0]
    assert "epoch  10" in printed and "epoch  11" not in printed


@pytest.mark.parametrize(
    "script, argv",
    [
        ("alignment.py", ["--length", "12", "--gammas", "1"]),
        ("barycenter.py", ["--n-series", "3", "--length", "10", "--max-iter", "2"]),
        ("forecasting.py", ["--epochs", "1", "--n-train", "16", "--n-test", "4"]),
    ],
)
def test_examples_run_as_scripts_from_any_folder(tmp_path, script, argv):
    """``python examples/X.py`` from a folder outside the repository (no ``sdtw`` installed
    needed: the script finds the repository's)."""
    out = tmp_path / "figure.png"
    path = REPO / "examples" / script
    cmd = [sys.executable, str(path), *argv, "--device", "cpu", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
    assert _is_png(out)


@pytest.mark.parametrize("example", [alignment, barycenter, forecasting])
def test_missing_matplotlib_stops_before_any_work(example, monkeypatch, capsys):
    """Without matplotlib an example exits with status 2 at once, naming the install
    command; nothing is computed (the soft-DTW calls are never reached)."""
    import sdtw

    def never(*args, **kwargs):
        raise AssertionError("computed before checking what the figure needs")

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (an import of it now fails)
    monkeypatch.setattr(sdtw, "softdtw_barycenter", never)
    monkeypatch.setattr(sdtw, "SoftDTW", never)
    monkeypatch.setattr(sdtw, "alignment", never)
    assert example.main(["--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install matplotlib" in err and ".[examples]" in err
