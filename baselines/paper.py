"""Baseline "paper-unfused" / "paper-fused": the design of SoftDTW-CUDA-Torch.

Our own re-implementation, from the published description only, of the execution model of
Shapira Weber & Freifeld, "SoftDTW-CUDA-Torch: Memory-Efficient GPU-Accelerated Soft Dynamic
Time Warping for PyTorch" (arXiv, 2026).  It is here to be measured against, not used.

Design reproduced
-----------------
* **One Numba kernel launch per anti-diagonal**: ``N + M - 1`` launches in the forward pass and
  ``N + M - 1`` again in the backward pass (:func:`launches`).  Each launch has one thread per
  cell of its diagonal (``blockIdx.x`` along the diagonal, ``blockIdx.y`` over the batch) and
  reads and writes the DP tables in global memory; the launch boundary is the only
  synchronisation between diagonals.
* Forward: ``R`` (B, N + 2, M + 2) in global memory, the loss is ``R[:, N, M]``.
* **Log-space backward**: instead of ``E`` (Cuturi & Blondel, Algorithm 2) the kernel propagates
  ``log E`` with a three-term logsumexp,

  .. math::

      \\log E_{i,j} = \\operatorname{logsumexp}_{(i',j') \\in \\mathrm{succ}(i,j)}
          \\Big(\\log E_{i',j'} + \\frac{R_{i',j'} - R_{i,j} - C_{i',j'}}{\\gamma}\\Big),

  and ``E = exp(log E)`` is taken at the end (one torch op).  It stores a clone of ``R`` with
  Algorithm 2's boundary (``-inf`` on row ``N + 1`` and column ``M + 1``,
  ``R[N + 1, M + 1] = R[N, M]``), ``log E`` (B, N + 2, M + 2) and ``E`` (B, N, M).
* ``fused=False`` ("paper-unfused"): the cost (B, N, M) is computed by torch
  (:func:`baselines._common.sqeuclidean`) and autograd carries ``E * grad_out`` back through it.
* ``fused=True`` ("paper-fused"): the kernels recompute squared-Euclidean distances from ``x``
  and ``y`` -- one ``D``-term loop per cell forward, three per cell backward (the successors'
  costs) -- so no (B, N, M) cost tensor is stored; the gradients are formed from ``E`` with
  torch ops, :math:`\\nabla_{x_i} = 2 \\sum_j E_{ij} (x_i - y_j)`,
  :math:`\\nabla_{y_j} = 2 \\sum_i E_{ij} (y_j - x_i)`.
* Arithmetic and storage in the input dtype (float32 for float32 inputs), as in the original.

Limits
------
* Launch-bound: 2 (N + M - 1) launches per forward + backward step at ~20-40 us of host time
  each, whatever the batch; every diagonal round-trips ``R`` (and ``log E``) through global
  memory.  Peak memory is several ``B (N + 2) (M + 2)`` tables (``R``, its clone, ``log E``,
  ``E``, plus the cost and its gradient when unfused).
* The fused backward's distance loops are serial over ``D`` with scalar loads.
* CUDA tensors only (or CPU tensors under ``NUMBA_ENABLE_CUDASIM=1``); float32 / float64.
* ``bandwidth`` uses this repository's band (:mod:`sdtw.band`, rescaled when ``N != M``) so the
  baseline computes the same function as our reference; the original uses
  ``|i - j| <= bandwidth``, which agrees when ``N == M``.

Where it is numerically unsound
-------------------------------
The log space only removes *overflow*.  The term ``(R[i', j'] - R[i, j] - C[i', j']) / gamma``
subtracts numbers of size ``|R|`` that were each rounded to the input dtype, so in float32 its
absolute error is about ``6e-8 |R| / gamma``: once ``|R| / gamma`` reaches ~1e6 the weights, and
so ``E`` and every gradient, are wrong by O(1) or more, while the loss value still looks fine.
With ``randn`` inputs at N = 512, D = 64 (``R`` ~ 6e4) that already happens at gamma 0.01
(relative gradient error ~1.6 measured on an H200, and non-finite at gamma 1e-4).  Finiteness
checks cannot see this; only a float64 comparison can.  This re-implementation shows the same
trend under the simulator (float32 storage; N = M = 32, D = 64, ``randn``, ``R`` ~ 4e3: relative
gradient error 3e-4 at gamma 1, 5e-3 at 0.1, 3e-2 at 0.01, 0.35 at 0.001), and errors of 1e4
when a flat stretch of near-ties follows a large ``R`` (``R`` ~ 4e6, gamma 0.1).  In float64 the
same kernels are accurate.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from baselines import _cuda
from baselines._common import check_inputs, sqeuclidean
from baselines._cuda import cuda
from sdtw.band import band_offsets

__all__ = ["launches", "loss"]

_MAX_THREADS = 256


def launches(N: int, M: int) -> dict[str, int]:
    """Numba kernel launches of one forward and of one backward pass (any B, D, band)."""
    return {"forward": N + M - 1, "backward": N + M - 1}


# --------------------------------------------------------------------------------------------
# Kernels.  Cell (i, j), 1-based, lives at R[b, i, j]; launch p covers the cells with
# i + j = p, i.e. i in [max(1, p - M), min(N, p - 1)], one thread each; a thread whose cell is
# past the diagonal's end or outside the band (-lo <= j - i <= hi) does nothing, so R stays
# +inf and log E stays -inf there.
# --------------------------------------------------------------------------------------------

if cuda is not None:

    @cuda.jit(device=True)
    def _softmin3(a, b, c, gamma):
        # softmin_gamma(a, b, c) = m - gamma * log sum_k exp(-(a_k - m) / gamma), m = min:
        # every exponent is <= 0, so nothing overflows; +inf where all three are +inf.
        m = min(a, b, c)
        if m == math.inf:
            return m
        s = math.exp((m - a) / gamma) + math.exp((m - b) / gamma) + math.exp((m - c) / gamma)
        return m - gamma * math.log(s)

    @cuda.jit(device=True)
    def _logsumexp3(a, b, c):
        m = max(a, b, c)
        if m == -math.inf:
            return m
        return m + math.log(math.exp(a - m) + math.exp(b - m) + math.exp(c - m))

    @cuda.jit(device=True)
    def _log_term(logE_s, R_s, r, c, gamma):
        # A successor outside the band (R = +inf, log E = -inf) never chose (i, j); without this
        # test its term would be inf - inf = nan.  -R_s is -inf in R's dtype.
        if R_s == math.inf:
            return -R_s
        return logE_s + (R_s - r - c) / gamma

    @cuda.jit(device=True)
    def _cost_at(cost, b, i, j):
        # cost of 0-based cell (i, j); 0 on the padding row N / column M (only the corner
        # successor (N + 1, M + 1) of (N, M) needs the value, and it needs exactly 0).
        if i < cost.shape[1] and j < cost.shape[2]:
            return cost[b, i, j]
        return cost.dtype.type(0)

    @cuda.jit(device=True)
    def _sqdist_at(x, y, b, i, j):
        # fused mode: ||x[b, i] - y[b, j]||^2 recomputed, a serial loop over D; 0 on the padding.
        acc = x.dtype.type(0)
        if i < x.shape[1] and j < y.shape[1]:
            for d in range(x.shape[2]):
                diff = x[b, i, d] - y[b, j, d]
                acc += diff * diff
        return acc

    @cuda.jit(device=True)
    def _diagonal_cell(p, N, M, lo, hi):
        # (i, j) of this thread on diagonal p, or (0, 0) when it has no cell.
        i = max(1, p - M) + cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        j = p - i
        if i > N or j < 1 or j - i < -lo or j - i > hi:
            return 0, 0
        return i, j

    # Forward, one diagonal:  R[i, j] = C[i-1, j-1] + softmin(R[i-1, j-1], R[i-1, j], R[i, j-1]).
    @cuda.jit
    def _forward_unfused(cost, R, p, gamma, lo, hi):
        b = cuda.blockIdx.y
        i, j = _diagonal_cell(p, cost.shape[1], cost.shape[2], lo, hi)
        if i == 0:
            return
        R[b, i, j] = cost[b, i - 1, j - 1] + _softmin3(
            R[b, i - 1, j - 1], R[b, i - 1, j], R[b, i, j - 1], gamma
        )

    @cuda.jit
    def _forward_fused(x, y, R, p, gamma, lo, hi):
        b = cuda.blockIdx.y
        i, j = _diagonal_cell(p, x.shape[1], y.shape[1], lo, hi)
        if i == 0:
            return
        R[b, i, j] = _sqdist_at(x, y, b, i - 1, j - 1) + _softmin3(
            R[b, i - 1, j - 1], R[b, i - 1, j], R[b, i, j - 1], gamma
        )

    # Backward, one diagonal (from p = N + M down to 2), in log space:
    #   log E[i, j] = logsumexp over succ in {(i+1, j), (i, j+1), (i+1, j+1)} of
    #                 log E[succ] + (R[succ] - R[i, j] - C[succ]) / gamma,
    # with R carrying Algorithm 2's boundary (-inf on row N+1 / column M+1, R[N+1, M+1] =
    # R[N, M]) and log E[N+1, M+1] = 0, so that log E[N, M] = 0.  C[succ] is the 0-based
    # cost[i, j-1], cost[i-1, j], cost[i, j].
    @cuda.jit
    def _backward_unfused(cost, R, logE, p, gamma, lo, hi):
        b = cuda.blockIdx.y
        i, j = _diagonal_cell(p, cost.shape[1], cost.shape[2], lo, hi)
        if i == 0:
            return
        r = R[b, i, j]
        logE[b, i, j] = _logsumexp3(
            _log_term(logE[b, i + 1, j], R[b, i + 1, j], r, _cost_at(cost, b, i, j - 1), gamma),
            _log_term(logE[b, i, j + 1], R[b, i, j + 1], r, _cost_at(cost, b, i - 1, j), gamma),
            _log_term(logE[b, i + 1, j + 1], R[b, i + 1, j + 1], r, _cost_at(cost, b, i, j), gamma),
        )

    @cuda.jit
    def _backward_fused(x, y, R, logE, p, gamma, lo, hi):
        b = cuda.blockIdx.y
        i, j = _diagonal_cell(p, x.shape[1], y.shape[1], lo, hi)
        if i == 0:
            return
        r = R[b, i, j]
        logE[b, i, j] = _logsumexp3(
            _log_term(logE[b, i + 1, j], R[b, i + 1, j], r, _sqdist_at(x, y, b, i, j - 1), gamma),
            _log_term(logE[b, i, j + 1], R[b, i, j + 1], r, _sqdist_at(x, y, b, i - 1, j), gamma),
            _log_term(
                logE[b, i + 1, j + 1], R[b, i + 1, j + 1], r, _sqdist_at(x, y, b, i, j), gamma
            ),
        )


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def _block_size(longest_diagonal: int) -> int:
    if _cuda.simulator():  # simulated threads are Python threads: start no idle ones
        return min(_MAX_THREADS, longest_diagonal)
    return min(_MAX_THREADS, 32 * math.ceil(longest_diagonal / 32))


def _sweep(kernel, inputs, tables, N, M, gamma, bandwidth, diagonals) -> None:
    """Launch ``kernel`` once per diagonal ``p`` in ``diagonals`` over ``inputs + tables``."""
    B = inputs[0].shape[0]
    lo, hi = band_offsets(N, M, bandwidth)
    g = _cuda.scalar(gamma, tables[0].dtype)  # gamma in the tables' dtype, not float64
    tpb = _block_size(min(N, M))
    with _cuda.on_device(inputs[0]) as stream:
        args = [_cuda.device_array(t) for t in (*inputs, *tables)]
        for p in diagonals:
            length = min(N, p - 1) - max(1, p - M) + 1
            _cuda.launch(kernel, (math.ceil(length / tpb), B), tpb, stream, *args, p, g, lo, hi)


def _forward(inputs, N, M, gamma, bandwidth, fused) -> torch.Tensor:
    ref = inputs[0]
    R = torch.full((ref.shape[0], N + 2, M + 2), math.inf, dtype=ref.dtype, device=ref.device)
    R[:, 0, 0] = 0
    kernel = _forward_fused if fused else _forward_unfused
    _sweep(kernel, inputs, (R,), N, M, gamma, bandwidth, range(2, N + M + 1))
    return R


def _backward(inputs, R, N, M, gamma, bandwidth, fused) -> torch.Tensor:
    """``E`` (B, N, M) from the saved forward table ``R`` (left untouched)."""
    R = R.clone()
    R[:, 1 : N + 1, M + 1] = -math.inf
    R[:, N + 1, 1 : M + 1] = -math.inf
    R[:, N + 1, M + 1] = R[:, N, M]
    logE = torch.full_like(R, -math.inf)
    logE[:, N + 1, M + 1] = 0
    kernel = _backward_fused if fused else _backward_unfused
    _sweep(kernel, inputs, (R, logE), N, M, gamma, bandwidth, range(N + M, 1, -1))
    return torch.exp(logE[:, 1 : N + 1, 1 : M + 1])


class _PaperUnfused(torch.autograd.Function):
    """cost (B, N, M) -> loss (B,); gradient ``E * grad_out``."""

    @staticmethod
    def forward(ctx, cost, gamma, bandwidth):
        N, M = cost.shape[1:]
        R = _forward((cost,), N, M, gamma, bandwidth, fused=False)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(cost, R)
            ctx.gamma, ctx.bandwidth = gamma, bandwidth
        return R[:, N, M].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        cost, R = ctx.saved_tensors
        N, M = cost.shape[1:]
        E = _backward((cost,), R, N, M, ctx.gamma, ctx.bandwidth, fused=False)
        return E * grad_out[:, None, None], None, None


class _PaperFused(torch.autograd.Function):
    """x (B, N, D), y (B, M, D) -> loss (B,); distances recomputed in the kernels."""

    @staticmethod
    def forward(ctx, x, y, gamma, bandwidth):
        N, M = x.shape[1], y.shape[1]
        R = _forward((x, y), N, M, gamma, bandwidth, fused=True)
        if any(ctx.needs_input_grad[:2]):
            ctx.save_for_backward(x, y, R)
            ctx.gamma, ctx.bandwidth = gamma, bandwidth
        return R[:, N, M].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        x, y, R = ctx.saved_tensors
        N, M = x.shape[1], y.shape[1]
        E = _backward((x, y), R, N, M, ctx.gamma, ctx.bandwidth, fused=True)
        E = E * (2 * grad_out)[:, None, None]
        grad_x = grad_y = None
        if ctx.needs_input_grad[0]:
            grad_x = E.sum(2)[:, :, None] * x - torch.bmm(E, y)
        if ctx.needs_input_grad[1]:
            grad_y = E.sum(1)[:, :, None] * y - torch.bmm(E.transpose(1, 2), x)
        return grad_x, grad_y, None, None


def loss(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    fused: bool = False,
    bandwidth: int | None = None,
) -> torch.Tensor:
    """Soft-DTW with squared-Euclidean cost, the paper's design.

    Parameters
    ----------
    x : Tensor, shape (B, N, D)
    y : Tensor, shape (B, M, D)
        CUDA tensors (CPU under the simulator), float32 or float64; gradients flow to both.
    gamma : float
        Smoothing, > 0.
    fused : bool
        Recompute distances inside the kernels ("paper-fused") instead of taking a torch cost
        tensor ("paper-unfused").
    bandwidth : int or None
        Sakoe-Chiba radius (see :mod:`sdtw.band`); ``None``: no band.

    Returns
    -------
    Tensor, shape (B,)
        Soft-DTW losses, in the input dtype.
    """
    check_inputs("paper", x, y, gamma)
    _cuda.require("paper", x, y)
    x, y = x.contiguous(), y.contiguous()
    if fused:
        return _PaperFused.apply(x, y, float(gamma), bandwidth)
    return _PaperUnfused.apply(sqeuclidean(x, y).contiguous(), float(gamma), bandwidth)
