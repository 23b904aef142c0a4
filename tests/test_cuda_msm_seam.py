"""Soft-MSM's float32 step on soft-DTW's band kernels (:mod:`sdtw.cuda.msm_seam`) in Numba's
simulator against the float64 reference: N != M, odd sizes, length 1, sizes past a band's 32
rows, a chunk's 32 staged columns and the gradients pass's tiles of 32 columns (a partial
last one; a pair whose length skips one), a band, per-pair lengths (with a band, and a
radius clipped to a short pair's table), several channels, gamma
down to 1e-3, repeated samples (gates at u = 0), a sample of 1e20 (up costs past float32's
range), an upstream gradient other than ones; and the rule that picks the path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from sdtw.band import band_offsets, pair_offsets
from sdtw.cpu import _tables
from sdtw.cuda import msm_seam
from sdtw.cuda.config import overrides
from sdtw.cuda.msm import _seam_band, msm_cuda
from tests.conftest import requires_gpu, requires_sim
from tests.test_cuda_msm import C, reference

#: (B, N, M, D, bandwidth, gamma, lengths)
CASES = [
    (2, 5, 4, 2, None, 0.3, None),  # two channels
    (1, 33, 34, 1, None, 0.3, None),  # a second band, a second chunk
    (1, 1, 3, 1, None, 1.0, None),  # one row
    (2, 3, 1, 1, None, 1.0, None),  # one column
    (1, 12, 40, 1, 3, 0.3, None),  # a band
    (1, 9, 131, 1, None, 0.1, None),  # five of the gradients pass's tiles, the last partial
    (2, 20, 13, 1, None, 1e-3, None),
    (3, 35, 40, 1, None, 0.3, ([35, 17, 1], [40, 3, 33])),  # per-pair lengths (tiles skipped)
    (3, 20, 12, 1, 2, 0.3, ([20, 17, 1], [12, 3, 5])),  # and a band (clipped for the third)
    (2, 9, 7, 1, None, 0.1, "repeated"),  # repeated samples: gates at u = 0
    (2, 9, 7, 1, None, 0.5, "huge"),  # a sample of 1e20: up costs past float32's range
]


def _close(got, want, rtol):
    got = got.detach().double().numpy()
    scale = max(np.abs(want).max(), 1e-300)
    assert np.abs(got - want).max() <= rtol * scale, np.abs(got - want).max() / scale


@requires_sim
@pytest.mark.cudasim
# (the simulator's numpy float32 warns where the GPU overflows to inf silently)
@pytest.mark.filterwarnings("ignore:.*overflow:RuntimeWarning")
@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_seam_against_reference(case, monkeypatch) -> None:
    B, N, M, D, bandwidth, gamma, lengths = case
    rng = np.random.default_rng(CASES.index(case))
    a, b = rng.standard_normal((B, N, D)), rng.standard_normal((B, M, D))
    if lengths == "huge":
        a[0, 4, 0] = 1e20
    elif lengths == "repeated":
        a, b = np.round(2 * a) / 2, np.round(2 * b) / 2
    special, lengths = (lengths, None) if isinstance(lengths, str) else (None, lengths)
    x = torch.as_tensor(a, dtype=torch.float32)
    y = torch.as_tensor(b, dtype=torch.float32)
    taken = []
    real = msm_seam.msm_seam
    monkeypatch.setattr(msm_seam, "msm_seam", lambda *a: taken.append(1) or real(*a))
    if lengths is None:
        tables = _tables(B, N, M, *band_offsets(N, M, bandwidth), None)
    else:
        tables = _tables(B, N, M, *pair_offsets(*lengths, bandwidth), lengths)
    values, gx, gy = msm_cuda(x, y, C, gamma, tables, True)
    assert taken, "the rule did not take the band kernels"
    want = reference(x.double(), y.double(), bandwidth, lengths, gamma)
    if special == "huge":  # (R ~ 1e40: every backend's weights are rounding; finite here too)
        _close(values, want[0], 1e-6)
        assert torch.isfinite(gx).all() and torch.isfinite(gy).all()
        return
    # (float32 transcendentals and weights: a few 1e-7 relative, more for small gamma)
    tol = 1e-5 if gamma < 0.01 else 2e-6
    _close(values, want[0], 1e-7)
    _close(gx, want[1], tol)
    _close(gy, want[2], tol)


@requires_sim
@pytest.mark.cudasim
def test_seam_through_the_api_with_an_upstream_gradient() -> None:
    rng = np.random.default_rng(7)
    x = torch.as_tensor(rng.standard_normal((2, 6, 2)), dtype=torch.float32).requires_grad_()
    y = torch.as_tensor(rng.standard_normal((2, 5, 2)), dtype=torch.float32).requires_grad_()
    up = torch.tensor([0.5, -2.0])
    v = sdtw.soft_msm(x, y, c=C, gamma=0.5, backend="cuda")
    gx, gy = torch.autograd.grad(v, (x, y), up)
    xr = x.detach().double().requires_grad_()
    yr = y.detach().double().requires_grad_()
    vr = sdtw.soft_msm(xr, yr, c=C, gamma=0.5, backend="reference")
    gxr, gyr = torch.autograd.grad(vr, (xr, yr), up.double())
    _close(v, vr.detach().numpy(), 1e-6)
    _close(gx, gxr.numpy(), 2e-6)
    _close(gy, gyr.numpy(), 2e-6)


def test_seam_band() -> None:
    """The path's band: one for the table, or one radius for per-pair lengths (-1: none);
    none from tables made on the device or bands of another kind."""
    assert _seam_band(_tables(3, 5, 4, *band_offsets(5, 4, 2), None), 5, 4) == (3, 2)
    lengths = ([5, 3, 1], [4, 4, 4])
    for bandwidth, radius in ((None, -1), (2, 2), (1e9, -1)):
        got = _seam_band(_tables(3, 5, 4, *pair_offsets(*lengths, bandwidth), lengths), 5, 4)
        assert got[:2] == (radius, -1)
        assert [list(v) for v in got[2]] == [list(v) for v in lengths]
    lo, hi = pair_offsets(*lengths, 2)
    assert _seam_band(_tables(3, 5, 4, lo, hi + 1, lengths), 5, 4) is None  # (not a radius)
    assert _seam_band(torch.zeros(4, 3, dtype=torch.int64), 5, 4) is None
    empty = ([4, 3], [2, 2])  # (offsets that allow j - i = -1 only: a radius of -1, no band)
    assert _seam_band(_tables(2, 4, 2, [1, 0], [-1, -1], empty), 4, 2) is None


@requires_sim
@pytest.mark.cudasim
def test_seam_rule_and_override(monkeypatch) -> None:
    """Float32 with gradients and uniform tables take the band kernels unless an override or
    a variant of Soft-MSM's own kernels says otherwise; float64 inputs and tables made on
    the device never do."""
    taken = []
    monkeypatch.setattr(msm_seam, "msm_seam", lambda *a: taken.append(a) or (None, None, None))
    rng = np.random.default_rng(3)
    x = torch.as_tensor(rng.standard_normal((2, 4, 1)), dtype=torch.float32)
    y = torch.as_tensor(rng.standard_normal((2, 3, 1)), dtype=torch.float32)
    tables = _tables(2, 4, 3, *band_offsets(4, 3, None), None)
    msm_cuda(x, y, C, 1.0, tables, True)
    assert len(taken) == 1
    with overrides(msm_seam=False):
        msm_cuda(x, y, C, 1.0, tables, True)
    with overrides(msm_kept=True):
        msm_cuda(x, y, C, 1.0, tables, True)
    msm_cuda(x, y, C, 1.0, tables, True, bands=1)
    msm_cuda(x, y, C, 1.0, tables, False)  # (no gradients)
    msm_cuda(x.double(), y.double(), C, 1.0, tables, True)
    msm_cuda(x, y, C, 1.0, torch.as_tensor(np.stack(tables)), True)
    assert len(taken) == 1


@requires_gpu
@pytest.mark.cuda
def test_gpu_seam_against_the_float64_kernels() -> None:
    """On a GPU, at the benchmark's size (B = 32, N = M = 512) and with per-pair lengths,
    a band and two channels: the band kernels' float32 step within 1e-5 (relative norm) of
    Soft-MSM's float64 kernels, values and gradients."""
    rng = np.random.default_rng(11)
    cases = [(32, 512, 512, 1, None, None), (3, 100, 77, 2, 9, ([100, 57, 3], [77, 77, 20]))]
    for B, N, M, D, bandwidth, lengths in cases:
        x = torch.as_tensor(rng.standard_normal((B, N, D)), dtype=torch.float32).cuda()
        y = torch.as_tensor(rng.standard_normal((B, M, D)), dtype=torch.float32).cuda()
        if lengths is None:
            tables = _tables(B, N, M, *band_offsets(N, M, bandwidth), None)
        else:
            tables = _tables(B, N, M, *pair_offsets(*lengths, bandwidth), lengths)
        got = msm_cuda(x, y, C, 1.0, tables, True, seam=True)
        want = msm_cuda(x.double(), y.double(), C, 1.0, tables, True)
        for a, b in zip(got, want, strict=True):
            assert torch.linalg.norm(a - b) <= 1e-5 * torch.linalg.norm(b)
