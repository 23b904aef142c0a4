"""Runnable examples: ``python examples/forecasting.py`` (``barycenter.py``, ``alignment.py``)
from any folder, or ``python -m examples.forecasting`` from the repository root.

Each draws a figure with matplotlib (the ``examples`` extra): :func:`missing` is checked before
any work starts, so that a missing package costs no computation.
"""

from __future__ import annotations

import importlib

#: What the examples need beyond sdtw, and the command that installs it.
NEEDS = ("matplotlib",)
INSTALL = 'pip install matplotlib  (or, in this repository: pip install ".[examples]")'


def missing(example: str) -> str | None:
    """Why ``example`` cannot run here (a module it needs is not importable, and the command
    that installs it), or ``None``."""
    absent = []
    for module in NEEDS:
        try:
            importlib.import_module(module)
        except ImportError:
            absent.append(module)
    if not absent:
        return None
    return (
        f"error: {example} needs {', '.join(absent)} to draw its figure, and it is not "
        f"installed here; nothing was computed. Install it with: {INSTALL}"
    )
