"""The harness's files: a results CSV that survives a crash and resumes to the full sweep,
committed results written only when asked, and failures before anything is measured."""

from __future__ import annotations

import io
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments import provenance, run, runner
from experiments import results_csv as rcsv
from experiments.sweeps import Config, Sweep

pd = pytest.importorskip("pandas")

REPO = Path(__file__).resolve().parent.parent
QUICK = ["--quick", "--repeats", "2", "--budget-s", "0.01"]
#: A back-to-back sweep writes two rows per measurement: a crash can fall between them.
GRID = [Config(2, n, n + 1, 2) for n in (3, 4, 5)]
PAIRS = Sweep(
    "pairs", "tiny, two rows each", "cpu", ("torch",), lambda d, q: GRID, back_to_back=True
)


def _expected(sweep: Sweep, impls: list[str], quick: bool = False) -> set[tuple]:
    """(key, metric) of every row a complete run of ``sweep`` writes (all measurements ok)."""
    metrics = [rcsv.METRIC, rcsv.BACK_TO_BACK] if sweep.back_to_back else [rcsv.METRIC]
    return {
        (rcsv.key({"impl": impl, "mode": mode, **vars(cfg)}), metric)
        for cfg in sweep.grid("cpu", quick)
        for impl in impls
        for mode in sweep.modes
        for metric in metrics
    }


def _check_complete(path: Path, sweep: Sweep, impls: list[str], quick: bool = False) -> None:
    """pandas parses ``path``; every row of a complete run is there once, and nothing else."""
    df = pd.read_csv(path)
    assert list(df.columns) == rcsv.COLUMNS
    assert (df["status"] == "ok").all(), df[df["status"] != "ok"]
    seen = [(rcsv.key(row), row["metric"]) for row in df.to_dict("records")]
    assert len(seen) == len(set(seen)), "duplicate rows"
    assert set(seen) == _expected(sweep, impls, quick)


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a complete run of :data:`PAIRS`."""
    out = tmp_path_factory.mktemp("full")
    path, complete = runner.run_sweep(PAIRS, ["torch"], out, repeats=2, budget_s=0.01)
    assert complete
    _check_complete(path, PAIRS, ["torch"])
    return path.read_bytes()


def _cut(data: bytes, row: int, where: str) -> bytes:
    """``data`` cut inside line ``row`` (0: the header): ``"key"`` in its key columns,
    ``"middle"`` halfway, ``"cr"`` between its CR and LF (every field there)."""
    lines = data.split(b"\r\n")
    start = sum(len(line) + 2 for line in lines[:row])
    line = lines[row]
    offset = {"key": line.index(b",", line.index(b",") + 1) + 3, "middle": len(line) // 2}
    return data[: start + offset.get(where, len(line) + 1)]


@pytest.mark.parametrize(
    ("row", "where"),
    [
        (-1, "middle"),  # the last row: the back-to-back row of the last measurement
        (-1, "key"),
        (-1, "cr"),  # all of its fields there, its line end not: still torn
        (-2, "middle"),  # the first row of a measurement: the whole pair goes
        (-2, "cr"),
        (0, "middle"),  # the header itself
    ],
)
def test_file_truncated_inside_a_row_resumes_to_the_full_sweep(
    full: bytes, row: int, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = full.count(b"\r\n")  # the header and the rows
    path = tmp_path / "pairs.csv"
    path.write_bytes(_cut(full, row if row >= 0 else lines + row, where))
    runner.run_sweep(PAIRS, ["torch"], tmp_path, repeats=2, budget_s=0.01, resume=True)
    _check_complete(path, PAIRS, ["torch"])
    assert "torn" in capsys.readouterr().err


def test_glued_and_unreadable_rows_are_dropped_and_measured_again(
    full: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torn row with the next one glued on (what an older harness left: 70 fields), and a
    row whose key cell is empty: dropped with a message naming the line, measured again."""
    lines = full.split(b"\r\n")
    lines[2] = lines[2][: len(lines[2]) // 2] + lines[3]  # torn, then the next row glued on
    fields = lines[5].split(b",")
    fields[3] = b""  # B
    lines[5] = b",".join(fields)
    path = tmp_path / "pairs.csv"
    path.write_bytes(b"\r\n".join(lines))
    runner.run_sweep(PAIRS, ["torch"], tmp_path, repeats=2, budget_s=0.01, resume=True)
    _check_complete(path, PAIRS, ["torch"])
    err = capsys.readouterr().err
    assert "line 3: malformed row" in err and "line 6: unreadable key" in err


def test_resume_measures_errors_again_unless_kept(
    full: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A measurement that ended in status ``error`` is measured again by ``--resume`` (its
    row replaced), or kept with ``retry_errors=False``; the rows skipped are named."""
    rows = pd.read_csv(io.StringIO(full.decode()), keep_default_na=False, dtype=str)
    first = rows.index[0]
    rows.loc[first, ["status", "note"]] = ["error", "RuntimeError: transient"]
    rows = rows.drop(index=rows.index[1])  # (a failed measurement has one row)
    path = tmp_path / "pairs.csv"
    rcsv.rewrite(path, rows.to_dict("records"))
    before = path.read_bytes()
    runner.run_sweep(
        PAIRS, ["torch"], tmp_path, repeats=2, budget_s=0.01, resume=True, retry_errors=False
    )
    assert path.read_bytes() == before
    out = capsys.readouterr().out
    assert f"{len(_expected(PAIRS, ['torch'])) // 2} measurements already in {path}" in out
    assert "  torch forward B=2 N=3 M=4 D=2 gamma=1 float32" in out
    runner.run_sweep(PAIRS, ["torch"], tmp_path, repeats=2, budget_s=0.01, resume=True)
    _check_complete(path, PAIRS, ["torch"])
    assert "measuring again (it ended in status error): torch" in capsys.readouterr().out


_DRIVER = """
import dataclasses, sys, time
from pathlib import Path
from experiments import runner
from experiments.impls import IMPLS
from experiments.sweeps import Config, Sweep

torch_loss = IMPLS["torch"].loss

def slow(x, y, gamma):
    time.sleep(0.01)
    return torch_loss(x, y, gamma)

IMPLS["slow"] = dataclasses.replace(IMPLS["torch"], name="slow", loss=slow)
grid = [Config(2, n, n, 2) for n in range(3, 11)]
sweep = Sweep("crash", "", "cpu", ("torch", "slow"), lambda d, q: grid, back_to_back=True)
runner.run_sweep(sweep, ["torch", "slow"], Path(sys.argv[1]), repeats=3, budget_s=0.01,
                 resume=sys.argv[2] == "resume")
"""


def test_sweep_killed_mid_run_resumes_to_the_full_sweep(tmp_path: Path) -> None:
    """SIGKILL while the sweep writes (after a few measurements, at a random one of them),
    then ``resume``: a CSV that pandas parses, every row once, none lost."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", _DRIVER, str(tmp_path)]
    path = tmp_path / "crash.csv"
    proc = subprocess.Popen([*cmd, "fresh"], env=env, cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (path.exists() and path.read_bytes().count(b"\n") >= 9):
            assert proc.poll() is None, "the sweep ended before it was killed"
            assert time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = path.read_bytes().count(b"\n")
    subprocess.run([*cmd, "resume"], env=env, cwd=REPO, check=True, capture_output=True)
    grid = [Config(2, n, n, 2) for n in range(3, 11)]
    sweep = Sweep("crash", "", "cpu", ("torch", "slow"), lambda d, q: grid, back_to_back=True)
    _check_complete(path, sweep, ["torch", "slow"])
    assert 9 <= killed < len(_expected(sweep, ["torch", "slow"])) + 1


def test_ctrl_c_keeps_the_rows_and_says_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C during a sweep: no traceback, exit status 130, the measurements finished so far
    kept, and a word on ``--resume``, which then finishes the file."""
    measure_group = runner.measure_group
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return measure_group(*args, **kwargs)

    monkeypatch.setattr(runner, "measure_group", interrupted)
    argv = ["--sweep", "cpu", "--impl", "torch", "--out", str(tmp_path), *QUICK]
    assert run.main(argv) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" in err and str(tmp_path / "cpu.csv") in err
    assert len(pd.read_csv(tmp_path / "cpu.csv")) == 2
    monkeypatch.setattr(runner, "measure_group", measure_group)
    assert run.main([*argv, "--resume"]) == 0
    _check_complete(tmp_path / "cpu.csv", run.SWEEPS["cpu"], ["torch"], quick=True)


# --------------------------------------------------------------------------------------------
# Where results go
# --------------------------------------------------------------------------------------------


def test_default_folder_is_local_and_git_ignored() -> None:
    out = provenance.default_out_dir()
    assert out.parent == provenance.LOCAL and out.name == provenance.machine_slug()
    assert not provenance.is_committed(out / "cpu.csv")
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", str(out / "cpu.csv")], cwd=REPO, check=False
    )
    if (REPO / ".git").exists():
        assert ignored.returncode == 0
    committed = provenance.RESULTS / "cpu-amd-epyc" / "cpu.csv"
    assert provenance.is_committed(committed)
    assert provenance.is_committed(provenance.RESULTS / "some-new-machine" / "cpu.csv")
    assert provenance.committed_dir() == provenance.RESULTS / provenance.machine_slug()


def test_committed_results_are_written_only_with_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    committed = provenance.RESULTS / "cpu-amd-epyc" / "cpu.csv"
    before = committed.read_bytes()
    argv = ["--sweep", "cpu", "--impl", "torch", *QUICK]
    assert run.main([*argv, "--out", str(committed.parent)]) == 2
    err = capsys.readouterr().err
    assert "committed" in err and "--replace-committed" in err and "Nothing was measured" in err
    assert committed.read_bytes() == before
    # With the flag it is written (a stand-in for a committed folder here).
    monkeypatch.setattr(run, "is_committed", lambda path: True)
    assert run.main([*argv, "--out", str(tmp_path)]) == 2
    assert run.main([*argv, "--out", str(tmp_path), "--replace-committed"]) == 0
    assert len(pd.read_csv(tmp_path / "cpu.csv")) == 2 * len(run.SWEEPS["cpu"].grid("cpu", True))


def test_end_of_run_says_where_how_noisy_and_against_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run ends with where its rows went, the p20-p80 spread, and the ratio to the
    committed numbers of this machine class on the measurements both have."""
    committed = tmp_path / "committed"
    committed.mkdir()
    argv = ["--sweep", "cpu", "--impl", "torch", "--out", str(tmp_path), *QUICK]
    monkeypatch.setattr(run, "committed_dir", lambda: committed)
    assert run.main(argv) == 0
    out = capsys.readouterr().out
    path = tmp_path / "cpu.csv"
    assert f"results: {2 * len(run.SWEEPS['cpu'].grid('cpu', True))} rows in {path}" in out
    assert "noise: cpu: p20-p80 spread" in out and "typical" in out
    assert "no committed results for this machine class" in out
    rows = pd.read_csv(path)
    rows["median"] *= 2
    rows.to_csv(committed / "cpu.csv", index=False)
    assert run.main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"this run / {committed / 'cpu.csv'} ({len(rows)} in common)" in out
    assert "torch          x0.50" in out


# --------------------------------------------------------------------------------------------
# Failing before measuring
# --------------------------------------------------------------------------------------------


@pytest.fixture
def nothing_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a sweep started")

    monkeypatch.setattr(run, "run_sweep", refuse)


def test_unwritable_output_fails_before_measuring(
    tmp_path: Path, nothing_measured: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # (as root, permission bits do not stop a write: a file where a folder must be does)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["--sweep", "cpu", "--impl", "torch", *QUICK]
    assert run.main([*argv, "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"--out {blocker / 'sub'}: cannot write" in err and "Nothing was measured" in err
    (tmp_path / "out" / "cpu.csv").mkdir(parents=True)  # the CSV's name taken by a folder
    assert run.main([*argv, "--out", str(tmp_path / "out"), "--resume"]) == 2
    assert "IsADirectoryError" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--budget-s", "nan"),
        ("--budget-s", "inf"),
        ("--budget-s", "-1"),
        ("--budget-s", "0"),
        ("--time-limit-s", "nan"),
        ("--time-limit-s", "inf"),
        ("--time-limit-s", "-1"),
        ("--repeats", "0"),
        ("--dim", "0"),
    ],
)
def test_bad_numbers_are_refused_with_the_flag_and_value(
    flag: str, value: str, tmp_path: Path, nothing_measured: None, capsys
) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--sweep", "cpu", "--out", str(tmp_path), flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value) in err
    assert not any(tmp_path.iterdir())


def test_keep_errors_needs_resume(tmp_path: Path, nothing_measured: None) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main(["--sweep", "cpu", "--out", str(tmp_path), "--keep-errors"])
    assert exc.value.code == 2


def test_appender_writes_whole_rows_and_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each measurement is one ``write`` followed by an ``fsync``; the header goes with the
    first one; floats keep 6 significant digits."""
    calls: list[str] = []
    write, fsync = os.write, os.fsync

    def recorded(name, fn):
        def call(*args):
            calls.append(name)
            return fn(*args)

        return call

    monkeypatch.setattr(os, "write", recorded("write", write))
    monkeypatch.setattr(os, "fsync", recorded("fsync", fsync))
    path = tmp_path / "x.csv"
    appender = rcsv.Appender(path, append=False)
    row = {c: "" for c in rcsv.COLUMNS} | {"impl": "a", "median": math.pi}
    appender.write([row, row])
    appender.write([row])
    appender.close()
    assert calls == ["write", "fsync", "write", "fsync"]
    text = path.read_bytes().decode()
    assert text.count("\r\n") == 4 and text.startswith(",".join(rcsv.COLUMNS) + "\r\n")
    assert ",3.14159," in text
