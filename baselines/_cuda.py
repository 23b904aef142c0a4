"""Launch utilities shared by the Numba CUDA baselines (:mod:`baselines.paper`,
:mod:`baselines.maghoumi`).

* Nothing here touches a GPU at import time: ``from numba import cuda`` only imports the
  package; kernels compile on their first launch.  Without numba-cuda, :data:`cuda` is ``None``
  and :func:`require` raises a clear error at call time.
* Real GPU: torch CUDA tensors are viewed with ``cuda.as_cuda_array`` (no copy) and kernels run
  on torch's current stream (``cuda.external_stream``) inside the tensor's device context, so
  they order correctly with the torch ops around them.
* Simulator (``NUMBA_ENABLE_CUDASIM=1``): the same kernels run on CPU tensors; they are handed
  ``tensor.numpy()`` views, which the simulator copies in and writes back after the launch.
* Every launch goes through :func:`launch`, which counts it (:func:`count_launches`) and turns a
  launch failure (e.g. ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``) into a ``RuntimeError`` naming
  the kernel and its configuration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

try:  # (through sdtw's import: its numpy shim goes first)
    from numba import config as _numba_config

    from sdtw.cuda import import_numba_cuda

    cuda = import_numba_cuda()
except ImportError:  # numba without the CUDA target (numba-cuda not installed)
    cuda = None  # type: ignore[assignment]
    _numba_config = None

__all__ = [
    "LaunchCount",
    "count_launches",
    "cuda",
    "device_array",
    "launch",
    "on_device",
    "require",
    "scalar",
    "simulator",
    "total_launches",
]

_total_launches = 0


def simulator() -> bool:
    """True when Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1`` at numba import)."""
    return cuda is not None and bool(_numba_config.ENABLE_CUDASIM)


def require(name: str, *tensors: torch.Tensor) -> None:
    """Check that ``tensors`` can be handed to a Numba CUDA kernel; raise naming ``name``."""
    if cuda is None:
        raise RuntimeError(f"{name}: needs numba's CUDA target (pip install numba-cuda)")
    if simulator():
        if any(t.is_cuda for t in tensors):
            raise ValueError(
                f"{name}: the Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1) runs on CPU "
                "tensors; got a CUDA tensor"
            )
        return
    if not all(t.is_cuda for t in tensors):
        raise ValueError(
            f"{name}: needs CUDA tensors (or CPU tensors under NUMBA_ENABLE_CUDASIM=1), got "
            f"devices {[str(t.device) for t in tensors]}"
        )


def device_array(t: torch.Tensor) -> Any:
    """A kernel argument viewing the contiguous tensor ``t`` without a copy.

    Call inside :func:`on_device` (the view belongs to the current Numba context).
    """
    assert t.is_contiguous()
    t = t.detach()
    if simulator():
        return t.numpy()
    return cuda.as_cuda_array(t, sync=False)


@contextlib.contextmanager
def on_device(t: torch.Tensor) -> Iterator[Any]:
    """Enter ``t``'s device context; yield the stream to launch on (torch's current one)."""
    if simulator():
        yield 0
        return
    with cuda.gpus[t.device.index]:
        yield cuda.external_stream(torch.cuda.current_stream(t.device).cuda_stream)


def launch(kernel: Any, grid: tuple[int, ...], block: int, stream: Any, *args: Any) -> None:
    """Launch ``kernel[grid, block, stream](*args)``, count it, and name it if it fails."""
    global _total_launches
    if simulator():
        kernel[grid, block](*args)
    else:
        from numba.cuda.cudadrv.error import CudaDriverError

        try:
            kernel[grid, block, stream](*args)
        except CudaDriverError as e:
            name = getattr(kernel, "__name__", repr(kernel))
            raise RuntimeError(
                f"kernel {name} failed to launch with grid={grid}, block={block}: {e}"
            ) from e
    _total_launches += 1


def scalar(value: float, dtype: torch.dtype) -> np.floating:
    """``value`` as a NumPy scalar of ``dtype``, so that a kernel taking it computes in ``dtype``
    (a Python float argument would be typed float64 and promote the arithmetic)."""
    return _NUMPY_SCALAR[dtype](value)


_NUMPY_SCALAR = {torch.float32: np.float32, torch.float64: np.float64}


def total_launches() -> int:
    """Numba kernel launches made by the baselines in this process so far."""
    return _total_launches


class LaunchCount:
    """Launches made inside a ``with count_launches() as c:`` block; read ``c.n`` after it."""

    def __init__(self) -> None:
        self.n = 0


@contextlib.contextmanager
def count_launches() -> Iterator[LaunchCount]:
    """Count the Numba kernel launches made inside the block (forward, backward, or both)."""
    count = LaunchCount()
    start = _total_launches
    try:
        yield count
    finally:
        count.n = _total_launches - start
