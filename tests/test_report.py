"""The reproduction report and the figures, generated from the committed CSVs (no GPU).

The report check is what makes CI fail when results change without the report: it
regenerates ``paper/REPRODUCTION.md`` and compares it with the committed file.
"""

# The report is typeset: γ, ×, – in expected strings are meant.
# ruff: noqa: RUF001

from __future__ import annotations

import csv
import difflib
import re
import shutil
from pathlib import Path

import pytest

from experiments.load import RESULTS, Results
from paper import make_report
from paper.cited import CITED, published
from paper.markdown import fmt_g
from paper.verdicts import verdict_rq2, verdict_rq4

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "paper" / "REPRODUCTION.md"
FIGURES = REPO / "figures"
SHARED = REPO.parent / "shared" / "reference"
DRAWN = ("fig1-memory-runtime", "accuracy-gamma", "scaling", "targets-processes", "tc-grads")


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


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames is not None
    return list(reader.fieldnames), rows


def _write(path: Path, fields: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _edit(path: Path, match: dict[str, str], column: str, value: str) -> None:
    fields, rows = _read(path)
    hits = 0
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            row[column] = value
            hits += 1
    assert hits, f"no row of {path.name} matches {match}"
    _write(path, fields, rows)


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
    assert verdict_rq2(Results(folder)).verdict == "contradicted"
    for impl in ("paper-unfused", "paper-fused"):
        for column in ("rel_err_grad_x", "rel_err_grad_y"):
            _edit(folder / "gamma.csv", {"impl": impl}, column, "1e-05")
    assert verdict_rq2(Results(folder)).verdict == "reproduced"


def test_rq4_is_not_measured_without_barycenter_results() -> None:
    results = Results(RESULTS)
    if (RESULTS / "barycenter.csv").exists():
        pytest.skip("barycenter results exist")
    assert verdict_rq4(results).verdict == "not measured yet"


# A barycenter.csv as `python -m experiments.run --sweep barycenter` writes it on the GPU, at its
# planned points, with invented numbers: (impl, gamma) -> ms per iteration, peak bytes,
# launches, then (total ms, iterations, objective) with and without early stopping.
BARYCENTER_NUMBERS = {
    ("sdtw-fused", 1.0): (3.21, 5_242_880, 2, (187.0, 61, -811.5), (302.0, 100, -811.6)),
    ("sdtw-unfused", 1.0): (4.56, 9_437_184, 2, (270.0, 61, -811.5), (451.0, 100, -811.6)),
    ("paper-unfused", 1.0): (51.7, 55_574_528, 1022, (3_150.0, 61, -811.4), (5_170.0, 100, -811.5)),
    ("paper-fused", 1.0): (98.3, 35_651_584, 1022, (6_020.0, 62, -811.4), (9_830.0, 100, -811.5)),
    ("sdtw-fused", 0.1): (3.33, 5_242_880, 2, (290.0, 88, 412.25), (331.0, 100, 412.2)),
    ("sdtw-unfused", 0.1): (4.71, 9_437_184, 2, (410.0, 88, 412.25), (470.0, 100, 412.2)),
    ("paper-unfused", 0.1): (52.9, 55_574_528, 1022, (4_660.0, 89, 413.0), (5_290.0, 100, 412.9)),
    ("paper-fused", 0.1): (99.1, 35_651_584, 1022, (8_810.0, 89, 413.0), (9_910.0, 100, 412.9)),
}


def _write_barycenter_csv(folder: Path) -> None:
    """``folder/barycenter.csv`` from :data:`BARYCENTER_NUMBERS`, provenance of paper-grid."""
    fields, grid_rows = _read(folder / "paper-grid.csv")
    template, rows = grid_rows[0], []
    for (impl, gamma), (ms, peak, launches, early, full) in BARYCENTER_NUMBERS.items():
        common = dict.fromkeys(fields, "")
        common.update({k: template[k] for k in fields[fields.index("gpu") :]})
        common.update(sweep="barycenter", impl=impl, B="1000", N="256", M="256", D="3")
        common.update(gamma=f"{gamma:g}", dtype="float32", device="cuda", status="ok")
        rows.append(
            {**common, "mode": "barycenter-adam", "metric": "ms_per_iter", "median": str(ms),
             "repeats": "10", "peak_mem_bytes": str(peak), "launches": str(launches)}
        )  # fmt: skip
        for mode, solve in (
            ("barycenter-adam-early-stop", early),
            ("barycenter-adam-max-iter", full),
        ):
            for metric, value in zip(("total_ms", "iterations", "objective"), solve, strict=True):
                rows.append({**common, "mode": mode, "metric": metric, "median": str(value),
                             "repeats": "1", "note": "one solve of max_iter = 100"})  # fmt: skip
    _write(folder / "barycenter.csv", fields, rows)


def _rq4_section(report: str) -> str:
    return report.split("## RQ4", 1)[1].split("\n## ", 1)[0]


def test_rq4_summarises_barycenter_csv(tmp_path: Path) -> None:
    """With barycenter.csv the RQ4 verdict is computed, and the section shows its numbers;
    a measurement that failed is reported by its status, never as a number."""
    folder = _copy_results(tmp_path)
    _write_barycenter_csv(folder)
    report = make_report.render(Results(folder))
    rq4 = _rq4_section(report)
    verdict = verdict_rq4(Results(folder))
    assert verdict.verdict == "reproduced", verdict.reason
    assert "**Verdict: reproduced.**" in rq4 and "not measured yet" not in rq4
    assert "| RQ4 |" in report and "**reproduced** | paper design 51.7–99.1 ms/iteration" in report
    # ms per iteration, MiB, launches; total ms, iterations, objective with / without stopping
    assert (
        "| 1000 | 256 | 3 | 0.1 | `paper-fused` | 99.1 | 34.0 | 1022 | 8,810 | 89 | 413.0 |" in rq4
    )
    assert "| 9,910 | 100 | 412.9 |" in rq4
    assert "| 1 | `sdtw-fused` | 3.21 | 5.00 | 2 | 187 | 61 | -811.5 | 302 | 100 | -811.6 |" in rq4
    assert "max_iter = 100." in rq4  # the CSV's, which is the paper's default
    # the paper design's objective is sdtw's to 1.7e-3 at worst (412.9 vs 412.2)
    assert "1.7e-03" in verdict.reason and "11–31×" in verdict.reason

    # A barycenter off by more than OBJECTIVE_BAR is not the paper's practical barycenter.
    match = {"impl": "paper-fused", "gamma": "0.1", "metric": "objective"}
    _edit(
        folder / "barycenter.csv", {**match, "mode": "barycenter-adam-max-iter"}, "median", "433.0"
    )
    verdict = verdict_rq4(Results(folder))
    assert (
        verdict.verdict == "not reproduced"
        and "5.0e-02 for `paper-fused` at γ = 0.1" in verdict.reason
    )

    # An out-of-memory solve: one row, under the mode's first metric, with its status.
    path = folder / "barycenter.csv"
    fields, rows = _read(path)
    failed = {"impl": "paper-unfused", "gamma": "1", "mode": "barycenter-adam-max-iter"}
    rows = [r for r in rows if not all(r[k] == v for k, v in failed.items())]
    oom = next(r for r in rows if r["impl"] == "paper-unfused" and r["gamma"] == "1")
    rows.append({**oom, **failed, "metric": "total_ms", "median": "", "status": "oom",
                 "note": "OutOfMemoryError: CUDA out of memory"})  # fmt: skip
    _write(path, fields, rows)
    report = make_report.render(Results(folder))
    rq4 = _rq4_section(report)
    assert "**Verdict: not reproduced.**" in rq4
    assert (
        "| 1 | `paper-unfused` | 51.7 | 53.0 | 1022 | 3,150 | 61 | -811.4 | oom | oom | oom |"
        in rq4
    )
    assert "5,170" not in report  # the failed solve's number is nowhere
    assert "**oom** — OutOfMemoryError: CUDA out of memory" in rq4
    assert "`barycenter.csv`, **oom**" in report  # and under "Points without a measurement"


def test_barycenter_modes_and_recipe_match_their_sources() -> None:
    from experiments import barycenter, load

    assert load.BARYCENTER_MODES == barycenter.MODES
    recipe = CITED["claims"]["RQ4_recipe"]
    assert (recipe["lr"], recipe["max_iter"]) == (barycenter.LR, barycenter.MAX_ITER)
    if SHARED.exists():
        text = " ".join((SHARED / "PAPER.md").read_text(encoding="utf-8").split())
        assert f"Adam, lr {recipe['lr']:g}, cosine annealing to lr/10" in text
        assert recipe["lr_final"] == pytest.approx(recipe["lr"] / 10)
        assert f"patience {recipe['patience']} and tol {fmt_g(recipe['tol'])}," in text
        assert f"max_iter={recipe['max_iter']}," in text


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference is not beside the repo")
def test_cited_published_csv_is_verbatim() -> None:
    source = (SHARED / "published_benchmark.csv").read_text(encoding="utf-8")
    assert CITED["published_csv"]["csv"].strip() == source.strip()


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/reference is not beside the repo")
def test_cited_h200_table_matches_paper_md() -> None:
    text = (SHARED / "PAPER.md").read_text(encoding="utf-8")
    section = text.split("What the reference code does on our H200", 1)[1]
    cited = CITED["their_code_h200"]["grid"]
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
    rows = [r for r in published().values() if r["fused_saving_pct"] is not None]
    assert rows
    for r in rows:
        expected = 100 * (1 - r["ours_fused_mb"] / r["maghoumi_mb"])
        assert r["fused_saving_pct"] == pytest.approx(expected, rel=1e-9)


def test_committed_figures_exist() -> None:
    """The report and the README link these; `nox -s figures` writes them."""
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
                              "--only", "scaling", "--only", "processes",
                              "--only", "tcgrads"]) == 0  # fmt: skip
    for stem in DRAWN:
        for suffix in (".png", ".pdf"):
            path = first / f"{stem}{suffix}"
            assert path.stat().st_size > 10_000, path
    assert make_figures.main(["--out", str(second), "--only", "accuracy"]) == 0
    for suffix in (".png", ".pdf"):
        name = f"accuracy-gamma{suffix}"
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_processes_figure_skips_without_its_csvs(tmp_path: Path, capsys) -> None:
    """A results folder without ``targets-processes/`` draws nothing and says so."""
    pytest.importorskip("matplotlib")
    from experiments.load import Results
    from figures.timings import figure_processes

    assert figure_processes(Results(tmp_path), tmp_path / "out") == []
    assert "SKIPPED" in capsys.readouterr().out


def test_processes_are_read_by_day_then_process(tmp_path: Path) -> None:
    """``targets-processes/<date>-process<P>.csv``: in date then process order (process 10
    after 9), no run numbers in the names; the committed folder follows the scheme."""
    from experiments.load import PROCESSES

    folder = tmp_path / PROCESSES
    folder.mkdir()
    for stem in ("2026-12-04-process1", "2026-12-03-process10", "2026-12-03-process9"):
        (folder / f"{stem}.csv").write_text("impl,N\nsdtw-fused,512\n")
    got = [(date, process) for date, process, _ in Results(tmp_path).processes()]
    assert got == [("2026-12-03", 9), ("2026-12-03", 10), ("2026-12-04", 1)]
    committed = Results(RESULTS).processes()
    assert committed, f"no {PROCESSES}/<date>-process<P>.csv in {RESULTS}"
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) for date, _, _ in committed)


def test_tc_grads_figure_skips_without_its_csv(tmp_path: Path, capsys) -> None:
    """A results folder without ``tc-grads-align/gradsizes.csv`` draws nothing and says so."""
    pytest.importorskip("matplotlib")
    from experiments.load import Results
    from figures.timings import figure_tc_grads

    assert figure_tc_grads(Results(tmp_path), tmp_path / "out") == []
    assert "SKIPPED" in capsys.readouterr().out


def _write_rows(path: Path, rows: list[dict[str, object]]) -> None:
    from experiments.results_csv import COLUMNS

    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in COLUMNS})


def test_beyond_figure_draws_memory_and_lengths(tmp_path: Path, capsys) -> None:
    """The figure of the memory and lengths sweeps: skipped without their CSVs; with them
    (rows made up here, in the harness's columns), the padded-batch ratios it draws are
    those of the rows, and a point that did not fit is named, not drawn."""
    pytest.importorskip("matplotlib")
    from figures.beyond import figure_beyond, lengths_ratios

    assert figure_beyond(Results(tmp_path), tmp_path / "out") == []
    assert "SKIPPED" in capsys.readouterr().out
    common = {"mode": "forward+backward", "D": 64, "M": 0, "gamma": 1, "dtype": "float32",
              "metric": "time_ms", "gpu": "test GPU", "git_sha": "0" * 40}  # fmt: skip
    memory = []
    for n in (1024, 4096, 16384):
        for impl, per_cell in (("sdtw-fused-full", 8), ("sdtw-fused-checkpoint", 0.75)):
            memory.append({**common, "sweep": "memory", "impl": impl, "B": 1, "N": n, "M": n,
                           "status": "ok", "median": n / 100,
                           "peak_mem_bytes": int(per_cell * n * n)})  # fmt: skip
    memory.append({**common, "sweep": "memory", "impl": "paper-fused", "B": 1, "N": 16384,
                   "M": 16384, "status": "skipped-memory"})  # fmt: skip
    lengths = []
    for B, N, padded in ((512, 512, 0.5), (32, 1024, 0.7)):
        for impl, t in (("sdtw-fused", 2.0), ("sdtw-fused-lengths", 2.0 * padded)):
            lengths.append({**common, "sweep": "lengths", "impl": impl, "B": B, "N": N, "M": N,
                            "status": "ok", "median": t})  # fmt: skip
    _write_rows(tmp_path / "memory.csv", memory)
    _write_rows(tmp_path / "lengths.csv", lengths)
    results = Results(tmp_path)
    paths = figure_beyond(results, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["beyond.pdf", "beyond.png"]
    ratios = lengths_ratios(results, "sdtw-fused", "sdtw-fused-lengths")
    assert ratios == [("B=512\nN=512", 0.5), ("B=32\nN=1024", 0.7)]
    assert lengths_ratios(results, "sdtw-unfused", "sdtw-unfused-lengths") == []


def test_tc_grads_points_follow_the_settings() -> None:
    """The figure's points: the settings the library picks (SMALL up to D = 64, LARGE
    above), the hinted series only where D is a multiple of 4, and D multiples of 16 in
    both Triton series (one kernel there)."""
    pytest.importorskip("matplotlib")
    from figures.timings import _tc_points

    def row(D, impl, us):
        return {"B": "32", "N": "512", "M": "512", "D": str(D), "impl": impl, "us": str(us)}

    rows = [row(24, "triton-small", 1), row(24, "triton-large", 2),
            row(24, "triton-small-no-hint", 3), row(72, "triton-small", 4),
            row(72, "triton-large", 5), row(32, "triton-small", 6),
            row(17, "triton-settings-rule", 7),
            row(8, "cublas-float32", 8), row(8, "cublas-float32", 9),
            {**row(24, "triton-small", 99), "N": "2048", "M": "2048"}]  # fmt: skip
    p = _tc_points(rows)
    assert p["hint"] == {24: 1.0, 72: 5.0, 32: 6.0}
    assert p["plain"] == {24: 3.0, 32: 6.0, 17: 7.0}
    assert p["cublas"] == {8: 9.0}


def test_beyond_targets_follow_their_rules() -> None:
    """Each target of the beyond-the-paper section is met or not by its rule, and one without
    its rows is "not measured" (rows made up here)."""
    from paper.beyond import targets

    def row(part, case, B, N, metric, value):
        return {"part": part, "case": case, "B": str(B), "N": str(N), "metric": metric,
                "value": str(value)}  # fmt: skip

    rows = [
        row("lengths", "lengths U[128,512]", 512, 512, "ratio", 0.55),
        row("lengths", "lengths U[128,512]", 32, 512, "ratio", 1.02),
        row("memory", "checkpoint", 32, 2048, "peak_MiB", 100),
        row("memory", "checkpoint", 32, 2048, "ms", 4.0),
        row("memory", "checkpoint / full", 32, 2048, "ratio", 1.2),
        row("memory", "checkpoint", 1, 65536, "peak_MiB", 900),
        row("memory", "checkpoint", 1, 65536, "ms", 600),
        row("lengths", "padded-vs-unpadded-pairs", 512, 512, "max_rel_err", 3e-8),
        row("lengths", "padded-vs-unpadded-pairs", 32, 512, "max_rel_err", 3e-8),
        row("memory", "checkpoint-vs-full", 32, 2048, "grad_rel_err", 6e-8),
        row("memory", "checkpoint-vs-full", 1, 65536, "grad_rel_err", 6e-8),
    ]
    got = [t.met for t in targets(rows)]
    assert got == [False, True, True, False, None]
    rows[1]["value"] = "0.99"
    rows[6]["value"] = "400"
    assert [t.met for t in targets(rows)] == [True, True, True, True, None]
    # a fast wrong answer meets nothing
    rows[7]["value"] = "0.1"
    rows[9]["value"] = "0.1"
    assert [t.met for t in targets(rows)] == [False, False, False, True, None]
    assert [t.met for t in targets([])] == [None] * 5
