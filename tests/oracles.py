"""Independent oracles: brute-force enumeration of all monotone alignment paths."""

from __future__ import annotations

import numpy as np


def all_paths(N: int, M: int) -> list[list[tuple[int, int]]]:
    """Every monotone path (0, 0) -> (N-1, M-1) with steps (1, 0), (0, 1), (1, 1)."""
    out: list[list[tuple[int, int]]] = []

    def walk(path: list[tuple[int, int]]) -> None:
        i, j = path[-1]
        if (i, j) == (N - 1, M - 1):
            out.append(list(path))
            return
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di < N and j + dj < M:
                path.append((i + di, j + dj))
                walk(path)
                path.pop()

    walk([(0, 0)])
    return out


def brute_force(cost: np.ndarray, gamma: float, mask: np.ndarray | None = None):
    """Soft-DTW value and expected alignment of one (N, M) cost by enumeration.

    value = -gamma log sum_A exp(-<A, C>/gamma);  E = sum_A softmax_A * A.
    """
    N, M = cost.shape
    paths = all_paths(N, M)
    if mask is not None:
        paths = [p for p in paths if all(mask[i, j] for i, j in p)]
    costs = np.array([sum(cost[i, j] for i, j in p) for p in paths])
    a = -costs / gamma
    amax = a.max()
    w = np.exp(a - amax)
    value = -gamma * (amax + np.log(w.sum()))
    w /= w.sum()
    E = np.zeros((N, M))
    for wk, p in zip(w, paths, strict=True):
        for i, j in p:
            E[i, j] += wk
    return value, E


def dtw(cost: np.ndarray) -> float:
    """Classic DTW (hard min) of one cost matrix."""
    N, M = cost.shape
    R = np.full((N + 1, M + 1), np.inf)
    R[0, 0] = 0.0
    for i in range(1, N + 1):
        for j in range(1, M + 1):
            R[i, j] = cost[i - 1, j - 1] + min(R[i - 1, j - 1], R[i - 1, j], R[i, j - 1])
    return float(R[N, M])
