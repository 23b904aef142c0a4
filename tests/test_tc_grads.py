"""The tensor-core gradient kernel (``sdtw.cuda._tc_grads``, Triton) against float64.

On the CPU it runs in Triton's interpreter (``TRITON_INTERPRET=1``, which ``conftest`` sets
where there is no GPU), which does the products in float32 without the tensor cores:
that checks the indexing, strides, masks and the epilogue.  On a GPU the same comparisons
check the 3xTF32 products themselves, and the fused training step takes this path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
import warnings

import pytest
import torch

import sdtw
from sdtw._sqeuclidean import sqeuclidean_grads
from sdtw.cuda.config import overrides
from tests.conftest import TRITON_INTERPRETED, randn, rel_err, requires_gpu

# N != M, length 1, odd, past the 64-row and 32-step tiles; D below, at and past the
# feature tiles (16 .. 64), one not a power of two
SHAPES = [
    (2, 5, 7, 3),
    (1, 1, 1, 1),
    (3, 1, 6, 2),
    (2, 6, 1, 17),
    (1, 65, 33, 65),
    (2, 64, 96, 130),
    (2, 12, 20, 24),  # D and E's row stride multiples of 4, not of 16 (_tc_grads._quantum)
    (1, 6, 10, 8),  # the same for D and E's pair stride (2 N M = 120)
]


def _inputs(rng, B, N, M, D, device):
    """x, y, and E as the backward leaves it: plane 1 of a (B, 2, N, M) buffer, with its row
    and column sums as views of one (B, N + M, 1) tensor."""
    x = randn(rng, B, N, D, dtype=torch.float32, device=device)
    y = randn(rng, B, M, D, dtype=torch.float32, device=device)
    P = torch.as_tensor(rng.random((B, 2, N, M)), dtype=torch.float32, device=device)
    E = P[:, 1]
    S = torch.cat([E.double().sum(2), E.double().sum(1)], 1).float().unsqueeze(2)
    rows, cols = S.split((N, M), 1)
    return x, y, E, rows, cols


def _term_scale(x, E, rows, y):
    """The size of the terms that 2 (x * rows - E @ y) adds up, 2 (|x| |rows| + |E| @ |y|):
    a float32 sum of them is off by a few float32 roundings of this, however much they
    cancel (x close to y in a 1 x 1 pair leaves a gradient far smaller than its terms)."""
    x, E, rows, y = (t.double().abs() for t in (x, E, rows, y))
    return 2 * (x * rows + E @ y)


def _check(rng, shape, device, tol):
    """Both gradients against float64 on the same float32 inputs: the norm of the difference
    over the norm of the terms' sizes (``_term_scale``) at most ``tol``.  The plain relative
    error would fail now and then on cancellation that no float32 kernel can avoid (CI saw
    4.0e-6 at (1, 1, 1, 1); in 300 seeded draws there, two gradients went past 1e-6, and
    this measure's worst was 8.5e-8); an indexing, stride or mask error is off by the terms
    themselves and still fails (a 0.1% change of the product fails every shape)."""
    from sdtw.cuda import _tc_grads

    x, y, E, rows, cols = _inputs(rng, *shape, device)
    got = _tc_grads.sqeuclidean_grads_tc(x, y, E, rows, cols)
    want = sqeuclidean_grads(x.double(), y.double(), E.double(), rows.double(), cols.double())
    scales = (_term_scale(x, E, rows, y), _term_scale(y, E.transpose(1, 2), cols, x))
    for name, a, b, scale in zip(("grad_x", "grad_y"), got, want, scales, strict=True):
        assert a.shape == b.shape and a.dtype == torch.float32 and a.device == x.device
        err = float((a.double() - b).norm() / scale.norm())
        assert err <= tol, (name, shape, err, rel_err(a, b))
    gx, gy = _tc_grads.sqeuclidean_grads_tc(x, y, E, rows, cols, need_x=False)
    assert gx is None and torch.equal(gy, got[1])
    gx, gy = _tc_grads.sqeuclidean_grads_tc(x, y, E, rows, cols, need_y=False)
    assert gy is None and torch.equal(gx, got[0])


@pytest.mark.skipif(not TRITON_INTERPRETED, reason="needs TRITON_INTERPRET=1 (no GPU)")
@pytest.mark.parametrize("shape", SHAPES)
def test_interpreted_kernel_matches_float64(rng, shape):
    pytest.importorskip("triton")
    _check(rng, shape, "cpu", 1e-6)


def test_taken_for_float32_cuda_only(monkeypatch):
    """The size rule (:func:`sdtw.cuda.policy.tc_grads`), then the checks of the eager path:
    float32 CUDA tensors, the setting on, Triton installed; an override forces it either
    way."""
    from sdtw.cuda import _tc_grads, policy
    from sdtw.cuda.config import overrides

    assert policy.tc_grads(2, 512, 512, 72)
    assert not policy.tc_grads(2, 256, 1020, 72)  # N M below TC_MIN_CELLS
    assert not policy.tc_grads(2, 512, 514, 72)  # M not a multiple of 4
    for D, taken in [(1, False), (2, True), (5, True), (15, True), (16, True), (17, False),
                     (24, True), (33, False), (63, False), (65, False), (72, True)]:  # fmt: skip
        assert policy.tc_grads(2, 512, 512, D) is taken, D
        assert policy.tc_fast_d(D) is taken, D
    assert not policy.tc_grads(policy.TC_MAX_B + 1, 512, 512, 64)  # more pairs than the grid
    with overrides(tc_grads=False):
        assert not policy.tc_grads(2, 512, 512, 72)
    with overrides(tc_grads=True):
        assert policy.tc_grads(2, 512, 514, 1)
    monkeypatch.setattr(_tc_grads, "available", lambda: True)

    def inputs(device="cuda", dtype=torch.float32, D=64):  # (what wanted() reads of x)
        return types.SimpleNamespace(shape=(2, 512, D), device=torch.device(device), dtype=dtype)

    assert _tc_grads.wanted(inputs(), 512)
    assert not _tc_grads.wanted(inputs(D=1), 512)  # the size rule
    assert not _tc_grads.wanted(inputs("cpu"), 512)
    assert not _tc_grads.wanted(inputs(dtype=torch.float64), 512)
    # SDTW_TC_GRADS=0 (read once, at import: in a child process)
    script = (
        "import types, torch; from sdtw.cuda import _tc_grads as T; T.available = lambda: True; "
        "x = types.SimpleNamespace(shape=(2, 512, 64), device=torch.device('cuda'), "
        "dtype=torch.float32); print(T.wanted(x, 512))"
    )
    for value, want in (("1", "True"), ("0", "False")):
        env = {**os.environ, "SDTW_TC_GRADS": value}
        res = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True
        )
        assert res.stdout.strip() == want, res.stderr[-2000:]


def test_warns_once_without_triton(monkeypatch):
    from sdtw.cuda import _tc_grads

    monkeypatch.setattr(_tc_grads, "available", lambda: False)
    monkeypatch.setattr(_tc_grads, "_warned", False)
    with pytest.warns(RuntimeWarning, match="Triton is not installed"):
        assert not _tc_grads._triton_or_warn()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _tc_grads._triton_or_warn()  # once only


@pytest.mark.cuda
@requires_gpu
@pytest.mark.parametrize("shape", [*SHAPES, (4, 512, 512, 64), (2, 300, 700, 1)])
def test_gpu_kernel_matches_float64(rng, shape):
    pytest.importorskip("triton")
    _check(rng, shape, "cuda", 2e-6)


@pytest.mark.cuda
@requires_gpu
def test_gpu_fused_step_takes_it(rng, monkeypatch):
    """A fused float32 training step computes its gradients here, and they agree with the
    cuBLAS form's to float32 rounding."""
    pytest.importorskip("triton")
    from sdtw.cuda import _tc_grads

    calls = []
    real = _tc_grads.sqeuclidean_grads_tc
    monkeypatch.setattr(
        _tc_grads, "sqeuclidean_grads_tc", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    x = randn(rng, 3, 515, 64, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 3, 532, 64, dtype=torch.float32, device="cuda").requires_grad_()  # M % 4 == 0
    go = randn(rng, 3, dtype=torch.float32, device="cuda")
    v = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=True)
    got = torch.autograd.grad(v, (x, y), go)
    assert calls
    with overrides(tc_grads=False):
        v2 = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=True)
        want = torch.autograd.grad(v2, (x, y), go)
    assert len(calls) == 1 and torch.equal(v, v2)
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) <= 2e-6


def test_quantum_marks_multiples_of_four_only():
    """D or a stride that is a multiple of 4 but not of 16 goes to the kernel divided by 4
    (and is multiplied back there by the constant 4); the rest as they are, since Triton
    specialises on multiples of 16 itself.  SHAPES' last two take both forms."""
    from sdtw.cuda import _tc_grads

    assert [_tc_grads._quantum(i) for i in (1, 2, 3, 4, 8, 12, 16, 20, 24, 32, 64, 120)] == [
        1, 1, 1, 4, 4, 4, 1, 4, 4, 1, 1, 4,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, requires_gpu])]
)
def test_one_launch_equals_two(rng, device):
    """Both gradients in one launch (:func:`sdtw.cuda.policy.tc_one_launch`, each program one
    role by its row block) give the bits of one launch per gradient; shapes with N != M and
    more row blocks of one gradient than of the other."""
    pytest.importorskip("triton")
    if device == "cpu" and not TRITON_INTERPRETED:
        pytest.skip("needs TRITON_INTERPRET=1 (no GPU)")
    from sdtw.cuda import _tc_grads

    shapes = [(2, 5, 7, 3), (1, 130, 20, 24)]
    if device == "cuda":
        shapes.append((3, 512, 260, 64))
    for shape in shapes:
        inputs = _inputs(rng, *shape, device)
        with overrides(tc_one_launch=True):
            one = _tc_grads.sqeuclidean_grads_tc(*inputs)
        with overrides(tc_one_launch=False):
            two = _tc_grads.sqeuclidean_grads_tc(*inputs)
        for a, b in zip(one, two, strict=True):
            assert torch.equal(a, b), shape
