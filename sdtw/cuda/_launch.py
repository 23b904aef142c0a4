"""Launchers: allocate buffers, pick the grid, launch on torch's current stream.

Internal asserts only; the public entry has validated everything.
"""

from __future__ import annotations

import ctypes
import math
import os
import struct
import threading
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

#: Force the *busy* (True) or *quiet* (False) kernel variants (tests); None: :func:`busy`.
FORCE_BUSY: bool | None = None


def busy() -> bool:
    """Whether DP launches take the kernels' *busy* variant (boundary values stored per step,
    read by plain L2 loads) rather than the *quiet* one (published a group at a time from
    shared memory, read by atomics; see :func:`sdtw.cuda._kernels._build_handoff`).

    On the H200 the busy variant was the faster at every size measured (``probe-dev.txt``):
    DP kernels of the cost path at 16 to 1024 blocks (run 38, ``probe --busy``: forward
    8-15%, backward 20-27% faster) and the fused forward without gradients at B = 1, N = 4096
    and 16384, B = 4, N = 2048 and B = 32, N = 512 and 1024 (run 39: 0.2-6% faster).  (An
    earlier rule took the quiet one below 4 blocks per SM, from a measurement of older
    kernels.)  The simulator runs the busy one too, so that the tests run what a GPU runs;
    ``FORCE_BUSY = False`` selects the quiet one (its tests, the sanitizer case, probes)."""
    return True if FORCE_BUSY is None else FORCE_BUSY


#: Force the forward's *mover* variant on (True) or off (False) in every mode but modes
#: ``fused`` (never) and ``tiled`` (always; see :func:`tiled`) (tests, probes, the sanitizer
#: case);
#: None: :func:`mover`.  ``SDTW_MOVER=0`` / ``1`` in the environment sets it at import.
FORCE_MOVER: bool | None = {"0": False, "1": True}.get(os.environ.get("SDTW_MOVER", ""))
#: Force the backward's mover variant on (True) or off (False); None: :func:`backward_mover`.
#: ``SDTW_BACKWARD_MOVER=0`` / ``1`` in the environment sets it at import.
FORCE_BACKWARD_MOVER: bool | None = {"0": False, "1": True}.get(
    os.environ.get("SDTW_BACKWARD_MOVER", "")
)


#: Force the fused float32 forward to compute its distances in a third warp per band (mode
#: ``tiled``: True, with gradients too) or never (False); None: :func:`tiled`.
#: ``SDTW_TILED=0`` / ``1`` in the environment sets it at import.
FORCE_TILED: bool | None = {"0": False, "1": True}.get(os.environ.get("SDTW_TILED", ""))


def tiled(fast: bool, store: bool) -> bool:
    """Whether a fused forward takes mode ``tiled``: a third warp per band, the *distance
    warp*, computes the distances on the float64 tensor cores a column chunk ahead of the
    band's steps (see :func:`sdtw.cuda._kernels._build_forward`), one launch, no (N, M)
    buffer for them.

    Taken by the fused float32 forward without gradients (``store`` off), on a GPU, where it
    replaced mode ``fused`` (the distances computed by the band's own warp between its
    chunks' steps): at B = 32, D = 64 0.430 / 0.995 / 2.935 ms against 0.655 / 1.459 /
    3.689 at N = 512 / 1024 / 2048 (``probe-dev.txt``, run 108).  Not with gradients: there
    the park kernel and mode ``hilo`` stay, whose two launches took 180 + 49 us at N = 512
    and 1323 + 681 at N = 2048 against 420 and 3309 for this mode with its weights stored
    (run 107).  Nsight Compute at N = 512 (run 114) finds the float64 pipe nearly idle (2.2%
    float64 arithmetic, 4.0% DMMA) and the warps waiting at the barriers: 7.5 of the 16.2
    cycles between two issued instructions (mode ``hilo``: 3.3 of 9.4).  So the distance
    warp's chunk takes longer than the steps' chunk.  Its values are the park kernel's and
    mode ``hilo``'s bit for bit (GPU tests).
    :data:`FORCE_TILED` overrides the rule; under the simulator only it turns the mode on."""
    if FORCE_TILED is not None:
        return fast and FORCE_TILED
    return fast and not store and not K.SIMULATED


def mover(mode: str) -> bool:
    """Whether a forward launch in ``mode`` takes the variant with a mover warp per band (it
    stages the costs and writes the weights out, while the band's own warp runs the steps; see
    :func:`sdtw.cuda._kernels._build_forward`).

    Taken by the fused forward with gradients from float32 inputs (mode ``hilo``), at every
    batch size and length.  At B = 32, D = 64 its DP forward took 201.5 us against 223.9 for
    the one-warp kernel at N = 512 (``probe-dev.txt``, run 66) and 480.8 against 578.6 at
    N = 1024 (run 71, 8 blocks per SM: an earlier form of the variant, loading one item
    ahead, had been slower there, run 64).  The unfused float32 forward (mode ``cost``, whose
    one-warp staging is cheaper: float32 costs, no word join) got slower with it (209.3 us
    against 192.7 at N = 512, 502.7 against 485.3 at N = 1024), and so keeps the one-warp
    kernel, as do the float64 modes, whose forward is bound by its float64 arithmetic: with
    the mover 2054 against 1918 us at N = 512 and 5523 against 5852 at N = 1024, fused
    (run 74).  Never for mode ``fused`` (the float64 fused forward without gradients); always
    for mode ``tiled``, whose distance warp hands its tiles to the mover (:func:`tiled`).
    :data:`FORCE_MOVER` overrides the rule; under the simulator only it turns the variant on.
    The backward's rule is :func:`backward_mover`."""
    if mode == K.FUSED:
        return False
    if mode == K.TILED:
        return True  # (the mode is the mover variant's)
    if FORCE_MOVER is not None:
        return FORCE_MOVER
    return mode == K.HILO and not K.SIMULATED


def backward_mover() -> bool:
    """Whether the DP backward takes the variant with a mover warp per band (it zeroes the
    ring, stages the weights and the forward's values, and writes E and its column sums out,
    while the band's warp runs the steps; see :func:`sdtw.cuda._kernels._build_backward`).

    Taken on a GPU for both dtypes and both modes (the backward kernel is the same).  At
    B = 32, D = 64 it took the float32 DP backward from 127.9 to 105.1 us at N = 512
    (``probe-dev.txt``, run 70), 326.1 to 271.0 at N = 1024 and 917.4 to 878.7 at N = 2048
    (run 71, fused; unfused 916.6 to 854.9), and the float64 one from 149.5 to 118.7 us at
    N = 512 and 399.4 to 398.1 at N = 1024 (run 74).  E is the one-warp kernel's bit for bit;
    E's column sums of a partial band (fused gradients) are added in another order.
    :data:`FORCE_BACKWARD_MOVER` overrides the rule; under the simulator only it turns the
    variant on."""
    if FORCE_BACKWARD_MOVER is not None:
        return FORCE_BACKWARD_MOVER
    return not K.SIMULATED


def _arr(t: torch.Tensor):
    """A numba view of a tensor: a NumPy array under the simulator, a device array on a GPU."""
    if K.SIMULATED:
        return t.detach().numpy()
    return cuda.as_cuda_array(t.detach(), sync=False)


#: torch's raw current-stream query (one C call; ``torch.cuda.current_stream`` builds a
#: ``Stream`` object in Python each time, host time on every launch), if this torch has it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: torch.device):
    """torch's current stream as (numba stream, raw ``CUstream`` address), cached per handle."""
    if K.SIMULATED:
        return 0, 0
    if _raw_stream is not None and device.index is not None:
        ptr = _raw_stream(device.index)
    else:
        ptr = torch.cuda.current_stream(device).cuda_stream
    s = _streams.get(ptr)
    if s is None:
        s = _streams[ptr] = (cuda.external_stream(ptr), ptr)
    return s


class _Launcher:
    """Launch a Numba CUDA kernel with torch tensors, skipping Numba's per-call dispatch.

    Numba's generic launch costs about 100 us of host time for our 12 arguments plus about
    20 us per ``as_cuda_array``, and even packing the arguments for ``cuda.core``'s launch
    (one Python object per flattened parameter, 40-60 of them) kept the GPU waiting for the
    host before each DP kernel (a torch.profiler trace at B = 32, N = 1024 showed it idle
    130 us before the forward).  So the first call for a given argument signature goes
    through Numba (compiling if needed) and records the compiled kernel's handle and its
    parameter layout (offset and size of each flattened parameter, from the driver:
    ``cuKernelGetParamInfo``); later calls pack the parameters, flattened the way Numba's
    ``_Kernel._prepare_args`` does (arrays as ``meminfo, parent, size, itemsize, data,
    shape..., strides...``), into one buffer with a single ``struct.pack_into`` and call
    ``cuLaunchKernel`` through ctypes with that buffer (``CU_LAUNCH_PARAM_BUFFER_POINTER``).
    If numba-cuda's internals or the layout are not what this expects, it warns once and keeps
    Numba's regular launch.  ``SDTW_FAST_LAUNCH=0`` forces the regular path.
    """

    warned = False

    def __init__(self, dispatcher) -> None:
        self.dispatcher = dispatcher
        self.cache: dict[tuple, object] = {}

    def __call__(self, grid: int, block: int, streams, *args) -> None:
        stream, stream_ptr = streams
        key, flat = _signature(args)
        entry = self.cache.get(key)
        if entry is None or entry is False or K.SIMULATED:
            conv = [a.tensor() if type(a) is _View else a for a in args]
            conv = [_arr(a) if isinstance(a, torch.Tensor) else a for a in conv]
            try:
                self.dispatcher[grid, block, stream](*conv)
            except Exception as exc:
                # (the first call of a signature compiles, or loads, the kernel)
                err = exc if entry is not None else _toolkit_error(exc)
                if err is exc:
                    raise
                raise err from exc
            if entry is None and not K.SIMULATED:
                self.cache[key] = self._find(conv, flat)
            return
        launch, handle, fmt, params = entry
        buf, extra = params.buf, params.extra  # this thread's own buffer
        fmt.pack_into(buf, 0, *flat)
        _driver_call(
            launch, "cuLaunchKernel", handle, grid, 1, 1, block, 1, 1, 0, stream_ptr, None, extra
        )

    def _find(self, conv: list, flat: list):
        if os.environ.get("SDTW_FAST_LAUNCH", "1") == "0":
            return False
        try:
            from numba.cuda.typing.typeof import Purpose, typeof

            sig = tuple(typeof(a, Purpose.argument) for a in conv)
            kern = self.dispatcher.overloads[sig]
            if getattr(kern, "cooperative", False) or getattr(kern, "debug", False):
                return False
            core_kernel = kern._codelibrary.get_cufunc().kernel
            layout = [(p.offset, p.size) for p in core_kernel.arguments_info]
            fmt = _param_format(flat, layout)
            launch = _driver_launch()
            if launch is None:
                raise OSError("cuLaunchKernel not found in libcuda.so.1")
            return launch, int(core_kernel.handle), fmt, _ParamBuffer(fmt.size)
        except Exception as exc:  # numba-cuda internals or the driver differ: regular path
            if not _Launcher.warned:
                _Launcher.warned = True
                warnings.warn(
                    f"sdtw: fast kernel launch unavailable here ({exc!r}); "
                    "using Numba's regular launch (about 0.1-0.3 ms more host time per call)",
                    RuntimeWarning,
                    stacklevel=4,
                )
            return False


class _ParamBuffer(threading.local):
    """A parameter buffer and the ``extra`` array that hands it to ``cuLaunchKernel``, one
    per thread (ctypes releases the GIL during the driver call, so two threads launching
    the same kernel, e.g. under ``nn.DataParallel``, must not share one)."""

    def __init__(self, size: int) -> None:
        self.buf = ctypes.create_string_buffer(max(size, 8))
        self.size = ctypes.c_size_t(size)
        self.extra = (ctypes.c_void_p * 5)(  # holds raw addresses: self keeps both alive
            _CU_LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(self.buf),
            _CU_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(self.size),
            _CU_LAUNCH_PARAM_END,
        )


class _View:
    """A kernel argument: the C-contiguous view of ``shape`` into contiguous tensor ``t`` from
    element ``offset``.  The fast launch packs it straight from ``t``'s address; only Numba's
    own launch (the first call, the simulator) makes it a torch view.  Every torch op costs
    host time on each launch, and the H200 machine's host is slow at it (``probe-dev.txt``,
    run 41: 29-39 us per launcher call, 40-70 us for one ``torch.full`` and a split); a step
    made about ten views for its launches."""

    __slots__ = ("offset", "shape", "t")

    def __init__(self, t: torch.Tensor, shape: tuple, offset: int = 0) -> None:
        self.t, self.shape, self.offset = t, shape, offset

    def tensor(self) -> torch.Tensor:
        n = math.prod(self.shape)
        return self.t.view(-1)[self.offset : self.offset + n].view(self.shape)


def _flat(t: torch.Tensor) -> _View:
    """``t`` (contiguous) as a 1-D kernel argument."""
    return _View(t, (t.numel(),))


_view_meta: dict[tuple, tuple] = {}


def _view_layout(shape: tuple, dtype: torch.dtype, isz: int) -> tuple:
    """A :class:`_View`'s cache-key entry and the parts of its flat parameters that do not
    depend on its address (element count, item size; shape and strides after the address):
    computed once per (shape, dtype)."""
    strides, st = [], isz
    for n in reversed(shape):
        strides.append(st)
        st *= n
    meta = ((dtype, len(shape), True), math.prod(shape), isz, (*shape, *reversed(strides)))
    if len(_view_meta) >= 4096:  # (a few entries per problem size: bounded all the same)
        _view_meta.clear()
    _view_meta[shape, dtype] = meta
    return meta


def _signature(args: tuple) -> tuple[tuple, list]:
    """The kernel arguments' cache key (dtype, rank and contiguity of each tensor, the type of
    each scalar) and their flat parameter values in Numba's calling convention, in one pass
    (host time: this runs on every launch).  A :class:`_View` gets what its torch view
    would."""
    key: list = []
    flat: list = []
    for a in args:
        if type(a) is _View:
            t = a.t
            meta = _view_meta.get((a.shape, t.dtype))
            if meta is None:
                meta = _view_layout(a.shape, t.dtype, t.element_size())
            k, n, isz, tail = meta
            key.append(k)
            flat += (0, 0, n, isz, t.data_ptr() + a.offset * isz, *tail)
        elif isinstance(a, torch.Tensor):
            sh = a.shape
            isz = a.element_size()
            key.append((a.dtype, len(sh), a.is_contiguous()))
            flat += (0, 0, a.numel(), isz, a.data_ptr(), *sh)
            flat += [st * isz for st in a.stride()]
        elif isinstance(a, (bool, int, float)):
            key.append(type(a))
            flat.append(a)
        else:  # e.g. a NumPy integer: its packing would be a guess
            raise TypeError(f"sdtw: kernel argument of type {type(a).__name__}")
    return tuple(key), flat


def _param_format(flat: list, layout: list[tuple[int, int]]) -> struct.Struct:
    """The ``struct`` layout of the parameter buffer: each value at the driver's offset, with
    the driver's size (8-byte integers and doubles, 1-byte booleans); anything else is an
    error (the caller then keeps Numba's launch)."""
    if len(flat) != len(layout):
        raise ValueError(f"{len(flat)} flattened values for {len(layout)} kernel parameters")
    fmt, pos = "<", 0
    for v, (off, size) in zip(flat, layout, strict=True):
        if off < pos:
            raise ValueError(f"overlapping kernel parameters at offset {off}")
        fmt += "x" * (off - pos)
        code = "?" if isinstance(v, bool) else ("d" if isinstance(v, float) else "q")
        if struct.calcsize("<" + code) != size:
            raise ValueError(f"kernel parameter of {size} bytes for a {type(v).__name__}")
        fmt += code
        pos = off + size
    return struct.Struct(fmt)


_CU_LAUNCH_PARAM_END = 0
_CU_LAUNCH_PARAM_BUFFER_POINTER = 1
_CU_LAUNCH_PARAM_BUFFER_SIZE = 2
_CUDA_ERROR_INVALID_CONTEXT = 201
_driver_fns: dict[str, object] = {}


def _driver_fn(name: str, argtypes: list):
    """The driver library's function ``name`` through ctypes (loaded once, returning a
    ``CUresult``), or None where the library or the function is missing."""
    fn = _driver_fns.get(name, False)
    if fn is False:
        try:
            fn = getattr(ctypes.CDLL("libcuda.so.1"), name)
        except (OSError, AttributeError):
            fn = None
        else:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        _driver_fns[name] = fn
    return fn


def _driver_call(fn, what: str, *args) -> None:
    """``fn(*args)``, a driver call; once more after making the device's primary context
    current where this thread had none yet (Numba does that), and an error if it fails."""
    rc = fn(*args)
    if rc == _CUDA_ERROR_INVALID_CONTEXT:
        cuda.current_context()
        rc = fn(*args)
    if rc != 0:
        raise RuntimeError(f"sdtw: {what} failed with CUresult {rc}")


def _driver_launch():
    """``cuLaunchKernel``, or None."""
    u, vp = ctypes.c_uint, ctypes.c_void_p
    return _driver_fn("cuLaunchKernel", [vp, u, u, u, u, u, u, u, vp, vp, vp])


def _driver_memcpy():
    """``cuMemcpyDtoDAsync_v2``, or None."""
    u64 = ctypes.c_uint64
    return _driver_fn("cuMemcpyDtoDAsync_v2", [u64, u64, ctypes.c_size_t, ctypes.c_void_p])


def copy_into(dst: torch.Tensor, src: torch.Tensor, stream_ptr: int) -> None:
    """``dst.copy_(src)`` (no autograd), queued on the stream whose raw ``CUstream`` address is
    ``stream_ptr`` (torch's current stream on ``dst``'s device; ``dst``: contiguous, of
    ``src``'s shape and device).  Where ``src`` is contiguous and of ``dst``'s dtype, one
    ``cuMemcpyDtoDAsync`` through ctypes, which skips the tensor iterator torch's ``copy_``
    sets up each time: on the H200 machine 5.1 us against 7.2 timed in a loop (run 82 of
    ``probe-dev.txt``), and 26-44 us against 37-64 for a replay's two copies in synchronised
    steps (run 83; noisy); else torch's ``copy_``."""
    fn = _driver_memcpy() if src.dtype == dst.dtype and src.is_contiguous() else None
    if fn is None:
        with torch.no_grad():
            dst.copy_(src)
        return
    nbytes = dst.numel() * dst.element_size()
    _driver_call(fn, "cuMemcpyDtoDAsync", dst.data_ptr(), src.data_ptr(), nbytes, stream_ptr)


class _Memcpy3D(ctypes.Structure):
    """The driver's ``CUDA_MEMCPY3D``: a memcpy node's parameters (25 eight-byte fields; the
    two memory-type enums are padded to eight bytes by ctypes' alignment, as by C's)."""

    _fields_ = [
        *((n, ctypes.c_size_t) for n in ("srcXInBytes", "srcY", "srcZ", "srcLOD")),
        ("srcMemoryType", ctypes.c_int),
        ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64),
        ("srcArray", ctypes.c_void_p),
        ("reserved0", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("srcHeight", ctypes.c_size_t),
        *((n, ctypes.c_size_t) for n in ("dstXInBytes", "dstY", "dstZ", "dstLOD")),
        ("dstMemoryType", ctypes.c_int),
        ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64),
        ("dstArray", ctypes.c_void_p),
        ("reserved1", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("dstHeight", ctypes.c_size_t),
        *((n, ctypes.c_size_t) for n in ("WidthInBytes", "Height", "Depth")),
    ]


_CU_GRAPH_NODE_TYPE_MEMCPY = 1


class CopyNode:
    """A memcpy node of an instantiated CUDA graph whose source can be moved (the library
    graphs' copy-in of x and y, :mod:`sdtw.cuda._graphs`): :meth:`point` makes the graph's
    later launches copy from another device address, one driver call, made only when the
    address differs from the current one."""

    __slots__ = ("ctx", "exec_", "node", "params", "src")

    def __init__(self, exec_: int, node: int, params: _Memcpy3D, ctx: int) -> None:
        self.exec_, self.node, self.params, self.ctx = exec_, node, params, ctx
        self.src = params.srcDevice

    def point(self, src: int) -> None:
        """Copy from device address ``src`` (same size, same device) from the next launch on;
        launches already queued keep the old source."""
        if src == self.src:
            return
        self.params.srcDevice = src
        _driver_call(
            _driver_set_copy(),
            "cuGraphExecMemcpyNodeSetParams",
            self.exec_,
            self.node,
            ctypes.byref(self.params),
            self.ctx,
        )
        self.src = src

    def disable(self) -> None:
        """Leave this node out of the graph's later launches (``cuGraphNodeSetEnabled``)."""
        _driver_call(_driver_enable(), "cuGraphNodeSetEnabled", self.exec_, self.node, 0)


def _driver_enable():
    """``cuGraphNodeSetEnabled``, or None."""
    return _driver_fn("cuGraphNodeSetEnabled", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint])


def _driver_set_copy():
    """``cuGraphExecMemcpyNodeSetParams``, or None."""
    vp = ctypes.c_void_p
    return _driver_fn("cuGraphExecMemcpyNodeSetParams", [vp, vp, ctypes.POINTER(_Memcpy3D), vp])


def copy_nodes(graph: int, exec_: int, dsts: tuple[int, ...]) -> tuple[CopyNode, ...] | None:
    """The memcpy nodes of the CUDA graph ``graph`` (a ``CUgraph`` handle, instantiated as
    ``exec_``) that write to the device addresses ``dsts``, one each, in that order; None
    where the driver lacks a function to re-point or disable them or the graph does not have
    exactly one such node per address."""
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    get_nodes = _driver_fn("cuGraphGetNodes", [vp, ctypes.POINTER(vp), ctypes.POINTER(sz)])
    get_type = _driver_fn("cuGraphNodeGetType", [vp, ctypes.POINTER(ctypes.c_int)])
    get_params = _driver_fn("cuGraphMemcpyNodeGetParams", [vp, ctypes.POINTER(_Memcpy3D)])
    set_params = _driver_set_copy()
    get_ctx = _driver_fn("cuCtxGetCurrent", [ctypes.POINTER(vp)])
    if None in (get_nodes, get_type, get_params, set_params, get_ctx, _driver_enable()):
        return None
    count = sz(0)
    _driver_call(get_nodes, "cuGraphGetNodes", graph, None, ctypes.byref(count))
    nodes = (vp * count.value)()
    _driver_call(get_nodes, "cuGraphGetNodes", graph, nodes, ctypes.byref(count))
    ctx = vp()
    _driver_call(get_ctx, "cuCtxGetCurrent", ctypes.byref(ctx))
    found: dict[int, list] = {d: [] for d in dsts}
    for node in nodes[: count.value]:
        kind = ctypes.c_int(-1)
        _driver_call(get_type, "cuGraphNodeGetType", node, ctypes.byref(kind))
        if kind.value != _CU_GRAPH_NODE_TYPE_MEMCPY:
            continue
        params = _Memcpy3D()
        _driver_call(get_params, "cuGraphMemcpyNodeGetParams", node, ctypes.byref(params))
        if params.dstDevice in found:
            found[params.dstDevice].append((node, params))
    if any(len(v) != 1 for v in found.values()):
        return None
    return tuple(CopyNode(exec_, *found[d][0], ctx.value) for d in dsts)


_launchers: dict[int, _Launcher] = {}


#: What in a compile error says that a piece of the CUDA toolkit is missing (numba-cuda needs
#: NVVM and libdevice to compile, and NVRTC for the architectures it may compile for).
_TOOLKIT_PIECES = {"nvvm": "NVVM", "nvrtc": "NVRTC", "libdevice": "libdevice"}


def missing_toolkit(text: str) -> list[str]:
    """The pieces of the CUDA toolkit that an error message says are missing (none: [])."""
    text = text.lower()
    return [name for key, name in _TOOLKIT_PIECES.items() if key in text]


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


def _launcher(dispatcher) -> _Launcher:
    la = _launchers.get(id(dispatcher))
    if la is None:
        la = _launchers[id(dispatcher)] = _Launcher(dispatcher)
    return la


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
    t = _constants.get(key)
    if t is None:
        t = torch.full(shape, value, dtype=dtype, device=device)
        if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
            _constants[key] = t
    return t


def _placeholder(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small tensor for an argument slot the kernel will not touch (one per kind, reused)."""
    return _constant(shape, 0.0, dtype, device)


#: With ``K.TIMING``: each launch's boundary buffer, whose tail holds the blocks' stamps.
timing_buffers: list[torch.Tensor] = []


def _boundary(B: int, nb: int, M: int, device: torch.device, count: int = 1) -> tuple:
    """``count`` boundary buffers (one per DP launch), each (B, nb, M + 1) int64 float64 bits
    flattened, then one element for the blocks' ticket counter; all ``SENTINEL``, from one
    fill.  Row (b, k) is band k's last row; column ``M`` is padding.  (With ``K.TIMING``,
    the blocks' stamps go between the rows and the counter.)"""
    extra = K.STAMPS * B * nb if K.TIMING else 0
    n = B * nb * (M + 1) + extra + 1
    hand = torch.full((count * n,), K.SENTINEL, dtype=torch.int64, device=device)
    views = tuple(_View(hand, (n,), k * n) for k in range(count))
    if K.TIMING:
        timing_buffers.extend(v.tensor() for v in views)
    return views


def forward(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    store: bool,
    spare: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, _View | None]:
    """Run the forward kernel (and, fused with ``store`` unless :func:`tiled`, the park
    kernel's distances into ``P`` before it).

    Parameters
    ----------
    a : (B, N, M) cost (unfused, ``y is None``) or (B, N, D) x (fused); float32 or float64.
    y : (B, M, D) or None.
    store : keep the weights ``P`` (B, 2, N, M) for a backward pass.
    spare : also make the backward's boundary buffer, in the same fill.

    Returns
    -------
    values (B,) in ``a``'s dtype, ``P`` or None, and the spare boundary buffer or None.

    The park kernel is launched before any other allocation: the GPU has nothing to do until
    then (at B = 32, N = 1024 a torch.profiler trace showed it idle ~160 us before the park
    while the host made the boundary buffer; ``probe-dev.txt``, run 40).

    Fused with ``store``, the squared distances are first put in ``P`` and the forward reads
    them from there, overwriting each cell with its weights: no buffer besides ``P``.  They
    are float64 whatever the inputs' dtype, from the park kernel
    (:func:`sdtw.cuda._kernels._build_park`, float64 tensor cores): in plane 0 of a float64
    ``P``; in a float32 ``P`` as the high (plane 1) and low (plane 0) 32-bit words of their
    bits.  A float32 cost would not do: its rounding (~1e-7 of ``|x|^2 + |y|^2``) divided by a small
    gamma moves the weights of nearly tied paths, by up to ~1e-3 of the gradients at
    gamma = 1e-3 (B = 4, N = 512, D = 64, randn), over the 1e-4 bar.
    Fused without ``store``, the forward computes the distances itself (one launch, no
    (N, M) buffer at all): from float32 inputs in a third warp per band (mode ``tiled``, see
    :func:`tiled`), from float64 inputs in the band's own warp between its steps (mode
    ``fused``, slower).
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
        P = torch.empty((B, 2, N, M), dtype=sdt, device=dev)
    else:
        P = _placeholder((2,), sdt, dev)  # not written without ``store``
    mode = K.COST
    # The kernel's X (flat, but for the fused mode's features) and Y (unused unless fused)
    src, src2 = _flat(a), a
    p_arg = _flat(P)
    if fused and tiled(fast, store):
        # the distances from the forward's own third warp; x and y flat
        mode, src, src2 = K.TILED, _flat(a), _flat(y)
    elif fused and store:
        # float64 distances from the park kernel: float64 P, plane 0; float32 P, as float32
        # bits' high and low words in planes 1 and 0.  The kernel reads and writes P through X.
        _park(K.PARK32 if fast else K.PARK, a, y, P, streams)
        mode, src = (K.HILO if fast else K.SPLIT), _flat(P)
        p_arg = _placeholder((2,), sdt, dev)  # (the weights go through X)
        src2 = _placeholder((1, 1, 1), sdt, dev)  # Y: unused
    elif fused:
        mode, src, src2 = K.FUSED, a, y
    out = torch.empty(B, dtype=a.dtype, device=dev)
    bufs = _boundary(B, nb, M, dev, 2 if spare else 1)
    two = mover(mode)
    _launcher(K.FORWARD[mode, fast, busy(), two])(
        B * nb,
        K.threads(two),
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
        bufs[0],
        out,
        store,
    )
    launch_counts["forward"] += 1
    return out, (P if store else None), (bufs[1] if spare else None)


def backward(
    P: torch.Tensor,
    grad_out: torch.Tensor | None,
    sums: bool = False,
    Gb: _View | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Overwrite ``P[:, 1]`` with ``E * grad_out`` (``None``: ones); return that view
    (B, N, M) and, if ``sums``, its row and column sums as one (B, N + M, 1) tensor in
    ``P``'s dtype (else None; the trailing 1 saves the callers a view to broadcast them).
    ``Gb``: a boundary buffer from :func:`_boundary` (None: one is made here)."""
    B, _, N, M = P.shape
    dev = P.device
    nb = -(-N // K.TB)
    if Gb is None:
        (Gb,) = _boundary(B, nb, M, dev)
    if grad_out is None:
        g = _constant((B,), 1.0, P.dtype, dev)
    else:
        g = grad_out.detach()
        if g.dtype not in (torch.float32, torch.float64):
            g = g.double()
    if sums:
        S = torch.zeros((B, N + M, 1), dtype=P.dtype, device=dev)
        s_arg = _View(S, (B, N + M))
    else:
        S = s_arg = _placeholder((1, 1), P.dtype, dev)  # a (1, 1) ``sums``: none
    two = backward_mover()
    kern = K.BACKWARD[P.dtype == torch.float32, busy(), two]
    none = _placeholder((1,), torch.float32, dev)  # (the in-sweep gradients' slots)
    _launcher(kern)(
        B * nb, K.threads(two), _stream(dev), _flat(P), N, M, g, Gb, s_arg,
        none, none, 0, none, none,
    )  # fmt: skip
    launch_counts["backward"] += 1
    return P[:, 1], (S if sums else None)


#: Force the gradients wrt x and y into the backward's sweep (True, for ``D <= 64``) or from E
#: afterwards (False); None: :func:`sweep_grads`'s rule.  ``SDTW_SWEEP_GRADS=0`` / ``1`` sets it
#: at import.
FORCE_SWEEP_GRADS: bool | None = {"0": False, "1": True}.get(os.environ.get("SDTW_SWEEP_GRADS", ""))
#: The largest D whose float32 gradients come from the sweep by default (the gradient warp's
#: variants of one and two feature tiles, :func:`sdtw.cuda._kernels.sweep_tiles`).
SWEEP_DEFAULT_MAX_D = 16


def sweep_grads(x: torch.Tensor) -> bool:
    """Whether the eager gradients of the kernels' inputs ``x`` (B, N, D) come from the
    backward kernel's sweep (:func:`backward_grads`: E never written) rather than from E
    afterwards: float32 with ``D <= 16`` (:data:`SWEEP_DEFAULT_MAX_D`) where the backward takes
    its mover variant (whose third warp computes them: on a GPU, or forced under the
    simulator).  :data:`FORCE_SWEEP_GRADS` (``SDTW_SWEEP_GRADS=0`` / ``1``) turns it off, or on
    up to ``D = 64`` (the gradient warp's accumulators).

    The rule follows ``probe --sweepab`` on the H200 (run 131 of ``probe-dev.txt``, 13c8e8b;
    B = 32, fused, whole-step CUDA-graph replays, sweep against from E, us): N = 512, D = 1
    407 / 396, D = 8 408 / 432, D = 16 432 / 434, D = 32 500 / 448, D = 64 617 / 463;
    N = 2048, D = 1 2754 / 2950, D = 16 2999 / 3257, D = 64 4783 / 3651; D = 32 at
    N = 1024 1133 / 1065, at N = 2048 3421 / 3388 (run 151: no size where it wins).  The sweep's
    products cost the one gradient warp of each band time that grows with D (the backward
    kernel alone at N = 512: 130, 148, 211 and 320 us at D = 1, 16, 32, 64), while from E
    the backward takes 103 us and a separate kernel the products at full GPU width (19 us at
    D = 1 by cuBLAS, 59 at D = 64 by Triton).  Eager steps without the library's graphs
    (fewer launches and torch ops in the sweep) were faster in the sweep up to D = 32.  Its
    gradients are as accurate (4e-8 to 7e-8 against float64 at gamma 1 .. 1e-3, B = 4,
    N = 512, D = 64, as from E).  Why D = 64 stays slower (runs 142-145, B = 32, N = 512): a
    band's pace there is ~0.29 us per step against 0.090 from E; two gradient warps per band
    (g_x and g_y apart, not kept) left it at 0.29, and in that form ~0.10 of it was the
    products, ~0.08 the waits for y's chunk rows and ~0.125 the rest.  y's rows copied a
    chunk ahead into a second buffer (D <= 32, where it fits; run 148, not kept) left the pace
    at D = 1, 16 and 32 where it was."""
    max_d = K.SWEEP_MAX_D if FORCE_SWEEP_GRADS else SWEEP_DEFAULT_MAX_D
    if FORCE_SWEEP_GRADS is False or x.dtype != torch.float32 or x.shape[2] > max_d:
        return False
    return backward_mover()


def _aligned16(t: torch.Tensor) -> torch.Tensor:
    """``t`` (contiguous), or a copy of it where its data does not start on 16 bytes (a view
    with an offset; new allocations are aligned far beyond that)."""
    return t if t.data_ptr() % 16 == 0 else t.clone()


def backward_grads(
    P: torch.Tensor, x: torch.Tensor, y: torch.Tensor, Gb: _View | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of each pair's value (upstream gradient 1) wrt contiguous float32 x
    (B, N, D) and y (B, M, D) (``D <= 64``) from the forward's weights ``P`` (B, 2, N, M)
    (which are read, not written) in one backward launch: the gradient warp multiplies each
    chunk of E on the tensor cores during the sweep (see ``grads`` in
    :func:`sdtw.cuda._kernels._build_backward`); E never goes to memory.  Returns
    (B, N, D) and (B, M, D) float32."""
    B, _, N, M = P.shape
    D = x.shape[2]
    dev = P.device
    nb = -(-N // K.TB)
    if D % 4 == 0:  # (the gradient warp then copies their rows 16 bytes at a time)
        x, y = _aligned16(x), _aligned16(y)
    if Gb is None:
        (Gb,) = _boundary(B, nb, M, dev)
    gx = torch.empty_like(x)
    gy = torch.zeros_like(y)  # (the bands add their shares)
    g = _constant((B,), 1.0, P.dtype, dev)
    none = _placeholder((1, 1), P.dtype, dev)  # no sums
    kern = K.BACKWARD_GRADS[busy(), K.sweep_tiles(D)]
    _launcher(kern)(
        B * nb, K.threads(True), _stream(dev), _flat(P), N, M, g, Gb, none,
        _flat(x), _flat(y), D, _flat(gx), _flat(gy),
    )  # fmt: skip
    launch_counts["backward"] += 1
    return gx, gy


def forward_backward(
    a: torch.Tensor, y: torch.Tensor | None, gamma: float, lo: int, hi: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`forward` with ``store``, then :func:`backward` for an upstream gradient of ones
    with ``sums`` (both launches' boundary buffers from one fill): the values (B,), E
    (B, N, M) (a view of ``P``) and E's row and column sums (B, N + M, 1)."""
    out, P, Gb = forward(a, y, gamma, lo, hi, True, spare=True)
    E, S = backward(P, None, True, Gb)
    return out, E, S


def forward_grads(
    a: torch.Tensor,
    y: torch.Tensor | None,
    gamma: float,
    lo: int,
    hi: int,
    xs: torch.Tensor,
    ys: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`forward` with ``store`` on ``a`` (the cost, or x) and ``y``, then
    :func:`backward_grads` on the sequences ``xs``, ``ys`` (contiguous float32): the values
    (B,) and the gradients wrt ``xs`` and ``ys`` (upstream gradient 1)."""
    out, P, Gb = forward(a, y, gamma, lo, hi, True, spare=True)
    gx, gy = backward_grads(P, xs, ys, Gb)
    return out, gx, gy


def sqeuclidean(a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean cost (B, N, M) of contiguous a (B, N, D), y (B, M, D) (float32 or
    float64) in their dtype: the park kernel's float64 distances, rounded once (one launch)."""
    B, N, _ = a.shape
    out = torch.empty((B, N, y.shape[1]), dtype=a.dtype, device=a.device)
    _park(K.COST_PARK[a.dtype == torch.float32], a, y, out, _stream(a.device))
    return out


def _park(kernel, a: torch.Tensor, y: torch.Tensor, out: torch.Tensor, streams) -> None:
    """Launch a park kernel (:func:`sdtw.cuda._kernels._build_park`) on contiguous a (B, N, D),
    y (B, M, D) into ``out`` (P or a cost tensor): one block per 64 x 64 tile of each pair."""
    B, N, D = a.shape
    M = y.shape[1]
    tiles = B * (-(-N // K.PS)) * (-(-M // K.PS))
    _launcher(kernel)(tiles, K.PARK_THREADS, streams, _flat(a), _flat(y), _flat(out), N, M, D)
    launch_counts["forward"] += 1
