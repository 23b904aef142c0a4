"""The float64 reference as a backend: the oracle's loops (:mod:`sdtw.reference`), one pair's
slice at a time in a padded batch.  Band: the radius itself; lengths: a loop over each pair's
``cost[b, :n_b, :m_b]``; padding: zeroed at the entry (the base rule)."""

from __future__ import annotations

import numpy as np
import torch

from sdtw.engine.backend import Backend, Capabilities
from sdtw.engine.pairs import Pairs
from sdtw.reference import softdtw_reference

__all__ = ["ReferenceBackend"]


def _parts(pairs: Pairs, N: int, M: int) -> list[tuple[slice, int, int]]:
    """``(rows, n, m)``: the whole batch at once at full length, else each pair's own slice."""
    if pairs.x_lengths is None:
        return [(slice(None), N, M)]
    ns, ms = pairs.x_lengths.tolist(), pairs.y_lengths.tolist()
    return [(slice(p, p + 1), n, m) for p, (n, m) in enumerate(zip(ns, ms, strict=True))]


class ReferenceBackend(Backend):
    name = "reference"
    caps = Capabilities(
        fused=(),
        checkpoint=(),
        float64=True,
        devices=("cpu", "cuda"),
        band="the radius",
        lengths="a loop over each pair's slice",
        recurrences=("softdtw", "dtw", "softmsm"),
    )

    def cost_values(self, plan, cost: torch.Tensor, pairs: Pairs) -> torch.Tensor:
        if plan.recurrence.name != "softdtw":  # (any other recurrence: its oracle's E)
            return _OracleFunction.apply(cost, self, plan, pairs)
        if pairs.x_lengths is None:
            return softdtw_reference(cost, plan.gamma, plan.bandwidth)
        ns, ms = pairs.x_lengths.tolist(), pairs.y_lengths.tolist()
        return torch.cat(
            [
                softdtw_reference(cost[b : b + 1, :n, :m], plan.gamma, plan.bandwidth)
                for b, (n, m) in enumerate(zip(ns, ms, strict=True))
            ]
        )

    def cost_value_and_grad(self, plan, cost: torch.Tensor, pairs: Pairs, need: bool):
        rec = plan.recurrence
        c = cost.detach().to("cpu", torch.float64).numpy()
        B, N, M = c.shape
        values = np.empty(B)
        E = np.zeros((B, N, M)) if need else None
        for rows, n, m in _parts(pairs, N, M):
            cb = c[rows, :n, :m]
            R = rec.oracle_forward(cb, plan.gamma, plan.bandwidth)
            values[rows] = R[:, n, m]
            if need:
                E[rows, :n, :m] = rec.oracle_backward(cb, R, plan.gamma, plan.bandwidth)
        out = torch.from_numpy(values).to(cost.device, cost.dtype)
        return out, (None if E is None else torch.from_numpy(E).to(cost.device, cost.dtype))

    def sequence_value_and_grads(self, plan, x, y, pairs: Pairs, need_x, need_y) -> tuple:
        """The recurrence's oracle, one pair's slice at a time in a padded batch."""
        rec, params = plan.recurrence, dict(plan.recurrence.params)
        a = x.detach().to("cpu", torch.float64).numpy()
        b = y.detach().to("cpu", torch.float64).numpy()
        B, N, M = a.shape[0], a.shape[1], b.shape[1]
        values, gx, gy = np.empty(B), np.zeros(a.shape), np.zeros(b.shape)
        for rows, n, m in _parts(pairs, N, M):
            xa, yb = a[rows, :n], b[rows, :m]
            values[rows], state = rec.oracle_forward(xa, yb, plan.gamma, plan.bandwidth, **params)
            if need_x or need_y:
                gx[rows, :n], gy[rows, :m] = rec.oracle_backward(
                    xa, yb, state, plan.gamma, plan.bandwidth, **params
                )
        as_x = lambda t: torch.from_numpy(t).to(x.device, x.dtype)  # noqa: E731
        as_y = lambda t: torch.from_numpy(t).to(y.device, y.dtype)  # noqa: E731
        return as_x(values), as_x(gx) if need_x else None, as_y(gy) if need_y else None

    def sequence_alignment(self, plan, x, y, pairs: Pairs) -> torch.Tensor:
        """The recurrence's alignment oracle, one pair's slice at a time in a padded batch."""
        rec, params = plan.recurrence, dict(plan.recurrence.params)
        a = x.detach().to("cpu", torch.float64).numpy()
        b = y.detach().to("cpu", torch.float64).numpy()
        B, N, M = a.shape[0], a.shape[1], b.shape[1]
        A = np.zeros((B, N, M))
        for rows, n, m in _parts(pairs, N, M):
            xa, yb = a[rows, :n], b[rows, :m]
            _, state = rec.oracle_forward(xa, yb, plan.gamma, plan.bandwidth, **params)
            A[rows, :n, :m] = rec.oracle_alignment(xa, yb, state, plan.gamma, plan.bandwidth,
                                                   **params)  # fmt: skip
        return torch.from_numpy(A).to(x.device, x.dtype)


class _OracleFunction(torch.autograd.Function):
    """A recurrence's oracle attached to autograd: values from ``cost_value_and_grad``, whose
    E (kept only when the cost needs a gradient) times the upstream gradient is the cost's."""

    @staticmethod
    def forward(ctx, cost: torch.Tensor, backend, plan, pairs: Pairs) -> torch.Tensor:
        values, E = backend.cost_value_and_grad(plan, cost, pairs, cost.requires_grad)
        ctx.E = E
        return values

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        return ctx.E * grad_out[:, None, None].to(ctx.E.dtype), None, None, None
