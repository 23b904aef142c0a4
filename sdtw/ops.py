"""sdtw as PyTorch operators: ``torch.ops.sdtw.pair`` (from sequences) and
``torch.ops.sdtw.cost`` (from a cost tensor), registered with ``torch.library.custom_op``,
with fake (meta) implementations, autograd formulas and autocast rules, so that
``torch.compile`` (``fullgraph=True``), ``torch.export`` and FakeTensor tracing see one opaque
node per loss instead of Numba calls.

The public functions (:func:`sdtw.softdtw`, :func:`sdtw.softdtw_from_cost`,
:class:`sdtw.SoftDTW`) call these operators while torch compiles or exports
(``torch.compiler.is_compiling()``), and the eager Python path otherwise (the operators cost
host time per call that a small eager step would notice).  Both run the same kernels.

Each operator returns the values and, where asked (``need_x``/``need_y``, ``need``), the
gradients of each pair's value wrt its inputs, computed in the forward as the eager CUDA path
does (a pair's value depends on its own inputs only, so the gradient of ``sum(values)`` is the
stack of the pairs' gradients); the registered backward multiplies them by the upstream
gradient of each pair.  Gradients not asked for come back as empty tensors.  A second
derivative raises, as on the eager path (:mod:`sdtw._autograd`).

Under ``torch.autocast`` both run in float32 (as PyTorch's own losses do): float16/bfloat16
inputs are cast to float32 first and the loss comes back in float32.
"""

from __future__ import annotations

import contextlib

import torch

from sdtw._autograd import refuse_second_order

__all__ = ["cost", "pair"]

#: ``fused`` as the schema takes it (an int): None, False, True.
_FUSED = {None: -1, False: 0, True: 1}
_FUSED_BACK = {v: k for k, v in _FUSED.items()}


def encode_fused(fused: bool | None) -> int:
    return _FUSED[fused]


@contextlib.contextmanager
def _inside(t: torch.Tensor):
    """Autograd on inside an operator's implementation (the dispatcher excludes it there) and,
    on CUDA, the library's graphs off (:class:`sdtw.cuda._graphs.suspended`: in a compiled
    program the graphs are PyTorch's)."""
    from sdtw.cuda._private import autograd_inside

    with autograd_inside():
        if t.is_cuda:
            from sdtw.cuda._graphs import suspended

            with suspended():
                yield
        else:
            yield


def _own(t: torch.Tensor) -> torch.Tensor:
    """A gradient from ``torch.autograd.grad`` inside an operator, as this thread's allocation:
    on CUDA the autograd engine runs the backward on its device thread, and PyTorch's cudagraph
    trees route only the calling thread's allocations into their pool (``mode="reduce-overhead"``
    rejects outputs from outside it)."""
    return t.detach().clone() if t.is_cuda else t.detach()


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
    from sdtw.functional import Options, softdtw_options

    opts = Options.make(
        gamma=gamma,
        bandwidth=bandwidth if bandwidth > 0 else None,
        normalize=normalize,
        dist=dist,
        fused=_FUSED_BACK[fused],
        backend=backend,
        memory=memory,
    )
    xr, yr = x.detach().requires_grad_(need_x), y.detach().requires_grad_(need_y)
    with _inside(x):
        values = softdtw_options(xr, yr, opts, x_lengths, y_lengths)
        wanted = [t for t, need in ((xr, need_x), (yr, need_y)) if need]
        grads = list(torch.autograd.grad(values.sum(), wanted)) if wanted else []
    gx = _own(grads.pop(0)) if need_x else x.new_empty(0)
    gy = _own(grads.pop(0)) if need_y else y.new_empty(0)
    return values.detach(), gx, gy


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
    from sdtw.functional import softdtw_from_cost

    cr = c.detach().requires_grad_(need)
    with _inside(c):
        values = softdtw_from_cost(
            cr,
            gamma=gamma,
            bandwidth=bandwidth if bandwidth > 0 else None,
            backend=backend,
            x_lengths=x_lengths,
            y_lengths=y_lengths,
        )
        E = _own(torch.autograd.grad(values.sum(), cr)[0]) if need else c.new_empty(0)
    return values.detach(), E


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


def _lengths(lengths: object, device: torch.device) -> torch.Tensor | None:
    """Lengths as the operators take them: None, or an integer tensor (validated inside)."""
    if lengths is None or isinstance(lengths, torch.Tensor):
        return lengths
    return torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)


def pair_loss(x, y, opts, x_lengths=None, y_lengths=None) -> torch.Tensor:
    """:func:`sdtw.functional.softdtw_options` through :func:`pair` (what the public
    functions call while torch compiles or exports)."""
    from sdtw import _validation as V

    x, y, unbatched = V.check_sequences(x, y)
    if callable(opts.dist):
        raise ValueError(
            "torch.compile / torch.export of sdtw needs a named dist ('sqeuclidean', "
            "'euclidean', 'l1'): a callable cannot pass through the operator; build the cost "
            "yourself and call sdtw.softdtw_from_cost"
        )
    grad = torch.is_grad_enabled()
    need_x, need_y = grad and x.requires_grad, grad and y.requires_grad
    bandwidth = 0.0 if opts.bandwidth is None else float(opts.bandwidth)
    values, _, _ = torch.ops.sdtw.pair(
        x,
        y,
        _lengths(x_lengths, x.device),
        _lengths(y_lengths, x.device),
        opts.gamma,
        bandwidth,
        opts.normalize,
        opts.dist,
        encode_fused(opts.fused),
        opts.backend,
        opts.memory,
        need_x,
        need_y,
    )
    return values[0] if unbatched else values


def cost_loss(c, gamma, bandwidth, backend, x_lengths=None, y_lengths=None) -> torch.Tensor:
    """:func:`sdtw.softdtw_from_cost` (validated arguments) through :func:`cost`."""
    from sdtw import _validation as V

    c, unbatched = V.check_cost(c)
    need = torch.is_grad_enabled() and c.requires_grad
    bw = 0.0 if bandwidth is None else float(bandwidth)
    values, _ = torch.ops.sdtw.cost(
        c, _lengths(x_lengths, c.device), _lengths(y_lengths, c.device), gamma, bw, backend, need
    )
    return values[0] if unbatched else values
