"""Exact DTW, ``gamma=0``: against a plain float64 DTW (to 1e-12), aeon's ``dtw_distance``,
brute force over all paths; the gradient is the optimal path's indicator, ties broken the same
way on every backend (diagonal, up, left); the settings it takes and refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sdtw
from sdtw.distances import pairwise
from tests.conftest import SIMULATOR, randn, rel_err
from tests.oracles import all_paths, dtw

BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1"))]  # fmt: skip


def _costs(x, y) -> np.ndarray:
    return ((x[:, :, None].double() - y[:, None].double()) ** 2).sum(-1).detach().numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("B, N, M, D", [(3, 7, 5, 2), (2, 1, 6, 1), (1, 33, 9, 3)])
def test_value_is_plain_dtw_and_gradient_its_path(rng, backend, B, N, M, D):
    x, y = randn(rng, B, N, D).requires_grad_(), randn(rng, B, M, D)
    v = sdtw.softdtw(x, y, gamma=0, backend=backend)
    c = _costs(x, y)
    want = torch.tensor([dtw(c[b]) for b in range(B)], dtype=torch.float64)
    assert rel_err(v, want) < 1e-12
    A = sdtw.alignment(x, y, gamma=0, backend=backend)
    assert set(A.unique().tolist()) <= {0.0, 1.0}
    assert torch.allclose((A * torch.from_numpy(c)).sum((1, 2)), want, rtol=1e-12)
    (gx,) = torch.autograd.grad(v.sum(), x)
    cost = pairwise(x, y, "sqeuclidean")
    (want_gx,) = torch.autograd.grad((cost * A).sum(), x)
    assert rel_err(gx, want_gx) < 1e-12


def test_brute_force_and_aeon(rng):
    aeon = pytest.importorskip("aeon.distances")
    for N, M, D in [(4, 5, 1), (5, 3, 2)]:
        x, y = randn(rng, 1, N, D), randn(rng, 1, M, D)
        c = _costs(x, y)[0]
        best = min(sum(c[i, j] for i, j in p) for p in all_paths(N, M))
        v = sdtw.softdtw(x, y, gamma=0, backend="cpu")
        assert abs(float(v) - best) < 1e-12 * best
        # aeon: (channels, time), squared Euclidean ground cost, univariate and multivariate
        want = aeon.dtw_distance(x[0].T.numpy(), y[0].T.numpy())
        assert abs(float(v) - want) < 1e-12 * want
    x, y = randn(rng, 1, 40, 3), randn(rng, 1, 31, 3)
    want = aeon.dtw_distance(x[0].T.numpy(), y[0].T.numpy())
    v = sdtw.softdtw(x, y, gamma=0, backend="cpu")
    assert abs(float(v) - want) < 1e-12 * want


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_are_broken_the_same_way_everywhere(rng, backend):
    """Costs with many ties (0/1 entries, an all-zero table), with lengths: the same values
    and paths as the oracle's bit for bit; the path prefers the diagonal, then up, then
    left."""
    cost = torch.as_tensor(rng.integers(0, 2, (4, 6, 8)).astype(np.float64))
    cost[0] = 0.0
    lengths = dict(x_lengths=[6, 5, 6, 1], y_lengths=[8, 8, 3, 4])
    c, ref = cost.clone().requires_grad_(), cost.clone().requires_grad_()
    v = sdtw.softdtw_from_cost(c, gamma=0, backend=backend, **lengths)
    w = sdtw.softdtw_from_cost(ref, gamma=0, backend="reference", **lengths)
    v.sum().backward()
    w.sum().backward()
    assert torch.equal(v, w) and torch.equal(c.grad, ref.grad)
    # the all-zero 6 x 8 table: left along row 0 to column 2, then the diagonal
    path = torch.zeros(6, 8, dtype=torch.float64)
    for i in range(6):
        path[i, i + 2] = 1.0
    path[0, :2] = 1.0
    assert torch.equal(c.grad[0], path) and v[0].item() == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_special_values_and_dtypes(rng, backend):
    cost = torch.as_tensor(rng.random((3, 4, 5)))
    cost[1, 0, :] = math.inf  # no finite path
    cost[2, 1, 1] = math.nan
    cost.requires_grad_()
    v = sdtw.softdtw_from_cost(cost, gamma=0, backend=backend)
    v.sum().backward()
    v = v.detach()
    assert math.isfinite(v[0]) and v[1] == math.inf and math.isnan(v[2])
    assert torch.equal(cost.grad[1:], torch.zeros(2, 4, 5, dtype=cost.dtype))
    x, y = randn(rng, 2, 6, 2, dtype=torch.float32), randn(rng, 2, 7, 2, dtype=torch.float32)
    v32 = sdtw.softdtw(x, y, gamma=0, backend=backend)
    assert v32.dtype == torch.float32
    assert rel_err(v32, sdtw.softdtw(x.double(), y.double(), gamma=0, backend=backend)) < 1e-6


def test_module_divergence_and_settings(rng):
    x, y = randn(rng, 2, 6, 2).requires_grad_(), randn(rng, 2, 6, 2)
    loss = sdtw.SoftDTW(gamma=0)
    assert torch.equal(loss(x, y), sdtw.softdtw(x, y, gamma=0))
    d = sdtw.softdtw(x, y, gamma=0, normalize=True)
    s = lambda a, b: sdtw.softdtw(a, b, gamma=0)  # noqa: E731
    assert rel_err(d, s(x, y) - 0.5 * (s(x, x) + s(y, y))) < 1e-12
    assert s(x, x).abs().max() == 0  # (squared Euclidean: d(x, x) = 0 exactly)
    d.sum().backward()
    assert torch.isfinite(x.grad).all()
    for bad in (-1.0, math.nan, -1e-300):
        with pytest.raises(ValueError, match="gamma"):
            sdtw.softdtw(x, y, gamma=bad)
    with pytest.raises(ValueError, match="checkpoint"):
        sdtw.softdtw(x, y, gamma=0, memory="checkpoint")
    with pytest.raises(ValueError, match="fused=True"):
        sdtw.softdtw(x, y, gamma=0, fused=True)
    with pytest.raises(ValueError, match="gamma"):
        sdtw.softdtw_barycenter(x.detach(), gamma=0)
