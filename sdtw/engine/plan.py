"""One plan per call: every ``"auto"`` rule and every capability error, decided once.

:func:`plan_pairs` (a call from sequences) and :func:`plan_cost` (from a cost tensor) resolve
the backend (:func:`sdtw.engine.registry.resolve`), then, from the backend's
:class:`~sdtw.engine.backend.Capabilities` and its two rules:

* ``memory``: ``"checkpoint"`` where asked (the backend refuses what it cannot run), or for
  ``"auto"`` where the full mode's buffers would take more than
  :data:`sdtw.memory.AUTO_FRACTION` of the memory available now
  (:meth:`~sdtw.engine.backend.Backend.full_too_big`);
* ``fused``: for a cost the backend computes in its kernels (``caps.fused``), ``fused=None``
  asks :meth:`~sdtw.engine.backend.Backend.fused_default`; ``fused=True`` elsewhere is an
  error.

A plan is a frozen :class:`Plan`.  Plans are cached on what decides them (the options, the
recurrence, the inputs' shapes, dtypes and device, whether gradients are asked, whether the
batch is padded), so a training step's host time does not grow with the rules; a plan whose
rules read the memory available now is made afresh on every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from sdtw import _validation as V
from sdtw.engine.backend import Backend
from sdtw.engine.recurrence import DTW, SOFTDTW, Recurrence
from sdtw.engine.registry import resolve

__all__ = ["Options", "Plan", "plan_cost", "plan_pairs"]


@dataclass(frozen=True)
class Options:
    """The validated settings of one call (or of a :class:`~sdtw.SoftDTW` module): what the
    user asked, ``"auto"`` and ``None`` included.  :class:`Plan` holds what was decided."""

    gamma: float = 1.0
    bandwidth: int | float | None = None
    normalize: bool = False
    dist: str | Callable = "sqeuclidean"
    fused: bool | None = None
    backend: str = "auto"
    memory: str = "auto"

    @classmethod
    def make(cls, *, gamma, bandwidth, normalize, dist, fused, backend, memory="auto") -> Options:
        """The options after validation (each error names its argument)."""
        return cls(
            gamma=V.check_gamma(gamma),
            bandwidth=V.check_bandwidth(bandwidth),
            normalize=V.check_flag("normalize", normalize),
            dist=V.check_dist(dist),
            fused=V.check_fused(fused),
            backend=V.check_backend(backend),
            memory=V.check_memory(memory),
        )


class Plan(NamedTuple):
    """Everything decided for one call: the backend object, the recurrence, and the settings
    the kernels run with (``fused``: the backend computes the cost in its kernels;
    ``checkpoint``: the checkpointed memory mode).  (A named tuple: made on every call whose
    rules read the free memory, it must cost little host time.)"""

    options: Options
    backend: Backend
    recurrence: Recurrence
    gamma: float
    bandwidth: int | float | None
    normalize: bool
    dist: str | Callable
    fused: bool
    checkpoint: bool


_plans: dict[tuple, Plan] = {}
_MAX_PLANS = 512  # (one-off shapes: bounded all the same)


def _remember(key: tuple, plan: Plan) -> Plan:
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    _plans[key] = plan
    return plan


def _backend(name: str, device: torch.device, recurrence: Recurrence) -> Backend:
    backend = resolve(name, device)
    if recurrence.name not in backend.caps.recurrences:
        raise ValueError(
            f"backend={backend.name!r} has no kernels for {recurrence.name}; it runs "
            f"{', '.join(backend.caps.recurrences)}"
        )
    return backend


def _exact(gamma: float, recurrence: Recurrence) -> Recurrence:
    """``gamma == 0`` is soft-DTW's limit, exact DTW: its own recurrence (min-plus, no exp or
    log; the soft-DTW kernels run the DP in units of gamma)."""
    return DTW if gamma == 0 and recurrence is SOFTDTW else recurrence


def plan_pairs(
    opts: Options,
    x: torch.Tensor,
    y: torch.Tensor,
    padded: bool,
    grad: bool,
    recurrence: Recurrence = SOFTDTW,
) -> Plan:
    """The plan of a call from validated sequences x (B, N, D), y (B, M, D) (``padded``: it
    has per-pair lengths; ``grad``: gradients wrt x or y will be asked for)."""
    recurrence = _exact(opts.gamma, recurrence)
    key = (opts, recurrence, x.shape, y.shape, x.dtype, y.dtype, x.device, grad, padded)
    plan = _plans.get(key)
    if plan is not None:
        return plan
    backend = _backend(opts.backend, x.device, recurrence)
    own = recurrence.name in backend.caps.fused_recurrences  # (else: the cost path only)
    volatile = backend.reads_memory(opts, x, y, grad)
    checkpoint = False
    if opts.memory == "checkpoint":
        if not own:
            raise ValueError(
                f"memory='checkpoint' has no {recurrence.name} kernels on backend="
                f"{backend.name!r} (gamma={opts.gamma!r}); use memory='full' or 'auto'"
            )
        backend.check_checkpoint(opts)
        checkpoint = True
    elif (
        opts.memory == "auto"
        and own
        and not callable(opts.dist)
        and opts.dist in backend.caps.checkpoint
    ):
        checkpoint = backend.full_too_big(opts, x, y, grad)
    fused = checkpoint and opts.dist in backend.caps.fused
    if not checkpoint:
        can_fuse = own and not callable(opts.dist) and opts.dist in backend.caps.fused
        if opts.fused is True and not own:
            raise ValueError(
                f"fused=True runs soft-DTW's fused kernels; {recurrence.name} (gamma="
                f"{opts.gamma!r}) takes the cost path: pass fused=None or False"
            )
        if opts.fused is True and not can_fuse:
            raise ValueError(
                "fused=True needs dist='sqeuclidean' and the CUDA backend; "
                f"got dist={opts.dist!r}, backend={backend.name!r}"
            )
        if can_fuse:
            fused = backend.fused_default(x, y, grad) if opts.fused is None else opts.fused
    plan = Plan(
        opts, backend, recurrence, opts.gamma, opts.bandwidth, opts.normalize, opts.dist, fused,
        checkpoint,
    )  # fmt: skip
    return plan if volatile else _remember(key, plan)


def plan_cost(
    gamma: float,
    bandwidth: int | float | None,
    backend: str,
    cost: torch.Tensor,
    recurrence: Recurrence = SOFTDTW,
) -> Plan:
    """The plan of a call from a validated cost (B, N, M)."""
    recurrence = _exact(gamma, recurrence)
    key = ("cost", gamma, bandwidth, backend, recurrence, cost.device)
    plan = _plans.get(key)
    if plan is None:
        chosen = _backend(backend, cost.device, recurrence)
        opts = Options(gamma=gamma, bandwidth=bandwidth, backend=backend)
        plan = Plan(opts, chosen, recurrence, gamma, bandwidth, False, None, False, False)
        plan = _remember(key, plan)
    return plan
