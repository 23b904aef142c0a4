"""Baseline "maghoumi" / "maghoumi-bmm": the design of Maghoumi's pytorch-softdtw-cuda.

Our own re-implementation, from the published description only, of the execution model of
M. Maghoumi's ``pytorch-softdtw-cuda`` (the CUDA soft-DTW most PyTorch users run).  It is here
to be measured against, not used.

Design reproduced
-----------------
* **One thread block per pair** (``blockIdx.x`` = batch index), ``max(N, M)`` threads per block,
  thread ``t`` owning row ``i = t + 1``.  The block walks the ``N + M - 1`` anti-diagonals
  *inside* one kernel, with ``cuda.syncthreads()`` between diagonals; ``R`` (B, N + 2, M + 2)
  lives in global memory.  One launch forward, one backward (:func:`launches`).
* **Linear-space backward**, Cuturi & Blondel's Algorithm 2 as published:

  .. math::

      E_{i,j} = \\sum_{(i',j') \\in \\mathrm{succ}(i,j)}
          E_{i',j'} \\exp\\big((R_{i',j'} - R_{i,j} - C_{i',j'}) / \\gamma\\big),

  on a zero-padded copy of the cost (B, N + 2, M + 2), a clone of ``R`` with the ``-inf``
  boundary and ``R[N + 1, M + 1] = R[N, M]``, and ``E`` (B, N + 2, M + 2) with
  ``E[N + 1, M + 1] = 1``.
* Cost computed by torch, outside the kernels:

  - ``dist="broadcast"`` ("maghoumi", the original default):
    ``((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)``, which materialises a
    (B, N, M, D) tensor -- the source of most of its memory use (8 GB at B = 32, N = 512,
    D = 64);
  - ``dist="bmm"`` ("maghoumi-bmm"): the matrix-product form
    :func:`baselines._common.sqeuclidean` (not ``torch.cdist``, whose square root has an
    infinite gradient where ``x_i == y_j``).

* Arithmetic and storage in the input dtype.

Limits
------
* ``max(N, M) <= 1024`` (the CUDA threads-per-block limit); longer inputs raise ``ValueError``.
  In practice less for the original: its kernel needs ~65 registers per thread (it passes
  ``gamma`` as a Python float, so its arithmetic is float64 on float32 storage), and on an H200
  (64 K registers per block) ``N = 1024`` fails with ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``.
  Our kernels compute in the input dtype and compile smaller (ptxas 13.5, sm_90, float32:
  38 registers forward, 49 backward; float64: 45 and 58), so they may launch at ``N = 1024``
  where the original cannot.  A launch failure is raised as ``RuntimeError`` by
  :func:`baselines._cuda.launch`, never swallowed.
* One block per pair: with a small batch most SMs idle; each diagonal costs a block barrier and
  a round trip of ``R`` through global memory (L1/L2 in practice).
* CUDA tensors only (or CPU tensors under ``NUMBA_ENABLE_CUDASIM=1``); float32 / float64.
* ``bandwidth`` uses this repository's band (:mod:`sdtw.band`); the original tests
  ``|i - j| > bandwidth``, the same when ``N == M``.

Where it is numerically unsound
-------------------------------
The exponent ``(R[i', j'] - R[i, j] - C[i', j']) / gamma`` is a difference of numbers of size
``|R|``, each rounded to the input dtype.  In exact arithmetic it is ``<= 0``; in float32 it
carries an absolute error of about ``6e-8 |R| / gamma``, so once ``|R| / gamma`` reaches ~1e6
the weights are wrong by O(1) factors, and for larger ratios a spuriously positive exponent
overflows ``exp`` to ``inf`` and ``E`` becomes ``inf``/``nan``.  This is the same cancellation
as the paper's log-space backward (log space does not cure it, it only avoids the overflow).
Under the simulator (float32 storage; N = M = 32, D = 64, ``randn``): relative gradient error
7e-5 at gamma 1, 5e-3 at 0.1, 1e-2 at 0.01, 0.12 at 0.001; ``nan`` at magnitudes ~1e3 with
gamma 0.01.  In float64 the kernels are accurate.
"""

from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from baselines import _cuda
from baselines._common import check_inputs, sqeuclidean, sqeuclidean_broadcast
from baselines._cuda import cuda
from sdtw.band import band_offsets

__all__ = ["MAX_LENGTH", "launches", "loss"]

MAX_LENGTH = 1024
"""Largest ``max(N, M)`` accepted: one thread per row, at most 1024 threads per block."""

_DISTANCES = {"broadcast": sqeuclidean_broadcast, "bmm": sqeuclidean}


def launches(N: int, M: int) -> dict[str, int]:
    """Numba kernel launches of one forward and of one backward pass (any B, D, band)."""
    return {"forward": 1, "backward": 1}


# --------------------------------------------------------------------------------------------
# Kernels.  Block b handles pair b; thread t handles row i = t + 1 (1-based, as in R).  At step
# p (0-based anti-diagonal i + j = p + 2) thread t owns cell (i, j = p - t + 1) if it lies in
# [1, N] x [1, M] and in the band (-lo <= j - i <= hi); the barrier after each step publishes
# the diagonal to the next one.  Every thread reaches every barrier (no early return).
# --------------------------------------------------------------------------------------------

if cuda is not None:

    @cuda.jit(device=True)
    def _softmin3(a, b, c, gamma):
        # m - gamma * log sum_k exp(-(a_k - m) / gamma), m = min(a, b, c): exponents <= 0.
        m = min(a, b, c)
        if m == math.inf:
            return m
        s = math.exp((m - a) / gamma) + math.exp((m - b) / gamma) + math.exp((m - c) / gamma)
        return m - gamma * math.log(s)

    @cuda.jit(device=True)
    def _successor_term(R, D, E, b, i, j, r, gamma):
        # E[i, j] * exp((R[i, j] - r - D[i, j]) / gamma) for a successor (i, j) of a cell with
        # R = r.  A successor outside the band (R = +inf, E = 0) never chose that cell: 0, not
        # 0 * inf = nan.
        R_s = R[b, i, j]
        if R_s == math.inf:
            return E.dtype.type(0)
        return E[b, i, j] * math.exp((R_s - r - D[b, i, j]) / gamma)

    # Forward: R[i, j] = C[i-1, j-1] + softmin(R[i-1, j-1], R[i-1, j], R[i, j-1]).
    @cuda.jit
    def _forward_kernel(cost, R, gamma, lo, hi):
        b = cuda.blockIdx.x
        t = cuda.threadIdx.x
        N, M = cost.shape[1], cost.shape[2]
        i = t + 1
        for p in range(N + M - 1):
            j = p - t + 1
            if i <= N and j >= 1 and j <= M and j - i >= -lo and j - i <= hi:
                R[b, i, j] = cost[b, i - 1, j - 1] + _softmin3(
                    R[b, i - 1, j - 1], R[b, i - 1, j], R[b, i, j - 1], gamma
                )
            cuda.syncthreads()

    # Backward (Algorithm 2), diagonals from p = N + M - 2 down to 0, on the padded cost D,
    # the boundary-patched clone of R, and E with E[N + 1, M + 1] = 1.
    @cuda.jit
    def _backward_kernel(D, R, E, gamma, lo, hi):
        b = cuda.blockIdx.x
        t = cuda.threadIdx.x
        N, M = D.shape[1] - 2, D.shape[2] - 2
        i = t + 1
        for p in range(N + M - 2, -1, -1):
            j = p - t + 1
            if i <= N and j >= 1 and j <= M and j - i >= -lo and j - i <= hi:
                r = R[b, i, j]
                E[b, i, j] = (
                    _successor_term(R, D, E, b, i + 1, j, r, gamma)
                    + _successor_term(R, D, E, b, i, j + 1, r, gamma)
                    + _successor_term(R, D, E, b, i + 1, j + 1, r, gamma)
                )
            cuda.syncthreads()


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------


def _forward(cost: torch.Tensor, gamma: float, bandwidth: int | None) -> torch.Tensor:
    B, N, M = cost.shape
    R = torch.full((B, N + 2, M + 2), math.inf, dtype=cost.dtype, device=cost.device)
    R[:, 0, 0] = 0
    lo, hi = band_offsets(N, M, bandwidth)
    with _cuda.on_device(cost) as stream:
        args = (_cuda.device_array(cost), _cuda.device_array(R))
        _cuda.launch(
            _forward_kernel, (B,), max(N, M), stream, *args, _cuda.scalar(gamma, R.dtype), lo, hi
        )
    return R


def _backward(
    cost: torch.Tensor, R: torch.Tensor, gamma: float, bandwidth: int | None
) -> torch.Tensor:
    """``E`` (B, N, M) from the saved forward table ``R`` (left untouched)."""
    B, N, M = cost.shape
    D = torch.zeros_like(R)
    D[:, 1 : N + 1, 1 : M + 1] = cost
    R = R.clone()
    R[:, :, M + 1] = -math.inf
    R[:, N + 1, :] = -math.inf
    R[:, N + 1, M + 1] = R[:, N, M]
    E = torch.zeros_like(R)
    E[:, N + 1, M + 1] = 1
    lo, hi = band_offsets(N, M, bandwidth)
    with _cuda.on_device(cost) as stream:
        args = tuple(_cuda.device_array(t) for t in (D, R, E))
        _cuda.launch(
            _backward_kernel, (B,), max(N, M), stream, *args, _cuda.scalar(gamma, R.dtype), lo, hi
        )
    return E[:, 1 : N + 1, 1 : M + 1]


class _MaghoumiSoftDTW(torch.autograd.Function):
    """cost (B, N, M) -> loss (B,); gradient ``E * grad_out``."""

    @staticmethod
    def forward(ctx, cost, gamma, bandwidth):
        N, M = cost.shape[1:]
        R = _forward(cost, gamma, bandwidth)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(cost, R)
            ctx.gamma, ctx.bandwidth = gamma, bandwidth
        return R[:, N, M].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        cost, R = ctx.saved_tensors
        E = _backward(cost, R, ctx.gamma, ctx.bandwidth)
        return E * grad_out[:, None, None], None, None


def loss(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    gamma: float = 1.0,
    dist: str = "broadcast",
    bandwidth: int | None = None,
) -> torch.Tensor:
    """Soft-DTW with squared-Euclidean cost, Maghoumi's design.

    Parameters
    ----------
    x : Tensor, shape (B, N, D)
    y : Tensor, shape (B, M, D)
        CUDA tensors (CPU under the simulator), float32 or float64, ``max(N, M) <= 1024``;
        gradients flow to both.
    gamma : float
        Smoothing, > 0.
    dist : {"broadcast", "bmm"}
        How torch computes the cost: Maghoumi's (B, N, M, D) broadcast, or a batched matrix
        product.
    bandwidth : int or None
        Sakoe-Chiba radius (see :mod:`sdtw.band`); ``None``: no band.

    Returns
    -------
    Tensor, shape (B,)
        Soft-DTW losses, in the input dtype.

    Raises
    ------
    ValueError
        If ``max(N, M) > 1024`` (:data:`MAX_LENGTH`), the design's one-block-per-pair limit.
    RuntimeError
        If a kernel fails to launch (e.g. too many registers for ``max(N, M)`` threads).
    """
    check_inputs("maghoumi", x, y, gamma)
    if dist not in _DISTANCES:
        raise ValueError(f"maghoumi: dist must be one of {sorted(_DISTANCES)}, got {dist!r}")
    N, M = x.shape[1], y.shape[1]
    if max(N, M) > MAX_LENGTH:
        raise ValueError(
            f"maghoumi: max(N, M) = {max(N, M)} exceeds this design's limit of {MAX_LENGTH} "
            f"(one thread block per pair, one thread per row; x {tuple(x.shape)}, "
            f"y {tuple(y.shape)})"
        )
    _cuda.require("maghoumi", x, y)
    cost = _DISTANCES[dist](x, y).contiguous()
    return _MaghoumiSoftDTW.apply(cost, float(gamma), bandwidth)
