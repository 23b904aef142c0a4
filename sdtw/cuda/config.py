"""The CUDA backend's settings: what users may switch, read from the environment once, and the
development overrides of the tuning rules.

Settings (:data:`CONFIG`, read when this module is first imported; a change of the environment
afterwards is not seen):

=========================  =========  ===================================================
variable                   default    what it does
=========================  =========  ===================================================
``SDTW_CUDA_GRAPHS``       ``1``      ``0``: no library CUDA graphs (see
                                      :func:`sdtw.cuda.set_graphs`, which switches them
                                      at run time)
``SDTW_KERNEL_CACHE``      ``1``      ``0``: compile the kernels in every process instead
                                      of loading them from numba-cuda's on-disk cache
                                      (``NUMBA_CACHE_DIR`` moves it)
``SDTW_TC_GRADS``          ``1``      ``0``: float32 gradients wrt x and y by cuBLAS's
                                      float32 matmuls instead of the Triton kernel
``SDTW_FAST_LAUNCH``       ``1``      ``0``: Numba's own kernel launch instead of the
                                      driver call with a packed parameter buffer
``SDTW_LINEINFO``          ``0``      ``1``: kernels compiled with line information (source
                                      lines in compute-sanitizer's and Nsight Compute's
                                      reports; the on-disk cache is then off)
``NUMBA_ENABLE_CUDASIM``   ``0``      ``1``: Numba's CPU simulator runs the kernels (tests)
=========================  =========  ===================================================

Overrides (:func:`overrides`) force a tuning rule of :mod:`sdtw.cuda.policy` one way for the
code inside a ``with`` block (tests run the variants a GPU takes under the simulator with
them; probes compare variants).  They are a context variable: other threads and tasks keep
their own, and autograd's backward threads see none, so every variant a call takes is decided
in its forward (the lazy backward of :func:`sdtw.softdtw_from_cost` too).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

__all__ = ["CONFIG", "Config", "Overrides", "current_overrides", "overrides"]


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """``name`` in ``env`` as a switch: ``"0"`` is off, ``"1"`` on, unset the default;
    anything else is an error that names the variable."""
    value = env.get(name, "").strip()
    if value == "":
        return default
    if value not in ("0", "1"):
        raise ValueError(f"environment variable {name} must be 0 or 1, got {value!r}")
    return value == "1"


def _numba_flag(value: str) -> bool:
    """``NUMBA_ENABLE_CUDASIM`` as Numba reads it: an integer, on when not 0."""
    try:
        return int(value.strip() or 0) != 0
    except ValueError:
        return False


@dataclass(frozen=True)
class Config:
    """The backend's switches (see the module docstring for the variables)."""

    graphs: bool = True
    kernel_cache: bool = True
    tc_grads: bool = True
    fast_launch: bool = True
    lineinfo: bool = False
    simulator: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        """The settings from ``env`` (default: ``os.environ``)."""
        env = os.environ if env is None else env
        simulator = _numba_flag(env.get("NUMBA_ENABLE_CUDASIM", ""))
        return cls(
            graphs=_flag(env, "SDTW_CUDA_GRAPHS", True),
            kernel_cache=_flag(env, "SDTW_KERNEL_CACHE", True),
            tc_grads=_flag(env, "SDTW_TC_GRADS", True),
            fast_launch=_flag(env, "SDTW_FAST_LAUNCH", True),
            lineinfo=_flag(env, "SDTW_LINEINFO", False) and not simulator,
            simulator=simulator,
        )


#: The settings of this process.
CONFIG = Config.from_env()


@dataclass(frozen=True)
class Overrides:
    """Forced outcomes of the tuning rules (None: the rule decides).

    Attributes
    ----------
    mover : the forward's mover warp (:func:`sdtw.cuda.policy.forward_mover`; never for mode
        ``fused``, always for mode ``tiled``).
    backward_mover : the backward's mover warp (:func:`sdtw.cuda.policy.backward_mover`).
    tiled : the fused float32 forward's distance warp (:func:`sdtw.cuda.policy.tiled`; True
        with gradients too).
    sweep_grads : float32 gradients from the backward's sweep for ``D <= 16``
        (:func:`sdtw.cuda.policy.sweep_grads`; needs the backward's mover).
    tc_grads : the Triton gradient kernel where its rule allows it (False: cuBLAS).
    tc_settings : the Triton kernel's launch settings (a dict as
        :data:`sdtw.cuda.policy.TC_SMALL`; None: :func:`sdtw.cuda.policy.tc_settings`).
    tc_one_launch : both Triton gradients in one launch (True) or two (False); None:
        :func:`sdtw.cuda.policy.tc_one_launch`.
    msm_bands : Soft-MSM's bands per task (``sdtw.cuda.msm._bands``; 1: one block a task).
    msm_ahead : how many steps before its cells Soft-MSM's wavefront kernels compute a
        column's costs and weights, at most the rule's (``sdtw.cuda.msm._depth``: what the
        registers hold); 0: in the step.
    msm_kept : whether Soft-MSM's float32 forward keeps its edge weights for the backward
        (``sdtw.cuda.msm.msm_cuda``'s ``kept``; False: ``R`` kept, the weights recomputed).
    msm_seam : whether Soft-MSM's float32 step with gradients runs on soft-DTW's band kernels
        (:mod:`sdtw.cuda.msm_seam`; where its pairs have the table's lengths); False: the
        Soft-MSM kernels of :mod:`sdtw.cuda.msm`.
    """

    mover: bool | None = None
    backward_mover: bool | None = None
    tiled: bool | None = None
    sweep_grads: bool | None = None
    tc_grads: bool | None = None
    tc_settings: tuple | None = None
    tc_one_launch: bool | None = None
    msm_bands: int | None = None
    msm_ahead: int | None = None
    msm_kept: bool | None = None
    msm_seam: bool | None = None

    @property
    def forced(self) -> bool:
        """Whether any rule is forced (the library graphs' key holds the overrides then)."""
        return self is not _NONE


_NONE = Overrides()
_current: contextvars.ContextVar[Overrides] = contextvars.ContextVar(
    "sdtw_overrides", default=_NONE
)


def current_overrides() -> Overrides:
    """The overrides in force here (all None outside :func:`overrides`)."""
    return _current.get()


@contextlib.contextmanager
def overrides(**forced) -> Iterator[Overrides]:
    """Force tuning rules inside a ``with`` block (development: tests and probes).

    Keywords are the fields of :class:`Overrides`; a block inside another one keeps the outer
    block's forcings it does not name.  ``tc_settings`` takes a dict.  Example::

        with sdtw.cuda.config.overrides(mover=True, backward_mover=True):
            loss = sdtw.softdtw(x, y, backend="cuda")   # the mover variants
    """
    unknown = set(forced) - {f.name for f in dataclasses.fields(Overrides)}
    if unknown:
        raise TypeError(f"overrides() got unknown rule(s) {sorted(unknown)}")
    settings = forced.get("tc_settings")
    if isinstance(settings, dict):
        forced["tc_settings"] = tuple(sorted(settings.items()))
    new = dataclasses.replace(_current.get(), **forced)
    new = _NONE if new == _NONE else new  # (the default object itself: nothing forced)
    token = _current.set(new)
    try:
        yield new
    finally:
        _current.reset(token)
