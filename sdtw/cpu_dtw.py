"""Exact DTW (``gamma = 0``) on the CPU: Numba kernels parallel over the batch, their
launchers and their autograd wrapper, the ``"dtw"`` recurrence's CPU kernels.

Layers as in :mod:`sdtw.cpu`: kernels (``prange`` over the pairs, each pair's band and lengths
from the tables ``n, m, lo, hi``) -> launchers :func:`dtw_cpu_forward`, :func:`dtw_cpu_values`,
:func:`dtw_cpu_backward` (NumPy float64 in and out) -> :class:`CPUDTW`.  The maths and the
tie rule are :mod:`sdtw.reference_dtw`'s.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from sdtw._jit import parallel_and_serial
from sdtw.cpu import _run, _serial, _tables

__all__ = ["CPUDTW", "dtw_cpu_backward", "dtw_cpu_forward", "dtw_cpu_values"]


# The hard minimum of the three predecessors, NaN where one is NaN (as np.minimum: the
# comparisons below alone would drop a NaN depending on its position).
@njit(cache=True, nogil=True, inline="always")
def _min3(a: float, b: float, c: float) -> float:
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    m = a if a <= b else b
    return m if m <= c else c


# Forward DP with R padded, R[i + 1, j + 1] cell (i, j); cells outside the band
# -lo <= j - i <= hi or past the pair's lengths keep +inf:
#
#     R[0, 0] = 0,   R[i + 1, j + 1] = C[i, j] + min(R[i, j], R[i, j + 1], R[i + 1, j]).
def _forward_kernel(cost, ns, ms, los, his, R) -> None:
    for b in prange(cost.shape[0]):
        Rb, Cb = R[b], cost[b]
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        Rb[:, :] = math.inf
        Rb[0, 0] = 0.0
        for i in range(n):
            for j in range(max(0, i - lo), min(m - 1, i + hi) + 1):
                Rb[i + 1, j + 1] = Cb[i, j] + _min3(Rb[i, j], Rb[i, j + 1], Rb[i + 1, j])


# The same DP keeping two rows (a forward without gradient: no (N + 1, M + 1) table per pair).
def _values_kernel(cost, ns, ms, los, his, out) -> None:
    M = cost.shape[2]
    for b in prange(cost.shape[0]):
        Cb = cost[b]
        n, m, lo, hi = ns[b], ms[b], los[b], his[b]
        prev = np.full(M + 1, math.inf)
        row = np.full(M + 1, math.inf)
        prev[0] = 0.0
        for i in range(n):
            row[:] = math.inf
            for j in range(max(0, i - lo), min(m - 1, i + hi) + 1):
                row[j + 1] = Cb[i, j] + _min3(prev[j], prev[j + 1], row[j])
            prev, row = row, prev
        out[b] = prev[m]


# Backtracking from (n - 1, m - 1): each step goes to the predecessor of least R, ties to the
# diagonal, then up, then left (sdtw.reference_dtw.TIE_ORDER); E is the path's indicator times
# the upstream gradient, 0 for a pair whose value is not finite.
def _backward_kernel(R, ns, ms, grad_out, E) -> None:
    for b in prange(E.shape[0]):
        Rb, Eb = R[b], E[b]
        Eb[:, :] = 0.0
        i, j = ns[b] - 1, ms[b] - 1
        if not math.isfinite(Rb[i + 1, j + 1]):
            continue
        g = grad_out[b]
        while True:
            Eb[i, j] = g
            if i == 0 and j == 0:
                break
            diag, up, left = Rb[i, j], Rb[i, j + 1], Rb[i + 1, j]
            if diag <= up and diag <= left:
                i -= 1
                j -= 1
            elif up <= left:
                i -= 1
            else:
                j -= 1


# (each kernel serial and parallel over the batch, as in sdtw.cpu: small calls stay on one
# thread)
_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel)
_values_parallel, _values_serial = parallel_and_serial(_values_kernel)
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel)


def dtw_cpu_values(cost: np.ndarray, lo, hi, lengths: tuple | None = None) -> np.ndarray:
    """Exact DTW values (B,) of a cost (B, N, M), float64, without the table (two rows per
    pair).  ``lo``, ``hi`` and ``lengths`` as :func:`sdtw.cpu.cpu_forward` takes them."""
    cost = np.ascontiguousarray(cost, dtype=np.float64)
    B, N, M = cost.shape
    ns, ms, los, his = _tables(B, N, M, lo, hi, lengths)
    out = np.empty(B)
    serial = _serial(B, N, M)
    _run(_values_serial if serial else _values_parallel, serial, cost, ns, ms, los, his, out)
    return out


def dtw_cpu_forward(cost: np.ndarray, lo, hi, lengths: tuple | None = None) -> tuple:
    """Exact DTW values (B,) and the padded table R (B, N + 1, M + 1) that
    :func:`dtw_cpu_backward` backtracks through."""
    cost = np.ascontiguousarray(cost, dtype=np.float64)
    B, N, M = cost.shape
    ns, ms, los, his = _tables(B, N, M, lo, hi, lengths)
    R = np.empty((B, N + 1, M + 1))
    serial = _serial(B, N, M)
    _run(_forward_serial if serial else _forward_parallel, serial, cost, ns, ms, los, his, R)
    return R[np.arange(B), ns, ms], R


def dtw_cpu_backward(R: np.ndarray, grad_out: np.ndarray, lengths: tuple | None = None):
    """``E * grad_out[:, None, None]`` (B, N, M): the optimal path's indicator (ties:
    diagonal, up, left) scaled by the upstream gradient."""
    B, N1, M1 = R.shape
    ns, ms, _, _ = _tables(B, N1 - 1, M1 - 1, 0, 0, lengths)
    grad_out = np.ascontiguousarray(grad_out, dtype=np.float64)
    E = np.empty((B, N1 - 1, M1 - 1))
    serial = _serial(B, N1 - 1, M1 - 1)
    _run(_backward_serial if serial else _backward_parallel, serial, R, ns, ms, grad_out, E)
    return E


class CPUDTW(torch.autograd.Function):
    """Autograd wrapper: cost (B, N, M) -> exact DTW values (B,), float64 inside; the
    gradient ``E * grad_out`` in the cost's dtype.  ``CPUDTW.apply(cost, lo, hi, lengths)``;
    the table is kept only when the cost needs a gradient."""

    @staticmethod
    def forward(ctx, cost: torch.Tensor, lo, hi, lengths=None) -> torch.Tensor:
        c = cost.detach().to("cpu", torch.float64).contiguous().numpy()
        if not cost.requires_grad:
            return torch.from_numpy(dtw_cpu_values(c, lo, hi, lengths)).to(cost.device, cost.dtype)
        values, R = dtw_cpu_forward(c, lo, hi, lengths)
        ctx.R, ctx.lengths = R, lengths
        ctx.cost_dtype, ctx.cost_device = cost.dtype, cost.device
        return torch.from_numpy(values).to(cost.device, cost.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        g = grad_out.detach().to("cpu", torch.float64).contiguous().numpy()
        E = dtw_cpu_backward(ctx.R, g, ctx.lengths)
        return torch.from_numpy(E).to(ctx.cost_device, ctx.cost_dtype), None, None, None
