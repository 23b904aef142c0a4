"""Exact DTW (``gamma = 0``) on the GPU: the ``"dtw"`` recurrence's CUDA kernels.

Simple and correct rather than fast: one block per pair sweeps its table by anti-diagonals
(the cells of ``i + j = d`` depend only on diagonals ``d - 1`` and ``d - 2``), the threads
of the block striding over a diagonal's cells, a barrier between diagonals; the padded table
``R`` (B, N + 1, M + 1) lives in global memory, in the cost's dtype.  The backward is one
thread per pair backtracking through ``R`` (N + M steps), ties to the diagonal, then up, then
left (:data:`sdtw.reference_dtw.TIE_ORDER`).  The soft-DTW wavefront kernels run the DP in
units of gamma, so they cannot take gamma = 0; this is the recurrence's own kernel.
"""

from __future__ import annotations

import math

import torch

from sdtw.cuda import import_numba_cuda, simulator_enabled
from sdtw.cuda._launch import numba_stream as _stream
from sdtw.cuda._launch import numba_view as _arr
from sdtw.cuda.tables import device_tables

cuda = import_numba_cuda()

__all__ = ["dtw_cuda"]


@cuda.jit(device=True)
def _min3(a, b, c):
    # (NaN where one is NaN, as np.minimum)
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    m = a if a <= b else b
    return m if m <= c else c


@cuda.jit
def _forward(cost, ns, ms, los, his, R):
    p = cuda.blockIdx.x
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[p], ms[p], los[p], his[p]
    M1 = R.shape[2]
    for k in range(t, R.shape[1] * M1, T):
        R[p, k // M1, k % M1] = math.inf
    cuda.syncthreads()
    if t == 0:
        R[p, 0, 0] = 0.0
    cuda.syncthreads()
    for d in range(n + m - 1):  # the anti-diagonal i + j = d
        for i in range(max(0, d - (m - 1)) + t, min(n - 1, d) + 1, T):
            j = d - i
            if -lo <= j - i and j - i <= hi:
                R[p, i + 1, j + 1] = cost[p, i, j] + _min3(
                    R[p, i, j], R[p, i, j + 1], R[p, i + 1, j]
                )
        cuda.syncthreads()


@cuda.jit
def _backtrack(R, ns, ms, grad_out, E):
    p = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if p >= E.shape[0]:
        return
    i, j = ns[p] - 1, ms[p] - 1
    v = R[p, i + 1, j + 1]
    if math.isinf(v) or math.isnan(v):
        return  # (E stays 0)
    g = grad_out[p]
    while True:
        E[p, i, j] = g
        if i == 0 and j == 0:
            return
        diag, up, left = R[p, i, j], R[p, i, j + 1], R[p, i + 1, j]
        if diag <= up and diag <= left:
            i -= 1
            j -= 1
        elif up <= left:
            i -= 1
        else:
            j -= 1


def dtw_cuda(cost: torch.Tensor, tables: tuple, need: bool, grad_out=None) -> tuple:
    """Values (B,) and, with ``need``, ``E * grad_out`` (B, N, M) of a cost (B, N, M) (float32
    or float64, on the GPU or, under the simulator, the CPU); ``tables``: each pair's lengths
    and band offsets ``(n, m, lo, hi)``, int64 NumPy arrays (B,) or a tensor (4, B)
    (:func:`sdtw.cuda.tables.device_tables`); ``grad_out`` (B,) or None (ones).  No
    autograd."""
    c = cost.detach().contiguous()
    if c.dtype not in (torch.float32, torch.float64):
        c = c.float()
    B, N, M = c.shape
    dev = c.device
    ns, ms, los, his = device_tables(tables, dev)
    R = torch.empty((B, N + 1, M + 1), dtype=c.dtype, device=dev)
    stream = _stream(dev)
    threads = 8 if simulator_enabled() else 128
    args = [_arr(t) for t in (c, ns, ms, los, his, R)]
    _forward[B, threads, stream](*args)
    values = R[torch.arange(B, device=dev), ns, ms]
    if not need:
        return values, None
    g = torch.ones(B, dtype=c.dtype, device=dev) if grad_out is None else grad_out.to(c.dtype)
    E = torch.zeros((B, N, M), dtype=c.dtype, device=dev)
    per = 32 if B >= 32 else B
    _backtrack[(B + per - 1) // per, per, stream](
        _arr(R), _arr(ns), _arr(ms), _arr(g.contiguous()), _arr(E)
    )
    return values, E
