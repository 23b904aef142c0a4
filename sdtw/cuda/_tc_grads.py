"""Gradients of a squared-Euclidean soft-DTW wrt x and y from E, on the tensor cores (Triton).

For float32 inputs the eager gradients of :func:`sdtw.cuda._eager_grads` are

.. math::  g_x = 2 (\\mathrm{rows}(E) \\odot x - E y), \\qquad
           g_y = 2 (\\mathrm{cols}(E) \\odot y - E^\\top x)

with E (B, N, M) the expected alignment (the backward kernel's, in the weights buffer ``P``)
and its row and column sums from the same kernel.  One Triton launch computes both gradients up
to ``B N M = 2^24`` cells (its programs split between them by row block,
:func:`sdtw.cuda.policy.tc_one_launch`), one launch each above, each product on the TF32 tensor
cores with the 3xTF32 split (``tl.dot(..., input_precision="tf32x3")``: each operand as a TF32
high part plus a TF32 remainder, three products, float32 accumulation; about float32's
accuracy) and the ``2 (s a - product)`` epilogue in registers, one pass over E per gradient and
no temporary.

On the H200 it takes 60 us against 79 for cuBLAS's float32 form
(:func:`sdtw._sqeuclidean.sqeuclidean_grads`: ``torch.baddbmm`` without tensor cores, and a
broadcast multiply) at B = 32, N = M = 512, D = 64, and 656 against 829 at N = 2048; errors
against float64 3.6e-8 and 4.1e-8.  Where it is taken is :func:`sdtw.cuda.policy.tc_grads`;
``SDTW_TC_GRADS=0`` turns it off everywhere; without Triton the backend warns once and takes
cuBLAS's form.

Tiles (:func:`sdtw.cuda.policy.tc_settings`): ``BR`` = 128 output rows (of x for g_x, of y for
g_y) by ``BD`` features (16 .. 64, a power of two; more features are more programs) per program, the
reduction in steps of ``BK`` (64 with 8 warps up to ``B N M = 2^24`` cells, 32 with 4 warps
above); E is read through its strides (g_y reads it transposed); rows, columns and features
past the ends are masked.  The grid's fastest axis runs over feature tiles, so the programs
sharing E's tile run together.  The kernel is not bound by its products (TF32 and IEEE
float32 products took about as long).
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from sdtw.cuda import policy
from sdtw.cuda.config import CONFIG

__all__ = ["available", "sqeuclidean_grads_tc", "wanted"]

_warned = False


@functools.cache
def _triton():
    """(triton, triton.language), or None where Triton is not installed."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None
    return triton, tl


def available() -> bool:
    """Whether Triton can be imported."""
    return _triton() is not None


def wanted(x: torch.Tensor, M: int) -> bool:
    """Whether the eager gradients of the kernels' inputs ``x`` (B, N, D) against a y of
    length ``M`` take this path: CUDA tensors in float32 where :func:`sdtw.cuda.policy.tc_grads`
    takes it, the setting on (``SDTW_TC_GRADS``) and Triton installed (otherwise a one-time
    warning names the slower cuBLAS path taken instead)."""
    B, N, D = x.shape
    if not CONFIG.tc_grads or x.device.type != "cuda" or x.dtype != torch.float32:
        return False
    if not policy.tc_grads(B, N, M, D):
        return False
    return _triton_or_warn()


def _triton_or_warn() -> bool:
    global _warned
    if available():
        return True
    if not _warned:
        _warned = True
        warnings.warn(
            "sdtw: Triton is not installed, so the float32 gradients wrt x and y take "
            "cuBLAS's float32 matmuls (on an H200 about 20 us more per step at B = 32, "
            "N = 512, D = 64, 170 us at N = 2048); pip install triton, or set "
            "SDTW_TC_GRADS=0 to silence this",
            RuntimeWarning,
            stacklevel=5,
        )
    return False


@functools.cache
def _kernel():
    triton, tl = _triton()

    global _one_role  # (Triton looks up the functions a kernel calls in its module's globals)

    @triton.jit
    def _one_role(
        E, A, O, S, G, R, K, se_n, se_m, ss, b, pd, pr, D,
        BR: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr, PREC: tl.constexpr,
        TRANSPOSE: tl.constexpr,
    ):  # fmt: skip
        # one program's (BR, BD) tile of 2 (s a - E o) (TRANSPOSE: E^T o); E's offsets are
        # formed from its own strides in each role, so that Triton keeps what it knows of
        # them (a unit stride, multiples of 16) in both
        rows = pr * BR + tl.arange(0, BR)
        feats = pd * BD + tl.arange(0, BD)
        ks = tl.arange(0, BK)
        r_ok = rows < R
        f_ok = feats < D
        if TRANSPOSE:
            e_ptr = E + rows[:, None].to(tl.int64) * se_m
        else:
            e_ptr = E + rows[:, None].to(tl.int64) * se_n
        o_ptr = O + b * K * D + feats[None, :]
        acc = tl.zeros((BR, BD), dtype=tl.float32)
        for k0 in range(0, K, BK):
            k = k0 + ks
            k_ok = k < K
            e_ok = r_ok[:, None] & k_ok[None, :]
            if TRANSPOSE:
                e = tl.load(e_ptr + k[None, :].to(tl.int64) * se_n, mask=e_ok, other=0.0)
            else:
                e = tl.load(e_ptr + k[None, :].to(tl.int64) * se_m, mask=e_ok, other=0.0)
            o_ok = k_ok[:, None] & f_ok[None, :]
            o = tl.load(o_ptr + k[:, None].to(tl.int64) * D, mask=o_ok, other=0.0)
            acc = tl.dot(e, o, acc, input_precision=PREC)
        at = b * R * D + rows[:, None].to(tl.int64) * D + feats[None, :]
        ok = r_ok[:, None] & f_ok[None, :]
        a = tl.load(A + at, mask=ok, other=0.0)
        s = tl.load(S + b * ss + rows, mask=r_ok, other=0.0)
        tl.store(G + at, 2.0 * (s[:, None] * a - acc), mask=ok)

    @triton.jit
    def grad_kernel(
        E,  # E's first element (B, N, M)
        X,  # (B, N, D) contiguous
        Y,  # (B, M, D) contiguous
        SX,  # (B, N) E's row sums (stride ssx per batch, 1 per row)
        SY,  # (B, M) E's column sums (stride ssy per batch, 1 per column)
        GX,  # (B, N, D) g_x, written where NBX > 0
        GY,  # (B, M, D) g_y, written where the grid has rows past NBX
        N,
        M,
        D,  # D, se_b, se_n and se_m as passed: divided by QD, QB, QN and QM (see _run)
        se_b,
        se_n,
        se_m,
        ssx,
        ssy,
        NBX,  # g_x's row blocks: programs with program_id(1) < NBX form g_x, the rest g_y
        BR: tl.constexpr,
        BK: tl.constexpr,
        BD: tl.constexpr,
        PREC: tl.constexpr,
        QD: tl.constexpr,
        QB: tl.constexpr,
        QN: tl.constexpr,
        QM: tl.constexpr,
    ):
        # times constants, so that Triton knows them to be multiples of those
        D = D * QD
        se_b = se_b * QB
        se_n = se_n * QN
        se_m = se_m * QM
        pd = tl.program_id(0)
        pr = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        E = E + b * se_b
        if pr < NBX:
            _one_role(E, X, Y, SX, GX, N, M, se_n, se_m, ssx, b, pd, pr, D, BR, BK, BD, PREC,
                     False)  # fmt: skip
        else:
            _one_role(E, Y, X, SY, GY, M, N, se_n, se_m, ssy, b, pd, pr - NBX, D, BR, BK, BD,
                     PREC, True)  # fmt: skip

    return grad_kernel


def _feature_tile(D: int) -> int:
    """Features per program: D rounded up to a power of two, 16 .. 64."""
    return min(64, max(16, 1 << (D - 1).bit_length()))


def _quantum(i: int) -> int:
    """4 where ``i`` (D or one of E's strides, in elements) is a multiple of 4 but not of 16,
    else 1.  Triton specialises an integer argument on being a multiple of 16 (or on being 1)
    only; the kernel multiplies each such argument, passed divided by its quantum, by that
    quantum, a constant, so that for instance rows D = 24 floats apart (96 bytes) can still
    load as 16-byte vectors (N = 2048, D = 24: 387 us against 977 without)."""
    return 4 if i % 4 == 0 and i % 16 != 0 else 1


def _run(E, x, y, rows, cols, gx, gy, blocks_x: int, blocks_y: int, c: dict) -> None:
    """Launch the kernel at settings ``c`` (:func:`sdtw.cuda.policy.tc_settings`) over
    ``blocks_x`` row blocks of g_x (into ``gx``) then ``blocks_y`` of g_y (into ``gy``); a
    gradient without blocks may be None (its buffer is not touched)."""
    B, N, M = E.shape
    D = x.shape[2]
    bd = min(c["BD"], _feature_tile(D))
    grid = (-(-D // bd), blocks_x + blocks_y, B)
    se_b, se_n, se_m = E.stride()
    qd, qb, qn, qm = (_quantum(i) for i in (D, se_b, se_n, se_m))
    gx = gy if gx is None else gx
    gy = gx if gy is None else gy
    # (Triton launches on the current device's current stream: make that E's device)
    dev = E.device.index
    here = dev is None or dev == torch.cuda.current_device()
    with contextlib.nullcontext() if here else torch.cuda.device(dev):
        _kernel()[grid](
            E, x, y, rows, cols, gx, gy, N, M, D // qd, se_b // qb, se_n // qn, se_m // qm,
            rows.stride(0), cols.stride(0), blocks_x,
            BR=c["BR"], BK=c["BK"], BD=bd, PREC=c["PREC"], QD=qd, QB=qb, QN=qn, QM=qm,
            num_warps=c["num_warps"], num_stages=c["num_stages"],
        )  # fmt: skip


def sqeuclidean_grads_tc(
    x: torch.Tensor,
    y: torch.Tensor,
    E: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    need_x: bool = True,
    need_y: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """:func:`sdtw._sqeuclidean.sqeuclidean_grads` for float32 x (B, N, D), y (B, M, D)
    (contiguous), E (B, N, M) (any strides, e.g. plane 1 of the weights buffer) and its sums
    ``rows`` (B, N, 1), ``cols`` (B, M, 1) (row stride 1): the products on the tensor cores
    with the 3xTF32 split (see the module docstring).  None where not needed."""
    B, N, M = E.shape
    c = policy.tc_settings(B, N, M, x.shape[2])
    bx = -(-N // c["BR"]) if need_x else 0
    by = -(-M // c["BR"]) if need_y else 0
    gx = torch.empty_like(x) if need_x else None
    gy = torch.empty_like(y) if need_y else None
    if policy.tc_one_launch(B, N, M) or not (need_x and need_y):
        if bx + by:
            _run(E, x, y, rows, cols, gx, gy, bx, by, c)
    else:
        _run(E, x, y, rows, cols, gx, None, bx, 0, c)
        _run(E, x, y, rows, cols, None, gy, 0, by, c)
    return gx, gy
