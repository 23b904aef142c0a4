"""Float64 reference Soft-MSM: the oracle the fast kernels are tested against.

Soft-MSM (Holder & Bagnall, "Soft-MSM: Differentiable Context-Aware Elastic Alignment for Time
Series", 2026) relaxes Move-Split-Merge.  Written for clarity, not speed: two explicit loops
over the cells, vectorised only over the batch, one channel at a time.  For univariate
``x`` (length N) and ``y`` (length M), stiffness ``c > 0`` and smoothing ``gamma > 0``:

.. math::

    \\operatorname{softmin}_\\gamma(a_1, \\dots) = -\\gamma \\log \\sum_k e^{-a_k/\\gamma},

    s(u) = \\tfrac12\\big(1 - u / \\sqrt{u^2 + \\epsilon}\\big),\\quad u = (v - p)(v - o),
    \\quad \\epsilon = 10^{-9},

    C(v, p, o) = c + (1 - s(u))\\, \\operatorname{softmin}_\\gamma\\big((v - p)^2, (v - o)^2\\big),

(``s ~ 1`` when ``v`` lies between ``p`` and ``o``: a split or merge costs ``c``; else ``c``
plus the nearer squared leg), and the recurrence over the cells, with ``R`` unpadded
(``R[i, j]`` is cell ``(i, j)``; predecessors outside the table or the band are ``+inf``, so
the first row and column are the hard cumulative sums of the paper, a soft minimum of one finite
term being that term exactly):

.. math::

    R_{0,0} = (x_0 - y_0)^2,\\qquad
    R_{i,j} = \\operatorname{softmin}_\\gamma\\big(R_{i-1,j-1} + (x_i - y_j)^2,\\;
        R_{i-1,j} + C(x_i, x_{i-1}, y_j),\\; R_{i,j-1} + C(y_j, y_{j-1}, x_i)\\big),

the value is ``R[N - 1, M - 1]``.  Multivariate series: channels independent, values summed.

Gradient, by the backward recursion over edge occupancies: with ``G = dR_{N-1,M-1} / dR``,
``G_{N-1,M-1} = 1`` and, cell by cell in reverse order, each of the three edges ``k`` into
``(i, j)`` carries the occupancy ``O_k = G_{i,j} w_k``, ``w_k = e^{-(a_k - R_{i,j})/\\gamma}``
(``a_k`` the edge's candidate); ``O_k`` is added to ``G`` of the edge's tail and, times the
partial derivatives of the edge's cost, to the gradients of the samples that cost reads.
"""

from __future__ import annotations

import numpy as np

from sdtw.band import sakoe_chiba_mask

__all__ = [
    "GATE_EPS",
    "soft_msm_alignment",
    "soft_msm_backward",
    "soft_msm_forward",
    "soft_msm_univariate_backward",
    "soft_msm_univariate_forward",
    "transition_cost",
    "transition_cost_grad",
]

#: The gate's epsilon (the paper's value).
GATE_EPS = 1e-9


def _softmin(terms: list[np.ndarray], gamma: float) -> np.ndarray:
    """Soft minimum over the list's arrays, stable; ``+inf`` where every term is ``+inf``."""
    stack = np.stack(terms)
    m = stack.min(axis=0)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.exp(-(stack - safe) / gamma).sum(axis=0)
        return np.where(np.isposinf(m), np.inf, safe - gamma * np.log(s))


def transition_cost(v, p, o, c: float, gamma: float) -> np.ndarray:
    """``C(v, p, o)``: the cost of a split or merge that moves ``v`` next to ``p``, the other
    series' sample being ``o``."""
    a, b = (v - p) ** 2, (v - o) ** 2
    u = (v - p) * (v - o)
    s = 0.5 * (1.0 - u / np.sqrt(u * u + GATE_EPS))
    return c + (1.0 - s) * _softmin([a, b], gamma)


def transition_cost_grad(v, p, o, c: float, gamma: float) -> tuple:
    """The partial derivatives ``(dC/dv, dC/dp, dC/do)`` of :func:`transition_cost`.

    .. math::

        dC = (1 - s)\\, dS - S\\, s'(u)\\, du,\\quad
        s'(u) = -\\tfrac{\\epsilon}{2} (u^2 + \\epsilon)^{-3/2},\\quad
        dS = w_a\\, da + w_b\\, db,\\quad w_k = e^{-(k - S)/\\gamma}.
    """
    a, b = (v - p) ** 2, (v - o) ** 2
    S = _softmin([a, b], gamma)
    wa, wb = np.exp(-(a - S) / gamma), np.exp(-(b - S) / gamma)
    u = (v - p) * (v - o)
    r2 = u * u + GATE_EPS
    s = 0.5 * (1.0 - u / np.sqrt(r2))
    ds = -0.5 * GATE_EPS / (r2 * np.sqrt(r2))
    dS_dv, dS_dp, dS_do = 2 * wa * (v - p) + 2 * wb * (v - o), -2 * wa * (v - p), -2 * wb * (v - o)
    du_dv, du_dp, du_do = (v - o) + (v - p), -(v - o), -(v - p)
    return tuple(
        (1.0 - s) * dS - S * ds * du for dS, du in ((dS_dv, du_dv), (dS_dp, du_dp), (dS_do, du_do))
    )


def _candidates(x, y, R, i: int, j: int, c: float, gamma: float) -> list[np.ndarray]:
    """The three candidates into cell (i, j): diagonal (match), up (x_i split/merged), left
    (y_j split/merged); ``+inf`` where the edge's tail is outside the table."""
    inf = np.full(x.shape[0], np.inf)
    match = R[:, i - 1, j - 1] + (x[:, i] - y[:, j]) ** 2 if i and j else inf
    up = R[:, i - 1, j] + transition_cost(x[:, i], x[:, i - 1], y[:, j], c, gamma) if i else inf
    left = R[:, i, j - 1] + transition_cost(y[:, j], y[:, j - 1], x[:, i], c, gamma) if j else inf
    return [match, up, left]


def soft_msm_univariate_forward(
    x: np.ndarray, y: np.ndarray, c: float, gamma: float, bandwidth=None
) -> np.ndarray:
    """Forward DP of univariate x (B, N), y (B, M): ``R`` (B, N, M), ``+inf`` outside the band;
    the values are ``R[:, N - 1, M - 1]``."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    B, N = x.shape
    M = y.shape[1]
    mask = sakoe_chiba_mask(N, M, bandwidth)
    R = np.full((B, N, M), np.inf)
    R[:, 0, 0] = (x[:, 0] - y[:, 0]) ** 2
    for i in range(N):
        for j in range(M):
            if (i, j) != (0, 0) and mask[i, j]:
                R[:, i, j] = _softmin(_candidates(x, y, R, i, j, c, gamma), gamma)
    return R


def soft_msm_univariate_backward(
    x: np.ndarray,
    y: np.ndarray,
    R: np.ndarray,
    c: float,
    gamma: float,
    bandwidth=None,
    match_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Gradients ``(d value / dx (B, N), d value / dy (B, M))`` from the forward's ``R``; into
    ``match_out`` (B, N, M, zeroed) if given, each match edge's occupancy (the gradient of the
    value wrt the match cost ``(x_i - y_j)^2``: the first cell's is 1)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    B, N = x.shape
    M = y.shape[1]
    mask = sakoe_chiba_mask(N, M, bandwidth)
    G = np.zeros((B, N, M))
    G[:, N - 1, M - 1] = 1.0
    gx, gy = np.zeros((B, N)), np.zeros((B, M))
    for i in range(N - 1, -1, -1):
        for j in range(M - 1, -1, -1):
            if not mask[i, j]:
                continue
            if (i, j) == (0, 0):  # R[0, 0] = (x_0 - y_0)^2
                if match_out is not None:
                    match_out[:, 0, 0] = G[:, 0, 0]
                grad = G[:, 0, 0] * 2 * (x[:, 0] - y[:, 0])
                gx[:, 0] += grad
                gy[:, 0] -= grad
                continue
            match, up, left = _candidates(x, y, R, i, j, c, gamma)
            with np.errstate(invalid="ignore", over="ignore"):
                # (an unreachable cell, R = +inf, sends nothing back)
                occupancy = [
                    np.where(np.isfinite(a), G[:, i, j] * np.exp(-(a - R[:, i, j]) / gamma), 0.0)
                    for a in (match, up, left)
                ]
            if i and j:
                if match_out is not None:
                    match_out[:, i, j] = occupancy[0]
                G[:, i - 1, j - 1] += occupancy[0]
                grad = occupancy[0] * 2 * (x[:, i] - y[:, j])
                gx[:, i] += grad
                gy[:, j] -= grad
            if i:
                G[:, i - 1, j] += occupancy[1]
                dv, dp, do = transition_cost_grad(x[:, i], x[:, i - 1], y[:, j], c, gamma)
                gx[:, i] += occupancy[1] * dv
                gx[:, i - 1] += occupancy[1] * dp
                gy[:, j] += occupancy[1] * do
            if j:
                G[:, i, j - 1] += occupancy[2]
                dv, dp, do = transition_cost_grad(y[:, j], y[:, j - 1], x[:, i], c, gamma)
                gy[:, j] += occupancy[2] * dv
                gy[:, j - 1] += occupancy[2] * dp
                gx[:, i] += occupancy[2] * do
    return gx, gy


def soft_msm_forward(
    x: np.ndarray, y: np.ndarray, gamma: float, bandwidth=None, *, c: float = 1.0
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Values (B,) of x (B, N, D), y (B, M, D), each channel on its own and the values summed,
    and the state the backward takes (each channel's ``R``)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    Rs = [
        soft_msm_univariate_forward(x[:, :, d], y[:, :, d], c, gamma, bandwidth)
        for d in range(x.shape[2])
    ]
    values = np.zeros(x.shape[0])
    for R in Rs:
        values += R[:, -1, -1]
    return values, Rs


def soft_msm_backward(
    x: np.ndarray, y: np.ndarray, Rs: list, gamma: float, bandwidth=None, *, c: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of the values wrt x (B, N, D) and y (B, M, D) from :func:`soft_msm_forward`'s
    state."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    gx, gy = np.zeros(x.shape), np.zeros(y.shape)
    for d, R in enumerate(Rs):
        gx[:, :, d], gy[:, :, d] = soft_msm_univariate_backward(
            x[:, :, d], y[:, :, d], R, c, gamma, bandwidth
        )
    return gx, gy


def soft_msm_alignment(
    x: np.ndarray, y: np.ndarray, Rs: list, gamma: float, bandwidth=None, *, c: float = 1.0
) -> np.ndarray:
    """Soft-MSM's expected alignment (B, N, M) from :func:`soft_msm_forward`'s state: each
    match edge's occupancy, the probability that the soft alignment matches ``x_i`` with
    ``y_j`` (the gradient of the value wrt the match cost ``(x_i - y_j)^2``), the mean over
    the channels (each aligns on its own)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    out = np.zeros((x.shape[0], x.shape[1], y.shape[1]))
    for d, R in enumerate(Rs):
        match = np.zeros_like(out)
        soft_msm_univariate_backward(x[:, :, d], y[:, :, d], R, c, gamma, bandwidth, match)
        out += match
    return out / len(Rs)
