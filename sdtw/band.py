"""The Sakoe-Chiba band, shared by every path (and the baselines).

The band follows tslearn's ``sakoe_chiba_mask(N, M, radius)``: for ``N <= M`` cell ``(i, j)``
is allowed iff ``i - r <= j <= i + (M - N) + r`` and symmetrically for ``N > M``.  Both cases
collapse to two integer offsets ``lo, hi``:

.. math::  -\\mathrm{lo} \\le j - i \\le \\mathrm{hi},\\qquad
           \\mathrm{lo} = r + \\max(N - M, 0),\\quad \\mathrm{hi} = r + \\max(M - N, 0).

With ``N == M`` this is ``|i - j| <= r``; a real radius counts by its integer part (the
paper's library takes ``bandwidth=2.5`` as ``|i - j| <= 2.5``).  Kernels take ``(lo, hi)``;
"no band" is ``lo = hi = N + M`` (every cell allowed).  The band always contains ``(0, 0)`` and
``(N - 1, M - 1)`` and a monotone path between them, so the loss stays finite.

In a variable-length batch each pair's band follows its own lengths ``n_b x m_b``
(:func:`pair_offsets`; the CUDA kernels take the radius, :func:`band_radius`, and derive each
pair's offsets themselves).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["band_offsets", "pair_offsets", "sakoe_chiba_mask"]


def band_offsets(N: int, M: int, bandwidth: float | None) -> tuple[int, int]:
    """Offsets ``(lo, hi)`` with cell ``(i, j)`` allowed iff ``-lo <= j - i <= hi``.

    ``bandwidth`` is a radius: a real number, whose integer part counts (``|i - j| <= 2.5``
    is ``|i - j| <= 2``); ``None``, ``<= 0`` or ``inf`` is no band, and so is a radius past
    the table (it is clamped, so 2**63 or 1e30 work)."""
    if bandwidth is None or not bandwidth > 0 or bandwidth == math.inf:
        return N + M, N + M
    r = int(min(math.floor(bandwidth), N + M))
    return r + max(N - M, 0), r + max(M - N, 0)


def pair_offsets(ns, ms, bandwidth: float | None) -> tuple:
    """:func:`band_offsets` of each pair of a variable-length batch: int64 arrays ``(lo, hi)``
    (B,) from its lengths ``ns``, ``ms`` (integer arrays (B,), or both torch tensors: int64
    tensors on their device then), each pair's band following its own lengths."""
    if hasattr(ns, "long") and hasattr(ms, "long"):  # (torch tensors, where they are)
        ns, ms = ns.long(), ms.long()
    else:
        ns, ms = np.asarray(ns, np.int64), np.asarray(ms, np.int64)
    total = ns + ms
    if bandwidth is None or not bandwidth > 0 or bandwidth == math.inf:
        return total, total
    r = total.clip(max=int(min(math.floor(bandwidth), 2**62)))
    d = ns - ms
    return r + d.clip(min=0), r + (-d).clip(min=0)


def band_radius(N: int, M: int, bandwidth: float | None) -> int:
    """The band's integer radius as the CUDA kernels take it with per-pair lengths (each
    pair's offsets follow from it and its own lengths): ``-1`` for no band."""
    if bandwidth is None or not bandwidth > 0 or bandwidth == math.inf:
        return -1
    return int(min(math.floor(bandwidth), N + M))


def sakoe_chiba_mask(N: int, M: int, bandwidth: float | None) -> np.ndarray:
    """Boolean mask ``(N, M)``, True where the cell is inside the band (tslearn's
    ``sakoe_chiba_mask(N, M, bandwidth)``; ``None`` or ``<= 0``: all True)."""
    lo, hi = band_offsets(N, M, bandwidth)
    d = np.arange(M)[None, :] - np.arange(N)[:, None]
    return (d >= -lo) & (d <= hi)
