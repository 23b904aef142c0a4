"""Nearest neighbours by soft-DTW, exact DTW, Soft-MSM or a divergence, without the whole matrix:
:func:`knn` runs :func:`sdtw.cdist` on blocks of query rows and keeps each block's k
smallest; :func:`as_padded` takes series as a tensor, an array or a list of series of
different lengths."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from sdtw.cdist import CHUNK_BYTES, cdist
from sdtw.measures import measure_settings

__all__ = ["as_padded", "knn"]


def as_padded(X: object, name: str = "X", dtype=None, device=None) -> tuple:
    """``(padded, lengths)``: series as one tensor (B, N, D) and their lengths (B,) int64, or
    None where all have the padded length.  ``X``: a tensor or array (B, N, D) or (B, N)
    (univariate), or a sequence of B series (n_b, D) or (n_b,) whose lengths may differ
    (padded with zeros at the end).  Floating dtypes are kept (float64 for anything else)."""
    if isinstance(X, (torch.Tensor, np.ndarray)) and np.ndim(X) in (2, 3):
        t = torch.as_tensor(X)
        t = t if t.ndim == 3 else t[:, :, None]
        t = t if t.is_floating_point() else t.double()
        return t.to(device=device, dtype=dtype or t.dtype), None
    if not isinstance(X, Sequence) or len(X) == 0:
        raise ValueError(f"{name} must be a (B, N, D) or (B, N) tensor or array, or a non-empty "
                         f"list of series, got {type(X).__name__}")  # fmt: skip
    series = [torch.as_tensor(s) for s in X]
    series = [s if s.ndim == 2 else s[:, None] for s in series]
    bad = [b for b, s in enumerate(series) if s.ndim != 2 or s.shape[0] == 0]
    if bad or len({s.shape[1] for s in series}) != 1:
        raise ValueError(f"{name}: every series must be (n, D) or (n,) with n >= 1 and one D; "
                         f"got shapes {[tuple(s.shape) for s in series[:5]]}...")  # fmt: skip
    lengths = torch.tensor([s.shape[0] for s in series])
    dt = dtype or (series[0].dtype if series[0].is_floating_point() else torch.float64)
    out = torch.zeros(len(series), int(lengths.max()), series[0].shape[1], dtype=dt)
    for b, s in enumerate(series):
        out[b, : s.shape[0]] = s
    full = bool((lengths == out.shape[1]).all())
    return out.to(device), None if full else lengths


def knn(
    X: torch.Tensor,
    Y: torch.Tensor,
    k: int = 1,
    *,
    gamma: float = 0.0,
    normalize: bool = False,
    bandwidth: float | None = None,
    dist: str | Callable = "sqeuclidean",
    x_lengths: object = None,
    y_lengths: object = None,
    backend: str = "auto",
    rows: int | None = None,
    group: object = None,
    measure: str = "softdtw",
    c: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest series of Y to each series of X: ``(values, indices)``, both (B1, k),
    nearest first (ties: the lower index), forward only.

    Parameters
    ----------
    X : Tensor (B1, N, D); Y : Tensor (B2, M, D)
    k : int
        1 <= k <= B2.
    gamma, normalize, bandwidth, dist, x_lengths, y_lengths, backend, measure, c
        As in :func:`sdtw.cdist`; ``gamma=0`` (the default here): exact DTW.  Soft-MSM
        (``measure="softmsm"``, stiffness ``c``) needs ``gamma > 0``.
    rows : int or None
        Rows of X per block (a block holds a (rows, B2) slice of the matrix); None: as many
        as keep the block's cost tensors within 256 MiB.
    group : torch.distributed ProcessGroup, True or None
        Deal the blocks of rows to the ranks and all-gather the results (every rank gets
        them all, equal to one process's).

    Returns
    -------
    values : Tensor (B1, k), X's dtype
        The measure's values (or divergences), ascending along each row.
    indices : int64 Tensor (B1, k)
        Their rows in Y.
    """
    B1, N = X.shape[:2]
    B2, M = Y.shape[:2]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= B2:
        raise ValueError(f"k must be an int between 1 and B2={B2}, got {k!r}")
    measure_settings(measure, gamma=gamma, bandwidth=bandwidth, dist=dist, backend=backend,
                     c=c)  # (the settings' errors at the entry, before any block)  # fmt: skip
    if rows is None:
        rows = max(1, CHUNK_BYTES // (8 * (N + 1) * (M + 1) * B2))
    xl = None if x_lengths is None else torch.as_tensor(x_lengths)
    start, stop = 0, B1
    if group is not None:
        import torch.distributed as dist_

        from sdtw.shard import blocks, gather_blocks, process_group

        pg = process_group(group)
        spans = blocks(B1, dist_.get_world_size(pg))
        start, stop = spans[dist_.get_rank(pg)]
    vals, idx = [X.new_zeros(0, k)], [torch.zeros(0, k, dtype=torch.int64, device=X.device)]
    with torch.no_grad():
        for a in range(start, stop, rows):
            b = min(a + rows, stop)
            D = cdist(X[a:b], Y, gamma=gamma, normalize=normalize, bandwidth=bandwidth,
                      dist=dist, x_lengths=None if xl is None else xl[a:b],
                      y_lengths=y_lengths, backend=backend, progress=False,
                      measure=measure, c=c)  # fmt: skip
            # (a stable sort: equal values keep the lower index first, on every device)
            v, i = torch.sort(D, dim=1, stable=True)
            vals.append(v[:, :k])
            idx.append(i[:, :k])
    values, indices = torch.cat(vals), torch.cat(idx)
    if group is not None:
        values = gather_blocks(values, spans, pg)
        indices = gather_blocks(indices, spans, pg)
    return values, indices
