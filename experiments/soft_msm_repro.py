"""Soft-MSM's claims on the UCR datasets that aeon ships (issue 54), small enough for 2 cores.

``python -m experiments.soft_msm_repro [--out FILE] [--repeats 10] [--max-iter 30]
[--datasets ItalyPowerDemand GunPoint ...]`` writes one long-format CSV (one row per
measurement, with the run's provenance) that ``python -m paper.soft_msm_report`` turns into
``paper/SOFT_MSM.md``.  Every series is z-normalised.

1. Barycentre loss (Holder & Bagnall's Table of MSM barycentre losses): per repeat, 10 random
   training series of one random class (seeded); the loss of a barycentre is the sum of the hard
   MSM distances (aeon's ``msm_distance``, c = 1, absolute legs, as the paper scores) from the 10
   series to it.  Barycentres: Soft-MSM (``sdtw.soft_msm_barycenter``, c = 1, gamma in
   {1, 0.1, 0.01, 0.001}), aeon's MSM barycentre average (MBA:
   ``elastic_barycenter_average(distance="msm")``, Petitjean's method), soft-DTW's barycentre
   (``sdtw.softdtw_barycenter``, same gammas) and the arithmetic mean; both soft barycentres by
   L-BFGS from the mean, ``--max-iter`` iterations.
2. Nearest-centroid accuracy: one centroid per class from the training set (at most
   ``--per-class`` series per class, seeded), each test series given the class of its nearest
   centroid; Soft-MSM centroids scored with MSM, soft-DTW centroids with DTW (aeon's
   distances), gamma = 0.1 for both, and MBA centroids with MSM.
3. k-means adjusted Rand index (k = the number of classes, training set, Lloyd's iterations
   with barycentre updates, gamma = 0.1; not on OSULeaf: too long here).

Series longer than 256 run ``--long-repeats`` repeats (OSULeaf, 427: the time of the soft
barycentres grows with N^2).  The CSV records what ran.
"""

from __future__ import annotations

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from experiments.provenance import RESULTS, provenance

GAMMAS = (1.0, 0.1, 0.01, 0.001)
NC_GAMMA = 0.1
C = 1.0
DATASETS = ("ItalyPowerDemand", "GunPoint", "ArrowHead", "OSULeaf")
OUT = RESULTS / "cpu-amd-epyc" / "soft_msm.csv"
COLUMNS = ("experiment", "dataset", "method", "gamma", "repeat", "metric", "value")


def load(name: str) -> tuple:
    """z-normalised (train X (n, N), train y, test X, test y) of a dataset aeon ships."""
    from aeon import datasets

    loader = {
        "ItalyPowerDemand": datasets.load_italy_power_demand,
        "GunPoint": datasets.load_gunpoint,
        "ArrowHead": datasets.load_arrow_head,
        "OSULeaf": datasets.load_osuleaf,
    }[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (load_osuleaf is deprecated)
        out = []
        for split in ("train", "test"):
            X, y = loader(split=split)
            X = X[:, 0, :].astype(np.float64)
            sd = X.std(axis=1, keepdims=True)
            out += [(X - X.mean(axis=1, keepdims=True)) / np.where(sd > 0, sd, 1.0), y]
    return tuple(out)


def msm(a: np.ndarray, b: np.ndarray) -> float:
    from aeon.distances import msm_distance

    return float(msm_distance(a, b, c=C))


def dtw(a: np.ndarray, b: np.ndarray) -> float:
    from aeon.distances import dtw_distance

    return float(dtw_distance(a, b))


def barycentres(X: np.ndarray, gammas, max_iter: int) -> dict[tuple[str, float], np.ndarray]:
    """Every method's barycentre of X (S, N): {(method, gamma): (N,)}."""
    from aeon.clustering.averaging import elastic_barycenter_average

    import sdtw

    t = torch.as_tensor(X[:, :, None])
    out = {("mean", 0.0): X.mean(axis=0)}
    mba = elastic_barycenter_average(X[:, None, :], distance="msm", max_iters=max_iter, c=C)
    out[("mba", 0.0)] = np.asarray(mba).reshape(-1)
    for g in gammas:
        kw = dict(gamma=g, method="lbfgs", max_iter=max_iter, lr=1.0)
        out[("soft_msm", g)] = sdtw.soft_msm_barycenter(t, c=C, **kw).numpy()[:, 0]
        out[("soft_dtw", g)] = sdtw.softdtw_barycenter(t, **kw).numpy()[:, 0]
    return out


def barycentre_loss(name: str, data, repeats: int, max_iter: int, rng) -> list[dict]:
    Xtr, ytr = data[0], data[1]
    classes = [k for k in np.unique(ytr) if (ytr == k).sum() >= 10]
    rows = []
    for r in range(repeats):
        k = classes[rng.integers(len(classes))]
        pick = rng.choice(np.flatnonzero(ytr == k), 10, replace=False)
        X = Xtr[pick]
        t0 = time.perf_counter()
        for (method, g), Z in barycentres(X, GAMMAS, max_iter).items():
            loss = sum(msm(x, Z) for x in X)
            rows.append(dict(experiment="barycentre_loss", dataset=name, method=method, gamma=g,
                             repeat=r, metric="msm_loss", value=loss))  # fmt: skip
        print(f"  {name} repeat {r}: {time.perf_counter() - t0:.1f} s", flush=True)
    return rows


def nearest_centroid(name: str, data, per_class: int, max_iter: int, rng) -> list[dict]:
    from aeon.clustering.averaging import elastic_barycenter_average

    import sdtw

    Xtr, ytr, Xte, yte = data
    classes = np.unique(ytr)
    centroids: dict[tuple[str, str], list[np.ndarray]] = {}
    for k in classes:
        idx = np.flatnonzero(ytr == k)
        idx = rng.choice(idx, min(per_class, len(idx)), replace=False)
        t = torch.as_tensor(Xtr[idx][:, :, None])
        kw = dict(gamma=NC_GAMMA, method="lbfgs", max_iter=max_iter, lr=1.0)
        z_msm = sdtw.soft_msm_barycenter(t, c=C, **kw).numpy()[:, 0]
        z_dtw = sdtw.softdtw_barycenter(t, **kw).numpy()[:, 0]
        mba = elastic_barycenter_average(Xtr[idx][:, None, :], distance="msm", c=C,
                                         max_iters=max_iter)  # fmt: skip
        for key, z in ((("soft_msm", "msm"), z_msm), (("soft_dtw", "dtw"), z_dtw),
                       (("soft_dtw", "msm"), z_dtw), (("mba", "msm"), np.ravel(mba))):  # fmt: skip
            centroids.setdefault(key, []).append(z)
    rows = []
    for (method, distance), Zs in centroids.items():
        f = msm if distance == "msm" else dtw
        pred = [classes[int(np.argmin([f(x, z) for z in Zs]))] for x in Xte]
        acc = float(np.mean(np.asarray(pred) == yte))
        g = 0.0 if method == "mba" else NC_GAMMA
        rows.append(dict(experiment="nearest_centroid", dataset=name, method=method, gamma=g,
                         repeat=0, metric=f"accuracy_{distance}", value=acc))  # fmt: skip
    return rows


def kmeans(name: str, data, iters: int, max_iter: int, rng) -> list[dict]:
    """k-means (k = the number of classes) of the training set, Lloyd's iterations: each series
    to its nearest centroid (hard MSM for Soft-MSM centroids, DTW for soft-DTW's), each
    centroid the barycentre of its cluster (warm-started from the last); both measures from
    the same k random series; the adjusted Rand index against the classes."""
    from sklearn.metrics import adjusted_rand_score

    import sdtw

    X, y = data[0], data[1]
    k = len(np.unique(y))
    start = rng.choice(len(X), k, replace=False)
    rows = []
    for method, distance in (("soft_msm", msm), ("soft_dtw", dtw)):
        Z = X[start].copy()
        labels = np.zeros(len(X), dtype=int)
        for _ in range(iters):
            labels = np.array([int(np.argmin([distance(x, z) for z in Z])) for x in X])
            for j in range(k):
                members = X[labels == j]
                if len(members) == 0:
                    continue
                t = torch.as_tensor(members[:, :, None])
                kw = dict(gamma=NC_GAMMA, method="lbfgs", max_iter=max_iter, lr=1.0,
                          init=torch.as_tensor(Z[j][:, None]))  # fmt: skip
                if method == "soft_msm":
                    Z[j] = sdtw.soft_msm_barycenter(t, c=C, **kw).numpy()[:, 0]
                else:
                    Z[j] = sdtw.softdtw_barycenter(t, **kw).numpy()[:, 0]
        labels = np.array([int(np.argmin([distance(x, z) for z in Z])) for x in X])
        rows.append(dict(experiment="kmeans", dataset=name, method=method, gamma=NC_GAMMA,
                         repeat=0, metric="ari", value=adjusted_rand_score(y, labels)))  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--long-repeats", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=30)
    p.add_argument("--per-class", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kmeans-iter", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    prov = provenance()
    rows = []
    for name in args.datasets:
        data = load(name)
        rng = np.random.default_rng(args.seed)
        repeats = args.repeats if data[0].shape[1] <= 256 else args.long_repeats
        print(f"{name}: {data[0].shape[0]} x {data[0].shape[1]}, {repeats} repeats", flush=True)
        rows += barycentre_loss(name, data, repeats, args.max_iter, rng)
        rows += nearest_centroid(name, data, args.per_class, args.max_iter, rng)
        if data[0].shape[1] <= 256:  # (OSULeaf's 200 x 427: too long for this machine)
            rows += kmeans(name, data, args.kmeans_iter, args.max_iter // 3, rng)
    settings = dict(c=C, max_iter=args.max_iter, per_class=args.per_class, seed=args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, [*COLUMNS, *settings, *prov], lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({**row, **settings, **prov})
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
