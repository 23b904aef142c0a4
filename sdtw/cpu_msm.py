"""Fast CPU Soft-MSM: Numba kernels parallel over the batch and the channels.

Layers as for soft-DTW (:mod:`sdtw.cpu`): the ``_forward_kernel`` / ``_backward_kernel`` Numba
kernels (``prange`` over the (pair, channel) tasks: each channel is a DP of its own, the values
summed afterwards) -> the launchers :func:`msm_cpu_forward` / :func:`msm_cpu_backward` (NumPy
in, NumPy out, float64, internal asserts only).  The maths and the backward over edge
occupancies are those of the float64 oracle, :mod:`sdtw.msm_reference`.

Most of a cell's work does not depend on its left neighbour: its match and up candidates, both
transition costs (one ``exp`` of the match cost shared by the two, one ``log`` and one ``sqrt``
each) and, in the backward, its three edge weights and the partial derivatives of its costs
read only R's row above (or R, all known in the backward) and x, y.  That work runs row by row
in loops that LLVM vectorises (AVX-512: 8 cells at once; branch-free ``exp`` / ``log`` of
:mod:`sdtw._simd`, the rare cells they do not cover redone in scalar code); what is left is
the row's chain, one soft minimum of two per cell in the forward (libm's ``exp`` and
``log1p``, the chains of up to 4 tasks side by side so that the core overlaps them) and one
multiply-add per cell in the backward.  Batches that
:func:`sdtw.cpu_msm_lanes.use_msm_lanes` accepts take the lanes instead (a task per SIMD lane).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from sdtw._jit import parallel_and_serial
from sdtw._simd import exp_neg, log_pos
from sdtw.cpu import _PARALLEL, _group, _tables
from sdtw.msm_reference import GATE_EPS

__all__ = ["msm_cpu_backward", "msm_cpu_forward"]

#: Below this many cells (B D N M) one thread runs the kernels (a parallel launch costs more).
SERIAL_MAX_CELLS = 1 << 15


# Per-cell building blocks.  Every one is branch-free (selects only) and calls no libm function
# (sdtw._simd's exp_neg and log_pos are plain arithmetic), so that a loop over a row's cells
# that calls them vectorises; the rare cells they do not cover are redone by scalar code.
_INF = math.inf
# Below this, e_a + e_b (the transition's soft minimum's sum) is no longer a normal number for
# log_pos: the stable form around the minimum takes over (small gamma).
_TINY = 1e-280


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _softmin2(a: float, b: float, gamma: float, ig: float) -> float:
    """softmin_g(a, b) = min - g log1p(exp(-|a - b| / g)); +inf if both are, NaN if one is.
    (log1p(e) = log(u) - ((u - 1) - e) / u, u = 1 + e: the rounding of u corrected.)"""
    m = a if a < b else b
    d = b - a if a < b else a - b
    e = exp_neg(-d * ig)
    u = 1.0 + e
    r = m - gamma * (log_pos(u) - ((u - 1.0) - e) / u)
    s = a + b
    return s if (m == _INF) | (s != s) else r


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _stable_soft2(dp: float, do: float, gamma: float, ig: float):
    """softmin_g(dp^2, do^2) and the weight of the first, around the minimum (libm: scalar
    code only, where e_a + e_b underflows)."""
    a, b = dp * dp, do * do
    e = math.exp(-abs(a - b) * ig)
    w_min = 1.0 / (1.0 + e)
    return min(a, b) - gamma * math.log1p(e), (w_min if a <= b else e * w_min)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _soft2(dp: float, do: float, ea: float, eb: float, gamma: float, ig: float):
    """softmin_g(dp^2, do^2) = -g log(e_a + e_b) and the weight of the first, scalar code:
    the stable form where the sum underflows."""
    total = ea + eb
    if total > _TINY:
        return -gamma * log_pos(total), ea / total
    return _stable_soft2(dp, do, gamma, ig)


# The transition cost C(v, p, o) = c + (1 - s(u)) S, S = softmin_g((v - p)^2, (v - o)^2), from
# dp = v - p, do = v - o, and its partial derivatives (dv, dp, do):
#   dC = (1 - s) (w_a da + w_b db) - S s'(u) du,  s'(u) = -eps / 2 (u^2 + eps)^(-3/2),
#   da/dv = -da/dp = 2 (v - p), db/dv = -db/do = 2 (v - o),
#   du/dv = (v - o) + (v - p), du/dp = -(v - o), du/do = -(v - p).
@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _transition(dp: float, do: float, S: float, c: float) -> float:
    u = dp * do
    return c + 0.5 * (1.0 + u / math.sqrt(u * u + GATE_EPS)) * S  # c + (1 - s(u)) S


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _transition_grad(dp: float, do: float, S: float, wa: float, c: float):
    wb = 1.0 - wa
    u = dp * do
    inv_r = 1.0 / math.sqrt(u * u + GATE_EPS)
    keep = 0.5 * (1.0 + u * inv_r)  # 1 - s(u)
    k = S * (-0.5 * GATE_EPS * inv_r * inv_r * inv_r)  # S s'(u)
    d_v = keep * 2.0 * (wa * dp + wb * do) - k * (dp + do)
    d_p = -keep * 2.0 * wa * dp + k * do
    d_o = -keep * 2.0 * wb * do + k * dp
    return d_v, d_p, d_o


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _legs(z: np.ndarray, n: int, ig: float):
    """A channel's samples z copied contiguous, their steps z_j - z_{j-1} and the steps'
    exp(-(z_j - z_{j-1})^2 / g) (the own-series legs; index 0: 0 and 1, never used)."""
    zc, step, e = np.empty(n + 1), np.zeros(n + 1), np.ones(n + 1)
    for j in range(n):
        zc[j] = z[j]
    for j in range(1, n):
        step[j] = zc[j] - zc[j - 1]
        e[j] = math.exp(-step[j] * step[j] * ig)
    return zc, step, e


# The forward.  A cell's match and up candidates and its left edge's cost depend only on the
# row above and on x, y: a first loop over the row computes them for every cell, vectorised
# (the match cost's exp(-d / g) shared by the cell's two transition costs, one log each, the
# gates' sqrt, and the soft minimum P of the match and up candidates); then the row's
# dependency chain, one soft minimum of two per cell (P and the left candidate; libm's exp
# and log1p: the chain runs at their latency):
#   R[i, j] = softmin_g(P[j], R[i, j - 1] + C_left[j]),
#   P[j] = softmin_g(R[i - 1, j - 1] + (x_i - y_j)^2, R[i - 1, j] + C(x_i, x_{i-1}, y_j)).
@njit(cache=True, nogil=True, error_model="numpy")
def _row_candidates(P, CL, prev, ys, dy, ey, xi, dxi, exi, c, gamma, ig, ja, j1):
    """Cells ja..j1 (ja >= 1) of row i >= 1: P (the soft minimum of the match and up
    candidates) and the left edge's cost, vectorised; returns how many had a transition sum
    below _TINY (to be redone in scalar code)."""
    # (views indexed from 0: with indices j - 1 and j that it cannot prove >= 0, LLVM gathers
    # (Numba wraps negative indices) or does not vectorise; measured 10x slower)
    a, b = ja, j1 + 1
    Pv, CLv, p_diag, p_up, yv, dyv, eyv = (
        P[a:b],
        CL[a:b],
        prev[a - 1 : b - 1],
        prev[a:b],
        ys[a:b],
        dy[a:b],
        ey[a:b],
    )
    under = 0
    for j in range(b - a):
        diff = xi - yv[j]
        match = diff * diff
        em = exp_neg(-match * ig)
        tu, tl = exi + em, eyv[j] + em
        cu = _transition(dxi, diff, -gamma * log_pos(tu), c)
        CLv[j] = _transition(dyv[j], -diff, -gamma * log_pos(tl), c)
        Pv[j] = _softmin2(p_diag[j] + match, p_up[j] + cu, gamma, ig)
        under += 1 if (tu <= _TINY) | (tl <= _TINY) else 0
    return under


@njit(cache=True, nogil=True, error_model="numpy")
def _lane(x, y, t, D, n, m, ig, R):
    """Task t's table (filled with +inf), its series and their legs (:func:`_legs`)."""
    b, d = t // D, t % D
    Rt = R[t]
    Rt[:, :] = _INF
    xs, dx, ex = _legs(x[b, :, d], n, ig)
    ys, dy, ey = _legs(y[b, :, d], m, ig)
    return Rt, xs, dx, ex, ys, dy, ey


@njit(cache=True, nogil=True, error_model="numpy")
def _first_row(Rt, xs, ys, dy, ey, j1, c, gamma, ig):
    """Row 0: the first cell, then left moves only (a soft minimum of one finite term)."""
    Rt[0, 0] = (xs[0] - ys[0]) * (xs[0] - ys[0])
    for j in range(1, j1 + 1):
        do = ys[j] - xs[0]
        S = _soft2(dy[j], do, ey[j], exp_neg(-do * do * ig), gamma, ig)[0]
        Rt[0, j] = Rt[0, j - 1] + _transition(dy[j], do, S, c)


@njit(cache=True, nogil=True, error_model="numpy")
def _candidates(P, CL, Rt, i, j0, j1, xs, dx, ex, ys, dy, ey, c, gamma, ig):
    """Row i >= 1's P and left edge costs (cells j0..j1): :func:`_row_candidates`, and the
    cells it does not cover in scalar code (column 0; sums that underflowed)."""
    xi, dxi, exi = xs[i], dx[i], ex[i]
    prev = Rt[i - 1]
    if j0 == 0:  # (up only)
        do = xi - ys[0]
        S = _soft2(dxi, do, exi, exp_neg(-do * do * ig), gamma, ig)[0]
        P[0] = prev[0] + _transition(dxi, do, S, c)
        CL[0] = _INF
    ja = max(j0, 1)
    if _row_candidates(P, CL, prev, ys, dy, ey, xi, dxi, exi, c, gamma, ig, ja, j1):
        for j in range(ja, j1 + 1):  # (small gamma: the cells whose sums underflowed, again)
            diff = xi - ys[j]
            em = exp_neg(-diff * diff * ig)
            if exi + em <= _TINY or ey[j] + em <= _TINY:
                cu = _transition(dxi, diff, _soft2(dxi, diff, exi, em, gamma, ig)[0], c)
                S = _soft2(dy[j], -diff, ey[j], em, gamma, ig)[0]
                CL[j] = _transition(dy[j], -diff, S, c)
                P[j] = _softmin2(prev[j - 1] + diff * diff, prev[j] + cu, gamma, ig)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _chain(p: float, q: float, gamma: float, ig: float) -> float:
    """softmin_g(p, q) with libm's exp and log1p (the chain's latency is theirs)."""
    m, gap = (p, q - p) if p <= q else (q, p - q)
    return p + q if m == _INF else m - gamma * math.log1p(math.exp(-gap * ig))


def _forward_kernel(x, y, c, gamma, ns, ms, los, his, R, values, group):
    """R (B D, N, M): task t = b D + d is pair b's channel d; ``+inf`` outside its table and
    band; ``values[t] = R[t, n_b - 1, m_b - 1]``.  Tasks go in groups of ``group`` (1, 2
    or 4) whose rows' chains a thread runs side by side (the core overlaps them), when the
    group's tables have the same shape and band (else one at a time).  (The loop's body is a
    function of its own, shared by the parallel and the serial kernel: Numba compiles it once,
    and the parallel kernel in a fraction of the time it took with the body inside; the
    index is cast to int64 so that both kernels call one signature.)"""
    T = x.shape[0] * x.shape[2]
    for g in prange((T + group - 1) // group):
        _forward_group(x, y, c, gamma, ns, ms, los, his, R, values, group, np.int64(g))


@njit(cache=True, nogil=True, error_model="numpy")
def _forward_group(x, y, c, gamma, ns, ms, los, his, R, values, group, g):
    """:func:`_forward_kernel`'s group ``g``."""
    B, _, D = x.shape
    T = B * D
    M = y.shape[1]
    ig = 1.0 / gamma
    t0 = g * group
    k = min(group, T - t0)
    n, m, lo, hi = ns[t0 // D], ms[t0 // D], los[t0 // D], his[t0 // D]
    same = True
    for t in range(t0 + 1, t0 + k):
        b = t // D
        same &= ns[b] == n and ms[b] == m and los[b] == lo and his[b] == hi
    for s in range(k if not same else 1):
        t = t0 + s
        if not same:  # (one task at a time: lanes 1..3 alias lane 0 and stay idle)
            n, m, lo, hi = ns[t // D], ms[t // D], los[t // D], his[t // D]
        w = k if same else 1
        # lanes (absent ones alias lane 0; their guarded work never runs)
        t1, t2, t3 = t + min(1, w - 1), t + min(2, w - 1), t + w - 1
        lane0 = _lane(x, y, t, D, n, m, ig, R)
        lane1 = _lane(x, y, t1, D, n, m, ig, R) if w > 1 else lane0
        lane2 = _lane(x, y, t2, D, n, m, ig, R) if w > 2 else lane0
        lane3 = _lane(x, y, t3, D, n, m, ig, R) if w > 3 else lane2
        R0, xs0, dx0, ex0, ys0, dy0, ey0 = lane0
        R1, xs1, dx1, ex1, ys1, dy1, ey1 = lane1
        R2, xs2, dx2, ex2, ys2, dy2, ey2 = lane2
        R3, xs3, dx3, ex3, ys3, dy3, ey3 = lane3
        P0, P1, P2, P3 = np.empty(M + 1), np.empty(M + 1), np.empty(M + 1), np.empty(M + 1)
        C0, C1, C2, C3 = np.empty(M + 1), np.empty(M + 1), np.empty(M + 1), np.empty(M + 1)
        j1 = min(m - 1, hi)
        _first_row(R0, xs0, ys0, dy0, ey0, j1, c, gamma, ig)
        if w > 1:
            _first_row(R1, xs1, ys1, dy1, ey1, j1, c, gamma, ig)
        if w > 2:
            _first_row(R2, xs2, ys2, dy2, ey2, j1, c, gamma, ig)
            _first_row(R3, xs3, ys3, dy3, ey3, j1, c, gamma, ig)
        for i in range(1, n):
            j0, j1 = max(0, i - lo), min(m - 1, i + hi)
            _candidates(P0, C0, R0, i, j0, j1, xs0, dx0, ex0, ys0, dy0, ey0, c, gamma, ig)
            if w > 1:
                _candidates(P1, C1, R1, i, j0, j1, xs1, dx1, ex1, ys1, dy1, ey1, c, gamma, ig)
            if w > 2:
                _candidates(P2, C2, R2, i, j0, j1, xs2, dx2, ex2, ys2, dy2, ey2, c, gamma, ig)
                _candidates(P3, C3, R3, i, j0, j1, xs3, dx3, ex3, ys3, dy3, ey3, c, gamma, ig)
            # the chains (R[i, j0 - 1] is outside the band or the table)
            r0, r1, r2, r3 = R0[i], R1[i], R2[i], R3[i]
            l0 = l1 = l2 = l3 = _INF
            for j in range(j0, j1 + 1):
                l0 = _chain(P0[j], l0 + C0[j], gamma, ig)
                r0[j] = l0
                if w > 1:
                    l1 = _chain(P1[j], l1 + C1[j], gamma, ig)
                    r1[j] = l1
                if w > 2:
                    l2 = _chain(P2[j], l2 + C2[j], gamma, ig)
                    l3 = _chain(P3[j], l3 + C3[j], gamma, ig)
                    r2[j] = l2
                    r3[j] = l3
        for tt in range(t, t + w):
            values[tt] = R[tt, n - 1, m - 1]


# The backward: G, each cell's d value / d R, pushed from a cell to the tails of its three
# edges in reverse order; the edge weights exp((R - a_k) / g) sum to 1 (R is their soft
# minimum): the minimum candidate's is taken as 1 minus the two others.  Per row: (1) every
# cell's three weights, then what a unit of G at the cell adds to each sample's gradient
# (vectorised, two loops: a loop that stores more than four arrays does not vectorise; they
# read R, x and y only), (2) the row's chain, G[i, j - 1] += G[i, j] w_left[j] right to left,
# (3) G times those, pushed to the row above and to the gradients (vectorised).
@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _weights(r, r_diag, r_up, r_left, diff, dxi, dyj, Su, Sl, c, ig):
    """The three edge weights into a cell of value r (all 0 where r = +inf: unreachable)."""
    a_d = r_diag + diff * diff
    a_u = r_up + _transition(dxi, diff, Su, c)
    a_l = r_left + _transition(dyj, -diff, Sl, c)
    e_d, e_u, e_l = exp_neg((r - a_d) * ig), exp_neg((r - a_u) * ig), exp_neg((r - a_l) * ig)
    d_min = (a_d <= a_u) & (a_d <= a_l)
    u_first = a_u <= a_l  # (up is the minimum when the match is not and up <= left)
    w_d = 1.0 - e_u - e_l if d_min else e_d
    w_u = e_u if d_min else (1.0 - e_d - e_l if u_first else e_u)
    w_l = e_l if d_min else (e_l if u_first else 1.0 - e_d - e_u)
    w_d, w_u, w_l = max(w_d, 0.0), max(w_u, 0.0), max(w_l, 0.0)
    dead = r == _INF
    return (0.0 if dead else w_d), (0.0 if dead else w_u), (0.0 if dead else w_l)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _unit_pushes(w_d, w_u, w_l, diff, dxi, dyj, Su, wau, Sl, wal, c):
    """What a unit of G at the cell adds to the gradients of x_i, x_{i-1}, y_j, y_{j-1}."""
    u_v, u_p, u_o = _transition_grad(dxi, diff, Su, wau, c)
    l_v, l_p, l_o = _transition_grad(dyj, -diff, Sl, wal, c)
    dd = 2.0 * diff
    return w_u * u_v + w_d * dd + w_l * l_o, w_u * u_p, w_u * u_o - w_d * dd + w_l * l_v, w_l * l_p


@njit(cache=True, nogil=True, error_model="numpy")
def _cell_scalar(W, j, r, r_diag, r_up, r_left, xi, dxi, exi, yj, dyj, eyj, c, gamma, ig):
    """Cell j's columns of W (the seven rows (w_diag, w_up, w_left, the four pushes)) in
    scalar code: the first row and column, and cells whose transition sums underflow.  (A
    call, not inlined: three call sites inlined tripled the backward's compile time.)"""
    diff = xi - yj
    em = exp_neg(-diff * diff * ig)
    Su, wau = _soft2(dxi, diff, exi, em, gamma, ig)
    Sl, wal = _soft2(dyj, -diff, eyj, em, gamma, ig)
    w_d, w_u, w_l = _weights(r, r_diag, r_up, r_left, diff, dxi, dyj, Su, Sl, c, ig)
    W[0][j], W[1][j], W[2][j] = w_d, w_u, w_l
    W[3][j], W[4][j], W[5][j], W[6][j] = _unit_pushes(
        w_d, w_u, w_l, diff, dxi, dyj, Su, wau, Sl, wal, c
    )


# (1): two loops, each in a function of its own over views indexed from 0 (see
# _row_candidates).
@njit(cache=True, nogil=True, error_model="numpy")
def _row_weights(w_d, w_u, w_l, row, prev, ys, dy, ey, xi, dxi, exi, c, gamma, ig, ja, j1):
    """Cells ja..j1 (ja >= 1) of row i >= 1: their three edge weights; returns how many had a
    transition sum below _TINY (to be redone by :func:`_cell_scalar`)."""
    wd, wu, wl = w_d[ja : j1 + 1], w_u[ja : j1 + 1], w_l[ja : j1 + 1]
    r, r_left, p_diag, p_up = (
        row[ja : j1 + 1],
        row[ja - 1 : j1],
        prev[ja - 1 : j1],
        prev[ja : j1 + 1],
    )
    yv, dyv, eyv = ys[ja : j1 + 1], dy[ja : j1 + 1], ey[ja : j1 + 1]
    under = 0
    for j in range(j1 + 1 - ja):
        diff = xi - yv[j]
        em = exp_neg(-diff * diff * ig)
        tu, tl = exi + em, eyv[j] + em
        Su, Sl = -gamma * log_pos(tu), -gamma * log_pos(tl)
        wd[j], wu[j], wl[j] = _weights(r[j], p_diag[j], p_up[j], r_left[j], diff, dxi, dyv[j],
                                       Su, Sl, c, ig)  # fmt: skip
        under += 1 if (tu <= _TINY) | (tl <= _TINY) else 0
    return under


@njit(cache=True, nogil=True, error_model="numpy")
def _row_pushes(to_xi, to_xp, to_yj, to_yp, w_d, w_u, w_l, ys, dy, ey, xi, dxi, exi, c, gamma,
                ig, ja, j1):  # fmt: skip
    """Cells ja..j1 (ja >= 1) of row i >= 1: what a unit of G there adds to each gradient."""
    a, b = ja, j1 + 1  # (views indexed from 0, as in _row_candidates)
    txi, txp, tyj, typ = to_xi[a:b], to_xp[a:b], to_yj[a:b], to_yp[a:b]
    wd, wu, wl, yv, dyv, eyv = w_d[a:b], w_u[a:b], w_l[a:b], ys[a:b], dy[a:b], ey[a:b]
    for j in range(b - a):
        diff = xi - yv[j]
        em = exp_neg(-diff * diff * ig)
        tu, tl = exi + em, eyv[j] + em
        Su, Sl = -gamma * log_pos(tu), -gamma * log_pos(tl)
        txi[j], txp[j], tyj[j], typ[j] = _unit_pushes(
            wd[j], wu[j], wl[j], diff, dxi, dyv[j], Su, exi / tu, Sl, eyv[j] / tl, c
        )


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def _push_row(W, cur, above, gy, j0, j1):
    """Step (3) for row i's cells j0..j1 (G final in ``cur``): ``above`` (zeroed) gets the row
    above's up and match occupancies, ``gy`` the y gradients; returns the x_i and x_{i-1}
    gradients.  (Sums reassociated, so that they vectorise.)"""
    w_d, w_u, to_xi, to_xp, to_yj, to_yp = W[0], W[1], W[3], W[4], W[5], W[6]
    j0 = max(j0, 0)  # (j >= 0 known to LLVM: contiguous loads, no gathers)
    gxi = gxp = 0.0
    for j in range(j0, j1 + 1):
        g = cur[j]
        gxi += g * to_xi[j]
        gxp += g * to_xp[j]
        gy[j] += g * to_yj[j] + cur[j + 1] * to_yp[j + 1]
    for j in range(max(j0 - 1, 0), j1 + 1):
        above[j] = cur[j] * w_u[j] + cur[j + 1] * w_d[j + 1]
    return gxi, gxp


def _backward_kernel(x, y, c, gamma, ns, ms, los, his, R, grad_out, gx, gy):
    """Adds each task's gradient (times ``grad_out[b]``) into gx (B, N, D), gy (B, M, D)
    (zeroed by the caller).  ``G`` of two rows: the row's own (which its left edges feed)
    and the row above (which its up and match edges feed)."""
    for t in prange(x.shape[0] * x.shape[2]):
        _backward_task(x, y, c, gamma, ns, ms, los, his, R, grad_out, gx, gy, np.int64(t))


@njit(cache=True, nogil=True, error_model="numpy")
def _backward_task(x, y, c, gamma, ns, ms, los, his, R, grad_out, gx, gy, t):
    """:func:`_backward_kernel`'s task ``t``."""
    D = x.shape[2]
    M = y.shape[1]
    ig = 1.0 / gamma
    b, d = t // D, t % D
    n, m, lo, hi = ns[b], ms[b], los[b], his[b]
    Rt = R[t]
    xs, dx, ex = _legs(x[b, :, d], n, ig)
    ys, dy, ey = _legs(y[b, :, d], m, ig)
    # (seven arrays, not one 2D: LLVM vectorises stores only into separate allocations;
    # a row's columns j0 - 1 and j1 + 1 are 0 when read)
    w_d, w_u, w_l = np.zeros(M + 2), np.zeros(M + 2), np.zeros(M + 2)
    to_xi, to_xp, to_yj, to_yp = (
        np.zeros(M + 2),
        np.zeros(M + 2),
        np.zeros(M + 2),
        np.zeros(M + 2),
    )
    W = (w_d, w_u, w_l, to_xi, to_xp, to_yj, to_yp)
    cur, above, gyt = np.zeros(M + 2), np.zeros(M + 2), np.zeros(M + 1)
    cur[m - 1] = grad_out[b]
    for i in range(n - 1, -1, -1):
        xi, dxi, exi = xs[i], dx[i], ex[i]
        j0, j1 = max(0, i - lo), min(m - 1, i + hi)
        row = Rt[i]
        prev = Rt[i - 1] if i > 0 else row  # (not read for i = 0)
        under = 0
        if i > 0:
            if j0 == 0:  # (up only)
                _cell_scalar(W, 0, row[0], _INF, prev[0], _INF, xi, dxi, exi, ys[0],
                             0.0, 1.0, c, gamma, ig)  # fmt: skip
            under = _row_weights(w_d, w_u, w_l, row, prev, ys, dy, ey, xi, dxi, exi, c,
                                 gamma, ig, max(j0, 1), j1)  # fmt: skip
            _row_pushes(to_xi, to_xp, to_yj, to_yp, w_d, w_u, w_l, ys, dy, ey, xi, dxi, exi,
                        c, gamma, ig, max(j0, 1), j1)  # fmt: skip
        else:  # (left only; cell (0, 0) below)
            for j in range(1, j1 + 1):
                _cell_scalar(W, j, row[j], _INF, _INF, row[j - 1], xi, 0.0, 1.0, ys[j],
                             dy[j], ey[j], c, gamma, ig)  # fmt: skip
            for w in W:
                w[0] = 0.0
        if under:  # (small gamma: the cells whose sums underflowed, again)
            for j in range(max(j0, 1), j1 + 1):
                em = exp_neg(-(xi - ys[j]) * (xi - ys[j]) * ig)
                if exi + em <= _TINY or ey[j] + em <= _TINY:
                    _cell_scalar(W, j, row[j], prev[j - 1], prev[j], row[j - 1], xi, dxi,
                                 exi, ys[j], dy[j], ey[j], c, gamma, ig)  # fmt: skip
        for j in range(j1, j0, -1):  # (2, the chain)
            cur[j - 1] += cur[j] * w_l[j]
        above[:] = 0.0
        gxi, gxp = _push_row(W, cur, above, gyt, j0, j1)
        if i == 0:  # R[0, 0] = (x_0 - y_0)^2
            g = cur[0] * 2.0 * (xs[0] - ys[0])
            gxi += g
            gyt[0] -= g
        gx[b, i, d] += gxi
        if i > 0:
            gx[b, i - 1, d] += gxp
        for w in W:  # (so that the next row reads zeros past its own band)
            w[j0] = w[j1] = 0.0
        cur, above = above, cur
    for j in range(m):
        gy[b, j, d] += gyt[j]


_forward_parallel, _forward_serial = parallel_and_serial(_forward_kernel, error_model="numpy")
_backward_parallel, _backward_serial = parallel_and_serial(_backward_kernel, error_model="numpy")


def _launch(parallel, serial, cells: int, *args) -> None:
    # (one parallel kernel at a time: Numba's workqueue layer aborts on concurrent entry;
    # the lock is the soft-DTW kernels' own, see sdtw.cpu)
    if cells <= SERIAL_MAX_CELLS:
        serial(*args)
        return
    with _PARALLEL:
        parallel(*args)


def msm_cpu_forward(
    x: np.ndarray, y: np.ndarray, c: float, gamma: float, lo, hi, lengths=None
) -> tuple[np.ndarray, np.ndarray]:
    """Soft-MSM forward on the CPU.

    Parameters
    ----------
    x : ndarray, shape (B, N, D)
    y : ndarray, shape (B, M, D)
        float64, C-contiguous (anything else is converted).  Not modified.
    c, gamma : float
        Stiffness and smoothing, > 0.
    lo, hi : int or ndarray (B,)
        Band offsets (:func:`sdtw.band.band_offsets`, per pair :func:`sdtw.band.pair_offsets`).
    lengths : (ndarray (B,), ndarray (B,)) or None
        Each pair's own lengths (None: N, M).

    Returns
    -------
    values : ndarray (B,)
        The channels' values summed.
    R : ndarray (B D, N, M)
        Each channel's table (``+inf`` outside it): all :func:`msm_cpu_backward` needs.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    assert x.ndim == 3 and y.ndim == 3 and x.shape[2] == y.shape[2] and gamma > 0
    B, N, D = x.shape
    M = y.shape[1]
    tables = _tables(B, N, M, lo, hi, lengths)
    R = np.empty((B * D, N, M))
    values = np.empty(B * D)
    serial = B * D * N * M <= SERIAL_MAX_CELLS
    args = (x, y, float(c), float(gamma), *tables, R, values, _group(B * D, serial))
    _launch(_forward_parallel, _forward_serial, B * D * N * M, *args)
    return values.reshape(B, D).sum(axis=1), R


def msm_cpu_backward(
    x: np.ndarray, y: np.ndarray, R: np.ndarray, c: float, gamma: float, lo, hi, grad_out,
    lengths=None,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Soft-MSM backward on the CPU: the gradients of ``grad_out . values`` wrt x (B, N, D)
    and y (B, M, D), float64, zero past each pair's lengths; arguments as
    :func:`msm_cpu_forward`'s, ``R`` its table and ``grad_out`` (B,) the upstream gradient."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    grad_out = np.ascontiguousarray(grad_out, dtype=np.float64)
    B, N, D = x.shape
    M = y.shape[1]
    tables = _tables(B, N, M, lo, hi, lengths)
    gx, gy = np.zeros(x.shape), np.zeros(y.shape)
    args = (x, y, float(c), float(gamma), *tables, R, grad_out, gx, gy)
    _launch(_backward_parallel, _backward_serial, B * D * N * M, *args)
    return gx, gy
