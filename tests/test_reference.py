"""The float64 reference against independent oracles: brute force, gradcheck, DTW limit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sdtw.band import sakoe_chiba_mask as band_mask
from sdtw.reference import reference_backward, reference_forward, softdtw_reference
from tests.oracles import brute_force, dtw

TINY = [(1, 1), (1, 4), (4, 1), (2, 3), (3, 3), (5, 4), (6, 6)]


@pytest.mark.parametrize("N,M", TINY)
@pytest.mark.parametrize("gamma", [1e-3, 1e-2, 0.1, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("bandwidth", [None, 1])
def test_reference_matches_brute_force(rng, N, M, gamma, bandwidth):
    cost = rng.random((1, N, M)) * 3.0
    mask = band_mask(N, M, bandwidth)
    value, E = brute_force(cost[0], gamma, mask)
    R = reference_forward(cost, gamma, bandwidth)
    np.testing.assert_allclose(R[0, N, M], value, rtol=1e-10, atol=1e-12 * gamma)
    E_ref = reference_backward(cost, R, gamma, bandwidth)[0]
    np.testing.assert_allclose(E_ref, E, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("N,M,bandwidth", [(4, 6, None), (5, 3, 1), (1, 3, None), (6, 6, 2)])
@pytest.mark.parametrize("gamma", [0.1, 1.0])
def test_reference_gradcheck(rng, N, M, bandwidth, gamma):
    cost = torch.as_tensor(rng.random((2, N, M)), dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda c: softdtw_reference(c, gamma, bandwidth), (cost,))


@pytest.mark.parametrize("N,M", [(5, 7), (8, 8), (1, 5)])
def test_small_gamma_approaches_dtw(rng, N, M):
    cost = rng.random((1, N, M))
    hard = dtw(cost[0])
    gaps = [abs(reference_forward(cost, g)[0, N, M] - hard) for g in (1.0, 0.1, 0.01, 1e-3)]
    assert gaps[-1] < 1e-2 * max(1.0, hard)
    assert gaps == sorted(gaps, reverse=True)


def test_negative_values_and_large_gamma():
    """Soft-DTW is not a distance: with a large gamma it goes negative."""
    cost = np.zeros((1, 4, 4))
    assert reference_forward(cost, 10.0)[0, 4, 4] < 0


@pytest.mark.parametrize("N,M,r", [(5, 5, 1), (4, 7, 1), (7, 4, 2), (3, 8, 2), (9, 9, 3)])
def test_band_matches_tslearn(N, M, r):
    tslearn = pytest.importorskip("tslearn.metrics")
    expected = np.asarray(tslearn.sakoe_chiba_mask(N, M, r))
    expected = np.isfinite(expected) if expected.dtype != bool else expected
    np.testing.assert_array_equal(band_mask(N, M, r), expected)
