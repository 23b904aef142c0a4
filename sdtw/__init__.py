"""sdtw: fast, memory-lean and accurate soft-DTW for PyTorch.

Importing this package never touches the GPU and needs neither numba-cuda nor Triton.
"""

from __future__ import annotations

from sdtw import _compat, distances
from sdtw.alignment import alignment
from sdtw.band import band_offsets, sakoe_chiba_mask
from sdtw.barycenter import soft_msm_barycenter, softdtw_barycenter, softdtw_barycenter_cpu
from sdtw.cdist import cdist
from sdtw.functional import softdtw, softdtw_from_cost
from sdtw.module import SoftDTW
from sdtw.msm import SoftMSM, soft_msm
from sdtw.neighbors import knn
from sdtw.reference import softdtw_reference

__all__ = [
    "SoftDTW",
    "SoftMSM",
    "alignment",
    "band_offsets",
    "cdist",
    "distances",
    "knn",
    "sakoe_chiba_mask",
    "soft_msm",
    "soft_msm_barycenter",
    "softdtw",
    "softdtw_barycenter",
    "softdtw_barycenter_cpu",
    "softdtw_from_cost",
    "softdtw_reference",
]
__version__ = "0.1.0"

_compat.fork_safe_threading_layer()  # (before the first CPU kernel runs)
