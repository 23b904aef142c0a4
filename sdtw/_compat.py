"""Compatibility shims, in one place.

* numpy 2.5 removed ``np.row_stack`` (deprecated alias of ``np.vstack``); numba-cuda still
  registers an overload for it when its CUDA target initialises, which raises
  ``AttributeError`` on such numpy.  Restoring the alias (only when missing) is harmless and
  must run before ``numba.cuda`` compiles anything.
* numba-cuda's CUDA simulator creates a launch's shared arrays lazily, keyed by the call site,
  with an unlocked look-up-then-insert (``FakeCUDAShared.array``), as ``np.empty``.
  :func:`patch_simulator_shared_arrays` serialises the creation (two simulated threads could
  otherwise each create and keep their own "shared" array; we never saw it happen) and fills
  each new float shared array with NaN.  Shared memory starts with whatever the last kernel
  left there on a GPU, so a kernel that reads a slot before writing it should fail in the
  simulator every time, not once in a while: that is how the backward's read of unwritten ring
  slots (0 * a stale NaN = NaN, about one simulator test run in five) was pinned down.
"""

from __future__ import annotations

import sys
import threading

import numpy as np


def patch_numpy_for_numba() -> None:
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack  # type: ignore[attr-defined]  # noqa: NPY201


def patch_simulator_shared_arrays() -> None:
    """Make the simulator's shared-array creation atomic (idempotent; simulator only)."""
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
