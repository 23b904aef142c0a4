"""Launchers: allocate buffers, pick the grid, launch on torch's current stream.

Internal asserts only; the public entry has validated everything.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from collections import Counter

import torch

from sdtw._compat import patch_numpy_for_numba

patch_numpy_for_numba()

from numba import cuda  # noqa: E402

from sdtw.cuda import _kernels as K  # noqa: E402

#: Numba kernel launches made by this module, by kind ("forward", "backward"); the benchmark
#: reads the difference around a step.  torch's own small ops (zeros, sums, bmm) are not
#: counted here.
launch_counts: Counter = Counter()

_streams: dict[int, object] = {}

#: Force the *busy* (True) or *quiet* (False) kernel variants (tests); None: by occupancy.
FORCE_BUSY: bool | None = None
_sm_counts: dict[int, int] = {}


def busy(blocks: int, device: torch.device) -> bool:
    """Whether a launch of ``blocks`` one-warp blocks keeps each SM scheduler busy with one
    warp or more (``blocks >= 4 x SMs``): then the kernels' *busy* variant (boundary values
    stored per step, read by plain L2 loads) beat the *quiet* one (published a group at a time
    from shared memory, read by atomics) on the H200 at B = 32, N = 1024 (1024 blocks), and
    the quiet one won at B = 1 (32 blocks); see :func:`sdtw.cuda._kernels._build_handoff`.
    The threshold between those two measurements is a guess."""
    if FORCE_BUSY is not None:
        return FORCE_BUSY
    if K.SIMULATED:
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    n = _sm_counts.get(idx)
    if n is None:
        n = _sm_counts[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return blocks >= 4 * n


def _arr(t: torch.Tensor):
    """A numba view of a tensor: a NumPy array under the simulator, a device array on a GPU."""
    if K.SIMULATED:
        return t.detach().numpy()
    return cuda.as_cuda_array(t.detach(), sync=False)


def _stream(device: torch.device):
    """torch's current stream as (numba stream, cuda.core stream or None), cached per handle."""
    if K.SIMULATED:
        return 0, None
    ptr = torch.cuda.current_stream(device).cuda_stream
    s = _streams.get(ptr)
    if s is None:
        try:
            from cuda.core import Stream

            core = Stream.from_handle(ptr)
        except Exception:  # older cuda.core: the fast path passes numba's stream instead
            core = None
        s = _streams[ptr] = (cuda.external_stream(ptr), core)
    return s


class _Launcher:
    """Launch a Numba CUDA kernel with torch tensors, skipping Numba's per-call dispatch.

    Numba's generic launch costs about 100 us of host time for our 15 arguments plus about
    20 us per ``as_cuda_array``; at N = 512 that is most of a training step.  The first call
    for a given argument signature goes through Numba (compiling if needed); later calls pack
    the arguments the way Numba's ``_Kernel._prepare_args`` does (arrays as
    ``meminfo, parent, size, itemsize, data, shape..., strides...``) and call the same
    ``cuda.core.launch``.  That reaches into numba-cuda internals, so if they are not there
    (another numba-cuda version) we warn once and keep the regular launch.  Set
    ``SDTW_FAST_LAUNCH=0`` to force the regular path.
    """

    warned = False

    def __init__(self, dispatcher) -> None:
        self.dispatcher = dispatcher
        self.cache: dict[tuple, object] = {}

    @staticmethod
    def _key(a) -> tuple:
        if isinstance(a, torch.Tensor):
            return (a.dtype, a.dim(), a.is_contiguous())
        return (type(a),)

    def __call__(self, grid: int, block: int, streams, *args) -> None:
        stream, core_stream = streams
        key = tuple(self._key(a) for a in args)
        entry = self.cache.get(key)
        if entry is None or entry is False or K.SIMULATED:
            conv = [_arr(a) if isinstance(a, torch.Tensor) else a for a in args]
            self.dispatcher[grid, block, stream](*conv)
            if entry is None and not K.SIMULATED:
                self.cache[key] = self._find(conv)
            return
        kernel, config_for = entry
        flat: list = []
        for a in args:
            if isinstance(a, torch.Tensor):
                isz = a.element_size()
                flat += [0, 0, a.numel(), isz, a.data_ptr(), *a.shape]
                flat += [st * isz for st in a.stride()]
            elif isinstance(a, bool):
                flat.append(a)
            elif isinstance(a, int):
                flat.append(ctypes.c_int64(a))
            elif isinstance(a, float):
                flat.append(ctypes.c_double(a))
            else:  # e.g. a NumPy integer: packing it as a double would be silently wrong
                raise TypeError(f"sdtw: kernel argument of type {type(a).__name__}")
        launch_stream = stream if core_stream is None else core_stream
        _cuda_core_launch(launch_stream, config_for(grid, block), kernel, *flat)

    def _find(self, conv: list):
        if os.environ.get("SDTW_FAST_LAUNCH", "1") == "0":
            return False
        try:
            from numba.cuda.typing.typeof import Purpose, typeof

            sig = tuple(typeof(a, Purpose.argument) for a in conv)
            kern = self.dispatcher.overloads[sig]
            cu_kernel = kern._codelibrary.get_cufunc().kernel
            if getattr(kern, "cooperative", False) or getattr(kern, "debug", False):
                return False
            return cu_kernel, _config_factory()
        except Exception as exc:  # numba-cuda internals differ: keep the regular path
            if not _Launcher.warned:
                _Launcher.warned = True
                warnings.warn(
                    f"sdtw: fast kernel launch unavailable with this numba-cuda ({exc!r}); "
                    "using Numba's regular launch (about 0.1-0.3 ms more host time per call)",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return False


def _cuda_core_launch(*args) -> None:
    from numba.cuda.dispatcher import launch

    launch(*args)


def _config_factory():
    from numba.cuda.dispatcher import CUDA_CORE_GE_1_0, LaunchConfig

    cache: dict = {}

    def config_for(grid: int, block: int):
        cfg = cache.get((grid, block))
        if cfg is None:
            if CUDA_CORE_GE_1_0:
                cfg = LaunchConfig(
                    grid=(grid, 1, 1), block=(block, 1, 1), shmem_size=0, is_cooperative=False
                )
            else:
                cfg = LaunchConfig(
                    grid=(grid, 1, 1), block=(block, 1, 1), shmem_size=0, cooperative_launch=False
                )
            cache[(grid, block)] = cfg
        return cfg

    return config_for


_launchers: dict[int, _Launcher] = {}


def _launcher(dispatcher) -> _Launcher:
    la = _launchers.get(id(dispatcher))
    if la is None:
        la = _launchers[id(dispatcher)] = _Launcher(dispatcher)
    return la


def storage_dtype(dtype: torch.dtype) -> torch.dtype:
    """Stored weights and E: float64 for float64 inputs, float32 otherwise."""
    return torch.float64 if dtype == torch.float64 else torch.float32


_TF32X3 = os.environ.get("SDTW_TF32X3", "0") == "1"  # experiment switch (not yet measured)


def _split_tf32(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` (float32) as ``hi + lo``: ``hi`` its leading 11 significant bits (exact in TF32),
    ``lo`` the exact remainder."""
    hi = (t.view(torch.int32) & -8192).view(torch.float32)
    return hi, t - hi


def _dots_tf32x3(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    """``out <- x y^T`` as ``x_hi y_hi + x_hi y_lo + x_lo y_hi``: one TF32 tensor-core
    matmul over 3 D features (float32 accumulation)."""
    xh, xl = _split_tf32(x)
    yh, yl = _split_tf32(y)
    xa = torch.cat((xh, xh, xl), 2)
    ya = torch.cat((yh, yl, yh), 2)
    m = torch.backends.cuda.matmul
    was = m.allow_tf32
    m.allow_tf32 = True
    try:
        torch.bmm(xa, ya.transpose(1, 2), out=out)
    finally:
        m.allow_tf32 = was


_placeholders: dict[tuple, torch.Tensor] = {}


def _placeholder(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small tensor for an argument slot the kernel will not touch (one per kind, reused)."""
    key = (shape, dtype, device)
    t = _placeholders.get(key)
    if t is None:
        t = _placeholders[key] = torch.zeros(shape, dtype=dtype, device=device)
    return t


def _boundary(B: int, nb: int, M: int, device: torch.device) -> torch.Tensor:
    """Boundary rows between bands, (B, nb, M + 1) int64 float64 bits flattened, then one
    element for the blocks' ticket counter; all ``SENTINEL`` (one fill, no second buffer).
    Row (b, k) is band k's last row; column ``M`` is padding."""
    return torch.full((B * nb * (M + 1) + 1,), K.SENTINEL, dtype=torch.int64, device=device)


def forward(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    store: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the forward kernel (and, fused with ``store``, the distances into ``P`` before it).

    Parameters
    ----------
    a : (B, N, M) cost (unfused, ``y is None``) or (B, N, D) x (fused); float32 or float64.
    y : (B, M, D) or None.
    store : keep the weights ``P`` (B, 2, N, M) for a backward pass.

    Returns
    -------
    values (B,) in ``a``'s dtype, and ``P`` or None.

    Fused with ``store``, the squared distances are first put in ``P`` and the forward reads
    them from there, overwriting each cell with its weights: no buffer besides ``P``.  For
    float32 inputs a float32 batched matmul (cuBLAS, not a Numba launch) writes the dot
    products into P's plane 1 and the forward kernel adds the squared norms as it stages
    them, the same rounding as the unfused path's float32 cost
    (:func:`sdtw._sqeuclidean.sqeuclidean`); for float64 inputs, float64 distances from the
    park kernel (:func:`sdtw.cuda._kernels._build_park`) in plane 0.
    Fused without ``store``, the forward computes the distances itself (one launch, no
    (N, M) buffer at all, but slower: the dot products sit in the DP's warps).
    """
    fused = y is not None
    B, N = a.shape[0], a.shape[1]
    M = y.shape[1] if fused else a.shape[2]
    D = a.shape[2] if fused else 0
    dev = a.device
    nb = -(-N // K.TB)
    sdt = storage_dtype(a.dtype)
    fast = sdt == torch.float32
    out = torch.empty(B, dtype=a.dtype, device=dev)
    streams = _stream(dev)
    if store:
        P = torch.empty((B, 2, N, M), dtype=sdt, device=dev)
    else:
        P = _placeholder((1, 2, 1, 1), sdt, dev)  # not written without ``store``
    mode = K.COST
    src, src2 = a, a  # the kernel's X and Y (Y unused unless fused)
    p_arg = P
    if fused and store:
        if fast:  # dot products into plane 1, the norms beside; the kernel reads and writes
            # P through X
            if _TF32X3:
                _dots_tf32x3(a, y, P[:, 1])
            else:
                torch.bmm(a, y.transpose(1, 2), out=P[:, 1])
            src2 = torch.cat(((a * a).sum(-1), (y * y).sum(-1)), 1)
            mode, src, p_arg = K.PLANE, P, _placeholder((1, 2, 1, 1), sdt, dev)
        else:  # float64 distances parked in plane 0
            tiles = B * (-(-N // K.PS)) * (-(-M // K.PS))
            _launcher(K.PARK)(tiles, K.PARK_THREADS, streams, a, y, P.view(-1), N, M)
            launch_counts["forward"] += 1
            mode, src = K.SPLIT, P
            src2 = _placeholder((1, 1, 1, 1), sdt, dev)  # Y: unused
    elif fused:
        mode, src2 = K.FUSED, y
    Rb = _boundary(B, nb, M, dev)
    _launcher(K.FORWARD[mode, fast, busy(B * nb, dev)])(
        B * nb,
        K.TB,
        streams,
        src,
        src2,
        N,
        M,
        D,
        float(gamma),
        int(lo),
        int(hi),
        p_arg,
        Rb,
        out,
        store,
    )
    launch_counts["forward"] += 1
    return out, (P if store else None)


def backward(
    P: torch.Tensor, grad_out: torch.Tensor, sums: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Overwrite ``P[:, 1]`` with ``E * grad_out``; return that view (B, N, M) and, if ``sums``,
    its row and column sums as one (B, N + M) tensor in ``P``'s dtype (else None)."""
    B, _, N, M = P.shape
    dev = P.device
    nb = -(-N // K.TB)
    Gb = _boundary(B, nb, M, dev)
    g = grad_out.detach()
    if g.dtype not in (torch.float32, torch.float64):
        g = g.double()
    if sums:
        S = torch.zeros((B, N + M), dtype=P.dtype, device=dev)
    else:
        S = _placeholder((1, 1), P.dtype, dev)  # a (1, 1) ``sums`` tells the kernel: none
    kern = K.BACKWARD[P.dtype == torch.float32, busy(B * nb, dev)]
    _launcher(kern)(B * nb, K.TB, _stream(dev), P, N, M, g, Gb, S)
    launch_counts["backward"] += 1
    return P[:, 1], (S if sums else None)
