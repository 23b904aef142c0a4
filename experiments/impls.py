"""The implementations the harness measures: name -> :class:`Impl`.

Every implementation is called the same way, ``impl.loss(x, y, gamma) -> (B,)`` for ``x``
(B, N, D) and ``y`` (B, M, D), squared-Euclidean cost, differentiable in ``x`` and ``y``.

=================  ===========================================================  ======
name               what                                                         device
=================  ===========================================================  ======
``sdtw-fused``     ours, ``softdtw(fused=True, backend="cuda")``                cuda
``sdtw-unfused``   ours, ``softdtw(fused=False, backend="cuda")`` (torch cost)  cuda
``sdtw-fused-nograph``  ``sdtw-fused`` with the library's CUDA graphs off         cuda
``sdtw-unfused-nograph``  ``sdtw-unfused``, likewise                              cuda
``sdtw-fused-graph``    ``sdtw-fused``, the step captured in a CUDA graph        cuda
``sdtw-unfused-graph``  ``sdtw-unfused``, likewise                              cuda
``sdtw-fused-full``  ``sdtw-fused`` with ``memory="full"`` (every weight kept)    cuda
``sdtw-fused-checkpoint``  ``sdtw-fused`` with ``memory="checkpoint"`` (recomputed)  cuda
``sdtw-fused-lengths``  ``sdtw-fused`` on a padded batch: per-pair lengths        cuda
``sdtw-unfused-lengths``  ``sdtw-unfused``, likewise                              cuda
``sdtw-cpu``       ours, ``softdtw(backend="cpu")`` (Numba CPU, float64 DP)     any
``paper-unfused``  :mod:`baselines.paper`, one launch per anti-diagonal         cuda
``paper-fused``    same, distances recomputed in the kernels                    cuda
``maghoumi``       :mod:`baselines.maghoumi`, (B, N, M, D) broadcast distance   cuda
``maghoumi-bmm``   same kernels, matrix-product distance                        cuda
``torch``          :mod:`baselines.torch_naive`, plain PyTorch + autograd       any
``reference``      float64 NumPy oracle (slow; timed only at small N M)         any
``tslearn``        optional peer: tslearn's ``SoftDTWLossPyTorch`` (CPU DP)     cpu
``aeon``           optional peer: ``aeon.distances.soft_dtw_distance`` (Numba)  cpu
``pysdtw``         optional peer: pysdtw's CUDA ``SoftDTW`` (Numba)             cuda
=================  ===========================================================  ======

``sdtw-fused`` and ``sdtw-unfused`` are the library's defaults: a small call repeated with
the same shapes replays a CUDA graph the library captured of its own GPU work
(:func:`sdtw.cuda.set_graphs`; from the harness's first timed step on, its warm-up and
instrumented steps being the two eager calls before the capture).  The ``-nograph`` rows turn
that off, so every call launches its kernels eagerly.

The ``-lengths`` rows take the same (B, N, D) and (B, M, D) tensors as a padded batch: pair b
is ``x[b, :x_lengths[b]]`` against ``y[b, :y_lengths[b]]``, the lengths drawn once per shape,
uniform in [ceil(N / 4), N] and [ceil(M / 4), M] (:func:`padded_lengths`, a fixed seed), and
passed as CPU tensors, as a data loader hands them over; their float64 reference takes the same
lengths.  Beside the full-length rows of the same inputs they show what padding costs.

The ``-graph`` rows time the same loss as a training loop with static shapes runs it: the
whole step (loss, ``sum``, backward) captured once by ``torch.cuda.graph`` and replayed after
copying the inputs in (:func:`experiments.timing.graph_step`), so a step's host time is two
copies and one graph launch; their ``peak_mem_bytes`` is what the captured graph keeps
allocated.  Their loss runs with the library's own graphs off, as the README advises a caller
that captures whole steps: in the warm-up steps (on a side stream) the library would capture
a graph of its own that the replays never use, but that holds memory and counts toward its
budget of kept graphs (:func:`sdtw.cuda.set_graphs`).  They are timed in turn among themselves,
after the eager rows (:func:`experiments.runner.turn_groups`).  Real GPUs only (the simulator
has no graphs).

The peers are other projects' code, measured as installed when importable (``Impl.unavailable``
says why not, and how to install it; a sweep then leaves them out with a note).  aeon computes
the value only (its ``forward+backward`` rows are ``unsupported``) and returns its absolute
value (``abs`` of soft-DTW, which is negative for close sequences), so its error is large where
soft-DTW is below zero.

For the ``barycenter`` sweep, ``impl.solve_barycenter(X, gamma, max_iter, early_stopping)`` runs
ours through :func:`sdtw.softdtw_barycenter` and every other implementation through the same
Adam loop around its loss (:func:`experiments.barycenter.adam_barycenter`).

The baselines are imported lazily (:func:`baselines_error` says why they are missing, if they
are), so this module imports on any machine and never touches a GPU; torch too, so that the
report and the figures, which read the registry's names and order, run without it.

Memory models
-------------
``impl.peak_bytes(B, N, M, D, dtype, mode)`` predicts the peak of one step (allocations made
during it, inputs excluded), so that a configuration that cannot fit is skipped with status
``skipped-memory`` instead of tried blindly.  They are first-order models written from each
design (``s`` = bytes per element of ``dtype``, per cell of the (N, M) table of one pair):

================  =============================  =======================================
impl              forward + backward             where from
================  =============================  =======================================
sdtw-fused        ``2 s'`` + 1/4                 weights P, boundary rows (sdtw.cuda)
``-checkpoint``   ``3/4``                        8-byte boundary rows and column checkpoints
sdtw-unfused      ``3 s + 2 s' + 1`` + 1/2       + cost, its saved matmul input, grad
paper-unfused     ``8 s + 1``                    R, clone, log E, E, E * g, cost + grad
paper-fused       ``5 s``                        R, clone, log E, E, E * g
maghoumi          ``4 s D + 6 s``                (B, N, M, D) broadcast kept by autograd
maghoumi-bmm      ``9 s + 1``                    padded cost, R, clone, E, cost + grad
torch             ``16 s``                       autograd keeps every diagonal (~10 s)
sdtw-cpu          ``40`` (host)                  float64 cost, R, E, gradient
reference         ``8 D + 40`` (host)            float64 broadcast cost, R, E
tslearn           ``32`` (host)                  float64 R, E, cost, gradient (rough)
aeon              ``24`` (host)                  float64 cost, R (rough; forward only)
pysdtw            ``5 s``                        cost + grad, R, E (rough)
================  =============================  =======================================

``s'`` is the storage size of our kernels (8 for float64 inputs, else 4).  Forward-only steps
(inputs without gradient) keep less; see each model.  For the original codes of the paper's and
Maghoumi's designs, measured on an H200 (``/work/shared/reference/PAPER.md``), the models are
within ~25 % at N >= 512 (below that, fixed overheads dominate).  The harness writes both the
prediction and the measurement (``predicted_mem_bytes``, ``peak_mem_bytes``), so every model
is checked on every run.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "FORWARD",
    "FORWARD_BACKWARD",
    "IMPLS",
    "MODES",
    "Impl",
    "baselines_error",
    "padded_lengths",
    "simulator",
]

FORWARD = "forward"
FORWARD_BACKWARD = "forward+backward"
MODES = (FORWARD, FORWARD_BACKWARD)

LossFn = Callable[["torch.Tensor", "torch.Tensor", float], "torch.Tensor"]
#: ``solve(X, gamma, max_iter, early_stopping) -> history``: a barycenter of X (S, M, D) and the
#: objective after each step (:func:`experiments.barycenter.adam_barycenter`'s ``history``).
BarycenterFn = Callable[["torch.Tensor", float, int, bool], list[float]]
MemoryModel = Callable[[int, int, int, int, "torch.dtype", str], int]


@dataclass(frozen=True)
class Impl:
    """One implementation as the harness sees it.

    Attributes
    ----------
    name : str
        Registry key, also the ``impl`` column of the CSV.
    loss : callable
        ``loss(x, y, gamma) -> (B,)``.
    device : {"cuda", "any"}
        ``"cuda"``: needs CUDA tensors; ``"any"``: runs on the inputs' device.
    peak_bytes : callable
        ``peak_bytes(B, N, M, D, dtype, mode) -> int``, predicted peak of one step.
    host_memory : bool
        The big buffers live in host RAM whatever the inputs' device (CPU DP paths).
    max_len : int or None
        Largest ``max(N, M)`` the design supports; longer inputs are ``unsupported``.
    max_cells : int or None
        Largest ``N * M`` worth timing (slow oracles); larger ones are ``skipped-slow``.
    launches : callable or None
        Numba kernel launches made so far in this process (the harness takes differences);
        ``None`` where launches are not counted (torch ops, CPU code).
    baseline : bool
        Comes from :mod:`baselines` (imported lazily).
    barycenter : callable or None
        Its own soft-DTW barycenter solver (ours: :func:`sdtw.softdtw_barycenter`); ``None``:
        :func:`experiments.barycenter.adam_barycenter`, the same algorithm, around ``loss``.
    unavailable : callable or None
        For optional peers (installed packages we do not depend on): returns why the package
        cannot be used here, or ``None``; an unavailable peer is left out of a sweep with a note.
    graphed : bool
        Timed as a CUDA-graph replay of the whole step (:func:`experiments.timing.graph_step`);
        needs a real GPU.
    lengths : callable or None
        ``lengths(B, N, M) -> (x_lengths, y_lengths)``: the per-pair lengths this
        implementation's loss takes its inputs as a padded batch with (its reference uses them
        too); ``None``: every pair at full length.
    """

    name: str
    loss: LossFn
    device: str
    peak_bytes: MemoryModel
    host_memory: bool = False
    max_len: int | None = None
    max_cells: int | None = None
    launches: Callable[[], int] | None = None
    baseline: bool = False
    barycenter: BarycenterFn | None = None
    unavailable: Callable[[], str | None] | None = None
    graphed: bool = False
    lengths: Callable[[int, int, int], tuple[list[int], list[int]]] | None = None

    def solve_barycenter(
        self, X: torch.Tensor, gamma: float, max_iter: int, early_stopping: bool
    ) -> list[float]:
        """Solve for the barycenter of ``X`` (S, M, D) by Adam; the objective per step."""
        if self.barycenter is not None:
            return self.barycenter(X, gamma, max_iter, early_stopping)
        from experiments.barycenter import adam_barycenter

        _, history = adam_barycenter(
            self.loss, X, gamma=gamma, max_iter=max_iter, early_stopping=early_stopping
        )
        return history

    def runs_on(self, device: str) -> bool:
        """Whether this implementation takes inputs on ``device`` ("cuda" or "cpu").

        Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the CUDA implementations
        take CPU tensors: slow, but it runs the harness end to end without a GPU.
        """
        if self.graphed:
            return device == "cuda" and not simulator()
        return self.device in ("any", device) or (device == "cpu" and simulator())


def simulator() -> bool:
    """Whether Numba's CUDA simulator is on (it must be set before numba is imported)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


# --------------------------------------------------------------------------------------------
# Memory models
# --------------------------------------------------------------------------------------------


def _itemsize(dtype: torch.dtype) -> int:
    import torch

    return torch.finfo(dtype).bits // 8


def _io(B: int, N: int, M: int, D: int, s: int) -> int:
    # Gradients of x and y, norms, casts: a few tensors of the inputs' size.
    return 4 * B * (N + M) * D * s


def _boundary_rows(N: int, M: int) -> int:
    # sdtw's 8-byte boundary rows Rb / Gb per pair: ceil(N / TB) bands of M + 1 values (one
    # padding slot; TB = 32 in sdtw.cuda.kernels.geometry; not imported here, to keep numba out).
    return 8 * math.ceil(N / 32) * (M + 1)


def _sdtw_fused(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    s = _itemsize(dtype)
    store = 8 if s == 8 else 4  # float64 stays float64, the rest is stored as float32
    rows = B * _boundary_rows(N, M)
    if mode == FORWARD:
        return rows + _io(B, N, M, D, s)
    return 2 * store * B * N * M + rows + _io(B, N, M, D, s)


def _sdtw_unfused(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    s = _itemsize(dtype)
    store = 8 if s == 8 else 4  # float64 stays float64, the rest is stored as float32
    rows = B * _boundary_rows(N, M)
    if mode == FORWARD:
        return 2 * s * B * N * M + rows + _io(B, N, M, D, s)
    return (3 * s + 2 * store + 1) * B * N * M + 2 * rows + _io(B, N, M, D, s)


def _per_cell(forward: float, forward_backward: float) -> MemoryModel:
    """A model ``bytes_per_cell(s) * B (N + 2) (M + 2)`` plus the inputs' gradients."""

    def model(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
        s = _itemsize(dtype)
        per_cell = forward if mode == FORWARD else forward_backward
        return int(per_cell * s * B * (N + 2) * (M + 2)) + _io(B, N, M, D, s)

    return model


def _maghoumi(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    s = _itemsize(dtype)
    cells = B * (N + 2) * (M + 2)
    if mode == FORWARD:  # difference and its square, (B, N, M, D) each, then R
        return 2 * s * D * B * N * M + 2 * s * cells + _io(B, N, M, D, s)
    return 4 * s * D * B * N * M + 6 * s * cells + _io(B, N, M, D, s)


def _sdtw_checkpoint(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    from sdtw import memory

    s = _itemsize(dtype)
    store = 8 if s == 8 else 4
    if mode == FORWARD:  # the forward keeps only its boundary rows
        return B * _boundary_rows(N, M) + _io(B, N, M, D, s)
    return memory.cuda_checkpoint_bytes(B, N, M, D, store) + _io(B, N, M, D, s)


def _sdtw_cpu(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    per_cell = 16 if mode == FORWARD else 40  # float64 cost (+ temporary), R, E, gradient
    return per_cell * B * (N + 2) * (M + 2) + _io(B, N, M, D, 8)


def _reference(B: int, N: int, M: int, D: int, dtype: torch.dtype, mode: str) -> int:
    per_cell = 8 * D + (16 if mode == FORWARD else 40)
    return per_cell * B * (N + 2) * (M + 2) + _io(B, N, M, D, 8)


# --------------------------------------------------------------------------------------------
# Ours
# --------------------------------------------------------------------------------------------


def _sdtw_launches() -> int:
    import sdtw.cuda

    return sum(sdtw.cuda.launch_counts().values())


def _sdtw(fused: bool | None, backend: str, memory: str = "auto", lengths: bool = False) -> LossFn:
    def loss(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
        from sdtw import softdtw

        kwargs = {}
        if lengths:
            kwargs["x_lengths"], kwargs["y_lengths"] = padded_lengths_tensors(
                x.shape[0], x.shape[1], y.shape[1]
            )
        return softdtw(x, y, gamma=gamma, fused=fused, backend=backend, memory=memory, **kwargs)

    return loss


def padded_lengths(B: int, N: int, M: int) -> tuple[list[int], list[int]]:
    """The per-pair lengths of the ``-lengths`` rows for a (B, N, .) and (B, M, .) batch:
    uniform in [ceil(N / 4), N] and [ceil(M / 4), M], drawn from a seed fixed by the shape (the
    same lengths in every process and for every implementation)."""
    import numpy as np

    rng = np.random.default_rng([B, N, M])
    xl = rng.integers(-(-N // 4), N, size=B, endpoint=True)
    yl = rng.integers(-(-M // 4), M, size=B, endpoint=True)
    return xl.tolist(), yl.tolist()


@cache
def padded_lengths_tensors(B: int, N: int, M: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`padded_lengths` as int64 CPU tensors (made once per shape: not timed)."""
    import torch

    return tuple(torch.tensor(v, dtype=torch.int64) for v in padded_lengths(B, N, M))


def _sdtw_nograph(fused: bool | None) -> LossFn:
    """:func:`_sdtw` on the CUDA backend with the library's CUDA graphs off for the call
    (``sdtw.cuda.set_graphs``): every call runs its kernels eagerly."""

    def loss(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
        import sdtw.cuda
        from sdtw import softdtw

        was = sdtw.cuda.graphs_enabled()
        sdtw.cuda.set_graphs(False)
        try:
            return softdtw(x, y, gamma=gamma, fused=fused, backend="cuda")
        finally:
            sdtw.cuda.set_graphs(was)

    return loss


def _sdtw_barycenter(fused: bool | None, backend: str) -> BarycenterFn:
    def solve(X: torch.Tensor, gamma: float, max_iter: int, early_stopping: bool) -> list[float]:
        from sdtw import softdtw_barycenter

        _, history = softdtw_barycenter(
            X,
            gamma=gamma,
            max_iter=max_iter,
            early_stopping=early_stopping,
            fused=fused,
            backend=backend,
            return_history=True,
        )
        return history.tolist()

    return solve


def _ours(
    name: str,
    fused: bool | None,
    backend: str,
    model: MemoryModel,
    nograph=False,
    memory: str = "auto",
    lengths: bool = False,
    **kwargs,
) -> Impl:
    """sdtw with these options: its loss (``nograph``: with the library's CUDA graphs off;
    ``memory``: the ``memory`` argument; ``lengths``: on a padded batch, :func:`padded_lengths`),
    and its own barycenter solver."""
    device = "cuda" if backend == "cuda" else "any"
    if nograph and (memory != "auto" or lengths):  # (the nograph loss takes neither)
        raise ValueError(f"{name}: nograph takes no memory or lengths")
    loss = _sdtw_nograph(fused) if nograph else _sdtw(fused, backend, memory, lengths)
    solve = _sdtw_barycenter(fused, backend)
    pairs = padded_lengths if lengths else None
    return Impl(name, loss, device, model, barycenter=solve, lengths=pairs, **kwargs)


# --------------------------------------------------------------------------------------------
# Baselines (imported lazily; another part of the project)
# --------------------------------------------------------------------------------------------


@cache
def baselines_error() -> str | None:
    """Why :mod:`baselines` cannot be used here, or ``None`` if it can."""
    try:
        import baselines
    except Exception as exc:
        return f"the baselines package is not importable ({type(exc).__name__}: {exc})"
    if not isinstance(getattr(baselines, "BASELINES", None), dict):
        return "baselines.BASELINES is missing"
    return None


def _baseline(name: str) -> LossFn:
    def loss(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
        from baselines import BASELINES

        return BASELINES[name](x, y, gamma=gamma)

    return loss


# baselines.maghoumi.MAX_LENGTH, restated so that the registry needs no import: one thread per
# row, at most 1024 threads per block.
MAGHOUMI_MAX_LEN = 1024


def _baseline_launches() -> int:
    from baselines import total_launches

    return total_launches()


# --------------------------------------------------------------------------------------------
# Installed peers: optional extra columns when importable (their code, not ours)
# --------------------------------------------------------------------------------------------


def _importable(module: str, install: str) -> Callable[[], str | None]:
    """Why optional peer ``module`` cannot be used here (with ``install``, how to get it), or
    ``None``."""

    @cache
    def why_not() -> str | None:
        try:
            importlib.import_module(module)
        except Exception as exc:
            return (
                f"optional peer {module} is not importable ({type(exc).__name__}: {exc}); "
                f"install it with: {install}"
            )
        return None

    return why_not


def _tslearn(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """tslearn's PyTorch soft-DTW loss (squared Euclidean; its DP runs on the CPU)."""
    from tslearn.metrics import SoftDTWLossPyTorch

    return SoftDTWLossPyTorch(gamma=gamma)(x, y)


def _aeon(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """aeon's soft-DTW distance (Numba, float64, squared Euclidean), pair by pair: the value
    only, as aeon returns it (``abs`` of soft-DTW); with inputs that require a gradient a
    ``ValueError`` (status ``unsupported``): aeon computes none."""
    import torch
    from aeon.distances import soft_dtw_distance

    if x.requires_grad or y.requires_grad:
        raise ValueError("aeon's soft_dtw_distance computes no gradient")
    # aeon takes one series at a time as (channels, time)
    xs = x.detach().to("cpu", torch.float64).transpose(1, 2).numpy()
    ys = y.detach().to("cpu", torch.float64).transpose(1, 2).numpy()
    values = [soft_dtw_distance(a, b, gamma=gamma) for a, b in zip(xs, ys, strict=True)]
    return torch.as_tensor(values, dtype=x.dtype, device=x.device)


def _pysdtw(x: torch.Tensor, y: torch.Tensor, gamma: float) -> torch.Tensor:
    """pysdtw's CUDA soft-DTW (Numba, Maghoumi-derived; squared Euclidean distance).

    Its Numba launches reach ``np.row_stack``, gone in NumPy 2.5: numba.cuda is imported
    through :func:`sdtw.cuda.import_numba_cuda` first, which applies sdtw's shim for it.
    """
    import sdtw.cuda

    sdtw.cuda.import_numba_cuda()
    import pysdtw

    return pysdtw.SoftDTW(gamma=gamma, use_cuda=True)(x, y)


#: aeon caps numba (< 0.64) and numpy (< 2.4) below the versions sdtw is measured with, so it
#: goes in without its pins (its soft-DTW runs with today's numba: the harness's tests check it).
AEON_INSTALL = "pip install deprecated && pip install --no-deps aeon (nox -s bench does)"

GRAPHED = {"graphed": True, "launches": _sdtw_launches}

IMPLS: dict[str, Impl] = {
    impl.name: impl
    for impl in [
        _ours("sdtw-fused", True, "cuda", _sdtw_fused, launches=_sdtw_launches),
        _ours("sdtw-unfused", False, "cuda", _sdtw_unfused, launches=_sdtw_launches),
        _ours("sdtw-fused-nograph", True, "cuda", _sdtw_fused, True, launches=_sdtw_launches),
        _ours("sdtw-unfused-nograph", False, "cuda", _sdtw_unfused, True, launches=_sdtw_launches),
        _ours("sdtw-fused-graph", True, "cuda", _sdtw_fused, True, **GRAPHED),
        _ours("sdtw-unfused-graph", False, "cuda", _sdtw_unfused, True, **GRAPHED),
        _ours("sdtw-fused-full", True, "cuda", _sdtw_fused, memory="full", launches=_sdtw_launches),
        _ours(
            "sdtw-fused-checkpoint",
            True,
            "cuda",
            _sdtw_checkpoint,
            memory="checkpoint",
            launches=_sdtw_launches,
        ),
        _ours(
            "sdtw-fused-lengths", True, "cuda", _sdtw_fused, lengths=True, launches=_sdtw_launches
        ),
        _ours(
            "sdtw-unfused-lengths",
            False,
            "cuda",
            _sdtw_unfused,
            lengths=True,
            launches=_sdtw_launches,
        ),
        _ours("sdtw-cpu", None, "cpu", _sdtw_cpu, host_memory=True),
        Impl(
            "paper-unfused",
            _baseline("paper-unfused"),
            "cuda",
            _per_cell(3, 8 + 0.25),
            launches=_baseline_launches,
            baseline=True,
        ),
        Impl(
            "paper-fused",
            _baseline("paper-fused"),
            "cuda",
            _per_cell(1, 5),
            launches=_baseline_launches,
            baseline=True,
        ),
        Impl(
            "maghoumi",
            _baseline("maghoumi"),
            "cuda",
            _maghoumi,
            max_len=MAGHOUMI_MAX_LEN,
            launches=_baseline_launches,
            baseline=True,
        ),
        Impl(
            "maghoumi-bmm",
            _baseline("maghoumi-bmm"),
            "cuda",
            _per_cell(3, 9 + 0.25),
            max_len=MAGHOUMI_MAX_LEN,
            launches=_baseline_launches,
            baseline=True,
        ),
        Impl("torch", _baseline("torch"), "any", _per_cell(3, 16), baseline=True),
        Impl(
            "reference",
            _baseline("reference"),
            "any",
            _reference,
            host_memory=True,
            max_cells=128 * 128,  # ~1 s per step at B = 32; N = 512 would take ~16 s
            baseline=True,
        ),
        # Peers: float64 R and E of (N + 2) (M + 2) plus the cost and its gradient, per cell.
        Impl(
            "tslearn",
            _tslearn,
            "cpu",
            _per_cell(8 * 2, 8 * 4),
            host_memory=True,
            max_cells=512 * 512,
            unavailable=_importable(
                "tslearn", 'pip install tslearn (the bench extra: pip install ".[bench]")'
            ),
        ),
        Impl(
            "aeon",
            _aeon,
            "cpu",
            _per_cell(8 * 2, 8 * 3),
            host_memory=True,
            max_cells=512 * 512,
            unavailable=_importable("aeon.distances", AEON_INSTALL),
        ),
        Impl(
            "pysdtw",
            _pysdtw,
            "cuda",
            _per_cell(3 * 4, 5 * 4),
            launches=None,
            unavailable=_importable("pysdtw", "pip install pysdtw"),
        ),
    ]
}
"""Every implementation the harness knows, in the order of the CSV and summary tables."""
