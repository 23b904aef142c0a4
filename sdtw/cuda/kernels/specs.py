"""Kernel variants as small frozen specs: every compiled kernel is one of these.

A spec names the compile-time choices of one kernel; :mod:`sdtw.cuda.kernels.registry` builds
and caches the kernel of a spec, and the on-disk cache key is the spec plus a digest of this
package.  Which spec a call takes is decided by the tuning rules of :mod:`sdtw.cuda.policy`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sdtw.cuda.kernels.geometry import SWEEP_TILES

#: Where the forward kernel gets its costs (see :mod:`sdtw.cuda.kernels.forward`).
COST, FUSED, SPLIT, HILO, TILED = "cost", "fused", "split", "hilo", "tiled"
MODES = (COST, FUSED, SPLIT, HILO, TILED)
#: The recurrences a spec may name (their cell updates: :mod:`sdtw.cuda.kernels.recurrence`).
RECURRENCES = ("soft-dtw", "soft-msm")


@dataclass(frozen=True)
class ForwardSpec:
    """A DP forward kernel.

    mode : one of :data:`MODES`.
    fast : float32 weights and float32 transcendentals (float32 inputs); float64 otherwise.
    mover : a mover warp per band stages the costs and writes the weights out (modes
        ``hilo`` and ``tiled``; ``tiled`` always has one).
    recurrence : the cell update (:data:`sdtw.cuda.kernels.recurrence.RECURRENCES`);
        ``"soft-msm"`` in mode ``hilo`` only (its transition costs staged from ``Y``).
    lengths : per-pair lengths (variable-length batches; see the kernel's docstring).
    ckpt : also write the column checkpoints of the checkpointed mode (with ``lengths``,
        modes ``cost`` and ``fused``; see :mod:`sdtw.cuda.kernels.recompute`).
    """

    mode: str
    fast: bool
    mover: bool = False
    recurrence: str = "soft-dtw"
    lengths: bool = False
    ckpt: bool = False

    def __post_init__(self) -> None:
        ok = (
            self.mode in MODES
            and self.recurrence in RECURRENCES
            and not (self.mode == SPLIT and self.fast)
            and (self.fast or self.mode not in (HILO, TILED))
            and (self.mover == (self.mode == TILED) or self.mode == HILO)
            and (not self.ckpt or (self.lengths and self.mode in (COST, FUSED)))
            and (self.recurrence == "soft-dtw" or self.mode == HILO)  # (three staged costs)
        )
        if not ok:
            raise ValueError(f"no forward kernel for {self}")

    @property
    def label(self) -> str:
        dtype = "f32" if self.fast else "f64"
        extra = ("-mover" if self.mover else "") + ("-lengths" if self.lengths else "")
        rec = "" if self.recurrence == "soft-dtw" else f"-{self.recurrence}"
        return f"forward-{self.mode}-{dtype}{rec}{extra}" + ("-ckpt" if self.ckpt else "")


@dataclass(frozen=True)
class BackwardSpec:
    """A DP backward kernel.

    fast : float32 weights (float32 inputs).
    mover : a mover warp per band stages the weights and writes E out.
    grads : with the mover, float32: the gradients wrt x and y from the sweep, for up to
        ``8 grads`` features (one of :data:`~sdtw.cuda.kernels.geometry.SWEEP_TILES`); 0:
        E is written instead.
    lengths : per-pair lengths (variable-length batches; see the kernel's docstring).
    """

    fast: bool
    mover: bool = False
    grads: int = 0
    lengths: bool = False

    def __post_init__(self) -> None:
        if self.grads and not (self.fast and self.mover and self.grads in SWEEP_TILES):
            raise ValueError(f"no backward kernel for {self}")

    @property
    def label(self) -> str:
        dtype = "f32" if self.fast else "f64"
        extra = ("-mover" if self.mover else "") + (f"-grads{self.grads}" if self.grads else "")
        return f"backward-{dtype}{extra}" + ("-lengths" if self.lengths else "")


@dataclass(frozen=True)
class RecomputeSpec:
    """The checkpointed backward (:mod:`sdtw.cuda.kernels.recompute`): gradients wrt x and y
    of squared-Euclidean soft-DTW from the forward's checkpoints.

    fast : float32 weights and transcendentals, as the forward's (float32 inputs).
    """

    fast: bool

    @property
    def label(self) -> str:
        return f"recompute-{'f32' if self.fast else 'f64'}"


@dataclass(frozen=True)
class ParkSpec:
    """A park kernel: the squared Euclidean distances of x and y into the weights buffer
    (``cost`` False) or into a (B, N, M) cost tensor (``cost``).

    f32 : float32 inputs (into a float32 ``P`` as the two words of each float64 distance);
        float64 otherwise.
    """

    f32: bool
    cost: bool = False

    @property
    def label(self) -> str:
        return f"{'cost-' if self.cost else ''}park-{'f32' if self.f32 else 'f64'}"


Spec = ForwardSpec | BackwardSpec | RecomputeSpec | ParkSpec
