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


def test_examples_run_as_scripts(tmp_path):
    out = tmp_path / "b.png"
    script = REPO / "examples" / "barycenter.py"
    argv = ["--n-series", "3", "--length", "10", "--max-iter", "2", "--out", str(out)]
    subprocess.run([sys.executable, str(script), *argv], check=True, cwd=tmp_path)
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
