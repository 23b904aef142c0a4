"""The engine under the front door: plan once, then call a backend.

Layers, top to bottom (each imports only the ones below it):

1. the front door (:mod:`sdtw.functional`, :class:`sdtw.SoftDTW`, :func:`sdtw.alignment`):
   validation, then :func:`~sdtw.engine.plan.plan_pairs` / :func:`~sdtw.engine.plan.plan_cost`,
   then one of the functions below; while torch compiles or traces, the PyTorch operators
   (:mod:`sdtw.ops`) instead, which call the same functions;
2. this module: the reductions over leaf calls (the divergence's three terms), and the
   per-pair table (:mod:`sdtw.engine.pairs`);
3. the backends (:mod:`sdtw.engine.registry`: reference, cpu, cuda), objects with one method
   set (:mod:`sdtw.engine.backend`), each owning its band, lengths and padding forms, its
   memory modes and its autograd nodes;
4. the kernels and their launchers (:mod:`sdtw.reference`, :mod:`sdtw.cpu`,
   :mod:`sdtw.cpu_fused`, :mod:`sdtw.cuda`), by recurrence (:mod:`sdtw.engine.recurrence`).
"""

from __future__ import annotations

import dataclasses

import torch

from sdtw.engine.pairs import FULL, Pairs
from sdtw.engine.plan import Options, Plan, plan_cost, plan_pairs
from sdtw.engine.recurrence import RECURRENCES, SOFTDTW, Recurrence
from sdtw.engine.registry import BACKENDS, capabilities_table, resolve

__all__ = [
    "BACKENDS",
    "FULL",
    "RECURRENCES",
    "SOFTDTW",
    "Options",
    "Pairs",
    "Plan",
    "Recurrence",
    "alignment_matrix",
    "capabilities_table",
    "cost_value_and_grad",
    "cost_values",
    "pair_value_and_grads",
    "pair_values",
    "plan_cost",
    "plan_pairs",
    "resolve",
]


def _grad(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def _leaf(plan: Plan, a: torch.Tensor, b: torch.Tensor, pairs: Pairs, grad: bool) -> Plan:
    """The plan of one term of the divergence: its own shapes and gradients decide its
    ``"auto"`` rules, as a call of its own would."""
    opts = dataclasses.replace(plan.options, normalize=False)
    return plan_pairs(opts, a, b, pairs.x_lengths is not None, grad, plan.recurrence)


def pair_values(plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """Values (B,) of validated x (B, N, D), y (B, M, D), attached to autograd; with
    ``plan.normalize`` the divergence ``s(x, y) - (s(x, x) + s(y, y)) / 2``, its three terms
    in one call of 3 B pairs where N = M."""
    backend = plan.backend
    x, y = backend.prepare(x, y, plan, pairs)
    if not plan.normalize:
        return backend.pair_values(plan, x, y, pairs)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    if N == M:
        a, b = torch.cat([x, x, y]), torch.cat([y, x, y])
        table = pairs.stacked(pairs.self_x(), pairs.self_y())
        both = backend.pair_values(_leaf(plan, a, b, table, _grad(a, b)), a, b, table)
        return both[:B] - 0.5 * (both[B : 2 * B] + both[2 * B :])
    xx, yy = pairs.self_x(), pairs.self_y()
    selfs = backend.pair_values(_leaf(plan, x, x, xx, _grad(x, x)), x, x, xx)
    selfs = selfs + backend.pair_values(_leaf(plan, y, y, yy, _grad(y, y)), y, y, yy)
    return backend.pair_values(_leaf(plan, x, y, pairs, _grad(x, y)), x, y, pairs) - 0.5 * selfs


def _sub(a: torch.Tensor | None, b: torch.Tensor | None, c: torch.Tensor | None):
    """``a - (b + c) / 2`` of gradients (None where not asked)."""
    return None if a is None else a - 0.5 * (b + c)


def pair_value_and_grads(
    plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs, need_x: bool, need_y: bool
) -> tuple:
    """Values (B,) and the gradients of each pair's value wrt x and y (None where not asked),
    without autograd: what the operator :func:`torch.ops.sdtw.pair` returns.  The divergence's
    gradients are its terms' combined: ``d/dx = g_x(x, y) - (g_1(x, x) + g_2(x, x)) / 2``."""
    backend = plan.backend
    with torch.no_grad():
        x, y = backend.prepare(x, y, plan, pairs)

    def leaf(a, b, table, na, nb):
        sub = _leaf(plan, a, b, table, na or nb)
        return backend.pair_value_and_grads(sub, a, b, table, na, nb)

    if not plan.normalize:
        return backend.pair_value_and_grads(plan, x, y, pairs, need_x, need_y)
    B, N, M = x.shape[0], x.shape[1], y.shape[1]
    need = need_x or need_y
    if N == M:
        table = pairs.stacked(pairs.self_x(), pairs.self_y())
        v, ga, gb = leaf(torch.cat([x, x, y]), torch.cat([y, x, y]), table, need, need)
        out = v[:B] - 0.5 * (v[B : 2 * B] + v[2 * B :])
        if not need:
            return out, None, None
        gx = ga[:B] - 0.5 * (ga[B : 2 * B] + gb[B : 2 * B]) if need_x else None
        gy = gb[:B] - 0.5 * (ga[2 * B :] + gb[2 * B :]) if need_y else None
        return out, gx, gy
    vxy, gx, gy = leaf(x, y, pairs, need_x, need_y)
    vxx, gx1, gx2 = leaf(x, x, pairs.self_x(), need_x, need_x)
    vyy, gy1, gy2 = leaf(y, y, pairs.self_y(), need_y, need_y)
    return vxy - 0.5 * (vxx + vyy), _sub(gx, gx1, gx2), _sub(gy, gy1, gy2)


def cost_values(plan: Plan, cost: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """Values (B,) of a validated cost (B, N, M), attached to autograd."""
    return plan.backend.cost_values(plan, cost, pairs)


def cost_value_and_grad(plan: Plan, cost: torch.Tensor, pairs: Pairs, need: bool) -> tuple:
    """Values (B,) and, with ``need``, E (B, N, M): each pair's gradient wrt its cost, without
    autograd."""
    return plan.backend.cost_value_and_grad(plan, cost, pairs, need)


def alignment_matrix(plan: Plan, x: torch.Tensor, y: torch.Tensor, pairs: Pairs) -> torch.Tensor:
    """E (B, N, M) of validated, detached x (B, N, D), y (B, M, D) in x's dtype: the cost (in
    float64 on the float64 backends, as their values), then its gradient; a recurrence over
    the sequences: the backend's ``sequence_alignment`` (its match edges' occupancies)."""
    from sdtw.distances import cost as pairwise

    if plan.recurrence.kind == "sequences":
        return plan.backend.sequence_alignment(plan, x, y, pairs)

    if pairs.x_lengths is not None:
        from sdtw._validation import zero_padding

        x, y = zero_padding(x, pairs.x_lengths), zero_padding(y, pairs.y_lengths)
    use64 = plan.backend.caps.float64 and not callable(plan.dist)
    a, b = (x.double(), y.double()) if use64 else (x, y)
    cost = pairwise(a, b.to(a.dtype), plan.dist)
    _, E = plan.backend.cost_value_and_grad(plan, cost, pairs, True)
    return E.to(x.dtype)
