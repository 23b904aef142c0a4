"""Shared parametrisation, tolerances and markers for the test suite."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

#: (B, N, M, D): N != M, odd, length 1, and just past the CUDA band/chunk size (32).
SHAPES = [(2, 5, 7, 3), (1, 1, 1, 2), (3, 1, 6, 2), (2, 6, 1, 1), (2, 9, 4, 5), (1, 33, 35, 2)]
#: Shapes for the (slow) CUDA simulator: one past every boundary, kept tiny.
SIM_SHAPES = [
    (2, 5, 7, 3),
    (1, 1, 1, 2),
    (2, 1, 33, 2),
    (1, 33, 1, 2),
    (1, 33, 40, 3),
    (1, 65, 34, 2),
    (1, 33, 40, 70),  # fused: D past several 16-feature staging passes, the last one partial
]
GAMMAS = [1.0, 0.1, 0.01, 0.001]
#: relative tolerance (norm of difference / norm of reference) per input dtype
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
# Without a GPU, Triton kernels run in Triton's interpreter (read when a kernel is defined;
# set before anything imports triton).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
TRITON_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"
requires_sim = pytest.mark.skipif(not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1")
requires_gpu = pytest.mark.skipif(
    SIMULATOR or not torch.cuda.is_available(), reason="needs a CUDA GPU (and no simulator)"
)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.detach().double().cpu()
    b = b.detach().double().cpu()
    denom = b.norm()
    if denom == 0:
        return float(a.norm())
    return float((a - b).norm() / denom)


# Parametrised cases that run in the slow session only (``nox -s slow``; CI runs both), to keep
# the default suite under CI's 6 minutes: repeats, in a subprocess, of what another case of the
# same test still runs in the default suite.
SLOW_CASES = frozenset(
    {
        "test_examples.py::test_examples_run_as_scripts_from_any_folder[barycenter.py-argv1]",
        "test_examples.py::test_examples_run_as_scripts_from_any_folder[forecasting.py-argv2]",
    }
)


@pytest.hookimpl(tryfirst=True)  # (before ``-m`` deselects by the marks)
def pytest_collection_modifyitems(config, items):
    """Marks the :data:`SLOW_CASES` slow; a listed case whose test function was collected but
    which is not among its cases (a renamed parameter) is a usage error, not a case that
    silently joins the default suite."""
    seen, functions = set(), set()
    for item in items:
        nodeid = item.nodeid.removeprefix("tests/")
        functions.add(nodeid.split("[")[0])
        if nodeid in SLOW_CASES:
            item.add_marker(pytest.mark.slow)
            seen.add(nodeid)
    narrowed = any("::" in arg for arg in config.args)  # (node ids given: some cases only)
    lost = sorted(c for c in SLOW_CASES - seen if c.split("[")[0] in functions)
    if lost and not narrowed:
        raise pytest.UsageError(f"tests/conftest.py SLOW_CASES names no collected case: {lost}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Show the ``rng`` seed of a failing test in its report, so the failure can be replayed."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for key, value in item.user_properties:
            if key == "seed":
                report.sections.append(("rng seed", str(value)))


def pytest_benchmark_update_commit_info(config, commit_info):
    """A saved pytest-benchmark run names the code's commit from ``BENCH_GIT_SHA`` (and
    ``BENCH_GIT_DIRTY``) when set, as ``experiments.provenance`` does: a copy of the tree sent
    to another machine may carry a stale ``.git`` (the GPU runner's did).  Give the saved file
    the same name with ``--benchmark-save=$BENCH_GIT_SHA`` (its automatic name asks git
    again)."""
    sha = os.environ.get("BENCH_GIT_SHA")
    if sha:
        commit_info["id"] = sha
        commit_info["dirty"] = os.environ.get("BENCH_GIT_DIRTY", "") == "true"
        commit_info["from"] = "BENCH_GIT_SHA"
        # (git's times there are the stale commit's)
        commit_info["time"] = commit_info["author_time"] = None


@pytest.fixture(autouse=True)
def _fresh_library_graphs():
    """Each test starts and ends without kept library CUDA graphs (sdtw.cuda._graphs), so
    that a test's memory and launch counts do not depend on the tests before it."""
    yield
    graphs = sys.modules.get("sdtw.cuda._graphs")
    if graphs is not None:
        graphs.clear_graphs()


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A fresh generator per test: fresh random inputs every run (seed printed on failure)."""
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


def randn(rng: np.random.Generator, *shape: int, dtype=torch.float64, device="cpu") -> torch.Tensor:
    return torch.as_tensor(rng.standard_normal(shape), dtype=dtype, device=device)
