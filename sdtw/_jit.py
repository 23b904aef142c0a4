"""How sdtw compiles its Numba CPU kernels: twice (parallel over the batch, and serial for small
problems), and with the vector loop interleaved where the cost model would not.

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
# time (to reset it) is a command-line error (llvmlite 0.44 / Numba 0.61 are the first on 15).
_CAN_RESET = llvm.llvm_version_info >= (15,)
# The counts of the interleaved compiles under way, outermost first (a compile may compile
# its callees: each restores its caller's count when it ends).
_COUNTS: list[int] = []


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


def interleaved(dispatcher, count: int):
    """``dispatcher`` (a Numba CPU dispatcher), changed so that every later compile of it, lazy,
    from a caller's compile or from its cache, runs with LLVM's ``-force-vector-interleave=count``
    (under Numba's compiler lock; afterwards the option is back at the enclosing interleaved
    compile's count, or at the cost model's choice, 0, not at a value set outside, which
    ``llvmlite.binding.set_option`` cannot read back).  Callees compiled during it get the
    count too, and Numba's cache keys ignore it: a change of ``count`` needs the cache of the
    module that calls this cleared.  ``dispatcher._interleave`` records the count.

    For loops whose body is long and deep (Soft-MSM's cells, ``docs/measures.md``), where the
    cost model keeps one vector per iteration and the out-of-order window holds about one
    iteration: with ``count`` vectors' instructions side by side, as many cells' dependency
    chains overlap.  The vector loop then takes ``count`` vectors of lanes at once; fewer lanes
    run in its remainder.  A no-op where LLVM is older than 15 or Numba's JIT is off
    (``NUMBA_DISABLE_JIT``: ``dispatcher`` is then the Python function)."""
    if not (isinstance(count, int) and count >= 1):
        raise ValueError(f"sdtw: count must be an int >= 1, got {count!r}")
    compile_ = getattr(dispatcher, "compile", None)
    if not _CAN_RESET or compile_ is None:
        return dispatcher

    def compile(sig):
        with global_compiler_lock:
            _COUNTS.append(count)
            llvm.set_option("", f"-force-vector-interleave={count}")
            try:
                return compile_(sig)
            finally:
                _COUNTS.pop()
                llvm.set_option("", f"-force-vector-interleave={_COUNTS[-1] if _COUNTS else 0}")

    dispatcher.compile = compile
    dispatcher._interleave = count
    return dispatcher
