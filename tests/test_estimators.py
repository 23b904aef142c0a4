"""The chunked nearest neighbours and the scikit-learn-style estimators: knn against the full
matrix, clone and get/set_params, variable-length lists, GunPoint 1-NN sanity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from tests.conftest import randn

pytest.importorskip("sklearn")
from sklearn.base import clone

from sdtw.estimators import KNeighborsTimeSeriesClassifier, SoftDTWKMeans


@pytest.mark.parametrize("kw", [dict(gamma=0.0), dict(gamma=0.5, normalize=True)])
def test_knn_is_the_full_matrix_sorted(rng, kw):
    X, Y = randn(rng, 9, 6, 2), randn(rng, 7, 5, 2)
    xl, yl = [6, 2, 5, 6, 1, 3, 6, 6, 4], [5, 5, 3, 1, 5, 2, 4]
    D = sdtw.cdist(X, Y, x_lengths=xl, y_lengths=yl, **kw)
    for rows in (1, 4, None):
        v, i = sdtw.knn(X, Y, 3, x_lengths=xl, y_lengths=yl, rows=rows, **kw)
        want_v, want_i = torch.sort(D, dim=1, stable=True)
        assert torch.equal(i, want_i[:, :3]) and torch.equal(v, want_v[:, :3])
    with pytest.raises(ValueError, match="k must"):
        sdtw.knn(X, Y, 8)


def test_params_clone_and_lists_of_different_lengths(rng):
    clf = KNeighborsTimeSeriesClassifier(n_neighbors=3, gamma=0.1, bandwidth=4)
    assert clf.get_params()["n_neighbors"] == 3
    twin = clone(clf).set_params(n_neighbors=1)
    assert twin.n_neighbors == 1 and clf.n_neighbors == 3 and twin.gamma == 0.1
    km = clone(SoftDTWKMeans(n_clusters=2, gamma=0.5, random_state=0))
    assert km.get_params()["n_clusters"] == 2
    # two well separated families, lists of series of different lengths (numpy and torch)
    t = [np.linspace(0, 1, n) for n in (9, 12, 10, 11, 8, 12)]
    X = [np.sin(6 * s) for s in t[:3]] + [torch.as_tensor(5 + np.cos(6 * s)) for s in t[3:]]
    y = ["a", "a", "a", "b", "b", "b"]
    clf = KNeighborsTimeSeriesClassifier().fit(X, y)
    assert list(clf.predict(X)) == y and clf.score(X, y) == 1.0
    labels = km.fit_predict(X)
    assert len(set(labels[:3])) == 1 and len(set(labels[3:])) == 1 and labels[0] != labels[3]
    assert km.cluster_centers_.shape[0] == 2 and np.isfinite(km.inertia_)
    assert list(km.predict(X)) == list(km.labels_)


def test_gunpoint_one_nn():
    """Exact DTW 1-NN on GunPoint (full window): the UCR archive's published test error is
    0.093."""
    datasets = pytest.importorskip("aeon.datasets")
    Xtr, ytr = datasets.load_gunpoint(split="train")
    Xte, yte = datasets.load_gunpoint(split="test")
    Xtr, Xte = Xtr.transpose(0, 2, 1), Xte.transpose(0, 2, 1)  # aeon: (B, channels, time)
    err = 1.0 - KNeighborsTimeSeriesClassifier(gamma=0.0).fit(Xtr, ytr).score(Xte, yte)
    assert abs(err - 0.093) < 0.01, err
