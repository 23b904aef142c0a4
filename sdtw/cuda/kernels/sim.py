"""Simulator twins of the GPU primitives (:mod:`sdtw.cuda.kernels.ptx`, warp intrinsics,
libdevice): plain Python with the same results, for Numba's CPU simulator.

Where the GPU's result is rounded differently (``fma``, the tensor-core products) the twin says
so; the simulator's results are then close to the GPU's, not the same bits.  The kernels pick a
primitive or its twin in one place, :mod:`sdtw.cuda.kernels.primitives`.

Barriers.  The simulator's ``syncthreads`` releases a block's threads once every live one
waits in *some* ``syncthreads`` call, so it cannot pair the band's warp and the mover warp,
which wait at different places and a different number of times.  A block of more than one warp
(the mover variants) therefore synchronises its band's warp, and the band's warp with its
mover, with barriers of its own (``threading.Barrier`` objects kept with the simulated block,
one set per launch); a one-warp block keeps ``syncthreads``.  A wait longer than
:data:`SIM_WAIT` seconds (a thread that died) breaks the barrier with an error instead of
hanging.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import cuda, float32

from sdtw.cuda import _private
from sdtw.cuda.kernels.geometry import RING, TB
from sdtw.cuda.kernels.jit import device

SIM_WAIT = 300.0


def exp2(x):
    """``ex2.approx.ftz.f32``: NaN stays NaN, a result below 2^-126 is 0."""
    if x != x:
        return float32(x)
    return float32(2.0**x) if x > -126.0 else float32(0.0)


def narrow(x):
    """``float32(x)`` of a float64, as the GPU's conversion: +-inf past float32's range (numpy
    warns there)."""
    with np.errstate(over="ignore"):
        return np.float32(x)


def log2(x):
    return float32(math.log2(x))


def rcp(x):
    return float32(1.0) / x


def rsqrt(x):
    """``rsqrt.approx.ftz.f32``: +inf at 0, 0 at +inf, NaN below 0."""
    if x == 0.0:
        return float32(math.inf)
    if x < 0.0 or x != x:
        return float32(math.nan)
    return float32(1.0 / math.sqrt(x))


def fma(a, b, c):
    return a * b + c  # (rounded twice: the simulator's results are not bit for bit the GPU's)


def _barrier(name, parties: int):
    """The current simulated block's barrier ``name`` of ``parties`` threads."""
    return _private.sim_block_state(name, lambda: threading.Barrier(parties, timeout=SIM_WAIT))


def _one_warp() -> bool:
    return _private.sim_block_width() == TB


def sync_warp():
    """A barrier of the calling thread's warp (its block's, for a one-warp block)."""
    t = threading.current_thread()
    if _one_warp():
        t.syncthreads()
    else:
        _barrier(("warp", t.threadIdx.x // TB), TB).wait()


def fmin(a, b):
    """libdevice's ``fmin`` / ``fminf``: the smaller of two; a NaN operand is skipped (NaN if
    both are)."""
    if a != a:
        return b
    if b != b:
        return a
    return a if a <= b else b


def any_lane(pred):
    """Whether ``pred`` holds for any lane of the calling thread's warp."""
    t = threading.current_thread()
    if _one_warp():
        return t.syncthreads_or(1 if pred else 0) != 0
    board = _private.sim_block_state(("votes", t.threadIdx.x // TB), lambda: [False] * TB)
    board[t.threadIdx.x % TB] = bool(pred)
    sync_warp()
    out = any(board)
    sync_warp()
    return out


@device
def from_prev_lane(v, xch, parity):
    """The shuffle from lane ``tid - 1`` through a 2-slot shared array and a barrier."""
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    sync_warp()
    return xch[parity, tid - 1] if tid > 0 else v


@device
def from_next_lane(v, xch, parity):
    """The shuffle from lane ``tid + 1`` (see :func:`from_prev_lane`)."""
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    sync_warp()
    return xch[parity, tid + 1] if tid < TB - 1 else v


@device
def warp_sum(v, xch):
    """The warp's sum of ``v`` in every lane, by the GPU's butterfly (lane ``l`` adds lane
    ``l ^ k``'s for k = 16, 8, 4, 2, 1: the same bits in every lane and as the GPU's) through
    ``xch``, a shared array of one slot a thread of the block, and two barriers a round."""
    tid = cuda.threadIdx.x
    lane = tid % TB
    base = tid - lane
    for k in (16, 8, 4, 2, 1):
        xch[tid] = v
        sync_warp()
        other = xch[base + (lane ^ k)]
        sync_warp()
        v = v + other
    return v


def ld_relaxed(arr, idx):
    return arr[idx]


def bar_pair():
    """Both named barriers of a step/mover meeting as one barrier (a stronger order)."""
    _barrier(("pair",), 2 * TB).wait()


def bar_free():
    # (the simulator's arrive waits too: a stronger order, the same results)
    _barrier(("free",), 2 * TB).wait()


def bar_ready():
    _barrier(("ready",), 2 * TB).wait()


def st_if(arr, idx, val, pred):
    if pred:
        arr[idx] = val


def as_bits(x):
    return np.float64(x).view(np.int64)


def from_bits(n):
    return np.int64(n).view(np.float64)


def ring(j):
    return j & (RING - 1)


def below(a, n):
    return 0 <= a < n


def u32(x):
    return np.uint32(x)


def band_view(A, start):
    return A[start:]


def hi_word(v):
    return np.array([v], dtype=np.float64).view(np.float32)[1]


def lo_word(v):
    return np.array([v], dtype=np.float64).view(np.float32)[0]


def join_words(hi, lo):
    return np.array([lo, hi], dtype=np.float32).view(np.float64)[0]


def pack_f32(x):
    return np.int64(np.float32(x).view(np.int32)).view(np.float64)


def unpack_f32(v):
    return np.array([v], dtype=np.float64).view(np.float32)[0]


def fmma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, xsh, ysh, k0, rb, cb, g, t):
    """One lane's ``mma.m16n8k8.f64`` in the fused forward's products (the simulator has no
    warp-collective matrix op): the lane's four outputs (rows ``rb + g (+ 8)``, columns
    ``cb + 2 t (+ 1)``) from the staged features ``k0 .. k0 + 7`` (``xsh[k, row]``,
    ``ysh[k, column]``)."""
    for k in range(k0, k0 + 8):
        x0 = xsh[k, rb + g]
        x1 = xsh[k, rb + g + 8]
        y0 = ysh[k, cb + 2 * t]
        y1 = ysh[k, cb + 2 * t + 1]
        c0 += x0 * y0
        c1 += x0 * y1
        c2 += x1 * y0
        c3 += x1 * y1
    return c0, c1, c2, c3


def tf32(x):
    """:func:`sdtw.cuda.kernels.ptx.tf32`'s rounding on the float32 bits."""
    bits = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    bits = (bits + 0x1000) & 0xFFFFE000
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


# The simulator's asynchronous copies land as late as the hardware may let them: each thread
# keeps its copies pending (the source read at issue: x and y are not written during a
# launch) and writes them to shared memory only at the wait that covers them, so a read of a
# staged row before its wait sees what was there before, and a test fails, where copies that
# land at once would hide a missing wait.
_COPIES = threading.local()


def _pending() -> list:
    """This thread's copies not yet waited for: a list of commit groups, the last one open."""
    groups = getattr(_COPIES, "groups", None)
    if groups is None:
        groups = _COPIES.groups = [[]]
    return groups


def cp_async(S, i, A, j):
    # (the source is read when the copy lands: a store to it before the wait shows)
    _pending()[-1].append((S, i, A, j))


def cp_async4(S, i, A, j):
    group = _pending()[-1]
    for q in range(4):
        group.append((S, i + q, A, j + q))


def _land(group) -> None:
    for S, i, A, j in group:
        S[i] = A[j]


def cp_wait():
    """``cp.async.commit_group; cp.async.wait_all``: every pending copy lands."""
    for group in _pending():
        _land(group)
    _COPIES.groups = [[]]


def cp_commit():
    """``cp.async.commit_group``: the open group closes; a new one opens."""
    _pending().append([])


def cp_wait_group(n: int):
    """``cp.async.wait_group n``: the committed groups but the newest ``n`` land."""

    def wait():
        groups = _pending()
        closed = len(groups) - 1
        for group in groups[: max(closed - n, 0)]:
            _land(group)
        _COPIES.groups = groups[max(closed - n, 0) :]

    return wait


_ATOMIC = threading.Lock()


def red2(A, j, v0, v1):
    """``red.global.add.v2.f32``: two atomic adds (the simulator's ``cuda.atomic`` exists only
    inside a kernel's own module)."""
    with _ATOMIC:
        A[j] += v0
        A[j + 1] += v1


def st2_if(arr, idx, a, b, pred):
    if pred:
        arr[idx] = a
        arr[idx + 1] = b
