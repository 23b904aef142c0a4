"""Every sweep the harness runs, defined in one place.

A sweep is a grid of :class:`Config` (B, N, M, D, gamma, dtype), the implementations measured
on it (by default all of its list that run on its device), the modes, and the device.

==============  ======  ============================================================
sweep           device  grid
==============  ======  ============================================================
``paper-grid``  cuda    B in {16, 32}, N = M in {128, 512, 1024, 2048}, D in {1, 64}
``fig1-length`` cuda    B = 32, D = 128, L = N = M in 64, 128, ..., 4096
``fig1-dim``    cuda    B = 32, L = 256, D in 1, 2, 4, ..., 1024
``gamma``       auto    gamma in {1e-4, ..., 10}, B = 4, D = 64, N = M = 512 (128 on CPU);
                        forward + backward only: the point is the error vs float64
``targets``     cuda    ours only, forward + backward, B = 32, D = 64, N = M in {2048, 1024,
                        512}: the issue's speed targets, in one short run; eager steps (the
                        library's graphs on and off) and whole steps captured in a CUDA
                        graph (``sdtw-*-graph``); also timed back to back
``long``        cuda    ours only, B in {1, 8}, N = M in {4096, 8192, 16384}, D = 64,
                        and 32768 at B = 1 (skipped if predicted not to fit)
``cpu``         cpu     sdtw-cpu, torch, the CPU peers tslearn and aeon (when installed),
                        reference; B in {8, 32}, N = M in {32, 64, 128}, D in {1, 8}: a
                        few minutes on 2 cores
``lengths``     cuda    ours, forward + backward, D = 64: B = 512, N = M = 512 and B = 32,
                        N = M in {512, 1024, 2048}, at full length and as a padded batch
                        (per-pair lengths uniform in [N / 4, N], ``sdtw-*-lengths``)
``memory``      cuda    ours in both memory modes and the paper's design, forward + backward,
                        D = 64: B = 1, N = M in {1024, 4096, 16384, 65536} and
                        B = 32, N = M = 2048 (a mode predicted not to fit is skipped)
``barycenter``  cuda    soft-DTW barycenter by Adam of B = 1000 square waves, N = M = 256,
                        D = 3, gamma in {1, 0.1}: ours vs the paper's design
==============  ======  ============================================================

Device ``auto`` means CUDA when torch sees a GPU, else the CPU.  ``quick=True`` shrinks every
grid to a few tiny configurations (smoke tests, the test suite).

What is measured is the sweep's ``task``: ``"loss"`` times ``impl.loss(x, y, gamma)`` on random
``randn`` inputs; ``"barycenter"`` times soft-DTW barycenter iterations and solves
(:mod:`experiments.barycenter`) on ``B`` square waves of length ``M`` and ``D`` channels, the
barycenter being of length ``N = M``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from experiments import barycenter
from experiments.impls import FORWARD_BACKWARD, IMPLS, MODES

__all__ = ["SWEEPS", "Config", "Sweep", "default_sweeps"]


@dataclass(frozen=True)
class Config:
    """One point of a sweep: x (B, N, D), y (B, M, D) of ``dtype``, smoothing ``gamma``."""

    B: int
    N: int
    M: int
    D: int
    gamma: float = 1.0
    dtype: str = "float32"


Grid = Callable[[str, bool], list[Config]]


@dataclass(frozen=True)
class Sweep:
    """A named grid of configurations and the implementations measured on it.

    Attributes
    ----------
    name : str
        Also the CSV's file name, ``<out>/<name>.csv``.
    description : str
        One line, shown by ``--list``.
    device : {"cuda", "cpu", "auto"}
        Where the inputs live; ``"auto"``: CUDA if available, else the CPU.
    impls : tuple of str
        Default implementations (those that run on the device are kept).
    grid : callable
        ``grid(device, quick) -> list[Config]`` with ``device`` "cuda" or "cpu".
    modes : tuple of str
        Subset of :data:`experiments.impls.MODES` (task ``"loss"``) or of
        :data:`experiments.barycenter.MODES` (task ``"barycenter"``).
    task : {"loss", "barycenter"}
        What a measurement times (see the module docstring).
    back_to_back : bool
        Also time the steps back to back, with no synchronisation between them (metric
        ``time_ms_back_to_back``: what a training loop that does not read the loss each step
        gets; see :func:`experiments.measure.measure_group`).
    """

    name: str
    description: str
    device: str
    impls: tuple[str, ...]
    grid: Grid
    modes: tuple[str, ...] = field(default=MODES)
    task: str = "loss"
    back_to_back: bool = False

    def resolve_device(self, cuda_available: bool) -> str:
        """The device this sweep runs on here ("cuda" or "cpu")."""
        if self.device == "auto":
            return "cuda" if cuda_available else "cpu"
        return self.device


GPU_IMPLS = (
    "sdtw-fused",
    "sdtw-unfused",
    "paper-unfused",
    "paper-fused",
    "maghoumi",
    "maghoumi-bmm",
    "torch",
    "pysdtw",  # optional peer: left out with a note where not installed
)
OURS_CUDA = ("sdtw-fused", "sdtw-unfused")
#: Ours with the whole step in a CUDA graph (static shapes; see :mod:`experiments.impls`)
OURS_GRAPHED = ("sdtw-fused-graph", "sdtw-unfused-graph")
#: Ours with the library's own CUDA graphs off (every call eager)
OURS_NOGRAPH = ("sdtw-fused-nograph", "sdtw-unfused-nograph")
GAMMAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)


def _square(
    Bs: Sequence[int], Ns: Sequence[int], Ds: Sequence[int], gammas: Sequence[float] = (1.0,)
) -> list[Config]:
    """Every combination, with M = N."""
    return [Config(B, N, N, D, g) for B in Bs for N in Ns for D in Ds for g in gammas]


def _paper_grid(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((2,), (16, 33), (1, 4))
    return _square((16, 32), (128, 512, 1024, 2048), (1, 64))


def _fig1_length(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((2,), (8, 16, 32), (8,))
    return _square((32,), [2**k for k in range(6, 13)], (128,))


def _fig1_dim(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((2,), (16,), (1, 4, 16))
    return _square((32,), (256,), [2**k for k in range(11)])


def _gamma(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((2,), (16,), (8,), (1e-3, 1.0))
    return _square((4,), (512 if device == "cuda" else 128,), (64,), GAMMAS)


def _long(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((1, 2), (64, 100), (4,))
    return _square((1, 8), (4096, 8192, 16384), (64,)) + _square((1,), (32768,), (64,))


def _cpu(device: str, quick: bool) -> list[Config]:
    if quick:
        return _square((2,), (8, 13), (1, 3))
    # issue 55's targets: B = 32 at N = 64 .. 512, D in {1, 8}; and one tiny pair, where the
    # host work per call is the whole step
    return [*_square((32,), (64, 128, 256, 512), (1, 8)), Config(1, 16, 16, 2)]


def _targets(device: str, quick: bool) -> list[Config]:
    if quick:
        return [Config(2, 40, 40, 3)]
    return [Config(32, n, n, 64) for n in (2048, 1024, 512)]


def _lengths(device: str, quick: bool) -> list[Config]:
    if quick:
        return [Config(2, 9, 7, 2)]
    return [Config(512, 512, 512, 64)] + [Config(32, n, n, 64) for n in (512, 1024, 2048)]


def _memory(device: str, quick: bool) -> list[Config]:
    if quick:
        return [Config(1, 12, 9, 2)]
    return [Config(1, n, n, 64) for n in (1024, 4096, 16384, 65536)] + [Config(32, 2048, 2048, 64)]


def _barycenter(device: str, quick: bool) -> list[Config]:
    if quick:
        return [Config(3, 10, 10, 3)]
    return [Config(1000, 256, 256, 3, gamma) for gamma in (1.0, 0.1)]


SWEEPS: dict[str, Sweep] = {
    s.name: s
    for s in [
        Sweep(
            "paper-grid",
            "the paper's table: B x N x D, M = N, fp32, gamma 1",
            "cuda",
            GPU_IMPLS,
            _paper_grid,
        ),
        Sweep(
            "fig1-length",
            "paper Figure 1 (left): B = 32, D = 128, L = 64 .. 4096",
            "cuda",
            GPU_IMPLS,
            _fig1_length,
        ),
        Sweep(
            "fig1-dim",
            "paper Figure 1 (right): B = 32, L = 256, D = 1 .. 1024",
            "cuda",
            GPU_IMPLS,
            _fig1_dim,
        ),
        Sweep(
            "gamma",
            "accuracy vs gamma (1e-4 .. 10) against a float64 reference, every implementation",
            "auto",
            # not the oracle itself, nor the CPU-only peers (tested, and in `cpu`), nor
            # the CUDA-graph replays and other modes of ours (the same kernels: their errors
            # are in `targets`, `lengths` and `memory`)
            tuple(
                name
                for name in IMPLS
                if name not in ("reference", "tslearn", "aeon", *OURS_GRAPHED, *OURS_NOGRAPH)
                and not name.endswith(("-full", "-checkpoint", "-lengths"))
            ),
            _gamma,
            modes=(FORWARD_BACKWARD,),
        ),
        Sweep(
            "targets",
            "issue #3's three speed targets: B = 32, D = 64, N = M in {2048, 1024, 512}, ours "
            "(defaults, library graphs off, whole steps CUDA-graphed)",
            "cuda",
            (*OURS_CUDA, *OURS_NOGRAPH, *OURS_GRAPHED),
            _targets,
            modes=(FORWARD_BACKWARD,),
            back_to_back=True,
        ),
        Sweep(
            "long",
            "long sequences, ours: B in {1, 8}, N = 4096 .. 32768",
            "cuda",
            OURS_CUDA,
            _long,
        ),
        Sweep(
            "lengths",
            "padded batches, ours: full length against per-pair lengths uniform in [N/4, N], "
            "B = 512 at N = 512 and B = 32 at N = 512 .. 2048, D = 64",
            "cuda",
            ("sdtw-fused", "sdtw-fused-lengths", "sdtw-unfused", "sdtw-unfused-lengths"),
            _lengths,
            modes=(FORWARD_BACKWARD,),
        ),
        Sweep(
            "memory",
            "peak memory against N: ours full and checkpointed, the paper's design; B = 1, "
            "N = 1024 .. 65536, and B = 32, N = 2048; D = 64",
            "cuda",
            ("sdtw-fused-full", "sdtw-fused-checkpoint", "paper-fused", "paper-unfused"),
            _memory,
            modes=(FORWARD_BACKWARD,),
        ),
        Sweep(
            "cpu",
            "CPU grid (issue 55's targets: B = 32, N = 64 .. 512, D in {1, 8}; B = 1, N = 16): "
            "sdtw-cpu vs torch, tslearn, aeon, reference",
            "cpu",
            ("sdtw-cpu", "torch", "tslearn", "aeon", "reference"),
            _cpu,
        ),
        Sweep(
            "barycenter",
            "soft-DTW barycenters (Adam), 1000 square waves, L = 256, D = 3: ours vs paper design",
            "cuda",
            (*OURS_CUDA, "paper-unfused", "paper-fused"),
            _barycenter,
            modes=barycenter.MODES,
            task="barycenter",
        ),
    ]
}
"""Every sweep, by name."""


def default_sweeps(cuda_available: bool) -> list[str]:
    """Sweeps run when none is named: the paper's grid and Figure 1 on a GPU, else ``cpu``."""
    if cuda_available:
        return ["paper-grid", "fig1-length", "fig1-dim"]
    return ["cpu"]
