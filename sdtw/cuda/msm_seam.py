"""Soft-MSM on soft-DTW's band kernels: the float32 step with gradients.

Soft-MSM's recurrence is a soft minimum of three candidates, each a neighbour's ``R`` plus the
cost of the edge from it (``sdtw.msm_reference``)::

    R[i, j] = softmin(R[i-1, j-1] + (x_i - y_j)^2,  R[i-1, j] + C(x_i, x_{i-1}, y_j),
                      R[i, j-1] + C(y_j, y_{j-1}, x_i))

so once every cell's three costs are known the forward is soft-DTW's wavefront with three
costs a cell instead of one, and the backward, the expected alignment ``E`` from the stored
soft-min weights, is soft-DTW's unchanged (:mod:`sdtw.cuda.kernels.backward`: it never sees a
cost).  A step here is four launches:

1. the costs pass (:func:`_costs`): every cell's match cost ``(x_i - y_j)^2`` in float64 as
   the two 32-bit words of its bits in ``P``'s planes (low word in plane 0, high in plane 1,
   where soft-DTW's park kernel puts its distances) and its up and left transition costs
   (float32, from the float32 transcendentals of :func:`sdtw.cuda.msm_cells._transition_fast`) in
   ``Q`` (T, 2, N, M);
2. soft-DTW's forward of mode ``hilo`` with the ``"soft-msm"`` recurrence
   (:data:`sdtw.cuda.kernels.recurrence.SOFT_MSM`): bands of 32 rows a warp, hand-overs by
   shuffles, a mover warp staging the three costs and writing the weights ``(p_diag, p_up)``
   over ``P``;
3. soft-DTW's backward: ``E`` over ``P``'s plane 1, after ``p_up`` is copied to ``Q``'s plane 0
   (the gradients need all three weights);
4. the gradients pass (:func:`_gradients`): each edge's occupancy ``E p`` times its cost's
   partial derivatives; a warp per tile of 32 x 32 cells, a lane a column, the rows in turn
   (a row's cells one line: a lane a row would ask 32 lines a load); parts that torch sums
   (no atomics: the same bits on every run).

Tasks are (pair, channel): channels are independent and their values summed.  The path takes
float32 inputs with gradients whose pairs have the table's lengths and one band, or per-pair
lengths given on the host with a band of one radius (the kernels' variable-length twins);
float64 inputs, steps without gradients and lengths made on the device keep
:mod:`sdtw.cuda.msm`'s kernels.  ``P`` and
``Q`` take 16 bytes a cell.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import cuda, float64

from sdtw.cuda import _launch, policy
from sdtw.cuda import kernels as K
from sdtw.cuda._private import flat
from sdtw.cuda.kernels.jit import SIMULATED, kernel
from sdtw.cuda.kernels.primitives import hi_word, lo_word, narrow, warp_sum
from sdtw.cuda.msm_cells import LOG2E, _edge_gradients, _transition_fast

__all__ = ["msm_seam"]

WARP = 32


@kernel
def _costs(xs, ys, c, gamma, P, Q):
    """Every cell's costs: ``xs`` (T, N), ``ys`` (T, M) float64; ``P``, ``Q`` (T, 2, N, M)
    float32, flat (see the module docstring).  A block a row (of a task; rows ``gridDim``
    apart where the blocks are fewer), its threads along the row (coalesced)."""
    T, N = xs.shape
    M = ys.shape[1]
    NM = N * M
    ig2 = LOG2E / gamma
    zero = narrow(0.0)
    for row in range(cuda.blockIdx.x, T * N, cuda.gridDim.x):
        t = row // N
        i = row - t * N
        xi = xs[t, i]
        xp = xs[t, max(i - 1, 0)]
        base = 2 * t * NM + i * M
        for j in range(cuda.threadIdx.x, M, cuda.blockDim.x):
            yj = ys[t, j]
            d = xi - yj
            dist = d * d
            P[base + j] = lo_word(dist)
            P[base + NM + j] = hi_word(dist)
            # (no up edge in row 0, no left edge in column 0: their weights are 0; any cost)
            cu = zero
            if i > 0:
                cu = narrow(_transition_fast(xi, xp, yj, c, gamma, ig2)[0])
            cl = zero
            if j > 0:
                cl = narrow(_transition_fast(yj, ys[t, j - 1], xi, c, gamma, ig2)[0])
            Q[base + j] = cu
            Q[base + NM + j] = cl


@kernel
def _gradients(xs, ys, c, gamma, P, Q, gxa, gxb, gya, gyb, ns, ms):
    """The gradients' parts from ``E`` (``P``'s plane 1) and the weights ``p_diag`` (``P``'s
    plane 0) and ``p_up`` (``Q``'s plane 0): a warp per tile of 32 rows (a band) and 32
    columns (a chunk), tiles ``gridDim`` apart; lane ``l`` on column ``32 chunk + l``, the
    tile's rows in turn, so that a row's 32 cells load as one line.  Into ``gxa[t, chunk, i]``
    what x_i gets from the chunk's cells of row i, into ``gxb[t, chunk, i]`` what x_{i-1} gets
    from their up edges (a row's sum: a butterfly of shuffles); into ``gya[t, band, j]`` and
    ``gyb[t, band, j]`` the same for y_j and y_{j-1} (a column's sum over the band: the lane's
    own).  ``ns``, ``ms`` (T,): each task's lengths (nothing past them is read)."""
    lane = cuda.threadIdx.x
    T, N = xs.shape
    M = ys.shape[1]
    nb = (N + WARP - 1) // WARP
    chunks = (M + WARP - 1) // WARP
    NM = N * M
    ig2 = LOG2E / gamma
    xch = cuda.shared.array(WARP, float64)  # (the simulator's shuffles)
    for tile in range(cuda.blockIdx.x, T * nb * chunks, cuda.gridDim.x):
        ch = tile % chunks
        band = (tile // chunks) % nb
        t = tile // (chunks * nb)
        n = ns[t]
        m = ms[t]
        r0 = band * WARP
        j = ch * WARP + lane
        if r0 >= n or ch * WARP >= m:  # (the whole warp's: past the pair's lengths)
            continue
        r1 = min(r0 + WARP, n)
        col = j < m
        jj = min(j, m - 1)
        yj = ys[t, jj]
        yp = ys[t, max(jj - 1, 0)]
        base = 2 * t * NM + jj
        # A row's values load a row before (the last row's twice), and every lane computes
        # every row (selects, no branch): the loads' latency is not in each row's step.
        k = base + r0 * M
        en = P[k + NM]
        pdn = P[k]
        pun = Q[k]
        xp = xs[t, max(r0 - 1, 0)]
        gx_own = 0.0
        gx_up = 0.0
        gy_own = 0.0
        gy_up = 0.0
        for i in range(r0, r1):
            e = float64(en)
            pd = float64(pdn)
            pu = float64(pun)
            k = base + min(i + 1, r1 - 1) * M
            en = P[k + NM]
            pdn = P[k]
            pun = Q[k]
            xi = xs[t, i]
            o_m = e * pd
            o_u = e * pu
            o_l = e * (1.0 - pd - pu)
            to_x, to_xp, to_y, to_yp = _edge_gradients(o_m, o_u, o_l, xi, xp, yj, yp, c, gamma, ig2)
            ok = col and e != 0.0
            gy_own += to_y if ok else 0.0
            gy_up += to_yp if ok else 0.0
            sx = warp_sum(to_x if ok else 0.0, xch)
            sxp = warp_sum(to_xp if ok else 0.0, xch)
            mine = lane == i - r0
            gx_own = sx if mine else gx_own
            gx_up = sxp if mine else gx_up
            xp = xi
        if r0 + lane < r1:
            gxa[t, ch, r0 + lane] = gx_own
            gxb[t, ch, r0 + lane] = gx_up
        if col:
            gya[t, band, j] = gy_own
            gyb[t, band, j] = gy_up


def msm_seam(
    a: torch.Tensor,
    b: torch.Tensor,
    c: float,
    gamma: float,
    lo: int,
    hi: int,
    lengths: tuple | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Values (B,) and gradients wrt ``a`` (B, N, D) and ``b`` (B, M, D) (float64, upstream
    gradient 1; zero past the lengths) of Soft-MSM with stiffness ``c`` and smoothing
    ``gamma``, every pair's table N x M and the band ``-lo <= j - i <= hi``, or with
    ``lengths`` (int64 NumPy arrays ``(ns, ms)`` (B,)) each pair's own table and the band of
    radius ``lo`` (-1: none) following its lengths (:func:`sdtw.band.pair_offsets`); float32
    transcendentals and weights, as the float32 inputs ``a``, ``b`` (given as float64 values)
    ask."""
    B, N, D = a.shape
    M = b.shape[1]
    T = B * D
    dev = a.device
    if lengths is None:
        lens = None
        ns = _launch._constant((T,), N, torch.int64, dev)
        ms = _launch._constant((T,), M, torch.int64, dev)
    else:  # (each task's: a pair's, D times; x's, then y's)
        per_task = np.repeat(np.stack(lengths).astype(np.int64), D, axis=1).reshape(-1)
        lens = torch.from_numpy(per_task).to(dev, non_blocking=True)
        ns, ms = lens[:T], lens[T:]
    xs = a.permute(0, 2, 1).reshape(T, N).contiguous()  # (task b D + d: row t)
    ys = b.permute(0, 2, 1).reshape(T, M).contiguous()
    P = _launch._weights(T, N, M, torch.float32, dev)  # (the seeds after it)
    Q = torch.empty((T, 2, N, M), dtype=torch.float32, device=dev)
    threads = 128 if M > 64 else 32
    rows = T if SIMULATED else T * N  # (the simulator's blocks cost host time each)
    _launch.launch(_costs, rows, threads, dev, xs, ys, float(c), float(gamma), flat(P), flat(Q))
    nb = -(-N // K.TB)
    fwd_hand, bwd_hand = _launch._boundary(T, nb, M, dev, 2, lens)
    out = torch.empty(T, dtype=torch.float64, device=dev)
    mover = policy.forward_mover(K.HILO, SIMULATED)
    none = _launch._placeholder((2,), torch.float32, dev)  # (the weights go through X)
    key = (K.ForwardSpec, K.HILO, True, mover, "soft-msm") + ((True,) if lens is not None else ())
    _launch._launcher(*key)(
        T * nb, K.threads(mover), _launch._stream(dev), flat(P), flat(Q), N, M, 0,
        float(gamma), int(lo), int(hi), none, fwd_hand, out, True,
    )  # fmt: skip
    _launch.launch_counts["forward"] += 1
    _launch._finite_values(fwd_hand, T, N, M, lens, _launch._seeds(P))
    Q[:, 0].copy_(P[:, 1])  # p_up, before E goes over it
    _launch.backward(P, None, Gb=bwd_hand, lengths=lens)
    chunks = -(-M // WARP)
    bands = -(-N // WARP)
    parts = torch.zeros(2 * T * (chunks * N + bands * M), dtype=torch.float64, device=dev)
    gx_parts, gy_parts = parts.split([2 * T * chunks * N, 2 * T * bands * M])
    gxa, gxb = gx_parts.view(2, T, chunks, N)
    gya, gyb = gy_parts.view(2, T, bands, M)
    tiles = T if SIMULATED else T * bands * chunks  # (the simulator's blocks cost host time each)
    _launch.launch(_gradients, tiles, WARP, dev, xs, ys, float(c), float(gamma), flat(P),
                   flat(Q), gxa, gxb, gya, gyb, ns, ms)  # fmt: skip
    gx = gxa.sum(1)
    gx[:, :-1] += gxb.sum(1)[:, 1:]  # (x_{i-1}'s part from row i's up edges)
    gy = gya.sum(1)
    gy[:, :-1] += gyb.sum(1)[:, 1:]
    values = out.view(B, D).sum(1) if D > 1 else out
    gx = gx.view(B, D, N).transpose(1, 2).contiguous()
    return values, gx, gy.view(B, D, M).transpose(1, 2).contiguous()
