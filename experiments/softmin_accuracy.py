"""Accuracy of the CUDA DP step's float32 soft-min, emulated in numpy on the CPU.

Usage
-----
::

    python -m experiments.softmin_accuracy [--seed S] [--n 512] [--m 512 400]

The forward kernel's step (:func:`sdtw.cuda.kernels.recurrence.softmin3_fast`) forms the
diagonal and left terms relative to the smaller of the two while the upper value travels, and
lets the upper value in through one exponent of ``-|t|`` (see the note above
:func:`~sdtw.cuda.kernels.recurrence.softmin3`).  The earlier form took all three exponents
relative to the minimum of all three, after the upper value had arrived.  This script runs
both forms over whole tables, anti-diagonal by anti-diagonal:

* float64 R;
* every exponent rounded to float32;
* float32 ``ex2``/``lg2``/``rcp``, correctly rounded here (the GPU's approximate instructions
  add ~1e-7 of their own);
* float32 weights.

It prints the relative errors of the values and of both gradients (a float64 backward on the
float32 weights) against the float64 textbook DP, at B = 4, D = 64 and randn inputs, for a few
gammas.  It needs no GPU and no Numba; each table takes ~2 s.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

INF, BIG = np.inf, 1e300
f32 = np.float32


def _ex2(x):
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.exp2(np.asarray(x, f32).astype(np.float64)).astype(f32)
    return np.where(r < 2.0**-126, f32(0), r)  # flush-to-zero


def _lg2(x):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.asarray(x, f32).astype(np.float64)).astype(f32)


def _narrow(x):
    with np.errstate(over="ignore"):
        return np.asarray(x).astype(f32)


def _min2(a, b):
    return np.where(b < a, b, a)


def before(rd, rl, up, cost):
    """The step's soft-min relative to the minimum of all three (the form before)."""
    m2 = _min2(rd, rl)
    mm2 = _min2(m2, BIG)
    m, mm = _min2(m2, up), _min2(mm2, up)
    with np.errstate(invalid="ignore"):
        ed, eu, el = (_ex2(_narrow(mm - v)) for v in (rd, up, rl))
    s = (ed + eu) + (el + np.where(m != INF, f32(0), f32(1)))
    inv = f32(1) / s
    return (cost + m) - _lg2(s).astype(np.float64), ed * inv, eu * inv


def after(rd, rl, up, cost):
    """The step's soft-min as the kernel forms it now: the diagonal and left terms relative to
    the smaller of the two, ``a = 1 + 2^-gap``, off the chain; the upper value through one
    exponent of ``-|t|``, ``t = min(r_diag, r_left) - up``."""
    m2 = _min2(rd, rl)
    mm2 = _min2(_min2(rd, BIG), rl)
    with np.errstate(invalid="ignore", over="ignore"):
        lt = rl < rd
        e = _ex2(_narrow(mm2 - np.where(lt, rd, rl)))
        a = f32(1) + e
        a_d = np.where(m2 == INF, f32(0), np.where(lt, e, f32(1)))
        t = mm2 - up
        low = t > 0  # the upper value is the smallest
        x = _ex2(-np.abs(_narrow(t)))
        s = np.where(low, a, f32(1)) * x + np.where(low, f32(1), a)
        inv = f32(1) / s
        r = np.where(low, cost + up, cost + m2) - _lg2(s).astype(np.float64)
        pd = a_d * np.where(low, x, f32(1)) * inv
        pu = np.where(low, f32(1), x) * inv
    return r, pd, pu


def exact(rd, rl, up, cost):
    """The textbook soft-min in float64."""
    v = np.stack([rd, up, rl])
    m = v.min(0)
    with np.errstate(invalid="ignore"):
        w = np.exp2(m - v)
    s = w.sum(0)
    return cost + m - np.log2(s), w[0] / s, w[1] / s


def _diagonals(N: int, M: int, reverse: bool = False):
    ks = range(N + M - 2, -1, -1) if reverse else range(N + M - 1)
    for k in ks:
        i = np.arange(max(0, k - M + 1), min(N, k + 1))
        yield i, k - i


def forward(C: np.ndarray, softmin) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Values (B,) and the weights (p_diag, p_up) of the DP on scaled costs C (B, N, M)."""
    B, N, M = C.shape
    R = np.full((B, N + 1, M + 1), INF)
    R[:, 0, 0] = 0
    PD, PU = np.zeros((B, N, M)), np.zeros((B, N, M))
    for i, j in _diagonals(N, M):
        r, pd, pu = softmin(R[:, i, j], R[:, i + 1, j], R[:, i, j + 1], C[:, i, j])
        R[:, i + 1, j + 1], PD[:, i, j], PU[:, i, j] = r, pd, pu
    return R[:, N, M], PD, PU


def backward(PD: np.ndarray, PU: np.ndarray) -> np.ndarray:
    """E (B, N, M) by the linear recursion on the weights (p_left = 1 - p_diag - p_up)."""
    B, N, M = PD.shape

    def pad(A):
        return np.pad(A, ((0, 0), (0, 1), (0, 1)))

    PDp, PUp, PLp = pad(PD), pad(PU), pad(1 - PD - PU)
    E = np.zeros((B, N + 1, M + 1))
    for i, j in _diagonals(N, M, reverse=True):
        last = (i == N - 1) & (j == M - 1)
        E[:, i, j] = np.where(
            last,
            1.0,
            E[:, i + 1, j + 1] * PDp[:, i + 1, j + 1]
            + E[:, i + 1, j] * PUp[:, i + 1, j]
            + E[:, i, j + 1] * PLp[:, i, j + 1],
        )
    return E[:, :N, :M]


def _grads(E: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of the squared-Euclidean soft-DTW wrt x and y from E."""
    return (
        2 * (E.sum(2)[..., None] * x - E @ y),
        2 * (E.sum(1)[..., None] * y - np.swapaxes(E, 1, 2) @ x),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.softmin_accuracy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--m", type=int, nargs="+", default=[512, 400])
    ap.add_argument("--gammas", type=float, nargs="+", default=[1e-3, 1e-2, 0.1, 1.0, 10.0])
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    B, N, D = 4, args.n, 64

    def rel(a, b):
        return np.linalg.norm(a - b) / np.linalg.norm(b)

    print(f"B={B} N={N} D={D} seed={args.seed}: error against float64, value / grad_x / grad_y")
    for M in args.m:
        x, y = rng.standard_normal((B, N, D)), rng.standard_normal((B, M, D))
        C = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)

        for gamma in args.gammas:
            Cs = C / (gamma * math.log(2))  # scaled units: C log2(e) / gamma
            v0, pd0, pu0 = forward(Cs, exact)
            g0 = _grads(backward(pd0, pu0), x, y)
            line = [f"M={M} gamma={gamma:g}"]
            for name, fn in (("before", before), ("after", after)):
                v, pd, pu = forward(Cs, fn)
                g = _grads(backward(pd.astype(np.float64), pu.astype(np.float64)), x, y)
                errs = (rel(v, v0), rel(g[0], g0[0]), rel(g[1], g0[1]))
                line.append(f"{name} " + " / ".join(f"{e:.1e}" for e in errs))
            print("  ".join(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
