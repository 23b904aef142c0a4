"""Launchers: pick the kernel variant (:mod:`sdtw.cuda.policy`), allocate the buffers, pick the
grid and launch on torch's current stream.

Internal asserts only; the public entry has validated everything.  Launches go through
:class:`sdtw.cuda._private.Launcher` (a packed-parameter driver call after the first call of a
signature, Numba's own launch where that is unavailable).
"""

from __future__ import annotations

import functools
import math
from collections import Counter

import torch

from sdtw.cuda import _private, policy
from sdtw.cuda import kernels as K
from sdtw.cuda._private import View, flat
from sdtw.cuda.config import CONFIG
from sdtw.cuda.kernels import registry
from sdtw.cuda.kernels.jit import SIMULATED
from sdtw.cuda.toolkit import missing_toolkit

__all__ = [
    "backward",
    "backward_grads",
    "forward",
    "forward_backward",
    "forward_grads",
    "kept",
    "launch",
    "launch_counts",
    "sqeuclidean",
    "storage_dtype",
]

#: Numba kernel launches made by this module, by kind ("forward", "backward"); the benchmark
#: reads the difference around a step.  torch's own small ops (zeros, sums, bmm) are not
#: counted here.
launch_counts: Counter = Counter()

_streams: dict[int, tuple] = {}
_launchers: dict[tuple, _private.Launcher] = {}


def _toolkit_error(exc: Exception) -> Exception:
    """``exc`` from a kernel's first launch, with what to install where it says that a piece
    of the CUDA toolkit is missing (else ``exc`` itself)."""
    missing = missing_toolkit(f"{type(exc).__name__} {exc}")
    if not missing:
        return exc
    return RuntimeError(
        f"sdtw: numba-cuda could not compile the CUDA kernels: {exc}. It needs the CUDA "
        f"toolkit's {', '.join(missing)}: pip install 'sdtw[cuda13]' (CUDA "
        "13 driver, >= 580) or 'sdtw[cuda12]' puts NVIDIA's wheels of them beside numba-cuda; "
        "or install the CUDA toolkit (CUDA_HOME)."
    )


def _launcher(*key) -> _private.Launcher:
    """The launcher of the kernel of spec ``key[0](*key[1:])``, made once per spec (looked up
    by a plain tuple: a spec object made and validated per launch would cost host time)."""
    la = _launchers.get(key)
    if la is None:
        la = _launchers[key] = _private.Launcher(
            registry.get(key[0](*key[1:])), SIMULATED, CONFIG.fast_launch, _toolkit_error
        )
    return la


def _stream(device: torch.device) -> tuple:
    """torch's current stream as (numba stream, raw ``CUstream`` address), cached per handle."""
    if SIMULATED:
        return 0, 0
    ptr = _private.current_stream_ptr(device.index)
    s = _streams.get(ptr)
    if s is None:
        from numba import cuda

        s = _streams[ptr] = (cuda.external_stream(ptr), ptr)
    return s


_kernel_launchers: dict[int, tuple] = {}


def launch(dispatcher, grid: int, block: int, device: torch.device, *args) -> None:
    """Launch ``dispatcher`` on torch's current stream with tensors and Python scalars as
    arguments, through a :class:`sdtw.cuda._private.Launcher` made once per kernel (Soft-MSM's
    kernels: Numba's own launch adds host time per tensor argument on top of its dispatch)."""
    entry = _kernel_launchers.get(id(dispatcher))
    if entry is None or entry[0] is not dispatcher:
        entry = _kernel_launchers[id(dispatcher)] = (
            dispatcher,
            _private.Launcher(dispatcher, SIMULATED, CONFIG.fast_launch, _toolkit_error),
        )
    entry[1](grid, block, _stream(device), *args)


def numba_view(t: torch.Tensor):
    """``t`` as the kernels take it (a NumPy array under the simulator): the simpler kernels'
    launchers (:mod:`sdtw.cuda.dtw`, :mod:`sdtw.cuda.allpairs`)."""
    return _private._arr(t, SIMULATED)


def numba_stream(device: torch.device):
    """torch's current stream on ``device`` as a numba stream (0 under the simulator)."""
    return _stream(device)[0]


def storage_dtype(dtype: torch.dtype) -> torch.dtype:
    """Stored weights and E: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


_constants: dict[tuple, torch.Tensor] = {}


def _constant(shape: tuple, value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small constant tensor the kernels only read (one per kind, made once and reused:
    nothing may write to it).

    One first asked for while a CUDA graph is being captured is made for that call only and
    not kept: its fill is then a node of the graph (it runs at each replay, not at capture),
    so an eager call after the capture would have read an unwritten tensor."""
    key = (shape, value, dtype, device)
    make = functools.partial(torch.full, shape, value, dtype=dtype, device=device)
    return kept(_constants, key, device, make)


def kept(store: dict, key, device: torch.device, make) -> torch.Tensor:
    """``store[key]``, made by ``make()`` on first use and kept, except when first asked for
    while a CUDA graph is being captured on ``device``: then made for that call only (its
    fills are the graph's nodes, run at each replay, not at capture)."""
    t = store.get(key)
    if t is None:
        t = make()
        if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
            store[key] = t
    return t


def _placeholder(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small tensor for an argument slot the kernel will not touch (one per kind, reused)."""
    return _constant(shape, 0.0, dtype, device)


def _boundary(
    B: int,
    nb: int,
    M: int,
    device: torch.device,
    count: int = 1,
    lengths: torch.Tensor | None = None,
    middle: int = 0,
) -> tuple:
    """``count`` boundary buffers (one per DP launch), each (B, nb, M + 1) int64 float64 bits
    flattened, then ``middle`` more (the checkpointed forward's column checkpoints), then
    (with ``lengths``, int64 (2 B,) on the device: x's lengths, then y's) the pairs' lengths,
    then one element for the blocks' ticket counter; all ``SENTINEL`` but the lengths, from
    one fill.  Row (b, k) is band k's last row; column ``M`` is padding."""
    extra = 0 if lengths is None else 2 * B
    n = B * nb * (M + 1) + middle + extra + 1
    hand = torch.full((count * n,), K.SENTINEL, dtype=torch.int64, device=device)
    if extra:
        tails = hand.view(count, n)[:, n - 1 - extra : n - 1]
        tails.copy_(lengths.expand(count, extra))
    return tuple(View(hand, (n,), k * n) for k in range(count))


# E's seed.  A pair whose value is +inf (no finite path: +inf costs or a band block every
# path, or its sum overflows float64) has E = 0, as the CPU's backward has (it skips every
# cell whose R is +inf).  The CUDA backward sees only the stored weights, where such a pair's
# last cell looks like a reachable one (weights (0, 0), p_left = 1, where no predecessor is
# finite; its soft-min weights where its own cost is +inf), so a seed E[N-1, M-1] = 1 went on
# along the last row or into the finite cells.  The seed is therefore the upstream gradient
# where the forward's value of the last cell is not +inf and 0 where it is, made right after
# the forward from its float64 R (the value returned would not do: in float32 or float16 it is
# +inf for finite float64 values past that dtype's range too) and kept with the weights.
# (The checkpointed backward recomputes R, and zeroes E where it is +inf in the kernel.)


def _weights(B: int, N: int, M: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``P`` (B, 2, N, M) for the forward's weights, its storage followed by the pairs' seed
    factors (:func:`_seeds`): one allocation."""
    buf = torch.empty(B * (2 * N * M + 1), dtype=dtype, device=device)
    return buf[: B * 2 * N * M].view(B, 2, N, M)


def _seeds(P: torch.Tensor) -> torch.Tensor:
    """The (B,) seed factors after ``P``'s weights (:func:`_weights`): 1 for a pair whose value
    is finite or NaN, 0 where it is +inf."""
    return P.as_strided((P.shape[0],), (1,), P.storage_offset() + P.numel())


def _finite_values(
    Rb: View, B: int, N: int, M: int, lengths: torch.Tensor | None, out: torch.Tensor
) -> None:
    """Into ``out`` (B,): 0 where the forward's R of the pair's last cell is +inf, else 1.  Read
    from the forward's boundary buffer ``Rb``, where the publishing lane of each pair's last
    band puts its row too (float64 bits, the kernels' scaled units: +inf alike).  One op
    without ``lengths``."""
    nb = -(-N // K.TB)
    rows = Rb.t.view(torch.float64)[Rb.offset : Rb.offset + B * nb * (M + 1)].view(B, -1)
    if lengths is None:
        last = rows[:, (nb - 1) * (M + 1) + M - 1]
    else:  # row n - 1 is band (n - 1) // TB's last
        band = torch.div(lengths[:B] - 1, K.TB, rounding_mode="floor")
        last = rows.gather(1, band.mul_(M + 1).add_(lengths[B:] - 1).view(B, 1)).view(B)
    torch.ne(last, math.inf, out=out)


def _forward_key(mode: str, fast: bool, mover: bool, lengths: bool) -> tuple:
    """The launcher key of a forward spec (the plain spec's key where no lengths)."""
    if lengths:
        return (K.ForwardSpec, mode, fast, mover, "soft-dtw", True)
    return (K.ForwardSpec, mode, fast, mover)


def _backward_key(fast: bool, mover: bool, grads: int, lengths: bool) -> tuple:
    """The launcher key of a backward spec."""
    if lengths:
        return (K.BackwardSpec, fast, mover, grads, True)
    if grads:
        return (K.BackwardSpec, fast, mover, grads)
    return (K.BackwardSpec, fast, mover)


def forward(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    store: bool,
    spare: bool = False,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, View | None]:
    """Run the forward kernel (and, fused with ``store`` unless mode ``tiled``, the park
    kernel's distances into ``P`` before it).

    Parameters
    ----------
    a : (B, N, M) cost (unfused, ``y is None``) or (B, N, D) x (fused); float32 or float64.
    y : (B, M, D) or None.
    store : keep the weights ``P`` (B, 2, N, M) for a backward pass (and after them, in the
        same storage, the pairs' seeds of E: :func:`_seeds`).
    spare : also make the backward's boundary buffer, in the same fill.
    lengths : the pairs' own lengths, int64 (2 B,) on the device (x's, then y's), or None
        (all N and M); with them ``lo`` is the band's radius (-1: none) and ``hi`` unused:
        each pair's band follows its own lengths (:mod:`sdtw.band`).  The weights past a
        pair's lengths are not written.

    Returns
    -------
    values (B,) in ``a``'s dtype, ``P`` or None, and the spare boundary buffer or None.

    The park kernel is launched before any other allocation: the GPU has nothing to do until
    then (at B = 32, N = 1024 the GPU sat idle ~160 us before the park while the host made the
    boundary buffer).

    Fused with ``store``, the squared distances are first put in ``P`` and the forward reads
    them from there, overwriting each cell with its weights: no buffer besides ``P``.  They
    are float64 whatever the inputs' dtype, from the park kernel (float64 tensor cores): in
    plane 0 of a float64 ``P``; in a float32 ``P`` as the high (plane 1) and low (plane 0)
    32-bit words of their bits.  A float32 cost would not do: its rounding (~1e-7 of
    ``|x|^2 + |y|^2``) divided by a small gamma moves the weights of nearly tied paths, by up
    to ~1e-3 of the gradients at gamma = 1e-3 (B = 4, N = 512, D = 64, randn), over the 1e-4
    bar.  Fused without ``store``, the forward computes the distances itself (one launch, no
    (N, M) buffer at all): mode ``tiled`` or ``fused`` (:func:`sdtw.cuda.policy.forward_mode`).
    """
    fused = y is not None
    B, N = a.shape[0], a.shape[1]
    M = y.shape[1] if fused else a.shape[2]
    D = a.shape[2] if fused else 0
    dev = a.device
    nb = -(-N // K.TB)
    sdt = storage_dtype(a.dtype)
    fast = sdt == torch.float32
    streams = _stream(dev)
    if store:
        P = _weights(B, N, M, sdt, dev)
    else:
        P = _placeholder((2,), sdt, dev)  # not written without ``store``
    mode = policy.forward_mode(fused, fast, store, SIMULATED)
    # The kernel's X (flat, but for the fused mode's features) and Y (unused unless fused)
    src, src2 = flat(a), a
    p_arg = flat(P)
    if mode == K.TILED:  # the distances from the forward's own third warp; x and y flat
        src, src2 = flat(a), flat(y)
    elif mode in (K.HILO, K.SPLIT):
        # float64 distances from the park kernel: float64 P, plane 0; float32 P, as float32
        # bits' high and low words in planes 1 and 0.  The kernel reads and writes P through X.
        _park(fast, False, a, y, P, streams)
        src = flat(P)
        p_arg = _placeholder((2,), sdt, dev)  # (the weights go through X)
        src2 = _placeholder((1, 1, 1), sdt, dev)  # Y: unused
    elif mode == K.FUSED:
        src, src2 = a, y
    out = torch.empty(B, dtype=a.dtype, device=dev)
    bufs = _boundary(B, nb, M, dev, 2 if spare else 1, lengths)
    two = policy.forward_mover(mode, SIMULATED)
    _launcher(*_forward_key(mode, fast, two, lengths is not None))(
        B * nb, K.threads(two), streams, src, src2, N, M, D, float(gamma), int(lo), int(hi),
        p_arg, bufs[0], out, store,
    )  # fmt: skip
    launch_counts["forward"] += 1
    if store:
        _finite_values(bufs[0], B, N, M, lengths, _seeds(P))
    return out, (P if store else None), (bufs[1] if spare else None)


def backward(
    P: torch.Tensor,
    grad_out: torch.Tensor | None,
    sums: bool = False,
    Gb: View | None = None,
    mover: bool | None = None,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Overwrite ``P[:, 1]`` with ``E * grad_out`` (``None``: ones; E = 0 for a pair whose value
    is +inf, whatever its upstream gradient: :func:`_seeds`); return that view
    (B, N, M) and, if ``sums``, its row and column sums as one (B, N + M, 1) tensor in
    ``P``'s dtype (else None; the trailing 1 saves the callers a view to broadcast them).
    ``Gb``: a boundary buffer from :func:`_boundary` (None: one is made here, with
    ``lengths``); ``mover``: the variant (None: :func:`sdtw.cuda.policy.backward_mover` now);
    ``lengths``: as the forward's (E is zero past them)."""
    B, _, N, M = P.shape
    dev = P.device
    nb = -(-N // K.TB)
    if Gb is None:
        (Gb,) = _boundary(B, nb, M, dev, lengths=lengths)
    g = _seeds(P)
    if grad_out is not None:
        go = grad_out.detach()
        if go.dtype not in (torch.float32, torch.float64):
            go = go.double()
        g = torch.where(g == 0, 0.0, go)  # (0 there even for a NaN or inf upstream gradient)
    if sums:
        S = torch.zeros((B, N + M, 1), dtype=P.dtype, device=dev)
        s_arg = View(S, (B, N + M))
    else:
        S = s_arg = _placeholder((1, 1), P.dtype, dev)  # a (1, 1) ``sums``: none
    two = policy.backward_mover(SIMULATED) if mover is None else mover
    none = _placeholder((1,), torch.float32, dev)  # (the in-sweep gradients' slots)
    _launcher(*_backward_key(P.dtype == torch.float32, two, 0, lengths is not None))(
        B * nb, K.threads(two), _stream(dev), flat(P), N, M, g, Gb, s_arg,
        none, none, 0, none, none,
    )  # fmt: skip
    launch_counts["backward"] += 1
    return P[:, 1], (S if sums else None)


_capabilities: dict[int | None, tuple[int, int]] = {}


def _capability(device: torch.device) -> tuple[int, int]:
    """The device's compute capability (asked once per device; the simulator's is 9.0, so that
    it runs the variants an H200 takes)."""
    cc = _capabilities.get(device.index)
    if cc is None:
        cc = (9, 0) if SIMULATED else torch.cuda.get_device_capability(device)
        _capabilities[device.index] = cc
    return cc


def sweep_grads(x: torch.Tensor) -> bool:
    """Whether the eager gradients of the kernels' inputs ``x`` (B, N, D) come from the
    backward kernel's sweep (:func:`backward_grads`; :func:`sdtw.cuda.policy.sweep_grads`)."""
    return policy.sweep_grads(
        x.dtype == torch.float32, x.shape[2], SIMULATED, _capability(x.device)
    )


def _aligned16(t: torch.Tensor) -> torch.Tensor:
    """``t`` (contiguous), or a copy of it where its data does not start on 16 bytes (a view
    with an offset; new allocations are aligned far beyond that)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def backward_grads(
    P: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    Gb: View | None = None,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of each pair's value (upstream gradient 1; 0 where the value is +inf)
    wrt contiguous float32 x (B, N, D) and y (B, M, D) (``D <= 16``) from the forward's
    weights ``P`` (B, 2, N, M) (which are read, not written) in one backward launch: the
    gradient warp multiplies each chunk of E on the tensor cores during the sweep
    (:mod:`sdtw.cuda.kernels.sweep`); E never goes to memory.  Returns (B, N, D) and
    (B, M, D) float32 (zero past ``lengths``, as the forward's)."""
    B, _, N, M = P.shape
    D = x.shape[2]
    dev = P.device
    nb = -(-N // K.TB)
    if D % 4 == 0:  # (the gradient warp then copies their rows 16 bytes at a time)
        x, y = _aligned16(x), _aligned16(y)
    if Gb is None:
        (Gb,) = _boundary(B, nb, M, dev, lengths=lengths)
    # (with lengths, bands past a pair's rows leave without writing theirs)
    gx = torch.empty_like(x) if lengths is None else torch.zeros_like(x)
    gy = torch.zeros_like(y)  # (the bands add their shares)
    g = _seeds(P)
    none = _placeholder((1, 1), P.dtype, dev)  # no sums
    _launcher(*_backward_key(True, True, K.sweep_tiles(D), lengths is not None))(
        B * nb, K.threads(True), _stream(dev), flat(P), N, M, g, Gb, none,
        flat(x), flat(y), D, flat(gx), flat(gy),
    )  # fmt: skip
    launch_counts["backward"] += 1
    return gx, gy


def forward_backward(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`forward` with ``store``, then :func:`backward` for an upstream gradient of ones
    with ``sums`` (both launches' boundary buffers from one fill): the values (B,), E
    (B, N, M) (a view of ``P``) and E's row and column sums (B, N + M, 1)."""
    out, P, Gb = forward(a, y, gamma, lo, hi, True, spare=True, lengths=lengths)
    E, S = backward(P, None, True, Gb, lengths=lengths)
    return out, E, S


def forward_grads(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    xs: torch.Tensor,
    ys: torch.Tensor,
    lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`forward` with ``store`` on ``a`` (the cost, or x) and ``y``, then
    :func:`backward_grads` on the sequences ``xs``, ``ys`` (contiguous float32): the values
    (B,) and the gradients wrt ``xs`` and ``ys`` (upstream gradient 1)."""
    out, P, Gb = forward(a, y, gamma, lo, hi, True, spare=True, lengths=lengths)
    gx, gy = backward_grads(P, xs, ys, Gb, lengths)
    return out, gx, gy


def checkpoint_grads(
    x: torch.Tensor, y: torch.Tensor, gamma: float, radius: int, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The checkpointed mode (``memory="checkpoint"``) from contiguous x (B, N, D), y (B, M, D)
    (float32 or float64): the fused forward keeping its boundary rows and column checkpoints
    (no weights), then the recomputing backward (upstream gradient 1,
    :mod:`sdtw.cuda.kernels.recompute`).  ``radius``: the band's (-1: none); ``lengths``:
    int64 (2 B,) on the device.  Returns the values (B,) in x's dtype and the gradients wrt x
    and y, float64.  Memory: the two boundary buffers (the forward's about ``N M / 2`` bytes
    per pair) and the gradients."""
    B, N, D = x.shape
    M = y.shape[1]
    dev = x.device
    nb = -(-N // K.TB)
    nck = -(-M // K.TB)
    fast = x.dtype == torch.float32
    streams = _stream(dev)
    (Rb,) = _boundary(B, nb, M, dev, lengths=lengths, middle=B * nb * nck * K.TB)
    out = torch.empty(B, dtype=x.dtype, device=dev)
    P = _placeholder((2,), storage_dtype(x.dtype), dev)  # (no weights stored)
    _launcher(K.ForwardSpec, K.FUSED, fast, False, "soft-dtw", True, True)(
        B * nb, K.threads(False), streams, x, y, N, M, D, float(gamma), int(radius), 0,
        P, Rb, out, False,
    )  # fmt: skip
    launch_counts["forward"] += 1
    (Gb,) = _boundary(B, nb, M, dev, lengths=lengths)
    gx = torch.zeros((B, N, D), dtype=torch.float64, device=dev)
    gy = torch.zeros((B, M, D), dtype=torch.float64, device=dev)
    g = _constant((B,), 1.0, torch.float64, dev)
    _launcher(K.RecomputeSpec, fast)(
        B * nb, K.TB, streams, x, y, N, M, D, float(gamma), int(radius), Rb, Gb, g, gx, gy
    )
    launch_counts["backward"] += 1
    return out, gx, gy


def sqeuclidean(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean cost (B, N, M) of contiguous a (B, N, D), y (B, M, D) (float32 or
    float64) in their dtype: the park kernel's float64 distances, rounded once (one launch)."""
    B, N, _ = a.shape
    out = torch.empty((B, N, y.shape[1]), dtype=a.dtype, device=a.device)
    _park(a.dtype == torch.float32, True, a, y, out, _stream(a.device))
    return out


def _park(f32: bool, cost: bool, a: torch.Tensor, y: torch.Tensor, out: torch.Tensor, streams):
    """Launch a park kernel (:mod:`sdtw.cuda.kernels.park`) on contiguous a (B, N, D),
    y (B, M, D) into ``out`` (``P``, or with ``cost`` a cost tensor): one block per 64 x 64 tile
    of each pair."""
    B, N, D = a.shape
    M = y.shape[1]
    tiles = B * (-(-N // K.PS)) * (-(-M // K.PS))
    _launcher(K.ParkSpec, f32, cost)(
        tiles, K.PARK_THREADS, streams, flat(a), flat(y), flat(out), N, M, D
    )
    launch_counts["forward"] += 1
