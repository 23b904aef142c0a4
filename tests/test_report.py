"""The reproduction report and the figures, generated from the committed CSVs (no GPU).

The report check is what makes CI fail when results change without the report: it
regenerates ``paper/REPRODUCTION.md`` and compares it with the committed file.
"""

from __future__ import annotations

import csv
import difflib
import re
import shutil
from pathlib import Path

import pytest

from paper import make_report
from paper.results import RESULTS, Results

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "paper" / "REPRODUCTION.md"
FIGURES = REPO / "figures"
SHARED = REPO.parent / "shared" / "reference"
DRAWN = ("fig1-memory-runtime", "accuracy-gamma", "scaling")


def _diff(expected: str, actual: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(), actual.splitlines(), "committed", "regenerated", lineterm=""
    )
    return "\n".join(list(lines)[:60])


def test_report_is_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "REPRODUCTION.md"
    assert make_report.main(["--out", str(out)]) == 0
    assert REPORT.exists(), "paper/REPRODUCTION.md is missing: run `nox -s paper`"
    committed, regenerated = REPORT.read_text("utf-8"), out.read_text("utf-8")
    assert regenerated == committed, (
        "paper/REPRODUCTION.md is out of date with experiments/results (run `nox -s paper`):\n"
        + _diff(committed, regenerated)
    )


def test_report_check_flag(tmp_path: Path) -> None:
    stale = tmp_path / "stale.md"
    stale.write_text("old\n", encoding="utf-8")
    assert make_report.main(["--out", str(stale), "--check"]) == 1
    assert stale.read_text(encoding="utf-8") == "old\n"


def _copy_results(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    shutil.copytree(RESULTS, folder)
    return folder


def _edit(path: Path, match: dict[str, str], column: str, value: str) -> None:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    hits = 0
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            row[column] = value
            hits += 1
    assert hits, f"no row of {path.name} matches {match}"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def test_report_follows_the_results(tmp_path: Path) -> None:
    """Any change of a measured number changes the report (so the up-to-date check bites)."""
    folder = _copy_results(tmp_path)
    before = make_report.render(Results(folder))
    _edit(
        folder / "paper-grid.csv",
        {"impl": "sdtw-fused", "mode": "forward+backward", "B": "32", "N": "512", "D": "64"},
        "median",
        "9.87654",
    )
    after = make_report.render(Results(folder))
    assert before != after
    assert "9.88" in after


def test_rq2_verdict_follows_the_errors(tmp_path: Path) -> None:
    """The verdict is computed: accurate paper-design gradients would make RQ2 reproduced."""
    folder = _copy_results(tmp_path)
    assert make_report.verdict_rq2(Results(folder)).verdict == "contradicted"
    for impl in ("paper-unfused", "paper-fused"):
        for column in ("rel_err_grad_x", "rel_err_grad_y"):
            _edit(folder / "gamma.csv", {"impl": impl}, column, "1e-05")
    assert make_report.verdict_rq2(Results(folder)).verdict == "reproduced"


def test_rq4_is_not_measured_without_barycenter_results() -> None:
    results = Results(RESULTS)
    if (RESULTS / "barycenter.csv").exists():
        pytest.skip("barycenter results exist")
    assert make_report.verdict_rq4(results).verdict == "not measured yet"


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference is not beside the repo")
def test_cited_published_csv_is_verbatim() -> None:
    source = (SHARED / "published_benchmark.csv").read_text(encoding="utf-8")
    assert make_report.CITED["published_csv"]["csv"].strip() == source.strip()


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference is not beside the repo")
def test_cited_h200_table_matches_paper_md() -> None:
    text = (SHARED / "PAPER.md").read_text(encoding="utf-8")
    section = text.split("What the reference code does on our H200", 1)[1]
    cited = make_report.CITED["their_code_h200"]["grid"]
    order = ("maghoumi", "maghoumi-bmm", "unfused", "fused")
    seen = 0
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not re.fullmatch(r"\d+", cells[0]):
            continue
        entry = cited[(int(cells[0]), int(cells[1]))]
        for name, cell in zip(order, cells[2:], strict=True):
            if re.fullmatch(r"[\d.,]+ / [\d.,]+", cell):
                ms, mib = (float(v.replace(",", "")) for v in cell.split("/"))
                assert entry[name] == (ms, mib), (cells[:2], name)
            else:
                assert entry[name] == cell, (cells[:2], name)
        seen += 1
    assert seen == len(cited)


def test_published_saving_column_is_against_maghoumi() -> None:
    """The report says the published fused_saving_pct is 1 - fused / Maghoumi: check it."""
    rows = [r for r in make_report.published().values() if r["fused_saving_pct"] is not None]
    assert rows
    for r in rows:
        expected = 100 * (1 - r["ours_fused_mb"] / r["maghoumi_mb"])
        assert r["fused_saving_pct"] == pytest.approx(expected, rel=1e-9)


def test_committed_figures_exist() -> None:
    """The report links these; `nox -s figures` writes them."""
    for stem in DRAWN:
        for suffix in (".png", ".pdf"):
            assert (FIGURES / f"{stem}{suffix}").exists(), (
                f"figures/{stem}{suffix}: run nox -s figures"
            )


def test_figures_render_deterministically(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from figures import make_figures

    first, second = tmp_path / "a", tmp_path / "b"
    assert make_figures.main(["--out", str(first), "--only", "fig1", "--only", "accuracy",
                              "--only", "scaling"]) == 0  # fmt: skip
    for stem in DRAWN:
        for suffix in (".png", ".pdf"):
            path = first / f"{stem}{suffix}"
            assert path.stat().st_size > 10_000, path
    assert make_figures.main(["--out", str(second), "--only", "accuracy"]) == 0
    for suffix in (".png", ".pdf"):
        name = f"accuracy-gamma{suffix}"
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
