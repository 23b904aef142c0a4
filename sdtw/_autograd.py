"""What every backend's autograd does beyond its own pass: refusing second derivatives.

Soft-DTW's gradient is computed by each backend's own backward (E by a recursion over the
forward's weights); none of them has a second-order pass.  Without care a double backward would
*run* and return a wrong Hessian-vector product: the gradient's dependence on the cost through E
would be missed (the squared-Euclidean cost's own backward is differentiable), or hand back a
gradient without a ``grad_fn`` that fails later with an unrelated message.  So wherever a
backward runs with ``create_graph=True``, the gradient it returns is tied to the input by
:class:`_Refuse`, whose backward raises :data:`MESSAGE`: a double backward, a
``torch.autograd.grad(..., create_graph=True)`` followed by differentiating the result, or
``gradgradcheck``, all raise the same clear error on every backend.
"""

from __future__ import annotations

import torch

__all__ = ["MESSAGE", "guard", "refuse_second_order"]

MESSAGE = (
    "sdtw: second derivatives of soft-DTW (a double backward through its gradient) are not "
    "implemented on backend {backend!r}; the gradient itself is right, compute it without "
    "differentiating it again"
)


class _Refuse(torch.autograd.Function):
    """The identity on a gradient, anchored to the input it is the gradient of; its backward
    raises :data:`MESSAGE`."""

    @staticmethod
    def forward(grad: torch.Tensor, anchor: torch.Tensor, backend: str) -> torch.Tensor:
        return grad.view_as(grad)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # (the form torch.func transforms take)
        ctx.backend = inputs[2]

    @staticmethod
    def backward(ctx, _g: torch.Tensor):
        raise RuntimeError(MESSAGE.format(backend=ctx.backend))


def refuse_second_order(grad, anchor: torch.Tensor, backend: str):
    """``grad`` (the gradient wrt ``anchor``), made un-differentiable where a backward builds a
    graph (``create_graph=True``); as it is otherwise."""
    if grad is None or not torch.is_grad_enabled() or not anchor.requires_grad:
        return grad
    return _Refuse.apply(grad, anchor, backend)


class _Guard(torch.autograd.Function):
    """The identity on an input of the loss; in a backward with ``create_graph=True`` the
    input's gradient refuses to be differentiated again (:func:`refuse_second_order`)."""

    @staticmethod
    def forward(t: torch.Tensor, backend: str) -> torch.Tensor:
        return t.view_as(t)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.backend = inputs[1]
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (t,) = ctx.saved_tensors
        return refuse_second_order(g, t, ctx.backend), None


def guard(t: torch.Tensor, backend: str) -> torch.Tensor:
    """``t`` as the loss should take it: through :class:`_Guard` where a gradient wrt it may be
    asked for (one more autograd node; the CUDA path from x and y refuses inside its own
    function instead, to save the host time)."""
    if not (t.requires_grad and torch.is_grad_enabled()):
        return t
    return _Guard.apply(t, backend)
