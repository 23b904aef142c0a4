"""Soft-MSM's CUDA kernels (:mod:`sdtw.cuda.msm`) in Numba's simulator against the float64
reference: the wavefront kernels at sizes past each rows-per-lane boundary (one warp, ``ROWS``
rows per lane: N = 33, 65, 129, 300, 513 take 2, 4, 8, 16, 32), a strip that ends on the last
lane (N = 64), N != M, length 1, per-pair lengths, a band, several channels; the diagonal
kernels past 1024 rows; an upstream gradient other than ones throughout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from sdtw.msm_reference import soft_msm_backward, soft_msm_forward
from tests.conftest import requires_sim

pytestmark = requires_sim

C, GAMMA = 0.7, 0.3

#: (B, N, M, D, bandwidth, lengths)
CASES = [
    (2, 33, 9, 1, None, None),  # 2 rows per lane, the 17th lane's strip half used
    (1, 64, 7, 1, 3, None),  # 2 rows per lane, the last lane's strip full (no lane below)
    (1, 65, 12, 2, None, None),  # 4 rows per lane, two channels
    (1, 129, 3, 1, None, None),  # 8
    (1, 300, 2, 1, None, None),  # 16
    (1, 513, 2, 1, None, None),  # 32
    (2, 1, 5, 1, None, None),  # one row
    (2, 4, 1, 2, None, None),  # one column
    (1, 1, 1, 1, None, None),
    (3, 40, 12, 2, 2, ([40, 17, 1], [12, 3, 5])),  # lengths and a band, each pair's own
    (2, 6, 35, 1, 4, None),  # M past 32, a band
]


def reference(x, y, bandwidth, lengths):
    """Values (B,) and gradients of ``sum_b values[b]`` by the float64 reference, pair by pair
    over each pair's own lengths."""
    a, b_ = x.detach().numpy(), y.detach().numpy()
    B = a.shape[0]
    values, gx, gy = np.zeros(B), np.zeros(a.shape), np.zeros(b_.shape)
    for b in range(B):
        n = a.shape[1] if lengths is None else lengths[0][b]
        m = b_.shape[1] if lengths is None else lengths[1][b]
        p, q = a[b : b + 1, :n], b_[b : b + 1, :m]
        v, Rs = soft_msm_forward(p, q, GAMMA, bandwidth, c=C)
        ex, ey = soft_msm_backward(p, q, Rs, GAMMA, bandwidth, c=C)
        values[b], gx[b, :n], gy[b, :m] = v[0], ex[0], ey[0]
    return values, gx, gy


def run(rng, B, N, M, D, bandwidth, lengths):
    x = torch.as_tensor(rng.standard_normal((B, N, D))).requires_grad_()
    y = torch.as_tensor(rng.standard_normal((B, M, D))).requires_grad_()
    upstream = torch.as_tensor(rng.uniform(0.5, 2.0, B)) * torch.tensor([1.0, -1.0] * B)[:B]
    kw = dict(c=C, gamma=GAMMA, bandwidth=bandwidth, backend="cuda")
    if lengths is not None:
        kw.update(x_lengths=lengths[0], y_lengths=lengths[1])
    v = sdtw.soft_msm(x, y, **kw)
    gx, gy = torch.autograd.grad(v, (x, y), upstream)
    values, ex, ey = reference(x, y, bandwidth, lengths)
    u = upstream.numpy()[:, None, None]
    np.testing.assert_allclose(v.detach().numpy(), values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), ex * u, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(gy.numpy(), ey * u, rtol=1e-10, atol=1e-11)
    return gx, gy


@pytest.mark.parametrize(("B", "N", "M", "D", "bandwidth", "lengths"), CASES)
def test_wavefront_kernels_match_the_reference(rng, B, N, M, D, bandwidth, lengths):
    run(rng, B, N, M, D, bandwidth, lengths)


def test_diagonal_kernels_past_1024_rows(rng):
    run(rng, 1, 1025, 2, 1, None, None)


def test_gradients_are_deterministic():
    # (no atomics: the same bits on every run)
    first = run(np.random.default_rng(0), 2, 40, 9, 1, 5, None)
    again = run(np.random.default_rng(0), 2, 40, 9, 1, 5, None)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
