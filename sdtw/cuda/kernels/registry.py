"""The kernel registry: one compiled kernel per spec, built on first use, kept on disk.

:func:`get` builds the dispatcher of a :mod:`~sdtw.cuda.kernels.specs` spec once per process
(Numba compiles it at its first launch, per argument types) and gives it numba-cuda's on-disk
cache keyed by the spec and a digest of this package's sources (:func:`source_digest`), so a
later process loads the compiled kernel in milliseconds instead of compiling it for seconds.
The cache is off under the simulator, with ``SDTW_KERNEL_CACHE=0`` and with line information
(``SDTW_LINEINFO=1``); ``NUMBA_CACHE_DIR`` moves it.

:func:`production_specs` lists every spec that the tuning rules (:mod:`sdtw.cuda.policy`) can
choose on a GPU or under the simulator: what the offline compile check and the SASS digests
cover (``python -m experiments.sass``).
"""

from __future__ import annotations

import functools
import hashlib
import threading
import warnings
from dataclasses import replace
from pathlib import Path

from sdtw.cuda.config import CONFIG
from sdtw.cuda.kernels.geometry import SWEEP_TILES
from sdtw.cuda.kernels.jit import LINEINFO, SIMULATED
from sdtw.cuda.kernels.specs import (
    COST,
    FUSED,
    HILO,
    SPLIT,
    TILED,
    BackwardSpec,
    ForwardSpec,
    ParkSpec,
    RecomputeSpec,
    Spec,
)

__all__ = [
    "build",
    "cache_counts",
    "compile_ptx",
    "disk_cache_problem",
    "get",
    "production_specs",
    "source_digest",
]

#: Whether compiled kernels are kept on disk between processes.
DISK_CACHE = CONFIG.kernel_cache and not SIMULATED and not LINEINFO

_kernels: dict[Spec, object] = {}
_lock = threading.Lock()
_problems: list[str] = []


@functools.cache
def source_digest() -> str:
    """SHA-256 of this package's Python sources: every device function the kernels use is
    defined in it (the on-disk cache's key holds it)."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def build(spec: Spec):
    """A new dispatcher of ``spec``'s kernel (not kept, no disk cache: :func:`get` is the one
    to launch)."""
    if isinstance(spec, ForwardSpec):
        from sdtw.cuda.kernels.forward import build
    elif isinstance(spec, BackwardSpec):
        from sdtw.cuda.kernels.backward import build
    elif isinstance(spec, RecomputeSpec):
        from sdtw.cuda.kernels.recompute import build
    else:
        from sdtw.cuda.kernels.park import build
    return build(spec)


def get(spec: Spec):
    """The kernel dispatcher of ``spec``, built on first use (then kept for the process)."""
    kern = _kernels.get(spec)
    if kern is None:
        with _lock:
            kern = _kernels.get(spec)
            if kern is None:
                kern = build(spec)
                if DISK_CACHE:
                    _attach_cache(spec, kern)
                _kernels[spec] = kern
    return kern


def _attach_cache(spec: Spec, kern) -> None:
    from sdtw.cuda import _private

    try:
        _private.variant_cache(kern, (type(spec).__name__, spec, source_digest()))
    except Exception as exc:  # an unwritable cache folder, internals that differ
        _problems.append(f"{spec.label}: {exc!r}")
        if len(_problems) == 1:
            warnings.warn(
                "sdtw: no on-disk cache for the CUDA kernels (they compile again in each "
                f"process, several seconds each): {exc!r}",
                RuntimeWarning,
                stacklevel=4,
            )


def disk_cache_problem() -> str | None:
    """Why the on-disk cache failed for some kernels built so far (None: it did not)."""
    return "; ".join(_problems[:3]) or None


def cache_counts() -> tuple[int, int]:
    """The on-disk cache's hits and misses in this process so far, over the kernels built
    ((0, 0) under the simulator, which has no cache)."""
    if SIMULATED:
        return 0, 0
    kernels = list(_kernels.values())
    hits = sum(sum(k.stats.cache_hits.values()) for k in kernels)
    return hits, sum(sum(k.stats.cache_misses.values()) for k in kernels)


def compile_ptx(spec: Spec, signature: str, cc: tuple[int, int]) -> str:
    """The PTX of ``spec``'s kernel for the argument types ``signature`` (Numba's notation,
    e.g. ``"f4[::1], i8"``) and compute capability ``cc``, compiled here without a GPU (the
    offline SASS tool, ``python -m experiments.sass``).  Not under the simulator."""
    from numba import cuda
    from numba.core import sigutils

    from sdtw.cuda import _private

    _private.fake_device(cc)
    sig = sigutils.normalize_signature(f"void({signature})")[0]
    kernel = build(spec)
    bounds = kernel.targetoptions.get("launch_bounds")  # (in the PTX, as a GPU compiles it)
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc, launch_bounds=bounds)
    return ptx


def production_specs() -> list[Spec]:
    """Every spec the tuning rules can choose (GPU or simulator), in a stable order."""
    forward = [
        ForwardSpec(COST, True),
        ForwardSpec(COST, False),
        ForwardSpec(SPLIT, False),
        ForwardSpec(HILO, True, mover=True),  # a GPU's fused float32 forward with gradients
        ForwardSpec(HILO, True),  # the simulator's
        ForwardSpec(TILED, True, mover=True),  # a GPU's fused float32 forward without
        ForwardSpec(FUSED, True),  # the simulator's
        ForwardSpec(FUSED, False),
        # Soft-MSM's float32 forward with gradients (sdtw.cuda.msm_seam): a GPU's, the simulator's
        ForwardSpec(HILO, True, mover=True, recurrence="soft-msm"),
        ForwardSpec(HILO, True, recurrence="soft-msm"),
    ]
    backward = [BackwardSpec(fast, mover) for fast in (True, False) for mover in (True, False)]
    backward += [BackwardSpec(True, True, grads=nt) for nt in SWEEP_TILES]
    park = [ParkSpec(f32, cost) for cost in (False, True) for f32 in (True, False)]
    # each DP kernel's variable-length twin (x_lengths / y_lengths)
    lengths = [replace(s, lengths=True) for s in forward + backward]
    # the checkpointed mode (memory="checkpoint"): fused forward and recomputing backward
    ckpt = [ForwardSpec(FUSED, f, lengths=True, ckpt=True) for f in (True, False)]
    ckpt += [RecomputeSpec(f) for f in (True, False)]
    return forward + backward + park + lengths + ckpt
