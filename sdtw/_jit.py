"""A CPU kernel compiled twice by Numba: parallel over the batch, and serial for small problems.

Numba's on-disk cache files an entry under the function's module, qualified name and first line,
keyed by the signature and the machine, not by the compile flags.  Two dispatchers of one Python
function with ``cache=True`` therefore share entries: whichever compiled first answers for both,
so the "serial" kernel may run the parallel code (outside the lock that serialises parallel
kernels, which Numba's ``workqueue`` layer aborts on) and the "parallel" one the serial code.
The parallel twin here is a copy of the function under its own qualified name.
"""

from __future__ import annotations

import types

from numba import njit

__all__ = ["parallel_and_serial"]


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
