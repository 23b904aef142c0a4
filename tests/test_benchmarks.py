"""pytest-benchmark suite: ours against the baselines, grouped by configuration.

Timing only happens with ``--benchmark-enable`` (``nox -s benchmark``); in the normal test run
(``--benchmark-disable``, set in pyproject.toml) each benchmark runs its callable once, so the
correctness assertion below is still exercised.  Every timed callable synchronises the device.

``nox -s benchmark`` saves each run under ``.benchmarks/<machine>/`` and compares with the last
saved run of the same machine, failing when a median is more than 20 % slower
(``--benchmark-compare-fail=median:20%``): 20 % is above the run-to-run spread we measured on the
H200 (p20-p80 within ~10 % for steps >= 1 ms) and far below the regressions worth catching.
"""

from __future__ import annotations

import pytest
import torch

from experiments.impls import IMPLS
from tests.conftest import SIMULATOR, randn, rel_err

GPU = torch.cuda.is_available() and not SIMULATOR
# (B, N, D) per device; small on the CPU so that the normal test run stays quick.
CONFIGS = {"cuda": [(32, 512, 64), (32, 2048, 64)], "cpu": [(8, 64, 8)]}
IMPLS_BY_DEVICE = {
    "cuda": ["sdtw-fused", "sdtw-unfused", "maghoumi-bmm", "paper-unfused", "torch"],
    "cpu": ["sdtw-cpu", "torch"],
}
DEVICE = "cuda" if GPU else "cpu"
CASES = [(impl, cfg) for cfg in CONFIGS[DEVICE] for impl in IMPLS_BY_DEVICE[DEVICE]]


def _sync() -> None:
    if GPU:
        torch.cuda.synchronize()


@pytest.mark.parametrize("impl,cfg", CASES, ids=[f"{i}-B{c[0]}-N{c[1]}-D{c[2]}" for i, c in CASES])
def test_benchmark_forward_backward(benchmark, rng, impl, cfg):
    B, N, D = cfg
    fn = IMPLS[impl]
    if N > (fn.max_len or N):
        pytest.skip(f"{impl} supports N <= {fn.max_len}")
    x = randn(rng, B, N, D, dtype=torch.float32, device=DEVICE).requires_grad_()
    y = randn(rng, B, N, D, dtype=torch.float32, device=DEVICE).requires_grad_()

    def step() -> torch.Tensor:
        x.grad = y.grad = None
        loss = fn.loss(x, y, 1.0)
        loss.sum().backward()
        _sync()
        return loss

    benchmark.group = f"fwd+bwd B={B} N=M={N} D={D} {DEVICE}"
    loss = benchmark.pedantic(step, rounds=5, warmup_rounds=1) if GPU else benchmark(step)
    # Correctness on the same input: float64 CPU path on the first two pairs.
    ref = IMPLS["sdtw-cpu"].loss(x[:2].detach().cpu().double(), y[:2].detach().cpu().double(), 1.0)
    assert rel_err(loss[:2], ref) < 1e-4


def test_saved_runs_name_the_commit_given_by_bench_git_sha(monkeypatch):
    """``tests.conftest.pytest_benchmark_update_commit_info``: ``BENCH_GIT_SHA`` and
    ``BENCH_GIT_DIRTY`` replace what git said (and its stale times); unset, git's stands."""
    from tests.conftest import pytest_benchmark_update_commit_info as update

    git_said = {"id": "stale", "dirty": True, "time": "t", "author_time": "t", "branch": "main"}
    info = dict(git_said)
    monkeypatch.delenv("BENCH_GIT_SHA", raising=False)
    update(None, info)
    assert info == git_said
    monkeypatch.setenv("BENCH_GIT_SHA", "0123abc")
    monkeypatch.setenv("BENCH_GIT_DIRTY", "false")
    update(None, info)
    assert info["id"] == "0123abc" and info["dirty"] is False and info["branch"] == "main"
    assert info["time"] is None and info["author_time"] is None
    monkeypatch.setenv("BENCH_GIT_DIRTY", "true")
    update(None, info)
    assert info["dirty"] is True
