"""Tuning rules: which kernel variant and launch settings a call takes.

Each rule is a pure function of the problem (shape, dtype, whether it runs on a GPU or under
Numba's simulator) and of the overrides in force (:func:`sdtw.cuda.config.overrides`, which
tests and probes use; None everywhere otherwise).  Each rule's docstring gives its measured
reason in a line; the measurements are H200 runs committed under ``experiments/results/``
(see ``docs/performance.md``).

The simulator takes the one-warp kernels unless an override asks for the mover variants: its
threads are Python threads, and three warps per block triple a test's time.
"""

from __future__ import annotations

from sdtw.cuda.config import Overrides, current_overrides
from sdtw.cuda.kernels.geometry import SWEEP_MAX_D
from sdtw.cuda.kernels.specs import COST, FUSED, HILO, SPLIT, TILED

__all__ = [
    "TC_LARGE",
    "TC_SMALL",
    "backward_mover",
    "forward_mode",
    "forward_mover",
    "fused_default",
    "sweep_grads",
    "tc_grads",
    "tc_one_launch",
    "tc_settings",
    "tiled",
]


def _ov(ov: Overrides | None) -> Overrides:
    return current_overrides() if ov is None else ov


def tiled(fast: bool, store: bool, simulated: bool, ov: Overrides | None = None) -> bool:
    """Whether a fused forward computes its distances in a third warp per band (mode
    ``tiled``): float32 without gradients, on a GPU.

    Without gradients it replaced the band's own warp computing them between its chunks' steps
    (B = 32, D = 64: 0.430 / 0.995 / 2.935 ms against 0.655 / 1.459 / 3.689 at N = 512 / 1024
    / 2048); with gradients the park kernel and mode ``hilo`` stay (180 + 49 us at N = 512
    against 420 us for this mode with its weights stored: its warps wait at the barriers for
    the distance warp, whose chunk takes longer than the steps')."""
    forced = _ov(ov).tiled
    if forced is not None:
        return fast and forced
    return fast and not store and not simulated


def forward_mode(fused: bool, fast: bool, store: bool, simulated: bool, ov=None) -> str:
    """The forward kernel's mode (:mod:`sdtw.cuda.kernels.forward`): ``cost`` unfused; fused:
    ``tiled`` (:func:`tiled`), else with ``store`` ``hilo`` (float32) or ``split`` (float64)
    after the park kernel, else ``fused``."""
    if not fused:
        return COST
    if tiled(fast, store, simulated, ov):
        return TILED
    if store:
        return HILO if fast else SPLIT
    return FUSED


def forward_mover(mode: str, simulated: bool, ov: Overrides | None = None) -> bool:
    """Whether the forward in ``mode`` has a mover warp per band: mode ``tiled`` always (its
    distance warp hands its tiles to the mover), mode ``hilo`` on a GPU (its DP forward took
    201.5 against 223.9 us at B = 32, N = 512, D = 64 and 480.8 against 578.6 at N = 1024), no
    other mode (the float32 cost forward got slower with it, 209.3 against 192.7 us at
    N = 512, and the float64 forwards are bound by their float64 arithmetic)."""
    if mode == TILED:
        return True
    if mode != HILO:
        return False
    forced = _ov(ov).mover
    return (not simulated) if forced is None else forced


def backward_mover(simulated: bool, ov: Overrides | None = None) -> bool:
    """Whether the backward has a mover warp per band: on a GPU, both dtypes (float32 DP
    backward 127.9 -> 105.1 us at B = 32, N = 512, 917.4 -> 878.7 at N = 2048; float64
    149.5 -> 118.7 at N = 512)."""
    forced = _ov(ov).backward_mover
    return (not simulated) if forced is None else forced


def sweep_grads(
    float32: bool,
    D: int,
    simulated: bool,
    capability: tuple[int, int] = (9, 0),
    ov: Overrides | None = None,
) -> bool:
    """Whether the float32 gradients wrt x and y come from the backward's sweep (E never
    written) rather than from E afterwards: ``D <= 16`` with the backward's mover, on a GPU of
    compute capability 9.0 or later (its g_y reductions are sm_90's ``red.global.add.v2``).

    Whole-step CUDA-graph replays at B = 32 (sweep / from E, us): N = 512, D = 1 407 / 396,
    D = 16 432 / 434, D = 32 500 / 448, D = 64 617 / 463; N = 2048, D = 1 2754 / 2950,
    D = 16 2999 / 3257, D = 64 4783 / 3651: the sweep's products cost its one gradient warp
    per band time that grows with D."""
    if not float32 or D > SWEEP_MAX_D or capability < (9, 0):
        return False
    if not backward_mover(simulated, ov):
        return False
    forced = _ov(ov).sweep_grads
    return True if forced is None else forced


#: The Triton gradient kernel's two settings (best of six at N = 512 and at N = 2048).
TC_SMALL = {"BR": 128, "BK": 64, "BD": 64, "PREC": "tf32x3", "num_warps": 8, "num_stages": 3}
TC_LARGE = {"BR": 128, "BK": 32, "BD": 64, "PREC": "tf32x3", "num_warps": 4, "num_stages": 3}
#: Gradients from E by the Triton kernel from this many cells N M on (below, cuBLAS).
TC_MIN_CELLS = 512 * 512
#: Most pairs of one Triton launch (its grid's third axis).
TC_MAX_B = 65535


def tc_fast_d(D: int) -> bool:
    """Whether D features suit the Triton kernel: ``2 <= D < 16``, or D a multiple of 4 (its
    rows then load as 16-byte vectors)."""
    return 2 <= D < 16 or (D >= 2 and D % 4 == 0)


def tc_grads(B: int, N: int, M: int, D: int, ov: Overrides | None = None) -> bool:
    """Whether float32 gradients from E (B, N, M) take the Triton tensor-core kernel rather
    than cuBLAS's float32 matmuls (the caller checks float32, CUDA, Triton and the setting).

    Where it won on an H200 (both gradients, us, kernel / cuBLAS): N = 512, D = 64 60 / 79;
    D = 2, 3, 5 40 / 52-60; D = 20, 24 at N = 2048 386 / 510; D = 1 38.5 / 24.3; N = 128,
    D = 64 24.2 / 20.8; D = 17, 33, 65 (no 16-byte rows) 74 / 55, 1764 / 822, 245 / 113;
    M not a multiple of 4 (E's rows not 16-byte aligned) 964 / 810 at N = 2047."""
    if B > TC_MAX_B:  # (a hard limit: the grid's third axis)
        return False
    forced = _ov(ov).tc_grads
    if forced is not None:
        return forced
    return tc_fast_d(D) and M % 4 == 0 and N * M >= TC_MIN_CELLS


def tc_settings(B: int, N: int, M: int, D: int, ov: Overrides | None = None) -> dict:
    """The Triton kernel's launch settings: :data:`TC_SMALL` up to ``B N M = 2^24`` cells and
    D = 64, :data:`TC_LARGE` above (B = 32, D = 64: N = 512 60.2 / 71.5 us, N = 1024
    216.7 / 177.5, N = 2048 796.6 / 655.5)."""
    forced = _ov(ov).tc_settings
    if forced is not None:
        return dict(forced)
    return TC_SMALL if B * N * M <= 1 << 24 and D <= 64 else TC_LARGE


def tc_one_launch(B: int, N: int, M: int, ov: Overrides | None = None) -> bool:
    """Whether both Triton gradients go in one launch (the grid's row axis split between g_x's
    and g_y's row blocks): up to ``B N M = 2^24`` cells (one / two launches, us: N = 128
    13.3 / 23.9, N = 512 59-61 / 64.5, N = 1024 193.9 / 194.2, N = 2048 720.8 / 712.0)."""
    forced = _ov(ov).tc_one_launch
    if forced is not None:
        return forced
    return B * N * M <= 1 << 24


def fused_default(needs_grad: bool, cost_bytes: int, free_bytes: int) -> bool:
    """The ``fused=None`` rule (CUDA, squared Euclidean): fused with gradients (a third less
    memory than unfused, about as fast, more accurate for float32 inputs); without gradients
    unfused where the cost tensor takes at most a quarter of the free memory (its forward is
    1.3-1.8x faster at N = 512-2048), else fused (no (N, M) buffer at all)."""
    return needs_grad or cost_bytes > free_bytes // 4
