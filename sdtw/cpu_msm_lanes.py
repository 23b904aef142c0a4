"""Soft-MSM on the CPU with tasks as SIMD lanes: the forward and backward of the full mode.

A task is one channel of one pair (channels are independent DPs, their values summed).  A
thread takes a group of ``L`` tasks and sweeps the union of their tables row by row, every
array with the lane as its last, contiguous axis, every cell a branch-free loop over the lanes
with no libm call (:mod:`sdtw._simd`), as :mod:`sdtw.cpu_lanes` does for soft-DTW: LLVM turns
each cell into vector code, and the row kernels take two vectors of lanes an iteration
(:func:`sdtw._jit.interleaved`), so two cells' dependency chains overlap.  The tables are
padded as in :mod:`sdtw.cpu_lanes` (``R[i + 1, j + 1]`` is cell ``(i, j)``, ``R[0, 0] = 0``,
the rest of row and column 0 ``+inf``): the first cell, the first row and the first column are
then the general cell with the missing candidates at ``+inf``.

Forward, lane ``g`` of cell ``(i, j)`` (:mod:`sdtw.msm_reference` for the definition):

.. math::

    R_{ij} = \\operatorname{softmin}_\\gamma\\big(R_{i-1,j-1} + (x_i - y_j)^2,\\;
             R_{i-1,j} + C(x_i, x_{i-1}, y_j),\\; R_{i,j-1} + C(y_j, y_{j-1}, x_i)\\big),

    C(v, p, o) = c + (1 - s(u))\\, \\operatorname{softmin}_\\gamma((v - p)^2, (v - o)^2),\\quad
    u = (v - p)(v - o),\\quad s(u) = \\tfrac12 (1 - u / \\sqrt{u^2 + \\epsilon}).

Where every step's ``exp(-(z_t - z_{t-1})^2 / g)`` of a group is above ``1e-140`` and every
sample at most ``1e60`` in magnitude (the usual case) a cell's two transitions share one
exponential, ``exp(-(x_i - y_j)^2 / g)``, with the steps' (computed once per series):
``softmin_g(a, b) = -g log(e^{-a/g} + e^{-b/g})``, and one division gives the reciprocals of
both sums and both gates' roots (the bounds keep every product of them a normal number).
Elsewhere (small gamma, steps large against ``sqrt(gamma)``, huge values) each transition's
soft minimum is taken around its minimum (an ``exp`` and a ``log`` each) and each reciprocal
is its own division.

Backward: each cell, its ``E`` (d value / d R) final when reached in reverse row-major order,
sends ``E w_k`` along each incoming edge ``k`` (``w`` the softmax of the edges' candidates, the
minimum's exactly 1 before normalising) and adds ``E w_k`` times the edge cost's partial
derivatives to the gradients of the samples it reads.  A row in three passes: the cells'
weights and gradient units (no chain between cells), E along the left edges (the chain: one
multiply-add per cell), then the diagonal and up edges and the gradients.  Per cell: three
``exp`` and three ``log`` forward, three and two backward (soft-DTW's lanes: two and one;
docs/measures.md has the times).
"""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from sdtw._jit import interleaved, parallel_and_serial
from sdtw._simd import LANE_FLAGS, exp_neg, log_pos, order3, softmin3
from sdtw.cpu import _run
from sdtw.cpu_lanes import spans, start_row
from sdtw.msm_reference import GATE_EPS

__all__ = ["MSM_LANES", "msm_lane_backward", "msm_lane_forward", "use_msm_lanes"]

#: Tasks per group (as soft-DTW's full mode: two groups at B D = 32 for the 2 cores).
MSM_LANES = 16

#: Below this many cells (tasks N M) one thread runs the kernels (a parallel launch costs more).
SERIAL_MAX_CELLS = 1 << 15

_INF = math.inf
# The shared-exponential form (msm_row_shared, msm_row_units) holds where every step's
# exp(-dz^2 / g) of a group is above _TINY and every sample is at most _BIG in magnitude: then
# each transition's sum e_a + e_b is in [1e-140, 2] and each gate's root sqrt(u^2 + eps) in
# [3e-5, 2e121], so the one division for their reciprocals, 1 / (sum_up sum_left root_up
# root_left), stays between normal numbers (>= 1e-289).  Elsewhere: the stable form.
_TINY = 1e-140
_BIG = 1e60
_block = njit(cache=True, nogil=True, **LANE_FLAGS)
_inline = njit(cache=True, nogil=True, inline="always", **LANE_FLAGS)


def _wide(fn):
    """:data:`_block` with two vectors of lanes an iteration (:func:`sdtw._jit.interleaved`):
    a cell's body is long and deep, and one vector of it leaves the core idle.  (The count is
    not in Numba's cache keys: change it here, where a change invalidates this module's.)"""
    return interleaved(_block(fn), 2)


@_inline
def _soft2(a: float, b: float, gamma: float, ig: float):
    """``softmin_g(a, b)`` around the minimum, and the weight of ``a`` (finite a, b >= 0).
    (log1p(e) = log(u) - ((u - 1) - e) / u, u = 1 + e: the rounding of u corrected.)"""
    first = a <= b
    m = a if first else b
    e = exp_neg(-(b - a if first else a - b) * ig)
    u = 1.0 + e
    S = m - gamma * (log_pos(u) - ((u - 1.0) - e) / u)
    return S, (1.0 / u if first else e / u)


@_inline
def transition(dp: float, do: float, c: float, gamma: float, ig: float) -> float:
    """``C(v, p, o)`` from ``dp = v - p``, ``do = v - o``."""
    S = _soft2(dp * dp, do * do, gamma, ig)[0]
    u = dp * do
    return c + 0.5 * (1.0 + u / math.sqrt(u * u + GATE_EPS)) * S


@_inline
def transition_grad(dp: float, do: float, c: float, gamma: float, ig: float):
    """``C(v, p, o)`` and its partial derivatives ``(dC/dv, dC/dp, dC/do)``:
    ``dC = (1 - s) dS - S s'(u) du``, ``dS = w_a da + w_b db``, ``s'(u) = -eps / 2 (u^2 +
    eps)^(-3/2)``, ``a = dp^2``, ``b = do^2``, ``du/dv = dp + do``, ``du/dp = -do``,
    ``du/do = -dp``."""
    S, wa = _soft2(dp * dp, do * do, gamma, ig)
    wb = 1.0 - wa
    u = dp * do
    inv_r = 1.0 / math.sqrt(u * u + GATE_EPS)
    keep = 0.5 * (1.0 + u * inv_r)
    k = S * (-0.5 * GATE_EPS * inv_r * inv_r * inv_r)
    d_v = keep * 2.0 * (wa * dp + wb * do) - k * (dp + do)
    d_p = -keep * 2.0 * wa * dp + k * do
    d_o = -keep * 2.0 * wb * do + k * dp
    return c + keep * S, d_v, d_p, d_o


@_block
def pack_tasks(X, D, lens, t0, k, zs, dz):
    """Task ``t0 + g``'s series (pair ``t // D``, channel ``t % D``) into ``zs[:, g]`` and its
    steps ``z_t - z_{t-1}`` into ``dz[:, g]`` (0 at ``t = 0`` and past the length; lanes
    ``g >= k`` repeat the group's last task)."""
    for g in range(zs.shape[1]):
        t = t0 + min(g, k - 1)
        x = X[t // D, :, t % D]
        for s in range(lens[g]):
            zs[s, g] = x[s]
        for s in range(1, lens[g]):
            dz[s, g] = zs[s, g] - zs[s - 1, g]


@_block
def step_exps(zs, dz, ig, ez):
    """``ez = exp(-dz^2 / g)``; returns whether every one is above ``_TINY`` and every
    sample ``zs`` at most ``_BIG`` in magnitude (the shared-exponential form's range)."""
    ok = True
    for s in range(dz.shape[0]):
        for g in range(dz.shape[1]):
            e = exp_neg(-dz[s, g] * dz[s, g] * ig)
            ez[s, g] = e
            ok &= (e > _TINY) & (abs(zs[s, g]) <= _BIG)
    return ok


@njit(cache=True, nogil=True, inline="always")
def task_tables(ns, ms, los, his, D, t0, k, L):
    """The per-lane ``n, m, lo, hi`` of the tasks ``t0 ..`` (a task's are its pair's)."""
    n, m = np.empty(L, np.int64), np.empty(L, np.int64)
    lo, hi = np.empty(L, np.int64), np.empty(L, np.int64)
    for g in range(L):
        b = (t0 + min(g, k - 1)) // D
        n[g], m[g], lo[g], hi[g] = ns[b], ms[b], los[b], his[b]
    return n, m, lo, hi


@_block
def task_group(X, Y, ns, ms, los, his, t0, L, ig):
    """Group ``t0 ..``'s task count ``k``, per-lane ``n, m, lo, hi`` (:func:`task_tables`),
    its series as lanes with their steps and the steps' exponentials (``xs, dx, ex`` (N, L),
    ``ys, dy, ey`` (M, L): :func:`pack_tasks`, :func:`step_exps`) and whether the shared-
    exponential form holds for it."""
    B, D = X.shape[0], X.shape[2]
    k = min(L, B * D - t0)
    n, m, lo, hi = task_tables(ns, ms, los, his, D, t0, k, L)
    N, M = n.max(), m.max()
    xs, dx = np.zeros((N, L)), np.zeros((N, L))
    ys, dy = np.zeros((M, L)), np.zeros((M, L))
    pack_tasks(X, D, n, t0, k, xs, dx)
    pack_tasks(Y, D, m, t0, k, ys, dy)
    ex, ey = np.empty((N, L)), np.empty((M, L))
    shared = step_exps(xs, dx, ig, ex) & step_exps(ys, dy, ig, ey)
    return k, n, m, lo, hi, xs, dx, ex, ys, dy, ey, shared


@_wide
def msm_row(xs, dx, ys, dy, i, prev, cur, j0, j1, a, b, c, gamma, ig):
    """Padded row ``cur`` (cells of row ``i``) from ``prev`` on columns ``j0 <= j < j1``:
    lane g's cell where ``a[g] <= j < b[g]``, +inf elsewhere."""
    L = cur.shape[1]
    for j in range(j0, j1):
        for g in range(L):
            diff = xs[i, g] - ys[j, g]
            cu = transition(dx[i, g], diff, c, gamma, ig)
            cl = transition(dy[j, g], -diff, c, gamma, ig)
            v = softmin3(prev[j, g] + diff * diff, prev[j + 1, g] + cu, cur[j, g] + cl, gamma, ig)
            cur[j + 1, g] = v if (j >= a[g]) & (j < b[g]) else _INF


@_wide
def msm_row_shared(xs, dx, ex, ys, dy, ey, i, prev, cur, j0, j1, a, b, c, gamma, ig):
    """:func:`msm_row` with the transitions from one exponential of the match cost per cell
    and the steps' (``ex``, ``ey``), within ``_TINY`` and ``_BIG``, and one division for the
    two gates."""
    L = cur.shape[1]
    for j in range(j0, j1):
        for g in range(L):
            diff = xs[i, g] - ys[j, g]
            match = diff * diff
            em = exp_neg(-match * ig)
            uu, ul = dx[i, g] * diff, -dy[j, g] * diff
            ru, rl = math.sqrt(uu * uu + GATE_EPS), math.sqrt(ul * ul + GATE_EPS)
            q = 1.0 / (ru * rl)
            keep_u, keep_l = 0.5 * (1.0 + uu * rl * q), 0.5 * (1.0 + ul * ru * q)
            cu = c - keep_u * gamma * log_pos(ex[i, g] + em)
            cl = c - keep_l * gamma * log_pos(ey[j, g] + em)
            v = softmin3(prev[j, g] + match, prev[j + 1, g] + cu, cur[j, g] + cl, gamma, ig)
            cur[j + 1, g] = v if (j >= a[g]) & (j < b[g]) else _INF


@_wide
def msm_row_units(xs, dx, ex, ys, dy, ey, i, R0, R1, j0, j1, c, gamma, ig, W):
    """The backward's first pass over row ``i`` (columns ``j0 <= j < j1``), with no chain
    between cells: each cell's normalised edge weights ``W[0:3]`` (diagonal, up, left; 0 where
    the cell is not reached) and what a unit of E there adds to the gradients of ``x_i``,
    ``x_{i-1}``, ``y_j``, ``y_{j-1}`` (``W[3:7]``), the transitions as in
    :func:`msm_row_shared`, one division for the four reciprocals of the two transitions
    (their sums and their gates' roots)."""
    L = R1.shape[1]
    w_d, w_u, w_l, to_xi, to_xp, to_yj, to_yp = W[0], W[1], W[2], W[3], W[4], W[5], W[6]
    for j in range(j0, j1):
        for g in range(L):
            diff = xs[i, g] - ys[j, g]
            match = diff * diff
            em = exp_neg(-match * ig)
            dxi, dyj, exi, eyj = dx[i, g], dy[j, g], ex[i, g], ey[j, g]
            tu, tl = exi + em, eyj + em
            uu, ul = dxi * diff, -dyj * diff
            ru, rl = math.sqrt(uu * uu + GATE_EPS), math.sqrt(ul * ul + GATE_EPS)
            q = 1.0 / ((tu * tl) * (ru * rl))
            inv_tu, inv_tl = (tl * (ru * rl)) * q, (tu * (ru * rl)) * q
            inv_ru, inv_rl = (rl * (tu * tl)) * q, (ru * (tu * tl)) * q
            Su, Sl = -gamma * log_pos(tu), -gamma * log_pos(tl)
            keep_u, keep_l = 0.5 * (1.0 + uu * inv_ru), 0.5 * (1.0 + ul * inv_rl)
            ad = R0[j, g] + match
            au = R0[j + 1, g] + (c + keep_u * Su)
            al = R1[j, g] + (c + keep_l * Sl)
            m, mid, top = order3(ad, au, al)
            w_mid = exp_neg((m - mid) * ig)
            w_top = exp_neg((m - top) * ig)
            wd = 1.0 if ad == m else (w_mid if ad == mid else w_top)
            wu = 1.0 if au == m else (w_mid if au == mid else w_top)
            wl = 1.0 if al == m else (w_mid if al == mid else w_top)
            inv_w = 0.0 if R1[j + 1, g] == _INF else 1.0 / (wd + wu + wl)
            pd, pu, pl = wd * inv_w, wu * inv_w, wl * inv_w
            w_d[j, g], w_u[j, g], w_l[j, g] = pd, pu, pl
            # the transitions' partial derivatives (transition_grad), times their edge's weight
            wa_u, wa_l = exi * inv_tu, eyj * inv_tl
            k_u = Su * (-0.5 * GATE_EPS * inv_ru * inv_ru * inv_ru)
            k_l = Sl * (-0.5 * GATE_EPS * inv_rl * inv_rl * inv_rl)
            hu, hl = pu * keep_u * 2.0, pl * keep_l * 2.0
            ku, kl = pu * k_u, pl * k_l
            do_l = -diff
            dd = pd * 2.0 * diff
            # up: v = x_i, p = x_{i-1}, o = y_j; left: v = y_j, p = y_{j-1}, o = x_i
            u_v = hu * (wa_u * dxi + (1.0 - wa_u) * diff) - ku * (dxi + diff)
            u_p = -hu * wa_u * dxi + ku * diff
            u_o = -hu * (1.0 - wa_u) * diff + ku * dxi
            l_v = hl * (wa_l * dyj + (1.0 - wa_l) * do_l) - kl * (dyj + do_l)
            l_p = -hl * wa_l * dyj + kl * do_l
            l_o = -hl * (1.0 - wa_l) * do_l + kl * dyj
            to_xi[j, g] = dd + u_v + l_o
            to_xp[j, g] = u_p
            to_yj[j, g] = u_o - dd + l_v
            to_yp[j, g] = l_p


@_block
def msm_chain(E1, w_l, j0, j1):
    """The backward's second pass: E along row ``i``'s left edges, right to left (``E1``
    padded, ``E1[j + 1]`` cell j)."""
    L = E1.shape[1]
    for j in range(j1 - 1, j0 - 1, -1):
        for g in range(L):
            E1[j, g] += E1[j + 1, g] * w_l[j, g]


@_block
def msm_pushes(E0, E1, W, j0, j1, gx, gy, occ):
    """The third pass: E (final) along the row's diagonal and up edges to ``E0`` and times the
    units to the gradients (``gx`` (8, L): this row's ``x_i`` in rows 0-3, ``x_{i-1}`` in
    4-7, summed by the caller; ``gy`` padded).  (Each loop writes an element once and the
    x sums go to four rows in turn: no store is read back by the next cell, which a vector
    store's forwarding would hold up.)"""
    L = E1.shape[1]
    w_d, w_u, to_xi, to_xp, to_yj, to_yp = W[0], W[1], W[3], W[4], W[5], W[6]
    for j in range(j0, j1):
        for g in range(L):
            e = E1[j + 1, g]
            E0[j + 1, g] += e * w_u[j, g]
            gy[j + 1, g] += e * to_yj[j, g]
            gx[j & 3, g] += e * to_xi[j, g]
            gx[4 + (j & 3), g] += e * to_xp[j, g]
    for j in range(j0, j1):
        for g in range(L):
            e = E1[j + 1, g]
            d = e * w_d[j, g]
            occ[j, g] = d
            E0[j, g] += d
            gy[j, g] += e * to_yp[j, g]


@_wide
def msm_push_row(xs, dx, ys, dy, i, R0, R1, E0, E1, j0, j1, c, gamma, ig, gx, gy, occ):
    """Row ``i`` of the backward, columns ``j1 - 1`` down to ``j0``: ``R0``, ``R1`` the padded
    R rows ``i``, ``i + 1``; ``E1`` (final on entry at each cell) and ``E0`` the padded E rows
    of cells ``i`` and ``i - 1``.  ``gx`` (2, L): this row's shares of ``x_i`` and ``x_{i-1}``;
    ``gy`` (M + 1, L): ``gy[j + 1]`` is ``y_j``'s (``gy[0]`` a sink)."""
    L = E1.shape[1]
    for j in range(j1 - 1, j0 - 1, -1):
        for g in range(L):
            e = E1[j + 1, g]
            diff = xs[i, g] - ys[j, g]
            cu, u_v, u_p, u_o = transition_grad(dx[i, g], diff, c, gamma, ig)
            cl, l_v, l_p, l_o = transition_grad(dy[j, g], -diff, c, gamma, ig)
            ad, au, al = R0[j, g] + diff * diff, R0[j + 1, g] + cu, R1[j, g] + cl
            m, mid, top = order3(ad, au, al)
            w_mid = exp_neg((m - mid) * ig)
            w_top = exp_neg((m - top) * ig)
            wd = 1.0 if ad == m else (w_mid if ad == mid else w_top)
            wu = 1.0 if au == m else (w_mid if au == mid else w_top)
            wl = 1.0 if al == m else (w_mid if al == mid else w_top)
            live = (e != 0.0) & (R1[j + 1, g] != _INF)
            scale = e / (wd + wu + wl) if live else 0.0
            pd, pu, pl = scale * wd, scale * wu, scale * wl
            occ[j, g] = pd
            E0[j, g] += pd
            E0[j + 1, g] += pu
            E1[j, g] += pl
            dd = 2.0 * diff
            gx[0, g] += pd * dd + pu * u_v + pl * l_o
            gx[1, g] += pu * u_p
            gy[j + 1, g] += pu * u_o - pd * dd + pl * l_v
            gy[j, g] += pl * l_p


def _forward_kernel(X, Y, c, gamma, ns, ms, los, his, R, out):
    """Group q's padded tables into ``R[q]`` (N + 1, M + 1, L), task values into ``out``; an
    ``R`` of two rows per group (forward only) holds the last two rows, padded row ``r`` at
    ``r % 2``."""
    for q in prange(R.shape[0]):
        _forward_group(X, Y, c, gamma, ns, ms, los, his, R, out, np.int64(q))


@_block
def _forward_group(X, Y, c, gamma, ns, ms, los, his, R, out, q):
    """:func:`_forward_kernel`'s iteration ``q`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    L = R.shape[3]
    ig = 1.0 / gamma
    rolling = R.shape[1] == 2
    t0 = q * L
    k, n, m, lo, hi, xs, dx, ex, ys, dy, ey, shared = task_group(X, Y, ns, ms, los, his, t0,
                                                                 L, ig)  # fmt: skip
    N, M, lo_all, hi_all = n.max(), m.max(), lo.max(), hi.max()
    Rq = R[q]
    Rq[0, :, :] = math.inf
    Rq[0, 0, :] = 0.0
    Rq[N + 1 :, :, :] = math.inf  # (full tables: the rows past the group's)
    a, b = np.empty(L, np.int64), np.empty(L, np.int64)
    for i in range(N):
        # (rows by index, not by swapping names: see _backward_kernel)
        r0, r1 = (i % 2, (i + 1) % 2) if rolling else (i, i + 1)
        j0, j1 = max(0, i - lo_all), min(M - 1, i + hi_all) + 1
        Rq[r1, : j0 + 1, :] = math.inf
        Rq[r1, j1 + 1 :, :] = math.inf
        spans(i, n, m, lo, hi, a, b)
        if shared:
            msm_row_shared(xs, dx, ex, ys, dy, ey, i, Rq[r0], Rq[r1], j0, j1, a, b, c,
                           gamma, ig)  # fmt: skip
        else:
            msm_row(xs, dx, ys, dy, i, Rq[r0], Rq[r1], j0, j1, a, b, c, gamma, ig)
        for g in range(k):
            if n[g] == i + 1:
                out[t0 + g] = Rq[r1, m[g], g]


def _backward_kernel(X, Y, c, gamma, ns, ms, los, his, R, gout, GX, GY, A):
    """``GX``, ``GY`` (zeroed) += the gradients of ``gout[b] * value[b]`` wrt x, y; if ``A``
    (tasks, N, M, zeroed) is not empty, each task's match occupancies into it."""
    for q in prange(R.shape[0]):
        _backward_group(X, Y, c, gamma, ns, ms, los, his, R, gout, GX, GY, A, np.int64(q))


@_block
def _backward_group(X, Y, c, gamma, ns, ms, los, his, R, gout, GX, GY, A, q):
    """:func:`_backward_kernel`'s iteration ``q`` (the parallel and the serial kernel call it: one
    compile, and a short one of the parallel loop)."""
    L = R.shape[3]
    D = X.shape[2]
    ig = 1.0 / gamma
    t0 = q * L
    k, n, m, lo, hi, xs, dx, ex, ys, dy, ey, shared = task_group(X, Y, ns, ms, los, his, t0,
                                                                 L, ig)  # fmt: skip
    N, M, lo_all, hi_all = n.max(), m.max(), lo.max(), hi.max()
    gxs, gys, gx = np.zeros((N, L)), np.zeros((M + 1, L)), np.zeros((8, L))
    # E's two rows by index (see sdtw.cpu_lanes: a swap of names inside prange compiles
    # for minutes)
    E = np.zeros((2, M + 1, L))
    W = np.empty((7, M, L))
    occ = np.zeros((M, L))
    cur = 0
    Rq = R[q]
    for i in range(N - 1, -1, -1):
        E1 = E[cur]
        j0, j1 = start_row(E1, i, n, m, gout, t0, k, D, lo_all, hi_all, M)
        gx[:, :] = 0.0
        if shared:
            msm_row_units(xs, dx, ex, ys, dy, ey, i, Rq[i], Rq[i + 1], j0, j1, c, gamma, ig,
                          W)  # fmt: skip
            msm_chain(E1, W[2], j0, j1)
            msm_pushes(E[1 - cur], E1, W, j0, j1, gx, gys, occ)
        else:
            msm_push_row(xs, dx, ys, dy, i, Rq[i], Rq[i + 1], E[1 - cur], E1, j0, j1, c,
                         gamma, ig, gx, gys, occ)  # fmt: skip
        if A.shape[0] > 0:
            for g in range(k):
                for j in range(j0, min(j1, m[g])):
                    A[t0 + g, i, j] = occ[j, g]
        if shared:
            gx[0] += gx[2] + (gx[1] + gx[3])
            gx[1] = gx[4] + gx[6] + (gx[5] + gx[7])
        gxs[i, :] += gx[0]
        if i > 0:
            gxs[i - 1, :] += gx[1]
        cur = 1 - cur
        E[1 - cur, :, :] = 0.0
    for g in range(k):
        t = t0 + g
        GX[t // D, : n[g], t % D] = gxs[: n[g], g]
        GY[t // D, : m[g], t % D] = gys[1 : m[g] + 1, g]


_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel, **LANE_FLAGS)
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel, **LANE_FLAGS)


def use_msm_lanes(tasks: int) -> bool:
    """Whether Soft-MSM runs as lanes: at least half a group of tasks (pair-channels) per
    thread.  A part-full group still beats a task per thread (17 tasks took 1.9x longer that
    way than 32 as lanes); R holds a table per lane, up to 15 more than tasks."""
    return tasks >= MSM_LANES // 2 * min(2, get_num_threads())


def _serial(groups: int, tasks: int, N: int, M: int) -> bool:
    return groups == 1 or tasks * N * M <= SERIAL_MAX_CELLS


def msm_lane_forward(
    x: np.ndarray,
    y: np.ndarray,
    c: float,
    gamma: float,
    tables: tuple,
    lanes: int = MSM_LANES,
    keep: bool = True,
):
    """Task values (B D,) of x (B, N, D), y (B, M, D) (float64, C-contiguous) over each pair's
    ``tables`` = (n, m, lo, hi) (int64 (B,) each), and the padded tables R
    (groups, N + 1, M + 1, lanes) for :func:`msm_lane_backward`; ``keep=False`` (values
    only): two rows per group, ``8 * 2 (M + 1)`` bytes a lane, and R is None."""
    N, M, T, L = x.shape[1], y.shape[1], x.shape[0] * x.shape[2], lanes
    R = np.empty((-(-T // L), N + 1 if keep else 2, M + 1, L))
    out = np.empty(T)
    serial = _serial(R.shape[0], T, N, M)
    kernel = _forward_serial if serial else _forward_parallel
    _run(kernel, serial, x, y, float(c), float(gamma), *tables, R, out)
    return out, (R if keep else None)


def msm_lane_backward(x, y, c: float, gamma: float, tables: tuple, R, grad_out, match=False):
    """The gradients (B, N, D), (B, M, D) of ``sum_b grad_out[b] values[b]`` wrt x and y from
    :func:`msm_lane_forward`'s R (float64); with ``match``, also each task's match edges'
    occupancies (B, D, N, M) (the gradient wrt the match costs ``(x_i - y_j)^2``)."""
    B, N, D = x.shape
    M = y.shape[1]
    gx, gy = np.zeros_like(x), np.zeros_like(y)
    A = np.zeros((B * D, N, M) if match else (0, 0, 0))
    serial = _serial(R.shape[0], B * D, N, M)
    kernel = _backward_serial if serial else _backward_parallel
    _run(kernel, serial, x, y, float(c), float(gamma), *tables, R, grad_out, gx, gy, A)
    return (gx, gy, A.reshape(B, D, N, M)) if match else (gx, gy)
