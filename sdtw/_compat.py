"""Compatibility shims, in one place.

numpy 2.5 removed ``np.row_stack`` (deprecated alias of ``np.vstack``); numba-cuda still
registers an overload for it when its CUDA target initialises, which raises ``AttributeError``
on such numpy.  Restoring the alias (only when missing) is harmless and must run before
``numba.cuda`` compiles anything.

Numba's default threading layer on Linux is OpenMP (GNU libgomp) where TBB is not installed,
and GNU OpenMP is not fork-safe: a process forked after the CPU kernels ran in parallel (a
``DataLoader`` worker, ``multiprocessing`` with ``fork``) is killed ("fork() called from a
process already using GNU OpenMP") or hangs in its first parallel kernel.  sdtw therefore asks
Numba for a fork-safe layer, unless the user chose one (:func:`fork_safe_threading_layer`).
"""

from __future__ import annotations

import os

import numpy as np


def patch_numpy_for_numba() -> None:
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack  # type: ignore[attr-defined]  # noqa: NPY201


def fork_safe_threading_layer() -> None:
    """Numba's ``"forksafe"`` threading layer for the CPU kernels: TBB where it is installed,
    else OpenMP except on Linux (GNU OpenMP), else ``workqueue`` (so on Linux without TBB,
    ``workqueue``: not slower than OpenMP for these kernels where measured, a 2-core VM).
    Left alone where the user chose a layer (``NUMBA_THREADING_LAYER``, Numba's config file or
    ``numba.config.THREADING_LAYER`` set before).  Numba loads the layer once per process,
    when the first parallel kernel runs: this must run before that (``import sdtw`` calls it).
    (``workqueue`` is not thread-safe: :mod:`sdtw.cpu` runs one parallel kernel at a time.)"""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    from numba import config

    if config.THREADING_LAYER == "default":
        config.THREADING_LAYER = "forksafe"
