"""The kernels' primitives, each behind one name: the GPU's (an inline-PTX intrinsic from
:mod:`sdtw.cuda.kernels.ptx`, a warp intrinsic or libdevice) or, under Numba's simulator, its
twin from :mod:`sdtw.cuda.kernels.sim`.  This is the one place that chooses.

Besides the simulator's twins, the choice here is fixed: every kernel is the *busy* form of the
band hand-over (each step stores its boundary value itself, read by relaxed L2 loads; see
:mod:`sdtw.cuda.kernels.handoff`).
"""

from __future__ import annotations

from numba import cuda, float32, int32, int64, uint32
from numba.cuda import libdevice

from sdtw.cuda.kernels.geometry import RING1, RMASK
from sdtw.cuda.kernels.jit import SIMULATED, device

FULL_MASK = 0xFFFFFFFF

if SIMULATED:
    from sdtw.cuda.kernels import sim as _twin
else:
    from sdtw.cuda.kernels import ptx as _ptx


@device
def _from_prev_lane_shfl(v, xch, parity):
    return cuda.shfl_up_sync(FULL_MASK, v, 1)


@device
def _from_next_lane_shfl(v, xch, parity):
    return cuda.shfl_down_sync(FULL_MASK, v, 1)


@device
def _warp_sum_shfl(v, xch):
    # (lane l adds lane l ^ k's: a + b is b + a, so every lane ends with the same bits)
    for k in (16, 8, 4, 2, 1):
        v += cuda.shfl_xor_sync(FULL_MASK, v, k)
    return v


@device
def _bits_gpu(x):
    return libdevice.double_as_longlong(x)


@device
def _from_bits_gpu(n):
    return libdevice.longlong_as_double(n)


@device
def _ring_gpu(j):
    return uint32(j) & RMASK  # unsigned: no negative-index wraparound code in the indexing


@device
def _below_gpu(a, n):
    """``0 <= a < n`` for ``n >= 0``, as one unsigned comparison."""
    return uint32(a) < uint32(n)


@device
def _any_lane_gpu(pred):
    return cuda.any_sync(FULL_MASK, pred)


@device
def _fmin32_gpu(a, b):
    return libdevice.fminf(a, b)


@device
def _fmin64_gpu(a, b):
    return libdevice.fmin(a, b)


@device
def _sync_band_gpu():
    # A block is one warp: a warp barrier orders shared memory among its lanes, and (unlike a
    # block barrier) need not wait for the warp's outstanding global atomics.
    cuda.syncwarp(FULL_MASK)


# A float64 distance in a float32 ``P`` travels as the two 32-bit words of its bits, the high
# word in plane 1 and the low word in plane 0 (as float32 bit patterns, never computed with):
# splitting and joining them are register moves, where a float32 high part plus a float32
# low part cost three 64-bit conversions to split and two and an add to join (quarter-rate
# instructions on the pipe of ex2/lg2).


@device
def _hi_word_gpu(v):
    return libdevice.int_as_float(libdevice.double2hiint(v))


@device
def _lo_word_gpu(v):
    return libdevice.int_as_float(libdevice.double2loint(v))


@device
def _join_words_gpu(hi, lo):
    return libdevice.hiloint2double(libdevice.float_as_int(hi), libdevice.float_as_int(lo))


# A float32 weight kept in a float64 slot of the staged block (modes whose block holds float64
# distances and float32 weights) travels as its bits, not converted: two register moves
# instead of two conversions (a 64-bit conversion is a quarter-rate instruction on the same
# pipe as ex2/lg2, of which each step already issues five).


@device
def _pack_gpu(x):
    return libdevice.longlong_as_double(int64(libdevice.float_as_int(x)))


@device
def _unpack_gpu(v):
    return libdevice.int_as_float(int32(libdevice.double_as_longlong(v)))


def _fmma_gpu(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, xsh, ysh, k0, rb, cb, g, t):
    return dmma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)


if SIMULATED:
    exp2, log2, fast_rcp, narrow, fma = _twin.exp2, _twin.log2, _twin.rcp, _twin.narrow, _twin.fma
    fast_rsqrt = _twin.rsqrt
    from_prev_lane, from_next_lane = _twin.from_prev_lane, _twin.from_next_lane
    warp_sum = _twin.warp_sum
    ld_relaxed, st_if, st2_if = _twin.ld_relaxed, _twin.st_if, _twin.st2_if
    as_bits, from_bits = _twin.as_bits, _twin.from_bits
    ring, below, u32, band_view = _twin.ring, _twin.below, _twin.u32, _twin.band_view
    any_lane, sync_band = _twin.any_lane, _twin.sync_warp
    fmin32 = fmin64 = _twin.fmin
    hi_word, lo_word, join_words = _twin.hi_word, _twin.lo_word, _twin.join_words
    pack_f32, unpack_f32 = _twin.pack_f32, _twin.unpack_f32
    # The band's warp and its mover meet after every group; mode tiled's tile is handed over
    # by a free/ready pair (see below for the GPU's form).
    bar_steps = bar_mover = _twin.bar_pair
    free_arrive = free_wait = _twin.bar_free
    ready_arrive = ready_wait = _twin.bar_ready
    tf32, cp_async, cp_async4 = _twin.tf32, _twin.cp_async, _twin.cp_async4
    cp_async8 = _twin.cp_async  # (one float64 element)
    cp_wait, red2 = _twin.cp_wait, _twin.red2
    cp_commit, cp_wait_group = _twin.cp_commit, _twin.cp_wait_group
    fmma = device(_twin.fmma)
    dmma = tmma = None  # (the simulator's callers compute the products themselves)
    #: The staged rows' alignment for :data:`cp_async4` (the simulator takes none).
    SW_ALIGN = None
else:
    narrow, fma = float32, libdevice.fma
    exp2 = _ptx.unary_f32("ex2", "ex2.approx.ftz.f32")
    log2 = _ptx.unary_f32("lg2", "lg2.approx.ftz.f32")
    fast_rcp = _ptx.unary_f32("rcp", "rcp.approx.ftz.f32")
    fast_rsqrt = _ptx.unary_f32("rsqrt", "rsqrt.approx.ftz.f32")
    from_prev_lane, from_next_lane = _from_prev_lane_shfl, _from_next_lane_shfl
    warp_sum = _warp_sum_shfl
    ld_relaxed, st_if, st2_if = _ptx.ld_relaxed(), _ptx.st_if(), _ptx.st2_if()
    as_bits, from_bits = _bits_gpu, _from_bits_gpu
    ring, below, u32, band_view = _ring_gpu, _below_gpu, _ptx.u32(), _ptx.band_view()
    any_lane, sync_band = _any_lane_gpu, _sync_band_gpu
    # (the hardware minimum, FMNMX / DMNMX: a NaN operand is skipped)
    fmin32, fmin64 = _fmin32_gpu, _fmin64_gpu
    hi_word, lo_word, join_words = _hi_word_gpu, _lo_word_gpu, _join_words_gpu
    pack_f32, unpack_f32 = _pack_gpu, _unpack_gpu
    # The band's warp (warp 0) and its mover (warp 1) meet after every group of steps: the
    # steps wait until the mover has staged (barrier 1, ``staged``) and then say that they are
    # done (barrier 4, ``stepped``); the mover says it has staged, then waits for the steps.
    # Each generation has one waiting warp, so the aligned form is legal although the two
    # warps run different code (one ``bar.sync 1, 64`` in both is not: compute-sanitizer's
    # synccheck reports "Divergent thread(s) in block").  Ordered like a barrier of both
    # warps: the steps see the mover's staging, the mover sees the steps done; and neither
    # runs a generation ahead (the mover's next ``staged`` arrival comes after it saw this
    # group's ``stepped``, which the steps give after they waited for this ``staged``).
    bar_steps = _ptx.named_barriers(("sync", 1), ("arrive", 4))
    bar_mover = _ptx.named_barriers(("arrive", 1), ("sync", 4))
    # A shared tile handed between two warps: the reader says it has read it (free), the
    # writer that it has written it (ready); each waits for the other's.
    free_arrive = _ptx.named_barriers(("arrive", 2))
    free_wait = _ptx.named_barriers(("sync", 2))
    ready_arrive = _ptx.named_barriers(("arrive", 3))
    ready_wait = _ptx.named_barriers(("sync", 3))
    tf32 = _ptx.tf32()
    dmma = _ptx.dmma()
    tmma = _ptx.mma(tf32=True)
    cp_async, cp_async4 = _ptx.cp_async(4), _ptx.cp_async(16)
    cp_async8 = _ptx.cp_async(8)  # (one float64 element)
    cp_wait, red2 = _ptx.cp_wait(), _ptx.red2()
    cp_commit, cp_wait_group = _ptx.cp_commit(), _ptx.cp_wait_group
    fmma = device(_fmma_gpu)
    SW_ALIGN = 16


@device
def poll(hand, idx):
    """The current value of ``hand[idx]`` as seen in L2 (never a stale L1 line), by
    ``ld.relaxed.gpu`` (a load, no read-modify-write)."""
    return ld_relaxed(hand, idx)


@device
def slot(po, r, base, sgn):
    """Flat index of row ``r``'s ring slot ``ring(base + sgn r)`` in the plane at ``po``."""
    return uint32(po + r * RING1) + ring(base + sgn * r)
