"""Soft-DTW barycenters: one set of sequences, or K sets at once (the inner step of k-means).

The objective of group ``k`` is the weighted soft-DTW from its barycenter ``Z_k`` to its
sequences, with the weights normalised to sum to one:

.. math::

    F_k(Z_k) = \\sum_i w_{ki}\\, \\mathrm{sdtw}_\\gamma(Z_k, X_{ki}),
    \\qquad w_{ki} \\ge 0,\\ \\sum_i w_{ki} = 1.

All K objectives are evaluated together: every (group, sequence) pair of one length goes into
one batched :func:`sdtw.softdtw` call (``Z`` is gathered per pair), so an iteration costs one
forward pass (one Numba launch; two when fused, the park kernel first, see :mod:`sdtw.cuda`)
and one backward launch per *distinct input length*, never a padded sequence.  The
objectives are separable, so ``sum_k F_k`` has gradient ``dF_k / dZ_k`` in block ``k``; Adam
is element-wise and clipping and early stopping are applied per group, so K groups in one call
give the same barycenters as K separate calls.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from sdtw import _validation as V
from sdtw.functional import softdtw
from sdtw.msm import check_c, soft_msm

__all__ = ["soft_msm_barycenter", "softdtw_barycenter", "softdtw_barycenter_cpu"]

METHODS = ("adam", "lbfgs")
#: The measures a barycenter can minimise (``measure=``).
MEASURES = ("softdtw", "softmsm")
#: Gradient-norm cap per barycenter (Adam only), as the paper's code.
MAX_GRAD_NORM = 1.0
#: Function evaluations allowed to one L-BFGS line search.
LBFGS_MAX_EVAL = 25


#: Unequal lengths in one padded batch with per-pair lengths (one soft-DTW call per
#: objective), rather than one call per length.
PAD_UNEQUAL = True


@dataclass
class _Bucket:
    """(group, sequence) pairs in one batched soft-DTW call: sequences of one length M, or
    padded to the longest with their ``lengths``."""

    X: torch.Tensor  # (P, M, D) sequences
    group: torch.Tensor  # (P,) long: which barycenter each pair belongs to
    weight: torch.Tensor  # (P,) normalised weights, all > 0
    lengths: torch.Tensor | None = None  # (P,) int64 on the CPU (padded), or None

    def restrict(self, active: torch.Tensor) -> _Bucket | None:
        keep = active[self.group]
        if not bool(keep.any()):
            return None
        lengths = None if self.lengths is None else self.lengths[keep.cpu()]
        return _Bucket(self.X[keep], self.group[keep], self.weight[keep], lengths)


def _shape(t: object) -> str:
    return str(tuple(t.shape)) if hasattr(t, "shape") else type(t).__name__


def _as_tensor(name: str, t: object) -> torch.Tensor:
    if isinstance(t, np.ndarray):
        t = torch.as_tensor(t)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(
            f"{name} must have a floating dtype, got {t.dtype} with shape {tuple(t.shape)}"
        )
    return t


def _is_array(t: object) -> bool:
    return isinstance(t, (torch.Tensor, np.ndarray))


def _parse_groups(X: object) -> tuple[list[list[torch.Tensor]] | torch.Tensor, bool]:
    """Return ``(groups, grouped)``.

    ``groups`` is either a (K, S, N, D) tensor (equal sizes and lengths: kept whole, never
    split) or a list of K lists of (N_i, D) tensors.
    """
    if _is_array(X):
        X = _as_tensor("X", X)
        if X.dim() == 3:
            groups, grouped = X.unsqueeze(0), False
        elif X.dim() == 4:
            groups, grouped = X, True
        else:
            raise ValueError(
                "X must be (S, N, D), (K, S, N, D), a list of (N_i, D) sequences or a list of "
                f"K such lists; got a tensor of shape {tuple(X.shape)}"
            )
        if min(groups.shape) == 0:
            raise ValueError(
                f"X is empty: shape {tuple(X.shape)} (groups, sequences, N and D must be >= 1)"
            )
        return groups, grouped
    if not isinstance(X, Sequence) or isinstance(X, str):
        raise TypeError(
            f"X must be a tensor, numpy array or list of sequences, got {type(X).__name__}"
        )
    if len(X) == 0:
        raise ValueError("X is empty: no sequences given")
    if all(_is_array(s) and s.ndim == 2 for s in X):
        return [[_as_tensor(f"X[{i}]", s) for i, s in enumerate(X)]], False
    groups = []
    for k, G in enumerate(X):
        if _is_array(G) and G.ndim == 3:
            G = _as_tensor(f"X[{k}]", G)
            groups.append(list(G.unbind(0)))
        elif isinstance(G, Sequence) and not isinstance(G, str) and not _is_array(G):
            if not all(_is_array(s) and s.ndim == 2 for s in G):
                raise ValueError(
                    f"X[{k}] must be a list of (N_i, D) sequences; got elements of shapes "
                    f"{[_shape(s) for s in G]}"
                )
            groups.append([_as_tensor(f"X[{k}][{i}]", s) for i, s in enumerate(G)])
        else:
            raise ValueError(
                "X as a list must hold either (N_i, D) sequences (one barycenter) or, for K "
                "barycenters, K lists of (N_i, D) sequences or K (S_k, N, D) tensors; "
                f"X[{k}] has shape {_shape(G)}"
            )
    for k, G in enumerate(groups):
        if len(G) == 0:
            raise ValueError(f"X[{k}] is empty: every group needs at least one sequence")
    return groups, True


def _check_sequences(groups: list[list[torch.Tensor]], grouped: bool) -> None:
    D = groups[0][0].shape[1]
    for k, G in enumerate(groups):
        for i, s in enumerate(G):
            name = f"X[{k}][{i}]" if grouped else f"X[{i}]"
            first = "X[0][0]" if grouped else "X[0]"
            if s.shape[0] == 0 or s.shape[1] == 0:
                raise ValueError(f"{name} is empty: shape {tuple(s.shape)} (N and D must be >= 1)")
            if s.shape[1] != D:
                raise ValueError(
                    f"sequences have different feature dimensions: {first} is "
                    f"{tuple(groups[0][0].shape)} (D={D}), {name} is {tuple(s.shape)} "
                    f"(D={s.shape[1]})"
                )


def _parse_weights(weights: object, sizes: list[int], grouped: bool) -> list[torch.Tensor]:
    """Per-group weight vectors (float64, CPU), validated and normalised to sum 1."""
    K = len(sizes)
    if weights is None:
        return [torch.full((S,), 1.0 / S, dtype=torch.float64) for S in sizes]
    if grouped:
        if _is_array(weights) and weights.ndim == 2:
            rows = list(torch.as_tensor(weights).unbind(0))
        elif isinstance(weights, Sequence) and not _is_array(weights):
            rows = list(weights)
        else:
            raise ValueError(
                f"weights must be (K, S) or a list of K vectors for K={K} groups of sizes "
                f"{sizes}; got {_shape(weights)}"
            )
        if len(rows) != K:
            raise ValueError(
                f"weights must have one row per group: got {len(rows)} rows for K={K} groups"
            )
    else:
        rows = [weights]
    out = []
    for k, (row, S) in enumerate(zip(rows, sizes, strict=True)):
        name = f"weights[{k}]" if grouped else "weights"
        try:
            w = torch.as_tensor(row, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"{name} must be a vector of real numbers ({exc})") from exc
        if w.dim() != 1 or w.shape[0] != S:
            where = f" in group {k}" if grouped else ""
            raise ValueError(
                f"{name} must have one entry per sequence: got shape {tuple(w.shape)} "
                f"for S={S} sequences{where}"
            )
        if not bool(torch.isfinite(w).all()):
            raise ValueError(f"{name} must be finite, got {w.tolist()}")
        if bool((w < 0).any()):
            raise ValueError(f"{name} must be >= 0, got {w.tolist()}")
        if float(w.sum()) <= 0.0:
            raise ValueError(f"{name} must not all be zero, got {w.tolist()}")
        out.append(w / w.sum())
    return out


def _check_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


def _check_real(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    bad = (v <= 0.0) if positive else (v < 0.0)
    if not math.isfinite(v) or bad:
        raise ValueError(
            f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {value!r}"
        )
    return v


def _resample(x: torch.Tensor, length: int) -> torch.Tensor:
    """(N, D) -> (length, D) by linear interpolation, end points kept (as tslearn's resampler)."""
    if x.shape[0] == length:
        return x
    if x.shape[0] == 1:
        return x.expand(length, -1)
    return F.interpolate(x.T[None], size=length, mode="linear", align_corners=True)[0].T


def softdtw_barycenter(
    X: torch.Tensor | Sequence,
    *,
    gamma: float = 1.0,
    weights: torch.Tensor | Sequence | None = None,
    max_iter: int = 100,
    lr: float = 0.1,
    init: torch.Tensor | None = None,
    device: str | torch.device | None = None,
    verbose: bool = False,
    fused: bool | None = None,
    early_stopping: bool = True,
    patience: int = 10,
    tol: float = 1e-5,
    length: int | None = None,
    method: str = "adam",
    return_history: bool = False,
    backend: str = "auto",
    bandwidth: int | None = None,
    lengths: torch.Tensor | Sequence | None = None,
    memory: str = "auto",
    measure: str = "softdtw",
    c: float = 1.0,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | list[torch.Tensor]]:
    """Soft-DTW barycenter(s): the sequence(s) Z minimising the weighted soft-DTW to a set
    (or, with ``measure="softmsm"``, the weighted Soft-MSM: :func:`soft_msm_barycenter`).

    .. math::

        Z^\\star = \\operatorname*{arg\\,min}_{Z \\in \\mathbb{R}^{N \\times D}}
            \\sum_{i=1}^{S} w_i\\, \\mathrm{sdtw}_\\gamma(Z, X_i),
        \\qquad w_i = \\frac{\\tilde w_i}{\\sum_j \\tilde w_j}

    (Cuturi & Blondel, ICML 2017).  The weights are normalised to sum to one, so the
    objective is a weighted *mean* and does not grow with S; it is the objective reported by
    ``return_history`` (tslearn reports the unnormalised sum, i.e. S times larger for
    uniform weights).  Soft-DTW values, hence the objective, can be negative.

    Parameters
    ----------
    X : Tensor or list
        One set of sequences: a (S, N, D) tensor, or a list of S tensors (N_i, D) whose
        lengths may differ.  K sets at once (K barycenters): a (K, S, N, D) tensor, or a list
        of K entries, each a list of (N_i, D) tensors or a (S_k, N_k, D) tensor.  numpy
        arrays are accepted.  Unequal lengths go to soft-DTW as one padded batch with
        per-pair lengths (:func:`sdtw.softdtw`'s ``y_lengths``).
    gamma : float
        Soft-DTW smoothing, > 0.
    weights : Tensor, list or None
        One set: (S,), non-negative, not all zero.  K sets: (K, S) or a list of K vectors.
        ``None``: uniform.  Normalised to sum 1 per set; zero-weight sequences are skipped.
    max_iter : int
        Number of optimiser iterations, >= 1 (Adam steps or L-BFGS iterations).
    lr : float
        Adam: initial learning rate, annealed by a cosine schedule to ``lr / 10`` at
        ``max_iter``.  L-BFGS: the initial step of each strong-Wolfe line search (1.0 is the
        textbook choice; the line search extrapolates from smaller values).
    init : Tensor or None
        Starting point, (N, D) for one set or (K, N, D) for K sets.  ``None``: the weighted
        mean of the inputs, each first resampled by linear interpolation to the barycenter
        length when its length differs.
    device : str, torch.device or None
        Where to compute; ``None``: the device of (the first tensor of) ``X``.
    verbose : bool
        Show a tqdm progress bar with the objective (warns and continues without tqdm).
    fused, backend, bandwidth, memory
        Passed to :func:`sdtw.softdtw` (``backend="auto"``: CUDA kernels for CUDA tensors,
        Numba CPU kernels for CPU tensors).
    early_stopping : bool
        Stop a barycenter once its objective has not improved by more than ``tol`` (relative)
        for ``patience`` consecutive iterations.
    patience : int
        Iterations without improvement before stopping, >= 1.
    tol : float
        Relative improvement that counts: ``F < best - tol * |best|``; >= 0.
    length : int or None
        Barycenter length N; default: ``init``'s length if given, else the inputs' length
        (the longest input length when they differ).
    method : {"adam", "lbfgs"}
        ``"adam"`` (the paper's method): Adam, cosine annealing to ``lr / 10``, gradient
        norm clipped at 1 per barycenter.  ``"lbfgs"`` (tslearn's, Blondel's): ``torch.optim.LBFGS``
        with strong-Wolfe line search on the sum of the K objectives (the K barycenters
        share one line search, so K sets in one call match K separate calls only up to
        convergence).
    return_history : bool
        Also return the objective per iteration.
    measure : {"softdtw", "softmsm"}
        The measure minimised: soft-DTW (:func:`sdtw.softdtw`) or Soft-MSM
        (:func:`sdtw.soft_msm`, stiffness ``c``; ``fused`` and ``memory`` must then keep their
        defaults), with the same optimisers.
    c : float
        Soft-MSM's stiffness, > 0 (``measure="softmsm"`` only).
    lengths : integer Tensor or sequence, or None
        With a padded tensor ``X``: each sequence's own length, (S,) for (S, N, D) or (K, S)
        for (K, S, N, D), ``1 <= lengths <= N``; sequence s is ``X[..., s, :lengths[s], :]``
        and what the padding holds is never read.  ``None``: every sequence has length N.

    Returns
    -------
    barycenter : Tensor, shape (N, D), or (K, N, D) for K sets
        The best iterate seen (lowest objective), in X's floating dtype, on ``device``.
    history : Tensor (T + 1,) float64, or a list of K such tensors (only if ``return_history``)
        ``history[t]`` is the objective after ``t`` iterations (``history[0]``: at ``init``);
        ``T <= max_iter`` (fewer when stopped early, per barycenter).

    Raises
    ------
    ValueError, TypeError
        Naming the argument and the shapes: empty X or group, different D, non-floating
        dtypes, weights of the wrong length, negative, non-finite or all zero, ``max_iter <
        1``, ``lr <= 0``, ``gamma <= 0``, ``init`` of the wrong shape, unknown ``method``,
        ``length`` disagreeing with ``init``, or a non-finite objective at ``init`` (NaN/inf
        in the data, or a band too narrow for the lengths).

    Notes
    -----
    Differences from the paper's ``softdtw_cuda.softdtw_barycenter``: ``tol`` is relative (the
    paper's is absolute, 1e-5 whatever the scale of the objective), early stopping may trigger
    before ``max_iter // 2``, and the best iterate is returned rather than the last.
    """
    gamma = V.check_gamma(gamma, exact=False)  # (its smooth objective needs gamma > 0)
    bandwidth = V.check_bandwidth(bandwidth)
    fused = V.check_fused(fused)
    backend = V.check_backend(backend)
    memory = V.check_memory(memory)
    verbose = V.check_flag("verbose", verbose)
    early_stopping = V.check_flag("early_stopping", early_stopping)
    return_history = V.check_flag("return_history", return_history)
    max_iter = _check_int("max_iter", max_iter, 1)
    patience = _check_int("patience", patience, 1)
    lr = _check_real("lr", lr, positive=True)
    tol = _check_real("tol", tol, positive=False)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    if measure == "softmsm":
        c = check_c(c)
        if fused is not None or memory != "auto":
            raise ValueError(
                "measure='softmsm' has no fused or checkpointed kernels: leave fused=None and "
                f"memory='auto', got fused={fused!r}, memory={memory!r}"
            )

    groups, grouped = _parse_groups(X)
    if lengths is not None:
        groups = _unpad(groups, lengths)
    if isinstance(groups, torch.Tensor):
        first = groups
        sizes = [groups.shape[1]] * groups.shape[0]
        D = groups.shape[3]
        lengths = [groups.shape[2]]
        dtypes = [groups.dtype]
    else:
        _check_sequences(groups, grouped)
        first = groups[0][0]
        sizes = [len(G) for G in groups]
        D = first.shape[1]
        lengths = sorted({s.shape[0] for G in groups for s in G})
        dtypes = [s.dtype for G in groups for s in G]
    K = len(sizes)
    out_dtype = dtypes[0]
    for dt in dtypes[1:]:
        out_dtype = torch.promote_types(out_dtype, dt)
    # Optimise in float32 at least: Adam's moments and the L-BFGS history lose too much in half.
    dtype = torch.promote_types(out_dtype, torch.float32)
    device = V.check_device("device", device) if device is not None else first.device
    w_groups = _parse_weights(weights, sizes, grouped)

    if length is not None:
        length = _check_int("length", length, 1)
    if init is not None:
        init = _as_tensor("init", init)
        want = "(K, N, D)" if grouped else "(N, D)"
        ok = init.dim() == (3 if grouped else 2) and init.shape[-1] == D and init.shape[-2] >= 1
        if ok and grouped:
            ok = init.shape[0] == K
        if not ok:
            kd = f"K={K}, D={D}" if grouped else f"D={D}"
            raise ValueError(f"init must be {want} with {kd}, got shape {tuple(init.shape)}")
        if length is not None and length != init.shape[-2]:
            raise ValueError(
                f"length={length} disagrees with init of shape {tuple(init.shape)} "
                f"(N={init.shape[-2]})"
            )
    if length is None:
        length = init.shape[-2] if init is not None else max(lengths)
    N = _check_int("length", length, 1)

    buckets = _make_buckets(groups, w_groups, device, dtype)
    if init is None:
        Z0 = _weighted_mean(groups, w_groups, N, device, dtype)
    else:
        Z0 = init.detach().to(device=device, dtype=dtype).reshape(K, N, D)

    def objective(Z: torch.Tensor, bucks: list[_Bucket]) -> torch.Tensor:
        """(K,) objectives; groups with no pair in ``bucks`` get 0."""
        total = Z.new_zeros(K)
        for b in bucks:
            if measure == "softmsm":
                d = soft_msm(
                    Z[b.group],
                    b.X,
                    c=c,
                    gamma=gamma,
                    bandwidth=bandwidth,
                    backend=backend,
                    y_lengths=b.lengths,
                )
                total = total.index_add(0, b.group, b.weight * d)
                continue
            d = softdtw(
                Z[b.group],
                b.X,
                gamma=gamma,
                bandwidth=bandwidth,
                fused=fused,
                backend=backend,
                y_lengths=b.lengths,
                memory=memory,
            )
            total = total.index_add(0, b.group, b.weight * d)
        return total

    def check_start(values: list[float]) -> None:
        if not all(math.isfinite(v) for v in values):
            raise ValueError(
                f"the objective at init is not finite ({values}): NaN/inf in X or init, or "
                f"bandwidth={bandwidth} too narrow for barycenter length {N} and input "
                f"lengths {lengths}"
            )

    run = _lbfgs if method == "lbfgs" else _adam
    Z, history = run(
        objective=objective,
        Z0=Z0,
        buckets=buckets,
        max_iter=max_iter,
        lr=lr,
        early_stopping=early_stopping,
        patience=patience,
        tol=tol,
        verbose=verbose,
        check_start=check_start,
    )
    Z = Z.to(out_dtype)
    hist = [torch.tensor(h, dtype=torch.float64) for h in history]
    if not grouped:
        Z, hist = Z[0], hist[0]
    return (Z, hist) if return_history else Z


def _unpad(groups: torch.Tensor, lengths: object) -> list[list[torch.Tensor]]:
    """A padded (K, S, N, D) tensor and its ``lengths`` ((S,) for one set, (K, S)) as K lists
    of unpadded sequences (views)."""
    if not isinstance(groups, torch.Tensor):
        raise TypeError(
            "lengths is for a padded tensor X ((S, N, D) or (K, S, N, D)); a list of sequences "
            "carries its own lengths"
        )
    K, S, N, _ = groups.shape
    shape = tuple(lengths.shape) if _is_array(lengths) else np.shape(lengths)
    if len(shape) == 2 and shape[0] == K:
        rows = list(lengths)
    elif len(shape) <= 1 and K == 1:
        rows = [lengths]
    else:
        want = f"(K, S) = ({K}, {S})" if K > 1 else f"(S,) = ({S},)"
        raise ValueError(f"lengths must be {want} for X of shape {_shape(groups)}, got {shape}")
    out = []
    for k, row in enumerate(rows):
        ls, _ = V.check_one_lengths(f"lengths[{k}]" if K > 1 else "lengths", row, S, N)
        out.append([groups[k, s, :n] for s, n in enumerate(ls.tolist())])
    return out


def _make_buckets(
    groups: torch.Tensor | list[list[torch.Tensor]],
    w_groups: list[torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
) -> list[_Bucket]:
    """Gather every (group, sequence) pair of positive weight into one bucket per length."""
    if isinstance(groups, torch.Tensor):
        K, S, M, D = groups.shape
        w = torch.stack(w_groups).reshape(K * S)
        keep = w > 0
        group = torch.arange(K).repeat_interleave(S)[keep]
        X = groups.detach().reshape(K * S, M, D)
        if not bool(keep.all()):
            X = X[keep.to(X.device)]
        return [
            _Bucket(
                X.to(device=device, dtype=dtype),
                group.to(device),
                w[keep].to(device=device, dtype=dtype),
            )
        ]
    by_len: dict[int, tuple[list[torch.Tensor], list[int], list[float]]] = {}
    for k, (G, w) in enumerate(zip(groups, w_groups, strict=True)):
        for s, wi in zip(G, w.tolist(), strict=True):
            if wi > 0:
                seqs, ks, ws = by_len.setdefault(s.shape[0], ([], [], []))
                seqs.append(s.detach().to(device=device, dtype=dtype))
                ks.append(k)
                ws.append(wi)
    if PAD_UNEQUAL and len(by_len) > 1:
        M = max(by_len)
        seqs, ks, ws, ls = [], [], [], []
        for m, (ss, kk, ww) in sorted(by_len.items()):
            seqs += [F.pad(x, (0, 0, 0, M - m)) for x in ss]
            ks += kk
            ws += ww
            ls += [m] * len(ss)
        return [
            _Bucket(
                torch.stack(seqs),
                torch.as_tensor(ks, device=device),
                torch.as_tensor(ws, device=device, dtype=dtype),
                torch.as_tensor(ls, dtype=torch.int64),
            )
        ]
    return [
        _Bucket(
            torch.stack(seqs),
            torch.as_tensor(ks, device=device),
            torch.as_tensor(ws, device=device, dtype=dtype),
        )
        for _, (seqs, ks, ws) in sorted(by_len.items())
    ]


def _weighted_mean(
    groups: torch.Tensor | list[list[torch.Tensor]],
    w_groups: list[torch.Tensor],
    N: int,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    """(K, N, D): per group, the weighted mean of the inputs resampled to length N."""
    if isinstance(groups, torch.Tensor) and groups.shape[2] == N:
        w = torch.stack(w_groups).to(device=device, dtype=dtype)
        X = groups.detach().to(device=device, dtype=dtype)
        return torch.einsum("ks,ksnd->knd", w, X)
    means = []
    for G, w in zip(groups, w_groups, strict=True):
        acc = None
        for s, wi in zip(G, w.tolist(), strict=True):
            if wi > 0:
                term = wi * _resample(s.detach().to(device=device, dtype=dtype), N)
                acc = term if acc is None else acc + term
        means.append(acc)
    return torch.stack(means)


class _Progress:
    """A tqdm bar if asked for and available; a no-op otherwise."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.bar = None
        if not enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            warnings.warn(
                "verbose=True needs tqdm for the progress bar (pip install tqdm); "
                "continuing without it",
                UserWarning,
                stacklevel=4,
            )
            return
        self.bar = tqdm(total=total, desc="soft-DTW barycenter", unit="it")

    def update(self, values: list[float]) -> None:
        if self.bar is not None:
            obj = values[0] if len(values) == 1 else sum(values) / len(values)
            self.bar.set_postfix(objective=f"{obj:.6g}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Tracker:
    """Per-barycenter history, best iterate and early-stopping state."""

    def __init__(self, Z0: torch.Tensor, early_stopping: bool, patience: int, tol: float) -> None:
        K = Z0.shape[0]
        self.history: list[list[float]] = [[] for _ in range(K)]
        self.best = [math.inf] * K
        self.best_Z = Z0.detach().clone()
        self.ref = [math.inf] * K  # the last objective that counted as an improvement
        self.wait = [0] * K
        self.active = [True] * K
        self.early_stopping, self.patience, self.tol = early_stopping, patience, tol

    def record(self, Z: torch.Tensor, values: list[float], stop_check: bool = True) -> bool:
        """Log the objectives of the active groups at Z; return whether the active set changed."""
        changed = False
        improved = []
        for k, v in enumerate(values):
            if not self.active[k]:
                continue
            self.history[k].append(v)
            if v < self.best[k]:
                self.best[k] = v
                improved.append(k)
            if not (stop_check and self.early_stopping):
                continue
            ref = self.ref[k]
            if ref == math.inf or v < ref - self.tol * abs(ref):
                self.ref[k], self.wait[k] = v, 0
            else:
                self.wait[k] += 1
                if self.wait[k] >= self.patience:
                    self.active[k] = False
                    changed = True
        if improved:
            # One copy for all improved barycenters (K small copies would be K launches).
            idx = torch.as_tensor(improved, device=Z.device)
            self.best_Z.index_copy_(0, idx, Z.detach()[idx])
        return changed

    def result(self) -> tuple[torch.Tensor, list[list[float]]]:
        return self.best_Z, self.history


def _adam(
    *, objective, Z0, buckets, max_iter, lr, early_stopping, patience, tol, verbose, check_start
):
    Z = Z0.clone().requires_grad_(True)
    opt = torch.optim.Adam([Z], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_iter, eta_min=lr / 10)
    track = _Tracker(Z0, early_stopping, patience, tol)
    bar = _Progress(verbose, max_iter)
    current = buckets
    try:
        for it in range(max_iter):
            opt.zero_grad(set_to_none=True)
            values = objective(Z, current)
            vals = values.detach().double().cpu().tolist()
            if it == 0:
                check_start(vals)
            values.sum().backward()
            # Per-barycenter clipping: a joint norm would couple the K problems.
            with torch.no_grad():
                norms = Z.grad.flatten(1).norm(dim=1)
                scale = (MAX_GRAD_NORM / (norms + 1e-6)).clamp(max=1.0)
                Z.grad.mul_(scale[:, None, None])
            bar.update([v for v, a in zip(vals, track.active, strict=True) if a])
            if track.record(Z, vals):
                if not any(track.active):
                    break
                # Stopped barycenters leave the batch: their pairs are no longer computed.
                mask = torch.as_tensor(track.active, device=Z.device)
                current = [r for b in buckets if (r := b.restrict(mask)) is not None]
            opt.step()
            sched.step()
        else:
            with torch.no_grad():
                vals = objective(Z, current).double().cpu().tolist()
            track.record(Z, vals, stop_check=False)
    finally:
        bar.close()
    return track.result()


def _lbfgs(
    *, objective, Z0, buckets, max_iter, lr, early_stopping, patience, tol, verbose, check_start
):
    Z = Z0.clone().requires_grad_(True)
    opt = torch.optim.LBFGS(
        [Z],
        lr=lr,
        max_iter=1,  # one iteration per step(): we log and early-stop between iterations
        max_eval=LBFGS_MAX_EVAL,
        history_size=20,
        line_search_fn="strong_wolfe",
    )
    track = _Tracker(Z0, early_stopping, patience, tol)
    bar = _Progress(verbose, max_iter)
    # step() evaluates the closure at the current point, which the previous line search has
    # usually just evaluated: a one-entry cache saves that duplicate evaluation.
    cache: dict[str, torch.Tensor] = {}

    def closure() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        if "Z" in cache and torch.equal(cache["Z"], Z.detach()):
            Z.grad = cache["grad"].clone()
            return cache["values"].sum()
        with torch.enable_grad():
            values = objective(Z, buckets)
            values.sum().backward()
        cache.update(Z=Z.detach().clone(), grad=Z.grad.clone(), values=values.detach())
        return values.detach().sum()

    def values_at_current() -> list[float]:
        closure()
        return cache["values"].double().cpu().tolist()

    try:
        for it in range(max_iter):
            vals = values_at_current()
            if it == 0:
                check_start(vals)
            bar.update([v for v, a in zip(vals, track.active, strict=True) if a])
            track.record(Z, vals)
            if not any(track.active):
                break
            opt.step(closure)
            if not bool(torch.isfinite(Z.detach()).all()):
                break  # a failed line search; the best iterate so far is kept
        else:
            track.record(Z, values_at_current(), stop_check=False)
    finally:
        bar.close()
    return track.result()


def soft_msm_barycenter(
    X: torch.Tensor | Sequence, *, c: float = 1.0, gamma: float = 1.0, **kwargs
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor | list[torch.Tensor]]:
    """Soft-MSM barycenter(s) (soft-MBA): the sequence(s) Z minimising the weighted Soft-MSM
    to a set,

    .. math::

        Z^\\star = \\operatorname*{arg\\,min}_Z \\sum_i w_i\\, \\mathrm{smsm}_{\\gamma,c}(Z, X_i),

    with the optimisers, arguments and returns of :func:`softdtw_barycenter`
    (``measure="softmsm"``; ``fused`` and ``memory`` do not apply)."""
    return softdtw_barycenter(X, c=c, gamma=gamma, measure="softmsm", **kwargs)


def softdtw_barycenter_cpu(X: torch.Tensor | Sequence, **kwargs):
    """:func:`softdtw_barycenter` on the CPU (``device="cpu"``, ``backend="cpu"``): the
    paper's library's name for its CPU path, with the same keywords as
    :func:`softdtw_barycenter` but ``device`` and ``backend``."""
    for name in ("device", "backend"):
        if name in kwargs:
            raise TypeError(f"softdtw_barycenter_cpu() takes no {name!r} (it is the CPU's)")
    return softdtw_barycenter(X, device="cpu", backend="cpu", **kwargs)
