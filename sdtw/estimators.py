"""Three estimators with scikit-learn's conventions (``fit``/``predict``/``score``,
``get_params``/``set_params``, :func:`sklearn.base.clone`), on CPU or GPU tensors, for equal-
or variable-length series (a list of series of different lengths is padded, with lengths,
by :func:`sdtw.neighbors.as_padded`):

* :class:`KNeighborsTimeSeriesClassifier`: k nearest neighbours by exact DTW (``gamma=0``,
  the default), soft-DTW or the divergence, through the chunked :func:`sdtw.knn`;
* :class:`SoftDTWKMeans`: k-means whose assignment is soft-DTW (or the divergence) to the
  centroids, :func:`sdtw.cdist`, and whose centroids are soft-DTW barycenters,
  :func:`sdtw.softdtw_barycenter`;
* :class:`NearestCentroidTimeSeriesClassifier`: one barycenter per class, each series to the
  class of the nearest.

Each takes ``measure="softdtw"`` (the default) or ``"softmsm"`` with its stiffness ``c``
(:mod:`sdtw.measures`): Soft-MSM then replaces soft-DTW everywhere, the neighbours, the
assignment and the barycenters alike (``gamma > 0``).  Parameters are stored as given
(scikit-learn's convention) and validated by ``fit``.

Needs scikit-learn (``pip install scikit-learn``): this module is not imported by ``import
sdtw``.
"""

from __future__ import annotations

import numpy as np
import torch

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, ClusterMixin
except ImportError as exc:  # (an optional dependency: say how to get it)
    raise ImportError(
        "sdtw.estimators needs scikit-learn: pip install 'sdtw[estimators]' (or scikit-learn)"
    ) from exc

from sdtw.barycenter import softdtw_barycenter
from sdtw.cdist import cdist
from sdtw.measures import measure_settings
from sdtw.neighbors import as_padded, knn

__all__ = [
    "KNeighborsTimeSeriesClassifier",
    "NearestCentroidTimeSeriesClassifier",
    "SoftDTWKMeans",
]


def _check_settings(est) -> None:
    """The measure's settings of an estimator (errors name the argument), at ``fit``."""
    measure_settings(est.measure, gamma=est.gamma, bandwidth=est.bandwidth,
                     dist=getattr(est, "dist", "sqeuclidean"),
                     backend=est.backend, c=est.c)  # fmt: skip


def _series(X, lengths, rows) -> list[torch.Tensor]:
    """The unpadded series ``rows`` of a padded batch X (B, N, D)."""
    return [X[r, : (X.shape[1] if lengths is None else int(lengths[r]))] for r in rows]


def _barycenters(est, sets: list[list[torch.Tensor]], init, length=None) -> torch.Tensor:
    """One barycenter (K, N, D) per set, in one call, by the estimator's measure and settings."""
    return softdtw_barycenter(sets, gamma=est.gamma, init=init, length=length,
                              max_iter=est.barycenter_iter, backend=est.backend,
                              bandwidth=est.bandwidth, measure=est.measure,
                              c=est.c)  # fmt: skip


class KNeighborsTimeSeriesClassifier(ClassifierMixin, BaseEstimator):
    """k-nearest-neighbours classifier of time series.

    Parameters
    ----------
    n_neighbors : int
        Neighbours that vote (ties between classes: the class of the nearest tied neighbour).
    gamma : float
        0 (default): exact DTW; > 0: soft-DTW (with ``normalize``: its divergence, which is 0
        between a series and itself; the plain value is not, and can be negative).
    normalize, bandwidth, dist, backend
        As in :func:`sdtw.cdist`.
    device : str, torch.device or None
        Where to compute (None: where the training data is).
    group : torch.distributed ProcessGroup, True or None
        Shard the neighbour search over the ranks (:func:`sdtw.knn`).
    measure : {"softdtw", "softmsm"}
        Soft-DTW (and exact DTW) or Soft-MSM (:func:`sdtw.soft_msm`; then ``gamma > 0``,
        e.g. ``gamma=0.1, normalize=True`` for its divergence, and ``dist`` keeps its default).
    c : float
        Soft-MSM's stiffness, > 0 (``measure="softmsm"`` only).
    """

    def __init__(self, n_neighbors=1, gamma=0.0, normalize=False, bandwidth=None,
                 dist="sqeuclidean", backend="auto", device=None, group=None,
                 measure="softdtw", c=1.0):  # fmt: skip
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.normalize = normalize
        self.bandwidth = bandwidth
        self.dist = dist
        self.backend = backend
        self.device = device
        self.group = group
        self.measure = measure
        self.c = c

    def fit(self, X, y):
        _check_settings(self)
        self.X_, self.lengths_ = as_padded(X, "X", device=self.device)
        labels = np.asarray(y)
        if labels.shape != (self.X_.shape[0],):
            raise ValueError(f"y must have one label per series ({self.X_.shape[0]}), got "
                             f"shape {labels.shape}")  # fmt: skip
        self.classes_, self.y_ = np.unique(labels, return_inverse=True)
        return self

    def kneighbors(self, X, n_neighbors=None):
        """``(distances, indices)`` (B, k) of the nearest training series, nearest first."""
        Q, lengths = as_padded(X, "X", dtype=self.X_.dtype, device=self.X_.device)
        v, i = knn(Q, self.X_, n_neighbors or self.n_neighbors, gamma=self.gamma,
                   normalize=self.normalize, bandwidth=self.bandwidth, dist=self.dist,
                   x_lengths=lengths, y_lengths=self.lengths_, backend=self.backend,
                   group=self.group, measure=self.measure, c=self.c)  # fmt: skip
        return v.cpu().numpy(), i.cpu().numpy()

    def predict(self, X):
        _, idx = self.kneighbors(X)
        votes = self.y_[idx]  # (B, k), nearest first
        C = len(self.classes_)
        counts = np.zeros((votes.shape[0], C), dtype=np.int64)
        np.add.at(counts, (np.arange(votes.shape[0])[:, None], votes), 1)
        best = counts.max(1, keepdims=True)
        # among the tied classes, the one whose member comes first in the nearest-first list
        tied = counts[np.arange(votes.shape[0])[:, None], votes] == best
        return self.classes_[votes[np.arange(votes.shape[0]), tied.argmax(1)]]


class SoftDTWKMeans(ClusterMixin, BaseEstimator):
    """k-means of time series under soft-DTW (or Soft-MSM), centroids by its barycenters.

    Each iteration assigns every series to the centroid of least soft-DTW value (or
    divergence, ``normalize=True``) by :func:`sdtw.cdist`, then moves each non-empty
    cluster's centroid to the barycenter of its members (:func:`sdtw.softdtw_barycenter`,
    all clusters in one call, started at the current centroids), until the labels stop
    changing or ``max_iter``.  With ``group``, the assignment's pairs and the clusters'
    barycenters are dealt to the ranks and all-gathered.  Initial centroids: ``n_clusters``
    distinct series drawn with ``random_state``; the best of ``n_init`` runs (lowest inertia)
    is kept.  With ``measure="softmsm"`` (stiffness ``c``) Soft-MSM takes soft-DTW's place
    in both steps: the assignment by Soft-MSM (or its divergence), the centroids Soft-MSM
    barycenters (:func:`sdtw.soft_msm_barycenter`).

    Parameters
    ----------
    n_clusters : int
    gamma, normalize, bandwidth, backend
        As in :func:`sdtw.cdist` (``gamma > 0``: the barycenters need a smooth objective).
    max_iter : int
        Assignment and update rounds at most.
    barycenter_iter : int
        Optimiser iterations per barycenter update (:func:`sdtw.softdtw_barycenter`).
    n_init, random_state
        Runs from different initial centroids, and their seed.
    device, group
        Where to compute; the process group to shard over.
    measure : {"softdtw", "softmsm"}
        The measure of the assignment and of the barycenters.
    c : float
        Soft-MSM's stiffness, > 0 (``measure="softmsm"`` only).

    Attributes
    ----------
    cluster_centers_ : Tensor (n_clusters, N, D)
    labels_ : ndarray (B,)
    inertia_ : float
        Sum over the series of the value to their centroid (soft-DTW values can be
        negative: so can the inertia).
    n_iter_ : int
    """

    def __init__(self, n_clusters=3, gamma=1.0, normalize=False, bandwidth=None, max_iter=10,
                 barycenter_iter=30, n_init=1, random_state=None, backend="auto",
                 device=None, group=None, measure="softdtw", c=1.0):  # fmt: skip
        self.n_clusters = n_clusters
        self.gamma = gamma
        self.normalize = normalize
        self.bandwidth = bandwidth
        self.max_iter = max_iter
        self.barycenter_iter = barycenter_iter
        self.n_init = n_init
        self.random_state = random_state
        self.backend = backend
        self.device = device
        self.group = group
        self.measure = measure
        self.c = c

    def _distances(self, X, lengths, centers) -> torch.Tensor:
        with torch.no_grad():
            return cdist(X, centers, gamma=self.gamma, normalize=self.normalize,
                         bandwidth=self.bandwidth, x_lengths=lengths, backend=self.backend,
                         progress=False, group=self.group, measure=self.measure,
                         c=self.c)  # fmt: skip

    def _run(self, X, lengths, rng) -> tuple:
        B = X.shape[0]
        if not 1 <= self.n_clusters <= B:
            raise ValueError(f"n_clusters must be between 1 and the {B} series, got "
                             f"{self.n_clusters!r}")  # fmt: skip
        picks = rng.choice(B, self.n_clusters, replace=False)
        n = int(X.shape[1] if lengths is None else lengths.max())
        centers = X[torch.as_tensor(picks), :n].clone()
        labels, n_iter = None, 0
        for _ in range(self.max_iter):
            n_iter += 1
            D = self._distances(X, lengths, centers)
            new = D.argmin(1).cpu().numpy()
            if labels is not None and np.array_equal(new, labels):
                break
            labels = new
            centers = self._update(X, lengths, labels, centers)
        D = self._distances(X, lengths, centers)
        labels = D.argmin(1).cpu().numpy()
        inertia = float(D[torch.arange(B), torch.as_tensor(labels)].sum())
        return centers, labels, inertia, n_iter

    def _update(self, X, lengths, labels, centers) -> torch.Tensor:
        ks = [k for k in range(self.n_clusters) if (labels == k).any()]  # (empty: kept)
        if self.group is None:
            Z = self._barycenters(X, lengths, labels, centers, ks)
        else:  # each rank its block of the clusters, then all-gathered
            import torch.distributed as dist

            from sdtw.shard import blocks, gather_blocks, process_group

            pg = process_group(self.group)
            spans = blocks(len(ks), dist.get_world_size(pg))
            a, b = spans[dist.get_rank(pg)]
            mine = self._barycenters(X, lengths, labels, centers, ks[a:b])
            Z = gather_blocks(mine, spans, pg)
        out = centers.clone()
        out[ks] = Z
        return out

    def _barycenters(self, X, lengths, labels, centers, ks) -> torch.Tensor:
        """The barycenters (len(ks), N, D) of the clusters ``ks``, from their centroids."""
        if not ks:
            return centers[:0]
        sets = [_series(X, lengths, np.flatnonzero(labels == k)) for k in ks]
        Z = _barycenters(self, sets, centers[ks])
        return Z.reshape(len(ks), *centers.shape[1:]).to(centers.dtype)

    def fit(self, X, y=None):
        _check_settings(self)
        Xp, lengths = as_padded(X, "X", device=self.device)
        rng = np.random.default_rng(self.random_state)
        best = None
        for _ in range(max(1, self.n_init)):
            run = self._run(Xp, lengths, rng)
            if best is None or run[2] < best[2]:
                best = run
        self.cluster_centers_, self.labels_, self.inertia_, self.n_iter_ = best
        return self

    def predict(self, X):
        Xp, lengths = as_padded(X, "X", dtype=self.cluster_centers_.dtype,
                                device=self.cluster_centers_.device)  # fmt: skip
        return self._distances(Xp, lengths, self.cluster_centers_).argmin(1).cpu().numpy()

    def fit_predict(self, X, y=None):
        return self.fit(X).labels_


class NearestCentroidTimeSeriesClassifier(ClassifierMixin, BaseEstimator):
    """Nearest-centroid classifier of time series: each class's centroid is the barycenter of
    its training series (soft-DTW's, or Soft-MSM's with ``measure="softmsm"``), all classes in
    one call of :func:`sdtw.softdtw_barycenter`; a series goes to the class of the centroid
    of least value (or divergence, ``normalize=True``) by :func:`sdtw.cdist`.

    Parameters
    ----------
    gamma : float
        > 0: the barycenters' smoothing, and the assignment's.
    normalize, bandwidth, backend
        As in :func:`sdtw.cdist`.
    barycenter_iter : int
        Optimiser iterations per barycenter (started at the class's mean).
    length : int or None
        The centroids' length; None: the longest training series.
    device : str, torch.device or None
        Where to compute (None: where the training data is).
    measure : {"softdtw", "softmsm"}
        The measure of the barycenters and of the assignment.
    c : float
        Soft-MSM's stiffness, > 0 (``measure="softmsm"`` only).

    Attributes
    ----------
    classes_ : ndarray (C,)
    centroids_ : Tensor (C, N, D)
        ``centroids_[k]``: the barycenter of class ``classes_[k]``.
    """

    def __init__(self, gamma=1.0, normalize=False, bandwidth=None, barycenter_iter=30,
                 length=None, backend="auto", device=None, measure="softdtw",
                 c=1.0):  # fmt: skip
        self.gamma = gamma
        self.normalize = normalize
        self.bandwidth = bandwidth
        self.barycenter_iter = barycenter_iter
        self.length = length
        self.backend = backend
        self.device = device
        self.measure = measure
        self.c = c

    def fit(self, X, y):
        _check_settings(self)
        Xp, lengths = as_padded(X, "X", device=self.device)
        labels = np.asarray(y)
        if labels.shape != (Xp.shape[0],):
            raise ValueError(f"y must have one label per series ({Xp.shape[0]}), got "
                             f"shape {labels.shape}")  # fmt: skip
        self.classes_, codes = np.unique(labels, return_inverse=True)
        sets = [_series(Xp, lengths, np.flatnonzero(codes == k)) for k in range(len(self.classes_))]
        Z = _barycenters(self, sets, None, self.length)
        self.centroids_ = Z.reshape(len(sets), -1, Xp.shape[2]).to(Xp.dtype)
        return self

    def centroid_distances(self, X) -> np.ndarray:
        """The (B, C) matrix of values (or divergences) to each class's centroid."""
        Q, lengths = as_padded(X, "X", dtype=self.centroids_.dtype,
                               device=self.centroids_.device)  # fmt: skip
        with torch.no_grad():
            D = cdist(Q, self.centroids_, gamma=self.gamma, normalize=self.normalize,
                      bandwidth=self.bandwidth, x_lengths=lengths, backend=self.backend,
                      progress=False, measure=self.measure, c=self.c)  # fmt: skip
        return D.cpu().numpy()

    def predict(self, X):
        return self.classes_[self.centroid_distances(X).argmin(1)]
