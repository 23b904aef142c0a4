"""The Sakoe-Chiba band, shared by every path (and the baselines).

The band follows tslearn's ``sakoe_chiba_mask(N, M, radius)``: for ``N <= M`` cell ``(i, j)``
is allowed iff ``i - r <= j <= i + (M - N) + r`` and symmetrically for ``N > M``.  Both cases
collapse to two integer offsets ``lo, hi``:

.. math::  -\\mathrm{lo} \\le j - i \\le \\mathrm{hi},\\qquad
           \\mathrm{lo} = r + \\max(N - M, 0),\\quad \\mathrm{hi} = r + \\max(M - N, 0).

With ``N == M`` this is ``|i - j| <= r``.  Kernels take ``(lo, hi)``; "no band" is
``lo = hi = N + M`` (every cell allowed).  The band always contains ``(0, 0)`` and
``(N - 1, M - 1)`` and a monotone path between them, so the loss stays finite.
"""

from __future__ import annotations

import numpy as np

__all__ = ["band_offsets", "sakoe_chiba_mask"]


def band_offsets(N: int, M: int, bandwidth: int | None) -> tuple[int, int]:
    """Offsets ``(lo, hi)`` with cell ``(i, j)`` allowed iff ``-lo <= j - i <= hi``."""
    if bandwidth is None or bandwidth <= 0:
        return N + M, N + M
    r = int(bandwidth)
    return r + max(N - M, 0), r + max(M - N, 0)


def sakoe_chiba_mask(N: int, M: int, bandwidth: int | None) -> np.ndarray:
    """Boolean mask ``(N, M)``, True where the cell is inside the band (tslearn's
    ``sakoe_chiba_mask(N, M, bandwidth)``; ``None`` or ``<= 0``: all True)."""
    lo, hi = band_offsets(N, M, bandwidth)
    d = np.arange(M)[None, :] - np.arange(N)[:, None]
    return (d >= -lo) & (d <= hi)
