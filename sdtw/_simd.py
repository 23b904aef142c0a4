"""Branch-free ``exp`` and ``log`` for Numba kernels whose lanes are independent pairs.

Numba calls libm's scalar ``exp`` and ``log`` (no SVML here), and a loop with a call inside
never vectorises.  These two functions are plain float64 arithmetic, selects and
float64 <-> int64 bitcasts (:func:`as_int64`, :func:`as_float64`: an LLVM ``bitcast``, one
vector instruction or none), so a loop over lanes that calls them vectorises: the soft-min
of 8 pairs in one AVX-512 register.  No branch, no table, no int <-> float conversion of a
NaN (poison in LLVM).

Accuracy (measured by ``tests/test_simd.py`` against ``mpmath``): :func:`exp_neg` within 1 ulp
on ``[-708, 0]``, :func:`log_pos` within 1 ulp on positive normal numbers.

:func:`exp_neg` (the soft-min's ``exp(-(x - min) / gamma) <= 1``): Cody-Waite reduction
``x = k ln2 + r``, ``|r| <= ln2 / 2``, with ``k`` rounded by the ``1.5 * 2**52`` shifter (its low
bits are k: no float -> int conversion); ``ln2`` split in two so that ``k ln2_hi`` is exact;
``exp(r)`` by its Taylor polynomial of degree 13 (truncation below 4e-18 relative); then
``2**k`` built in the exponent bits.  Below -708 (``exp < 3.3e-308``, nothing next to the 1 of
a soft-min's sum) it returns 0, for ``-inf`` too; NaN gives NaN.

:func:`log_pos` (the soft-min's ``log(1 + rest)``, ``1 <= 1 + rest <= 3``): fdlibm's
``e_log.c``, branch-free: ``x = 2**k (1 + f)``, ``sqrt(2)/2 <= 1 + f < sqrt(2)``, then
``log(1 + f) = f - hfsq + s (hfsq + R(s^2))``, ``s = f / (2 + f)``, with fdlibm's minimax
``R`` (Lg1 .. Lg7).  Defined for positive normal numbers and NaN (NaN) only: zero,
subnormals and inf give finite nonsense (the soft-min's argument is in [1, 3] or NaN).
"""

from __future__ import annotations

import math

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["LANE_FLAGS", "as_float64", "as_int64", "exp_neg", "log_pos", "order3", "softmin3"]

#: The ``njit`` flags of a kernel whose lanes call these functions (they are inlined into it,
#: in its flags): no ZeroDivisionError branch around a division (``error_model="numpy"``; a
#: loop with a branch that raises does not vectorise), and ``a * b + c`` contracted to one
#: fused multiply-add (one rounding instead of two; fewer instructions).  Nothing reassociates.
LANE_FLAGS = dict(fastmath={"contract"}, error_model="numpy")


@intrinsic
def as_int64(typingctx, x):
    """The bits of a float64 as an int64 (LLVM ``bitcast``)."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def as_float64(typingctx, k):
    """The float64 whose bits are the int64 ``k`` (LLVM ``bitcast``)."""
    if k != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


_EXP_MIN = -708.0  # (k >= -1022 below: 2**k is a normal number)
_LOG2E = 1.4426950408889634
_SHIFTER = 6755399441055744.0  # 1.5 * 2**52: x + shifter rounds x to an integer, in the low bits
_SHIFTER_BITS = 0x4338000000000000
_LN2_HI = 6.93147180369123816490e-01  # (11 trailing zero bits: k * ln2_hi is exact)
_LN2_LO = 1.90821492927058770002e-10


@njit(cache=True, nogil=True, inline="always", **LANE_FLAGS)
def exp_neg(x: float) -> float:
    """``exp(x)`` for ``x <= 0`` (0 below -708 and at -inf, NaN for NaN), branch-free."""
    xc = _EXP_MIN if x < _EXP_MIN else x  # (NaN stays NaN)
    t = xc * _LOG2E + _SHIFTER
    kf = t - _SHIFTER
    k = as_int64(t) - _SHIFTER_BITS
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r * r + r  # (r + r^2 (1/2 + ...): the 1 added last, in one rounding)
    y = (1.0 + p) * as_float64((k + 1023) << 52)
    return 0.0 if x < _EXP_MIN else y


_MANTISSA = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000
_SQRT2 = 1.4142135623730951
_LG1 = 6.666666666666735130e-01
_LG2 = 3.999999999940941908e-01
_LG3 = 2.857142874366239149e-01
_LG4 = 2.222219843214978396e-01
_LG5 = 1.818357216161805012e-01
_LG6 = 1.531383769920937332e-01
_LG7 = 1.479819860511658591e-01


@njit(cache=True, nogil=True, inline="always", **LANE_FLAGS)
def log_pos(x: float) -> float:
    """``log(x)`` for a positive normal float64 ``x`` (NaN for NaN), branch-free."""
    bits = as_int64(x)
    m = as_float64((bits & _MANTISSA) | _ONE_BITS)  # in [1, 2)
    e = (bits >> 52) - 1023
    big = m >= _SQRT2
    m = 0.5 * m if big else m
    dk = float(e + 1 if big else e)
    f = m - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    R = t2 + t1
    y = dk * _LN2_HI - ((hfsq - (s * (hfsq + R) + dk * _LN2_LO)) - f)
    return y if x == x else x


@njit(cache=True, nogil=True, inline="always", **LANE_FLAGS)
def order3(a: float, b: float, c: float) -> tuple[float, float, float]:
    """``(min, mid, max)`` of three values by selects, no branch."""
    lo = a if a < b else b
    hi = b if a < b else a
    m = lo if lo < c else c
    top = hi if hi > c else c
    mid_ = hi if hi < c else c
    return m, (mid_ if mid_ > lo else lo), top


@njit(cache=True, nogil=True, inline="always", **LANE_FLAGS)
def softmin3(a: float, b: float, c: float, gamma: float, inv_gamma: float) -> float:
    """:func:`sdtw.cpu._softmin3` without a branch or a libm call: the same factoring around
    the minimum (``m - gamma log(1 + exp((m - mid) / gamma) + exp((m - max) / gamma))``, the
    same sum), with :func:`exp_neg` and :func:`log_pos`; ``+inf`` if all three are, NaN if one
    is NaN or two are ``-inf``, ``-inf`` if one is (the reference's special values)."""
    m, mid, top = order3(a, b, c)
    rest = exp_neg((m - mid) * inv_gamma) + exp_neg((m - top) * inv_gamma)
    r = m - gamma * log_pos(1.0 + rest)
    nan = (a != a) | (b != b) | (c != c)
    return a + b + c if nan else (m if m == math.inf else r)
