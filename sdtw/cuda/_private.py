"""Every use of a dependency's private internals, in one place, each with a public fallback.

The CUDA backend reaches past the public APIs of numba-cuda, the CUDA driver and torch where
those cost host time on every step or miss a feature.  Each such use lives here, and nowhere
else:

================================  =========================================  ====================
what                              private part                               public fallback
================================  =========================================  ====================
fast kernel launch                a compiled kernel's handle and parameter   Numba's own launch
(:class:`Launcher`)               layout (``overloads``, ``_codelibrary``),  (about 0.1-0.3 ms
                                  Numba's argument flattening, the driver's  more host time per
                                  ``cuLaunchKernel`` through ctypes          call)
input copies of library graphs    the driver's graph-node calls through      copies before each
(:func:`copy_nodes`,              ctypes (``cuGraphExecMemcpyNodeSetParams``  replay
:func:`copy_into`)                ...), ``cuMemcpyDtoDAsync``                (``Tensor.copy_``)
on-disk kernel cache keyed by     ``CUDACache``'s ``_index_key``, a          compile in every
variant (:func:`variant_cache`)   dispatcher's ``_cache``                    process
torch's current stream            ``torch._C._cuda_getCurrentRawStream``     ``current_stream()``
saved-tensor hooks in force       ``torch._C._autograd``'s hook stack        assume hooks
simulator block state             the simulated thread's block manager       none (tests only)
simulator shared arrays           ``FakeCUDAShared.array``                   none (tests only)
simulator barrier                 ``BlockManager.run``, ``BlockThread``'s    the simulator's polled
                                  ``run`` / ``syncthreads``                  barrier (tests only)
offline compile for a GPU         ``numba.cuda.dispatcher``'s device query   none (dev tool)
================================  =========================================  ====================

Each is version-checked at first use: numba-cuda newer than :data:`NUMBA_CUDA_VERIFIED` (the
newest release these were checked against) gets one warning that says so, and any failure of a
private path (an attribute gone, a layout that differs) falls back to the public path with one
warning.
"""

from __future__ import annotations

import ctypes
import math
import struct
import sys
import threading
import warnings

import torch

#: The numba-cuda release series the private paths were last checked against.
NUMBA_CUDA_VERIFIED = (0, 30)

_warned: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(f"sdtw: {message}", RuntimeWarning, stacklevel=4)


def numba_cuda_version() -> tuple[int, ...]:
    """numba-cuda's version as a tuple of ints (``()`` where it cannot be read)."""
    try:
        import numba_cuda

        return tuple(int(p) for p in numba_cuda.__version__.split(".")[:3] if p.isdigit())
    except Exception:
        return ()


def _checked(feature: str) -> None:
    """At a private path's first use: warn once where numba-cuda is newer than the series it
    was checked against (the path is still tried; a failure falls back)."""
    version = numba_cuda_version()
    if version[:2] > NUMBA_CUDA_VERIFIED:
        _warn_once(
            "version",
            f"numba-cuda {'.'.join(map(str, version))} is newer than the "
            f"{'.'.join(map(str, NUMBA_CUDA_VERIFIED))} series that sdtw's use of its internals "
            f"({feature}) was checked against; where they changed, sdtw falls back to the "
            "public (slower) path",
        )


# --------------------------------------------------------------------------------------------
# torch
# --------------------------------------------------------------------------------------------

_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_ptr(index: int | None) -> int:
    """The raw ``CUstream`` address of torch's current stream on CUDA device ``index`` (one C
    call; ``torch.cuda.current_stream`` builds a ``Stream`` object in Python each time, host
    time on every launch)."""
    if _raw_stream is not None and index is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


_top_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def saved_tensor_hooks() -> bool:
    """Whether saved tensors pass through hooks now (``torch.autograd.graph.saved_tensors_hooks``:
    ``save_on_cpu``, non-reentrant checkpointing; or a torch that cannot tell)."""
    return _top_hooks is None or _top_hooks(False) is not None


# --------------------------------------------------------------------------------------------
# numba-cuda's simulator (tests)
# --------------------------------------------------------------------------------------------

_SIM_LOCK = threading.Lock()


def sim_block_state(name, make):
    """The current simulated block's object ``name``, made by ``make()`` on first use (kept
    on the simulator's block manager: one per launch, shared by its threads)."""
    mgr = threading.current_thread()._manager
    state = mgr.__dict__.get("_sdtw_state")
    if state is None or name not in state:
        with _SIM_LOCK:
            state = mgr.__dict__.setdefault("_sdtw_state", {})
            if name not in state:
                state[name] = make()
    return state[name]


def sim_block_width() -> int:
    """Threads along x of the current simulated block."""
    return threading.current_thread()._manager._block_dim[0]


def patch_simulator_shared_arrays() -> None:
    """Make the simulator's shared-array creation atomic and NaN-filled (idempotent).

    numba-cuda's simulator creates a launch's shared arrays lazily, keyed by the call site, with
    an unlocked look-up-then-insert (``FakeCUDAShared.array``), as ``np.empty``.  This
    serialises the creation (two simulated threads could otherwise each create and keep their
    own "shared" array) and fills each new float shared array with NaN: shared memory starts
    with whatever the last kernel left there on a GPU, so a kernel that reads a slot before
    writing it fails in the simulator every time, not once in a while."""
    import numpy as np
    from numba.cuda.simulator import kernelapi

    cls = kernelapi.FakeCUDAShared
    if getattr(cls.array, "_sdtw_locked", False):
        return
    unlocked = cls.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory / unsupported: as is
            return unlocked(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):  # as the simulator converts it
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)  # the simulator's own key
        with lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
                if res.dtype.kind == "f":
                    res.fill(np.nan)
        return res

    array._sdtw_locked = True  # type: ignore[attr-defined]
    cls.array = array


class _SimBlock:
    """One simulated block's barrier state: its live threads, how many wait in
    ``syncthreads`` and the barrier's generation, behind one condition variable."""

    def __init__(self, threads: int) -> None:
        self.cond = threading.Condition()
        self.live, self.waiting, self.generation = threads, 0, 0
        self.failed = None  # (the first thread that raised)

    def release(self) -> None:  # (with cond held)
        self.waiting = 0
        self.generation += 1
        self.cond.notify_all()


def _sim_layout_known(sim) -> bool:
    """Whether the simulator's thread and block classes have the members the barrier uses
    (their constructors' parameters and the methods it replaces)."""
    import inspect

    try:
        thread = list(inspect.signature(sim.BlockThread.__init__).parameters)
        manager = list(inspect.signature(sim.BlockManager.__init__).parameters)
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        thread == ["self", "f", "manager", "blockIdx", "threadIdx", "debug"]
        and manager[:2] == ["self", "f"]
        and all(callable(getattr(sim.BlockThread, k, None)) for k in ("run", "syncthreads"))
        and callable(getattr(sim.BlockManager, "run", None))
    )


def patch_simulator_barrier() -> None:
    """Make the simulator's ``syncthreads`` a condition variable instead of a polled flag
    (idempotent).

    numba-cuda's simulator runs a block's threads as Python threads and its block manager
    busy-polls every thread's "blocked" flag, holding the GIL that the threads need, until all
    live threads are blocked.  The same semantics without the polling: a thread that reaches
    ``syncthreads`` waits on the block's condition; the last live thread to arrive, or the last
    thread to finish while all others wait, releases them; the manager sleeps until every
    thread has finished or one has raised (then the others are aborted, as the simulator does,
    and the error is raised)."""
    import numpy as np
    from numba.cuda.simulator import kernel as sim

    if getattr(sim.BlockManager.run, "_sdtw_barrier", False):
        return
    _checked("the simulator barrier")
    if not _sim_layout_known(sim):
        _warn_once(
            "barrier",
            "numba-cuda's simulator threads are not laid out as sdtw's barrier expects "
            "(BlockThread / BlockManager changed); its own polled syncthreads stays, slower",
        )
        return

    def syncthreads(self):
        blk = self._manager._sdtw_block
        with blk.cond:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            generation = blk.generation
            blk.waiting += 1
            if blk.waiting == blk.live:
                blk.release()
            while blk.generation == generation and not self.abort:
                blk.cond.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    def thread_run(self):
        try:
            sim_run(self)
        finally:
            blk = self._manager._sdtw_block
            with blk.cond:
                blk.live -= 1
                if self.exception is not None and blk.failed is None:
                    blk.failed = self
                    for other in blk.threads:
                        other.abort = True
                    blk.cond.notify_all()
                elif blk.live and blk.waiting == blk.live:
                    blk.release()
                elif not blk.live:
                    blk.cond.notify_all()

    def run(self, grid_point, *args):
        blk = self._sdtw_block = _SimBlock(int(np.prod(self._block_dim)))
        blk.threads = [
            sim.BlockThread(lambda: self._f(*args), self, grid_point, point, self._debug)
            for point in np.ndindex(*self._block_dim)
        ]
        for t in blk.threads:
            t.start()
        with blk.cond:
            while blk.live and blk.failed is None:
                # (the timeout: a thread that died outside the bookkeeping ends the wait too)
                if not blk.cond.wait(timeout=1.0) and not any(t.is_alive() for t in blk.threads):
                    break
        failed = blk.failed or next((t for t in blk.threads if t.exception), None)
        if failed is not None:
            raise failed.exception[0].with_traceback(failed.exception[1])

    sim_run = sim.BlockThread.run
    sim.BlockThread.run = thread_run
    sim.BlockThread.syncthreads = syncthreads
    run._sdtw_barrier = True  # type: ignore[attr-defined]
    sim.BlockManager.run = run


# --------------------------------------------------------------------------------------------
# Offline compilation (the SASS tool)
# --------------------------------------------------------------------------------------------


def fake_device(cc: tuple[int, int]) -> None:
    """Device functions ask the current device for its compute capability when compiled;
    on a machine without a GPU, answer ``cc`` (compilation only: nothing is launched)."""
    import numba.cuda.dispatcher as dispatcher

    class _Device:
        compute_capability = cc

    dispatcher.get_current_device = lambda: _Device()


# --------------------------------------------------------------------------------------------
# On-disk kernel cache keyed by variant
# --------------------------------------------------------------------------------------------


def variant_cache(dispatcher, variant: tuple) -> None:
    """Give ``dispatcher`` numba-cuda's on-disk kernel cache, keyed by ``variant`` instead of a
    pickle of the kernel's closure (raises where numba-cuda's internals differ).

    numba-cuda keys a kernel's cache entry by its bytecode and a pickle of its closure's cells;
    our kernels are closures of their builders, whose cells hold device functions and settings,
    and that pickle differs from one process to the next (the same kernel hashed differently in
    two processes), so each process would miss.  This key is the kernel's variant (its spec and
    a digest of the kernel package), the signature, the compute capability and codegen
    (``magic_tuple``) and numba-cuda's version.  numba-cuda also drops a cache index when the
    source file's time stamp or size changes."""
    _checked("the on-disk kernel cache")
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

    dispatcher._cache = _VariantCache(dispatcher.py_func, variant)


def cache_index_key(dispatcher, sig, codegen):
    """The on-disk cache's index key of ``dispatcher`` for a signature and a codegen (the
    tests check that it is the same in every process)."""
    return dispatcher._cache._index_key(sig, codegen)


# --------------------------------------------------------------------------------------------
# Fast kernel launch
# --------------------------------------------------------------------------------------------


def _arr(t: torch.Tensor, simulated: bool):
    """A numba view of a tensor: a NumPy array under the simulator, a device array on a GPU."""
    if simulated:
        return t.detach().numpy()
    from numba import cuda

    return cuda.as_cuda_array(t.detach(), sync=False)


class Launcher:
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
    Numba's regular launch.  ``fast=False`` (``SDTW_FAST_LAUNCH=0``) forces the regular path;
    the simulator always takes it.  ``explain(exc)``: the error to raise for ``exc`` from a
    signature's first launch (which compiles or loads the kernel).
    """

    def __init__(self, dispatcher, simulated: bool, fast: bool, explain) -> None:
        self.dispatcher = dispatcher
        self.simulated, self.fast, self.explain = simulated, fast and not simulated, explain
        self.cache: dict[tuple, object] = {}

    def __call__(self, grid: int, block: int, streams, *args) -> None:
        stream, stream_ptr = streams
        key, flat = signature(args)
        entry = self.cache.get(key)
        if entry is None or entry is False:
            conv = [a.tensor() if type(a) is View else a for a in args]
            conv = [_arr(a, self.simulated) if isinstance(a, torch.Tensor) else a for a in conv]
            try:
                self.dispatcher[grid, block, stream](*conv)
            except Exception as exc:
                # (the first call of a signature compiles, or loads, the kernel)
                err = exc if entry is not None else self.explain(exc)
                if err is exc:
                    raise
                raise err from exc
            if entry is None:
                self.cache[key] = self._find(conv, flat) if self.fast else False
            return
        launch, handle, fmt, params = entry
        buf, extra = params.buf, params.extra  # this thread's own buffer
        fmt.pack_into(buf, 0, *flat)
        _driver_call(
            launch, "cuLaunchKernel", handle, grid, 1, 1, block, 1, 1, 0, stream_ptr, None, extra
        )

    def _find(self, conv: list, flat: list):
        _checked("the fast kernel launch")
        try:
            from numba.cuda.typing.typeof import Purpose, typeof

            sig = tuple(typeof(a, Purpose.argument) for a in conv)
            kern = self.dispatcher.overloads[sig]
            if getattr(kern, "cooperative", False) or getattr(kern, "debug", False):
                return False
            core_kernel = kern._codelibrary.get_cufunc().kernel
            layout = [(p.offset, p.size) for p in core_kernel.arguments_info]
            fmt = param_format(flat, layout)
            launch = _driver_launch()
            if launch is None:
                raise OSError("cuLaunchKernel not found in libcuda.so.1")
            return launch, int(core_kernel.handle), fmt, _ParamBuffer(fmt.size)
        except Exception as exc:  # numba-cuda internals or the driver differ: regular path
            _warn_once(
                "launch",
                f"fast kernel launch unavailable here ({exc!r}); using Numba's regular "
                "launch (about 0.1-0.3 ms more host time per call)",
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


class View:
    """A kernel argument: the C-contiguous view of ``shape`` into contiguous tensor ``t`` from
    element ``offset``.  The fast launch packs it straight from ``t``'s address; only Numba's
    own launch (the first call, the simulator) makes it a torch view.  Every torch op costs
    host time on each launch, and the H200 machine's host is slow at it (29-39 us per launcher
    call, 40-70 us for one ``torch.full`` and a split); a step made about ten views for its
    launches."""

    __slots__ = ("offset", "shape", "t")

    def __init__(self, t: torch.Tensor, shape: tuple, offset: int = 0) -> None:
        self.t, self.shape, self.offset = t, shape, offset

    def tensor(self) -> torch.Tensor:
        n = math.prod(self.shape)
        return self.t.view(-1)[self.offset : self.offset + n].view(self.shape)


def flat(t: torch.Tensor) -> View:
    """``t`` (contiguous) as a 1-D kernel argument."""
    return View(t, (t.numel(),))


_view_meta: dict[tuple, tuple] = {}


def _view_layout(shape: tuple, dtype: torch.dtype, isz: int) -> tuple:
    """A :class:`View`'s cache-key entry and the parts of its flat parameters that do not
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


def signature(args: tuple) -> tuple[tuple, list]:
    """The kernel arguments' cache key (dtype, rank and contiguity of each tensor, the type of
    each scalar) and their flat parameter values in Numba's calling convention, in one pass
    (host time: this runs on every launch).  A :class:`View` gets what its torch view
    would."""
    key: list = []
    flat: list = []
    for a in args:
        if type(a) is View:
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


def param_format(flat: list, layout: list[tuple[int, int]]) -> struct.Struct:
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
        from numba import cuda

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
    sets up each time: on the H200 machine 5.1 us against 7.2 timed in a loop, and 26-44 us
    against 37-64 for a replay's two copies in synchronised steps; else torch's ``copy_``."""
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
