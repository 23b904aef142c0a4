"""Compatibility shims, in one place.

numpy 2.5 removed ``np.row_stack`` (deprecated alias of ``np.vstack``); numba-cuda still
registers an overload for it when its CUDA target initialises, which raises ``AttributeError``
on such numpy.  Restoring the alias (only when missing) is harmless and must run before
``numba.cuda`` compiles anything.
"""

from __future__ import annotations

import numpy as np


def patch_numpy_for_numba() -> None:
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack  # type: ignore[attr-defined]  # noqa: NPY201
