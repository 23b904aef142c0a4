"""The benchmark harness (experiments/) on the CPU, at tiny sizes; no timing value is checked."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import sdtw
from experiments import barycenter, measure, run, runner, summary, timing
from experiments import results_csv as rcsv
from experiments.impls import FORWARD, FORWARD_BACKWARD, IMPLS, Impl
from experiments.sweeps import SWEEPS, Config, Sweep
from tests.conftest import requires_gpu

REPO = Path(__file__).resolve().parent.parent
QUICK = ["--quick", "--repeats", "2", "--budget-s", "0.01"]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _installed(names: tuple[str, ...]) -> list[str]:
    """``names`` without the optional peers that are not installed here."""
    return [n for n in names if IMPLS[n].unavailable is None or IMPLS[n].unavailable() is None]


@pytest.fixture(scope="module")
def cpu_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cpu")
    assert run.main(["--sweep", "cpu", "--out", str(out), *QUICK]) == 0
    return out / "cpu.csv"


@pytest.mark.slow  # (the quick cpu sweep with its peers: 20-30 s on 2 cores)
def test_cpu_sweep_writes_well_formed_csv(cpu_csv: Path) -> None:
    with cpu_csv.open(newline="") as f:
        assert next(csv.reader(f)) == rcsv.COLUMNS
    rows = _rows(cpu_csv)
    sweep = SWEEPS["cpu"]
    configs = sweep.grid("cpu", True)
    assert len(rows) == len(configs) * len(_installed(sweep.impls)) * len(sweep.modes)
    keys = {rcsv.key(r) for r in rows}
    assert len(keys) == len(rows)
    for r in rows:
        if r["impl"] == "aeon":  # the value only, and its absolute value
            assert r["status"] == ("ok" if r["mode"] == FORWARD else "unsupported"), r
            continue
        assert r["status"] == "ok", r
        assert r["metric"] == rcsv.METRIC
        assert all(r[c] for c in ("median", "p20", "p80", "repeats"))  # present, values unchecked
        assert r["peak_mem_bytes"] == "" and r["launches"] == ""  # CPU: not measured
        assert int(r["predicted_mem_bytes"]) > 0
        assert r["reference"] == "reference"
        assert float(r["rel_err_value"]) < 1e-5
        if r["mode"] == FORWARD_BACKWARD:
            assert float(r["rel_err_grad_x"]) < 1e-4 and float(r["rel_err_grad_y"]) < 1e-4
        else:
            assert r["rel_err_grad_x"] == r["rel_err_grad_y"] == ""


@pytest.mark.slow  # (the quick cpu sweep with its peers: 20-30 s on 2 cores)
def test_cpu_sweep_records_provenance(cpu_csv: Path) -> None:
    rows = _rows(cpu_csv)
    for r in rows:
        assert r["torch"] == torch.__version__
        assert r["numba"] and r["numpy"] and r["python"] and r["host"]
        assert r["git_sha"]
        assert r["device"] == "cpu" and r["sweep"] == "cpu"
        assert dt.datetime.fromisoformat(r["date_utc"]).tzinfo is not None


@pytest.mark.slow  # (the quick cpu sweep with its peers: 20-30 s on 2 cores)
def test_summary_names_every_impl(cpu_csv: Path) -> None:
    text = summary.summarize(cpu_csv)
    assert "median ms" in text
    for name in _installed(SWEEPS["cpu"].impls):
        assert name in text


@pytest.mark.parametrize(
    ("argv", "valid"),
    [
        (["--sweep", "no-such-sweep"], SWEEPS),
        (["--sweep", "cpu", "--impl", "no-such-impl"], IMPLS),
    ],
)
def test_unknown_name_lists_the_valid_ones(
    argv: list[str], valid: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        run.main([*argv, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in valid)
    assert not any(tmp_path.iterdir())


def test_impl_that_cannot_run_on_the_sweep_is_an_error(tmp_path: Path) -> None:
    if IMPLS["sdtw-fused"].runs_on("cpu"):
        pytest.skip("the CUDA simulator is on")
    with pytest.raises(SystemExit) as exc:
        run.main(["--sweep", "cpu", "--impl", "sdtw-fused", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert not any(tmp_path.iterdir())


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("gpu_sweep", ["paper-grid", "barycenter"])
def test_gpu_sweep_without_gpu_exits_nonzero_and_writes_nothing(
    gpu_sweep: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert run.main(["--sweep", "cpu", "--sweep", gpu_sweep, "--out", str(out)]) != 0
    assert "CUDA GPU" in capsys.readouterr().err
    assert not out.exists()


def test_resume_skips_rows_already_present(tmp_path: Path) -> None:
    argv = ["--sweep", "cpu", "--impl", "torch", "--out", str(tmp_path), *QUICK]
    assert run.main(argv) == 0
    path = tmp_path / "cpu.csv"
    full = _rows(path)
    # Drop the last two rows, as an interrupted run would have; --resume adds back just those.
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-2]))
    assert run.main([*argv, "--resume"]) == 0
    resumed = _rows(path)
    assert [rcsv.key(r) for r in resumed] == [rcsv.key(r) for r in full]
    assert resumed[:-2] == full[:-2]  # untouched
    # Nothing left to do: the file is not touched.
    before = path.read_bytes()
    assert run.main([*argv, "--resume"]) == 0
    assert path.read_bytes() == before


def test_dim_keeps_only_those_configurations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--sweep", "cpu", "--impl", "torch", "--out", str(tmp_path), *QUICK]
    assert run.main([*argv, "--dim", "3"]) == 0
    rows = _rows(tmp_path / "cpu.csv")
    expected = [c for c in SWEEPS["cpu"].grid("cpu", True) if c.D == 3]
    assert expected and len(rows) == len(expected) * len(SWEEPS["cpu"].modes)
    assert {r["D"] for r in rows} == {"3"}
    # A D the sweep does not have: said so, and nothing measured.
    assert run.main([*argv, "--dim", "999", "--resume"]) == 0
    assert "no configuration with D in [999]" in capsys.readouterr().err
    assert len(_rows(tmp_path / "cpu.csv")) == len(rows)


def test_time_limit_stops_cleanly_and_resume_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--sweep", "cpu", "--impl", "torch", "--out", str(tmp_path), *QUICK]
    assert run.main([*argv, "--time-limit-s", "0"]) == 0
    assert "INCOMPLETE" in capsys.readouterr().out
    assert not (tmp_path / "cpu.csv").exists()
    assert run.main([*argv, "--resume"]) == 0
    assert len(_rows(tmp_path / "cpu.csv")) == len(SWEEPS["cpu"].grid("cpu", True)) * 2


def test_memory_model_skips_impossible_configs(tmp_path: Path) -> None:
    huge = Config(B=4096, N=10**6, M=10**6, D=64)
    for name, impl in IMPLS.items():
        for mode in (FORWARD, FORWARD_BACKWARD):
            assert impl.peak_bytes(huge.B, huge.N, huge.M, huge.D, torch.float32, mode) > 0, name
    sweep = Sweep(
        "huge", "too big for any machine", "cpu", ("sdtw-cpu", "torch"), lambda d, q: [huge]
    )
    path, complete = runner.run_sweep(sweep, ["sdtw-cpu", "torch"], tmp_path, repeats=1)
    rows = _rows(path)
    assert complete and len(rows) == 4
    assert {r["status"] for r in rows} == {"skipped-memory"}
    assert all(int(r["predicted_mem_bytes"]) > 2**50 for r in rows)
    assert all(r["median"] == "" for r in rows)


def test_back_to_back_rows(tmp_path: Path) -> None:
    """A sweep with ``back_to_back`` writes a second row per measurement, metric
    ``time_ms_back_to_back``: the same point, its own positive time, no percentiles; a
    skipped point gets none; resume counts the pair as one measurement."""
    tiny = [Config(B=2, N=5, M=7, D=3), Config(B=4096, N=10**6, M=10**6, D=64)]
    sweep = Sweep("b2b", "back to back", "cpu", ("torch",), lambda d, q: tiny, back_to_back=True)
    path, complete = runner.run_sweep(sweep, ["torch"], tmp_path, repeats=3, budget_s=0.01)
    rows = _rows(path)
    assert complete and len(rows) == 2 * 2 + 2  # two modes; the huge point skipped
    ok = [r for r in rows if r["status"] == "ok"]
    assert [r["metric"] for r in ok] == [rcsv.METRIC, rcsv.BACK_TO_BACK] * 2
    for synced, b2b in zip(ok[::2], ok[1::2], strict=True):
        assert b2b["mode"] == synced["mode"] and b2b["repeats"] == synced["repeats"]
        assert float(b2b["median"]) > 0 and b2b["p20"] == b2b["p80"] == ""
        assert b2b["rel_err_value"] == synced["rel_err_value"] != ""
    assert {r["metric"] for r in rows if r["status"] == "skipped-memory"} == {rcsv.METRIC}
    path, complete = runner.run_sweep(sweep, ["torch"], tmp_path, repeats=3, resume=True)
    assert complete and len(_rows(path)) == len(rows)


def test_gates_length_limit_and_slow_oracle() -> None:
    cfg = Config(B=2, N=2048, M=2048, D=1)
    status, note, _ = measure.gate(IMPLS["maghoumi"], cfg, FORWARD_BACKWARD, "cuda")
    assert status == "unsupported" and "1024" in note
    status, _, _ = measure.gate(IMPLS["reference"], cfg, FORWARD, "cpu")
    assert status == "skipped-slow"


def test_failures_become_statuses() -> None:
    assert measure.classify(torch.cuda.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert measure.classify(RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")) == "launch-failed"
    assert measure.classify(ValueError("max(N, M) = 2048 exceeds")) == "unsupported"
    assert measure.classify(ZeroDivisionError()) == "error"

    def broken(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
        raise ValueError("length 13 exceeds this design's limit")

    impl = Impl("broken", broken, "any", IMPLS["torch"].peak_bytes)
    cfg = Config(B=2, N=13, M=13, D=2)
    x, y = timing.make_inputs(cfg, "cpu")
    (row,) = measure.measure_group(
        [impl], cfg, FORWARD, x, y, "cpu", lambda: measure.Oracle(""), 2, 0.01
    )
    assert row["status"] == "unsupported" and "limit" in row["note"]


def test_group_times_its_implementations_in_turn() -> None:
    """``measure_group``: every implementation is warmed up and instrumented first, in
    order, then the timed steps go round robin (one step of each per round, a slower one
    dropping out when it has its own, smaller number of steps); one failing in its timed
    steps gets its status and leaves the others' rows as they are."""
    calls: list[str] = []
    torch_loss = IMPLS["torch"].loss

    def fake(name: str, sleep: float = 0.0, fail_at: int | None = None):
        def loss(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
            calls.append(name)
            if fail_at is not None and calls.count(name) == fail_at:
                raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
            time.sleep(sleep)
            return torch_loss(x, y, gamma)

        return Impl(name, loss, "any", IMPLS["torch"].peak_bytes)

    cfg = Config(B=2, N=6, M=5, D=2)
    x, y = timing.make_inputs(cfg, "cpu")
    oracle = measure.compute_oracle(x, y, cfg.gamma, "cpu")
    group = [fake("a"), fake("slow", sleep=0.08), fake("b", fail_at=4)]
    rows = measure.measure_group(group, cfg, FORWARD, x, y, "cpu", lambda _: oracle, 5, 0.2)
    # warm-up + instrumented step each, then rounds: "slow" gets 3 steps (its step takes
    # ~80 ms of a 0.2 s budget), "b" fails at its second timed step
    assert calls[:6] == ["a", "a", "slow", "slow", "b", "b"]
    assert calls[6:] == ["a", "slow", "b", "a", "slow", "b", "a", "slow", "a", "a"]
    a, slow, b = rows
    assert a["status"] == slow["status"] == "ok" and (a["repeats"], slow["repeats"]) == (5, 3)
    assert b["status"] == "launch-failed" and "median" not in b
    assert a["rel_err_value"] <= 1e-6 and slow["rel_err_value"] <= 1e-6


def test_graph_replays_are_timed_in_turn_among_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_config`` times the eager implementations of a mode in turn among themselves and
    the whole-step graph replays in a group of their own after them, each group in the
    sweep's order, and writes every implementation's row."""
    groups: list[list[str]] = []

    def recorder(impls, cfg, mode, *args, **kwargs):
        groups.append([impl.name for impl in impls])
        return [{"median": float(len(groups))} for _ in impls]

    monkeypatch.setattr(runner, "measure_group", recorder)
    fake = {
        name: dataclasses.replace(IMPLS["torch"], name=name, graphed=graphed)
        for name, graphed in (("e1", False), ("g1", True), ("e2", False), ("g2", True))
    }
    monkeypatch.setattr(runner, "IMPLS", {**runner.IMPLS, **fake})
    written: list[dict] = []

    class Bar:
        def update(self) -> None: ...

        def set_postfix_str(self, *args, **kwargs) -> None: ...

    points = [(name, FORWARD) for name in ("g1", "e1", "g2", "e2")]
    done = runner.run_config(
        SWEEPS["cpu"],
        Config(B=2, N=6, M=5, D=2),
        points,
        "cpu",
        written.extend,
        Bar(),
        3,
        0.1,
        1,
        None,
    )
    assert done and groups == [["e1", "e2"], ["g1", "g2"]]
    assert {r["impl"]: r["median"] for r in written} == {"e1": 1.0, "e2": 1.0, "g1": 2.0, "g2": 2.0}
    assert runner.turn_groups(["g1", "g2"]) == [["g1", "g2"]] and runner.turn_groups([]) == []


def test_graphed_impls_need_a_real_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA-graph rows run on a real GPU only (the simulator has no graphs), and the
    targets sweep times them next to the eager steps."""
    names = ("sdtw-fused-graph", "sdtw-unfused-graph")
    for sim in ("0", "1"):
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", sim)
        for name in names:
            assert IMPLS[name].graphed and not IMPLS[name].runs_on("cpu")
            assert IMPLS[name].runs_on("cuda") == (sim == "0")
    assert set(names) <= set(SWEEPS["targets"].impls)


def test_nograph_impls_turn_library_graphs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``-nograph`` rows call ``softdtw`` with the library's CUDA graphs off and turn
    them back on after (also when the call fails); the targets sweep times them too."""
    import sdtw
    import sdtw.cuda

    seen = []

    def fake(x, y, **kw):
        seen.append((sdtw.cuda.graphs_enabled(), kw["fused"], kw["backend"]))
        if len(seen) == 2:
            raise RuntimeError("boom")
        return x

    monkeypatch.setattr(sdtw, "softdtw", fake)
    sdtw.cuda.set_graphs(True)
    x = torch.zeros(1, 2, 3)
    assert IMPLS["sdtw-fused-nograph"].loss(x, x, 1.0) is x
    with pytest.raises(RuntimeError, match="boom"):
        IMPLS["sdtw-unfused-nograph"].loss(x, x, 1.0)
    assert seen == [(False, True, "cuda"), (False, False, "cuda")]
    assert sdtw.cuda.graphs_enabled()
    assert {"sdtw-fused-nograph", "sdtw-unfused-nograph"} <= set(SWEEPS["targets"].impls)


@requires_gpu
@pytest.mark.cuda
def test_gpu_graphed_step_rows() -> None:
    """``_graph_step`` through ``measure_group``: ok rows whose outputs (from a replay) match the
    float64 reference, with the kernels captured in the graph counted once."""
    cfg = Config(B=3, N=40, M=33, D=4)
    x, y = timing.make_inputs(cfg, "cuda")
    oracle = measure.compute_oracle(x, y, cfg.gamma, "cuda")
    launches = {("fused", FORWARD): 1, ("unfused", FORWARD): 2}
    for path in ("fused", "unfused"):
        for mode in (FORWARD, FORWARD_BACKWARD):
            impl = IMPLS[f"sdtw-{path}-graph"]
            (row,) = measure.measure_group(
                [impl], cfg, mode, x, y, "cuda", lambda _: oracle, 3, 0.1
            )
            assert row["status"] == "ok", row
            assert row["launches"] == launches.get((path, mode), 3)
            errs = [row["rel_err_value"]]
            if mode == FORWARD_BACKWARD:
                errs += [row["rel_err_grad_x"], row["rel_err_grad_y"]]
            assert max(errs) <= 1e-4, row


@pytest.mark.cudasim
def test_launches_are_counted_under_the_simulator(tmp_path: Path) -> None:
    # The CUDA baselines in Numba's simulator (CPU tensors), one tiny config, in a fresh process
    # (the simulator must be on before numba is imported).
    script = (
        "import sys; from pathlib import Path; from experiments import runner; "
        "from experiments.sweeps import Config, Sweep; "
        "s = Sweep('sim', '', 'cpu', (), lambda d, q: [Config(2, 5, 4, 3)]); "
        "runner.run_sweep(s, ['paper-fused', 'maghoumi-bmm'], Path(sys.argv[1]), repeats=1)"
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True, cwd=REPO)
    rows = {(r["impl"], r["mode"]): r for r in _rows(tmp_path / "sim.csv")}
    assert {r["status"] for r in rows.values()} == {"ok"}
    diagonals = 5 + 4 - 1
    assert rows["paper-fused", FORWARD]["launches"] == str(diagonals)
    assert rows["paper-fused", FORWARD_BACKWARD]["launches"] == str(2 * diagonals)
    assert rows["maghoumi-bmm", FORWARD]["launches"] == "1"
    assert rows["maghoumi-bmm", FORWARD_BACKWARD]["launches"] == "2"
    assert float(rows["paper-fused", FORWARD_BACKWARD]["rel_err_grad_x"]) < 1e-4


# --------------------------------------------------------------------------------------------
# The barycenter sweep
# --------------------------------------------------------------------------------------------


def test_barycenter_sweep_writes_well_formed_rows(tmp_path: Path) -> None:
    # The GPU sweep's quick grid on the CPU, with the implementations that run there.
    sweep = dataclasses.replace(SWEEPS["barycenter"], device="cpu")
    impls = ["sdtw-cpu", "torch"]  # ours through the library, a baseline through the loop
    path, complete = runner.run_sweep(sweep, impls, tmp_path, repeats=2, budget_s=0.01, quick=True)
    assert complete
    with path.open(newline="") as f:
        assert next(csv.reader(f)) == rcsv.COLUMNS
    rows = _rows(path)
    configs = sweep.grid("cpu", True)
    per_point = sum(len(barycenter.METRICS[mode]) for mode in sweep.modes)
    assert len(rows) == len(configs) * len(impls) * per_point
    assert len({(rcsv.key(r), r["metric"]) for r in rows}) == len(rows)
    value = {(r["impl"], r["mode"], r["metric"]): float(r["median"]) for r in rows}
    for r in rows:
        assert r["status"] == "ok", r
        assert r["sweep"] == "barycenter" and r["device"] == "cpu" and r["git_sha"]
        assert r["metric"] in barycenter.METRICS[r["mode"]]
        assert math.isfinite(float(r["median"])) and int(r["predicted_mem_bytes"]) > 0
        if r["metric"] == "ms_per_iter":
            assert r["p20"] and r["p80"] and int(r["repeats"]) >= 2
    max_iter = barycenter.QUICK_MAX_ITER
    for impl in impls:
        assert value[impl, barycenter.NO_EARLY_STOP, "iterations"] == max_iter
        assert 1 <= value[impl, barycenter.EARLY_STOP, "iterations"] <= max_iter
        assert value[impl, barycenter.ITERATION, "ms_per_iter"] > 0
    # One algorithm on the same data: the objectives agree across implementations.
    objectives = [value[impl, barycenter.NO_EARLY_STOP, "objective"] for impl in impls]
    assert objectives[1] == pytest.approx(objectives[0], rel=1e-4)
    assert "ms_per_iter" in summary.summarize(path)


def test_barycenter_failure_becomes_a_status_row() -> None:
    def broken(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
        raise ValueError("length 10 exceeds this design's limit")

    impl = Impl("broken", broken, "any", IMPLS["torch"].peak_bytes)
    cfg = SWEEPS["barycenter"].grid("cpu", True)[0]
    X = measure.barycenter_inputs(cfg, "cpu")
    for mode in barycenter.MODES:
        (row,) = measure.measure_barycenter(impl, cfg, mode, X, "cpu", 2, 0.01, 3)
        assert row["status"] == "unsupported" and "limit" in row["note"]
        assert row["metric"] == barycenter.METRICS[mode][0]


def test_barycenter_solve_is_warmed_up_by_a_short_solve() -> None:
    """Before the timed solve, a short solve of the same kind runs its calls once (a solve
    that runs out of iterations ends with an objective without gradients, which may compile
    a kernel of its own); the timed solve is the last, with the sweep's ``max_iter``."""
    calls: list[tuple[int, bool]] = []
    torch_impl = IMPLS["torch"]

    def recording(X: torch.Tensor, gamma: float, max_iter: int, early: bool) -> list[float]:
        calls.append((max_iter, early))
        return [3.0, 2.0, 1.0][: max_iter + 1]

    impl = dataclasses.replace(torch_impl, name="rec", barycenter=recording)
    cfg = SWEEPS["barycenter"].grid("cpu", True)[0]
    X = measure.barycenter_inputs(cfg, "cpu")
    for mode, early in ((barycenter.EARLY_STOP, True), (barycenter.NO_EARLY_STOP, False)):
        calls.clear()
        rows = measure.measure_barycenter(impl, cfg, mode, X, "cpu", 2, 0.01, 7)
        assert calls == [(measure.SOLVE_WARMUP, early), (7, early)]
        assert {r["metric"]: r["median"] for r in rows}["iterations"] == 2
        assert all(r["status"] == "ok" for r in rows)


def test_adam_loop_follows_the_library() -> None:
    # The loop that runs the paper's design is sdtw.softdtw_barycenter's, given sdtw's loss.
    from sdtw import softdtw_barycenter

    X = barycenter.square_waves(5, 12, 2, dtype=torch.float64)
    options = {"gamma": 0.1, "max_iter": 40, "patience": 3, "tol": 1e-3}
    for early_stopping in (True, False):
        Z, history = barycenter.adam_barycenter(
            IMPLS["sdtw-cpu"].loss, X, early_stopping=early_stopping, **options
        )
        expected_Z, expected = softdtw_barycenter(
            X, early_stopping=early_stopping, backend="cpu", return_history=True, **options
        )
        steps = len(expected) - 1
        assert (steps < 40) if early_stopping else (steps == 40)
        # The library's weights 1/S are rounded to float32 first: a relative 1e-8 on F.
        assert history == pytest.approx(expected.tolist(), rel=1e-7)
        assert torch.allclose(Z, expected_Z, rtol=0, atol=1e-10)


def test_optional_peers_agree_with_the_reference_or_say_why_not() -> None:
    """tslearn / pysdtw are extra columns only when importable; when they run, they must agree."""
    for name in ("tslearn", "pysdtw"):
        impl = IMPLS[name]
        reason = impl.unavailable()
        if reason is not None:
            assert name in reason
            continue
        if not impl.runs_on("cpu"):
            continue
        gen = torch.Generator().manual_seed(3)
        x = torch.randn(2, 7, 3, dtype=torch.float64, generator=gen, requires_grad=True)
        y = torch.randn(2, 5, 3, dtype=torch.float64, generator=gen)
        ref = IMPLS["reference"].loss(x, y, 0.1)
        out = impl.loss(x, y, 0.1)
        # tslearn's gradient differs from float64 by ~3e-6 relative (its backward is not
        # float64 throughout), so the bar is the harness's accuracy scale, not 1e-9.
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-6)
        g_ref = torch.autograd.grad(ref.sum(), x)[0]
        g = torch.autograd.grad(out.sum(), x)[0]
        torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)


def test_aeon_peer_gives_the_absolute_value_and_no_gradient() -> None:
    """aeon's soft-DTW, when installed: the reference's value where it is positive, its
    absolute value where not (aeon returns ``abs``), and a ``ValueError`` (status
    ``unsupported``) for inputs that need a gradient; not installed, the reason says how to
    install it."""
    impl = IMPLS["aeon"]
    reason = impl.unavailable()
    if reason is not None:
        assert "aeon" in reason and "pip install" in reason
        pytest.skip(reason)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 7, 2, dtype=torch.float64, generator=gen)
    y = torch.randn(3, 5, 2, dtype=torch.float64, generator=gen)
    x[2], y[2] = 1e-2 * x[2], 1e-2 * y[2]
    ref = IMPLS["reference"].loss(x, y, 1.0)
    assert (ref[:2] > 0).all() and ref[2] < 0  # the close pair: soft-DTW below zero
    torch.testing.assert_close(impl.loss(x, y, 1.0), ref.abs(), rtol=1e-9, atol=1e-12)
    status = measure.classify(_raised(impl.loss, x.requires_grad_(), y, 1.0))
    assert status == "unsupported"


def _raised(fn, *args) -> BaseException:
    with pytest.raises(Exception) as exc:
        fn(*args)
    return exc.value


def test_unavailable_peer_is_left_out_with_a_note() -> None:
    peer = dataclasses.replace(IMPLS["tslearn"], unavailable=lambda: "not installed here")
    sweep = SWEEPS["cpu"]
    saved = IMPLS["tslearn"]
    IMPLS["tslearn"] = peer
    try:
        chosen, notes = run.choose_impls(sweep, None, "cpu")
    finally:
        IMPLS["tslearn"] = saved
    assert "tslearn" not in chosen
    assert any("tslearn: not installed here" in n for n in notes)


def test_sanitizer_cases_cover_every_variant_and_list_without_a_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from experiments import sanitize_case
    from sdtw.cuda.kernels import geometry

    every = sanitize_case.cases()
    # one warp and movers; mode tiled forced only with the movers
    assert {c.two for c in every} == {False, True}
    assert all(c.two for c in every if c.tiled)
    assert sum(c.tiled for c in every) == 1
    sweep = [c for c in every if c.sweep]
    assert all(c.two and c.dtype == torch.float32 for c in sweep)
    assert all(c.D <= geometry.SWEEP_MAX_D for c in sweep)
    assert {c.fused for c in sweep} == {False, True}
    # every variant of the gradient warp (by feature tiles)
    assert {geometry.sweep_tiles(c.D) for c in sweep} == set(geometry.SWEEP_TILES)
    # and g_y's paired reductions on whole chunks (D = 8 nt, D a multiple of 8; M = 45 > 32),
    # for each variant
    assert {geometry.sweep_tiles(c.D) for c in sweep if c.D % 8 == 0} == set(geometry.SWEEP_TILES)
    assert {c.dtype for c in every} == {torch.float32, torch.float64}
    # the per-pair lengths kernels and the checkpointed mode, with one warp and the movers
    for kind in ("lengths", "checkpoint"):
        assert {c.two for c in every if getattr(c, kind)} == {False, True}
        assert {c.dtype for c in every if getattr(c, kind)} == {torch.float32, torch.float64}
    assert {c.dtype for c in every if c.two and not c.sweep} == {torch.float32, torch.float64}
    # the other recurrences' kernels, with and without lengths
    assert {c.measure for c in every} == {"softdtw", "dtw", "softmsm"}
    for kind in ("dtw", "softmsm"):
        assert {c.lengths for c in every if c.measure == kind} == {False, True}
    # each case's overrides are ones that sdtw.cuda.config.overrides takes
    from sdtw.cuda.config import overrides

    for case in every:
        with overrides(**case.forced()) as forced:
            assert forced.sweep_grads == case.sweep
            assert forced.mover == forced.backward_mover == case.two
    assert sanitize_case.cases(only_mover=True) == [c for c in every if c.two]
    sanitize_case.main(["--list"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(every) and lines[0].startswith("0: one warp, fused")
    with pytest.raises(SystemExit):
        sanitize_case.main(["--case", str(len(every))])


def _probe_names() -> list[str]:
    import pkgutil

    from experiments import probes

    return sorted(m.name for m in pkgutil.iter_modules(probes.__path__))


@pytest.mark.parametrize("name", _probe_names())
def test_probe_parses_its_command_line_and_needs_a_gpu(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m experiments.probes.NAME --help`` shows the probe's question without a GPU;
    where there is none, ``main([])`` returns 2 and says why."""
    import importlib

    probe = importlib.import_module(f"experiments.probes.{name}")
    with pytest.raises(SystemExit) as exc:
        probe.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert f"python -m experiments.probes.{name}" in out
    assert probe.__doc__.splitlines()[0] in out
    if torch.cuda.is_available():
        return
    assert probe.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_probes_are_the_open_questions() -> None:
    assert _probe_names() == [
        "allpairs",
        "first_call",
        "kernels",
        "lengths",
        "memory",
        "msm",
        "step",
        "tc_rule",
    ]


def test_the_harness_uses_public_sdtw_names_only() -> None:
    """No private sdtw name (``sdtw._x``, ``sdtw.cuda._x``, ``from sdtw.cuda import _x``, the
    removed ``pairwise_cost``) in the harness's, baselines', figures', report's or examples'
    code."""
    import re

    private = re.compile(
        r"sdtw(\.\w+)*\._[a-z]|from sdtw[.\w]* import [^\n]*\b_[a-z]|pairwise_cost"
    )
    files = [
        path
        for folder in ("experiments", "baselines", "figures", "paper", "examples")
        for path in sorted((REPO / folder).rglob("*.py"))
    ]
    hits = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert not hits, "\n".join(hits)


@pytest.mark.slow  # (the quick cpu sweep with its peers: 20-30 s on 2 cores)
def test_merge_replaces_matching_rows_and_keeps_the_rest(tmp_path: Path) -> None:
    from experiments import merge

    old, new = tmp_path / "old", tmp_path / "new"
    argv = ["--sweep", "cpu", "--impl", "torch", "--impl", "sdtw-cpu", *QUICK]
    assert run.main([*argv, "--out", str(old)]) == 0
    assert run.main([*argv, "--dim", "3", "--out", str(new)]) == 0
    before, fresh = _rows(old / "cpu.csv"), _rows(new / "cpu.csv")
    for r in fresh:  # mark them, to see which rows came from where
        r["note"] = "fresh"
    with (new / "cpu.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=rcsv.COLUMNS)
        writer.writeheader()
        writer.writerows(fresh)
    # Only sdtw-cpu's rows of the new run: those replace theirs, in place.
    assert merge.merge(new / "cpu.csv", old / "cpu.csv", impls=["sdtw-cpu"]) == (
        sum(r["impl"] == "sdtw-cpu" for r in fresh),
        0,
    )
    after = _rows(old / "cpu.csv")
    assert [rcsv.key(r) for r in after] == [rcsv.key(r) for r in before]
    for b, a in zip(before, after, strict=True):
        replaced = b["impl"] == "sdtw-cpu" and b["D"] == "3"
        assert (a["note"] == "fresh") == replaced
        if not replaced:
            assert a == b
    # A row the old file lacks is added at the end; CRLF lines as experiments.run writes.
    extra = dict(fresh[0], B="999")
    with (new / "cpu.csv").open("a", newline="") as f:
        csv.DictWriter(f, fieldnames=rcsv.COLUMNS).writerow(extra)
    assert merge.merge(new / "cpu.csv", old / "cpu.csv", modes=[extra["mode"]])[1] == 1
    assert _rows(old / "cpu.csv")[-1]["B"] == "999"
    assert (old / "cpu.csv").read_bytes().count(b"\r\n") == len(after) + 2


# --------------------------------------------------------------------------------------------
# The lengths and memory sweeps (ours, under the simulator)
# --------------------------------------------------------------------------------------------


def test_padded_lengths_are_fixed_by_the_shape_and_in_range() -> None:
    from experiments.impls import padded_lengths

    xl, yl = padded_lengths(64, 512, 100)
    assert (xl, yl) == padded_lengths(64, 512, 100)
    assert min(xl) >= 128 and max(xl) <= 512 and min(yl) >= 25 and max(yl) <= 100
    assert len(set(xl)) > 10  # drawn, not constant
    assert padded_lengths(1, 1, 1) == ([1], [1])


# (a fused step takes about 12 s in the simulator, whose threads poll each other: slow)
@pytest.mark.slow
@pytest.mark.cudasim
@pytest.mark.parametrize(
    ("name", "impls"),
    [
        ("lengths", ["sdtw-fused", "sdtw-fused-lengths"]),
        ("memory", ["sdtw-fused-full", "sdtw-fused-checkpoint"]),
    ],
)
def test_lengths_and_memory_sweeps_under_the_simulator(
    tmp_path: Path, name: str, impls: list[str]
) -> None:
    # The GPU sweeps' quick grids, ours in Numba's simulator, in a fresh process.
    assert set(impls) <= set(SWEEPS[name].impls)
    script = (
        "import dataclasses, sys; from pathlib import Path; from experiments import runner; "
        "from experiments.sweeps import SWEEPS; "
        f"s = dataclasses.replace(SWEEPS['{name}'], device='cpu'); "
        f"runner.run_sweep(s, {impls!r}, Path(sys.argv[1]), repeats=1, budget_s=0.01, quick=True)"
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True, cwd=REPO)
    rows = {r["impl"]: r for r in _rows(tmp_path / f"{name}.csv")}
    assert sorted(rows) == sorted(impls)
    for r in rows.values():
        assert r["status"] == "ok", r
        assert r["mode"] == FORWARD_BACKWARD and r["reference"] == "reference", r
        for column in ("rel_err_value", "rel_err_grad_x", "rel_err_grad_y"):
            assert float(r[column]) < 1e-5, r
    if name == "lengths":
        # A padded batch is a different loss: the full-length rows' values would not match
        # its reference, so each row was compared with a reference of its own lengths.
        from experiments.impls import padded_lengths

        B, N, M = (int(rows["sdtw-fused"][c]) for c in "BNM")
        xl, yl = padded_lengths(B, N, M)
        assert min(xl) < N or min(yl) < M
    else:
        full, ckpt = rows["sdtw-fused-full"], rows["sdtw-fused-checkpoint"]
        assert int(ckpt["predicted_mem_bytes"]) < int(full["predicted_mem_bytes"])


def test_reference_of_a_padded_batch_is_each_pair_at_its_length() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(3, 8, 2), torch.randn(3, 6, 2)
    lengths = ([8, 3, 5], [2, 6, 1])
    ref = measure.compute_oracle(x, y, 0.5, "cpu", lengths)
    full = measure.compute_oracle(x, y, 0.5, "cpu")
    for b, (n, m) in enumerate(zip(*lengths, strict=True)):
        xb = x[b : b + 1, :n].double().requires_grad_()
        yb = y[b : b + 1, :m].double().requires_grad_()
        value = sdtw.softdtw(xb, yb, gamma=0.5, backend="reference")
        value.sum().backward()
        torch.testing.assert_close(ref.value[b], value[0].detach(), rtol=1e-12, atol=0)
        torch.testing.assert_close(ref.grad_x[b, :n], xb.grad[0], rtol=1e-10, atol=1e-12)
        assert not ref.grad_x[b, n:].any() and not ref.grad_y[b, m:].any()
    assert not torch.equal(ref.value, full.value)


@pytest.mark.slow  # (two child processes import torch and sdtw)
def test_msm_speed_in_several_processes_pools_their_rounds(capsys) -> None:
    from experiments import msm_speed

    assert msm_speed.main(["--rounds", "2", "--processes", "2", "--sizes", "8"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if "per process" in s)
    assert len(line.split(":")[1].split(",")) == 2
    with pytest.raises(SystemExit):
        msm_speed.main(["--processes", "0"])


def test_msm_speed_takes_a_dtype_and_says_when_cuda_is_missing(capsys) -> None:
    from experiments import msm_speed

    assert msm_speed.main(["--rounds", "1", "--sizes", "6", "--dtype", "float32"]) == 0
    assert "float32 on cpu" in capsys.readouterr().out
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            msm_speed.main(["--device", "cuda", "--sizes", "6"])
        assert "needs a CUDA GPU" in capsys.readouterr().err
