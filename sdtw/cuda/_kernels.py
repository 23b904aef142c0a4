"""Numba CUDA kernels: pipelined band wavefront for soft-DTW.

Design
------
The (N, M) table of a pair is cut into *bands* of ``TB`` rows.  One thread block of ``TB``
threads (one warp) owns one band, thread ``t`` owns row ``i0 + t``, and the block sweeps the
band's columns as a skewed wavefront: at step ``s`` thread ``t`` computes column ``s - t``.
The three DP neighbours come from the thread itself (left), from thread ``t - 1`` one step
earlier (up) and two steps earlier (diagonal), passed by a warp shuffle.

The step is what bounds the speed (one band's steps are a chain of dependent soft-mins), so
it is kept short:

* the DP runs in scaled base-2 units (``R log2(e) / gamma``), so the exponentials and the
  logarithm are the bare ``ex2``/``lg2``/``rcp`` instructions (inline PTX, flush-to-zero: no
  denormal fix-ups) with no multiply by ``1 / gamma`` on the chain;
* only the upper neighbour (the shuffled value) is on the chain: the sum of exponentials is
  taken relative to the smaller of the other two, whose terms are formed while the upper
  value travels, so one ``ex2``, one add and one ``lg2`` wait for it; an unreachable cell
  (all three ``+inf``) needs no branch;
* steps are unrolled by hand in groups of ``G`` = 8, and row ``r`` keeps column ``j`` in ring
  slot ``(j + r) % 64`` (``= s % 64``, the same for every lane at a step), so a group's shared
  memory accesses are one base register plus constant offsets;
* invalid cells (band, table edges) select ``+inf`` and zero weights: no divergent branch.

Costs (or fused distances) are staged ``TW`` = 32 columns (a *chunk*) at a time into the
64-column ring; the weights go out coalesced one chunk later.  The unfused forward and the
backward load the next chunk into registers while the current chunk's steps run.  The fused
float64 forward without gradients (mode ``fused``) computes the next chunk's distances itself
(float64 dot products of staged features) after the current chunk's steps, so it needs no
(N, M) buffer at all.  With
gradients the weights buffer ``P`` is there anyway, so the fused forward first puts each
cell's float64 distance in it (from a tiled product on the float64 tensor cores,
:func:`_build_park`: float64 inputs into plane 0, mode ``split``; float32 inputs as the high
and low 32-bit words of the float64 bits in planes 1 and 0, mode ``hilo``) and the DP reads
them from there like a cost, overwriting each with its weights: the dot products then run at
full rate instead of inside the DP's latency-bound warps.  The fused float32 forward without
gradients gives each band a warp of its own for them instead, the *distance warp* (mode
``tiled``): it computes the next column chunk's 32 x 32 distances on the float64 tensor
cores while the band's warp runs the current chunk's steps, into a shared tile that the
band's *mover* warp stages from (below): one launch, no (N, M) buffer, the park kernel's
values bit for bit.  (With gradients that mode measured slower than the park kernel and the
DP forward together: its warps stall at the barriers, waiting for the distance warp, whose
chunk takes longer than the steps'; see :func:`sdtw.cuda._launch.tiled`.)

Lane 0 takes the row above the band from the boundary buffer ``Rb`` that the band above writes
(per step, or a group of ``G`` columns at a time from shared memory: see
:func:`_build_handoff`): values are float64 bits in an int64 buffer pre-filled with a
sentinel, read ``G`` columns at a time, one group ahead, with L2 reads and a warp vote, so
neither side waits on a counter or a fence (the band below runs 37-46 steps behind the band
above, the minimum being 32: per-block timer stamps on the H200, see :data:`TIMING`).
Blocks take a *ticket* from an atomic counter (the boundary buffer's last element) and
derive their (band, pair) from it, so a block only ever waits for blocks that started before
it: no deadlock whatever order the hardware schedules blocks in, and the CUDA simulator
(which runs blocks one at a time) works too.  One launch does the whole forward (two
when fused with gradients: the park kernel first), one the whole backward: launches per step
are O(1), not O(N + M).

The fused forward with gradients from float32 inputs gives each
band a second warp, the *mover*, that stages the costs and writes the weights out while the
band's warp runs only the steps (see ``mover`` in :func:`_build_forward` and
:func:`sdtw.cuda._launch.mover`): between the chunks' steps those took about 40% of the
one-warp forward's time at B = 32, N = 512 (``probe-dev.txt``, run 63).  The backward
has the same variant (``mover`` in :func:`_build_backward`; its band's warp then issues about
half the instructions per chunk, by the offline SASS; :func:`sdtw.cuda._launch.backward_mover`),
on a GPU in both dtypes: float32 18% faster at N = 512, 17% at N = 1024 (runs 70-71).

Accuracy
--------
The backward never forms ``(R[i+1, j] - R[i, j] - C[i+1, j]) / gamma`` (the published form,
which cancels catastrophically in float32 when ``R`` is large).  Instead the forward stores, per
cell, the soft-min *weights* of its three predecessors

.. math::  p_k = e^{-(r_k - m)/\\gamma} \\big/ \\textstyle\\sum_l e^{-(r_l - m)/\\gamma},
           \\quad m = \\min_l r_l,

computed from *differences of neighbouring R values in float64*, and the backward is the pure
linear recursion ``E[p] = sum_s E[s] p_s(p)`` over successors ``s``.  All DP arithmetic is
float64 whatever the input dtype (Hopper runs float64 at half the float32 rate); only the stored
weights take the input's precision (float32 weights have relative error 6e-8).  The fused
distances are float64 whatever the input dtype (the park's float64 tensor-core products, or
the no-gradient forward's own): ``|x|^2 + |y|^2 - 2 x.y`` with float64 norms.  An unfused
cost keeps the caller's precision: a float32 cost has rounding errors of ~1e-7 of
``|x|^2 + |y|^2``, which the weights see divided by gamma (at B = 4, N = 512, D = 64, randn:
gradients typically within ~1e-5 of the float64 result from x and y, but up to ~1e-3 where
two paths are tied to within that rounding at gamma = 1e-3).

Memory
------
``P`` (B, 2, N, M) holds (p_diag, p_up); p_left = 1 - p_diag - p_up.  The backward overwrites
plane 1 with ``E`` in place (each cell is read before it is written, by the same thread), so
``E = P[:, 1]`` needs no extra buffer; it also returns E's row and column sums (B, N + M) when
asked (the fused gradients need them).  Boundary buffers are (B, ceil(N/TB), M + 1) int64
(float64 bits; column ``M`` is padding), flattened, plus the ticket counter.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np
from numba import cuda, float32, float64, int32, int64, uint32, uint64
from numba.cuda import libdevice

#: Numba's CPU simulator lacks warp shuffles, votes and libdevice: the small device functions
#: that use them have simulator twins below, chosen once at import.
SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
if SIMULATED:
    from sdtw._compat import patch_simulator_shared_arrays

    patch_simulator_shared_arrays()


#: ``SDTW_LINEINFO=1``: the kernels compiled with line information (``lineinfo=True``: source
#: lines in compute-sanitizer's and Nsight Compute's reports, the code otherwise the same);
#: their on-disk cache is then off (:data:`DISK_CACHE`).
LINEINFO = os.environ.get("SDTW_LINEINFO", "0") == "1" and not SIMULATED


def _device(fn):
    """A device function that LLVM inlines (``forceinline``).  Numba's own inlining
    (``inline=True``) copies the IR at each of the ~100 call sites of the unrolled steps and
    took 30-80 s per kernel to compile; this takes ~5 s.  The simulator takes plain ones."""
    if SIMULATED:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def _kernel(fn=None, *, launch_bounds=None):
    """A kernel that asks for the largest shared-memory carveout (``"maxshared"``: 228 KB of
    the SM's 256 KB L1/shared on Hopper).  The blocks hold 17-26 KB of shared memory each, and
    with the driver's default split an H200 SM held only 5 (split forward) or 7 (cost forward,
    backward) of them, below the 8 that registers allow, so that from B * ceil(N / 32) ~ 660
    (resp. 920) blocks on some bands had to wait for a second round: the forward at B = 32,
    N = 1024 took 0.98 ms against 0.62 ms at B = 24 (``probe-dev.txt``, run 8), and 0.59 ms
    with this carveout (run 9; B = 1 .. 24 unchanged).  The kernels read global memory through
    L2 (atomics, streamed costs) and do not rely on L1.  ``launch_bounds``
    ``(threads, blocks per SM)`` asks ptxas to fit that many blocks' registers on an SM
    (``@_kernel(launch_bounds=...)``)."""
    if fn is None:
        return lambda f: _kernel(f, launch_bounds=launch_bounds)
    if SIMULATED:
        return cuda.jit(fn)
    opts = {"shared_memory_carveout": "maxshared"} if _HAS_CARVEOUT else {}
    if LINEINFO:
        opts["lineinfo"] = True
    if launch_bounds is not None and _has_jit_option(
        "launch_bounds",
        "kernels with a launch bound (the park kernel, the in-sweep backward) get more "
        "registers and fewer blocks per SM",
    ):
        opts["launch_bounds"] = launch_bounds
    return cuda.jit(**opts)(fn)


def _has_carveout() -> bool:
    """Whether this numba-cuda's ``cuda.jit`` takes ``shared_memory_carveout`` (warns if not)."""
    return _has_jit_option(
        "shared_memory_carveout",
        "the kernels run with the driver's default L1/shared split (fewer resident blocks per "
        "SM: slower from about B * N / 32 > 600 on an H200)",
    )


_jit_options: dict[str, bool] = {}


def _has_jit_option(name: str, without: str) -> bool:
    """Whether this numba-cuda's ``cuda.jit`` takes the keyword ``name``; if not, warns once
    with what that costs (``without``)."""
    import inspect
    import warnings

    if name not in _jit_options:
        ok = name in inspect.signature(cuda.jit).parameters
        _jit_options[name] = ok
        if not ok:
            warnings.warn(
                f"sdtw: this numba-cuda's cuda.jit has no {name}; {without}",
                RuntimeWarning,
                stacklevel=3,
            )
    return _jit_options[name]


_HAS_CARVEOUT = not SIMULATED and _has_carveout()


TB = 32  # rows per band = threads per block (one warp)
TW = 32  # columns per chunk (published / staged together); TW == TB is assumed below
DC = 16  # features staged per pass of the fused distances
TB1 = TB + 2  # padded row (few bank conflicts on column writes; even, so 16-byte row pairs)
TW1 = TW + 1
RING = 2 * TW  # ring of staged columns (two chunks)
RING1 = RING + 1  # padded ring row (lanes' same-slot accesses in distinct banks)
PO1 = TB * RING1  # size of one plane of a staged block (flat; the backward's second at PO1)
PO2 = 2 * PO1
PUBS = RING + TB  # a publishing ring and a spare slot per lane (see the steps)
RMASK = uint32(RING - 1)
G = 8  # boundary values handed between bands per group (TW a multiple; steps unrolled for 8)

INF = math.inf


@_device
def _min2(a, b):
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
# exponents no longer wait for the upper value (in float32 three conversions and three ``ex2``
# queued on one pipe before: probe-dev.txt, before run 75).  ``experiments.softmin_accuracy``
# emulates both forms in numpy: the same errors against float64.
#
# ``mm2 = min(m2, BIG)`` stands in for ``m2`` in the exponents: where ``r_diag`` and ``r_left``
# are both ``+inf`` it is ``BIG``, so ``a = 1`` and a finite upper value gives ``t > 0`` (value
# ``cost + up``, weights (0, 1)), an infinite one ``2^t = 0`` (value ``+inf``, weights 0: an
# unreachable cell), never ``inf - inf``.  A NaN anywhere reaches the sum and so the value (a
# NaN ``r_diag`` makes ``m2`` NaN directly).
BIG = 1e300


@_device
def _softmin3(r_diag, r_left, m2, mm2, up, cost, ok):
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


@_device
def _softmin3_fast(r_diag, r_left, m2, mm2, up, cost, ok):
    """As :func:`_softmin3`, with float32 hardware ``ex2``/``lg2`` of the float64 *differences*.

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


def _ptx_unary_f32(name: str, instruction: str):
    """A float32 -> float32 device intrinsic that is one PTX instruction (inline asm)."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def fn(typingctx, x):
        def codegen(context, builder, signature, args):
            fty = ir.FunctionType(ir.FloatType(), [ir.FloatType()])
            return builder.asm(fty, f"{instruction} $0, $1;", "=f,f", args, False, name=name)

        return types.float32(types.float32), codegen

    return fn


def _exp2_sim(x):
    """``ex2.approx.ftz.f32``: NaN stays NaN, a result below 2^-126 is 0."""
    if x != x:
        return float32(x)
    return float32(2.0**x) if x > -126.0 else float32(0.0)


def _narrow_sim(x):
    """``float32(x)`` of a float64, as the GPU's conversion: +-inf past float32's range (numpy
    warns there)."""
    with np.errstate(over="ignore"):
        return np.float32(x)


def _log2_sim(x):
    return float32(math.log2(x))


def _rcp_sim(x):
    return float32(1.0) / x


def _fma_sim(a, b, c):
    return a * b + c  # (rounded twice: the simulator's results are not bit for bit the GPU's)


if SIMULATED:
    exp2, log2, fast_rcp, narrow = _exp2_sim, _log2_sim, _rcp_sim, _narrow_sim
    fma = _fma_sim
else:
    narrow, fma = float32, libdevice.fma
    exp2 = _ptx_unary_f32("ex2", "ex2.approx.ftz.f32")
    log2 = _ptx_unary_f32("lg2", "lg2.approx.ftz.f32")
    fast_rcp = _ptx_unary_f32("rcp", "rcp.approx.ftz.f32")
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)


# Neighbour exchange between the lanes of a band.  On a GPU the band is one warp and a shuffle
# moves the value (no barrier, no shared memory round trip); Numba's simulator has no
# shuffles, so there the same exchange goes through a 2-slot shared array and a barrier.  Both
# return lane (tid - 1)'s / (tid + 1)'s argument from this step (lane 0 / TB-1 get their own).
FULL_MASK = 0xFFFFFFFF


@_device
def _from_prev_lane_shfl(v, xch, parity):
    return cuda.shfl_up_sync(FULL_MASK, v, 1)


@_device
def _from_next_lane_shfl(v, xch, parity):
    return cuda.shfl_down_sync(FULL_MASK, v, 1)


# Barriers in the simulator.  Its ``syncthreads`` releases a block's threads once every live
# one waits in *some* ``syncthreads`` call, so it cannot pair the band's warp and the mover
# warp, which wait at different places and a different number of times.  A block of more than
# one warp (the mover variant) therefore synchronises its band's warp, and the band's warp with
# its mover, with barriers of its own (``threading.Barrier`` objects kept on the simulator's
# block manager, which runs a launch's blocks one after another and is new for each launch);
# a one-warp block keeps ``syncthreads``.  A wait longer than ``_SIM_WAIT`` seconds (a thread
# that died) breaks the barrier with an error instead of hanging.
_SIM_LOCK = threading.Lock()
_SIM_WAIT = 300.0


def _sim_block_state(name, make):
    """The current simulated block's object ``name``, made by ``make()`` on first use (kept
    on the block manager: one per launch, shared by its threads)."""
    mgr = threading.current_thread()._manager
    state = mgr.__dict__.get("_sdtw_state")
    if state is None or name not in state:
        with _SIM_LOCK:
            state = mgr.__dict__.setdefault("_sdtw_state", {})
            if name not in state:
                state[name] = make()
    return state[name]


def _sim_barrier(name, parties: int):
    """The current simulated block's barrier ``name`` of ``parties`` threads."""
    return _sim_block_state(name, lambda: threading.Barrier(parties, timeout=_SIM_WAIT))


def _sim_one_warp() -> bool:
    return threading.current_thread()._manager._block_dim[0] == TB


def _sync_warp_sim():
    """A barrier of the calling thread's warp (its block's, for a one-warp block)."""
    t = threading.current_thread()
    if _sim_one_warp():
        t.syncthreads()
    else:
        _sim_barrier(("warp", t.threadIdx.x // TB), TB).wait()


def _any_lane_sim(pred):
    """Whether ``pred`` holds for any lane of the calling thread's warp."""
    t = threading.current_thread()
    if _sim_one_warp():
        return t.syncthreads_or(1 if pred else 0) != 0
    board = _sim_block_state(("votes", t.threadIdx.x // TB), lambda: [False] * TB)
    board[t.threadIdx.x % TB] = bool(pred)
    _sync_warp_sim()
    out = any(board)
    _sync_warp_sim()
    return out


@_device
def _from_prev_lane_smem(v, xch, parity):
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    _sync_warp_sim()
    return xch[parity, tid - 1] if tid > 0 else v


@_device
def _from_next_lane_smem(v, xch, parity):
    tid = cuda.threadIdx.x
    xch[parity, tid] = v
    _sync_warp_sim()
    return xch[parity, tid + 1] if tid < TB - 1 else v


from_prev_lane = _from_prev_lane_smem if SIMULATED else _from_prev_lane_shfl
from_next_lane = _from_next_lane_smem if SIMULATED else _from_next_lane_shfl


def _item_pointer(context, builder, signature, args, k=0):
    """For the inline-asm intrinsics below: the array struct of argument ``k`` and the LLVM
    pointer to its element at index argument ``k + 1``."""
    from numba.core import cgutils

    aryty = signature.args[k]
    ary = context.make_array(aryty)(context, builder, args[k])
    idx = [args[k + 1]]
    return ary, cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)


def _ld_relaxed_intrinsic():
    """``ld.relaxed.gpu.b64`` of ``arr[idx]`` (an int64 array): a coherent read at GPU scope
    (L2), without the atomic's read-modify-write."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def ld_relaxed(typingctx, arr, idx):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            fty = ir.FunctionType(ir.IntType(64), [ptr.type])
            return builder.asm(fty, "ld.relaxed.gpu.b64 $0, [$1];", "=l,l", [ptr], True)

        return types.int64(arr, idx), codegen

    return ld_relaxed


def _ld_relaxed_sim(arr, idx):
    return arr[idx]


_ld_relaxed = _ld_relaxed_sim if SIMULATED else _ld_relaxed_intrinsic()


def _bar_intrinsic(*ops: tuple[str, int]):
    """Named-barrier instructions of two of the block's warps (``2 TB`` threads), in order:
    ``ops`` are (``"sync"`` or ``"arrive"``, barrier) pairs, e.g. ``bar.sync 1, 64``.  A
    ``memory`` clobber: no shared-memory access moves across them.  ``bar.arrive`` does not
    wait; it orders the arriving warp's earlier accesses before those that the waiting warp
    makes after its ``bar.sync`` (PTX ISA, "bar, barrier": a producer-consumer pair).

    ``bar.sync`` is ``barrier.sync.aligned``: the threads that *wait* in one generation of a
    barrier must all execute the same barrier instruction (others may arrive from anywhere).
    Our warps meet in that form only (one warp waits, the other arrives).  The non-aligned
    ``barrier.sync`` would allow any mix, but offline ptxas then merges the warps' paths (the
    movers' kernels 1.4-1.7x longer, ``probe-dev.txt`` run 114)."""
    text = " ".join(f"bar.{op} {barrier}, {2 * TB};" for op, barrier in ops)
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def bar_two(typingctx):
        def codegen(context, builder, signature, args):
            fty = ir.FunctionType(ir.VoidType(), [])
            builder.asm(fty, text, "~{memory}", [], True)
            return context.get_dummy_value()

        return types.void(), codegen

    return bar_two


def _bar_pair_sim():
    _sim_barrier(("pair",), 2 * TB).wait()


def _bar_free_sim():
    # (the simulator's arrive waits too: a stronger order, the same results)
    _sim_barrier(("free",), 2 * TB).wait()


def _bar_ready_sim():
    _sim_barrier(("ready",), 2 * TB).wait()


# The band's warp (warp 0) and its mover (warp 1) meet after every group of steps: the steps
# wait until the mover has staged (barrier 1, ``staged``) and then say that they are done
# (barrier 4, ``stepped``); the mover says it has staged, then waits for the steps.  Each
# generation has one waiting warp, so the aligned form is legal although the two warps run
# different code (one ``bar.sync 1, 64`` in both, as before, is not: compute-sanitizer's
# synccheck reported "Divergent thread(s) in block", run 114).  Ordered like a barrier of
# both warps: the steps see the mover's staging, the mover sees the steps done; and neither
# runs a generation ahead (the mover's next ``staged`` arrival comes after it saw this
# group's ``stepped``, which the steps give after they waited for this ``staged``).  The
# simulator pairs them with one barrier (a stronger order).
_bar_steps = _bar_pair_sim if SIMULATED else _bar_intrinsic(("sync", 1), ("arrive", 4))
_bar_mover = _bar_pair_sim if SIMULATED else _bar_intrinsic(("arrive", 1), ("sync", 4))
# Mode tiled's shared tile: the mover says it has read it (free), the distance warp that it
# has written it (ready); each waits for the other's.
_free_arrive = _bar_free_sim if SIMULATED else _bar_intrinsic(("arrive", 2))
_free_wait = _bar_free_sim if SIMULATED else _bar_intrinsic(("sync", 2))
_ready_arrive = _bar_ready_sim if SIMULATED else _bar_intrinsic(("arrive", 3))
_ready_wait = _bar_ready_sim if SIMULATED else _bar_intrinsic(("sync", 3))


def _st_if_intrinsic():
    """``st_if(arr, idx, val, pred)``: ``arr[idx] = val`` (an int64 array) where ``pred``, as
    one predicated store.  A step's publishing lane is one of the warp's 32: a branch around
    its store made the warp diverge and reconverge at every step."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def st_if(typingctx, arr, idx, val, pred):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i32 = ir.IntType(32)
            fty = ir.FunctionType(ir.VoidType(), [ptr.type, ir.IntType(64), i32])
            builder.asm(
                fty,
                "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p st.b64 [$0], $1; }",
                "l,l,r",
                [ptr, args[2], builder.zext(args[3], i32)],
                True,
            )
            return context.get_dummy_value()

        return types.none(arr, idx, types.int64, types.boolean), codegen

    return st_if


def _st_if_sim(arr, idx, val, pred):
    if pred:
        arr[idx] = val


_st_if = _st_if_sim if SIMULATED else _st_if_intrinsic()


@_device
def _poll_atomic(hand, idx):
    """The current value of ``hand[idx]`` as seen in L2 (never a stale L1 line): an atomic
    add of 0."""
    return cuda.atomic.add(hand, idx, 0)


@_device
def _poll_relaxed(hand, idx):
    """The same by ``ld.relaxed.gpu`` (a load, no read-modify-write)."""
    return _ld_relaxed(hand, idx)


#: Development switch (``SDTW_TIMING=1`` in the environment before the first launch): the
#: forward and backward kernels write ``%globaltimer`` stamps (ns) per block into the tail of
#: their boundary buffer, for ``python -m experiments.probe --lag``.  Off, they compile to
#: nothing.  Stamps per block, by ticket: ticket taken, first group of the neighbouring
#: band's row received, last step done.
TIMING = os.environ.get("SDTW_TIMING", "0") == "1" and not SIMULATED
STAMPS = 3


def _sreg64_intrinsic(register: str):
    """An intrinsic that reads the 64-bit special register ``register`` (``%globaltimer``:
    nanoseconds; ``%clock64``: SM cycles) as an int64."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def sreg64(typingctx):
        def codegen(context, builder, signature, args):
            fty = ir.FunctionType(ir.IntType(64), [])
            return builder.asm(fty, f"mov.u64 $0, %{register};", "=l", [], True)

        return types.int64(), codegen

    return sreg64


if TIMING:
    _globaltimer = _sreg64_intrinsic("globaltimer")


@_device
def _stamp(hand, t, q, nblk):
    """Stamp ``q`` of the block with ticket ``t`` (of ``nblk``), if ``TIMING`` (lane 0)."""
    if TIMING and cuda.threadIdx.x == 0:
        hand[hand.shape[0] - 1 - STAMPS * nblk + STAMPS * t + q] = _globaltimer()


@_device
def _take_ticket(hand, tk):
    """This block's ticket: the boundary buffer's last element counts up from ``SENTINEL``."""
    if cuda.threadIdx.x == 0:
        tk[0] = cuda.atomic.add(hand, hand.shape[0] - 1, 1) - SENTINEL
    cuda.syncthreads()
    return tk[0]


# Boundary rows between bands travel as float64 *bits* in an int64 buffer pre-filled with
# ``SENTINEL``, a signalling-NaN pattern that arithmetic never produces (a NaN result is a quiet
# NaN, and +inf is written as +inf), so each value says by itself whether it has been written:
# no progress counter, no fence, no barrier between producer and consumer.  The producer uses a
# plain store (global stores write through to L2; an atomic exchange per step measured ~2x
# slower, its return value serialising the producer) and the consumer reads with an atomic add
# of 0, an L2 operation that never sees a stale L1 line.
SENTINEL = 0x7FF00000DEAD0001


@_device
def _bits_gpu(x):
    return libdevice.double_as_longlong(x)


@_device
def _from_bits_gpu(n):
    return libdevice.longlong_as_double(n)


def _bits_sim(x):
    import numpy as np

    return np.float64(x).view(np.int64)


def _from_bits_sim(n):
    import numpy as np

    return np.int64(n).view(np.float64)


as_bits = _bits_sim if SIMULATED else _bits_gpu
from_bits = _from_bits_sim if SIMULATED else _from_bits_gpu


@_device
def _ring_gpu(j):
    return uint32(j) & RMASK  # unsigned: no negative-index wraparound code in the indexing


@_device
def _below_gpu(a, n):
    """``0 <= a < n`` for ``n >= 0``, as one unsigned comparison."""
    return uint32(a) < uint32(n)


@_device
def _any_lane_gpu(pred):
    return cuda.any_sync(FULL_MASK, pred)


@_device
def _sync_band_gpu():
    # A block is one warp: a warp barrier orders shared memory among its lanes, and (unlike a
    # block barrier) need not wait for the warp's outstanding global atomics.
    cuda.syncwarp(FULL_MASK)


def _ring_sim(j):
    return j & (RING - 1)


def _below_sim(a, n):
    return 0 <= a < n


_sync_band_sim = _sync_warp_sim


ring = _ring_sim if SIMULATED else _ring_gpu
below = _below_sim if SIMULATED else _below_gpu
any_lane = _any_lane_sim if SIMULATED else _any_lane_gpu
sync_band = _sync_band_sim if SIMULATED else _sync_band_gpu


#: A *quiet* kernel (few blocks per SM: latency-bound) publishes its boundary values a group
#: at a time: the columns ``col0 - FLUSH_LAG .. col0 - FLUSH_LAG + G - 1`` at the handoff of the
#: group that starts at step ``col0``, all computed by then (the publishing lane is at most
#: ``TB - 1`` steps behind lane 0).
FLUSH_LAG = TB + G


def _build_handoff(busy: bool):
    """``handoff``, ``flush_rest`` and ``poll`` for a *busy* (``busy``) or a *quiet* kernel.

    Publishing.  The publishing lane's steps keep their values in the shared ring ``pubs``
    (column ``j`` in slot ``(j + plag) % RING``, ``plag`` being the lane's lag behind lane 0:
    its step's slot).  Quiet, they are published from there a group at a time, by lanes
    ``0 .. G - 1`` after the handoff's first barrier, so the steps issue no global store.
    Busy, each step stores its value itself as well: the band below can see it up to 2 steps
    sooner, and the per-group flush's instructions are saved.

    Reading.  Quiet: an atomic add of 0; busy: ``ld.relaxed.gpu``.  Both are served by L2.

    Measured on the H200 (``probe-dev.txt``, run 16; kernel times per training step at
    B = 32, N = 1024, i.e. 1024 blocks, and forwards at B = 1): at B = 32 per-step stores with
    relaxed loads gave forward 737 / backward 461 us, the group flush with atomics 801 / 584;
    at B = 1 the group flush with atomics gave 0.43-0.45 ms at N = 1024 (against 0.56-0.57)
    and 1.21 ms for one band of 8192 columns (against 1.32-1.45 with per-step stores).  (ncu
    had put 11% of one band's stall samples on long-scoreboard waits at 4 places per chunk,
    on the registers of the per-step store or of the prefetched read: run 15.)  The kernels
    of run 28 on turned this around: busy was the faster from 16 blocks up (runs 38-39), and
    it is the GPU default now (:func:`sdtw.cuda._launch.busy`).
    """
    poll = _poll_relaxed if busy else _poll_atomic
    flush = not busy

    @_device
    def publish(hand, pubs, own, fc, lim, publishes, plag):
        """Quiet: column ``fc`` (this lane's) from ``pubs`` to the boundary row, if
        ``0 <= fc < lim``."""
        if flush and publishes and below(fc, lim):
            hand[uint64(own + fc)] = as_bits(pubs[ring(fc + plag)])

    @_device
    def handoff(hand, row, col0, limit, pref, grp, empty, has, pubs, own, publishes, plag):
        """Publish one group of this band's boundary values (quiet), take one group of the
        band before's into ``grp``, and prefetch the next.

        Lanes ``0 .. G - 1`` hold in ``pref`` the bits of columns ``col0 + lane`` of the
        boundary row that starts at flat index ``row`` of ``hand`` (read one group earlier;
        columns ``>= limit`` do not exist and read as ``empty``, and so does the whole group
        unless ``has``: a band at the table's edge calls this too, with ``row`` any valid row,
        so that the calls need no branch; see below).  Wait until all are written (re-reading
        the missing ones), store them in the shared array ``grp`` for the group's steps, and
        return the bits of each lane's column in the next group, read now so that the read's
        latency overlaps this group's steps.  The prefetch is issued after the last barrier,
        which therefore never waits for it, and by every lane, without a branch: lanes
        ``>= G`` read columns further on and columns past the row read its padding column
        ``limit`` (both ignored).  Issued under ``if``, the read's result was moved into
        ``pref``'s register inside the branch, so the warp waited for the L2 round trip right
        there, once per group: about 20% of a band's time (``probe-dev.txt``, runs 12-13: the
        forward of 2 bands x 8192 columns went from 1.62 to 1.15 ms).  A value carried around
        a loop can get the same move, so the kernels call this four times per chunk in
        straight-line code, the result of one call going to the next (in the sm_90 code the
        reads are then followed by independent instructions).
        """
        tid = cuda.threadIdx.x
        col = col0 + tid
        mine = has & (tid < G) & (col < limit)
        while any_lane(mine & (pref == SENTINEL)):
            if mine & (pref == SENTINEL):
                pref = poll(hand, row + col)
        sync_band()  # every lane is done with the previous group (and its ``pubs`` stores)
        if tid < G:
            publish(hand, pubs, own, col0 - FLUSH_LAG + tid, limit, publishes, plag)
            grp[tid] = from_bits(pref) if mine else empty
        sync_band()
        return poll(hand, row + min(col + G, limit))

    @_device
    def flush_rest(hand, pubs, own, send, limit, publishes, plag):
        """Quiet: after ``send`` steps, publish the computed columns that no handoff did yet,
        ``send - FLUSH_LAG .. send - 1 - plag``.  After the last step (``send >= limit +
        TB - 1``) that is all the rest; the fused forward also calls it after each chunk's
        steps, before it computes the next chunk's distances (a long pause for the band below
        otherwise).  A column published twice gets the same value twice."""
        sync_band()
        publish(
            hand,
            pubs,
            own,
            send - FLUSH_LAG + cuda.threadIdx.x,
            min(limit, send - plag),
            publishes,
            plag,
        )

    return handoff, flush_rest, poll


# Staging and write-out address a band through flat views of the global arrays that start at
# the band's first row (``A[base:]``, one 64-bit base per band) with unsigned 32-bit offsets
# ``row M + column`` (under ``32 M`` for any length), and the shared ring through flat
# arrays (row ``r``, slot ``q`` at ``r RING1 + q``), so that each access costs an integer
# multiply-add or two: the 2-D/3-D indexing they replace computed 64-bit strided offsets and
# tested each row, about 50 instructions per row of a chunk's write-out in the sm_90 code
# (ptxas 13.0), 60% of all the instructions a chunk issued.  Rows past the table's last read
# (and write) the last row again, so the unconditional loads stay in bounds.


def _u32_intrinsic():
    """``u32(x)``: ``x`` truncated to an unsigned 32-bit value that the compiler must keep as
    one (an inline-asm move).  Numba computes integer expressions in 64 bits and a truncation
    followed by the index's zero-extension folds into a 64-bit mask, so without it a 32-bit
    offset costs 64-bit multiply-adds and shifts; with it, offset arithmetic narrows to 32 bits
    and the access is one wide multiply-add onto the base (see :func:`band_view`)."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def u32(typingctx, x):
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            v = builder.trunc(args[0], i32) if args[0].type.width > 32 else args[0]
            return builder.asm(ir.FunctionType(i32, [i32]), "mov.b32 $0, $1;", "=r,r", [v], False)

        return types.uint32(x), codegen

    return u32


def _u32_sim(x):
    return uint32(x)


u32 = _u32_sim if SIMULATED else _u32_intrinsic()


def _band_view_intrinsic():
    """``band_view(A, start)``: the 1-D array ``A`` from element ``start`` on (shape and
    strides as ``A``'s: only ever indexed with non-negative offsets, no bounds checks), its data
    pointer passed through inline asm (``cvta.to.global``) so that the compiler cannot fold
    ``start`` back into each access's index: ``view[u32]`` is then one wide multiply-add of
    the 32-bit offset onto a 64-bit base, where ``A[start + u32]`` costs a 64-bit add and a
    64-bit shift-add."""
    from llvmlite import ir
    from numba.core.extending import intrinsic

    @intrinsic
    def band_view(typingctx, arr, start):
        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary, ptr = _item_pointer(context, builder, signature, args)
            i64 = ir.IntType(64)
            fty = ir.FunctionType(i64, [i64])
            raw = builder.asm(
                fty, "cvta.to.global.u64 $0, $1;", "=l,l", [builder.ptrtoint(ptr, i64)], False
            )
            # a global-space pointer, cast back to the generic one the array holds: the
            # compiler infers the global space for the accesses (ld/st.global)
            gptr = builder.inttoptr(raw, ir.PointerType(ptr.type.pointee, addrspace=1))
            out = context.make_array(aryty)(context, builder)
            context.populate_array(
                out,
                data=builder.addrspacecast(gptr, ptr.type),
                shape=ary.shape,
                strides=ary.strides,
                itemsize=ary.itemsize,
                meminfo=ary.meminfo,
                parent=ary.parent,
            )
            return out._getvalue()

        return arr(arr, start), codegen

    return band_view


def _band_view_sim(A, start):
    return A[start:]


band_view = _band_view_sim if SIMULATED else _band_view_intrinsic()


@_device
def _ld8(A, off, M, rmax, r0):
    """Rows ``min(r, rmax)``, ``r = r0 .. r0 + 7``, of column ``off`` of the band view ``A``
    (rows ``M`` apart): eight independent loads, issued back to back, into registers."""
    return (
        A[u32(off + min(r0, rmax) * M)],
        A[u32(off + min(r0 + 1, rmax) * M)],
        A[u32(off + min(r0 + 2, rmax) * M)],
        A[u32(off + min(r0 + 3, rmax) * M)],
        A[u32(off + min(r0 + 4, rmax) * M)],
        A[u32(off + min(r0 + 5, rmax) * M)],
        A[u32(off + min(r0 + 6, rmax) * M)],
        A[u32(off + min(r0 + 7, rmax) * M)],
    )


@_device
def _ld32(A, off, M, rmax):
    """The band's 32 rows of one column of ``A``: four :func:`_ld8` loads."""
    return (
        _ld8(A, off, M, rmax, 0),
        _ld8(A, off, M, rmax, 8),
        _ld8(A, off, M, rmax, 16),
        _ld8(A, off, M, rmax, 24),
    )


@_device
def _slot(po, r, base, sgn):
    """Flat index of row ``r``'s ring slot ``ring(base + sgn r)`` in the plane at ``po``."""
    return uint32(po + r * RING1) + ring(base + sgn * r)


@_device
def _st8(blk, po, v, r0, base, sgn):
    """Store :func:`_ld8`'s values of rows ``r0 ..`` in their ring slots (see :func:`_slot`)."""
    blk[_slot(po, r0, base, sgn)] = v[0]
    blk[_slot(po, r0 + 1, base, sgn)] = v[1]
    blk[_slot(po, r0 + 2, base, sgn)] = v[2]
    blk[_slot(po, r0 + 3, base, sgn)] = v[3]
    blk[_slot(po, r0 + 4, base, sgn)] = v[4]
    blk[_slot(po, r0 + 5, base, sgn)] = v[5]
    blk[_slot(po, r0 + 6, base, sgn)] = v[6]
    blk[_slot(po, r0 + 7, base, sgn)] = v[7]


@_device
def _st32(blk, po, v, base, sgn):
    """Store :func:`_ld32`'s values (see :func:`_st8`)."""
    _st8(blk, po, v[0], 0, base, sgn)
    _st8(blk, po, v[1], 8, base, sgn)
    _st8(blk, po, v[2], 16, base, sgn)
    _st8(blk, po, v[3], 24, base, sgn)


# A float64 distance in a float32 ``P`` travels as the two 32-bit words of its bits, the high
# word in plane 1 and the low word in plane 0 (as float32 bit patterns, never computed with):
# splitting and joining them are register moves, where a float32 high part plus a float32
# low part cost three 64-bit conversions to split and two and an add to join (quarter-rate
# instructions on the pipe of ex2/lg2).


@_device
def _hi_word_gpu(v):
    return libdevice.int_as_float(libdevice.double2hiint(v))


@_device
def _lo_word_gpu(v):
    return libdevice.int_as_float(libdevice.double2loint(v))


@_device
def _join_words_gpu(hi, lo):
    return libdevice.hiloint2double(libdevice.float_as_int(hi), libdevice.float_as_int(lo))


def _hi_word_sim(v):
    import numpy as np

    return np.array([v], dtype=np.float64).view(np.float32)[1]


def _lo_word_sim(v):
    import numpy as np

    return np.array([v], dtype=np.float64).view(np.float32)[0]


def _join_words_sim(hi, lo):
    import numpy as np

    return np.array([lo, hi], dtype=np.float32).view(np.float64)[0]


hi_word = _hi_word_sim if SIMULATED else _hi_word_gpu
lo_word = _lo_word_sim if SIMULATED else _lo_word_gpu
join_words = _join_words_sim if SIMULATED else _join_words_gpu


@_device
def _join8(hi, lo):
    """The float64 values of two :func:`_ld8` loads of high and low words."""
    return (
        join_words(hi[0], lo[0]),
        join_words(hi[1], lo[1]),
        join_words(hi[2], lo[2]),
        join_words(hi[3], lo[3]),
        join_words(hi[4], lo[4]),
        join_words(hi[5], lo[5]),
        join_words(hi[6], lo[6]),
        join_words(hi[7], lo[7]),
    )


@_device
def _join32(hi, lo):
    """:func:`_join8` of two :func:`_ld32` loads."""
    return (
        _join8(hi[0], lo[0]),
        _join8(hi[1], lo[1]),
        _join8(hi[2], lo[2]),
        _join8(hi[3], lo[3]),
    )


# A float32 weight kept in a float64 slot of the staged block (modes whose block holds float64
# distances and float32 weights) travels as its bits, not converted: two register moves
# instead of two conversions (a 64-bit conversion is a quarter-rate instruction on the same
# pipe as ex2/lg2, of which each step already issues five).


@_device
def _pack_gpu(x):
    return libdevice.longlong_as_double(int64(libdevice.float_as_int(x)))


@_device
def _unpack_gpu(v):
    return libdevice.int_as_float(int32(libdevice.double_as_longlong(v)))


def _pack_sim(x):
    import numpy as np

    return np.int64(np.float32(x).view(np.int32)).view(np.float64)


def _unpack_sim(v):
    import numpy as np

    return np.array([v], dtype=np.float64).view(np.float32)[0]


pack_f32 = _pack_sim if SIMULATED else _pack_gpu
unpack_f32 = _unpack_sim if SIMULATED else _unpack_gpu


@_device
def _feat16(A, first, lim, dc):
    """Feature ``dc`` of rows ``first, first + 2, .., first + 30`` of the 2-D array ``A`` (rows
    clamped to ``lim``): sixteen independent loads, issued back to back."""
    return (
        A[min(first, lim), dc],
        A[min(first + 2, lim), dc],
        A[min(first + 4, lim), dc],
        A[min(first + 6, lim), dc],
        A[min(first + 8, lim), dc],
        A[min(first + 10, lim), dc],
        A[min(first + 12, lim), dc],
        A[min(first + 14, lim), dc],
        A[min(first + 16, lim), dc],
        A[min(first + 18, lim), dc],
        A[min(first + 20, lim), dc],
        A[min(first + 22, lim), dc],
        A[min(first + 24, lim), dc],
        A[min(first + 26, lim), dc],
        A[min(first + 28, lim), dc],
        A[min(first + 30, lim), dc],
    )


@_device
def _put1(sh, dd, r, v, ok):
    sh[dd, r] = float64(v) if ok else 0.0


@_device
def _put16(sh, dd, rh, v, first, lim, d_ok):
    """Store :func:`_feat16`'s values as float64 in ``sh[dd, rh + 2 q]`` (zero where the row is
    past ``lim`` or the feature does not exist).  Written out: a loop over ``q`` indexes the
    tuple ``v`` at run time, which Numba compiles to a chain of branches (ptxas 13.0 sm_90:
    ~1000 instructions per staging pass, ISETP 795, BRA 509, BREAK 256)."""
    _put1(sh, dd, rh, v[0], d_ok and first <= lim)
    _put1(sh, dd, rh + 2, v[1], d_ok and first + 2 <= lim)
    _put1(sh, dd, rh + 4, v[2], d_ok and first + 4 <= lim)
    _put1(sh, dd, rh + 6, v[3], d_ok and first + 6 <= lim)
    _put1(sh, dd, rh + 8, v[4], d_ok and first + 8 <= lim)
    _put1(sh, dd, rh + 10, v[5], d_ok and first + 10 <= lim)
    _put1(sh, dd, rh + 12, v[6], d_ok and first + 12 <= lim)
    _put1(sh, dd, rh + 14, v[7], d_ok and first + 14 <= lim)
    _put1(sh, dd, rh + 16, v[8], d_ok and first + 16 <= lim)
    _put1(sh, dd, rh + 18, v[9], d_ok and first + 18 <= lim)
    _put1(sh, dd, rh + 20, v[10], d_ok and first + 20 <= lim)
    _put1(sh, dd, rh + 22, v[11], d_ok and first + 22 <= lim)
    _put1(sh, dd, rh + 24, v[12], d_ok and first + 24 <= lim)
    _put1(sh, dd, rh + 26, v[13], d_ok and first + 26 <= lim)
    _put1(sh, dd, rh + 28, v[14], d_ok and first + 28 <= lim)
    _put1(sh, dd, rh + 30, v[15], d_ok and first + 30 <= lim)


def _fmma_sim(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, xsh, ysh, k0, rb, cb, g, t):
    """The simulator's twin of one lane's ``mma.m16n8k8.f64`` in the fused forward's
    products (it has no warp-collective matrix op): the lane's four outputs (rows
    ``rb + g (+ 8)``, columns ``cb + 2 t (+ 1)``) from the staged features ``k0 .. k0 + 7``
    (``xsh[k, row]``, ``ysh[k, column]``)."""
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


def _fmma_gpu(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3, xsh, ysh, k0, rb, cb, g, t):
    return _dmma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)


fmma = _device(_fmma_sim if SIMULATED else _fmma_gpu)


#: Where the forward kernel gets its costs (a compile-time constant of each kernel).
COST, FUSED, SPLIT, HILO, TILED = "cost", "fused", "split", "hilo", "tiled"


def _build_forward(mode: str, fast: bool, busy: bool, mover: bool = False):
    """Forward kernel; ``mode``, ``fast``, ``busy`` and ``mover`` are compile-time constants
    (closure).

    ``mode``:

    * ``"cost"``: ``X`` is a cost tensor (B, N, M).
    * ``"fused"``: ``X`` (B, N, D), ``Y`` (B, M, D); the kernel computes the squared distances
      itself (float64 dot products of staged features), so it needs no (N, M) buffer at all:
      the no-gradient fused forward.
    * ``"split"`` (float64 only): ``X`` is the float64 weights buffer ``P`` (B, 2, N, M)
      itself, plane 0 holding each cell's float64 squared distance (written by the park
      kernel, :func:`_build_park`; plane 1 not read).
    * ``"hilo"`` (float32 only): ``X`` is the float32 weights buffer ``P`` itself, each
      cell's float64 squared distance held as the two 32-bit words of its bits, the high
      word in plane 1 and the low word in plane 0 (written by the park kernel's float32
      variant; see :func:`join_words`).  The staging joins them, exactly.
    * ``"tiled"`` (float32, with ``mover`` only): ``X`` (B, N, D), ``Y`` (B, M, D) as in
      ``"fused"`` but flat, the weights into ``P`` (iff ``store``); the block's third warp, the
      *distance warp*, computes the distances a column chunk ahead of the mover (see
      ``mover`` below): the fused float32 forward, with gradients or without, in one
      launch, no park kernel.

    In both last modes a band reads its cells' distances before it writes the same cells'
    weights over them, so the distances take no memory beyond ``P``: the fused forward with
    gradients.  The weights are written through ``X`` (the launcher passes placeholders for
    ``P`` and ``Y``: no two arguments alias, which the simulator, copying each argument in
    and back out in turn, requires).

    ``fast`` selects float32 transcendentals (:func:`_softmin3_fast`), used for float32
    inputs; float64 inputs get float64 throughout.  ``busy`` selects the boundary-row style
    of a launch with a block or more per SM scheduler (see :func:`_build_handoff`).

    ``mover`` (not for ``"fused"``): blocks of three warps, launched with ``3 TB`` threads.
    Warp 0 runs the band's steps as above; warp 1, the
    *mover*, does the staging of the costs and the write-out of the weights, which the
    one-warp kernel does between its chunks' steps, so that those instructions no longer sit
    on the steps' warp; warp 2 leaves at once.  (It is there for the warp schedulers: with
    blocks of two warps, four blocks on an SM put their step warps on two of its four
    schedulers, two on each, if warps go to schedulers by their slot modulo 4; with three,
    on four.  The H200 measurements agree with that but do not prove it: see
    :func:`sdtw.cuda._launch.mover`.)  The steps' warp and the mover meet after every group
    of ``G`` steps (:data:`_bar_steps`, :data:`_bar_mover`: two named barriers, one waited
    for by each warp).  In the time of group
    ``g`` the mover takes *item* ``g``: row group ``q = (g + 3) % 4`` (rows ``8 q .. 8 q +
    7``) of column chunk ``cc = (g + 3) // 4``.  It writes the weights of that row group's
    column chunk ``cc - 2`` out (their last step was in group ``g - 1``), stores the costs of
    column chunk ``cc`` into the same ring slots (loaded two items earlier), and issues the
    loads for item ``g + 2``.  Column chunk ``cc``'s row group ``q`` is first read in group
    ``4 cc + q = g + 3``.  In group ``g`` the steps of that row group touch only column chunk
    ``cc - 1``'s slots, so the ring needs no more than its two chunks and the shared memory
    is the one-warp kernel's.  After the last group the mover writes out what is left.  The
    results are the one-warp kernel's, bit for bit (the same steps on the same costs).

    In mode ``"tiled"`` the third warp stays: the *distance warp* computes column chunk
    ``c``'s 32 x 32 squared distances (float64 tensor-core products of features it stages
    itself, :func:`tile_acc`) in its registers, and writes them to a shared tile ``T``
    (:func:`tile_out`) that the mover stages from instead of loading parked distances
    (:func:`titem`).  One tile, handed over by two barriers of their own, each a
    producer-consumer pair (one warp arrives, the other waits; ``bar.arrive`` /
    ``bar.sync`` 2 and 3): the distance warp writes chunk 0's tile and says *ready*; then,
    for each chunk ``c`` with a chunk ``c + 1``, it computes chunk ``c + 1``'s products
    while the band runs chunk ``c - 1``'s and ``c``'s steps, waits until the mover says
    *free* (after item ``(c, 3 G)``, the tile's last reader), writes the tile and says
    *ready*, which the mover waits for before item ``(c + 1, 0)``.  Only the tile's write
    (a few hundred cycles) sits between the mover's two items; the products overlap the
    steps.  Column chunks past ``M`` stage zeros.  The tile's values are the park kernel's
    bit for bit (the same ``mma`` sequence over the features, the norms summed from the
    same four shares per lane), so this mode gives mode ``"hilo"``'s results.
    """
    assert not (mode == SPLIT and fast) and not (mode == HILO and not fast)
    assert not (mover and mode == FUSED)
    assert mode != TILED or (fast and mover)
    fused = mode == FUSED
    tiled = mode == TILED
    split = mode == SPLIT
    hilo = mode == HILO
    parked = split or hilo  # X is P, holding the park kernel's distances
    softmin3 = _softmin3_fast if fast else _softmin3
    handoff, flush_rest, poll = _build_handoff(busy)
    # The staged block holds the cost and then the weights.  float32 suffices when both are
    # float32 anyway (float32 cost, float32 weights): half the shared memory, so twice the
    # resident blocks per SM.  Fused distances are float64: the float64 block.
    blk_t = float32 if (fast and mode == COST) else float64
    w_t = float32 if fast else float64  # the upper weights' own block (half size when fast)
    packed = fast and blk_t == float64  # float32 p_diag kept as its bits (see pack_f32)

    @_device
    def put_pd(pd):
        return pack_f32(pd) if packed else blk_t(pd)

    @_device
    def get_pd(v):
        return unpack_f32(v) if packed else v

    @_device
    def step(blk, wup, rowb, pb, tid, s, sl, top, st, lead, width, pub, scale, xch):
        """One anti-diagonal step of one lane: column ``s - tid`` of its row (at ``rowb`` in
        the flat blocks), ring slot ``sl``.

        ``st`` = (r_diag, r_left, up_next): R of the diagonal and left neighbours and what the
        lane above shuffled down last step; ``top`` is the row above the band at this column
        (lane 0's upper neighbour).  Branch-free: invalid cells select +inf and zero weights.
        ``pub``: this lane publishes its R for the band below (the band's last row), through
        ``pb`` = (shared ring, boundary buffer, its row, the lane's lag ``plag``, M); see
        :func:`_build_handoff`.
        """
        r_diag, r_left, up_next = st
        if fused:
            cost = blk[rowb + sl]  # already scaled
        else:
            cost = float64(blk[rowb + sl]) * scale
        # Off the chain, while the upper value travels: r_left is this lane's value of the
        # step before, r_diag its upper value then (so min(r_diag, BIG) is older still, and
        # mm2 = min(m2, BIG) is one comparison after r_left, alongside m2's).
        m2 = _min2(r_diag, r_left)
        mm2 = _min2(_min2(r_diag, BIG), r_left)
        up = top if tid == 0 else up_next
        ok = below(s - lead, width)
        r, pd, pu = softmin3(r_diag, r_left, m2, mm2, up, cost, ok)  # (inf, 0, 0) where not ok
        if not fused:
            # (The fused mode runs without ``store`` only: its weights would be dead stores,
            # and without them the compiler drops their arithmetic too, the reciprocal
            # included.)
            blk[rowb + sl] = put_pd(pd)
            wup[rowb + sl] = w_t(pu)
        # The publishing lane's value (this lane's column s - tid; see _build_handoff): into
        # its shared ring (the other lanes to spare slots of their own), and, busy, to the
        # boundary row (a predicated store: no branch).
        pubs, hand, own, plag, M = pb
        pubs[sl if pub else uint32(RING + tid)] = r
        if busy:
            _st_if(hand, uint64(own + s - plag), as_bits(r), pub & below(s - plag, M))
        return up, r, from_prev_lane(r, xch, s & 1)

    @_device
    def wcell(w0, w1, blk, wup, jp, M, r):
        """Write row ``r``'s weights of column ``jp`` to the band views ``w0`` (p_diag) and
        ``w1`` (p_up) of ``P``'s two planes."""
        sl = _slot(0, r, jp, 1)
        d = u32(jp + r * M)
        w0[d] = get_pd(blk[sl])
        w1[d] = wup[sl]

    @_device
    def write8(w0, w1, blk, wup, jp, M, rmax, r0):
        """Rows ``min(r, rmax)``, ``r = r0 .. r0 + 7`` (a row past the table writes the last
        row's value again)."""
        wcell(w0, w1, blk, wup, jp, M, min(r0, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 1, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 2, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 3, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 4, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 5, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 6, rmax))
        wcell(w0, w1, blk, wup, jp, M, min(r0 + 7, rmax))

    @_device
    def write_w(w0, w1, blk, wup, jp, M, nr1):
        """Column ``jp``'s weights of the band's rows, coalesced along columns; a full band
        (``nr1 = TB - 1``) with constant row offsets."""
        if jp < M:
            if nr1 == TB - 1:
                write8(w0, w1, blk, wup, jp, M, TB - 1, 0)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 8)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 16)
                write8(w0, w1, blk, wup, jp, M, TB - 1, 24)
            else:
                write8(w0, w1, blk, wup, jp, M, nr1, 0)
                write8(w0, w1, blk, wup, jp, M, nr1, 8)
                write8(w0, w1, blk, wup, jp, M, nr1, 16)
                write8(w0, w1, blk, wup, jp, M, nr1, 24)

    @_device
    def load8(Xb, Xlo, jn, Mu, nr1, r0):
        """The mover's loads of one item: rows ``r0 .. r0 + 7`` (clamped to ``nr1``) of
        column ``jn`` of the source (the two words' planes when ``hilo``)."""
        hi = _ld8(Xb, jn, Mu, nr1, r0)
        lo = _ld8(Xlo, jn, Mu, nr1, r0) if hilo else hi
        return hi, lo

    @_device
    def item(w0, w1, blk, wup, Xb, Xlo, h, cc, r0, M, Mu, nr1, v, store):
        """The mover's item (see :func:`_build_forward`): row group ``r0 .. r0 + 7`` of
        column chunk ``cc``.  ``v`` holds its costs (from :func:`load8`, two items ago);
        returns the loads of the item two on, so that their latency spans two groups of
        steps.  (Loading one item ahead, the first form measured slower, run 64; run 66
        changed this and added the third warp at once, so their shares are not known.)"""
        # (A row group past the band's last row is not written: its rows would be that
        # row's again, whose slot holds the next chunk's cost by then.)
        jp = (cc - 2) * TW + h
        if store and cc >= 2 and jp < M and r0 <= nr1:
            write8(w0, w1, blk, wup, jp, M, nr1, r0)
        hi, lo = v
        _st8(blk, 0, _join8(hi, lo) if hilo else hi, r0, cc * TW + h, 1)
        if r0 >= 2 * G:
            cn, rn = cc + 1, r0 - 2 * G
        else:
            cn, rn = cc, r0 + 2 * G
        v = load8(Xb, Xlo, uint32(min(cn * TW + h, M - 1)), Mu, nr1, rn)
        _bar_mover()
        return v

    @_device
    def write_rest(w0, w1, blk, wup, h, M, nr1, nchunks):
        """The mover's last weights, after its last item: what no item wrote (column chunk
        ``cw``'s row group ``q`` was written by item ``4 cw + q + 5`` if that is below the
        number of items, ``4 nchunks``)."""
        for cw in range(max(nchunks - 3, 0), nchunks):
            jp = cw * TW + h
            if jp < M:
                for q in range(4):
                    if 4 * cw + q + 5 >= 4 * nchunks and q * G <= nr1:
                        write8(w0, w1, blk, wup, jp, M, nr1, q * G)

    @_device
    def stage_pass(Xb, Yb, xsh, ysh, i0, jn0, N, M, D, d0, dd, rh):
        """Features ``d0 .. d0 + DC - 1`` of the band's rows and of columns ``jn0 ..`` into
        ``xsh``/``ysh`` (float64; lanes (dd, rh) take feature ``d0 + dd`` of rows rh, rh + 2, ..
        with all 32 loads issued before the first store)."""
        d = d0 + dd
        dc = min(d, D - 1)
        fx = _feat16(Xb, i0 + rh, N - 1, dc)
        fy = _feat16(Yb, jn0 + rh, M - 1, dc)
        sync_band()  # every lane is done with the previous pass
        _put16(xsh, dd, rh, fx, i0 + rh, N - 1, d < D)
        _put16(ysh, dd, rh, fy, jn0 + rh, M - 1, d < D)
        sync_band()

    @_device
    def products(acc, xsh, ysh, tid, yy, nq):
        """Add the staged pass's products to the warp's 32 x 32 tile of dot products, on the
        float64 tensor cores: for each 8 of its ``DC`` features, 8 ``mma.m16n8k8.f64`` (the
        tile as 2 x 4 tiles of 16 x 8, this lane's accumulators ``acc[16 a + 4 c + q]`` in
        the C layout of :func:`_dmma_intrinsic`: rows ``16 a + g (+ 8)``, columns
        ``8 c + 2 t (+ 1)``, ``g = tid // 4``, ``t = tid % 4``); and this lane's column's
        ``y^2`` to ``yy`` (returned).  Mode ``tiled`` (the distance warp) instead adds the
        squares of the lane's fragment values to the norm shares ``nq`` in the park kernel's
        order (its ``kstep``): features ``t``, then ``t + 4`` of each 8, of rows ``g + 8 m``
        (``nq[m]``) and columns ``g + 8 c`` (``nq[4 + c]``); ``nq`` is unused otherwise."""
        g = tid >> 2
        t = tid & 3
        for k0 in range(0, DC, 8):
            kt = k0 + t
            b = (
                ysh[kt, g],
                ysh[kt + 4, g],
                ysh[kt, g + 8],
                ysh[kt + 4, g + 8],
                ysh[kt, g + 16],
                ysh[kt + 4, g + 16],
                ysh[kt, g + 24],
                ysh[kt + 4, g + 24],
            )
            if tiled:
                for c in range(4):
                    nq[4 + c] += b[2 * c] * b[2 * c]
                    nq[4 + c] += b[2 * c + 1] * b[2 * c + 1]
            for a in range(2):
                r = 16 * a + g
                a0 = xsh[kt, r]
                a1 = xsh[kt, r + 8]
                a2 = xsh[kt + 4, r]
                a3 = xsh[kt + 4, r + 8]
                if tiled:
                    nq[2 * a] += a0 * a0
                    nq[2 * a] += a2 * a2
                    nq[2 * a + 1] += a1 * a1
                    nq[2 * a + 1] += a3 * a3
                for c in range(4):
                    q = 16 * a + 4 * c
                    d = fmma(
                        a0,
                        a1,
                        a2,
                        a3,
                        b[2 * c],
                        b[2 * c + 1],
                        acc[q],
                        acc[q + 1],
                        acc[q + 2],
                        acc[q + 3],
                        xsh,
                        ysh,
                        k0,
                        16 * a,
                        8 * c,
                        g,
                        t,
                    )
                    acc[q], acc[q + 1], acc[q + 2], acc[q + 3] = d
        if not tiled:
            for e in range(DC):
                yv = ysh[e, tid]
                yy += yv * yv
        return yy

    @_device
    def group(blk, wup, rowb, pb, tid, s0, grp, st, lead, width, pub, scale, xch):
        """The G (= 8) steps of one group, unrolled by hand: constant slot offsets from the
        lane's row ``rowb``, and the row above read into registers up front, off the steps'
        dependency chain."""
        sb = ring(s0)  # s0 a multiple of G: the group's slots are sb .. sb + G - 1
        t0, t1, t2, t3 = grp[0], grp[1], grp[2], grp[3]
        t4, t5, t6, t7 = grp[4], grp[5], grp[6], grp[7]
        st = step(blk, wup, rowb, pb, tid, s0, sb, t0, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 1, sb + 1, t1, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 2, sb + 2, t2, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 3, sb + 3, t3, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 4, sb + 4, t4, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 5, sb + 5, t5, st, lead, width, pub, scale, xch)
        st = step(blk, wup, rowb, pb, tid, s0 + 6, sb + 6, t6, st, lead, width, pub, scale, xch)
        return step(blk, wup, rowb, pb, tid, s0 + 7, sb + 7, t7, st, lead, width, pub, scale, xch)

    @_device
    def cell_distance(acc, xn, yn, g, t, a, c, q):
        """Row ``r``, column ``cl`` and squared distance (clamped at 0, NaN kept) of lane
        ``(g, t)``'s accumulator ``(a, c, q)`` of the tile (see :func:`products`), from the
        norms ``xn`` (rows) and ``yn`` (columns)."""
        r = 16 * a + g + 8 * (q >> 1)
        cl = 8 * c + 2 * t + (q & 1)
        v = (xn[r] + yn[cl]) - 2.0 * acc[16 * a + 4 * c + q]
        return r, cl, (0.0 if v < 0.0 else v)

    @_device
    def distances(acc, yn, xn, blk, i0, N, M, j0, tid, scale):
        """Scaled squared distances of this lane's 32 cells of the tile (see
        :func:`products`; columns from ``j0``), from the accumulated products and the norms
        ``xn`` (rows) and ``yn`` (columns, in shared memory), into the ring (zero outside
        the table)."""
        g = tid >> 2
        t = tid & 3
        for a in range(2):
            for c in range(4):
                for q in range(4):
                    r, cl, v = cell_distance(acc, xn, yn, g, t, a, c, q)
                    jl = j0 + cl
                    blk[_slot(0, r, jl, 1)] = v * scale if (i0 + r < N and jl < M) else 0.0

    @_device
    def feat16u(A, o, st, lim):
        """``A[min(o + q st, lim)]``, ``q = 0 .. 15``, of the flat view ``A``: feature ``d`` of
        rows ``r0, r0 + 2, ..`` clamped to the last row, for ``o = r0 D + d``, ``st = 2 D`` and
        ``lim = (N - 1) D + d``.  The offsets are a chain from ``o``, which changes with each
        pass, so that no loop-invariant row offsets get hoisted into registers (clamping
        the rows themselves put ~60 registers of them into the distance warp)."""
        o1 = o + st
        o2 = o1 + st
        o3 = o2 + st
        o4 = o3 + st
        o5 = o4 + st
        o6 = o5 + st
        o7 = o6 + st
        o8 = o7 + st
        o9 = o8 + st
        o10 = o9 + st
        o11 = o10 + st
        o12 = o11 + st
        o13 = o12 + st
        o14 = o13 + st
        o15 = o14 + st
        return (
            A[u32(min(o, lim))],
            A[u32(min(o1, lim))],
            A[u32(min(o2, lim))],
            A[u32(min(o3, lim))],
            A[u32(min(o4, lim))],
            A[u32(min(o5, lim))],
            A[u32(min(o6, lim))],
            A[u32(min(o7, lim))],
            A[u32(min(o8, lim))],
            A[u32(min(o9, lim))],
            A[u32(min(o10, lim))],
            A[u32(min(o11, lim))],
            A[u32(min(o12, lim))],
            A[u32(min(o13, lim))],
            A[u32(min(o14, lim))],
            A[u32(min(o15, lim))],
        )

    @_device
    def put16d(sh, dd, rh, v, d_ok):
        """:func:`_put16` without the rows' checks (rows past the table hold the last row's
        values: their cells are zeroed in :func:`tile_out`, and a cell's value depends on
        its own row and column only): zeros where the feature does not exist."""
        sh[dd, rh] = float64(v[0]) if d_ok else 0.0
        sh[dd, rh + 2] = float64(v[1]) if d_ok else 0.0
        sh[dd, rh + 4] = float64(v[2]) if d_ok else 0.0
        sh[dd, rh + 6] = float64(v[3]) if d_ok else 0.0
        sh[dd, rh + 8] = float64(v[4]) if d_ok else 0.0
        sh[dd, rh + 10] = float64(v[5]) if d_ok else 0.0
        sh[dd, rh + 12] = float64(v[6]) if d_ok else 0.0
        sh[dd, rh + 14] = float64(v[7]) if d_ok else 0.0
        sh[dd, rh + 16] = float64(v[8]) if d_ok else 0.0
        sh[dd, rh + 18] = float64(v[9]) if d_ok else 0.0
        sh[dd, rh + 20] = float64(v[10]) if d_ok else 0.0
        sh[dd, rh + 22] = float64(v[11]) if d_ok else 0.0
        sh[dd, rh + 24] = float64(v[12]) if d_ok else 0.0
        sh[dd, rh + 26] = float64(v[13]) if d_ok else 0.0
        sh[dd, rh + 28] = float64(v[14]) if d_ok else 0.0
        sh[dd, rh + 30] = float64(v[15]) if d_ok else 0.0

    @_device
    def tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, j0, N, M, D, tid):
        """The distance warp's products of its band's rows and columns ``j0 .. j0 + 31``
        (mode ``tiled``), into its registers: ``acc`` (see :func:`products`) and the norm
        shares ``nq`` (see :func:`products`).  ``Xp``, ``Yp``: flat views of the pair's
        x and y; staged ``DC`` features a pass as in :func:`stage_pass` (lane ``(dd, rh)``
        takes feature ``dd`` of rows ``rh, rh + 2, ..``: each load a few lines, where one
        row per lane made each load touch 32 lines)."""
        for r in range(TB):
            acc[r] = 0.0
        for e in range(8):
            nq[e] = 0.0
        dd = tid % DC
        rh = tid // DC
        Du = u32(D)
        st = u32(2 * D)
        xr = u32(i0 + rh)
        yr = u32(j0 + rh)
        xl = u32(N - 1)
        yl = u32(M - 1)
        for d0 in range(0, D, DC):
            d = d0 + dd
            dc = u32(min(d, D - 1))
            fx = feat16u(Xp, xr * Du + dc, st, xl * Du + dc)
            fy = feat16u(Yp, yr * Du + dc, st, yl * Du + dc)
            sync_band()  # every lane is done with the previous pass
            put16d(xsh, dd, rh, fx, d < D)
            put16d(ysh, dd, rh, fy, d < D)
            sync_band()
            products(acc, xsh, ysh, tid, 0.0, nq)

    @_device
    def tile_out(acc, nq, T, xn, yn, part, i0, j0, N, M, tid):
        """:func:`tile_acc`'s squared distances into the tile ``T`` (row, column; float64,
        unscaled, clamped at 0 with NaN kept, zero outside the table): the park kernel's
        values bit for bit, from the same ``mma`` sequence over the features and each norm
        summed as ``(s0 + s1) + (s2 + s3)`` from the same four lanes' shares (``part``: the
        shares by lane; ``xn``/``yn``: the norms; the rows' are recomputed each chunk, the
        same values each time)."""
        for e in range(8):
            part[e, tid] = nq[e]
        sync_band()
        # row / column tid = g + 8 m: shares nq[m] / nq[4 + m] of lanes 4 g .. 4 g + 3
        m = tid >> 3
        s0 = (tid & 7) * 4
        xn[tid] = (part[m, s0] + part[m, s0 + 1]) + (part[m, s0 + 2] + part[m, s0 + 3])
        yn[tid] = (part[m + 4, s0] + part[m + 4, s0 + 1]) + (
            part[m + 4, s0 + 2] + part[m + 4, s0 + 3]
        )
        sync_band()
        g = tid >> 2
        t = tid & 3
        for a in range(2):
            for c in range(4):
                for q in range(4):
                    r, cl, v = cell_distance(acc, xn, yn, g, t, a, c, q)
                    T[r, cl] = v if (i0 + r < N and j0 + cl < M) else 0.0

    @_device
    def tget8(T, r0, h, ok):
        """Rows ``r0 .. r0 + 7`` of column ``h`` of the tile ``T`` (zeros where not ``ok``)."""
        if ok:
            return (
                T[r0, h],
                T[r0 + 1, h],
                T[r0 + 2, h],
                T[r0 + 3, h],
                T[r0 + 4, h],
                T[r0 + 5, h],
                T[r0 + 6, h],
                T[r0 + 7, h],
            )
        return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @_device
    def titem(w0, w1, blk, wup, T, h, cc, r0, M, nr1, ncol, store):
        """:func:`item` in mode ``tiled``: the costs of row group ``r0 ..`` of column chunk
        ``cc`` come from the distance warp's tile ``T`` (zeros past ``M``)."""
        jp = (cc - 2) * TW + h
        if store and cc >= 2 and jp < M and r0 <= nr1:
            write8(w0, w1, blk, wup, jp, M, nr1, r0)
        _st8(blk, 0, tget8(T, r0, h, cc < ncol), r0, cc * TW + h, 1)
        _bar_mover()

    @_kernel
    def forward(X, Y, N, M, D, gamma, lo, hi, P, Rb, out, store):
        """One block per (band, pair).

        cost:  X = cost (B, N, M), Y unused.
        fused: X (B, N, D), Y (B, M, D); the squared norms are computed here (float64).
        tiled: X, Y the same, flat (the distance warp computes the norms).
        split, hilo: X = P holding the distances (see :func:`_build_forward`), Y unused.
        cost, split, hilo and tiled get X flat (``X.view(-1)``).
        P (B, 2, N, M) weights, flat (written iff ``store``), Rb int64 boundary rows (B, nb, M + 1)
        flattened, plus one element, the ticket counter (float64 bits / counter, all
        pre-filled with ``SENTINEL``), out (B,) loss (any float dtype).

        Row ``r`` of the band keeps column ``j`` in ring slot ``(j + r) % RING``, which is
        ``s % RING`` at the step ``s = j + r`` that computes it: the step's slot is the same for
        every lane and a constant offset within a group.  Rows are padded to ``RING + 1``
        entries so that the lanes' accesses fall in distinct banks.
        """
        tx = cuda.threadIdx.x
        tid = tx & (TB - 1) if mover else tx  # the lane (in its warp, with a mover)
        B = out.shape[0]
        nb = (N + TB - 1) // TB
        scale = LOG2E / gamma  # R' = R log2(e) / gamma: see _softmin3
        tk = cuda.shared.array(1, int32)
        t = _take_ticket(Rb, tk)
        _stamp(Rb, t, 0, B * nb)
        k = t // B
        b = t - k * B
        i0 = k * TB
        i = i0 + tid
        own = (b * nb + k) * (M + 1)  # this band's boundary row in the flat Rb
        # This lane's row has cells at columns [jlo, jhi) (the band; none past row N - 1): at
        # step s it computes column s - tid, a cell iff below(s - lead, width).
        jlo = max(i - lo, 0)
        jhi = min(i + hi + 1, M)
        width = jhi - jlo if (i < N and jhi > jlo) else 0
        lead = jlo + tid
        # The lane of the band's last row publishes it for the band below (the last band's,
        # row N - 1, is where the loss is read at the end).
        plag = min(TB - 1, N - 1 - i0)  # the lane of the band's last row publishes it
        pub = tid == plag
        blk = cuda.shared.array(PO1, blk_t)  # cost, then p_diag; row r at r RING1
        if fused:
            # never read or written: the fused forward keeps no weights (8.3 KB less shared
            # memory per block: 8 blocks per SM instead of 6 on Hopper's 228 KB)
            wup = cuda.shared.array(1, w_t)
        else:
            wup = cuda.shared.array(PO1, w_t)  # p_up
        rowb = uint32(tid * RING1)  # this lane's row
        grp = cuda.shared.array(G, float64)
        pubs = cuda.shared.array(PUBS, float64)  # the band's last row (+ spare slots)
        xch = cuda.shared.array((2, TB), float64)
        acc = cuda.local.array(TB, float64)  # products of the next chunk's distances (fused)
        if fused or tiled:
            xsh = cuda.shared.array((DC, TB1), float64)
            ysh = cuda.shared.array((DC, TW1), float64)
        else:
            xsh = cuda.shared.array((1, 1), float64)  # placeholders: never read when unfused
            ysh = xsh
        if tiled:  # the distance warp's tile, its norms and their shares
            T = cuda.shared.array((TB, TW1), float64)
            txn = cuda.shared.array(TB, float64)
            tyn = cuda.shared.array(TW, float64)
            part = cuda.shared.array((8, TB), float64)
        else:
            T = cuda.shared.array((1, 1), float64)  # placeholders: never read
            txn = cuda.shared.array(1, float64)
            tyn = txn
            part = xsh
        ncol = (M + TW - 1) // TW  # column chunks with cells
        nchunks = (M + TB - 1 + TW - 1) // TW
        # Band views (see _ld8): the weights' two planes, and where the costs come from.
        row0 = (2 * b * N + i0) * M  # P[b, 0, i0, 0] (flat)
        nr1 = uint32(min(TB, N - i0) - 1)  # the band's last row
        Wf = X if parked else P
        w0 = band_view(Wf, row0)
        w1 = band_view(Wf, row0 + N * M)
        Mu = uint32(M)
        if split:
            Xb = w0  # this pair's distances (plane 0)
            Xlo = Xb
        elif hilo:
            Xb = w1  # the distances' high words (plane 1)
            Xlo = w0  # and their low words (plane 0)
        elif tiled:
            Xb = w0  # (never read: the distances come from the distance warp's tiles)
            Xlo = Xb
        elif not fused:
            Xb = band_view(X, (b * N + i0) * M)  # the band's rows of the cost
            Xlo = Xb
        if mover and tx >= 2 * TB:
            if tiled:
                # The distance warp (see _build_forward): chunk 0, then chunk c + 1 during
                # chunk c, a meeting with the mover after each.
                nq = cuda.local.array(8, float64)
                Xp = band_view(X, b * N * D)  # this pair's x and y
                Yp = band_view(Y, b * M * D)
                tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, 0, N, M, D, tid)
                tile_out(acc, nq, T, txn, tyn, part, i0, 0, N, M, tid)
                _ready_arrive()
                for c in range(nchunks):
                    if c + 1 < ncol:
                        j1 = (c + 1) * TW
                        tile_acc(Xp, Yp, xsh, ysh, acc, nq, i0, j1, N, M, D, tid)
                        _free_wait()  # the mover is done with chunk c's tile
                        tile_out(acc, nq, T, txn, tyn, part, i0, j1, N, M, tid)
                        _ready_arrive()
            return  # the third warp (see _build_forward)
        if tiled and tx >= TB:
            # The mover of mode tiled: chunk 0's first three row groups from the distance
            # warp's tile, then one item per group, and a meeting with the distance warp
            # before each chunk's second item (chunk c + 1's tile ready).
            h = tid
            _ready_wait()
            for q in range(3):
                _st8(blk, 0, tget8(T, q * G, h, True), q * G, h, 1)
            _bar_mover()
            for c in range(nchunks):
                titem(w0, w1, blk, wup, T, h, c, 3 * G, M, nr1, ncol, store)
                if c + 1 < ncol:
                    _free_arrive()  # chunk c's tile read
                    _ready_wait()  # chunk c + 1's written
                titem(w0, w1, blk, wup, T, h, c + 1, 0, M, nr1, ncol, store)
                titem(w0, w1, blk, wup, T, h, c + 1, G, M, nr1, ncol, store)
                titem(w0, w1, blk, wup, T, h, c + 1, 2 * G, M, nr1, ncol, store)
            if store:
                write_rest(w0, w1, blk, wup, h, M, nr1, nchunks)
            return
        if mover and tx >= TB:
            # The mover (warp 1): column chunk 0's first three row groups now, the loads of
            # items 0 and 1 in flight; then one item per group, a barrier after each (as
            # many as the steps' warp: one after the staging, one per group).
            h = tid
            jn = uint32(min(h, M - 1))
            for q in range(3):
                hi, lo = load8(Xb, Xlo, jn, Mu, nr1, q * G)
                _st8(blk, 0, _join8(hi, lo) if hilo else hi, q * G, h, 1)
            v = load8(Xb, Xlo, jn, Mu, nr1, 3 * G)
            v1 = load8(Xb, Xlo, uint32(min(TW + h, M - 1)), Mu, nr1, 0)
            _bar_mover()
            for c in range(nchunks):
                v = item(w0, w1, blk, wup, Xb, Xlo, h, c, 3 * G, M, Mu, nr1, v, store)
                v1 = item(w0, w1, blk, wup, Xb, Xlo, h, c + 1, 0, M, Mu, nr1, v1, store)
                v = item(w0, w1, blk, wup, Xb, Xlo, h, c + 1, G, M, Mu, nr1, v, store)
                v1 = item(w0, w1, blk, wup, Xb, Xlo, h, c + 1, 2 * G, M, Mu, nr1, v1, store)
            if store:
                write_rest(w0, w1, blk, wup, h, M, nr1, nchunks)
            return
        if fused:
            xn = cuda.shared.array(TB, float64)  # |x_i|^2 of the band's rows
            yn = cuda.shared.array(TW, float64)  # |y_j|^2 of the chunk's columns
            xx = 0.0
            ii = min(i, N - 1)
            for d in range(D):
                xv = float64(X[b, ii, d])
                xx += xv * xv
            xn[tid] = xx  # read after the staging's first barrier
        if tid < G:
            grp[tid] = INF  # the top band's row above (k > 0 overwrites it group by group)
        # (r_diag, r_left, up_next); R[-1, -1] = 0 is lane 0's first diagonal in the top band
        st = (0.0 if (k == 0 and tid == 0) else INF, INF, INF)
        has = k > 0  # a band above to take the row from
        above = own - (M + 1) if has else own  # (the top band reads its own row, ignored)
        pref = poll(Rb, above + min(tid, M))
        pb = (pubs, Rb, own, plag, M)  # where the publishing lane's steps put their values
        dd = tid % DC  # fused staging: lane (dd, rh) takes feature dd of rows rh, rh + 2, ..
        rh = tid // DC
        yy = 0.0
        if fused:
            Xb = X[b]  # this pair's (N, D) and (M, D) sequences
            Yb = Y[b]
            # Chunk 0's distances up front; chunk c + 1's after chunk c's steps.
            for r in range(TB):
                acc[r] = 0.0
            for d0 in range(0, D, DC):
                stage_pass(Xb, Yb, xsh, ysh, i0, 0, N, M, D, d0, dd, rh)
                yy = products(acc, xsh, ysh, tid, yy, acc)
            yn[tid] = yy
            sync_band()  # every lane's column norm in yn
            distances(acc, yn, xn, blk, i0, N, M, 0, tid, scale)
        if not fused and not mover:
            jn = uint32(min(tid, M - 1))
            a = _ld32(Xb, jn, Mu, nr1)
            if hilo:
                a2 = _ld32(Xlo, jn, Mu, nr1)
            else:
                a2 = a
        if mover:
            _bar_steps()  # the mover's first staging
        for c in range(nchunks):
            j0 = c * TW
            jl = j0 + tid  # the column this thread stages
            jn0 = j0 + TW  # the next chunk's first column
            if not fused and not mover:
                # The registers hold chunk c (loaded one chunk ago): into the ring, then load
                # chunk c + 1, in flight during this chunk's steps (clamped, harmless past M).
                # (split, hilo: chunk c's distances were read one chunk ago; its weights go
                # over them one chunk from now, by this block: read before write, same cells.)
                # Rows and columns past the table stage copies of real values (the loads are
                # clamped): their cells are invalid, so the steps never use them.
                if hilo:
                    _st32(blk, 0, _join32(a, a2), jl, 1)
                else:
                    _st32(blk, 0, a, jl, 1)
                jn = uint32(min(jl + TW, M - 1))
                a = _ld32(Xb, jn, Mu, nr1)
                if hilo:
                    a2 = _ld32(Xlo, jn, Mu, nr1)
            if not mover:
                sync_band()
            # TW // G = 4 groups, unrolled (see handoff: no branch, no loop around it); with
            # a mover, a block barrier after each (see item)
            pref = handoff(Rb, above, j0, M, pref, grp, INF, has, pubs, own, True, plag)
            if TIMING and c == 0:
                _stamp(Rb, t, 1, B * nb)
            st = group(blk, wup, rowb, pb, tid, j0, grp, st, lead, width, pub, scale, xch)
            if mover:
                _bar_steps()
            pref = handoff(Rb, above, j0 + G, M, pref, grp, INF, has, pubs, own, True, plag)
            st = group(blk, wup, rowb, pb, tid, j0 + G, grp, st, lead, width, pub, scale, xch)
            if mover:
                _bar_steps()
            pref = handoff(Rb, above, j0 + 2 * G, M, pref, grp, INF, has, pubs, own, True, plag)
            st = group(blk, wup, rowb, pb, tid, j0 + 2 * G, grp, st, lead, width, pub, scale, xch)
            if mover:
                _bar_steps()
            pref = handoff(Rb, above, j0 + 3 * G, M, pref, grp, INF, has, pubs, own, True, plag)
            st = group(blk, wup, rowb, pb, tid, j0 + 3 * G, grp, st, lead, width, pub, scale, xch)
            if mover:
                _bar_steps()
                continue
            if fused:  # (quiet) what this chunk's steps completed, before the distances
                flush_rest(Rb, pubs, own, j0 + TW, M, True, plag)
            if fused and jn0 < M:
                # Chunk c + 1's distances, after this chunk's steps.  (Interleaving them with
                # the steps, two features per step, was 20-27% slower on the H200.)
                for r in range(TB):
                    acc[r] = 0.0
                yy = 0.0
                for d0 in range(0, D, DC):
                    stage_pass(Xb, Yb, xsh, ysh, i0, jn0, N, M, D, d0, dd, rh)
                    yy = products(acc, xsh, ysh, tid, yy, acc)
                yn[tid] = yy  # (read after the barriers below)
            sync_band()
            # Chunk c - 1 is complete now: write its weights out, coalesced along columns.
            if store and c > 0:
                write_w(w0, w1, blk, wup, j0 - TW + tid, M, nr1)
            sync_band()
            if fused and jn0 < M:
                # chunk c + 1's distances, into chunk c - 1's slots (written out just above)
                distances(acc, yn, xn, blk, i0, N, M, jn0, tid, scale)
        flush_rest(Rb, pubs, own, nchunks * TW, M, True, plag)
        _stamp(Rb, t, 2, B * nb)
        if i == N - 1:  # the publishing lane of the last band: its own shared store
            out[b] = pubs[ring(M - 1 + plag)] * (gamma * LN2)
        if store and not mover:
            write_w(w0, w1, blk, wup, (nchunks - 1) * TW + tid, M, nr1)

    return forward


# In-sweep gradients (the backward with its gradient warp)
# ------------------------------------------------------------------
# From x and y (squared Euclidean), the gradients of a pair's value are
#   g_x[i] = 2 (rows(E)_i x_i - sum_j E_ij y_j),  g_y[j] = 2 (cols(E)_j y_j - sum_i E_ij x_i).
# The backward's mover variant has a third warp per band that is idle otherwise; with ``grads``
# it becomes the *gradient warp*: the mover copies each position chunk's 32 x 32 block of E
# from the ring into one of two shared tiles (float32, zeros outside the table) instead of
# writing it to ``P``, and the gradient warp splits it into TF32 high parts and remainders as
# it loads its fragments and multiplies them on the tensor cores (``mma.sync.m16n8k8`` TF32,
# three products per block: the 3xTF32 split, float32 accumulation) while the band's warp
# runs the next chunk's steps:
#   * g_x: the tile (band rows x positions) times y's chunk rows (positions x features),
#     accumulated in registers over the band's sweep (2 x nt accumulator tiles of 16 x 8 for nt
#     feature tiles of 8, a kernel variant for each nt in SWEEP_TILES: D <= 64),
#     written once at the end with the row sums (``2 (rows x - acc)``);
#   * g_y: the tile's transpose times x's band rows, per 8-feature tile, added to a zeroed g_y
#     with float32 atomics (``2 (cols y - acc)``, each band its own share of the column sums).
# So E is never written to memory, and no second kernel reads it.  The tiles pass from the
# mover to the gradient warp through two named barriers (2: "free", 3: "ready", as mode tiled's
# forward): the mover waits until the gradient warp has freed chunk k - 1 before it says chunk
# k is ready (so that the gradient warp's arrivals never complete a generation on their own),
# and a tile is written again only two chunks later.
TS = TB + 4  # tile row stride: the g_x fragment loads conflict-free, the g_y ones 2-way
TT = TB * TS  # one tile
TT2 = 2 * TT  # the two tiles (by chunk parity)
TB2 = 2 * TB
SWEEP_MAX_D = 64  # g_x's accumulators: 2 x 8 tiles of 16 x 8 in registers
#: The gradient warp's variants by feature tiles (``D <= 8 nt``; see :func:`_build_sweep`).
SWEEP_TILES = (1, 2, 4, 8)


def sweep_tiles(D: int) -> int:
    """The in-sweep gradients' variant (:data:`SWEEP_TILES`) for ``D <= SWEEP_MAX_D``
    features: the fewest feature tiles of 8 that hold them."""
    nt = (D + 7) // 8
    return next(n for n in SWEEP_TILES if n >= nt)


def _tf32_intrinsic():
    """``tf32(x)``: ``x`` rounded to TF32 (10 mantissa bits, to nearest, ties away: the
    rounding of ``cvt.rna.tf32.f32``) as a float32, by two integer operations on its bits
    (half a TF32 unit added to the magnitude, the low 13 bits cleared): ``cvt.rna`` itself
    compiles to a sequence that also handles NaN and infinity (offline SASS: FSETP and SEL
    around it), which E, x and y never hold.  Only float32 values within a TF32 unit of the
    largest would round differently (to infinity)."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def tf32(typingctx, x):
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            r = builder.asm(
                ir.FunctionType(i32, [i32]),
                "{ .reg .b32 t; add.u32 t, $1, 4096; and.b32 $0, t, -8192; }",
                "=r,r",
                [builder.bitcast(args[0], i32)],
                False,
            )
            return builder.bitcast(r, ir.FloatType())

        return types.float32(types.float32), codegen

    return tf32


def _tf32_sim(x):
    """The simulator's :func:`tf32`: the same rounding on the float32 bits."""
    bits = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    bits = (bits + 0x1000) & 0xFFFFE000
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def _mma_intrinsic(tf32: bool):
    """``(d0, d1, d2, d3) = mma.sync.m16n8k8.row.col(a0..a3, b0, b1, c0..c3)`` for one lane,
    float64 (``tf32`` False: :func:`_dmma_intrinsic`) or TF32 products with float32
    accumulators (``tf32``: the fragments float32 bits of TF32 values, whose low 13 mantissa
    bits are ignored; the same fragment layout).  Warp-collective."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    kind = "f32.tf32.tf32.f32" if tf32 else "f64.f64.f64.f64"
    nt = types.float32 if tf32 else types.float64

    @intrinsic
    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        sig = types.UniTuple(nt, 4)(*([nt] * 10))

        def codegen(context, builder, signature, args):
            ft = ir.FloatType() if tf32 else ir.DoubleType()
            if tf32:  # (A and B as .b32 registers)
                i32 = ir.IntType(32)
                ins = [i32] * 6 + [ft] * 4
                ops = [builder.bitcast(a, i32) for a in args[:6]] + list(args[6:])
                cons = ["=f"] * 4 + ["r"] * 6 + ["f"] * 4
            else:
                ins, ops, cons = [ft] * 10, list(args), ["=d"] * 4 + ["d"] * 10
            res = builder.asm(
                ir.FunctionType(ir.LiteralStructType([ft] * 4), ins),
                f"mma.sync.aligned.m16n8k8.row.col.{kind} {{$0, $1, $2, $3}}, "
                "{$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                ",".join(cons),
                ops,
                True,
                name="tmma" if tf32 else "dmma",
            )
            out = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, out)

        return sig, codegen

    return mma


if not SIMULATED:
    _tmma = _mma_intrinsic(tf32=True)
tf32 = _tf32_sim if SIMULATED else _tf32_intrinsic()


@_device
def _split2(v0, v1):
    """TF32 high parts and float32 remainders of two values."""
    h0 = tf32(v0)
    h1 = tf32(v1)
    return (h0, h1), (v0 - h0, v1 - h1)


@_device
def _split4(v):
    """:func:`_split2` of a fragment of four values."""
    h01, l01 = _split2(v[0], v[1])
    h23, l23 = _split2(v[2], v[3])
    return (h01[0], h01[1], h23[0], h23[1]), (l01[0], l01[1], l23[0], l23[1])


@_device
def _tfrag(T, base, down, right):
    """A lane's A fragment of a 16 x 8 block of the flat tile ``T`` at ``base`` (its element
    ``[g, t]``): ``[g, t], [g + 8, t], [g, t + 4], [g + 8, t + 4]``, row steps ``down``,
    column steps ``right``."""
    return (T[base], T[base + 8 * down], T[base + 4 * right], T[base + 8 * down + 4 * right])


def _cp_async_intrinsic(size: int):
    """``cp_async(S, i, A, j)``: ``S[i .. i + n) = A[j .. j + n)`` (float32, ``n = size // 4``;
    ``S`` in shared, ``A`` in global memory, both addresses ``size``-byte aligned) as an
    asynchronous copy (``cp.async.ca.shared.global``, ``size`` bytes): no register holds the
    values, and the issuing thread goes on until :func:`cp_wait`."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def cp_async(typingctx, S, i, A, j):
        def codegen(context, builder, signature, args):
            _, dst = _item_pointer(context, builder, signature, args)
            _, src = _item_pointer(context, builder, signature, args, 2)
            i64 = ir.IntType(64)
            builder.asm(
                ir.FunctionType(ir.VoidType(), [i64, i64]),
                "{ .reg .u64 s, g; cvta.to.shared.u64 s, $0; cvta.to.global.u64 g, $1; "
                f"cp.async.ca.shared.global [s], [g], {size}; }}",
                "l,l",
                [builder.ptrtoint(dst, i64), builder.ptrtoint(src, i64)],
                True,
            )
            return context.get_dummy_value()

        return types.void(S, i, A, j), codegen

    return cp_async


def _cp_wait_intrinsic():
    """``cp_wait()``: commit this thread's :func:`cp_async` copies and wait until they are all
    done (``cp.async.commit_group; cp.async.wait_all``); other lanes' copies are seen after a
    warp barrier."""
    text = "cp.async.commit_group; cp.async.wait_all;"
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def cp_wait(typingctx):
        def codegen(context, builder, signature, args):
            builder.asm(ir.FunctionType(ir.VoidType(), []), text, "~{memory}", [], True)
            return context.get_dummy_value()

        return types.void(), codegen

    return cp_wait


# The simulator's asynchronous copies land as late as the hardware may let them: each thread
# keeps its copies pending (the source read at issue: x and y are not written during a
# launch) and writes them to shared memory only at the wait that covers them, so a read of a
# staged row before its wait sees what was there before, and a test fails, where copies that
# land at once (as the simulator's first form did) would hide the missing wait.
_SIM_COPIES = threading.local()


def _sim_pending() -> list:
    """This thread's copies not yet waited for: a list of commit groups, the last one open."""
    groups = getattr(_SIM_COPIES, "groups", None)
    if groups is None:
        groups = _SIM_COPIES.groups = [[]]
    return groups


def _cp_async_sim(S, i, A, j):
    _sim_pending()[-1].append((S, i, A[j]))


def _cp_async4_sim(S, i, A, j):
    group = _sim_pending()[-1]
    for q in range(4):
        group.append((S, i + q, A[j + q]))


def _cp_wait_sim():
    """``cp.async.commit_group; cp.async.wait_all``: every pending copy lands."""
    for group in _sim_pending():
        for S, i, v in group:
            S[i] = v
    _SIM_COPIES.groups = [[]]


def _red2_intrinsic():
    """``red2(A, j, v0, v1)``: ``A[j] += v0; A[j + 1] += v1`` (float32, global memory, ``j``
    even: an 8-byte aligned pair) as one vector reduction, ``red.global.add.v2.f32`` (sm_90,
    PTX 8.1): half the instructions of two ``cuda.atomic.add``, whose results are not read."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def red2(typingctx, A, j, v0, v1):
        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i64, f32 = ir.IntType(64), ir.FloatType()
            builder.asm(
                ir.FunctionType(ir.VoidType(), [i64, f32, f32]),
                "{ .reg .u64 g; cvta.to.global.u64 g, $0; red.global.add.v2.f32 [g], {$1, $2}; }",
                "l,f,f",
                [builder.ptrtoint(ptr, i64), args[2], args[3]],
                True,
            )
            return context.get_dummy_value()

        return types.void(A, j, v0, v1), codegen

    return red2


def _red2_sim(A, j, v0, v1):
    cuda.atomic.add(A, j, v0)
    cuda.atomic.add(A, j + 1, v1)


cp_async = _cp_async_sim if SIMULATED else _cp_async_intrinsic(4)
cp_async4 = _cp_async4_sim if SIMULATED else _cp_async_intrinsic(16)
cp_wait = _cp_wait_sim if SIMULATED else _cp_wait_intrinsic()
red2 = _red2_sim if SIMULATED else _red2_intrinsic()
#: The staged rows' alignment: 16 bytes for :data:`cp_async4` (the simulator takes none).
SW_ALIGN = None if SIMULATED else 16


@_device
def _mma_acc(acc, a, n, A, b0, b1):
    """``acc[a, n] += A B`` (one TF32 mma, :func:`_mma_intrinsic`)."""
    c0, c1, c2, c3 = acc[a, n, 0], acc[a, n, 1], acc[a, n, 2], acc[a, n, 3]
    acc[a, n, 0], acc[a, n, 1], acc[a, n, 2], acc[a, n, 3] = _tmma(
        A[0], A[1], A[2], A[3], b0, b1, c0, c1, c2, c3
    )


def _sweep_sw(nt_max: int) -> int:
    """The staged rows' stride for :func:`_build_sweep` ``(nt_max)``: the features and 8 more
    (4 more words of 8 per row move each lane's fragment loads to their own banks: a stride of
    8 or 24 mod 32), 8 for one feature tile."""
    return 8 * nt_max + 8 if nt_max > 1 else 8


def _build_sweep(nt_max: int):
    """The gradient warp's device functions for ``D <= 8 nt_max`` (``nt_max`` in
    :data:`SWEEP_TILES`): its accumulators are ``(2, nt_max, 4)`` per lane, and its products
    take ``ng = min(nt_max, 4)`` feature tiles per group (:func:`mma3_group`: ``6 ng``
    independent mma).  One kernel for every ``D <= 64`` (``nt_max = 8``) did the products of
    four feature tiles at ``D = 1`` too: 192 mma per chunk where 48 do.  Returns
    ``(sw, cp_rows, gx_chunk, gy_chunk, gx_out)``; ``sw``: the staged rows' stride."""
    ng = min(nt_max, 4)
    sw = _sweep_sw(nt_max)

    @_device
    def cp_rows(S, A, o, step, cl, D, lane):
        """The gradient warp's copies of 32 rows of x or y into the staged rows ``S`` (row
        stride ``sw``, by :func:`cp_async`), a row per lane: lane ``k`` copies row ``o + step
        k`` clamped to ``cl`` (at most ``cl`` for ``step > 0``, at least for ``step < 0``: a
        real row, whose products with E's zeros vanish), its ``D`` features; 16 bytes a copy
        where ``D`` is a multiple of 4 (``A``'s rows then 16-byte aligned: the launcher's
        ``x`` and ``y`` are), else 4.  Features past ``D`` are left as they are: they only
        meet output columns that are never stored."""
        r = o + step * lane
        r = min(r, cl) if step > 0 else max(r, cl)
        src = u32(r * D)
        dst = uint32(lane * sw)
        if D & 3 == 0:
            for q in range(D >> 2):
                f = uint32(4 * q)
                cp_async4(S, dst + f, A, src + f)
        else:
            for f in range(D):
                cp_async(S, uint32(dst + f), A, src + f)

    @_device
    def mma3_group(acc, n0, ah0, al0, ah1, al1, bh, bl):
        """``acc[a, n0 + n] += A_a B_n`` for TF32-split operands (``A = ah + al``, ``B = bh +
        bl``): ``al bh + ah bl + ah bh``, the small products first (3xTF32; ``al bl``
        dropped), of the row halves' A fragments ``a`` and ``ng`` B fragments (``bh[n]``,
        ``bl[n]``), by kind: ``2 ng`` independent mma between two on the same accumulator.
        (The three products of one accumulator one after another, each waiting for the last,
        left the tensor cores idle: offline SASS, HMMA pairs and NOPs; runs 124-128, the
        backward 3.5-4x the one that writes E.)"""
        for n in range(ng):
            _mma_acc(acc, 0, n0 + n, al0, bh[n, 0], bh[n, 1])
            _mma_acc(acc, 1, n0 + n, al1, bh[n, 0], bh[n, 1])
        for n in range(ng):
            _mma_acc(acc, 0, n0 + n, ah0, bl[n, 0], bl[n, 1])
            _mma_acc(acc, 1, n0 + n, ah1, bl[n, 0], bl[n, 1])
        for n in range(ng):
            _mma_acc(acc, 0, n0 + n, ah0, bh[n, 0], bh[n, 1])
            _mma_acc(acc, 1, n0 + n, ah1, bh[n, 0], bh[n, 1])

    @_device
    def split_b(S, sb, bh, bl):
        """The B fragments of ``ng`` 8-feature tiles of the staged rows ``S`` (the lane's
        ``[t, g]`` of tile ``n`` at ``S[sb + 8 n]``, ``[t + 4, g]`` ``4 sw`` on), split."""
        for n in range(ng):
            (h0, h1), (l0, l1) = _split2(S[sb + 8 * n], S[sb + 4 * sw + 8 * n])
            bh[n, 0] = h0
            bh[n, 1] = h1
            bl[n, 0] = l0
            bl[n, 1] = l1

    def gx_chunk_gpu(TH, tb, YS, nt, acc, g, t):
        """``acc += tile (rows x positions) @ y (positions x features)`` for one chunk: the
        lane's accumulators ``acc[a, n]`` of rows ``16 a + g (+ 8)``, features ``8 n + 2 t
        (+ 1)``, ``ng`` feature tiles at a time (:func:`mma3_group`).  ``YS``: the chunk's
        rows of y by position (staged; positions past the table hold a real row, and the tile
        zeros there); features past ``D`` hold whatever was there and only reach accumulators
        that are never stored."""
        bh = cuda.local.array((ng, 2), float32)
        bl = cuda.local.array((ng, 2), float32)
        for kk in range(TB // 8):
            base = uint32(tb + g * TS + 8 * kk + t)
            ah0, al0 = _split4(_tfrag(TH, base, TS, 1))
            ah1, al1 = _split4(_tfrag(TH, base + 16 * TS, TS, 1))
            yb = uint32((8 * kk + t) * sw + g)
            for h in range(nt_max // ng):
                if ng * h < nt:
                    split_b(YS, yb + 8 * ng * h, bh, bl)
                    mma3_group(acc, ng * h, ah0, al0, ah1, al1, bh, bl)

    def gx_chunk_sim(TH, tb, YS, nt, acc, g, t):
        """The simulator's twin of ``gx_chunk_gpu`` (no warp-collective mma there): the
        lane's outputs straight from the tile."""
        for a in range(2):
            for n in range(nt):
                for q in range(4):
                    r = 16 * a + g + 8 * (q >> 1)
                    f = 8 * n + 2 * t + (q & 1)
                    s = float32(0.0)
                    for p in range(TB):
                        e = TH[tb + r * TS + p]
                        s += e * YS[p * sw + f]
                    acc[a, n, q] += s

    @_device
    def gy_out(CS, cb, YS, GYp, jtop, D, n, g, t, p0, c):
        """Add the lane's share ``2 (cols y - c)`` of positions ``p0 + g (+ 8)``, features
        ``8 n + 2 t (+ 1)`` to ``GYp``."""
        for q in range(4):
            p = p0 + g + 8 * (q >> 1)
            f = 8 * n + 2 * t + (q & 1)
            j = jtop - p
            if j >= 0 and f < D:
                val = float32(2.0) * (CS[cb + p] * YS[uint32(p * sw + f)] - c[q])
                cuda.atomic.add(GYp, u32(j * D + f), val)

    @_device
    def gy_out_full(CS, cb, YS, GYp, jtop, D, n, g, t, p0, c):
        """:func:`gy_out` where every position is a column of the table and every feature is
        below ``D`` (a whole chunk, ``D = 8 nt``): each position's two features as one
        :func:`red2` (an 8-byte aligned pair: ``D`` and ``f`` even), no tests.  (Four
        atomics with a test each took ~40 SASS instructions per accumulator tile, ~1340 of
        the ~3200 per chunk at ``D = 64``: offline SASS of 13c8e8b.)"""
        f = 8 * n + 2 * t
        for h in range(2):
            p = p0 + g + 8 * h
            cs = CS[cb + p]
            o = uint32(p * sw + f)
            v0 = float32(2.0) * (cs * YS[o] - c[2 * h])
            v1 = float32(2.0) * (cs * YS[o + 1] - c[2 * h + 1])
            red2(GYp, u32((jtop - p) * D + f), v0, v1)

    @_device
    def whole_chunk(jtop, D, nt):
        """Whether the chunk whose position 0 is column ``jtop`` takes :func:`gy_out_full`:
        all its columns in the table and ``D = 8 nt``."""
        return jtop >= TW - 1 and D == 8 * nt

    def gy_chunk_gpu(TH, tb, CS, cb, XS, YS, GYp, jtop, D, nt, g, t):
        """``g_y[j] += 2 (cols_j y_j - sum_r tile[r, p] x_r)`` over this chunk's positions
        ``p`` (column ``j = jtop - p``) and the band's rows ``r`` (``XS``: staged, rows past
        the band's last a copy of it, which the tile's zeros multiply), ``ng`` 8-feature tiles
        at a time (the tile's fragments loaded and split once for them; :func:`mma3_group`),
        by float32 atomics into ``GYp`` (this pair's g_y, flat, zeroed; paired vector
        reductions on whole chunks with ``D = 8 nt``, :func:`gy_out_full`).  ``CS[cb + p]``:
        the band's column sums of E."""
        cy = cuda.local.array((2, ng, 4), float32)
        bh = cuda.local.array((ng, 2), float32)
        bl = cuda.local.array((ng, 2), float32)
        full = whole_chunk(jtop, D, nt)
        for h in range(nt_max // ng):
            if ng * h < nt:
                for a in range(2):
                    for n in range(ng):
                        for q in range(4):
                            cy[a, n, q] = float32(0.0)
                for kk in range(TB // 8):
                    # the tile's transpose as A: element [p, r] at T[r, p]
                    base = uint32(tb + (8 * kk + t) * TS + g)
                    ah0, al0 = _split4(_tfrag(TH, base, 1, TS))
                    ah1, al1 = _split4(_tfrag(TH, base + 16, 1, TS))
                    split_b(XS, uint32((8 * kk + t) * sw + 8 * ng * h + g), bh, bl)
                    mma3_group(cy, 0, ah0, al0, ah1, al1, bh, bl)
                for n in range(ng):
                    if ng * h + n < nt:
                        for a in range(2):
                            c = (cy[a, n, 0], cy[a, n, 1], cy[a, n, 2], cy[a, n, 3])
                            if full:
                                gy_out_full(CS, cb, YS, GYp, jtop, D, ng * h + n, g, t, 16 * a, c)
                            else:
                                gy_out(CS, cb, YS, GYp, jtop, D, ng * h + n, g, t, 16 * a, c)

    def gy_chunk_sim(TH, tb, CS, cb, XS, YS, GYp, jtop, D, nt, g, t):
        """The simulator's twin of ``gy_chunk_gpu``: the lane's outputs from the tile (by
        :func:`gy_out_full` where the GPU's takes it)."""
        full = whole_chunk(jtop, D, nt)
        for n in range(nt):
            for a in range(2):
                c = [float32(0.0)] * 4
                for q in range(4):
                    p = 16 * a + g + 8 * (q >> 1)
                    f = 8 * n + 2 * t + (q & 1)
                    for r in range(TB):
                        e = TH[tb + r * TS + p]
                        c[q] += e * XS[r * sw + f]
                out = gy_out_full if full else gy_out
                out(CS, cb, YS, GYp, jtop, D, n, g, t, 16 * a, (c[0], c[1], c[2], c[3]))

    @_device
    def gx_out(acc, RS, XS, GXp, D, nt, nr1, g, t):
        """The band's g_x, ``2 (rows x - acc)`` (rows up to ``nr1``, features below ``D``)."""
        for a in range(2):
            for n in range(nt_max):
                if n < nt:
                    for q in range(4):
                        r = 16 * a + g + 8 * (q >> 1)
                        f = 8 * n + 2 * t + (q & 1)
                        if r <= nr1 and f < D:
                            v = RS[r] * XS[uint32(r * sw + f)] - acc[a, n, q]
                            GXp[u32(r * D + f)] = float32(2.0) * v

    gx_chunk = _device(gx_chunk_sim if SIMULATED else gx_chunk_gpu)
    gy_chunk = _device(gy_chunk_sim if SIMULATED else gy_chunk_gpu)
    return sw, cp_rows, gx_chunk, gy_chunk, gx_out


def _build_backward(fast: bool, busy: bool, mover: bool = False, grads: int = 0):
    """Backward kernel; ``fast`` (float32 weights) stages them in a float32 block; ``busy`` as
    in :func:`_build_forward`.

    ``grads`` (float32, with ``mover``; 0: none): the gradients wrt x and y in the sweep, E
    never written (see "In-sweep gradients" above this function), for ``D <= 8 grads``
    (:func:`_build_sweep`): the third warp is the gradient warp, the mover writes E's chunks
    into its tiles instead of ``P``.

    ``mover``: as the forward's (three-warp blocks, a barrier of the first two after every
    group), with *lag groups* for row groups: the band's rows by their lag ``TB - 1 - r``
    behind the leading (bottom) row, lag group ``q`` being rows ``24 - 8 q .. 31 - 8 q``, and
    *positions* ``M - 1 - j`` for columns.  Item ``g`` writes E of lag group ``q = (g + 3) % 4``
    of position chunk ``cc - 2`` out (``cc = (g + 3) // 4``) and stages that lag group's
    weights of position chunk ``cc``; the timing is the forward's with lag for row.  A column's
    sum over the band's rows is four partial sums, one per item, added to ``sums`` after the
    fourth: in the one-warp kernel's order for a full band, by lag group for the last, partial
    one (the one-warp kernel adds its rows one by one there: the same sum, rounded
    differently).  The mover also zeroes the ring first (see below)."""
    blk_t = float32 if fast else float64
    handoff, flush_rest, poll = _build_handoff(busy)
    assert not grads or (fast and mover), "in-sweep gradients: float32, mover variant"
    assert not grads or grads in SWEEP_TILES, grads
    ntm = max(grads, 1)  # (the gradient warp's code, compiled only with grads)
    sw, cp_rows, gx_chunk, gy_chunk, gx_out = _build_sweep(ntm)
    tsw = TB * sw

    @_device
    def ecell(ev_view, blk, pp, jp, M, r):
        """Row ``r``'s E of position ``pp`` (column ``jp``) from the ring to ``E``'s band view;
        returns it as float64."""
        ev = blk[_slot(PO1, r, pp + TB - 1, -1)]
        ev_view[u32(jp + r * M)] = ev
        return float64(ev)

    @_device
    def ecol8(ev_view, blk, pp, jp, M, r0):
        """:func:`ecell` of rows ``r0 .. r0 + 7``, their sum."""
        c0 = ecell(ev_view, blk, pp, jp, M, r0) + ecell(ev_view, blk, pp, jp, M, r0 + 1)
        c1 = ecell(ev_view, blk, pp, jp, M, r0 + 2) + ecell(ev_view, blk, pp, jp, M, r0 + 3)
        c2 = ecell(ev_view, blk, pp, jp, M, r0 + 4) + ecell(ev_view, blk, pp, jp, M, r0 + 5)
        c3 = ecell(ev_view, blk, pp, jp, M, r0 + 6) + ecell(ev_view, blk, pp, jp, M, r0 + 7)
        return (c0 + c1) + (c2 + c3)

    @_device
    def ecol8p(ev_view, blk, pp, jp, M, r0, nr1):
        """:func:`ecell` of the rows ``r0 .. r0 + 7`` up to ``nr1`` (a partial band), their sum
        in row order (the mover's)."""
        cs = 0.0
        for r in range(r0, r0 + G):
            if r <= nr1:
                cs += ecell(ev_view, blk, pp, jp, M, r)
        return cs

    @_device
    def load8w(Pd, Pu, jn, Mu, nr1, r0):
        """The mover's loads of one item: rows ``r0 .. r0 + 7`` (clamped to ``nr1``) of
        column ``jn`` of both weight planes."""
        return _ld8(Pd, jn, Mu, nr1, r0), _ld8(Pu, jn, Mu, nr1, r0)

    @_device
    def wout(Pu, blk, h, cw, r0, M, nr1):
        """The mover's write-out of E, rows ``r0 .. r0 + 7`` (up to ``nr1``; none if ``r0 >
        nr1``: those slots may hold the next chunk's weights by then) of position ``cw TW + h``
        of position chunk ``cw`` (none if ``cw < 0`` or past the table), and their sum."""
        pp = cw * TW + h
        jp = M - 1 - pp
        c8 = 0.0
        if cw >= 0 and jp >= 0 and r0 <= nr1:
            if nr1 == TB - 1:
                c8 = ecol8(Pu, blk, pp, jp, M, r0)
            else:
                c8 = ecol8p(Pu, blk, pp, jp, M, r0, nr1)
        return c8

    @_device
    def tout(TH, blk, h, cw, r0, M, nr1):
        """With ``grads``, :func:`wout`'s twin: rows ``r0 .. r0 + 7`` of position ``cw TW + h``
        of E into chunk ``cw``'s tile (parity ``cw & 1``), zeros past the table (stale shared
        memory times a zero could be NaN); their sum.  Nothing for ``cw < 0``."""
        pp = cw * TW + h
        ok = M - 1 - pp >= 0
        c8 = 0.0
        if cw >= 0:
            tb = uint32((cw & 1) * TT)
            for r in range(r0, r0 + G):
                e = blk[_slot(PO1, r, pp + TB - 1, -1)]
                e = e if (ok and r <= nr1) else float32(0.0)
                TH[tb + uint32(r * TS + h)] = e
                c8 += float64(e)
        return c8

    @_device
    def tile_done(CS, h, cw, cs):
        """With ``grads``: chunk ``cw``'s tile is complete (for ``cw >= 0``): its column sum
        (this lane's position) into ``CS``, then the hand-over: wait until the gradient warp
        has freed chunk ``cw - 1`` (whose tile parity the next chunk takes), say chunk ``cw``
        is ready.  In that order: were ``cw`` ready first, the gradient warp could arrive at
        ``free`` twice (chunks ``cw - 1`` and ``cw``) and complete a generation alone."""
        if cw >= 0:
            CS[(cw & 1) * TB + h] = float32(cs)
            if cw >= 1:
                _free_wait()
            _ready_arrive()

    @_device
    def colsum(sums, b, N, M, h, cw, cs, want_sums):
        """Add position chunk ``cw``'s column sum (this lane's column) to ``sums``."""
        jp = M - 1 - (cw * TW + h)
        if want_sums and cw >= 0 and jp >= 0:
            cuda.atomic.add(sums, (b, N + jp), cs)

    @_device
    def item(Pd, Pu, blk, h, cc, q, M, Mu, nr1, v, TH):
        """The mover's item (see :func:`_build_backward`): lag group ``q`` (rows ``r0 = 24 -
        8 q`` on) of position chunk ``cc``.  Writes E of position chunk ``cc - 2`` out
        (:func:`wout`), stages ``v`` (from :func:`load8w`, two items ago) and issues the loads
        of the item two on; returns those and the rows' sum of E."""
        r0 = 3 * G - q * G
        if grads:
            c8 = tout(TH, blk, h, cc - 2, r0, M, nr1)
        else:
            c8 = wout(Pu, blk, h, cc - 2, r0, M, nr1)
        wd, wu = v
        pl = cc * TW + h
        _st8(blk, 0, wd, r0, pl + TB - 1, -1)
        _st8(blk, PO1, wu, r0, pl + TB - 1, -1)
        if q >= 2:
            cn, qn = cc + 1, q - 2
        else:
            cn, qn = cc, q + 2
        jn = uint32(max(M - 1 - (cn * TW + h), 0))
        v = load8w(Pd, Pu, jn, Mu, nr1, 3 * G - qn * G)
        _bar_mover()
        return v, c8

    @_device
    def write_e(ev_view, blk, sums, b, N, M, pp, nr1, want_sums):
        """Write position ``pp``'s column of the band's E out (coalesced along columns) and, if
        ``want_sums``, add its sum over the band's rows to ``sums[b, N + j]``; a full band
        (``nr1 = TB - 1``) with constant row offsets."""
        jp = M - 1 - pp
        if jp >= 0:
            if nr1 == TB - 1:
                cs = (ecol8(ev_view, blk, pp, jp, M, 0) + ecol8(ev_view, blk, pp, jp, M, 8)) + (
                    ecol8(ev_view, blk, pp, jp, M, 16) + ecol8(ev_view, blk, pp, jp, M, 24)
                )
            else:
                cs = 0.0
                for r in range(TB):
                    if r <= nr1:
                        cs += ecell(ev_view, blk, pp, jp, M, r)
            if want_sums:
                cuda.atomic.add(sums, (b, N + jp), cs)

    @_device
    def step(blk, rowb, pb, tid, s, sl, bot, st, lag, width, pub, xch):
        """One step of one lane: position ``s - lag`` of its row (at ``rowb`` in each plane of
        the flat block), ring slot ``sl``.

        ``st`` = (e_left, d_prev, inc_next, rs): the "from the right" term, this lane's previous
        ``E p_diag``, what the lane below shuffled up last step, and the row's sum of E so far;
        ``bot`` is what the band below hands over at this position (the last lane's ``inc``).
        ``pub``, ``pb``: as in the forward (lane 0 hands ``v`` to the band above).
        """
        e_left, d_prev, inc_next, rs = st
        inc = bot if tid == TB - 1 else inc_next
        p = s - lag
        ok = below(p, width)
        pd = float64(blk[rowb + sl])
        pu = float64(blk[PO1 + rowb + sl])
        e = e_left + inc if ok else 0.0
        blk[PO1 + rowb + sl] = blk_t(e)
        # (an explicit fma: contracted by the compiler, e * pu + d_prev became a multiply
        # on the chain and d_prev's own multiply fused into the add, one DMUL more
        # between the shuffles; offline SASS)
        v = fma(e, pu, d_prev)
        e_left = e * (1.0 - pd - pu) if ok else e_left
        pubs, hand, own, _, M = pb
        if busy:  # (nothing reads the shared ring then; see the forward's step)
            _st_if(hand, uint64(own + p), as_bits(v), pub & below(p, M))
        else:
            pubs[sl if pub else uint32(RING + tid)] = v
        return e_left, e * pd, from_next_lane(v, xch, s & 1), rs + e

    @_device
    def group(blk, rowb, pb, tid, s0, grp, st, lag, width, pub, xch):
        """The G (= 8) steps of one group, unrolled as in the forward."""
        sb = ring(s0)
        t0, t1, t2, t3 = grp[0], grp[1], grp[2], grp[3]
        t4, t5, t6, t7 = grp[4], grp[5], grp[6], grp[7]
        st = step(blk, rowb, pb, tid, s0, sb, t0, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 1, sb + 1, t1, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 2, sb + 2, t2, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 3, sb + 3, t3, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 4, sb + 4, t4, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 5, sb + 5, t5, st, lag, width, pub, xch)
        st = step(blk, rowb, pb, tid, s0 + 6, sb + 6, t6, st, lag, width, pub, xch)
        return step(blk, rowb, pb, tid, s0 + 7, sb + 7, t7, st, lag, width, pub, xch)

    # With grads: 4 blocks of 96 threads per SM, at most 168 registers (ptxas gave the D = 64
    # variant 182 with g_y's paired reductions, 3 blocks per SM; no spills at 168, offline).
    @_kernel(launch_bounds=(3 * TB, 4) if grads else None)
    def backward(P, N, M, gout, Gb, sums, X, Y, D, GX, GY):
        """Expected alignment, written in place: ``P[:, 1] <- E * gout``; if ``sums`` is
        (B, N + M) float64 zeros (not a (1, 1) placeholder), also its row sums ``sums[:, :N]``
        and column sums ``sums[:, N:]``.  With ``grads`` instead: E is not written, and
        ``GX`` (B, N, D) and ``GY`` (B, M, D) (flat; ``GY`` zeroed) get the gradients of
        ``gout``-weighted squared-Euclidean soft-DTW wrt ``X`` (B, N, D) and ``Y`` (B, M, D)
        (flat, float32, ``D <= SWEEP_MAX_D``); otherwise those five are unused placeholders.

        Columns run right to left: *position* ``p = M - 1 - j``.  Lane ``t`` at step ``s``
        handles position ``s - (TB - 1 - t)`` (the bottom row leads).  Pull form:
        ``E[i, j] = E[i, j+1] p_left(i, j+1) + E[i+1, j] p_up(i+1, j)
        + E[i+1, j+1] p_diag(i+1, j+1)``.  Lane ``t`` hands lane ``t - 1`` the sum of the last two
        terms it owes it (``v``); the top lane hands the same ``v`` to the band above through
        ``Gb`` ((B, nb, M + 1) int64 flattened, float64 bits by position, then the ticket; all
        pre-filled with ``SENTINEL``).
        Row ``r`` keeps position ``p`` in ring slot ``(p + TB - 1 - r) % RING`` (= ``s % RING``,
        as in the forward).
        """
        tx = cuda.threadIdx.x
        tid = tx & (TB - 1) if mover else tx  # the lane (in its warp, with a mover)
        B = gout.shape[0]
        nb = (N + TB - 1) // TB
        zero = blk_t(0.0)
        tk = cuda.shared.array(1, int32)
        t = _take_ticket(Gb, tk)
        _stamp(Gb, t, 0, B * nb)
        kr = t // B
        k = nb - 1 - kr
        b = t - kr * B
        i0 = k * TB
        i = i0 + tid
        own = (b * nb + k) * (M + 1)  # this band's boundary row in the flat Gb
        width = M if i < N else 0
        lag = TB - 1 - tid
        ups = k > 0  # a band above to hand to
        pub = tid == 0 and ups  # lane 0 hands its v to the band above
        blk = cuda.shared.array(PO2, blk_t)  # p_diag; p_up, then E (at PO1)
        rowb = uint32(tid * RING1)  # this lane's row in each plane
        grp = cuda.shared.array(G, float64)
        pubs = cuda.shared.array(PUBS, float64)  # lane 0's hand-overs (+ spare slots)
        xch = cuda.shared.array((2, TB), float64)
        nchunks = (M + TB - 1 + TW - 1) // TW
        row0 = (2 * b * N + i0) * M  # P[b, 0, i0, 0] (flat)
        Pd = band_view(P, row0)  # band views (see _ld8) of this pair's weights
        Pu = band_view(P, row0 + N * M)  # (and E, written over p_up)
        nr1 = uint32(min(TB, N - i0) - 1)  # the band's last row
        Mu = uint32(M)
        want_sums = sums.shape[1] == N + M
        if grads:  # the gradient warp's tiles (two, by chunk parity), column and row sums
            TH = cuda.shared.array(TT2, float32)
            CS = cuda.shared.array(TB2, float32)
            RS = cuda.shared.array(TB, float32)
        else:
            TH = cuda.shared.array(1, float32)  # placeholders: never read
            CS = TH
            RS = TH
        if mover and tx >= 2 * TB:
            if grads:
                # The gradient warp: the band's rows of x staged once; per chunk, its rows
                # of y copied in (asynchronously, while the mover finishes the chunk's
                # tile; in registers, 64 values a lane took 250 registers in all), and the
                # chunk's products once the tile is ready, then the tile freed; g_x at the
                # end.
                g = tid >> 2
                tq = tid & 3
                nt = (D + 7) // 8
                acc = cuda.local.array((2, ntm, 4), float32)
                for a in range(2):
                    for n in range(ntm):
                        for q in range(4):
                            acc[a, n, q] = float32(0.0)
                XS = cuda.shared.array(tsw, float32, alignment=SW_ALIGN)
                YS = cuda.shared.array(tsw, float32, alignment=SW_ALIGN)
                Xp = band_view(X, (b * N + i0) * D)  # the band's rows of x
                Yp = band_view(Y, b * M * D)  # this pair's y
                GYp = band_view(GY, b * M * D)
                cp_rows(XS, Xp, 0, 1, nr1, D, tid)  # (rows past nr1: row nr1)
                for c in range(nchunks):
                    jtop = M - 1 - c * TW  # the column of the chunk's position 0
                    if jtop >= 0:
                        sync_band()  # (the last chunk's reads of YS done)
                        cp_rows(YS, Yp, jtop, -1, 0, D, tid)  # (columns below 0: column 0)
                    _ready_wait()
                    if jtop >= 0:
                        cp_wait()
                        sync_band()
                        tb = uint32((c & 1) * TT)
                        gx_chunk(TH, tb, YS, nt, acc, g, tq)
                        gy_chunk(TH, tb, CS, (c & 1) * TB, XS, YS, GYp, jtop, D, nt, g, tq)
                    _free_arrive()
                gx_out(acc, RS, XS, band_view(GX, (b * N + i0) * D), D, nt, nr1, g, tq)
            return  # the third warp (see _build_forward)
        if mover and tx >= TB:
            # The mover (warp 1): the ring zeroed (as the one-warp kernel's lanes do, below),
            # position chunk 0's first three lag groups staged, the loads of items 0 and 1 in
            # flight; then one item per group.  Column sums: each position chunk's four lag
            # groups come in items 4 cw + 5 .. 4 cw + 8, summed as the one-warp write_e does.
            h = tid
            for r in range(TB):
                for q in range(2):
                    blk[uint32(r * RING1 + h + q * TW)] = zero
                    blk[uint32(PO1 + r * RING1 + h + q * TW)] = zero
            sync_band()  # (the mover's lanes stage into slots that others zeroed)
            jn = uint32(max(M - 1 - h, 0))
            for q in range(3):
                wd, wu = load8w(Pd, Pu, jn, Mu, nr1, 3 * G - q * G)
                _st8(blk, 0, wd, 3 * G - q * G, h + TB - 1, -1)
                _st8(blk, PO1, wu, 3 * G - q * G, h + TB - 1, -1)
            v = load8w(Pd, Pu, jn, Mu, nr1, 0)
            v1 = load8w(Pd, Pu, uint32(max(M - 1 - (TW + h), 0)), Mu, nr1, 3 * G)
            _bar_mover()
            p01 = 0.0
            c2 = 0.0
            for c in range(nchunks):
                v, c3 = item(Pd, Pu, blk, h, c, 3, M, Mu, nr1, v, TH)
                if grads:
                    tile_done(CS, h, c - 2, p01 + (c2 + c3))
                else:
                    colsum(sums, b, N, M, h, c - 2, p01 + (c2 + c3), want_sums)
                v1, c0 = item(Pd, Pu, blk, h, c + 1, 0, M, Mu, nr1, v1, TH)
                v, c1 = item(Pd, Pu, blk, h, c + 1, 1, M, Mu, nr1, v, TH)
                p01 = c0 + c1
                v1, c2 = item(Pd, Pu, blk, h, c + 1, 2, M, Mu, nr1, v1, TH)
            # what no item wrote: lag group 3 of position chunk nchunks - 2, all of the last
            cw = nchunks - 1
            if grads:
                c3 = tout(TH, blk, h, cw - 1, 0, M, nr1)
                tile_done(CS, h, cw - 1, p01 + (c2 + c3))
                c0 = tout(TH, blk, h, cw, 3 * G, M, nr1)
                c1 = tout(TH, blk, h, cw, 2 * G, M, nr1)
                c2 = tout(TH, blk, h, cw, G, M, nr1)
                c3 = tout(TH, blk, h, cw, 0, M, nr1)
                tile_done(CS, h, cw, (c0 + c1) + (c2 + c3))
                _free_wait()  # the gradient warp is done with the last tile
                return
            c3 = wout(Pu, blk, h, cw - 1, 0, M, nr1)
            colsum(sums, b, N, M, h, cw - 1, p01 + (c2 + c3), want_sums)
            c0 = wout(Pu, blk, h, cw, 3 * G, M, nr1)
            c1 = wout(Pu, blk, h, cw, 2 * G, M, nr1)
            c2 = wout(Pu, blk, h, cw, G, M, nr1)
            c3 = wout(Pu, blk, h, cw, 0, M, nr1)
            colsum(sums, b, N, M, h, cw, (c0 + c1) + (c2 + c3), want_sums)
            return
        if tid < G:
            grp[tid] = 0.0  # the bottom band's row below (others overwrite it group by group)
        # Zero this lane's ring row: the first chunk's steps reach slots that no staged column
        # fills (positions p < 0 of the skew).  Their weights are multiplied by E = 0 there,
        # and 0 * (a NaN or inf left in shared memory) would be NaN.
        if not mover:
            for q in range(RING1):
                blk[rowb + q] = zero
                blk[PO1 + rowb + q] = zero
            sync_band()  # before the first chunk's staging writes other lanes' rows
        # (e_left, d_prev, inc_next, rs); E[N-1, M-1] = gout enters as the "from the right"
        # term of position 0.
        st = (float64(gout[b]) if i == N - 1 else 0.0, 0.0, 0.0, 0.0)
        below_ok = k < nb - 1
        below_row = own + (M + 1) if below_ok else own  # (the bottom band: its own, ignored)
        pref = poll(Gb, below_row + min(tid, M))
        pb = (pubs, Gb, own, TB - 1, M)  # where lane 0's steps put their hand-overs
        if not mover:
            jn = uint32(max(M - 1 - tid, 0))
            wd, wu = _ld32(Pd, jn, Mu, nr1), _ld32(Pu, jn, Mu, nr1)
        else:
            _bar_steps()  # the mover's zeroing and first staging
        for c in range(nchunks):
            s0c = c * TW
            pl = s0c + tid  # the position this thread stages
            jl = M - 1 - pl
            if not mover:
                # as in the forward: registers (chunk c) into the ring, then load chunk c + 1
                # (rows and columns past the table stage copies of real, finite weights: their
                # E is 0, and 0 times a finite weight adds nothing)
                _st32(blk, 0, wd, pl + TB - 1, -1)
                _st32(blk, PO1, wu, pl + TB - 1, -1)
                jn = uint32(max(jl - TW, 0))
                wd, wu = _ld32(Pd, jn, Mu, nr1), _ld32(Pu, jn, Mu, nr1)
                sync_band()
            # TW // G = 4 groups, unrolled as in the forward
            pref = handoff(Gb, below_row, s0c, M, pref, grp, 0.0, below_ok, pubs, own, ups, TB - 1)
            if TIMING and c == 0:
                _stamp(Gb, t, 1, B * nb)
            st = group(blk, rowb, pb, tid, s0c, grp, st, lag, width, pub, xch)
            if mover:
                _bar_steps()
            pref = handoff(
                Gb, below_row, s0c + G, M, pref, grp, 0.0, below_ok, pubs, own, ups, TB - 1
            )
            st = group(blk, rowb, pb, tid, s0c + G, grp, st, lag, width, pub, xch)
            if mover:
                _bar_steps()
            pref = handoff(
                Gb, below_row, s0c + 2 * G, M, pref, grp, 0.0, below_ok, pubs, own, ups, TB - 1
            )
            st = group(blk, rowb, pb, tid, s0c + 2 * G, grp, st, lag, width, pub, xch)
            if mover:
                _bar_steps()
            pref = handoff(
                Gb, below_row, s0c + 3 * G, M, pref, grp, 0.0, below_ok, pubs, own, ups, TB - 1
            )
            st = group(blk, rowb, pb, tid, s0c + 3 * G, grp, st, lag, width, pub, xch)
            if grads:
                RS[tid] = float32(st[3])  # (the last chunk's: the row sums of E)
            if mover:
                _bar_steps()
                continue
            sync_band()
            if c > 0:
                write_e(Pu, blk, sums, b, N, M, s0c - TW + tid, nr1, want_sums)
            sync_band()
        flush_rest(Gb, pubs, own, nchunks * TW, M, ups, TB - 1)
        _stamp(Gb, t, 2, B * nb)
        if not mover:
            write_e(Pu, blk, sums, b, N, M, (nchunks - 1) * TW + tid, nr1, want_sums)
        if want_sums and i < N and not grads:
            sums[b, i] = st[3]

    return backward


# Parking the fused distances (the fused forward with gradients)
# ------------------------------------------------------------------
# ``park`` fills plane 0 of a float64 ``P`` (B, 2, N, M) with each cell's squared distance
# ``max(|x_i|^2 + |y_j|^2 - 2 x_i.y_j, 0)`` for the ``split`` forward (float64 inputs); its
# float32 variant (float32 inputs) writes the same float64 distance into a float32 ``P`` as
# the two 32-bit words of its bits, the high word in plane 1 and the low word in plane 0, for
# the ``hilo`` forward: 8 bytes per cell either way, what P holds anyway.  The dot products run
# on the float64 tensor cores (``mma.sync.m16n8k8.f64``, ``DMMA.16x8x8`` on sm_90: IEEE
# float64 products and sums): a block of 4 warps computes a PS x PS tile, each warp a 32 x 32
# quarter as 2 x 4 tiles of 16 x 8.  The tile's rows' and columns' features are staged in
# shared memory in the inputs' own dtype, PK of them per pass (float32: 64, so one pass for
# D <= 64; float64: 32), by coalesced loads of the rows (contiguous in x and y); per 8
# features a warp loads 16 fragment values per lane (converted to float64) and issues 8 mma.
# The squared norms are float64 sums of the same staged features.  Each lane then writes its
# own results straight from the mma accumulators: two adjacent columns of a row at a time,
# as one 8-byte (float32 words) or 16-byte (float64) store per plane where M is even, two
# scalar stores where it is odd (no shared-memory round trip, no barrier after the products).
# Shared-memory indices are unsigned 32-bit and P is written through flat views (row bases
# from :func:`band_view`), so that no 64-bit index arithmetic sits in the loops.  One launch,
# no buffer besides ``P``.  (The earlier layout, Ampere's m8n8k4 shape with 16 features per
# pass and the tile out through shared memory, took 324 us at B = 32, N = M = 1024, D = 64
# on the H200; ``probe-dev.txt``.)
PS = 64  # rows (and columns) per tile
PARK_THREADS = 128  # 4 warps; (= 2 PS: one norm per thread)


def _park_pk(words: bool) -> int:
    """Features staged per pass: 64 float32 (float32 inputs) or 32 float64."""
    return 64 if words else 32


def _dmma_intrinsic():
    """``(d0, d1, d2, d3) = mma.sync.m16n8k8.row.col.f64(a0..a3, b0, b1, c0..c3)`` for one
    lane (inline PTX; ``DMMA.16x8x8`` on sm_90, where the Ampere shape m8n8k4 does a quarter
    of the work per instruction).

    With ``g = lane // 4``, ``t = lane % 4``: the lane holds ``A[g, t], A[g + 8, t],
    A[g, t + 4], A[g + 8, t + 4]`` of A (16 x 8, row-major), ``B[t, g], B[t + 4, g]`` of B
    (8 x 8) and ``C[g, 2 t], C[g, 2 t + 1], C[g + 8, 2 t], C[g + 8, 2 t + 1]`` of C; the
    result has C's layout (PTX ISA, "Matrix Fragments for mma.m16n8k8", .f64).
    Warp-collective: every lane of the warp must reach it together (marked as having side
    effects, so that LLVM neither moves it into a branch nor merges it)."""
    return _mma_intrinsic(tf32=False)


def _st2_if_intrinsic():
    """``st2_if(arr, idx, a, b, pred)``: ``arr[idx], arr[idx + 1] = a, b`` (a float32 or
    float64 array) where ``pred``, as one predicated vector store (``st.v2``); ``idx`` must
    be even and the array's data 8- (float32) or 16-byte (float64) aligned."""
    from llvmlite import ir
    from numba.core import types
    from numba.core.extending import intrinsic

    @intrinsic
    def st2_if(typingctx, arr, idx, a, b, pred):
        wide = arr.dtype == types.float64
        vt = types.float64 if wide else types.float32

        def codegen(context, builder, signature, args):
            _, ptr = _item_pointer(context, builder, signature, args)
            i32 = ir.IntType(32)
            ft = ir.DoubleType() if wide else ir.FloatType()
            fty = ir.FunctionType(ir.VoidType(), [ptr.type, ft, ft, i32])
            kind, reg = ("f64", "d") if wide else ("f32", "f")
            builder.asm(
                fty,
                "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.v2." + kind + " [$0], {$1, $2}; }",
                f"l,{reg},{reg},r",
                [ptr, args[2], args[3], builder.zext(args[4], i32)],
                True,
            )
            return context.get_dummy_value()

        return types.none(arr, idx, vt, vt, types.boolean), codegen

    return st2_if


def _st2_if_sim(arr, idx, a, b, pred):
    if pred:
        arr[idx] = a
        arr[idx + 1] = b


if not SIMULATED:
    _dmma = _dmma_intrinsic()
st2_if = _st2_if_sim if SIMULATED else _st2_if_intrinsic()


def _build_park(f32: bool, cost: bool = False):
    """Park kernel for float32 (``f32``) or float64 inputs: into a float64 P's plane 0
    (float64), into a float32 P as the high (plane 1) and low (plane 0) 32-bit words of each
    distance's float64 bits (float32, *words*); or, with ``cost``, into a plain (B, N, M)
    cost tensor of the inputs' dtype (the float64 distance rounded once)."""
    words = f32 and not cost
    PLANES = 1 if cost else 2  # planes per pair in the output
    PK = _park_pk(f32)
    LD = PK + 4  # padded staged row: a fragment load's lanes fall in distinct banks
    NST = PS * LD  # one operand's staging (rows' features; the columns' follow)
    NS2 = 2 * NST
    LOADS = PS * PK // PARK_THREADS  # staged values per thread per operand and pass
    RPR = PARK_THREADS // PK  # rows staged per round of one load per thread
    NPART = 8 * PARK_THREADS  # eight norm shares per thread (see kstep)
    RND = 16 if f32 else 8  # of them in flight per round (float64: registers)
    KSH = PK.bit_length() - 1  # log2(PK)
    SDT = float32 if f32 else float64

    # Shared-memory offsets are kept unsigned 32-bit (``u32``): Numba's 64-bit integer
    # expressions put 64-bit adds, shifts and compares into every fragment load otherwise
    # (ptxas 13.0 sm_90: ~45 integer instructions per 8 mma in the k loop).

    @_device
    def afrag(S, base):
        """A lane's A fragment of a 16-row tile (rows ``g, g + 8``, features ``t, t + 4``
        from ``base`` = its row g, feature t), as float64."""
        return (
            float64(S[base]),
            float64(S[base + 8 * LD]),
            float64(S[base + 4]),
            float64(S[base + (8 * LD + 4)]),
        )

    @_device
    def bfrag(S, base):
        """A lane's B fragment of an 8-column tile (column g, features ``t, t + 4``)."""
        return float64(S[base]), float64(S[base + 4])

    @_device
    def mma_gpu(S, a, b, fa, fb, lane, c):
        return _dmma(a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3])

    @_device
    def mma_sim(S, a, b, fa, fb, lane, c):
        """The simulator's twin of one lane's ``mma`` (it has no warp-collective matrix op):
        the lane's four outputs (rows ``g, g + 8``, columns ``2 t, 2 t + 1`` of the 16 x 8
        tile) from the features at its A fragment ``S[fa]`` and B fragment ``S[fb]``."""
        g = lane >> 2
        t = lane & 3
        r0 = fa - t  # the tile's row g, from its first feature of the eight
        r1 = r0 + 8 * LD
        n0 = fb - g * LD - t + 2 * t * LD  # the tile's column 2 t
        n1 = n0 + LD
        c0, c1, c2, c3 = c
        for k in range(8):
            x0 = float64(S[r0 + k])
            x1 = float64(S[r1 + k])
            y0 = float64(S[n0 + k])
            y1 = float64(S[n1 + k])
            c0 += x0 * y0
            c1 += x0 * y1
            c2 += x1 * y0
            c3 += x1 * y1
        return c0, c1, c2, c3

    mma = mma_sim if SIMULATED else mma_gpu

    @_device
    def kstep(S, acc, nq, fa, fb, lane):
        """Features ``kb .. kb + 7`` (the lane's fragments at ``S[fa]``, ``S[fb]``) into the
        accumulators of the warp's 2 x 4 tiles of 16 x 8, and the squares of the lane's
        fragment values into ``nq``: features ``t, t + 4`` of rows ``g + 8 m`` (``nq[m]``)
        and of columns ``g + 8 c`` (``nq[4 + c]``), the lane's share of their norms."""
        a0 = afrag(S, fa)
        a1 = afrag(S, fa + 16 * LD)
        for m in range(2):  # (one fused multiply-add per square)
            nq[m] += a0[m] * a0[m]
            nq[m] += a0[m + 2] * a0[m + 2]
            nq[m + 2] += a1[m] * a1[m]
            nq[m + 2] += a1[m + 2] * a1[m + 2]
        for c in range(4):
            bv = bfrag(S, fb + 8 * LD * c)
            nq[4 + c] += bv[0] * bv[0]
            nq[4 + c] += bv[1] * bv[1]
            for a in range(2):
                c_in = (acc[a, c, 0], acc[a, c, 1], acc[a, c, 2], acc[a, c, 3])
                r = mma(
                    S,
                    a0 if a == 0 else a1,
                    bv,
                    u32(fa + 16 * LD * a),
                    u32(fb + 8 * LD * c),
                    lane,
                    c_in,
                )
                acc[a, c, 0], acc[a, c, 1], acc[a, c, 2], acc[a, c, 3] = r

    @_device
    def stage(S, X, Y, xbase, ybase, rows, cols, D, d0, t):
        """Features ``d0 .. d0 + PK - 1`` of the tile's ``rows`` rows of the flat ``X`` (row
        r at ``xbase + r D``) into ``S[r LD + k]``, and of its ``cols`` rows of ``Y`` into
        ``S[NST + r LD + k]`` (zero past the rows or D): rounds of RND loads of each in flight."""
        Xb = band_view(X, xbase)
        Yb = band_view(Y, ybase)
        # thread t stages feature k = t % PK of rows t // PK + RPR q (q = 0 .. LOADS - 1)
        k = t & uint32(PK - 1)
        r0 = t >> uint32(KSH)
        kin = d0 + k < D
        src = u32(r0 * D + d0 + k)
        step = u32(RPR * D)
        dst = u32(r0 * LD + k)
        for g in range(LOADS // RND):
            vx = cuda.local.array(RND, SDT)
            vy = cuda.local.array(RND, SDT)
            for u in range(RND):
                vx[u] = 0
                vy[u] = 0
            if kin:  # (one branch per round, the loads predicated)
                for u in range(RND):
                    q = RND * g + u
                    r = u32(r0 + RPR * q)
                    at = u32(src + q * step)
                    if r < rows:
                        vx[u] = Xb[at]
                    if r < cols:
                        vy[u] = Yb[at]
            for u in range(RND):
                at = u32(dst + (RND * g + u) * (RPR * LD))
                S[at] = vx[u]
                S[u32(NST + at)] = vy[u]

    @_device
    def pair(V, col, w0, w1, rok, j, M, even):
        """``V[col], V[col + 1] = w0, w1`` for cells (row, j), (row, j + 1) where they exist
        (``j < M``; the park passes the tile's column and its column count, 32-bit compares):
        one vector store for even M, two scalar ones for odd M."""
        if even:
            st2_if(V, col, w0, w1, rok and j < M)
        else:
            if rok and j < M:
                V[col] = w0
            if rok and j + 1 < M:
                V[col + uint32(1)] = w1

    @_device
    def put(Pv, Pw, col, v0, v1, rok, j, M, even):
        """Cells (row, j), (row, j + 1) of the row views ``Pv`` (plane 0) and ``Pw``
        (plane 1) at ``col``."""
        if words:
            pair(Pw, col, hi_word(v0), hi_word(v1), rok, j, M, even)
            pair(Pv, col, lo_word(v0), lo_word(v1), rok, j, M, even)
        else:
            pair(Pv, col, SDT(v0), SDT(v1), rok, j, M, even)

    # float32: 4 blocks (16 warps) per SM, ptxas keeps to 128 registers (134 unbounded: 3)
    @_kernel(launch_bounds=(PARK_THREADS, 4) if f32 else None)
    def park(X, Y, Pf, N, M, D):
        """X (B N D,), Y (B M D,) flat -> P[:, 0] = squared distances (float64 P), or
        P[:, 1] and P[:, 0] = their bits' high and low 32-bit words (float32 P, ``words``),
        with ``Pf`` the flat view of P (B, 2, N, M); with ``cost``, ``Pf`` the flat (B, N, M)
        cost.  One block per (pair, row tile, column tile), ``B * nti * ntj`` blocks."""
        nti = (N + PS - 1) // PS
        ntj = (M + PS - 1) // PS
        q = cuda.blockIdx.x
        tj = q % ntj
        q = q // ntj
        ti = q % nti
        b = q // nti
        t = uint32(cuda.threadIdx.x)
        lane = t & uint32(31)
        w = t >> 5
        i0 = ti * PS
        j0 = tj * PS
        rows = u32(min(PS, N - i0))
        cols = u32(min(PS, M - j0))
        Du = u32(D)
        rw = (w >> 1) * uint32(32)  # this warp's 32 x 32 quarter of the tile
        cw = (w & 1) * uint32(32)
        S = cuda.shared.array(NS2, SDT)  # rows' features [r LD + k], columns' at NST + ...
        nrm = cuda.shared.array(PARK_THREADS, float64)  # rows' |x|^2, then columns' |y|^2
        part = cuda.shared.array(NPART, float64)  # lanes' norm shares, [e T + t]
        acc = cuda.local.array((2, 4, 4), float64)  # (row tile, column tile, lane's four)
        for a in range(2):
            for c in range(4):
                for e in range(4):
                    acc[a, c, e] = 0.0
        # the lane's fragments: A row rw + lane // 4 (+ 16 a, + 8), B column cw + lane // 4
        # (+ 8 c), features lane % 4 (+ 4) from kb
        fa0 = u32((rw + (lane >> 2)) * LD + (lane & uint32(3)))
        fb0 = u32((cw + (lane >> 2)) * LD + (lane & uint32(3)) + NST)
        # the norms come from the fragments' squares (kstep): no pass of their own over S
        nq = cuda.local.array(8, float64)
        for e in range(8):
            nq[e] = 0.0
        xbase = (b * N + i0) * D
        ybase = (b * M + j0) * D
        for d0 in range(0, D, PK):
            du = u32(d0)
            if d0 > 0:
                cuda.syncthreads()  # every thread is done with the previous pass
            stage(S, X, Y, xbase, ybase, rows, cols, Du, du, t)
            cuda.syncthreads()
            kend = min(PK, D - d0)
            if kend == PK:  # a full pass
                for kb in range(0, PK, 8):
                    kstep(S, acc, nq, u32(fa0 + kb), u32(fb0 + kb), lane)
            else:
                for kb in range(0, kend, 8):
                    kstep(S, acc, nq, u32(fa0 + kb), u32(fb0 + kb), lane)
        # Norm of row t (t < PS) or column t - PS: the four lanes t' = 0 .. 3 of group g of
        # warp 2 (r // 32) (rows; warp 2 (r // 32) + 1 has the same) or c // 32 (columns)
        # hold a share each, in nq[(r % 32) // 8] or nq[4 + (c % 32) // 8].
        for e in range(8):
            part[u32(e * PARK_THREADS + t)] = nq[e]
        cuda.syncthreads()
        o = t & uint32(PS - 1)
        isc = t >> uint32(6)  # 0: a row, 1: a column
        src_w = (o >> uint32(5)) << (uint32(1) - isc)  # rows: warp 2 (o // 32); cols: o // 32
        src_e = ((o & uint32(31)) >> uint32(3)) + uint32(4) * isc
        src_l = u32(src_e * PARK_THREADS + src_w * 32 + (o & uint32(7)) * 4)
        nrm[t] = (part[src_l] + part[src_l + 1]) + (part[src_l + 2] + part[src_l + 3])
        cuda.syncthreads()
        # the lane's cells: rows rw + lane // 4 + 8 m, columns cw + 2 (lane % 4) + 8 c (+ e)
        ra = rw + (lane >> 2)
        cb = cw + uint32(2) * (lane & uint32(3))
        even = (M & 1) == 0
        p0 = ((PLANES * b) * N + i0) * M + j0  # the tile's origin in plane 0, then in plane 1
        p1 = p0 + N * M
        for m in range(4):  # row m of the lane's: row tile m // 2, its row g + 8 (m % 2)
            r = ra + uint32(8 * m)
            rok = r < rows
            rr = min(r, rows - uint32(1))  # (a row view inside P even where nothing is stored)
            Pv = band_view(Pf, p0 + rr * M)
            Pw = band_view(Pf, p1 + rr * M) if words else Pv
            nx = nrm[r]
            for c in range(4):
                col = cb + uint32(8 * c)
                v0 = (nx + nrm[uint32(PS) + col]) - 2.0 * acc[m >> 1, c, 2 * (m & 1)]
                v1 = (nx + nrm[uint32(PS + 1) + col]) - 2.0 * acc[m >> 1, c, 2 * (m & 1) + 1]
                # clamped at 0, NaN kept (a NaN input gives a NaN loss)
                v0 = 0.0 if v0 < 0.0 else v0
                v1 = 0.0 if v1 < 0.0 else v1
                put(Pv, Pw, col, v0, v1, rok, col, cols, even)

    return park


def threads(mover: bool) -> int:
    """Threads per block of a DP kernel: one warp, or three with a mover (see
    :func:`_build_forward`)."""
    return 3 * TB if mover else TB


#: Kernels by (mode, float32, busy, mover) and (float32, busy, mover); compiled on first use.
_FORWARD_KINDS = ((COST, False), (COST, True), (FUSED, False), (FUSED, True))
FORWARD = {
    (m, q, busy, False): _build_forward(m, q, busy)
    for m, q in (*_FORWARD_KINDS, (SPLIT, False), (HILO, True))
    for busy in (False, True)
}
FORWARD.update(  # the mover variants (see _build_forward's ``mover``)
    {
        (m, q, busy, True): _build_forward(m, q, busy, True)
        for m, q in ((COST, False), (COST, True), (SPLIT, False), (HILO, True), (TILED, True))
        for busy in (False, True)
    }
)
BACKWARD = {
    (q, busy, two): _build_backward(q, busy, two)
    for q in (False, True)
    for busy in (False, True)
    for two in (False, True)
}
#: The backward with the gradients wrt x and y in its sweep (float32, mover), by (busy, feature
#: tiles: :func:`sweep_tiles`).
BACKWARD_GRADS = {
    (busy, nt): _build_backward(True, busy, True, grads=nt)
    for busy in (False, True)
    for nt in SWEEP_TILES
}
PARK = _build_park(False)
PARK32 = _build_park(True)
#: The same distances as a (B, N, M) cost tensor, by input dtype (float32?): the unfused
#: path's squared Euclidean cost on CUDA (see :func:`sdtw.cuda.sqeuclidean_cost`).
COST_PARK = {f: _build_park(f, cost=True) for f in (False, True)}


# --------------------------------------------------------------------------------------------
# On-disk cache of the compiled kernels
# --------------------------------------------------------------------------------------------

#: Whether compiled kernels are kept on disk between processes (``SDTW_KERNEL_CACHE=0`` in the
#: environment turns it off).  Compiling one of the DP kernels (Numba's typing and lowering,
#: then NVVM) takes several seconds (the fused forward without gradients ~8 s on the H200
#: machine, ``probe-dev.txt`` run 92), and a training step uses three: every new process paid
#: that before its first step.  Not under the simulator, and not with ``SDTW_TIMING=1`` (its
#: kernels differ from the regular ones by a module-level switch) or ``SDTW_LINEINFO=1``.
DISK_CACHE = (
    not SIMULATED
    and not TIMING
    and not LINEINFO
    and os.environ.get("SDTW_KERNEL_CACHE", "1") != "0"
)


def _source_digest() -> str:
    """SHA-256 of this file: every device function the kernels use is defined here."""
    import hashlib

    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _cache_class():
    """numba-cuda's kernel cache, keyed by our own variant key instead of a pickle of the
    kernel's closure.

    numba-cuda keys a kernel's cache entry by its bytecode and a pickle of its closure's cells;
    our kernels are closures of their factories (:func:`_build_forward` ...), whose cells hold
    device functions and settings, and that pickle differs from one process to the next (the
    same kernel hashed differently in two processes, checked offline), so each process would
    miss.  This key is the kernel's variant (factory name and arguments), a digest of this
    file, the signature, the compute capability and codegen (``magic_tuple``) and numba-cuda's
    version.  numba-cuda also drops a cache index when the source file's time stamp or size
    changes."""
    import numba_cuda
    from numba.cuda.dispatcher import CUDACache

    class _VariantCache(CUDACache):
        def __init__(self, py_func, variant: tuple) -> None:
            self._variant = variant
            super().__init__(py_func)

        def _index_key(self, sig, codegen):
            key = (sig, codegen.magic_tuple(), numba_cuda.__version__, self._variant)
            if self._launch_config_key is not None:
                key += (("launch_config", self._launch_config_key),)
            return key

    return _VariantCache


def _enable_disk_cache(kernels: dict) -> list[str]:
    """Give each kernel of ``kernels`` (variant key -> dispatcher) an on-disk cache, keyed by
    its variant and :func:`_source_digest`; the problems met, if any (then some or all
    kernels compile in each process as before, and :data:`DISK_CACHE_PROBLEM` says why)."""
    problems = []
    try:
        cls, digest = _cache_class(), _source_digest()
    except Exception as exc:  # numba-cuda's internals differ: no cache
        return [f"{exc!r}"]
    for variant, dispatcher in kernels.items():
        try:
            dispatcher._cache = cls(dispatcher.py_func, (*variant, digest))
        except Exception as exc:  # an unwritable cache folder, internals that differ
            problems.append(f"{variant}: {exc!r}")
    return problems


#: Every kernel dispatcher of this module by its variant key (the on-disk cache's key).
KERNELS = {("forward", *k): v for k, v in FORWARD.items()}
KERNELS.update({("backward", *k): v for k, v in BACKWARD.items()})
KERNELS.update({("backward-grads", *k): v for k, v in BACKWARD_GRADS.items()})
KERNELS.update({("park", False, False): PARK, ("park", True, False): PARK32})
KERNELS.update({("park", f, True): v for f, v in COST_PARK.items()})


def cache_counts() -> tuple[int, int]:
    """The on-disk cache's hits and misses in this process so far, over :data:`KERNELS`."""
    kernels = KERNELS.values()
    hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)
    return hits, sum(sum(k.stats.cache_misses.values()) for k in kernels)


#: Why the on-disk kernel cache is off or partial (``None``: on for every kernel, or off by
#: :data:`DISK_CACHE`); a warning says so when this module is imported.
DISK_CACHE_PROBLEM: str | None = None
if DISK_CACHE:
    _problems = _enable_disk_cache(KERNELS)
    if _problems:
        import warnings

        DISK_CACHE_PROBLEM = "; ".join(_problems[:3])
        warnings.warn(
            "sdtw: no on-disk cache for some or all CUDA kernels (they compile again in each "
            f"process, several seconds each): {DISK_CACHE_PROBLEM}",
            RuntimeWarning,
            stacklevel=2,
        )
