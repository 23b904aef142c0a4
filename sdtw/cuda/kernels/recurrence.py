"""The cell update of the DP: what a recurrence is, separate from the wavefront that runs it.

The wavefront kernels (:mod:`sdtw.cuda.kernels.forward`, :mod:`sdtw.cuda.kernels.backward`)
run any recurrence of the form

.. math::  R_{i,j} = \\operatorname{softmin}_\\gamma(a_{i,j}, b_{i,j}, c_{i,j}),

where the three operands come from the diagonal, upper and left neighbours (each with the
cost of that transition added), and store per cell the soft-min *weights* ``p_diag``,
``p_up`` (``p_left = 1 - p_diag - p_up``).  The backward is then the same for every such
recurrence: the linear recursion ``E[p] = sum_s E[s] p_s(p)`` over a cell's successors, with
no knowledge of the costs.  A recurrence is therefore two things:

* its *cell update* (:class:`Recurrence`'s ``cell`` and ``cell_fast``): from the neighbours'
  values and the cell's cost(s) to the value and the two stored weights;
* how its costs' gradients follow from E and the weights: soft-DTW charges every transition
  into cell ``(i, j)`` the same cost ``C[i, j]``, so ``dC = E``.

Soft-MSM (move-split-merge) is the case with three costs per cell (match, split, merge) added
to the diagonal, upper and left operand respectively, and a cost gradient per transition
(``E[s] p_s``); soft-DTW is the case where all three equal ``C[i, j]``.  A new recurrence adds
its cell update here and its staging of the costs; the wavefront, hand-over and backward stay.

Units.  The kernels run the DP in scaled base-2 units (below), so a cell update must too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from numba import float32, float64

from sdtw.cuda.kernels import specs
from sdtw.cuda.kernels.geometry import INF
from sdtw.cuda.kernels.jit import device
from sdtw.cuda.kernels.primitives import exp2, fast_rcp, log2, narrow


@device
def min2(a, b):
    """Minimum by comparison (a NaN ``b`` is skipped; a NaN ``a`` is kept)."""
    return b if b < a else a


# The DP runs in *scaled* units: ``R' = R log2(e) / gamma`` and ``C' = C log2(e) / gamma``, so
# that ``e^{-(r - m)/gamma} = 2^{m' - r'}`` and ``softmin_gamma = m - gamma ln2 log2(sum)``
# becomes ``m' - log2(sum)``: no multiply by 1/gamma on the step's dependency chain.  The
# kernel scales the value back once per pair (``R = R' gamma ln 2``).
#
# A step's dependency chain runs from the upper value, which arrives from the lane above by
# shuffle, to this cell's value, which goes to the lane below.  The diagonal and left values
# are older (this lane's value of the step before, and the upper value of the step before), so
# their part of the sum is formed while the upper value travels, relative to the smaller of the
# two, ``m2 = min(r_diag, r_left)``:
#
#     a = 2^{m2 - r_diag} + 2^{m2 - r_left} = 1 + 2^{m2 - max(r_diag, r_left)}  in [1, 2].
#
# With ``t = m2 - up``, the sum relative to the minimum of all three is then ``a + 2^t`` (the
# upper value is not the smallest, ``t <= 0``) or ``1 + a 2^-t`` (it is, ``t > 0``): one
# exponent of ``-|t|`` and one add on the chain, then ``log2``.  Every exponent is <= 0 and the
# sum lies in [1, 3], as in the textbook form; only ``min(m2, up)`` and the other two
# exponents no longer wait for the upper value (the textbook form queued three conversions and
# three float32 ``ex2`` on one pipe there).  ``experiments.softmin_accuracy`` emulates both
# forms in numpy: the same errors against float64.
#
# ``mm2 = min(m2, BIG)`` stands in for ``m2`` in the exponents: where ``r_diag`` and ``r_left``
# are both ``+inf`` it is ``BIG``, so ``a = 1`` and a finite upper value gives ``t > 0`` (value
# ``cost + up``, weights (0, 1)), an infinite one ``2^t = 0`` (value ``+inf``, weights 0: an
# unreachable cell), never ``inf - inf``.  A NaN anywhere reaches the sum and so the value (a
# NaN ``r_diag`` makes ``m2`` NaN directly).


@device
def softmin3(r_diag, r_left, m2, mm2, up, cost, ok):
    """``cost + softmin(r_diag, up, r_left)`` (scaled, base 2) and the diagonal and upper
    weights, float64 math (see the note above); ``(+inf, 0, 0)`` where not ``ok``."""
    lt = r_left < r_diag
    e = math.exp2(mm2 - (r_diag if lt else r_left))  # the larger one's term (0: both +inf)
    a = 1.0 + e
    a_d = 0.0 if m2 == INF else (e if lt else 1.0)
    c2 = cost + m2
    cu = cost + up
    t = mm2 - up  # the chain: t, 2^-|t|, the sum, its log2
    low = t > 0.0  # the upper value is the smallest
    x = math.exp2(-abs(t))
    s = (a if low else 1.0) * x + (1.0 if low else a)  # one fused multiply-add on the chain
    inv_s = 1.0 / s
    r = (cu if low else c2) - math.log2(s)
    pd = a_d * (x if low else 1.0) * inv_s
    pu = (1.0 if low else x) * inv_s
    return (r, pd, pu) if ok else (INF, 0.0, 0.0)


@device
def softmin3_fast(r_diag, r_left, m2, mm2, up, cost, ok):
    """As :func:`softmin3`, with float32 hardware ``ex2``/``lg2`` of the float64 *differences*.

    The differences are formed in float64 and rounded to float32, so a weight has a relative
    error of a few 1e-7 times its exponent, not an absolute error that grows with ``R``;
    ``log2`` of the sum (in [1, 3]) is good to ~2e-7 absolute.  R itself stays float64; the
    weights are float32 (what a float32 step stores).  ``ex2``/``lg2``/``rcp`` are the bare
    approximate instructions (flush-to-zero: a weight below 2^-126 is 0), issued as inline PTX
    so that no denormal fix-ups sit on the step's dependency chain.
    """
    one = float32(1.0)
    zero = float32(0.0)
    lt = r_left < r_diag
    e = exp2(narrow(mm2 - (r_diag if lt else r_left)))  # the larger one's term (0: both +inf)
    a = one + e
    a_d = zero if m2 == INF else (e if lt else one)
    c2 = cost + m2
    cu = cost + up
    t = mm2 - up  # the chain: t, 2^-|t|, the sum, its log2
    low = t > 0.0  # the upper value is the smallest
    x = exp2(-abs(narrow(t)))
    s = (a if low else one) * x + (one if low else a)  # one fused multiply-add on the chain
    inv_s = fast_rcp(s)
    r = (cu if low else c2) - float64(log2(s))
    pd = a_d * (x if low else one) * inv_s
    pu = (one if low else x) * inv_s
    return (r, pd, pu) if ok else (INF, zero, zero)


@dataclass(frozen=True)
class Recurrence:
    """A recurrence's cell update, as device functions of
    ``(r_diag, r_left, m2, mm2, up, cost, ok) -> (r, p_diag, p_up)`` in scaled base-2 units:
    ``m2 = min2(r_diag, r_left)`` and ``mm2 = min2(min2(r_diag, BIG), r_left)`` are formed
    off the step's dependency chain by the wavefront; ``ok`` False gives ``(+inf, 0, 0)``.
    ``cell`` computes in float64, ``cell_fast`` with float32 transcendentals of float64
    differences (float32 weights)."""

    name: str
    cell: object
    cell_fast: object
    #: Costs a cell stages: 1 (the same for all three transitions) or 3 (match, up, left).
    costs: int = 1


#: Soft-DTW (Cuturi and Blondel, 2017): one cost per cell, the same for all three transitions.
SOFT_DTW = Recurrence("soft-dtw", softmin3, softmin3_fast)

#: Soft-MSM (Holder and Bagnall, 2026): a match cost ``(x_i - y_j)^2`` on the diagonal and the
#: transition costs ``C(x_i, x_{i-1}, y_j)`` (up) and ``C(y_j, y_{j-1}, x_i)`` (left), staged
#: by the forward of mode ``hilo`` (the match as the two words of its float64, the transition
#: costs float32, from :mod:`sdtw.cuda.msm_seam`'s costs pass).  Its cell is soft-DTW's with
#: the transition cost ``cu`` as the cost and the other two candidates shifted by it:
#: ``softmin(r_diag + c_match, up + cu, r_left + c_left) = cu + softmin(r_diag + c_match - cu,
#: up, r_left + c_left - cu)``, the shifts formed off the step's chain (float64: their
#: rounding is R's ulp).
SOFT_MSM = Recurrence("soft-msm", softmin3, softmin3_fast, costs=3)

#: The recurrences by name (:data:`sdtw.cuda.kernels.specs.RECURRENCES` lists the names).
RECURRENCES = {SOFT_DTW.name: SOFT_DTW, SOFT_MSM.name: SOFT_MSM}
assert tuple(RECURRENCES) == specs.RECURRENCES
