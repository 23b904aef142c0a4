"""Fast CPU soft-DTW: Numba kernels parallel over the batch, and their autograd wrapper.

Layers, as everywhere in the package: the ``_forward_kernel`` / ``_backward_kernel`` Numba
kernels (``prange`` over the batch: the forward a group of up to 4 pairs per iteration, swept
together so that their dependency chains overlap, the backward one pair; a row-major double
loop inside, restricted to the Sakoe-Chiba band) -> the launchers :func:`cpu_forward` /
:func:`cpu_backward` (numpy in, numpy out, float64, internal asserts only) -> :class:`CPUSoftDTW`
(``torch.autograd.Function``).

The backward pass needs only ``R``, not the cost: the expected alignment is propagated with the
softmax weights with which every cell chose among its three predecessors, which are sums of
non-positive exponents and never subtract two large, nearly equal numbers (see the derivation
above ``_backward_kernel``).
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch
from numba import get_num_threads, njit, prange

from sdtw._jit import parallel_and_serial

__all__ = ["CPUSoftDTW", "cpu_backward", "cpu_forward"]


# Soft minimum, factored around the hard minimum m:
#
#     softmin_g(a, b, c) = m - g * log(sum_k exp(-(x_k - m) / g)),   m = min(a, b, c).
#
# Every exponent is <= 0, so nothing overflows, and the term of the minimum is exactly 1; the
# other two are summed alone, rest in [0, 2], and the result is m - g log(1 + rest): rounding
# 1 + rest costs at most 1.1e-16 absolute in the log, g 1.1e-16 in the cell, far below the
# float64 guarantee (1e-10 relative), and log is a quarter cheaper than log1p per forward cell
# (the forward's time is its exp and log calls: 28.7 -> 21.0 ns per cell, one thread, thread
# time).  If all three inputs are +inf the cell is unreachable and the result is +inf (no
# inf - inf is ever formed).
@njit(cache=True, nogil=True, inline="always")
def _softmin3(a: float, b: float, c: float, gamma: float, inv_gamma: float) -> float:
    if a <= b and a <= c:
        m, x, y = a, b, c
    elif b <= c:
        m, x, y = b, a, c
    else:
        m, x, y = c, a, b
    if m == math.inf:
        return a + b + c  # +inf, or NaN when one of them is NaN (NaN must propagate)
    rest = math.exp((m - x) * inv_gamma) + math.exp((m - y) * inv_gamma)
    return m - gamma * math.log(1.0 + rest)


# Forward DP, with R padded so that R[i + 1, j + 1] is cell (i, j):
#
#     R[0, 0] = 0,  R[0, j > 0] = R[i > 0, 0] = +inf,
#     R[i + 1, j + 1] = C[i, j] + softmin_g(R[i, j], R[i, j + 1], R[i + 1, j]).
#
# Cells outside the band -lo <= j - i <= hi, and past the pair's own lengths n x m, are never
# written and keep +inf, which the soft minimum of their successors treats as "no such
# predecessor"; each pair has its own n, m, lo, hi (a variable-length batch).  Each row is a
# chain of dependent soft minima (a cell needs its left neighbour), two exp and a log each, so one
# table runs at the latency of that chain; a thread therefore sweeps the tables of ``group``
# pairs (1, 2 or 4) at once, cell by cell, and the core overlaps their independent chains
# (on the 2-core CI machine, one thread: 4 pairs at once 1.8x faster per pair than one).
# Groups are split over threads (prange).  Results do not depend on the grouping.
@njit(cache=True, nogil=True, inline="always")
def _start(Rb: np.ndarray) -> None:
    Rb[:, :] = math.inf
    Rb[0, 0] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _cell(Rb: np.ndarray, Cb: np.ndarray, i: int, j: int, gamma: float, ig: float) -> None:
    Rb[i + 1, j + 1] = Cb[i, j] + _softmin3(Rb[i, j], Rb[i, j + 1], Rb[i + 1, j], gamma, ig)


@njit(cache=True, nogil=True, inline="always")
def _inside(i: int, j: int, n: int, m: int, lo: int, hi: int) -> bool:
    """Whether cell (i, j) is in a pair's table n x m and its band."""
    return i < n and j < m and -lo <= j - i <= hi


def _forward_kernel(
    cost: np.ndarray,
    gamma: float,
    ns: np.ndarray,
    ms: np.ndarray,
    los: np.ndarray,
    his: np.ndarray,
    R: np.ndarray,
    group: int,
) -> None:
    for g in prange((cost.shape[0] + group - 1) // group):
        _forward_group(cost, gamma, ns, ms, los, his, R, group, np.int64(g))


@njit(cache=True, nogil=True)
def _forward_group(cost, gamma, ns, ms, los, his, R, group, g) -> None:
    """:func:`_forward_kernel`'s group ``g`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    B = cost.shape[0]
    ig = 1.0 / gamma
    b = g * group
    k = min(group, B - b)  # pairs in this group (the last may have fewer)
    # (absent slots alias the first pair; their guarded cells never run)
    b1, b2, b3 = b + min(1, k - 1), b + min(2, k - 1), b + k - 1
    R0, R1, R2, R3 = R[b], R[b1], R[b2], R[b3]
    C0, C1, C2, C3 = cost[b], cost[b1], cost[b2], cost[b3]
    n0, n1, n2, n3 = ns[b], ns[b1], ns[b2], ns[b3]
    m0, m1, m2, m3 = ms[b], ms[b1], ms[b2], ms[b3]
    l0, l1, l2, l3 = los[b], los[b1], los[b2], los[b3]
    h0, h1, h2, h3 = his[b], his[b1], his[b2], his[b3]
    for s in range(k):
        _start(R[b + s])
    # the union of the group's tables and bands; each pair computes only its own cells
    n = max(n0, n1, n2, n3)
    lo, hi, m = max(l0, l1, l2, l3), max(h0, h1, h2, h3), max(m0, m1, m2, m3)
    for i in range(n):
        for j in range(max(0, i - lo), min(m - 1, i + hi) + 1):
            if _inside(i, j, n0, m0, l0, h0):
                _cell(R0, C0, i, j, gamma, ig)
            if k > 1 and _inside(i, j, n1, m1, l1, h1):
                _cell(R1, C1, i, j, gamma, ig)
            if k > 2 and _inside(i, j, n2, m2, l2, h2):
                _cell(R2, C2, i, j, gamma, ig)
            if k > 3 and _inside(i, j, n3, m3, l3, h3):
                _cell(R3, C3, i, j, gamma, ig)


# Backward DP without cancellation.  Differentiating R[s] = C[s] + softmin_g(R[pred(s)]) gives
#
#     dR[s] / dR[p] = P_s(p) = exp(-(R[p] - m_s) / g) / sum_{q in pred(s)} exp(-(R[q] - m_s) / g),
#
# m_s = min_{q in pred(s)} R[q]: the softmax with which s chose p.  The expected alignment
# E = dR[N, M] / dC obeys E[p] = sum_{s in succ(p)} E[s] P_s(p), seeded with grad_out at the
# last cell.  The published form writes the numerator as exp((R[s] - C[s] - R[p]) / g), i.e.
# recovers softmin from R[s] - C[s]: two numbers of size |R| whose difference is small, so the
# rounding error eps |R| is divided by g and amplified by exp -- catastrophic for small g.  Here
# every exponent is a difference of two *predecessor* values against their own minimum: exact
# 0 for the minimum, <= 0 for the others, the denominator lies in [1, 3], and the weights sum
# to one: E is built from sums of products of positive, accurately rounded terms, so its
# relative error grows only linearly with the path length, whatever g.
#
# The sum is evaluated "push" style: cells are visited in reverse row-major order, so when s is
# reached all its successors have already pushed into E[s], which is therefore final; s then
# pushes E[s] P_s(p) to each of its predecessors p in the grid.  One softmax per cell, no
# scratch.  Unreachable cells (R = +inf) have E = 0 and push nothing; if m_s were +inf, s is
# unreachable too, so no inf - inf is ever formed.
@njit(cache=True, nogil=True, inline="always")
def _push(E: np.ndarray, R: np.ndarray, er: int, rr: int, i: int, j: int, e: float, ig: float):
    """Cell (i, j), whose E is ``e`` (final), pushes ``e P_s(p)`` to its predecessors: E's row
    of cell row i is ``er`` (the row above ``er - 1``), R's row of cell row i - 1 is ``rr``
    (padded: cell (i, j)'s own value at ``R[rr + 1, j + 1]``)."""
    r_diag = R[rr, j]
    r_up = R[rr, j + 1]
    r_left = R[rr + 1, j]
    # the minimum's weight is exp(0) = 1 exactly: two exponentials per cell, not three
    w_diag = w_up = w_left = 1.0
    if r_diag <= r_up and r_diag <= r_left:
        w_up = math.exp((r_diag - r_up) * ig)
        w_left = math.exp((r_diag - r_left) * ig)
    elif r_up <= r_left:
        w_diag = math.exp((r_up - r_diag) * ig)
        w_left = math.exp((r_up - r_left) * ig)
    else:
        w_diag = math.exp((r_left - r_diag) * ig)
        w_up = math.exp((r_left - r_up) * ig)
    scale = e / (w_diag + w_up + w_left)
    if i > 0 and j > 0:
        E[er - 1, j - 1] += scale * w_diag
    if i > 0:
        E[er - 1, j] += scale * w_up
    if j > 0:
        E[er, j - 1] += scale * w_left


def _backward_kernel(
    R: np.ndarray,
    gamma: float,
    ns: np.ndarray,
    ms: np.ndarray,
    los: np.ndarray,
    his: np.ndarray,
    grad_out: np.ndarray,
    E: np.ndarray,
) -> None:
    B = E.shape[0]
    ig = 1.0 / gamma  # (a multiply per exponent instead of a divide: 7-15% faster here)
    for b in prange(B):
        Rb = R[b]
        Eb = E[b]
        N, M, lo, hi = ns[b], ms[b], los[b], his[b]  # (the pair's own table and band)
        Eb[:, :] = 0.0
        Eb[N - 1, M - 1] = grad_out[b]
        for i in range(N - 1, -1, -1):
            for j in range(min(M - 1, i + hi), max(0, i - lo) - 1, -1):
                e = Eb[i, j]
                if e == 0.0:
                    continue
                if Rb[i + 1, j + 1] == math.inf:
                    Eb[i, j] = 0.0
                    continue
                _push(Eb, Rb, i, i, i, j, e, ig)


# Each kernel is compiled twice (sdtw._jit): parallel over the batch, and serial for small
# problems.  On a few cores, waking Numba's thread pool right after torch's OpenMP pool (which
# spins for a while after each parallel region) oversubscribes the cores: we saw the same tiny
# step take 0.07 s to 3.9 s.  Below SERIAL_MAX_CELLS (about a millisecond of work) one thread
# is both faster and steady.
SERIAL_MAX_CELLS = 1 << 15
_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel)
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel)


# Numba's ``workqueue`` threading layer (what it falls back to without OpenMP or TBB) aborts
# the process when two Python threads enter parallel kernels at once ("Concurrent access has
# been detected").  A parallel kernel uses every core anyway, so calls of the parallel kernels
# are serialised whatever the layer; the serial ones run concurrently.
_PARALLEL = threading.Lock()


def _run(kernel, serial: bool, *args) -> None:
    if serial:
        kernel(*args)
        return
    with _PARALLEL:
        kernel(*args)


def _serial(B: int, N: int, M: int) -> bool:
    return B == 1 or B * N * M <= SERIAL_MAX_CELLS


def _group(B: int, serial: bool) -> int:
    """Pairs a thread of the forward sweeps at once: 4, fewer where that would leave some of
    Numba's threads without a group."""
    if serial:
        return 4
    threads = get_num_threads()
    return 4 if B >= 4 * threads else 2 if B >= 2 * threads else 1


def cpu_forward(
    cost: np.ndarray,
    gamma: float,
    lo: int | np.ndarray,
    hi: int | np.ndarray,
    lengths: tuple | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Soft-DTW forward pass on the CPU.

    .. math::

        R_{i+1,j+1} = C_{i,j} + \\operatorname{softmin}_\\gamma(R_{i,j}, R_{i,j+1}, R_{i+1,j}),
        \\qquad \\operatorname{softmin}_\\gamma(a) = -\\gamma \\log \\sum_k e^{-a_k/\\gamma}.

    Parameters
    ----------
    cost : ndarray, shape (B, N, M)
        Cost matrices (float64, C-contiguous; anything else is converted).  Not modified.
    gamma : float
        Smoothing, > 0.
    lo, hi : int or ndarray (B,)
        Band offsets from :func:`sdtw.band.band_offsets` (per pair:
        :func:`sdtw.band.pair_offsets`):
        cell ``(i, j)`` is computed iff ``-lo <= j - i <= hi``; every other cell holds
        ``+inf``.
    lengths : (ndarray (B,), ndarray (B,)) or None
        Each pair's own lengths ``n_b <= N``, ``m_b <= M`` (None: N, M): only the cells of its
        ``n_b x m_b`` table are computed (the rest of ``cost`` is never read).

    Returns
    -------
    values : ndarray, shape (B,)
        Soft-DTW values ``R[b, n_b, m_b]``.
    R : ndarray, shape (B, N + 1, M + 1)
        Padded DP table, float64: ``R[:, 0, 0] = 0``, the rest of row and column 0 is ``+inf``
        and ``R[:, i + 1, j + 1]`` is cell ``(i, j)``.  All :func:`cpu_backward` needs.
    """
    cost = np.ascontiguousarray(cost, dtype=np.float64)
    assert cost.ndim == 3 and min(cost.shape[1:]) > 0 and gamma > 0
    B, N, M = cost.shape
    ns, ms, los, his = _tables(B, N, M, lo, hi, lengths)
    R = np.empty((B, N + 1, M + 1), dtype=np.float64)
    serial = _serial(B, N, M)
    kernel = _forward_serial if serial else _forward_parallel
    _run(kernel, serial, cost, float(gamma), ns, ms, los, his, R, _group(B, serial))
    return R[np.arange(B), ns, ms], R


def _tables(B: int, N: int, M: int, lo, hi, lengths) -> tuple:
    """``n, m, lo, hi`` int64 arrays (B,) from scalars or arrays."""
    if lengths is None:
        ns, ms = np.full(B, N, np.int64), np.full(B, M, np.int64)
    else:
        ns, ms = (np.ascontiguousarray(t, dtype=np.int64) for t in lengths)
    los = np.ascontiguousarray(np.broadcast_to(np.asarray(lo, np.int64), (B,)))
    his = np.ascontiguousarray(np.broadcast_to(np.asarray(hi, np.int64), (B,)))
    return ns, ms, los, his


def cpu_backward(
    R: np.ndarray,
    gamma: float,
    lo: int | np.ndarray,
    hi: int | np.ndarray,
    grad_out: np.ndarray,
    lengths: tuple | None = None,
) -> np.ndarray:
    """Soft-DTW backward pass on the CPU: ``E * grad_out[:, None, None]``.

    .. math::

        E_{N-1,M-1} = g,\\qquad
        E_p = \\sum_{s \\in \\mathrm{succ}(p)} E_s\\, P_s(p),\\qquad
        P_s(p) = \\frac{e^{-(R_p - m_s)/\\gamma}}
                        {\\sum_{q \\in \\mathrm{pred}(s)} e^{-(R_q - m_s)/\\gamma}},\\qquad
        m_s = \\min_{q \\in \\mathrm{pred}(s)} R_q,

    with ``E = d values / d cost`` scaled by the upstream gradient ``g``.

    Parameters
    ----------
    R : ndarray, shape (B, N + 1, M + 1)
        Padded table from :func:`cpu_forward` (float64).  Not modified.
    gamma : float
        The ``gamma`` of the forward pass.
    lo, hi : int or ndarray (B,)
        The band offsets of the forward pass.
    grad_out : ndarray, shape (B,)
        Upstream gradient of the values.  Not modified.
    lengths : as in :func:`cpu_forward`.

    Returns
    -------
    grad : ndarray, shape (B, N, M)
        ``d (grad_out . values) / d cost``, float64; zero outside the band, past each pair's
        lengths and on unreachable cells.
    """
    R = np.ascontiguousarray(R, dtype=np.float64)
    grad_out = np.ascontiguousarray(grad_out, dtype=np.float64)
    assert R.ndim == 3 and grad_out.shape == R.shape[:1] and gamma > 0
    B, N1, M1 = R.shape
    ns, ms, los, his = _tables(B, N1 - 1, M1 - 1, lo, hi, lengths)
    E = np.empty((B, N1 - 1, M1 - 1), dtype=np.float64)
    serial = _serial(B, N1 - 1, M1 - 1)
    kernel = _backward_serial if serial else _backward_parallel
    _run(kernel, serial, R, float(gamma), ns, ms, los, his, grad_out, E)
    return E


class CPUSoftDTW(torch.autograd.Function):
    """Autograd wrapper of the CPU kernels: cost (B, N, M) -> values (B,).

    Computes in float64 whatever the input dtype, returns values in the dtype (and on the
    device) of ``cost``, saves ``R`` only when ``cost`` needs a gradient, and returns the
    gradient ``E * grad_out`` cast back to ``cost.dtype``.  Call as
    ``CPUSoftDTW.apply(cost, gamma, lo, hi, lengths=None)`` (arguments as
    :func:`cpu_forward`'s); no validation here (that is the public entry's job).
    """

    @staticmethod
    def forward(ctx, cost: torch.Tensor, gamma: float, lo, hi, lengths=None) -> torch.Tensor:
        c = cost.detach().to("cpu", torch.float64).contiguous().numpy()
        values, R = cpu_forward(c, gamma, lo, hi, lengths)
        if cost.requires_grad:
            ctx.save_for_backward(torch.from_numpy(R))
            ctx.args = (float(gamma), lo, hi)
            ctx.lengths = lengths
            ctx.cost_dtype, ctx.cost_device = cost.dtype, cost.device
        return torch.from_numpy(values).to(cost.device, cost.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (R,) = ctx.saved_tensors
        g = grad_out.detach().to("cpu", torch.float64).contiguous().numpy()
        grad = cpu_backward(R.numpy(), *ctx.args, g, ctx.lengths)
        return torch.from_numpy(grad).to(ctx.cost_device, ctx.cost_dtype), None, None, None, None
