"""Which pieces of the CUDA toolkit a compile error says are missing (a module of its own: the
launcher and the package's public names both need it)."""

from __future__ import annotations

__all__ = ["missing_toolkit"]

#: What in a compile error says that a piece of the CUDA toolkit is missing (numba-cuda needs
#: NVVM and libdevice to compile, and NVRTC for the architectures it may compile for).
_TOOLKIT_PIECES = {"nvvm": "NVVM", "nvrtc": "NVRTC", "libdevice": "libdevice"}


def missing_toolkit(text: str) -> list[str]:
    """The pieces of the CUDA toolkit that an error message says are missing (none: [])."""
    text = text.lower()
    return [name for key, name in _TOOLKIT_PIECES.items() if key in text]
