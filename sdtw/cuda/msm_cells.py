"""Soft-MSM's cell as device functions, shared by its own CUDA kernels (:mod:`sdtw.cuda.msm`)
and its passes around soft-DTW's band kernels (:mod:`sdtw.cuda.msm_seam`): the soft minimum of
three, the transition cost ``C(v, p, o)`` with its partial derivatives, in float64 and in the
float32 forms that float32 inputs take (:mod:`sdtw.msm_reference` has the maths)."""

from __future__ import annotations

import math

from numba import float32, float64

from sdtw.cuda.kernels.jit import device
from sdtw.cuda.kernels.primitives import exp2, fast_rcp, fast_rsqrt, log2, narrow
from sdtw.msm_reference import GATE_EPS

INF = math.inf


@device
def _order3(a, b, c):
    """``(m, o1, hi1)``: the minimum of the three and the other two."""
    lo1, hi1 = (a, b) if a <= b else (b, a)
    m, o1 = (c, lo1) if c < lo1 else (lo1, c)
    return m, o1, hi1


@device
def _softmin3(a, b, c, gamma, ig):
    """``softmin_gamma(a, b, c)``, ``ig = 1 / gamma``; ``+inf`` if all three are."""
    m, o1, hi1 = _order3(a, b, c)
    f = m if m < INF else 0.0  # (no branch: the sum of a finite stand-in, then a select)
    r = f - gamma * math.log1p(math.exp((f - o1) * ig) + math.exp((f - hi1) * ig))
    return r if m < INF else m


@device
def _partials(dp, do, wa, wb, keep, k):
    """C's partial derivatives ``(dv, dp, do)`` from ``dp = v - p``, ``do = v - o``, the legs'
    weights, ``keep = 1 - s(u)`` and ``k = S s'(u)``, in their own precision:
    ``dC = keep (wa da + wb db) - k du``."""
    keep2 = keep + keep
    d_v = keep2 * (wa * dp + wb * do) - k * (dp + do)
    d_p = -keep2 * wa * dp + k * do
    d_o = -keep2 * wb * do + k * dp
    return d_v, d_p, d_o


@device
def _transition(v, p, o, c, gamma, ig):
    """C(v, p, o) and its partial derivatives (dv, dp, do); ``ig = 1 / gamma``."""
    dp, do = v - p, v - o
    a, b = dp * dp, do * do
    e = math.exp(-abs(a - b) * ig)
    S = min(a, b) - gamma * math.log1p(e)
    w_min = 1.0 / (1.0 + e)
    wa = w_min if a <= b else e * w_min
    wb = 1.0 - wa
    u = dp * do
    rs = 1.0 / math.sqrt(u * u + GATE_EPS)
    keep = 0.5 * (1.0 + u * rs)  # 1 - s(u)
    k = S * (-0.5 * GATE_EPS) * (rs * rs * rs)
    return (c + keep * S, *_partials(dp, do, wa, wb, keep, k))


# The float32 forms (float32 inputs): the hardware's approximate ex2 / lg2 / rcp / rsqrt of
# float32 roundings of float64 differences, as soft-DTW's float32 kernels (``cell_fast`` in
# :mod:`sdtw.cuda.kernels.recurrence`); R, its candidates and the occupancies stay float64.
# ``ig2 = log2(e) / gamma`` takes ``ig``'s place; each transcendental is good to a few 1e-7
# relative (its argument's float32 rounding included), so a cost's error is a few 1e-7 of its
# own size, not of R's.
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_EPS32 = float32(GATE_EPS)
_U_MAX = float32(2.0**62)
_S_MAX = float32(2.0**127)


@device
def _exp_scaled(z):
    """``exp(z / log2(e))`` for ``z <= 0`` scaled by ``ig2``: ``2^z`` in float32 (0 below
    2^-126), as float64."""
    return float64(exp2(narrow(z)))


@device
def _softmin3_fast(a, b, c, gamma, ig2):
    """:func:`_softmin3` with float32 ``ex2`` / ``lg2`` (the sum lies in [1, 3])."""
    m, o1, hi1 = _order3(a, b, c)
    f = m if m < INF else 0.0  # (as in _softmin3: no branch)
    s = float32(1.0) + exp2(narrow((f - o1) * ig2)) + exp2(narrow((f - hi1) * ig2))
    r = f - (gamma * LN2) * float64(log2(s))
    return r if m < INF else m


@device
def _softmin3_split_fast(a, b, c, gamma, ig2):
    """:func:`_softmin3_fast` (the same value, bit for bit) with what its candidates' weights
    take (:func:`_weights_fast`): ``(value, e1, e2, s, code)``, ``code`` bit 0 ``a <= b``,
    bit 1 ``c`` the minimum, bit 2 a finite minimum."""
    ab = a <= b
    lo1, hi1 = (a, b) if ab else (b, a)
    cl = c < lo1
    m, o1 = (c, lo1) if cl else (lo1, c)
    f = m if m < INF else 0.0
    e1 = exp2(narrow((f - o1) * ig2))
    e2 = exp2(narrow((f - hi1) * ig2))
    s = float32(1.0) + e1 + e2
    r = f - (gamma * LN2) * float64(log2(s))
    code = (1 if ab else 0) + (2 if cl else 0) + (4 if m < INF else 0)
    return (r if m < INF else m), e1, e2, s, code


@device
def _weights_fast(e1, e2, s, code):
    """The three candidates' weights ``exp((value - candidate) / gamma)`` as float32 from
    :func:`_softmin3_split_fast`'s parts (the sum's reciprocal; all 0 where ``code`` has no
    finite minimum): ``(w_a, w_b, w_c)``."""
    zero = float32(0.0)
    if code < 4:
        return zero, zero, zero
    q = fast_rcp(s)
    w_o1, w_hi = e1 * q, e2 * q
    cl = (code & 2) != 0
    w_lo = w_o1 if cl else q  # (lo1's: the minimum unless c is)
    w_c = q if cl else w_o1
    return (w_lo, w_hi, w_c) if (code & 1) != 0 else (w_hi, w_lo, w_c)


@device
def _softmin3_weights_fast(a, b, c, gamma, ig2):
    """:func:`_softmin3_fast` and its candidates' weights: ``(value, w_a, w_b, w_c)``."""
    v, e1, e2, s, code = _softmin3_split_fast(a, b, c, gamma, ig2)
    wa, wb, wc = _weights_fast(e1, e2, s, code)
    return v, wa, wb, wc


@device
def _transition_fast(v, p, o, c, gamma, ig2):
    """:func:`_transition` with float32 transcendentals and gate: ``rsqrt(u^2 + eps)`` in
    float32, ``|u|`` clipped to ``2^62`` (its square then fits float32; the gate's ratio is
    ``sign(u)`` to float32's precision there, and ``S s'(u)`` 0).  Differences whose squares
    pass float32's range (``|v - p|`` or ``|v - o|`` past about 1.8e19) are not handled:
    ``S s'(u)`` may overflow where ``u`` is near 0."""
    one = float32(1.0)
    dp, do = v - p, v - o
    a, b = dp * dp, do * do
    e = exp2(narrow(-abs(a - b) * ig2))
    S = min(a, b) - (gamma * LN2) * float64(log2(one + e))
    w_min = fast_rcp(one + e)
    wa = w_min if a <= b else e * w_min
    wb = one - wa
    dp32, do32 = narrow(dp), narrow(do)
    # (clips, not branches: the cell's code stays one block for the scheduler)
    u = max(-_U_MAX, min(_U_MAX, dp32 * do32))
    rs = fast_rsqrt(u * u + _EPS32)
    keep = float32(0.5) * (one + u * rs)  # 1 - s(u)
    # (rs^3 is 0 past the clip; S clipped below float32's infinity: 0, not inf * 0)
    k = min(narrow(S), _S_MAX) * (float32(-0.5) * _EPS32) * (rs * rs * rs)
    d_v, d_p, d_o = _partials(dp32, do32, wa, wb, keep, k)
    return c + float64(keep) * S, float64(d_v), float64(d_p), float64(d_o)


@device
def _edge_gradients(o_m, o_u, o_l, xi, xp, yj, yp, c, gamma, ig2):
    """What cell ``(i, j)``'s three incoming edges of occupancies ``o_m`` (match), ``o_u``
    (up: ``C(x_i, x_{i-1}, y_j)``) and ``o_l`` (left: ``C(y_j, y_{j-1}, x_i)``) give the
    samples, by :func:`_transition_fast`'s partial derivatives: ``(to x_i, to x_{i-1}, to
    y_j, to y_{j-1})``.  An edge of zero occupancy adds nothing, whatever its partials (0
    times a float32 overflow of the gate's derivative would be NaN)."""
    g_m = o_m * 2.0 * (xi - yj)
    _, d_v, d_p, d_o = _transition_fast(xi, xp, yj, c, gamma, ig2)
    _, e_v, e_p, e_o = _transition_fast(yj, yp, xi, c, gamma, ig2)
    up_x, up_p, up_y = (o_u * d_v, o_u * d_p, o_u * d_o) if o_u != 0.0 else (0.0, 0.0, 0.0)
    lf_x, lf_y, lf_p = (o_l * e_o, o_l * e_v, o_l * e_p) if o_l != 0.0 else (0.0, 0.0, 0.0)
    return g_m + up_x + lf_x, up_p, up_y + lf_y - g_m, lf_p
