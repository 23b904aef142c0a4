"""sdtw as PyTorch operators: ``torch.ops.sdtw.pair`` (from sequences) and
``torch.ops.sdtw.cost`` (from a cost tensor), registered with ``torch.library.custom_op``,
with fake (meta) implementations, autograd formulas and autocast rules, so that
``torch.compile`` (``fullgraph=True``), ``torch.export`` and FakeTensor tracing see one opaque
node per loss instead of Numba calls.

The operators sit below the front door: their implementations validate the lengths' values
(known only when the operator runs), plan and call the engine's value-and-gradient functions
(:func:`sdtw.engine.pair_value_and_grads`, :func:`sdtw.engine.cost_value_and_grad`), which run
no autograd.  The public functions (:func:`sdtw.softdtw`, :func:`sdtw.softdtw_from_cost`,
:class:`sdtw.SoftDTW`) call them through :func:`pair_loss` / :func:`cost_loss` while torch
compiles or exports, or for fake and meta tensors (:func:`traced`), and the engine directly
otherwise (the operators cost host time per call that a small eager step would notice).

Each operator returns the values and, where asked (``need_x``/``need_y``, ``need``), the
gradients of each pair's value wrt its inputs (a pair's value depends on its own inputs only,
so the gradient of ``sum(values)`` is the stack of the pairs' gradients); the registered
backward multiplies them by the upstream gradient of each pair.  Gradients not asked for come
back as empty tensors.  A second derivative raises, as on the eager path (:mod:`sdtw._autograd`).

Under ``torch.autocast`` both run in float32 (as PyTorch's own losses do): float16/bfloat16
inputs are cast to float32 first and the loss comes back in float32.
"""

from __future__ import annotations

import torch

from sdtw import _validation as V
from sdtw import engine
from sdtw._autograd import refuse_second_order
from sdtw.engine import Options, Pairs

__all__ = ["cost", "cost_loss", "pair", "pair_loss", "traced"]

#: ``fused`` as the schema takes it (an int): None, False, True.
_FUSED = {None: -1, False: 0, True: 1}
_FUSED_BACK = {v: k for k, v in _FUSED.items()}

try:  # (torch's fake tensors: what FakeTensorMode and the compilers trace with)
    from torch._subclasses.fake_tensor import FakeTensor as _Fake
except ImportError:  # pragma: no cover - depends on torch's version
    _Fake = ()


#: Whether a torch.func transform (grad, vmap, jacrev, ...) is running (private: torch has no
#: public test; without it such calls would fail inside torch with an unrelated message).
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)

TRANSFORMS = (
    "sdtw does not run under torch.func transforms (grad, vmap, jacrev, ...): its kernels "
    "compute the gradients themselves, and torch's custom-operator autograd does not run "
    "under them; take gradients with loss.backward() or torch.autograd.grad, and put the "
    "pairs along the batch dimension B instead of vmap"
)


def refuse_transforms() -> None:
    """Raise :data:`TRANSFORMS` where a torch.func transform runs (the public entry points)."""
    if _transforms_active():
        raise RuntimeError(TRANSFORMS)


def traced(*ts: object) -> bool:
    """Whether a call must go through the operators: torch compiles or exports, or an input is
    a fake or meta tensor (no values to compute: the operators' fake implementations give the
    shapes).  A torch.func transform is refused (:func:`refuse_transforms`).  (Cheap checks
    only: this runs on every eager call.)"""
    if torch.compiler.is_compiling():
        return True
    refuse_transforms()
    return any(isinstance(t, _Fake) or (isinstance(t, torch.Tensor) and t.is_meta) for t in ts)


def _pairs(x_lengths, y_lengths, B: int, N: int, M: int, device: torch.device) -> Pairs:
    return Pairs.of(V.check_lengths(x_lengths, y_lengths, B, N, M, device))


@torch.library.custom_op("sdtw::pair", mutates_args=())
def pair(
    x: torch.Tensor,
    y: torch.Tensor,
    x_lengths: torch.Tensor | None,
    y_lengths: torch.Tensor | None,
    gamma: float,
    bandwidth: float,
    normalize: bool,
    dist: str,
    fused: int,
    backend: str,
    memory: str,
    need_x: bool,
    need_y: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Soft-DTW of x (B, N, D), y (B, M, D) -> (values (B,), grad_x (B, N, D) or (0,),
    grad_y (B, M, D) or (0,)): the gradients of each pair's value (upstream gradient 1).
    ``bandwidth <= 0``: no band; ``fused``: -1 None, 0 False, 1 True."""
    opts = Options.make(
        gamma=gamma,
        bandwidth=bandwidth if bandwidth > 0 else None,
        normalize=normalize,
        dist=dist,
        fused=_FUSED_BACK[fused],
        backend=backend,
        memory=memory,
    )
    pairs = _pairs(x_lengths, y_lengths, x.shape[0], x.shape[1], y.shape[1], x.device)
    plan = engine.plan_pairs(opts, x, y, pairs.x_lengths is not None, need_x or need_y)
    values, gx, gy = engine.pair_value_and_grads(plan, x, y, pairs, need_x, need_y)
    gx = gx if need_x else x.new_empty(0)
    gy = gy if need_y else y.new_empty(0)
    return values, gx, gy


@pair.register_fake
def _pair_fake(x, y, x_lengths, y_lengths, gamma, bandwidth, normalize, dist, fused, backend,
               memory, need_x, need_y):  # fmt: skip
    values = x.new_empty(x.shape[0])
    gx = x.new_empty(x.shape) if need_x else x.new_empty(0)
    gy = y.new_empty(y.shape) if need_y else y.new_empty(0)
    return values, gx, gy


def _pair_setup(ctx, inputs, output) -> None:
    x, y = inputs[0], inputs[1]
    _, gx, gy = output
    ctx.save_for_backward(gx, gy, x, y)
    ctx.needs = (inputs[11], inputs[12])


def _scale(grad: torch.Tensor, g: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    out = (grad * g.to(grad.dtype).view(-1, 1, 1)).to(anchor.dtype)
    return refuse_second_order(out, anchor, "compiled")


def _pair_backward(ctx, g, _ggx, _ggy):
    gx, gy, x, y = ctx.saved_tensors
    need_x, need_y = ctx.needs
    dx = _scale(gx, g, x) if need_x else None
    dy = _scale(gy, g, y) if need_y else None
    return (dx, dy) + (None,) * 11


pair.register_autograd(_pair_backward, setup_context=_pair_setup)


@torch.library.custom_op("sdtw::cost", mutates_args=())
def cost(
    c: torch.Tensor,
    x_lengths: torch.Tensor | None,
    y_lengths: torch.Tensor | None,
    gamma: float,
    bandwidth: float,
    backend: str,
    need: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft-DTW of a cost (B, N, M) -> (values (B,), E (B, N, M) or (0,)): E the gradient of
    each pair's value wrt its cost (upstream gradient 1)."""
    B, N, M = c.shape
    pairs = _pairs(x_lengths, y_lengths, B, N, M, c.device)
    bw = V.check_bandwidth(bandwidth if bandwidth > 0 else None)
    plan = engine.plan_cost(V.check_gamma(gamma), bw, V.check_backend(backend), c)
    values, E = engine.cost_value_and_grad(plan, c, pairs, need)
    return values, (E if need else c.new_empty(0))


@cost.register_fake
def _cost_fake(c, x_lengths, y_lengths, gamma, bandwidth, backend, need):
    return c.new_empty(c.shape[0]), (c.new_empty(c.shape) if need else c.new_empty(0))


def _cost_setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(output[1], inputs[0])
    ctx.need = inputs[6]


def _cost_backward(ctx, g, _gE):
    E, c = ctx.saved_tensors
    return (_scale(E, g, c) if ctx.need else None,) + (None,) * 6


cost.register_autograd(_cost_backward, setup_context=_cost_setup)

for _device in ("cpu", "cuda"):
    torch.library.register_autocast("sdtw::pair", _device, torch.float32)
    torch.library.register_autocast("sdtw::cost", _device, torch.float32)


def _lengths(name: str, lengths: object, B: int) -> torch.Tensor | None:
    """Lengths as the operators take them: None, or an int64 tensor (B,), their type and shape
    checked here as the eager path checks them (their values inside the operator)."""
    return None if lengths is None else V.lengths_tensor(name, lengths, B)


def pair_loss(x, y, opts: Options, x_lengths=None, y_lengths=None) -> torch.Tensor:
    """Soft-DTW of x, y with validated options through :func:`pair` (what the public functions
    call while torch compiles or exports, or on fake and meta tensors)."""
    x, y, unbatched = V.check_sequences(x, y)
    if callable(opts.dist):
        raise ValueError(
            "torch.compile / torch.export of sdtw needs a named dist ('sqeuclidean', "
            "'euclidean', 'l1'): a callable cannot pass through the operator; build the cost "
            "yourself and call sdtw.softdtw_from_cost"
        )
    B = x.shape[0]
    grad = torch.is_grad_enabled()
    need_x, need_y = grad and x.requires_grad, grad and y.requires_grad
    bandwidth = 0.0 if opts.bandwidth is None else float(opts.bandwidth)
    values, _, _ = torch.ops.sdtw.pair(
        x,
        y,
        _lengths("x_lengths", x_lengths, B),
        _lengths("y_lengths", y_lengths, B),
        opts.gamma,
        bandwidth,
        opts.normalize,
        opts.dist,
        _FUSED[opts.fused],
        opts.backend,
        opts.memory,
        need_x,
        need_y,
    )
    return values[0] if unbatched else values


def cost_loss(c, gamma, bandwidth, backend, x_lengths=None, y_lengths=None) -> torch.Tensor:
    """:func:`sdtw.softdtw_from_cost` (validated arguments) through :func:`cost`."""
    c, unbatched = V.check_cost(c)
    need = torch.is_grad_enabled() and c.requires_grad
    bw = 0.0 if bandwidth is None else float(bandwidth)
    B = c.shape[0]
    values, _ = torch.ops.sdtw.cost(
        c,
        _lengths("x_lengths", x_lengths, B),
        _lengths("y_lengths", y_lengths, B),
        gamma,
        bw,
        backend,
        need,
    )
    return values[0] if unbatched else values
