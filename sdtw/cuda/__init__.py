"""CUDA backend (Numba CUDA kernels), imported lazily by :mod:`sdtw.functional`.

``softdtw_cost`` (unfused, any cost) and ``softdtw_sqeuclidean`` (squared Euclidean from x,
y: fused, no (B, N, M) cost tensor; or unfused, the cost tensor and then the DP) queue their
kernels first and then attach the results to autograd through an ``autograd.Function``
(whose ``apply`` costs host time that would otherwise delay the first kernel).  With
``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CPU simulator on CPU tensors.

A step can be captured in a CUDA graph (``torch.cuda.graph``, after warm-up calls have
compiled the kernels): it puts only kernels and torch ops on torch's current stream, reads
nothing back to the host and never synchronises; a small constant first asked for during a
capture is not cached (:func:`sdtw.cuda._launch._constant`).  The README shows a whole
training step captured and replayed, and its measured times.  The backend uses that itself:
a small call from x and y repeated with the same shapes replays a graph of its own GPU work
(:mod:`sdtw.cuda._graphs`; :func:`set_graphs`, :func:`clear_graphs`, ``SDTW_CUDA_GRAPHS=0``).

Each kernel compiles the first time a process uses it (several seconds; a training step uses
three) and is then kept on disk by numba-cuda's kernel cache, keyed by the kernel's variant and
a digest of the kernel package, so later processes load it in milliseconds
(:mod:`sdtw.cuda.kernels.registry`; ``SDTW_KERNEL_CACHE=0`` turns it off, ``NUMBA_CACHE_DIR``
moves it; off under the simulator).  The switches are read once (:mod:`sdtw.cuda.config`);
which kernel variant a call takes is :mod:`sdtw.cuda.policy`.

From x and y, a forward with gradients enabled also runs the backward (upstream gradient 1)
and keeps only the gradients wrt x and y, O((N + M) D) per pair; autograd's backward then
multiplies them by each pair's upstream gradient (see :func:`_eager_grads`).  From a cost
tensor the backward stays lazy (its gradient is (B, N, M)).

Memory model of one training step, per pair, with ``s`` = 4 bytes (float32 inputs) or 8
(float64):

============================  =========================  ====================================
buffer                        size                       lifetime
============================  =========================  ====================================
weights ``P``                 ``2 s N M``                the forward (from x, y); forward
                                                         -> end of backward (from a cost)
fused distances               0 (in ``P``)               forward: each cell's float64
                                                         distance, from the park kernel,
                                                         sits in ``P`` (float64: plane 0;
                                                         float32: the high and low 32-bit
                                                         words of its bits in planes 1 and
                                                         0) until the
                                                         DP overwrites it with that cell's
                                                         weights
``E`` (gradient wrt cost)     0 (written into ``P``;     backward
                              from x, y in float32
                              with ``D <= 16`` not
                              written at all)
boundary rows ``Rb``/``Gb``   ``8 ceil(N/32) (M + 1)``   one pass each (about ``N M / 4``
                              each                       bytes; the ticket counter is its last
                                                         element); from x, y both come from
                                                         one fill and live through the
                                                         forward call
E's row/column sums (x, y)    ``s (N + M)``              backward
grads wrt x, y                ``s (N + M) D``            forward -> end of backward (from
                                                         x, y: all that a pair holds then)
cost (unfused only)           ``s N M`` (caller's)       caller
============================  =========================  ====================================

So a fused float32 step peaks near ``8 N M`` bytes per pair (+6%), an unfused one near
``12 N M``, both inside the forward call (from x, y); between forward and backward a pair
holds its gradients only.  A forward without gradient stores no (N, M) buffer at all (fused,
it computes the distances inside the DP kernel, their dot products on the float64 tensor
cores: float32 inputs in a third warp per band, a chunk ahead of the steps, mode ``tiled``;
float64 in the band's own warp).  Launches per training step, whatever N
and M: fused, three Numba kernels (park, DP forward, DP backward), all in the forward call;
unfused from x and y, three likewise (:func:`sqeuclidean_cost`'s park kernel writing the
cost, then the DP forward and backward); from a cost tensor, one in the forward and one in
the backward.  The DP kernels run one warp per band of 32 rows; the fused float32 forward with
gradients and the backward a second warp per band as well, that stages the
distances or weights and writes the weights or E out (:func:`sdtw.cuda.policy.forward_mover`,
:func:`sdtw.cuda.policy.backward_mover`; the same results, bit for bit but for the rounding
order of E's column sums on partial bands); the fused float32 forward without gradients
has that second warp and a third that computes the distances
(:func:`sdtw.cuda.policy.tiled`).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from sdtw._autograd import refuse_second_order
from sdtw._sqeuclidean import sqeuclidean_grads
from sdtw._validation import zero_padding
from sdtw.cuda import _graphs, _private, _tc_grads, config, policy
from sdtw.cuda._graphs import clear_graphs, graphs_enabled, set_graphs
from sdtw.cuda.config import CONFIG
from sdtw.cuda.toolkit import missing_toolkit

__all__ = [
    "cache_counts",
    "clear_graphs",
    "config",
    "cost_fits",
    "cost_value_and_grad",
    "cuda_usable",
    "graphs_enabled",
    "import_numba_cuda",
    "launch_counts",
    "missing_toolkit",
    "needs_grad",
    "policy",
    "set_graphs",
    "simulator_enabled",
    "softdtw_cost",
    "softdtw_sqeuclidean",
    "sqeuclidean_cost",
    "sqeuclidean_value_and_grads",
]


def simulator_enabled() -> bool:
    """Whether Numba's CPU simulator runs the kernels (``NUMBA_ENABLE_CUDASIM=1``)."""
    return CONFIG.simulator


def import_numba_cuda():
    """``numba.cuda``, imported after the compatibility shims it needs (numpy 2.5 removed an
    alias that numba-cuda still registers an overload for): what code beside the library that
    writes its own Numba CUDA kernels (the baselines) should import it through."""
    from sdtw._compat import patch_numpy_for_numba

    patch_numpy_for_numba()
    from numba import cuda

    return cuda


def launch_counts():
    """The Numba kernel launches made so far in this process, by kind (``"forward"``,
    ``"backward"``): a ``collections.Counter`` that the benchmark reads around a step."""
    return _launcher_module().launch_counts


def cache_counts() -> tuple[int, int]:
    """The on-disk kernel cache's hits and misses in this process so far."""
    from sdtw.cuda.kernels import registry

    return registry.cache_counts()


_usable: tuple[bool, str] | None = None


def cuda_usable() -> tuple[bool, str]:
    """Whether the Numba CUDA kernels can run here, and if not, why (a yes is remembered: this
    is asked on every call)."""
    global _usable
    if _usable is None:
        ok, why = _check_usable()
        if not ok:
            return ok, why
        _usable = (ok, why)
    return _usable


def _check_usable() -> tuple[bool, str]:
    from sdtw._compat import patch_numpy_for_numba

    patch_numpy_for_numba()
    try:
        from numba import cuda
    except ImportError as exc:  # pragma: no cover - depends on the install
        return False, (
            f"numba CUDA support is not importable ({exc}); pip install 'sdtw[cuda13]' (or "
            "'sdtw[cuda12]', or 'sdtw[cuda]' with a CUDA toolkit on the system)"
        )
    if simulator_enabled():
        return True, ""
    try:
        if not cuda.is_available():
            return False, "numba.cuda.is_available() is False (no driver or no GPU)"
    except Exception as exc:  # pragma: no cover - driver-specific
        return False, f"numba.cuda failed to initialise: {exc}"
    return True, ""


_launch_mod = None


def _launcher_module():
    """:mod:`sdtw.cuda._launch` (it imports numba: loaded on first use, then kept; an import
    statement per call costs more host time than the rest of a small step's Python)."""
    global _launch_mod
    if _launch_mod is None:
        from sdtw.cuda import _launch

        _launch_mod = _launch
    return _launch_mod


def _kernel_dtype(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)``, without the call where the dtype matches (every torch call costs host
    time on each step, and the H200 machine's host is slow at them)."""
    return t if t.dtype == dtype else t.to(dtype)


def _kernel_inputs(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y as the kernels take them: contiguous, float32 or float64, y in x's dtype."""
    xk = _kernel_dtype(x).contiguous()
    return xk, _as(y, xk.dtype).contiguous()


_TWICE = (
    "sdtw: backward called twice through the same soft-DTW node; the CUDA backward reuses its "
    "saved buffer in place. Recompute the loss instead of retain_graph=True."
)


class _CostFunction(torch.autograd.Function):
    """Soft-DTW of a cost tensor: attaches the forward's values (computed before ``apply``,
    see :func:`softdtw_cost`) to the graph.  Its backward stays lazy (the DP backward runs
    when autograd asks, with the upstream gradient folded into the kernel): the gradient is
    (B, N, M), and scaling an eager one later would be one more pass over it."""

    @staticmethod
    def forward(ctx, cost: torch.Tensor, done: tuple):
        out, ctx.P, ctx.mover, ctx.lengths = done
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        _launch = _launcher_module()
        P = ctx.P
        if P is None:
            raise RuntimeError(_TWICE)
        ctx.P = None
        E, _ = _launch.backward(P, grad_out, mover=ctx.mover, lengths=ctx.lengths)
        return _as(E, grad_out.dtype), None


def _eager_grads(
    a: torch.Tensor, b, gamma, lo, hi, x: torch.Tensor, y: torch.Tensor, need_x, need_y, lengths
):
    """The forward and the backward (upstream gradient 1) on the kernels' inputs ``a`` (the
    cost, or x) and ``b`` (None for a cost, else y), then the gradients of each pair's value
    wrt the sequences x and y (None where not ``need_x`` / ``need_y``): returns the values
    and those two gradients, in the kernels' storage dtype.  ``x``, ``y``: the sequences as
    the kernels take them (:func:`_kernel_inputs`: detached, in that storage dtype);
    ``lengths``: the pairs' lengths (int64 (2 B,) on the device) or None (zeros in x and y
    past them: the gradients there come out 0).

    A gradient wrt x, y is O((N + M) D) per pair, and the upstream gradient of a soft-DTW
    value is one number per pair, so scaling it later is one small multiply
    (:func:`_scaled_grads`).  Computing it here puts the DP backward in the GPU's queue right
    behind the forward, instead of waiting for the host to run the autograd engine and the
    backward's Python (on an H200 at B = 32, N = 512 the GPU sat idle ~0.3 ms there), and
    frees the weights (8 N M bytes per pair) before the forward returns.  The price: a
    forward with gradients enabled whose backward never runs has still paid for it (evaluate
    under ``torch.no_grad()``).

    float32 with ``D <= 16`` on a GPU: the gradients come from the backward kernel's own
    sweep, E never written (:func:`sdtw.cuda.policy.sweep_grads`).  Otherwise from E: float32
    where :func:`sdtw.cuda.policy.tc_grads` takes it, by a Triton kernel on the tensor cores
    (3xTF32, :mod:`sdtw.cuda._tc_grads`), else cuBLAS
    (:func:`sdtw._sqeuclidean.sqeuclidean_grads`)."""
    _launch = _launcher_module()
    if _launch.sweep_grads(x):
        out, gx, gy = _launch.forward_grads(a, b, gamma, lo, hi, x, y, lengths)
        return out, (gx if need_x else None, gy if need_y else None)
    N = x.shape[1]
    out, E, S = _launch.forward_backward(a, b, gamma, lo, hi, lengths)  # E: batch stride 2 N M
    # grad_x_i = 2 sum_j E_ij (x_i - y_j);  grad_y_j = 2 sum_i E_ij (y_j - x_i), with the
    # row and column sums of E from the kernel: one (B, N, D) temporary each, no (B, N, M).
    rows, cols = S.split((N, S.shape[1] - N), 1)
    grads = _tc_grads.sqeuclidean_grads_tc if _tc_grads.wanted(x, y.shape[1]) else sqeuclidean_grads
    return out, grads(x, y, E, rows, cols, need_x, need_y)


def _scaled_grads(ctx, grad_out: torch.Tensor) -> tuple:
    """:func:`_eager_grads`' gradients times the upstream gradient of each pair, in the
    inputs' dtypes.  Gradients lent by a replayed library graph (a
    :class:`~sdtw.cuda._graphs.Lease`) are read from it after unpacking the node's saved
    token, which raises torch's own error on a second backward through a freed graph."""
    grads = ctx.grads
    if not isinstance(grads, tuple):
        ctx.saved_tensors  # noqa: B018 - raises where the graph was freed
        grads = grads.grads
    g = grad_out.view(-1, 1, 1)
    return tuple(
        None if t is None else _as(t * g, dt) for t, dt in zip(grads, ctx.dtypes, strict=True)
    )


class _PairFunction(torch.autograd.Function):
    """Squared-Euclidean soft-DTW of x, y with gradients: attaches the values and the eager
    gradients (computed before ``apply``, see :func:`softdtw_sqeuclidean`) to the graph; its
    backward scales the gradients by each pair's upstream gradient.  Gradients lent by a
    replayed library graph get a token saved for the backward, which tells the graph's next
    replay whether this node can still use them (:meth:`sdtw.cuda._graphs.Lease.settle`).  A
    backward with ``create_graph=True`` returns gradients that refuse to be differentiated
    again (:mod:`sdtw._autograd`: there is no second-order pass)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor, done: tuple):
        out, ctx.grads = done
        ctx.inputs = (x, y)  # (the anchors of a refused second derivative)
        # Saved-tensor hooks may drop a saved tensor at once and keep something else, so a
        # lease's token would not say when the node is done: such a lease stays unbound, and
        # the next replay copies its gradients out (as for two calls before one backward).
        if not isinstance(ctx.grads, tuple) and not _private.saved_tensor_hooks():
            token = torch.empty(0)
            ctx.save_for_backward(token)
            ctx.grads.bind(token)
        ctx.dtypes = (x.dtype, y.dtype)
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        with torch.no_grad():
            gx, gy = _scaled_grads(ctx, grad_out)
        if torch.is_grad_enabled():  # create_graph=True
            x, y = ctx.inputs
            gx, gy = refuse_second_order(gx, x, "cuda"), refuse_second_order(gy, y, "cuda")
        return gx, gy, None


def needs_grad(*ts: torch.Tensor) -> bool:
    """Whether autograd will ask for a backward: grad mode on and an input that requires grad
    (inside ``Function.forward`` grad mode is always off, so this is decided before)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def cost_fits(B: int, N: int, M: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a (B, N, M) cost tensor takes at most a quarter of the device's free memory (the
    ``fused=None`` rule for a forward without gradients, :func:`sdtw.cuda.policy.fused_default`;
    always true under the simulator)."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return not policy.fused_default(False, B * N * M * torch.finfo(dtype).bits // 8, free)


def sqeuclidean_cost(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean cost (B, N, M) of x (B, N, D), y (B, M, D) in x's dtype, from the
    park kernel (float64 tensor-core dot products and norms, rounded once to the output's
    dtype; clamped at 0, NaN kept), as the unfused path of :func:`softdtw_sqeuclidean` builds
    it.  No autograd."""
    return _as(_launcher_module().sqeuclidean(*_kernel_inputs(x.detach(), y.detach())), x.dtype)


def softdtw_cost(
    cost: torch.Tensor, gamma: float, lo: int, hi: int, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Soft-DTW of a cost (B, N, M) -> (B,), differentiable wrt ``cost``.  ``lengths``: each
    pair's own rows and columns, int64 (2 B,) on the device (x's, then y's), with ``lo`` the
    band's radius (-1: none; :func:`sdtw.band.band_radius`); None: all N x M, with the band's
    offsets ``lo``, ``hi``.

    The forward kernel is queued before autograd's ``Function.apply`` (which only attaches
    the result): every microsecond of host time before the first launch is GPU idle time."""
    _launch = _launcher_module()
    need = needs_grad(cost)
    # (a float16 cost is read as it is: no (B, N, M) float32 copy; bfloat16 has no Numba type)
    c = cost.detach()
    c = (c if c.dtype == torch.float16 else _kernel_dtype(c)).contiguous()
    out, P, _ = _launch.forward(c, None, gamma, lo, hi, store=need, lengths=lengths)
    out = _as(out, cost.dtype)
    if not need:
        return out
    # (the backward's variant is decided here: autograd may run the backward on another
    # thread, where the caller's overrides are not in force)
    mover = policy.backward_mover(_launch.SIMULATED)
    return _CostFunction.apply(cost, (out, P, mover, lengths))


def softdtw_sqeuclidean(
    x: torch.Tensor,
    y: torch.Tensor,
    gamma: float,
    lo: int,
    hi: int,
    fused: bool,
    lengths: torch.Tensor | None = None,
    checkpoint: bool = False,
) -> torch.Tensor:
    """Squared-Euclidean soft-DTW of x (B, N, D), y (B, M, D) -> (B,), differentiable wrt x
    and y: ``fused``, the distances parked in the weights buffer (or, without gradients,
    computed inside the DP kernel), no (B, N, M) cost tensor; unfused, the (B, N, M) cost
    tensor from the park kernel (:func:`sqeuclidean_cost`), then the DP on it.  With
    gradients both run the same E-to-gradient step (:func:`_eager_grads`, E's row and column
    sums from the DP backward kernel).  ``lengths``, ``lo``, ``hi``: as
    :func:`softdtw_cost`'s; what x and y hold past the lengths is never used: the kernels'
    copies are zeroed there first (inside the captured work, so a replayed graph pays no host
    time for it), and the gradients there are 0.  ``checkpoint`` (with ``fused``; ``lo``
    a radius as with ``lengths``, which default to all N and M): the checkpointed mode, which
    stores no weights (:func:`sdtw.cuda._launch.checkpoint_grads`).

    All the GPU work is queued before autograd's ``Function.apply`` (which only attaches the
    values and the gradients): the host time of ``apply`` then overlaps the kernels instead
    of delaying the first one.  A small call repeated with the same shapes replays a CUDA
    graph of that GPU work instead (:mod:`sdtw.cuda._graphs`)."""
    need = needs_grad(x, y)
    need_x, need_y = need and x.requires_grad, need and y.requires_grad
    dtype = _kernel_dtype(x).dtype

    def compute(xk: torch.Tensor, yk: torch.Tensor, lens: torch.Tensor | None = None) -> tuple:
        return _sqeuclidean_work(xk, yk, lens, gamma, lo, hi, fused, need_x, need_y, checkpoint)

    params = (gamma, lo, hi, fused, need_x, need_y, checkpoint)
    if lengths is None:
        done = _graphs.call((x, y), params, (dtype, dtype), compute)
    else:
        done = _graphs.call((x, y, lengths), params, (dtype, dtype, torch.int64), compute)
    if done is None:
        out, gx, gy = compute(*_kernel_inputs(x.detach(), y.detach()), lengths)
        done = (out, (gx, gy))
    out = _as(done[0], x.dtype)
    if not need:
        return out
    return _PairFunction.apply(x, y, (out, done[1]))


def _sqeuclidean_work(xk, yk, lens, gamma, lo, hi, fused, need_x, need_y, checkpoint) -> tuple:
    """The GPU work of :func:`softdtw_sqeuclidean` on the kernels' inputs: the padding zeroed
    on the kernels' copies, then the checkpointed mode or :func:`_compute`."""
    B = xk.shape[0]
    if lens is not None:  # (out of place: xk may be the caller's own tensor)
        xk, yk = zero_padding(xk, lens[:B]), zero_padding(yk, lens[B:])
    if checkpoint and lens is None:
        # (checkpoint calls take the lengths kernels, band as a radius: all N and M here)
        lens = torch.full((2 * B,), xk.shape[1], dtype=torch.int64, device=xk.device)
        lens[B:] = yk.shape[1]
    if checkpoint and (need_x or need_y):
        out, gx, gy = _launcher_module().checkpoint_grads(xk, yk, gamma, lo, lens)
        sdt = _launcher_module().storage_dtype(xk.dtype)
        return out, _as(gx, sdt) if need_x else None, _as(gy, sdt) if need_y else None
    return _compute(xk, yk, gamma, lo, hi, fused, need_x, need_y, lens)


def sqeuclidean_value_and_grads(
    x: torch.Tensor,
    y: torch.Tensor,
    gamma: float,
    lo: int,
    hi: int,
    fused: bool,
    need_x: bool,
    need_y: bool,
    lengths: torch.Tensor | None = None,
    checkpoint: bool = False,
) -> tuple:
    """:func:`softdtw_sqeuclidean`'s values (B,) and the gradients of each pair's value wrt x
    and y (None where not asked) in x's and y's dtypes, without autograd and without the
    library's graphs: what the PyTorch operator returns (:mod:`sdtw.ops`)."""
    xk, yk = _kernel_inputs(x.detach(), y.detach())
    out, gx, gy = _sqeuclidean_work(xk, yk, lengths, gamma, lo, hi, fused, need_x, need_y,
                                    checkpoint)  # fmt: skip
    gx = None if gx is None else _as(gx, x.dtype)
    return _as(out, x.dtype), gx, None if gy is None else _as(gy, y.dtype)


def cost_value_and_grad(
    cost: torch.Tensor, gamma: float, lo: int, hi: int, lengths: torch.Tensor | None, need: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`softdtw_cost`'s values (B,) and, with ``need``, E (B, N, M), each pair's
    gradient wrt its cost, in the cost's dtype, without autograd."""
    _launch = _launcher_module()
    c = cost.detach()
    c = (c if c.dtype == torch.float16 else _kernel_dtype(c)).contiguous()
    out, P, _ = _launch.forward(c, None, gamma, lo, hi, store=need, lengths=lengths)
    out = _as(out, cost.dtype)
    if not need:
        return out, None
    mover = policy.backward_mover(_launch.SIMULATED)
    E, _ = _launch.backward(P, None, mover=mover, lengths=lengths)
    return out, _as(E, cost.dtype).contiguous()


def _compute(xk, yk, gamma, lo, hi, fused, need_x, need_y, lengths=None) -> tuple:
    """The GPU work of :func:`softdtw_sqeuclidean` on the kernels' inputs (contiguous, in the
    kernels' dtype): values and the gradients wrt x and y (None where not needed, both None
    without gradients), in the kernels' storage dtype."""
    _launch = _launcher_module()
    a, b = (xk, yk) if fused else (_launch.sqeuclidean(xk, yk), None)
    if not (need_x or need_y):
        out, _, _ = _launch.forward(a, b, gamma, lo, hi, store=False, lengths=lengths)
        return out, None, None
    out, (gx, gy) = _eager_grads(a, b, gamma, lo, hi, xk, yk, need_x, need_y, lengths)
    return out, gx, gy
