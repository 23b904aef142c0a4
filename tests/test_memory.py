"""The checkpointed mode (``memory="checkpoint"``): the full mode's values and gradients from
memory that grows like N + M, on the CPU (every segment size forced, down to one row) and on
the CUDA kernels (simulator: tile and band edges, lengths, the band); the memory model's
predicted peaks against measured ones; the ``memory`` argument's rule and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import sdtw
from sdtw import cpu_fused
from sdtw import memory as memory_model
from tests.conftest import randn, requires_gpu, requires_sim

REPO = Path(__file__).resolve().parent.parent
GAMMA = 0.4


def _both(rng, backend, B, N, M, D, dtype, tol, **kw):
    """The loss and the gradients (an upstream gradient other than ones) in the full and the
    checkpointed mode: the same to ``tol``; returns the checkpointed ones."""
    x, y = randn(rng, B, N, D, dtype=dtype), randn(rng, B, M, D, dtype=dtype)
    g = torch.linspace(0.5, 2.0, B, dtype=dtype)
    res = []
    for memory, be in (("full", "cpu"), ("checkpoint", backend)):
        xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = sdtw.softdtw(xr, yr, gamma=GAMMA, memory=memory, backend=be, **kw)
        (v * g).sum().backward()
        res.append((v.detach(), xr.grad, yr.grad))
    for a, b in zip(res[0], res[1], strict=True):
        np.testing.assert_allclose(b.double(), a.double(), rtol=tol, atol=tol)
    return res[1]


# --------------------------------------------------------------------------------------------
# CPU
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [1, 2, 3, 7, None, 1000])
@pytest.mark.parametrize(
    ("N", "M", "kw"),
    [
        (13, 9, {}),
        (9, 13, {"bandwidth": 2}),
        (11, 11, {"normalize": True, "bandwidth": 3}),
        (12, 10, {"x_lengths": [12, 5, 1], "y_lengths": [3, 10, 10]}),
        (10, 12, {"dist": "euclidean"}),
        (10, 12, {"dist": "l1", "x_lengths": [7, 10, 2]}),
    ],
)
def test_cpu_checkpoint_equals_full(rng, monkeypatch, K, N, M, kw):
    """Segments of K rows (one row, several, a last partial one, lengths ending inside one,
    band edges crossing them, one segment for the whole table)."""
    if K is not None:
        monkeypatch.setattr(cpu_fused, "segment_rows", lambda N, M, budget=None: min(K, N))
    _both(rng, "cpu", 3, N, M, 3, torch.float64, 1e-12, **kw)


def test_cpu_checkpoint_float32_and_segment_sizes_agree_bit_for_bit(rng, monkeypatch):
    x, y = randn(rng, 2, 17, 2, dtype=torch.float32), randn(rng, 2, 14, 2, dtype=torch.float32)
    got = []
    for K in (1, 4, 17):
        monkeypatch.setattr(cpu_fused, "segment_rows", lambda N, M, budget=None, K=K: K)
        xr = x.clone().requires_grad_()
        v = sdtw.softdtw(xr, y, memory="checkpoint", backend="cpu", bandwidth=5)
        v.sum().backward()
        got.append((v.detach(), xr.grad))
        assert v.dtype == torch.float32 and xr.grad.dtype == torch.float32
    for v, gx in got[1:]:
        assert torch.equal(v, got[0][0]) and torch.equal(gx, got[0][1])
    full = sdtw.softdtw(x, y, memory="full", backend="cpu", bandwidth=5)
    np.testing.assert_allclose(got[0][0], full, rtol=1e-6)


def test_segment_rows():
    assert cpu_fused.segment_rows(1, 5) == 1
    assert cpu_fused.segment_rows(100, 100) == 10
    assert cpu_fused.segment_rows(101, 100) == 11
    assert cpu_fused.segment_rows(100_000, 100_000) == 317
    assert cpu_fused.segment_rows(100_000, 100_000, budget=16 * 100_001 * 11) == 10


_PEAK = """
import gc, json, sys, torch, sdtw
from sdtw import cpu_fused
from sdtw import memory as memory_model
torch.set_num_threads(1)
import numba; numba.set_num_threads(1)
memory, N, M = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
def step(n, m):
    x = torch.randn(1, n, 2, dtype=torch.float64, requires_grad=True)
    y = torch.randn(1, m, 2, dtype=torch.float64)
    sdtw.softdtw(x, y, memory=memory, backend="cpu").sum().backward()
step(40, 30)  # (compiled, the pools warm)
gc.collect()
try:  # the high-water mark of compilation would hide the step's own peak: reset it
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
except OSError:
    print(json.dumps(None)); sys.exit()
before = status("VmRSS:")
step(N, M)
after = status("VmHWM:")
K = cpu_fused.segment_rows(N, M)
print(json.dumps({"measured": after - before, "full": memory_model.cpu_full_bytes(1, N, M, True),
                  "checkpoint": memory_model.cpu_checkpoint_bytes(1, N, M, K, 1, True)}))
"""


def test_cpu_peak_memory_follows_the_model():
    """The peak resident memory of one step (B = 1, N = 2500, M = 2000, gradients) in a fresh
    process: the full mode's near its predicted 80 MB, the checkpointed mode's within a few
    MB of its predicted 1.7 MB (allocator and interpreter slack), far below the full one."""
    got = {}
    for memory in ("full", "checkpoint"):
        out = subprocess.run(
            [sys.executable, "-c", _PEAK, memory, "2500", "2000"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        got[memory] = json.loads(out.stdout.strip().splitlines()[-1])
        if got[memory] is None:
            pytest.skip("the peak resident memory cannot be reset here (/proc/self/clear_refs)")
    full, ckpt = got["full"], got["checkpoint"]
    assert 0.75 * full["full"] <= full["measured"] <= 1.3 * full["full"], got
    assert ckpt["measured"] <= ckpt["checkpoint"] + 8 * 2**20, got
    assert ckpt["measured"] < full["measured"] / 3, got


def test_auto_checkpoints_where_the_full_mode_would_not_fit(rng, monkeypatch):
    taken = []
    apply = cpu_fused.CPUFusedSoftDTW.apply

    def spy(*args):
        if args[5] is not None:  # (K None: the full mode, which also runs from the sequences)
            taken.append(args[5])
        return apply(*args)

    monkeypatch.setattr(cpu_fused.CPUFusedSoftDTW, "apply", spy)
    monkeypatch.setattr(memory_model, "QUERY_FROM", 0)  # (small calls never read the memory)
    x, y = randn(rng, 2, 30, 2).requires_grad_(), randn(rng, 2, 20, 2)
    need = memory_model.cpu_full_bytes(2, 30, 20, True)
    monkeypatch.setattr(memory_model, "available_bytes", lambda: 4 * need)
    sdtw.softdtw(x, y, backend="cpu")
    assert taken == []
    monkeypatch.setattr(memory_model, "available_bytes", lambda: need)
    auto = sdtw.softdtw(x, y, backend="cpu")
    assert taken == [6]  # ceil(sqrt(30)) rows per segment
    want = sdtw.softdtw(x, y, backend="reference").detach()
    np.testing.assert_allclose(auto.detach(), want, rtol=1e-12)
    monkeypatch.setattr(memory_model, "available_bytes", lambda: None)  # unknown: full
    sdtw.softdtw(x, y, backend="cpu")
    assert taken == [6]


@pytest.mark.parametrize(
    ("kw", "err", "words"),
    [
        (dict(memory="low"), ValueError, ["memory", "'low'", "checkpoint"]),
        (dict(memory=None), ValueError, ["memory", "None"]),
        (dict(memory="checkpoint", dist=lambda a, b: torch.cdist(a, b)), ValueError, ["named"]),
        (dict(memory="checkpoint", backend="reference"), ValueError, ["reference"]),
    ],
)
def test_bad_memory_arguments(rng, kw, err, words):
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
    with pytest.raises(err) as info:
        sdtw.softdtw(x, y, **{"backend": "cpu", **kw})
    for w in words:
        assert w in str(info.value)


def test_module_and_barycenter_take_memory(rng):
    x, y = randn(rng, 2, 9, 2), randn(rng, 2, 7, 2)
    m = sdtw.SoftDTW(gamma=GAMMA, memory="checkpoint", backend="cpu")
    assert "memory='checkpoint'" in repr(m)
    np.testing.assert_allclose(m(x, y), sdtw.softdtw(x, y, gamma=GAMMA, backend="cpu"), 1e-12)
    with pytest.raises(ValueError, match="memory"):
        m.memory = "half"
    kw = dict(gamma=GAMMA, max_iter=3, backend="cpu")
    Z = sdtw.softdtw_barycenter(x, memory="checkpoint", **kw)
    np.testing.assert_allclose(Z, sdtw.softdtw_barycenter(x, memory="full", **kw), rtol=1e-10)


# --------------------------------------------------------------------------------------------
# CUDA kernels (simulator)
# --------------------------------------------------------------------------------------------


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize(
    ("N", "M", "D", "dtype", "kw"),
    [
        # tiles of 32 columns from the last one: 65 = two tiles and one column; rows past a
        # band; lengths ending inside a tile and a band; the band crossing tiles
        (33, 65, 3, torch.float64, {"bandwidth": 3, "x_lengths": [33, 1], "y_lengths": [40, 65]}),
        # features staged 8 at a time: two passes and a partial one
        (34, 9, 19, torch.float64, {"y_lengths": [9, 4]}),
        pytest.param(40, 33, 3, torch.float32, {"normalize": True}, marks=pytest.mark.slow),
    ],
)
def test_cuda_checkpoint_equals_full(rng, N, M, D, dtype, kw):
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    _both(rng, "cuda", 2, N, M, D, dtype, tol, **kw)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (11 s in the simulator)
def test_cuda_checkpoint_allocates_no_n_by_m_buffer(rng, monkeypatch):
    """Every tensor the checkpointed call allocates is at most the forward's boundary buffer
    (rows and column checkpoints: about N M / 16 elements per pair here), none (B, N, M)."""
    from sdtw.cuda import _launch

    sizes = []
    for name in ("empty", "zeros", "full"):
        real = getattr(torch, name)

        def spy(*args, _real=real, **kw):
            t = _real(*args, **kw)
            sizes.append(t.numel())
            return t

        monkeypatch.setattr(_launch.torch, name, spy)
    B, N, M, D = 2, 70, 66, 3
    x, y = randn(rng, B, N, D).requires_grad_(), randn(rng, B, M, D)
    sdtw.softdtw(x, y, memory="checkpoint", backend="cuda").sum().backward()
    nb, nck = -(-N // 32), -(-M // 32)
    forward_buffer = B * nb * (M + 1) + B * nb * nck * 32 + 2 * B + 1
    assert max(sizes) == forward_buffer < B * N * M


# --------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_checkpoint_equals_full_and_holds_its_memory(rng, dtype):
    B, N, M, D = 4, 700, 600, 8
    x = randn(rng, B, N, D, dtype=dtype, device="cuda")
    y = randn(rng, B, M, D, dtype=dtype, device="cuda")
    res = []
    for memory in ("full", "checkpoint"):
        xr = x.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        v = sdtw.softdtw(xr, y, gamma=GAMMA, bandwidth=50, memory=memory, backend="cuda")
        v.sum().backward()
        torch.cuda.synchronize()
        res.append((v.detach(), xr.grad, torch.cuda.max_memory_allocated() - base))
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(res[1][0].cpu(), res[0][0].cpu(), rtol=tol)
    np.testing.assert_allclose(res[1][1].cpu(), res[0][1].cpu(), rtol=tol, atol=tol)
    nb, nck = -(-N // 32), -(-M // 32)
    model = 8 * (2 * B * nb * (M + 1) + B * nb * nck * 32 + B * (N + M) * D)
    assert res[1][2] <= 1.2 * model + 2**21
    assert res[1][2] < res[0][2] / 4


@requires_gpu
@pytest.mark.cuda
def test_gpu_auto_checkpoints_where_the_full_mode_would_not_fit(rng, monkeypatch):
    from sdtw.cuda import _launch

    taken = []
    grads = _launch.checkpoint_grads

    def spy(*args):
        taken.append(True)
        return grads(*args)

    monkeypatch.setattr(_launch, "checkpoint_grads", spy)
    monkeypatch.setattr(memory_model, "QUERY_FROM", 0)
    x = randn(rng, 2, 300, 4, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 2, 200, 4, dtype=torch.float32, device="cuda")
    sdtw.softdtw(x, y).sum().backward()
    assert taken == []
    need = memory_model.cuda_full_bytes(2, 300, 200, 4, 4)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (need, 4 * need))
    sdtw.softdtw(x, y).sum().backward()
    assert taken == [True]


def test_the_cpu_model_counts_the_lanes_tables():
    """The CPU full mode's model: a cost and a table per pair, or where the pairs run as SIMD
    lanes a table per lane and no cost (whole groups of 16: 32 tables for 17 pairs), the
    larger; the backend asks it with the lanes its rule picks."""
    from sdtw.cpu_lanes import lane_count, use_lanes
    from sdtw.engine import Options
    from sdtw.engine.cpu import CPUBackend

    pairs = 8 * (17 * 40 * 30 + 17 * 41 * 31)
    assert memory_model.cpu_full_bytes(17, 40, 30, True) == pairs
    assert memory_model.cpu_full_bytes(17, 40, 30, True, lanes=32) == pairs
    assert memory_model.cpu_full_bytes(17, 2, 1, True, lanes=32) == 8 * 32 * 3 * 2
    x, y = torch.zeros(17, 2, 1), torch.zeros(17, 1, 1)
    opts = Options.make(gamma=1.0, bandwidth=None, normalize=False, dist="sqeuclidean",
                        fused=None, backend="cpu")  # fmt: skip
    assert use_lanes(17, "sqeuclidean") and lane_count(17) == 32
    assert CPUBackend()._full_bytes(opts, x, y, True) == 8 * 32 * 3 * 2
