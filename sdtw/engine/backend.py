"""What every backend is: a fixed set of methods, a capabilities table, one registry.

A backend owns how its kernels take the call: the band's form, the lengths' form, who zeroes
a padded batch's padding, its memory modes.  The front door never asks which backend it has;
the planner (:mod:`sdtw.engine.plan`) reads :class:`Capabilities` and calls the two rules a
backend answers (:meth:`Backend.fused_default`, :meth:`Backend.full_too_big`), and the engine
calls the value methods.  Every value method takes validated, batched inputs and a
:class:`~sdtw.engine.plan.Plan`.

=========================  =============================================================
method                     returns
=========================  =============================================================
``pair_values``            values (P,) of x (P, N, D), y (P, M, D), attached to autograd
``cost_values``            values (P,) of a cost (P, N, M), attached to autograd
``pair_value_and_grads``   values and the gradients of each pair's value wrt x, y (no
                           autograd: what the PyTorch operator returns)
``cost_value_and_grad``    values and E, each pair's gradient wrt its cost (no autograd)
=========================  =============================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from sdtw import distances
from sdtw._autograd import guard
from sdtw._validation import zero_padding
from sdtw.engine.pairs import Pairs

if TYPE_CHECKING:
    from sdtw.engine.plan import Plan

__all__ = ["Backend", "Capabilities"]


@dataclass(frozen=True)
class Capabilities:
    """What a backend offers, as the docs print it (:func:`sdtw.engine.capabilities_table`).

    ``fused``: the named costs its kernels compute themselves from x and y (no (B, N, M)
    cost tensor); ``checkpoint``: the named costs of its checkpointed mode (``memory=
    "checkpoint"``); ``float64``: it computes in float64 whatever the inputs' dtype;
    ``devices``: the tensors' device types it takes (the CPU kernels copy CUDA tensors);
    ``band`` and ``lengths``: the forms its kernels take them in; ``recurrences``: the
    measures it has kernels for; ``fused_recurrences``: those its fused and checkpointed
    kernels run (the others take the cost path, in the full memory mode)."""

    fused: tuple[str, ...]
    checkpoint: tuple[str, ...]
    float64: bool
    devices: tuple[str, ...]
    band: str
    lengths: str
    recurrences: tuple[str, ...]
    fused_recurrences: tuple[str, ...] = ("softdtw",)


class Backend:
    """The method set of a backend (see the module docstring).  Subclasses set ``name`` and
    ``caps`` and implement the ``cost_*`` methods; the ``pair_*`` methods here build the cost
    tensor with :func:`sdtw.distances.pairwise` (float64 where the backend computes in
    float64 and the cost is named) and run the cost path on it."""

    name: str
    caps: Capabilities
    #: The fewest cells a call of :meth:`table_values` should get (0: no floor): a call whose
    #: fixed host cost (a GPU launch and its arguments) would show beside its kernel's work.
    table_cells: int = 0

    # -- rules the planner asks --------------------------------------------------------------
    def usable(self, device: torch.device) -> tuple[bool, str]:
        """Whether the kernels can run tensors on ``device`` here, and if not, why."""
        return True, ""

    def check_device(self, device: torch.device) -> None:
        """Raise where a backend named by the caller cannot take tensors on ``device``."""

    def fused_default(self, x: torch.Tensor, y: torch.Tensor, grad: bool) -> bool:
        """``fused=None``'s choice for a fusable cost (only asked where ``caps.fused``)."""
        raise NotImplementedError(f"backend {self.name!r} has no fused kernels")

    def full_too_big(self, opts, x: torch.Tensor, y: torch.Tensor, grad: bool) -> bool:
        """``memory="auto"``: whether the full mode's buffers would take more than
        :data:`sdtw.memory.AUTO_FRACTION` of the memory available now (only asked where
        ``caps.checkpoint`` has the cost)."""
        return False

    def reads_memory(self, opts, x: torch.Tensor, y: torch.Tensor, grad: bool) -> bool:
        """Whether this call's rules read the memory available now (such a plan is not
        cached: the answer may change between calls)."""
        return False

    def check_checkpoint(self, opts) -> None:
        """Raise where ``memory="checkpoint"`` cannot run with these settings."""
        if callable(opts.dist) or opts.dist not in self.caps.checkpoint:
            raise ValueError(
                "memory='checkpoint' recomputes the cost from x and y: it needs a named dist "
                f"and the cpu or cuda backend; got dist={opts.dist!r}, backend={self.name!r}"
            )

    # -- the padding rule --------------------------------------------------------------------
    def prepare(self, x: torch.Tensor, y: torch.Tensor, plan: Plan, pairs: Pairs) -> tuple:
        """x and y as this backend's kernels take them: the padding past each pair's lengths
        set to 0 (what it holds never reaches a value or a gradient), and on backends whose
        backward is not twice differentiable, anchors that refuse a second derivative."""
        x, y = guard(x, self.name), guard(y, self.name)
        if pairs.x_lengths is not None:
            x, y = zero_padding(x, pairs.x_lengths), zero_padding(y, pairs.y_lengths)
        return x, y

    def prepare_cost(self, cost: torch.Tensor) -> torch.Tensor:
        """A cost as the cost path takes it: anchored to refuse a second derivative (no cost
        path has a second-order pass)."""
        return guard(cost, self.name)

    # -- values ------------------------------------------------------------------------------
    def table_values(self, plan: Plan, X, Y, i, j, x_lengths, y_lengths):
        """Forward-only values (P,) of the pairs ``(X[i[p]], Y[j[p]])`` of an all-pairs table
        (:func:`sdtw.cdist`), read from X (B1, N, D) and Y (B2, M, D) in place; None where
        this backend has no such kernel for the plan (the caller gathers the rows and calls
        :meth:`pair_values`)."""
        return None

    def cost_values(self, plan: Plan, cost: torch.Tensor, pairs: Pairs) -> torch.Tensor:
        raise NotImplementedError

    def cost_value_and_grad(
        self, plan: Plan, cost: torch.Tensor, pairs: Pairs, need: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def _pair_cost(self, plan: Plan, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.caps.float64 and not callable(plan.dist):
            # The float64 paths build the cost in float64 too: float32 inputs lose nothing to
            # float32 rounding of the distances.
            return distances.cost(x.double(), y.double(), plan.dist)
        return distances.cost(x, y, plan.dist)  # (a callable's: any float dtype)

    def pair_values(self, plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs):
        if plan.recurrence.kind == "sequences":
            if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
                return _SequenceValues.apply(x, y, self, plan, pairs)
            return self.sequence_step(plan, x, y, pairs, False, False)[0]
        out = self.cost_values(plan, self._pair_cost(plan, x, y), pairs)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def pair_value_and_grads(
        self, plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs, need_x, need_y
    ) -> tuple:
        """Values and the gradients of each pair's value wrt x and y (None where not asked),
        in x's and y's dtypes, by the cost path: E from :meth:`cost_value_and_grad`, then the
        cost's vector-Jacobian product (:func:`sdtw.distances.pairwise_vjp`)."""
        if plan.recurrence.kind == "sequences":
            with torch.no_grad():
                return self.sequence_value_and_grads(plan, x, y, pairs, need_x, need_y)
        with torch.no_grad():
            a, b = (x.double(), y.double()) if self.caps.float64 else (x, y)
            cost = distances.cost(a, b, plan.dist)
            values, E = self.cost_value_and_grad(plan, cost, pairs, need_x or need_y)
            gx, gy = distances.pairwise_vjp(a, b, plan.dist, cost, E, need_x, need_y)
        gx = None if gx is None else gx.to(x.dtype)
        gy = None if gy is None else gy.to(y.dtype)
        return values.to(x.dtype), gx, gy

    def sequence_value_and_grads(
        self, plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs, need_x, need_y
    ) -> tuple:
        """Values (P,) and gradients wrt x and y (None where not asked), in x's and y's dtypes,
        of a recurrence over the sequences (``plan.recurrence.kind == "sequences"``: its
        costs read x and y, no cost tensor); a backend runs the ones in its
        ``caps.recurrences``."""
        raise NotImplementedError(f"backend {self.name!r} has no kernels for sequence recurrences")

    def sequence_step(
        self, plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs, need_x, need_y
    ) -> tuple:
        """:meth:`sequence_value_and_grads` as the eager front door calls it (the values of
        :meth:`pair_values`, with the gradients autograd will scale): tensors of the caller's
        own, which a backend may get from work it captured once and replays (the CUDA
        backend's graphs); the operators' path calls :meth:`sequence_value_and_grads`."""
        return self.sequence_value_and_grads(plan, x, y, pairs, need_x, need_y)

    def sequence_alignment(
        self, plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs
    ) -> torch.Tensor:
        """The expected alignment (P, N, M) of a sequence recurrence in x's dtype: each match
        edge's occupancy, the channels' mean (``Recurrence.oracle_alignment``'s)."""
        raise NotImplementedError(f"backend {self.name!r} has no kernels for sequence recurrences")


class _SequenceValues(torch.autograd.Function):
    """A sequence recurrence's values attached to autograd: the gradients are computed with
    the values where asked (the backward pass of the kernels runs in the forward), saved, and
    scaled by the upstream gradient."""

    @staticmethod
    def forward(ctx, x, y, backend: Backend, plan: Plan, pairs: Pairs):
        need_x, need_y = ctx.needs_input_grad[:2]
        values, gx, gy = backend.sequence_step(plan, x.detach(), y.detach(), pairs, need_x, need_y)
        ctx.save_for_backward(gx, gy)
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        gx, gy = ctx.saved_tensors
        g = grad_out[:, None, None]
        return (
            None if gx is None else gx * g.to(gx.dtype),
            None if gy is None else gy * g.to(gy.dtype),
            None,
            None,
            None,
        )
