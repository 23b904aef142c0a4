"""Soft-MSM on the all-pairs side (``measure="softmsm"``): ``sdtw.cdist`` equal to the loop of
``soft_msm`` pair calls (values and gradients) on every backend (CUDA in the simulator, tiny),
the symmetric case, lengths, band, the divergence, chunks; ``sdtw.knn``; the estimators (params,
clone, a tiny fit and predict); errors that name the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from sdtw.measures import MEASURES, measure_settings
from tests.conftest import SIMULATOR, randn, rel_err

_SIM = pytest.mark.skipif(not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1")
BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=_SIM)]
MSM = dict(measure="softmsm", c=0.7, gamma=0.3)


def loop(X, Y, xl=None, yl=None, *, measure, **kw) -> torch.Tensor:
    """The matrix by the pair calls (the definition): every pair ``(X[a], Y[b])`` in one
    batched ``soft_msm`` call of B1 B2 pairs."""
    assert measure == "softmsm"
    B1, B2 = X.shape[0], Y.shape[0]
    i, j = torch.arange(B1).repeat_interleave(B2), torch.arange(B2).repeat(B1)
    lens = {} if xl is None else dict(x_lengths=torch.tensor(xl)[i], y_lengths=torch.tensor(yl)[j])
    return sdtw.soft_msm(X[i], Y[j], **lens, **kw).view(B1, B2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["plain", "divergence-lengths-band"])
def test_cdist_is_the_loop_of_soft_msm_calls(rng, backend, case):
    tiny = backend == "cuda"  # (the simulator: one block per pair and channel, slow)
    (B1, B2, N, M, D) = (2, 2, 4, 3, 1) if tiny else (4, 3, 6, 5, 2)
    X, Y = randn(rng, B1, N, D).requires_grad_(), randn(rng, B2, M, D).requires_grad_()
    kw = dict(MSM, backend=backend)
    xl = yl = None
    if case != "plain":
        kw.update(normalize=True, bandwidth=2)
        xl, yl = ([4, 2], [3, 1]) if tiny else ([6, 3, 1, 5], [5, 5, 2])
    W = torch.as_tensor(rng.uniform(0.5, 2.0, (B1, B2)))  # (an upstream other than ones)
    chunk = None if tiny else 5  # (several chunks: each recomputed in the backward)
    out = sdtw.cdist(X, Y, x_lengths=xl, y_lengths=yl, chunk=chunk, **kw)
    want = loop(X, Y, xl, yl, **kw)
    assert out.shape == (B1, B2) and rel_err(out, want) < 1e-12
    g = torch.autograd.grad((out * W).sum(), (X, Y))
    h = torch.autograd.grad((want * W).sum(), (X, Y))
    assert rel_err(g[0], h[0]) < 1e-12 and rel_err(g[1], h[1]) < 1e-12


@pytest.mark.parametrize("normalize", [False, True])
def test_symmetric_case(rng, normalize):
    X = randn(rng, 4, 5, 2).requires_grad_()
    xl = [5, 2, 4, 5]
    kw = dict(MSM, normalize=normalize, backend="cpu")
    out = sdtw.cdist(X, x_lengths=xl, chunk=3, **kw)
    full = sdtw.cdist(X, X.detach(), x_lengths=xl, y_lengths=xl, **kw)
    assert torch.equal(out, out.T) and rel_err(out, full) < 1e-12
    if normalize:
        assert torch.equal(out.diagonal(), torch.zeros(4, dtype=out.dtype))
    (g,) = torch.autograd.grad(out.triu().sum(), X)
    # each unordered pair once, the diagonal once: the loop over a <= b
    i, j = torch.triu_indices(4, 4)
    lens = dict(x_lengths=torch.tensor(xl)[i], y_lengths=torch.tensor(xl)[j])
    want = sdtw.soft_msm(X[i], X[j], **lens, **{k: v for k, v in kw.items() if k != "measure"})
    (h,) = torch.autograd.grad(want.sum(), X)
    assert rel_err(out[i, j], want) < 1e-12 and rel_err(g, h) < 1e-12


def test_the_measure_is_the_recurrence_planned(rng):
    """cdist plans each chunk with the measure's recurrence: softdtw by name is the default,
    and another ``c`` is another plan (another matrix)."""
    X, Y = randn(rng, 3, 4, 1), randn(rng, 2, 5, 1)
    assert torch.equal(sdtw.cdist(X, Y, measure="softdtw"), sdtw.cdist(X, Y))
    assert MEASURES == ("softdtw", "softmsm")
    _, rec = measure_settings("softmsm", gamma=0.3, bandwidth=None, c=0.7)
    assert rec.name == "softmsm" and rec.param("c") == 0.7
    a, b = sdtw.cdist(X, Y, **MSM), sdtw.cdist(X, Y, **dict(MSM, c=2.0))
    assert not torch.equal(a, b)
    assert torch.equal(a, sdtw.cdist(X, Y, **MSM, chunk=1))


def test_knn_is_the_full_matrix_sorted(rng):
    X, Y = randn(rng, 5, 6, 2), randn(rng, 7, 5, 2)
    xl, yl = [6, 2, 5, 6, 1], [5, 5, 3, 1, 5, 2, 4]
    kw = dict(MSM, normalize=True)
    full = sdtw.cdist(X, Y, x_lengths=xl, y_lengths=yl, **kw)
    want_v, want_i = torch.sort(full, dim=1, stable=True)
    for rows in (2, None):
        v, i = sdtw.knn(X, Y, 3, x_lengths=xl, y_lengths=yl, rows=rows, **kw)
        assert torch.equal(i, want_i[:, :3]) and torch.equal(v, want_v[:, :3])


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        (dict(measure="foo"), ValueError, "measure must be one of"),
        (dict(measure=None), ValueError, "measure must be one of"),
        (dict(measure="softmsm", gamma=0.0), ValueError, "gamma must be > 0"),
        (dict(measure="softmsm", c=0.0), ValueError, "c must be finite and > 0"),
        (dict(measure="softmsm", c=-1.0), ValueError, "c must be finite and > 0"),
        (dict(measure="softmsm", c="1"), TypeError, "c must be a positive real"),
        (dict(measure="softmsm", dist="l1"), ValueError, "leave dist at its default"),
        (dict(measure="softmsm", normalize="yes"), TypeError, "normalize"),
    ],
)
@pytest.mark.parametrize("entry", ["cdist", "knn"])
def test_errors_name_the_argument(rng, entry, kw, error, match):
    X, Y = randn(rng, 2, 4, 1), randn(rng, 3, 4, 1)
    kw = {"gamma": 0.5, **kw}
    with pytest.raises(error, match=match):
        (sdtw.cdist if entry == "cdist" else sdtw.knn)(X, Y, **kw)


# -- the estimators ------------------------------------------------------------------------------
sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402

from sdtw.estimators import (  # noqa: E402
    KNeighborsTimeSeriesClassifier,
    NearestCentroidTimeSeriesClassifier,
    SoftDTWKMeans,
)


def _two_families(rng, lengths=(9, 12, 10, 11, 8, 12, 10, 9)):
    """Series of two well-separated families (a slow and a fast sine), lists of different
    lengths; labels alternate."""
    X, y = [], []
    for k, n in enumerate(lengths):
        t = np.linspace(0, 1, n)
        X.append(np.sin(2 * np.pi * t * (1 + 2 * (k % 2))) + 0.05 * rng.standard_normal(n))
        y.append(k % 2)
    return X, np.array(y)


ESTIMATORS = [
    (KNeighborsTimeSeriesClassifier, dict(n_neighbors=1, gamma=0.1, normalize=True)),
    (NearestCentroidTimeSeriesClassifier, dict(gamma=0.1, barycenter_iter=5)),
    (SoftDTWKMeans, dict(n_clusters=2, gamma=0.1, barycenter_iter=5, max_iter=3)),
]


@pytest.mark.parametrize("cls, kw", ESTIMATORS, ids=lambda v: getattr(v, "__name__", ""))
def test_estimators_params_and_clone(cls, kw):
    est = cls(measure="softmsm", c=0.5, **kw)
    params = est.get_params()
    assert params["measure"] == "softmsm" and params["c"] == 0.5
    twin = clone(est).set_params(c=2.0, measure="softdtw")
    assert twin.c == 2.0 and twin.measure == "softdtw" and est.c == 0.5
    assert clone(twin).get_params() == twin.get_params()
    assert cls(measure="foo").get_params()["measure"] == "foo"  # (stored as given)


@pytest.mark.parametrize("measure", ["softdtw", "softmsm"])
@pytest.mark.parametrize("cls, kw", ESTIMATORS, ids=lambda v: getattr(v, "__name__", ""))
def test_estimators_fit_and_predict(rng, cls, kw, measure):
    X, y = _two_families(rng)
    est = cls(measure=measure, c=0.5, **kw)
    if cls is SoftDTWKMeans:
        labels = est.set_params(random_state=0, n_init=2).fit_predict(X)
        same = (labels == y).all() or (labels == 1 - y).all()
        assert same and est.cluster_centers_.shape == (2, 12, 1)
        assert np.array_equal(est.predict(X), labels)
        return
    assert est.fit(X, y).score(X, y) == 1.0
    if cls is NearestCentroidTimeSeriesClassifier:
        assert est.centroids_.shape == (2, 12, 1)
        assert est.centroid_distances(X[:3]).shape == (3, 2)


def test_kmeans_centroids_are_soft_msm_barycenters(rng):
    """One cluster: the centroid is the Soft-MSM barycenter of all the series, from the
    series drawn first, as ``soft_msm_barycenter`` gives it."""
    X = randn(rng, 4, 6, 1)
    km = SoftDTWKMeans(n_clusters=1, measure="softmsm", c=0.5, gamma=0.2, barycenter_iter=4,
                       max_iter=1, random_state=3).fit(X)  # fmt: skip
    start = int(np.random.default_rng(3).choice(4, 1, replace=False)[0])
    Z = sdtw.soft_msm_barycenter([list(X)], c=0.5, gamma=0.2, init=X[start : start + 1],
                                 max_iter=4)  # fmt: skip
    torch.testing.assert_close(km.cluster_centers_, Z.reshape(1, 6, 1), rtol=1e-12, atol=1e-12)
    d = sdtw.cdist(X, km.cluster_centers_, measure="softmsm", c=0.5, gamma=0.2)
    assert km.inertia_ == pytest.approx(float(d.sum()), rel=1e-12)


@pytest.mark.parametrize("cls, kw", ESTIMATORS, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (dict(measure="foo"), "measure must be one of"),
        (dict(measure="softmsm", c=0.0), "c must be finite and > 0"),
        (dict(measure="softmsm", gamma=0.0), "gamma must be > 0"),
    ],
)
def test_estimators_refuse_bad_settings_at_fit(rng, cls, kw, bad, match):
    X, y = _two_families(rng, (6, 7, 6, 5))
    with pytest.raises(ValueError, match=match):
        cls(**{**kw, **bad}).fit(X, y)
