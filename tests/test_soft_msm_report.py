"""paper/SOFT_MSM.md: generated from the committed CSV, with each verdict from its numbers."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from paper import soft_msm_report

REPO = Path(__file__).resolve().parent.parent


def _rows(loss_msm: float, acc_msm: float) -> list[dict]:
    prov = dict(
        c=1.0,
        max_iter=5,
        per_class=3,
        seed=0,
        git_sha="0" * 40,
        git_dirty="false",
        date_utc="2026-12-06",
        cpu="cpu",
        torch="2",
        numba="0",
    )
    rows = []
    for repeat in range(2):
        for method, gamma, value in (
            ("mba", 0.0, 10.0),
            ("mean", 0.0, 11.0),
            ("soft_msm", 0.1, loss_msm),
            ("soft_dtw", 0.1, 12.0),
        ):
            rows.append(
                dict(
                    experiment="barycentre_loss",
                    dataset="D",
                    method=method,
                    gamma=gamma,
                    repeat=repeat,
                    metric="msm_loss",
                    value=value,
                    **prov,
                )
            )
    for method, metric, value in (
        ("soft_msm", "accuracy_msm", acc_msm),
        ("soft_dtw", "accuracy_dtw", 0.8),
    ):
        rows.append(
            dict(
                experiment="nearest_centroid",
                dataset="D",
                method=method,
                gamma=0.1,
                repeat=0,
                metric=metric,
                value=value,
                **prov,
            )
        )
    text = io.StringIO()
    w = csv.DictWriter(text, list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return list(csv.DictReader(io.StringIO(text.getvalue())))


def test_verdicts_follow_the_numbers():
    good = soft_msm_report.report(_rows(loss_msm=9.0, acc_msm=0.9))
    assert "lower MSM barycentre loss than MBA.* **reproduced** (1/1" in good
    assert (
        "soft-DTW centroids* (each scored" in good and "**reproduced** (1/1 datasets): acc" in good
    )
    bad = soft_msm_report.report(_rows(loss_msm=10.5, acc_msm=0.7))
    assert "than MBA.* **not reproduced** (0/1" in bad
    assert "**not reproduced** (0/1 datasets): accuracy" in bad
    assert "k-means" in bad and "**not tested**" in bad


def test_the_committed_report_is_the_generated_one():
    with soft_msm_report.CSV.open(newline="") as f:
        rows = list(csv.DictReader(f))
    committed = (REPO / "paper" / "SOFT_MSM.md").read_text(encoding="utf-8")
    assert committed == soft_msm_report.report(rows)
