"""experiments/ucr.py on a few series of aeon's bundled UCR/UEA sets: the CSV's structure, its
values' ranges, the report, and sdtw's exact-DTW 1-NN predictions equal to aeon's."""

from __future__ import annotations

import csv

import numpy as np
import pytest

pytest.importorskip("aeon")
pytest.importorskip("sklearn")

from experiments import ucr
from experiments.results_csv import PROVENANCE_COLUMNS

#: equal lengths (GunPoint), and 12 channels of lengths 7-29 (JapaneseVowels)
SETS = ["GunPoint", "JapaneseVowels"]


@pytest.fixture(scope="module")
def quick_csv(tmp_path_factory):
    """The quick run's CSV, sdtw's k-means only (tslearn's compiles for ~12 s: the slow test)."""
    rows = ucr.run(SETS, quick=True, km_impls=("sdtw",))
    path = tmp_path_factory.mktemp("ucr") / ucr.CSV_NAME
    ucr.write(rows, path)
    return path


def test_quick_csv_structure_and_ranges(quick_csv):
    with quick_csv.open(newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert set(ucr.COLUMNS) | set(PROVENANCE_COLUMNS) <= set(reader.fieldnames)
    assert all(r["status"] == "ok" for r in rows), [r["note"] for r in rows if r["note"]]
    assert {r["dataset"] for r in rows} == set(SETS)
    for name in SETS:
        got = {(r["experiment"], r["impl"], r["measure"], r["metric"])
               for r in rows if r["dataset"] == name}  # fmt: skip
        assert {("1nn", "sdtw", "dtw", "error"), ("1nn", "aeon", "dtw", "error"),
                ("1nn", "sdtw", "divergence", "error"), ("1nn", "sdtw", "dtw", "time_s"),
                ("kmeans", "sdtw", "softdtw", "ari"),
                ("kmeans", "sdtw", "softdtw", "objective")} <= got  # fmt: skip
    for r in rows:
        value = float(r["value"])
        if r["metric"] in ("error", "agreement_aeon"):
            assert 0 <= value <= 1
        elif r["metric"] == "ari":
            assert -1 <= value <= 1
        elif r["metric"] == "time_s":
            assert value > 0
    assert all(float(r["value"]) == 1 for r in rows if r["metric"] == "agreement_aeon")
    jv = [r for r in rows if r["dataset"] == "JapaneseVowels"]
    assert all(r["length"] == "7-29" and r["D"] == "12" and r["capped"] for r in jv)
    assert any("list of" in r["input"] for r in jv if r["impl"] == "sdtw")
    # (aeon's JapaneseVowels is not z-normalised: exact DTW on the raw series too; GunPoint is)
    assert {r["prep"] for r in jv if r["experiment"] == "1nn"} == {"znorm", "raw"}
    assert {r["prep"] for r in rows if r["dataset"] == "GunPoint"} == {"znorm"}


def test_report_from_the_quick_csv(quick_csv):
    text = ucr.report(quick_csv)
    assert "## 1-NN test error" in text and "## k-means" in text
    assert all(f"| {name} |" in text for name in SETS)


def test_report_leaves_out_a_kmeans_run_without_iterations(quick_csv, tmp_path):
    """tslearn's n_iter_ = 0 (every attempt hit an empty cluster) is no clustering."""
    with quick_csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    ours = [r for r in rows if r["experiment"] == "kmeans" and r["dataset"] == "GunPoint"]
    peer = [{**r, "impl": "tslearn", "value": "0" if r["metric"] == "n_iter" else r["value"]}
            for r in ours]  # fmt: skip
    ucr.write(rows + peer, tmp_path / ucr.CSV_NAME)
    text = ucr.report(tmp_path / ucr.CSV_NAME)
    assert "GunPoint, tslearn, seed 0: no clustering" in text
    line = next(x for x in text.splitlines() if x.startswith("| GunPoint | ") and "failed" in x)
    assert line.count("failed") == 4  # (ARI, objective, iterations, time)


@pytest.mark.parametrize("name", SETS)
def test_sdtw_exact_dtw_1nn_predicts_as_aeon(name):
    train, y_train = ucr._subset(*ucr.load(name, "train"), 20)
    test, _ = ucr._subset(*ucr.load(name, "test"), 15)
    ours = ucr.classify("sdtw", 0.0, train, y_train, test)
    theirs = ucr.classify("aeon", 0.0, train, y_train, test)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.slow
def test_quick_main_with_tslearn(tmp_path):
    pytest.importorskip("tslearn")
    assert ucr.main(["--quick", "--dataset", "GunPoint", "--out", str(tmp_path)]) == 0
    with (tmp_path / ucr.CSV_NAME).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    ari = [r for r in rows if r["impl"] == "tslearn" and r["metric"] == "ari"]
    assert ari and all(r["status"] == "ok" and -1 <= float(r["value"]) <= 1 for r in ari)
