"""A CPU kernel compiled twice by Numba: parallel over the batch, and serial for small problems.

Numba's on-disk cache files an entry under the function's module, qualified name and first line,
keyed by the signature and the machine, not by the compile flags.  Two dispatchers of one Python
function with ``cache=True`` therefore share entries: whichever compiled first answers for both,
so the "serial" kernel may run the parallel code (outside the lock that serialises parallel
kernels, which Numba's ``workqueue`` layer aborts on) and the "parallel" one the serial code.
The parallel twin here is a copy of the function under its own qualified name.

:func:`interleaved` compiles a lane kernel with LLVM's loop vectorizer unrolling its vector
loop (two vectors of lanes in flight per iteration), where the cost model would not.
"""

from __future__ import annotations

import types

import llvmlite.binding as llvm
from numba import njit
from numba.core.compiler_lock import global_compiler_lock

__all__ = ["interleaved", "parallel_and_serial"]

# LLVM 15 made repeated occurrences of a cl::opt legal; before it, setting the option a second
# time (to reset it) fails silently and it would stay on for every later compile.
_CAN_RESET = llvm.llvm_version_info >= (15,)


def _renamed(fn: types.FunctionType, suffix: str) -> types.FunctionType:
    twin = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__
    )
    twin.__qualname__ = fn.__qualname__ + suffix
    twin.__module__ = fn.__module__
    twin.__doc__ = fn.__doc__
    twin.__kwdefaults__ = fn.__kwdefaults__
    return twin


def parallel_and_serial(kernel: types.FunctionType, **flags):
    """``(parallel, serial)`` Numba dispatchers of ``kernel`` with ``cache=True, nogil=True``
    and ``flags``, each with its own cache entries (the parallel one is compiled from a copy
    named ``<name>__parallel``)."""
    flags = {"cache": True, "nogil": True, **flags}
    parallel = njit(parallel=True, **flags)(_renamed(kernel, "__parallel"))
    serial = njit(**flags)(kernel)
    return parallel, serial


def interleaved(dispatcher, count: int = 2):
    """``dispatcher`` (a Numba CPU dispatcher), changed so that every compile of it, lazy or
    from a caller's compile or its cache, runs with LLVM's ``-force-vector-interleave=count``
    (reset to the cost model's choice, 0, afterwards; under Numba's compiler lock, so no other
    compile sees it).  For loops whose body is long and deep (Soft-MSM's cells: some 350 vector
    instructions and a dependency depth of a few hundred cycles a cell), where the cost model
    keeps one vector per iteration and the out-of-order window holds about one cell: with two
    vectors' instructions side by side, two cells' dependency chains overlap.  The vector loop
    then takes ``count`` vectors of lanes at once (16 float64 lanes with AVX-512); fewer lanes
    run in its scalar remainder.  A no-op where LLVM is older than 15 or Numba's JIT is off
    (``NUMBA_DISABLE_JIT``: ``dispatcher`` is then the Python function).  The option is reset
    to 0, not to a value set outside (``llvmlite.binding.set_option`` cannot read it back)."""
    compile_ = getattr(dispatcher, "compile", None)
    if not _CAN_RESET or compile_ is None:
        return dispatcher

    def compile(sig):
        with global_compiler_lock:
            llvm.set_option("", f"-force-vector-interleave={count}")
            try:
                return compile_(sig)
            finally:
                llvm.set_option("", "-force-vector-interleave=0")

    dispatcher.compile = compile
    return dispatcher
