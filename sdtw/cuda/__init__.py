"""CUDA backend (Numba CUDA kernels), imported lazily by :mod:`sdtw.functional`.

``softdtw_cost`` (unfused, any cost) and ``softdtw_fused`` (squared Euclidean from x, y, no
(B, N, M) cost tensor) are ``autograd.Function`` applications.  With
``NUMBA_ENABLE_CUDASIM=1`` the same kernels run in Numba's CPU simulator on CPU tensors.

Memory model of one training step, per pair, with ``s`` = 4 bytes (float32 inputs) or 8
(float64):

============================  =========================  ====================================
buffer                        size                       lifetime
============================  =========================  ====================================
weights ``P``                 ``2 s N M``                forward -> end of backward
fused distances               0 (in ``P``)               forward: each cell's float64
                                                         distance, from the park kernel,
                                                         sits in ``P`` (float64: plane 0;
                                                         float32: the high and low 32-bit
                                                         words of its bits in planes 1 and
                                                         0) until the
                                                         DP overwrites it with that cell's
                                                         weights
``E`` (gradient wrt cost)     0 (written into ``P``)     backward
boundary rows ``Rb``/``Gb``   ``8 ceil(N/32) (M + 1)``   one pass (about ``N M / 4`` bytes;
                                                         the ticket counter is its last element)
E's row/column sums (fused)   ``s (N + M)``              backward
grads, their temporaries      O((N + M) D)               --
cost (unfused only)           ``s N M`` (caller's)       caller
============================  =========================  ====================================

So a fused float32 step peaks near ``8 N M`` bytes per pair (+3%), an unfused one near
``12 N M``; a forward without gradient stores no (N, M) buffer at all (fused, it computes
the distances inside the DP kernel).  Launches: a forward is one Numba kernel (fused with
gradients: two, the park kernel first; unfused from x and y with the squared Euclidean
distance: two, :func:`sqeuclidean_cost`'s park kernel writing the cost, then the DP), a
backward one, whatever N and M.
"""

from __future__ import annotations

import torch

from sdtw._sqeuclidean import sqeuclidean_grads

__all__ = [
    "cost_fits",
    "cuda_usable",
    "needs_grad",
    "simulator_enabled",
    "softdtw_cost",
    "softdtw_fused",
    "sqeuclidean_cost",
]


def simulator_enabled() -> bool:
    import os

    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


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
        return False, f"numba CUDA support is not importable ({exc}); pip install 'sdtw[cuda]'"
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


_TWICE = (
    "sdtw: backward called twice through the same soft-DTW node; the CUDA backward reuses its "
    "saved buffer in place. Recompute the loss instead of retain_graph=True."
)


class _CostFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cost: torch.Tensor, gamma: float, lo: int, hi: int, need: bool):
        _launch = _launcher_module()
        c = _kernel_dtype(cost).contiguous()
        out, P = _launch.forward(c, None, gamma, lo, hi, store=need)
        ctx.P = P
        return out.to(cost.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        _launch = _launcher_module()
        P = ctx.P
        if P is None:
            raise RuntimeError(_TWICE)
        ctx.P = None
        E, _ = _launch.backward(P, grad_out)
        return E.to(grad_out.dtype), None, None, None, None


class _FusedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, y: torch.Tensor, gamma: float, lo: int, hi: int, need: bool):
        _launch = _launcher_module()
        xk = _kernel_dtype(x).contiguous()
        yk = _kernel_dtype(y).contiguous()
        out, P = _launch.forward(xk, yk, gamma, lo, hi, store=need)
        ctx.P = P
        if need:
            ctx.save_for_backward(x, y)
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        _launch = _launcher_module()
        P = ctx.P
        if P is None:
            raise RuntimeError(_TWICE)
        ctx.P = None
        x, y = ctx.saved_tensors
        N = x.shape[1]
        E, S = _launch.backward(P, grad_out, sums=True)  # E (B, N, M), batch stride 2 N M
        del P
        xe = x.to(E.dtype)  # (``to`` returns the tensor itself when the dtype matches)
        ye = y.to(E.dtype)
        # grad_x_i = 2 sum_j E_ij (x_i - y_j);  grad_y_j = 2 sum_i E_ij (y_j - x_i), with the
        # row and column sums of E from the kernel: one (B, N, D) temporary each, no (B, N, M).
        need_x, need_y = ctx.needs_input_grad[:2]
        gx, gy = sqeuclidean_grads(xe, ye, E, S[:, :N], S[:, N:], need_x, need_y)
        gx = gx.to(x.dtype) if need_x else None
        gy = gy.to(y.dtype) if need_y else None
        return gx, gy, None, None, None, None


def needs_grad(*ts: torch.Tensor) -> bool:
    """Whether autograd will ask for a backward: grad mode on and an input that requires grad
    (inside ``Function.forward`` grad mode is always off, so this is decided before)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def cost_fits(B: int, N: int, M: int, dtype: torch.dtype, device: torch.device) -> bool:
    """Whether a (B, N, M) cost tensor takes at most a quarter of the device's free memory (the
    ``fused=None`` rule for a forward without gradients; always true under the simulator)."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return B * N * M * torch.finfo(dtype).bits // 8 <= free // 4


def sqeuclidean_cost(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean cost (B, N, M) of x (B, N, D), y (B, M, D) in x's dtype, from the
    park kernel (float64 tensor-core dot products and norms, rounded once to the output's
    dtype; clamped at 0, NaN kept).  No autograd here: ``sdtw.functional`` wraps it with the
    analytic backward of ``|x_i - y_j|^2``."""
    _launch = _launcher_module()
    xk = _kernel_dtype(x.detach()).contiguous()
    yk = _kernel_dtype(y.detach()).to(xk.dtype).contiguous()
    return _launch.sqeuclidean(xk, yk).to(x.dtype)


def softdtw_cost(cost: torch.Tensor, gamma: float, lo: int, hi: int) -> torch.Tensor:
    """Soft-DTW of a cost (B, N, M) -> (B,), differentiable wrt ``cost``."""
    return _CostFunction.apply(cost, gamma, lo, hi, needs_grad(cost))


def softdtw_fused(x: torch.Tensor, y: torch.Tensor, gamma: float, lo: int, hi: int) -> torch.Tensor:
    """Fused squared-Euclidean soft-DTW of x (B, N, D), y (B, M, D) -> (B,)."""
    return _FusedFunction.apply(x, y, gamma, lo, hi, needs_grad(x, y))
