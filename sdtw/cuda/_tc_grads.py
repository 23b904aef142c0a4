"""Gradients of a squared-Euclidean soft-DTW wrt x and y from E, on the tensor cores (Triton).

For float32 inputs the eager gradients of :func:`sdtw.cuda._eager_grads` are

.. math::  g_x = 2 (\\mathrm{rows}(E) \\odot x - E y), \\qquad
           g_y = 2 (\\mathrm{cols}(E) \\odot y - E^\\top x)

with E (B, N, M) the expected alignment (the backward kernel's, in the weights buffer ``P``)
and its row and column sums from the same kernel.  One Triton launch computes both gradients
(its programs split between them by row block, :data:`ONE_LAUNCH`), each product on the TF32
tensor cores with the 3xTF32 split (``tl.dot(...,
input_precision="tf32x3")``: each operand as a TF32 high part plus a TF32 remainder, three
products, float32 accumulation; about float32's accuracy) and the ``2 (s a - product)``
epilogue in registers, one pass over E per gradient and no temporary.

On the H200 (``python -m experiments.probe --gradsizes``, run 117 of ``probe-dev.txt``, both
gradients from a random E, GPU time) it takes 60 us against 79 for cuBLAS's float32 form
(:func:`sdtw._sqeuclidean.sqeuclidean_grads`: ``torch.baddbmm`` without tensor cores, and a
broadcast multiply) at B = 32, N = M = 512, D = 64, and 656 against 829 at N = 2048; errors
against float64 3.6e-8 and 4.1e-8.  With D = 1, or at N = M = 128, cuBLAS measured faster,
so :func:`wanted` takes this kernel only where ``N M >= MIN_CELLS`` and D and M suit it
(:data:`MIN_D`: D = 2 .. 15 or a multiple of 4, M a multiple of 4; at D = 32 a training
step at B = 32, N = 512 took 442 us against 474 with cuBLAS, run 154).
``SDTW_TC_GRADS=0`` turns it off everywhere; without Triton the backend warns once and takes
cuBLAS's form.

Tiles (:func:`_settings`): ``BR`` = 128 output rows (of x for g_x, of y for g_y) by ``BD``
features (16 .. 64, a power of two; more features are more programs) per program, the
reduction in steps of ``BK`` (64 with 8 warps up to ``B N M = 2^24`` cells, 32 with 4 warps
above); E is read through its strides (g_y reads it transposed); rows, columns and features
past the ends are masked.  The grid's fastest axis runs over feature tiles, so the programs
sharing E's tile run together.  The kernel is not bound by its products (TF32 and IEEE
float32 products took about as long, run 116).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings

import torch

__all__ = ["available", "sqeuclidean_grads_tc", "wanted"]

#: Whether float32 CUDA gradients take this path (``SDTW_TC_GRADS``, read once at import).
ENABLED = os.environ.get("SDTW_TC_GRADS", "1") != "0"

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
    length ``M`` take this path: CUDA tensors in float32, ``N M >= MIN_CELLS``, ``D`` from
    ``MIN_D`` up to ``VECTOR_D`` or a multiple of 4 (:func:`fast_d`), ``M`` a multiple of 4
    (where it measured faster: see :data:`MIN_D`), ``B <= MAX_B``, :data:`ENABLED` and
    Triton installed (otherwise a one-time warning names the slower cuBLAS path taken
    instead)."""
    B, N, D = x.shape
    if not fast_d(D) or M % 4 or N * M < MIN_CELLS or B > MAX_B:
        return False
    return _wanted(x.device.type, x.dtype)


def fast_d(D: int) -> bool:
    """Whether D features suit the kernel: ``MIN_D <= D < VECTOR_D``, or D a multiple of 4
    (whose rows it loads as 16-byte vectors, :func:`_quantum`)."""
    return MIN_D <= D < VECTOR_D or (D >= MIN_D and D % 4 == 0)


def _wanted(device_type: str, dtype: torch.dtype) -> bool:
    global _warned
    if not ENABLED or device_type != "cuda" or dtype != torch.float32:
        return False
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
            stacklevel=4,
        )
    return False


@functools.cache
def _kernel():
    triton, tl = _triton()

    @triton.jit
    def grad_kernel(
        E,  # E's first element
        A0,  # (B, R0, D) contiguous: the sequence whose gradient role 0 forms
        O0,  # (B, K0, D) contiguous: the other sequence
        S0,  # (B, R0) sums of E over the reduction (stride ss0 per batch, 1 per row)
        G0,  # (B, R0, D) contiguous: role 0's gradient, written
        R0,
        K0,
        se_r0,  # E's strides along role 0's rows and reduction (divided by QR0, QK0)
        se_k0,
        ss0,
        A1,  # the same for role 1 (programs with program_id(1) >= NB0)
        O1,
        S1,
        G1,
        R1,
        K1,
        se_r1,
        se_k1,
        ss1,
        NB0,  # role 0's row blocks
        D,  # D and se_b as passed: divided by QD and QB (see _grad)
        se_b,
        BR: tl.constexpr,
        BK: tl.constexpr,
        BD: tl.constexpr,
        PREC: tl.constexpr,
        QD: tl.constexpr,
        QB: tl.constexpr,
        QR0: tl.constexpr,
        QK0: tl.constexpr,
        QR1: tl.constexpr,
        QK1: tl.constexpr,
    ):
        # times constants, so that Triton knows them to be multiples of those
        D = D * QD
        se_b = se_b * QB
        pd = tl.program_id(0)
        pr = tl.program_id(1)
        b = tl.program_id(2).to(tl.int64)
        if pr < NB0:
            A, O, S, G, R, K, ss = A0, O0, S0, G0, R0, K0, ss0
            se_r = se_r0 * QR0
            se_k = se_k0 * QK0
        else:
            pr = pr - NB0
            A, O, S, G, R, K, ss = A1, O1, S1, G1, R1, K1, ss1
            se_r = se_r1 * QR1
            se_k = se_k1 * QK1
        rows = pr * BR + tl.arange(0, BR)
        feats = pd * BD + tl.arange(0, BD)
        ks = tl.arange(0, BK)
        r_ok = rows < R
        f_ok = feats < D
        e_ptr = E + b * se_b + rows[:, None].to(tl.int64) * se_r
        o_ptr = O + b * K * D + feats[None, :]
        acc = tl.zeros((BR, BD), dtype=tl.float32)
        for k0 in range(0, K, BK):
            k = k0 + ks
            k_ok = k < K
            e_ok = r_ok[:, None] & k_ok[None, :]
            e = tl.load(e_ptr + k[None, :].to(tl.int64) * se_k, mask=e_ok, other=0.0)
            o_ok = k_ok[:, None] & f_ok[None, :]
            o = tl.load(o_ptr + k[:, None].to(tl.int64) * D, mask=o_ok, other=0.0)
            acc = tl.dot(e, o, acc, input_precision=PREC)
        at = b * R * D + rows[:, None].to(tl.int64) * D + feats[None, :]
        ok = r_ok[:, None] & f_ok[None, :]
        a = tl.load(A + at, mask=ok, other=0.0)
        s = tl.load(S + b * ss + rows, mask=r_ok, other=0.0)
        tl.store(G + at, 2.0 * (s[:, None] * a - acc), mask=ok)

    return grad_kernel


def _feature_tile(D: int) -> int:
    """Features per program: D rounded up to a power of two, 16 .. 64."""
    return min(64, max(16, 1 << (D - 1).bit_length()))


#: Launch settings by size (None: :func:`_settings` picks): rows and reduction steps per
#: program, the largest feature tile, the products' precision (``tl.dot``'s
#: ``input_precision``), warps and pipeline stages.
CONFIG: dict | None = None
#: (the two settings :func:`_settings` picks from: the best of six at N = 512 and at
#: N = 2048, ``probe --gradtune``, run 116)
SMALL = {"BR": 128, "BK": 64, "BD": 64, "PREC": "tf32x3", "num_warps": 8, "num_stages": 3}
LARGE = {"BR": 128, "BK": 32, "BD": 64, "PREC": "tf32x3", "num_warps": 4, "num_stages": 3}


def _settings(B: int, N: int, M: int, D: int) -> dict:
    """:data:`CONFIG` if set, else :data:`SMALL` up to ``B N M = 2^24`` cells and D = 64,
    :data:`LARGE` above (H200, both gradients, us, ``probe --gradsizes``, run 117):

    ==================  =====  =====  ===================
    B, N = M, D         SMALL  LARGE  cuBLAS float32 form
    ==================  =====  =====  ===================
    32, 512, 64          60.2   71.5   79.3
    16, 1024, 64        110.2  128.6  135.8
    32, 1024, 64        216.7  177.5  222.6
    32, 2048, 64        796.6  655.5  829.3
    32, 256, 1024       256.4  208.8  285.0
    4, 8192, 64        1536.7 1266.2 1578.9
    ==================  =====  =====  ===================
    """
    if CONFIG is not None:
        return CONFIG
    return SMALL if B * N * M <= 1 << 24 and D <= 64 else LARGE


#: Where the tensor cores take the gradients (:func:`wanted`), from ``probe --gradsizes``
#: and the cases beside it (H200, both gradients from a random E, GPU time, us, this kernel /
#: cuBLAS's float32 form; runs 117, 152, 154 and 155 of ``probe-dev.txt``):
#:
#: - D = 1 and N = M = 128 take cuBLAS: B = 32, N = 512, D = 1 38.5 / 24.3; N = 2048, D = 1
#:   362.0 / 266.8; N = 128, D = 64 24.2 / 20.8.
#: - D = 2 to 15 take the kernel, whether D is a multiple of 4 or not: N = 512, D = 2, 3, 5
#:   40.1 / 52.3, 40.0 / 59.6, 42.1 / 57.0; D = 4, 8, 12 without the multiple-of-4 hint at
#:   N = 2048 415-428 / 500-509.
#: - From D = 16 on it wins only where its loads of x's and y's rows are 16-byte vectors, that
#:   is D a multiple of 4 (Triton itself knows only multiples of 16; :func:`_quantum` tells
#:   it the rest): N = 2048, D = 20, 24, 40, 72 386, 387, 794, 1287 / 510, 511, 829, 1384
#:   with the hint, 978, 977, 1768, 3622 without; D = 17, 33, 65, 130 (no hint possible)
#:   74.1 / 54.8 (N = 512), 1764 / 822, 245 / 113 (N = 512), 5212 / 2260.  Until run 154
#:   every D >= 64 took it, so D = 65 or 130 had been more than 2x slower.
#: - M not a multiple of 4 (E's rows then not 16-byte aligned) takes cuBLAS: D = 64 at
#:   N = 512, M = 511 76.7 / 81.5, but N = 2047, M = 2045 964 / 810.
MIN_D = 2
#: D below this takes the kernel even when not a multiple of 4 (:func:`fast_d`).
VECTOR_D = 16
MIN_CELLS = 512 * 512
#: Most pairs of one launch (the grid's third axis; more take cuBLAS).
MAX_B = 65535


#: Whether :func:`_grad` tells the kernel which of D and E's strides are multiples of 4
#: (:func:`_quantum`; a switch for ``probe --gradsizes``'s A/B).
ALIGN = True


def _quantum(i: int) -> int:
    """4 where :data:`ALIGN` is set and ``i`` (D or one of E's strides, in elements) is a
    multiple of 4 but not of 16, else 1.  Triton specialises an integer argument on being a
    multiple of 16 (or on being 1) only; the kernel multiplies each such argument, passed
    divided by its quantum, by that quantum, a constant, so that for instance rows D = 24
    floats apart (96 bytes) can still load as 16-byte vectors."""
    return 4 if ALIGN and i % 4 == 0 and i % 16 != 0 else 1


#: Whether both gradients go in one launch (role by row block, :func:`_grads`) rather than
#: one launch each (a switch for ``probe --gradsizes``'s A/B).
ONE_LAUNCH = True


def _role(E: torch.Tensor, a: torch.Tensor, o: torch.Tensor, s: torch.Tensor, transpose: bool):
    """One gradient's kernel arguments: ``2 (s a - E o)`` (or ``E^T o`` when ``transpose``)
    for E (B, N, M) (any strides), a (B, R, D), o (B, K, D) contiguous float32, s (B, R, 1)
    (any batch stride, row stride 1); returns the arguments, their quanta (QR, QK) and the
    gradient (allocated, to be written)."""
    R, K = a.shape[1], o.shape[1]
    _, se_n, se_m = E.stride()
    se_r, se_k = (se_m, se_n) if transpose else (se_n, se_m)
    qr, qk = _quantum(se_r), _quantum(se_k)
    g = torch.empty_like(a)
    return (a, o, s, g, R, K, se_r // qr, se_k // qk, s.stride(0)), (qr, qk), g


def _grads(E: torch.Tensor, roles: list) -> None:
    """Launch the kernel for one or two roles (:func:`_role`'s results), each role's programs
    a block of the grid's row axis (the grid's fastest axis runs over feature tiles, so the
    programs sharing E's tile run together)."""
    B, N, M = E.shape
    D = roles[0][0][0].shape[2]
    c = _settings(B, N, M, D)
    bd = min(c["BD"], _feature_tile(D))
    blocks = [-(-args[4] // c["BR"]) for args, _, _ in roles]
    grid = (-(-D // bd), sum(blocks), B)
    (args0, (qr0, qk0), _), (args1, (qr1, qk1), _) = roles[0], roles[-1]
    qd, qb = _quantum(D), _quantum(E.stride(0))
    # (Triton launches on the current device's current stream: make that E's device)
    dev = E.device.index
    here = dev is None or dev == torch.cuda.current_device()
    with contextlib.nullcontext() if here else torch.cuda.device(dev):
        _kernel()[grid](
            E, *args0, *args1, blocks[0], D // qd, E.stride(0) // qb,
            BR=c["BR"], BK=c["BK"], BD=bd, PREC=c["PREC"], QD=qd, QB=qb,
            QR0=qr0, QK0=qk0, QR1=qr1, QK1=qk1,
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
    roles = []
    if need_x:
        roles.append(_role(E, x, y, rows, False))
    if need_y:
        roles.append(_role(E, y, x, cols, True))
    if ONE_LAUNCH and roles:
        _grads(E, roles)
    else:
        for role in roles:
            _grads(E, [role])
    gx = roles[0][2] if need_x else None
    gy = roles[-1][2] if need_y else None
    return gx, gy
