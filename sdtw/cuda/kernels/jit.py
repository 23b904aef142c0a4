"""How the kernels are compiled: ``device`` and ``kernel`` decorators, and whether Numba's CPU
simulator runs them (:data:`SIMULATED`, from :data:`sdtw.cuda.config.CONFIG`)."""

from __future__ import annotations

import inspect
import warnings

from sdtw._compat import patch_numpy_for_numba
from sdtw.cuda.config import CONFIG

patch_numpy_for_numba()

from numba import cuda  # noqa: E402

#: Numba's CPU simulator runs the kernels: it lacks warp shuffles, votes, inline PTX and
#: libdevice, so the device functions that use them have twins
#: (:mod:`sdtw.cuda.kernels.primitives` picks one of each, once).
SIMULATED = CONFIG.simulator
LINEINFO = CONFIG.lineinfo

if SIMULATED:
    from sdtw.cuda import _private

    _private.patch_simulator_shared_arrays()
    _private.patch_simulator_barrier()


def device(fn):
    """A device function that LLVM inlines (``forceinline``).  Numba's own inlining
    (``inline=True``) copies the IR at each of the ~100 call sites of the unrolled steps and
    took 30-80 s per kernel to compile; this takes ~5 s.  The simulator takes plain ones."""
    if SIMULATED:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def kernel(fn=None, *, launch_bounds=None):
    """A kernel that asks for the largest shared-memory carveout (``"maxshared"``: 228 KB of
    the SM's 256 KB L1/shared on Hopper).  The blocks hold 17-26 KB of shared memory each, and
    with the driver's default split an H200 SM held only 5 to 7 of them, below the 8 that
    registers allow: the forward at B = 32, N = 1024 took 0.98 ms against 0.59 ms with this
    carveout.  The kernels read global memory through L2 (atomics, streamed costs) and do not
    rely on L1.  ``launch_bounds`` ``(threads, blocks per SM)`` asks ptxas to fit that many
    blocks' registers on an SM (``@kernel(launch_bounds=...)``)."""
    if fn is None:
        return lambda f: kernel(f, launch_bounds=launch_bounds)
    if SIMULATED:
        return cuda.jit(fn)
    opts = {"shared_memory_carveout": "maxshared"} if _has_carveout() else {}
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
