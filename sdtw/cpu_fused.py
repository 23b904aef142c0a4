"""CPU soft-DTW from the sequences: the checkpointed mode of the CPU backend
(``memory="checkpoint"``), in memory that grows like N + M, and its full mode for a named cost
(:func:`full_forward`, :func:`full_backward`: the cost built by a Numba kernel, then the grouped
forward of :mod:`sdtw.cpu` keeping the whole table R; the backward adds each cell's gradient wrt
x and y the moment its E is final, E in two rows per pair, never (B, N, M)).

The checkpointed mode:

No (B, N, M) tensor exists anywhere: the ground cost of a cell is recomputed from x and y when
the cell is (:func:`_cost`: squared Euclidean, Euclidean or L1), the forward keeps only every
K-th row of the DP table (the *checkpoints*), and the backward walks the table's segments of K
rows from the bottom up, recomputing each segment's rows from its checkpoint with the forward's
own arithmetic, then propagating the expected alignment E through it (the push form of
:mod:`sdtw.cpu`, in the same order) and adding each cell's share to the gradients wrt x and y
the moment its E is final:

.. math::  \\frac{\\partial\\, \\mathrm{sdtw}}{\\partial x_i}
           = \\sum_j E_{ij}\\, \\frac{\\partial C(x_i, y_j)}{\\partial x_i},\\qquad
           \\frac{\\partial\\, \\mathrm{sdtw}}{\\partial y_j}
           = \\sum_i E_{ij}\\, \\frac{\\partial C(x_i, y_j)}{\\partial y_j}.

Memory per pair (float64): the checkpoints ``8 ceil(N / K) (M + 1)`` bytes, from the forward to
the backward; per thread during the backward, one segment's rows of R and of E, ``16 (K + 1)
(M + 1)`` bytes.  With ``K ~ sqrt(N)`` both are O(M sqrt(N)) (:func:`segment_rows`).  The
forward without gradients keeps two rows, ``16 (M + 1)`` bytes per thread.  Time: the forward's
cells twice (once in the forward, once recomputed) and the backward's once.

Each pair is swept by one thread (``prange`` over the batch) and has its own lengths and band
(the arrays of :func:`sdtw.cpu._tables`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from sdtw._jit import parallel_and_serial
from sdtw.cpu import _push, _run, _serial, _softmin3, cpu_forward
from sdtw.cpu_lanes import lane_backward, lane_forward, use_lanes

__all__ = [
    "DIST_CODES",
    "CPUFusedSoftDTW",
    "full_backward",
    "full_forward",
    "fused_backward",
    "fused_forward",
    "segment_rows",
]

#: The ground costs the fused kernels recompute, by name.
DIST_CODES = {"sqeuclidean": 0, "euclidean": 1, "l1": 2}


@njit(cache=True, nogil=True, inline="always")
def _cost(X: np.ndarray, Y: np.ndarray, b: int, i: int, j: int, kind: int) -> float:
    """C(x_i, y_j) of pair b: squared Euclidean (0), Euclidean (1) or L1 (2).  The squared
    Euclidean is ``|x|^2 + |y|^2 - 2 x.y`` clamped at 0, the form of
    :func:`sdtw.distances.sqeuclidean` and the CUDA kernels: an infinite feature gives the
    same NaN or +inf cells on every backend."""
    s = 0.0
    if kind == 2:
        for d in range(X.shape[2]):
            s += abs(X[b, i, d] - Y[b, j, d])
        return s
    if kind == 0:
        xx = yy = xy = 0.0
        for d in range(X.shape[2]):
            xx += X[b, i, d] * X[b, i, d]
            yy += Y[b, j, d] * Y[b, j, d]
            xy += X[b, i, d] * Y[b, j, d]
        s = xx + yy - 2.0 * xy
        return 0.0 if s < 0.0 else s  # (NaN stays NaN)
    for d in range(X.shape[2]):
        t = X[b, i, d] - Y[b, j, d]
        s += t * t
    return math.sqrt(s)


@njit(cache=True, nogil=True, inline="always")
def _grad(X, Y, b, i, j, kind, e, GX, GY) -> None:
    """Add ``e dC/dx_i`` to ``GX[b, i]`` and ``e dC/dy_j`` to ``GY[b, j]`` (the Euclidean
    cost's gradient is taken as 0 where ``x_i = y_j``, the L1 cost's per feature likewise, as
    torch's ``cdist``)."""
    D = X.shape[2]
    scale = 2.0 * e
    if kind == 1:
        s = 0.0
        for d in range(D):
            t = X[b, i, d] - Y[b, j, d]
            s += t * t
        scale = e / math.sqrt(s) if s > 0.0 else 0.0
    for d in range(D):
        t = X[b, i, d] - Y[b, j, d]
        if kind == 2:
            g = e * (1.0 if t > 0.0 else (-1.0 if t < 0.0 else 0.0))
        else:
            g = scale * t
        GX[b, i, d] += g
        GY[b, j, d] -= g


@njit(cache=True, nogil=True, inline="always")
def _row(X, Y, b, i, kind, prev, cur, m, lo, hi, gamma, ig) -> None:
    """Padded DP row ``i + 1`` (cells of row ``i``) into ``cur`` from row ``i`` in ``prev``:
    +inf outside the band and past column ``m``.  The row's costs go into ``cur`` first (a
    loop without a dependency chain), then the chain of soft minima reads them."""
    j0, j1 = max(0, i - lo), min(m - 1, i + hi) + 1
    cur[:] = math.inf
    for j in range(j0, j1):
        cur[j + 1] = _cost(X, Y, b, i, j, kind)
    for j in range(j0, j1):
        cur[j + 1] += _softmin3(prev[j], prev[j + 1], cur[j], gamma, ig)


def _forward_kernel(X, Y, kind, gamma, ns, ms, los, his, K, ck, out) -> None:
    """Values ``out[b] = R[n_b, m_b]``; with ``K > 0``, padded rows 0, K, 2K, ... of R into
    ``ck[b]`` (rows at or past ``n_b`` are not written)."""
    B, M1 = X.shape[0], Y.shape[1] + 1
    ig = 1.0 / gamma
    for b in prange(B):
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        prev = np.full(M1, math.inf)
        prev[0] = 0.0
        cur = np.empty(M1)
        if K > 0:
            ck[b, 0, :] = prev
        for i in range(n):
            _row(X, Y, b, i, kind, prev, cur, m, lo, hi, gamma, ig)
            if K > 0 and (i + 1) % K == 0 and i + 1 < n:
                ck[b, (i + 1) // K, :] = cur
            prev, cur = cur, prev
        out[b] = prev[m]


def _backward_kernel(X, Y, kind, gamma, ns, ms, los, his, K, ck, gout, GX, GY) -> None:
    """``GX``, ``GY`` (zeroed) += the gradients of ``gout[b] * R[n_b, m_b]`` wrt x, y, segment
    by segment from the checkpoints (see the module docstring)."""
    B, M = X.shape[0], Y.shape[1]
    ig = 1.0 / gamma
    for b in prange(B):
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        Rs = np.empty((K + 1, M + 1))  # padded R rows r0 .. r0 + K of the segment
        Es = np.zeros((K + 1, M))  # E of cell rows r0 - 1 (row 0: the pushes up) .. r0 + K - 1
        carry = np.zeros(M)  # the pushes from the segment below into this one's last row
        for s in range((n + K - 1) // K - 1, -1, -1):
            r0 = s * K
            r1 = min(r0 + K, n)
            Rs[0, :] = ck[b, s, :]
            for i in range(r0, r1):
                _row(X, Y, b, i, kind, Rs[i - r0], Rs[i - r0 + 1], m, lo, hi, gamma, ig)
            Es[:, :] = 0.0
            Es[r1 - r0, :] = carry
            if r1 == n:
                Es[n - r0, m - 1] = gout[b]
            for i in range(r1 - 1, r0 - 1, -1):
                li = i - r0 + 1
                for j in range(min(m - 1, i + hi), max(0, i - lo) - 1, -1):
                    e = Es[li, j]
                    if e == 0.0:
                        continue
                    if Rs[li, j + 1] == math.inf:
                        Es[li, j] = 0.0
                        continue
                    _push(Es, Rs, li, li - 1, i, j, e, ig)
                    _grad(X, Y, b, i, j, kind, e, GX, GY)
            carry[:] = Es[0, :]


def _cost_kernel(X, Y, kind, ns, ms, los, his, C) -> None:
    """The full mode's cost ``C[b, i, j]`` on each pair's band (nothing else is read)."""
    for b in prange(X.shape[0]):
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        for i in range(n):
            for j in range(max(0, i - lo), min(m - 1, i + hi) + 1):
                C[b, i, j] = _cost(X, Y, b, i, j, kind)


def _full_backward_kernel(X, Y, kind, gamma, ns, ms, los, his, R, gout, GX, GY) -> None:
    """The full mode's backward: ``GX``, ``GY`` (zeroed) += the gradients of ``gout[b] *
    R[b, n_b, m_b]`` wrt x, y from the whole padded table R, each cell's share added the
    moment its E is final: E lives in two rows (the cell row and the one above), never as
    (B, N, M)."""
    B, M = X.shape[0], Y.shape[1]
    ig = 1.0 / gamma
    for b in prange(B):
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        Rb = R[b]
        Es = np.zeros((2, M))  # E of cell rows i - 1 (row 0) and i (row 1)
        Es[1, m - 1] = gout[b]
        for i in range(n - 1, -1, -1):
            for j in range(min(m - 1, i + hi), max(0, i - lo) - 1, -1):
                e = Es[1, j]
                if e == 0.0:
                    continue
                if Rb[i + 1, j + 1] == math.inf:
                    continue
                _push(Es, Rb, 1, i, i, j, e, ig)
                _grad(X, Y, b, i, j, kind, e, GX, GY)
            Es[1, :] = Es[0, :]
            Es[0, :] = 0.0


_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel)
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel)
_cost_parallel, _cost_serial = parallel_and_serial(_cost_kernel)
_full_backward_parallel, _full_backward_serial = parallel_and_serial(_full_backward_kernel)


def segment_rows(N: int, M: int, budget: int | None = None) -> int:
    """Rows per checkpoint segment, K: ``ceil(sqrt(N))`` (checkpoints and one segment's rows
    then take about the same memory), fewer where one segment's R and E (``16 (K + 1)
    (M + 1)`` bytes) would exceed ``budget`` bytes, never below 1."""
    K = max(1, math.isqrt(max(N - 1, 0)) + 1)
    if budget is not None:
        K = max(1, min(K, budget // (16 * (M + 1)) - 1))
    return min(K, N)


def fused_forward(
    x: np.ndarray,
    y: np.ndarray,
    dist: str,
    gamma: float,
    tables: tuple,
    K: int = 0,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Soft-DTW values (B,) of x (B, N, D), y (B, M, D) (float64, C-contiguous), each pair over
    its own ``tables`` = (n, m, lo, hi) int64 arrays (B,); with ``K > 0`` also the checkpoints
    (B, ceil(N / K), M + 1) for :func:`fused_backward`."""
    B, N, _ = x.shape
    M = y.shape[1]
    ck = np.empty((B, -(-N // K), M + 1) if K > 0 else (1, 1, 1))
    out = np.empty(B)
    serial = _serial(B, N, M)
    kernel = _forward_serial if serial else _forward_parallel
    _run(kernel, serial, x, y, DIST_CODES[dist], float(gamma), *tables, int(K), ck, out)
    return out, (ck if K > 0 else None)


def full_forward(
    x: np.ndarray, y: np.ndarray, dist: str, gamma: float, tables: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """The full mode from the sequences: values (B,) and the padded table R (B, N + 1, M + 1)
    of :func:`sdtw.cpu.cpu_forward`, the cost built by a Numba kernel on each pair's band; or,
    where :func:`sdtw.cpu_lanes.use_lanes`, pairs as SIMD lanes (R in the lanes' layout)."""
    if use_lanes(x.shape[0], dist):
        return lane_forward(x, y, gamma, tables)
    B, N, _ = x.shape
    M = y.shape[1]
    ns, ms, los, his = tables
    C = np.empty((B, N, M))
    serial = _serial(B, N, M)
    kernel = _cost_serial if serial else _cost_parallel
    _run(kernel, serial, x, y, DIST_CODES[dist], *tables, C)
    return cpu_forward(C, gamma, los, his, (ns, ms))


def full_backward(
    x: np.ndarray,
    y: np.ndarray,
    dist: str,
    gamma: float,
    tables: tuple,
    R: np.ndarray,
    grad_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The gradients (B, N, D), (B, M, D) of ``sum_b grad_out[b] values[b]`` wrt x and y from
    :func:`full_forward`'s table R, without the (B, N, M) E (float64)."""
    if R.ndim == 4:  # (the lanes' layout: decided once, by the forward)
        return lane_backward(x, y, gamma, tables, R, grad_out)
    B, N, _ = x.shape
    gx, gy = np.zeros_like(x), np.zeros_like(y)
    serial = _serial(B, N, y.shape[1])
    kernel = _full_backward_serial if serial else _full_backward_parallel
    _run(kernel, serial, x, y, DIST_CODES[dist], float(gamma), *tables, R, grad_out, gx, gy)
    return gx, gy


def fused_backward(
    x: np.ndarray,
    y: np.ndarray,
    dist: str,
    gamma: float,
    tables: tuple,
    K: int,
    ck: np.ndarray,
    grad_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The gradients (B, N, D), (B, M, D) of ``sum_b grad_out[b] values[b]`` wrt x and y from
    :func:`fused_forward`'s checkpoints (float64)."""
    B, N, _ = x.shape
    gx, gy = np.zeros_like(x), np.zeros_like(y)
    serial = _serial(B, N, y.shape[1])
    kernel = _backward_serial if serial else _backward_parallel
    args = (x, y, DIST_CODES[dist], float(gamma), *tables, int(K), ck, grad_out, gx, gy)
    _run(kernel, serial, *args)
    return gx, gy


def _numpy64(t: torch.Tensor) -> np.ndarray:
    """A float64 C-contiguous NumPy view or copy of ``t`` (no copy where it already is one)."""
    t = t.detach()
    if t.device.type != "cpu" or t.dtype != torch.float64 or not t.is_contiguous():
        t = t.to("cpu", torch.float64).contiguous()
    return t.numpy()


def value_and_grads(x, y, dist, gamma, tables, K, need) -> tuple:
    """Values (B,) and, with ``need``, the gradients wrt x and y of float64 NumPy x, y: the
    full table (``K`` None) or the checkpointed mode (``K`` rows per segment)."""
    if K is None:
        values, R = full_forward(x, y, dist, gamma, tables)
        if not need:
            return values, None, None
        return values, *full_backward(x, y, dist, gamma, tables, R, np.ones(x.shape[0]))
    values, ck = fused_forward(x, y, dist, gamma, tables, K if need else 0)
    if not need:
        return values, None, None
    return values, *fused_backward(x, y, dist, gamma, tables, K, ck, np.ones(x.shape[0]))


class CPUFusedSoftDTW(torch.autograd.Function):
    """Autograd wrapper: x (B, N, D), y (B, M, D) -> values (B,) in x's dtype, float64 inside.
    Call as ``CPUFusedSoftDTW.apply(x, y, dist, gamma, tables, K)`` (``tables``: the pairs'
    ``(n, m, lo, hi)``; ``K``: rows per segment, :func:`segment_rows`, or None for the full
    table); validated by the public entry.  Saves only the checkpoints or the table (and x, y)
    when a gradient is needed."""

    @staticmethod
    def forward(ctx, x, y, dist: str, gamma: float, tables: tuple, K: int | None):
        xs, ys = _numpy64(x), _numpy64(y)
        need = x.requires_grad or y.requires_grad
        if K is None:
            out, ck = full_forward(xs, ys, dist, gamma, tables)
        else:
            out, ck = fused_forward(xs, ys, dist, gamma, tables, K if need else 0)
        if need:
            ctx.save_for_backward(torch.from_numpy(ck))
            ctx.seqs, ctx.args = (xs, ys), (dist, gamma, tables, K)
            ctx.meta = ((x.dtype, x.device), (y.dtype, y.device))
        return torch.from_numpy(out).to(x.device, x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (ck,) = ctx.saved_tensors
        dist, gamma, tables, K = ctx.args
        g = _numpy64(grad_out)
        if K is None:
            gx, gy = full_backward(*ctx.seqs, dist, gamma, tables, ck.numpy(), g)
        else:
            gx, gy = fused_backward(*ctx.seqs, dist, gamma, tables, K, ck.numpy(), g)
        (xd, xdev), (yd, ydev) = ctx.meta
        gxt = torch.from_numpy(gx).to(xdev, xd) if ctx.needs_input_grad[0] else None
        gyt = torch.from_numpy(gy).to(ydev, yd) if ctx.needs_input_grad[1] else None
        return gxt, gyt, None, None, None, None
