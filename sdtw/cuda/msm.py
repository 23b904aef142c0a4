"""Soft-MSM on the GPU: the ``"softmsm"`` recurrence's CUDA kernels.

Simple and correct rather than fast (as :mod:`sdtw.cuda.dtw`): one block per (pair, channel)
task sweeps its table by anti-diagonals (the cells of ``i + j = k`` depend only on diagonals
``k - 1`` and ``k - 2``), the threads striding over a diagonal's cells, a barrier between
diagonals; ``R`` and ``G`` (P = B D, N, M) float64 in global memory.  The edge costs are
computed in the kernels from x and y (:mod:`sdtw.msm_reference` has the maths).

* ``_forward``: ``R[i, j] = softmin2(softmin2(match, up), left)``.
* ``_occupancy``: ``G = d value / d R`` by reverse diagonals, each cell pulling from its three
  successors ``G[s] exp((R[s] - R[i, j] - cost(edge)) / gamma)`` (a pull: no two threads write
  one cell).
* ``_gradients``: one thread per sample of x (then of y) sums the occupancy of every edge whose
  cost reads that sample times the cost's partial derivative: each thread owns its output.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sdtw.cuda import import_numba_cuda, simulator_enabled
from sdtw.msm_reference import GATE_EPS

cuda = import_numba_cuda()

__all__ = ["msm_cuda"]


@cuda.jit(device=True)
def _softmin2(a, b, gamma):
    m = a if a <= b else b
    if m == math.inf:
        return a + b
    return m - gamma * math.log1p(math.exp(-abs(a - b) / gamma))


@cuda.jit(device=True)
def _transition(v, p, o, c, gamma):
    """C(v, p, o) and its partial derivatives (dv, dp, do)."""
    dp, do = v - p, v - o
    a, b = dp * dp, do * do
    e = math.exp(-abs(a - b) / gamma)
    S = min(a, b) - gamma * math.log1p(e)
    w_min = 1.0 / (1.0 + e)
    wa = w_min if a <= b else e * w_min
    wb = 1.0 - wa
    u = dp * do
    r2 = u * u + GATE_EPS
    r = math.sqrt(r2)
    keep = 0.5 * (1.0 + u / r)  # 1 - s(u)
    k = S * (-0.5 * GATE_EPS / (r2 * r))
    d_v = keep * 2.0 * (wa * dp + wb * do) - k * (dp + do)
    d_p = -keep * 2.0 * wa * dp + k * do
    d_o = -keep * 2.0 * wb * do + k * dp
    return c + keep * S, d_v, d_p, d_o


@cuda.jit(device=True)
def _inside(i, j, n, m, lo, hi):
    return 0 <= i and i < n and 0 <= j and j < m and -lo <= j - i and j - i <= hi


@cuda.jit
def _forward(x, y, c, gamma, ns, ms, los, his, R):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    M = R.shape[2]
    for k in range(t, R.shape[1] * M, T):
        R[task, k // M, k % M] = math.inf
    cuda.syncthreads()
    for k in range(n + m - 1):  # the anti-diagonal i + j = k
        for i in range(max(0, k - (m - 1)) + t, min(n - 1, k) + 1, T):
            j = k - i
            if _inside(i, j, n, m, lo, hi):
                xi, yj = x[b, i, d], y[b, j, d]
                if i == 0 and j == 0:
                    R[task, 0, 0] = (xi - yj) * (xi - yj)
                else:
                    diag = up = left = math.inf
                    if i > 0:
                        up = R[task, i - 1, j] + _transition(xi, x[b, i - 1, d], yj, c, gamma)[0]
                        if j > 0:
                            diag = R[task, i - 1, j - 1] + (xi - yj) * (xi - yj)
                    if j > 0:
                        left = R[task, i, j - 1] + _transition(yj, y[b, j - 1, d], xi, c, gamma)[0]
                    R[task, i, j] = _softmin2(_softmin2(diag, up, gamma), left, gamma)
        cuda.syncthreads()


@cuda.jit(device=True)
def _weight(G, R, task, s_i, s_j, r, cost, gamma):
    """G of successor (s_i, s_j) times the weight of its edge from a cell of value r."""
    g = G[task, s_i, s_j]
    if g == 0.0:
        return 0.0
    return g * math.exp((R[task, s_i, s_j] - r - cost) / gamma)


@cuda.jit
def _occupancy(x, y, c, gamma, ns, ms, los, his, grad_out, R, G):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    M = G.shape[2]
    for k in range(t, G.shape[1] * M, T):
        G[task, k // M, k % M] = 0.0
    cuda.syncthreads()
    if t == 0:
        G[task, n - 1, m - 1] = grad_out[b]
    cuda.syncthreads()
    for k in range(n + m - 3, -1, -1):
        for i in range(max(0, k - (m - 1)) + t, min(n - 1, k) + 1, T):
            j = k - i
            if _inside(i, j, n, m, lo, hi):
                r = R[task, i, j]
                xi, yj = x[b, i, d], y[b, j, d]
                total = 0.0
                if _inside(i + 1, j, n, m, lo, hi):  # (i + 1, j) by its up edge
                    cost = _transition(x[b, i + 1, d], xi, yj, c, gamma)[0]
                    total += _weight(G, R, task, i + 1, j, r, cost, gamma)
                if _inside(i, j + 1, n, m, lo, hi):  # (i, j + 1) by its left edge
                    cost = _transition(y[b, j + 1, d], yj, xi, c, gamma)[0]
                    total += _weight(G, R, task, i, j + 1, r, cost, gamma)
                if _inside(i + 1, j + 1, n, m, lo, hi):  # (i + 1, j + 1) by its match
                    diff = x[b, i + 1, d] - y[b, j + 1, d]
                    total += _weight(G, R, task, i + 1, j + 1, r, diff * diff, gamma)
                G[task, i, j] = total
        cuda.syncthreads()


@cuda.jit
def _gradients(x, y, c, gamma, ns, ms, los, his, R, G, gx, gy):
    task = cuda.blockIdx.x
    D = x.shape[2]
    b, d = task // D, task % D
    t, T = cuda.threadIdx.x, cuda.blockDim.x
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    for i in range(t, n, T):  # gx[b, i, d]: every edge whose cost reads x_i
        xi = x[b, i, d]
        acc = 0.0
        for j in range(m):
            if not _inside(i, j, n, m, lo, hi):
                continue
            r, g, yj = R[task, i, j], G[task, i, j], y[b, j, d]
            if i + 1 < n and _inside(i + 1, j, n, m, lo, hi):  # up edge into (i + 1, j): p = x_i
                g1 = G[task, i + 1, j]
                if g1 != 0.0:
                    cost, d_v, d_p, d_o = _transition(x[b, i + 1, d], xi, yj, c, gamma)
                    acc += g1 * math.exp((R[task, i + 1, j] - r - cost) / gamma) * d_p
            if g == 0.0:
                continue
            if i == 0 and j == 0:
                acc += g * 2.0 * (xi - yj)
                continue
            if i > 0 and j > 0:
                o = g * math.exp((r - R[task, i - 1, j - 1] - (xi - yj) * (xi - yj)) / gamma)
                acc += o * 2.0 * (xi - yj)
            if i > 0:  # up edge into (i, j): C(x_i, x_{i-1}, y_j), v = x_i
                cost, d_v, d_p, d_o = _transition(xi, x[b, i - 1, d], yj, c, gamma)
                acc += g * math.exp((r - R[task, i - 1, j] - cost) / gamma) * d_v
            if j > 0:  # left edge into (i, j): C(y_j, y_{j-1}, x_i), o = x_i
                cost, d_v, d_p, d_o = _transition(yj, y[b, j - 1, d], xi, c, gamma)
                acc += g * math.exp((r - R[task, i, j - 1] - cost) / gamma) * d_o
        gx[b, i, d] = acc
    for j in range(t, m, T):  # gy[b, j, d]: every edge whose cost reads y_j
        yj = y[b, j, d]
        acc = 0.0
        for i in range(n):
            if not _inside(i, j, n, m, lo, hi):
                continue
            r, g, xi = R[task, i, j], G[task, i, j], x[b, i, d]
            if j + 1 < m and _inside(i, j + 1, n, m, lo, hi):  # left edge into (i, j + 1): p = y_j
                g1 = G[task, i, j + 1]
                if g1 != 0.0:
                    cost, d_v, d_p, d_o = _transition(y[b, j + 1, d], yj, xi, c, gamma)
                    acc += g1 * math.exp((R[task, i, j + 1] - r - cost) / gamma) * d_p
            if g == 0.0:
                continue
            if i == 0 and j == 0:
                acc -= g * 2.0 * (xi - yj)
                continue
            if i > 0 and j > 0:
                o = g * math.exp((r - R[task, i - 1, j - 1] - (xi - yj) * (xi - yj)) / gamma)
                acc -= o * 2.0 * (xi - yj)
            if i > 0:  # up edge into (i, j): o = y_j
                cost, d_v, d_p, d_o = _transition(xi, x[b, i - 1, d], yj, c, gamma)
                acc += g * math.exp((r - R[task, i - 1, j] - cost) / gamma) * d_o
            if j > 0:  # left edge into (i, j): v = y_j
                cost, d_v, d_p, d_o = _transition(yj, y[b, j - 1, d], xi, c, gamma)
                acc += g * math.exp((r - R[task, i, j - 1] - cost) / gamma) * d_v
        gy[b, j, d] = acc


def _arr(t: torch.Tensor):
    return t.numpy() if simulator_enabled() else cuda.as_cuda_array(t)


def _stream(device: torch.device):
    if simulator_enabled():
        return 0
    return cuda.external_stream(torch.cuda.current_stream(device).cuda_stream)


def msm_cuda(x, y, c: float, gamma: float, tables: tuple, need: bool) -> tuple:
    """Values (B,) and, with ``need``, the gradients wrt x (B, N, D) and y (B, M, D) of
    Soft-MSM (float64 inside); ``tables``: int64 NumPy arrays ``(n, m, lo, hi)`` (B,) of each
    pair's lengths and band offsets.  No autograd."""
    a = x.detach().to(torch.float64).contiguous()
    b = y.detach().to(torch.float64).contiguous()
    B, N, D = a.shape
    M = b.shape[1]
    dev = a.device
    ns, ms, los, his = (torch.from_numpy(np.array(t)).to(dev) for t in tables)
    R = torch.empty((B * D, N, M), dtype=torch.float64, device=dev)
    stream = _stream(dev)
    threads = 8 if simulator_enabled() else 128
    lens = [_arr(t) for t in (ns, ms, los, his)]
    _forward[B * D, threads, stream](_arr(a), _arr(b), float(c), float(gamma), *lens, _arr(R))
    values = R[torch.arange(B * D, device=dev), ns.repeat_interleave(D) - 1,
               ms.repeat_interleave(D) - 1].reshape(B, D).sum(1)  # fmt: skip
    if not need:
        return values, None, None
    G = torch.empty_like(R)
    ones = torch.ones(B, dtype=torch.float64, device=dev)
    args = (_arr(a), _arr(b), float(c), float(gamma), *lens)
    _occupancy[B * D, threads, stream](*args, _arr(ones), _arr(R), _arr(G))
    gx, gy = torch.zeros_like(a), torch.zeros_like(b)
    _gradients[B * D, threads, stream](*args, _arr(R), _arr(G), _arr(gx), _arr(gy))
    return values, gx, gy
