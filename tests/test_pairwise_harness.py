"""The ``pairwise`` sweep (experiments/pairwise.py) runs on a few GunPoint series: a row per
implementation and metric, the peers' matrices equal to sdtw's where they compute the same
values."""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_pairwise_quick(tmp_path):
    pytest.importorskip("tslearn")
    pytest.importorskip("aeon")
    from experiments import pairwise

    assert pairwise.main(["--quick", "--repeats", "1", "--out", str(tmp_path)]) == 0
    rows = pairwise.run(quick=True, repeats=1)
    got = {(r["impl"], r["measure"], r["metric"]): r for r in rows}
    for impl, measure in pairwise.IMPLS:
        assert got[(impl, measure, "time_s")]["status"] == "ok"
        assert got[(impl, measure, "cells_per_s")]["median"] > 0
    assert got[("tslearn", "softdtw", "max_rel_diff")]["median"] < 1e-10
    assert got[("aeon", "dtw", "max_rel_diff")]["median"] < 1e-10
    assert got[("aeon", "softdtw", "max_rel_diff")]["median"] < 1e-10
    assert (tmp_path / "pairwise.csv").exists()
