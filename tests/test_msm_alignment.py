"""Soft-MSM's expected alignment (sdtw.alignment(measure="softmsm")): the match edges'
occupancies, against an enumeration of every alignment path, on every backend."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import sdtw
from sdtw.band import sakoe_chiba_mask
from tests.conftest import requires_sim
from tests.oracles import all_paths
from tests.test_msm import _cost_t, _data

BACKENDS = ("reference", "cpu", pytest.param("cuda", marks=requires_sim))
# (the CUDA backend hands the alignment to the CPU's kernels and says so: its own test below)
pytestmark = pytest.mark.filterwarnings("ignore:sdtw.alignment.measure='softmsm'. has no CUDA")


def enumerated_matches(x, y, c, gamma, bandwidth=None) -> np.ndarray:
    """P(x_i matched with y_j) of univariate x (N,), y (M,) under the Gibbs distribution of
    the paths' costs (every monotone path enumerated): a path matches its first cell and the
    head of each diagonal move."""
    N, M = len(x), len(y)
    mask = sakoe_chiba_mask(N, M, bandwidth)
    totals, matched = [], []
    for path in all_paths(N, M):
        if not all(mask[i, j] for i, j in path):
            continue
        total, cells = (x[0] - y[0]) ** 2, [(0, 0)]
        for (i, j), (k, m) in itertools.pairwise(path):
            if (k, m) == (i + 1, j + 1):
                total = total + (x[k] - y[m]) ** 2
                cells.append((k, m))
            elif k == i + 1:
                total = total + _cost_t(x[k], x[i], y[j], c, gamma)
            else:
                total = total + _cost_t(y[m], y[j], x[i], c, gamma)
        totals.append(total)
        matched.append(cells)
    p = torch.softmax(-torch.stack(totals) / gamma, 0).numpy()
    A = np.zeros((N, M))
    for weight, cells in zip(p, matched, strict=True):
        for i, j in cells:
            A[i, j] += weight
    return A


@pytest.mark.parametrize(("N", "M", "bandwidth"), [(1, 1, None), (1, 4, None), (4, 3, None),
                                                   (5, 5, 1), (3, 6, None)])  # fmt: skip
@pytest.mark.parametrize(("c", "gamma"), [(1.0, 1.0), (0.3, 0.1)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_match_occupancy_against_the_enumeration(N, M, bandwidth, c, gamma, backend):
    x, y = _data(2, N, M, 1, seed=N * 7 + M)
    got = sdtw.alignment(x, y, measure="softmsm", c=c, gamma=gamma, bandwidth=bandwidth,
                         backend=backend)  # fmt: skip
    for b in range(2):
        want = enumerated_matches(x[b, :, 0], y[b, :, 0], c, gamma, bandwidth)
        np.testing.assert_allclose(got[b].numpy(), want, rtol=1e-10, atol=1e-12)
    assert got.dtype == torch.float64 and (got >= 0).all() and (got <= 1 + 1e-12).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_lengths_band_channels_and_backends_agree(backend):
    """Per-pair lengths (NaN past them), a band, three channels (their mean), a batch past
    a lane group (B D = 60 tasks), unbatched inputs: every backend equals the reference."""
    B, N, M, D = 20, 9, 7, 3
    x, y = _data(B, N, M, D, seed=2)
    g = np.random.default_rng(2)
    xl, yl = g.integers(1, N + 1, B).tolist(), g.integers(1, M + 1, B).tolist()
    x, y = x.clone(), y.clone()
    for b in range(B):
        x[b, xl[b] :] = math.nan
        y[b, yl[b] :] = math.nan
    kw = dict(measure="softmsm", c=0.6, gamma=0.25, bandwidth=3, x_lengths=xl, y_lengths=yl)
    got = sdtw.alignment(x, y, backend=backend, **kw)
    want = sdtw.alignment(x, y, backend="reference", **kw)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)
    for b in range(B):
        assert (got[b, xl[b] :] == 0).all() and (got[b, :, yl[b] :] == 0).all()
        one = sdtw.alignment(x[b, : xl[b], :1], y[b, : yl[b], :1], backend=backend,
                             **{**kw, "x_lengths": None, "y_lengths": None})  # fmt: skip
        assert one.shape == (xl[b], yl[b])
    per_channel = [
        sdtw.alignment(x[..., d : d + 1], y[..., d : d + 1], backend="reference", **kw)
        for d in range(D)
    ]
    np.testing.assert_allclose(want.numpy(), (sum(per_channel) / D).numpy(), atol=1e-14)


def test_float32_inputs_give_float32():
    x, y = _data(3, 6, 5, 1, seed=4)
    got = sdtw.alignment(x.float(), y.float(), measure="softmsm", gamma=0.5)
    want = sdtw.alignment(x, y, measure="softmsm", gamma=0.5, backend="reference")
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)


@requires_sim
def test_cuda_warns_that_the_cpu_computes_it():
    x, y = _data(2, 5, 4, 1, seed=5)
    with pytest.warns(RuntimeWarning, match="no CUDA kernels"):
        sdtw.alignment(x, y, measure="softmsm", backend="cuda")


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        (dict(measure="msm"), ValueError, "measure must be one of"),
        (dict(measure="softmsm", gamma=0.0), ValueError, "gamma must be > 0"),
        (dict(measure="softmsm", dist="l1"), ValueError, "leave dist at its default"),
        (dict(measure="softmsm", c=-1.0), ValueError, "c must be finite and > 0"),
    ],
)
def test_bad_settings_name_the_argument(kw, error, match):
    x, y = _data(1, 4, 4, 1, seed=6)
    with pytest.raises(error, match=match):
        sdtw.alignment(x, y, **kw)
