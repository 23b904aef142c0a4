"""All pairs: ``cdist(X, Y)``, the (B1, B2) matrix of soft-DTW values (or of the divergence, or
of exact DTW, or of Soft-MSM), following :func:`torch.cdist`'s shapes.

A new shape over the same engine: the pairs of the matrix are a table of ``(x row, y row)``
indices, cut into chunks; each chunk gathers only its own rows (no (B1 B2, N, D) copy of the
inputs), is planned as a call of its own (:func:`sdtw.engine.plan_pairs`) and runs through
:func:`sdtw.engine.pair_values`.  ``Y=None`` computes each unordered pair once (the upper
triangle and the diagonal) and mirrors it; the divergence's self terms are computed once per
series (B1 + B2 values, or the diagonal itself when ``Y=None``).  Under an initialised
:mod:`torch.distributed` process group (``group=``), the chunks are dealt to the ranks and the
values all-gathered: every rank returns the same matrix, equal to one process's.

The measure is the recurrence every chunk is planned with (:mod:`sdtw.measures`: soft-DTW, or
Soft-MSM with ``measure="softmsm"``); nothing here depends on which.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable

import torch

from sdtw import _validation as V
from sdtw import engine
from sdtw.engine import SOFTDTW, Pairs, Recurrence
from sdtw.measures import measure_settings

__all__ = ["cdist", "chunk_pairs"]

#: The working memory a chunk aims at (its cost tensors and tables), in bytes.
CHUNK_BYTES = 256 * 2**20
#: Pairs per call of a backend's forward-only table kernel (no memory per pair to bound): at
#: least this many, and at least the backend's ``table_cells`` cells.
TABLE_PAIRS = 2**14
#: ``progress=None`` shows a bar when the first chunk says the whole job takes longer than this.
PROGRESS_AFTER_S = 5.0


def chunk_pairs(
    P: int, N: int, M: int, D: int, grad: bool, chunk: int | None, tables: int = 1
) -> int:
    """Pairs per chunk: ``chunk`` where given, else as many as fit :data:`CHUNK_BYTES` (a cost
    and a table of N x M float64 per pair, twice that with gradients; ``tables`` such tables
    per pair, as Soft-MSM's one per channel; one pair at least)."""
    if chunk is not None:
        return chunk
    per_pair = 8 * ((N + 1) * (M + 1) * (2 if grad else 1) * tables + (N + M) * D)
    return max(1, min(P, CHUNK_BYTES // per_pair))


def _check_matrix(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.ndim != 3 or 0 in t.shape:
        shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{name} must be a non-empty tensor (B, N, D), got {shape}")
    return t


def _lengths(name: str, lengths: object, B: int, size: int) -> torch.Tensor:
    if lengths is None:
        return torch.full((B,), size, dtype=torch.int64)
    return V.check_one_lengths(name, lengths, B, size)[0]


def _index_pairs(B1: int, B2: int, symmetric: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    if symmetric:
        i, j = torch.triu_indices(B1, B1, device=device)
        return i, j
    i = torch.arange(B1, device=device).repeat_interleave(B2)
    return i, torch.arange(B2, device=device).repeat(B1)


def _run_pairs(
    opts,
    X,
    Y,
    i,
    j,
    xl,
    yl,
    step: int,
    grad: bool,
    bar,
    recurrence: Recurrence = SOFTDTW,
    table_step: int | None = None,
) -> torch.Tensor:
    """Values (P,) of the pairs ``(X[i[p]], Y[j[p]])``, ``step`` pairs per call (where the
    backend has a forward-only kernel that reads the rows in place, which needs no memory per
    pair: ``table_step``, or None: :data:`TABLE_PAIRS` and the backend's ``table_cells`` at
    least), each call planned with ``recurrence``."""
    out = [X.new_zeros(0)]  # (a rank may have no pairs)
    table = None
    if not grad:
        table = engine.plan_pairs(opts, X, Y, xl is not None, False, recurrence)
    cells = max(X.shape[1], 1) * max(Y.shape[1], 1)  # (a pair's table)
    s = 0
    while s < i.numel():
        if table is not None:
            n = table_step or max(step, TABLE_PAIRS, table.backend.table_cells // cells)
            v = table.backend.table_values(table, X, Y, i[s : s + n], j[s : s + n], xl, yl)
            if v is not None:
                out.append(v)
                if bar is not None:
                    bar(v.numel())
                s += n
                continue
            table = None  # (no such kernel for this plan: gather the rows)
        ic, jc = i[s : s + step], j[s : s + step]
        s += step

        def leaf(X, Y, ic=ic, jc=jc):
            a, b = X.index_select(0, ic), Y.index_select(0, jc)
            pairs = Pairs() if xl is None else Pairs(xl[ic], yl[jc])
            plan = engine.plan_pairs(opts, a, b, xl is not None, grad, recurrence)
            return engine.pair_values(plan, a, b, pairs)

        if grad and step < i.numel():  # (recomputed in the backward: one chunk's memory)
            v = torch.utils.checkpoint.checkpoint(leaf, X, Y, use_reentrant=False)
        else:
            v = leaf(X, Y)
        out.append(v)
        if bar is not None:
            bar(ic.numel())
    return torch.cat(out)


class _Progress:
    """A tqdm bar over the pairs: always (``True``), never (``False``), or (``None``) from the
    moment the last chunk's rate says the pairs left take longer than
    :data:`PROGRESS_AFTER_S` (the last chunk's, not the first's: that one holds the kernels'
    compilation)."""

    def __init__(self, total: int, progress: bool | None):
        self.total, self.mode, self.done, self.bar = total, progress, 0, None
        self.last = time.perf_counter()

    def __call__(self, n: int) -> None:
        now, self.done = time.perf_counter(), self.done + n
        if self.bar is None and self.mode is not False:
            left = (now - self.last) * (self.total - self.done) / n
            if self.mode or left > PROGRESS_AFTER_S:
                try:
                    from tqdm.auto import tqdm
                except ImportError:  # (optional dependency: say so once, then no bar)
                    warnings.warn(
                        "sdtw.cdist: no progress bar without tqdm (pip install tqdm)",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                    self.mode = False
                    return
                self.bar = tqdm(total=self.total, initial=self.done - n, unit="pair")
        if self.bar is not None:
            self.bar.update(n)
        self.last = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def cdist(
    X: torch.Tensor,
    Y: torch.Tensor | None = None,
    *,
    gamma: float = 1.0,
    normalize: bool = False,
    bandwidth: float | None = None,
    dist: str | Callable = "sqeuclidean",
    x_lengths: object = None,
    y_lengths: object = None,
    backend: str = "auto",
    chunk: int | None = None,
    progress: bool | None = None,
    group: object = None,
    measure: str = "softdtw",
    c: float = 1.0,
) -> torch.Tensor:
    """Soft-DTW (or Soft-MSM) between every series of X and every series of Y.

    .. math::

        D_{ab} = \\mathrm{sdtw}_\\gamma(X_a, Y_b)
        \\quad\\text{or, with normalize,}\\quad
        \\mathrm{sdtw}_\\gamma(X_a, Y_b)
        - \\tfrac12\\big(\\mathrm{sdtw}_\\gamma(X_a, X_a) + \\mathrm{sdtw}_\\gamma(Y_b, Y_b)\\big)

    Parameters
    ----------
    X : Tensor, shape (B1, N, D)
    Y : Tensor, shape (B2, M, D), or None
        None: X against itself, each unordered pair computed once (the matrix is symmetric).
    gamma, normalize, bandwidth, dist, backend
        As in :func:`sdtw.softdtw` (``gamma=0``: exact DTW), or with ``measure="softmsm"`` as
        in :func:`sdtw.soft_msm` (``gamma > 0``; ``dist`` must keep its default).
    x_lengths, y_lengths : integer Tensor (B1,), (B2,), sequence of ints, or None
        Each series' own length in a padded batch (``y_lengths`` must be None when ``Y`` is).
    chunk : int or None
        Pairs per engine call; None: as many as fit 256 MiB of cost and tables
        (:func:`chunk_pairs`), or where the values come from a forward-only kernel that reads
        the rows in place, 16384 pairs and on CUDA 2^32 cells at least.
    progress : bool or None
        A tqdm progress bar over the pairs; None: shown when the first chunk says the whole
        job takes more than 5 s.
    group : torch.distributed ProcessGroup, True, or None
        Shard the chunks over the ranks of this process group (True: the default group) and
        all-gather the values; every rank gets the whole matrix.  Forward only (no gradient
        crosses the all-gather).
    measure : {"softdtw", "softmsm"}
        The pairs' measure (:mod:`sdtw.measures`): soft-DTW, or Soft-MSM
        (:func:`sdtw.soft_msm`; ``normalize=True`` is then its divergence, with ``smsm`` in
        place of ``sdtw`` above).
    c : float
        Soft-MSM's stiffness, > 0 (``measure="softmsm"`` only).

    Returns
    -------
    Tensor, shape (B1, B2), X's dtype and device.  Differentiable wrt X and Y where they
    require gradients (each chunk's forward is then recomputed in the backward, so the memory
    stays one chunk's); forward only otherwise.
    """
    X = _check_matrix("X", X)
    symmetric = Y is None
    if symmetric:
        if y_lengths is not None:
            raise ValueError("y_lengths must be None when Y is None (X against itself)")
        Y, y_lengths = X, x_lengths
    Y = _check_matrix("Y", Y)
    V.check_sequences(X[:1], Y[:1])  # (dtype, device and D agree)
    opts, recurrence = measure_settings(measure, gamma=gamma, bandwidth=bandwidth, dist=dist,
                                        backend=backend, c=c)  # fmt: skip
    normalize = V.check_flag("normalize", normalize)
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"chunk must be a positive int or None, got {chunk!r}")
    if progress is not None:
        progress = V.check_flag("progress", progress)
    (B1, N, D), (B2, M) = X.shape, Y.shape[:2]
    xl = yl = None
    if x_lengths is not None or y_lengths is not None:
        xl, yl = _lengths("x_lengths", x_lengths, B1, N), _lengths("y_lengths", y_lengths, B2, M)
        xl, yl = xl.to(X.device), yl.to(X.device)
    grad = torch.is_grad_enabled() and (X.requires_grad or Y.requires_grad)
    i, j = _index_pairs(B1, B2, symmetric, X.device)
    selfs = normalize and not symmetric
    P = i.numel() + (B1 + B2 if selfs else 0)
    tables = D if recurrence.kind == "sequences" else 1  # (one DP table per channel)
    step = chunk_pairs(P, max(N, M), max(N, M), D, grad, chunk, tables)
    bar = _Progress(P, progress)
    # (a forward-only table kernel holds nothing per pair: chunks as large as a launch wants)
    run_pairs = functools.partial(_run_pairs, recurrence=recurrence, table_step=chunk)
    run = _sharded(run_pairs, group, grad) or run_pairs
    try:
        with torch.set_grad_enabled(grad):
            v = run(opts, X, Y, i, j, xl, yl, step, grad, bar)
            if selfs:
                ar1, ar2 = torch.arange(B1, device=X.device), torch.arange(B2, device=X.device)
                sx = run(opts, X, X, ar1, ar1, xl, xl, step, grad, bar)
                sy = run(opts, Y, Y, ar2, ar2, yl, yl, step, grad, bar)
    finally:
        bar.close()
    out = _assemble(v, i, j, B1, B2, symmetric)
    if normalize:
        if symmetric:
            sx = sy = torch.diagonal(out)
        out = out - 0.5 * (sx[:, None] + sy[None, :])
    return out


def _assemble(v, i, j, B1: int, B2: int, symmetric: bool) -> torch.Tensor:
    """The (B1, B2) matrix of the pairs' values (mirrored where symmetric: each position
    written once, so the gradient of a value is not counted twice)."""
    if symmetric:
        off = i != j
        i, j, v = torch.cat([i, j[off]]), torch.cat([j, i[off]]), torch.cat([v, v[off]])
    return v.new_zeros(B1, B2).index_put((i, j), v)


def _sharded(run_pairs, group, grad: bool):
    """The chunk runner over a process group's ranks, or None without one."""
    if group is None or group is False:
        return None
    from sdtw.shard import sharded_runner

    return sharded_runner(run_pairs, group, grad)
