"""Kernel variants against each other and the rules that pick them: the mover warps against
one warp, the tiled forward against the park kernel, the backward's gradients from its own
sweep against the reference and against the gradients from E.

``cudasim`` tests run in Numba's CPU simulator; ``cuda`` tests need a GPU and skip without one.
"""

from __future__ import annotations

import pytest
import torch

import sdtw
from sdtw.cuda.config import overrides
from tests.conftest import GAMMAS, randn, rel_err, requires_gpu, requires_sim
from tests.cuda_helpers import TOL, TOL_COST32


def test_variant_rules():
    """The forward's mode and mover and the backward's mover by the rules of
    :mod:`sdtw.cuda.policy`, on a GPU and under the simulator, and what the overrides do:
    mode tiled only for the fused float32 forward without gradients on a GPU (with gradients
    too when forced); the mover for mode hilo on a GPU (forced, in the simulator too) and
    always for mode tiled, never for the others; the backward's mover on a GPU."""
    from sdtw.cuda import policy as R
    from sdtw.cuda.kernels import COST, FUSED, HILO, SPLIT, TILED

    # (fused, fast, store) -> mode on a GPU, then under the simulator
    modes = {
        (False, True, True): (COST, COST),
        (True, True, True): (HILO, HILO),
        (True, False, True): (SPLIT, SPLIT),
        (True, True, False): (TILED, FUSED),
        (True, False, False): (FUSED, FUSED),
    }
    for args, (gpu, sim) in modes.items():
        assert (R.forward_mode(*args, False), R.forward_mode(*args, True)) == (gpu, sim), args
    assert R.forward_mover(HILO, False) and R.forward_mover(TILED, False)
    assert R.forward_mover(TILED, True) and not R.forward_mover(HILO, True)
    for mode in (COST, SPLIT, FUSED):
        assert not R.forward_mover(mode, False)
    assert R.backward_mover(False) and not R.backward_mover(True)
    with overrides(tiled=True):
        assert R.forward_mode(True, True, True, False) == TILED
        assert R.forward_mode(True, False, True, False) == SPLIT  # float32 only
    with overrides(tiled=False):
        assert R.forward_mode(True, True, False, False) == FUSED
    with overrides(mover=True, backward_mover=True):
        assert R.forward_mover(HILO, True) and R.backward_mover(True)
        assert not R.forward_mover(COST, True) and not R.forward_mover(FUSED, False)
    with overrides(mover=False, backward_mover=False):
        assert not R.forward_mover(HILO, False) and not R.backward_mover(False)
        assert R.forward_mover(TILED, False)  # (tiled is a mover mode)
        with overrides(mover=True):  # an inner block keeps what it does not name
            assert R.forward_mover(HILO, False) and not R.backward_mover(False)
    assert R.forward_mover(HILO, False) and not R.forward_mover(HILO, True)  # restored
    with pytest.raises(TypeError, match="unknown rule"):
        with overrides(busy=True):
            pass


def _check_mover_matches_one_warp(rng, device, dtype, shapes, gamma=0.1, sums_tol=None):
    """The mover variant of the forward (mode hilo: fused float32 with gradients), and
    (``sums_tol`` given) the mover variants of the forward and the backward together, give the
    one-warp kernels' values, weights and gradients bit for bit (the same steps on the same
    costs), from a cost tensor with and without gradients and fused; the one-warp run is made
    once for both.  With the backward's mover the fused gradients go through E's column sums,
    float atomics added band by band in whatever order the bands get there: ``sums_tol`` is
    their relative tolerance.  Two cost pairs on a GPU, one in the simulator (which runs
    blocks one at a time)."""

    # (forward's mover, backward's mover, tolerance of the fused gradients; 0: equal)
    variants = [(False, False, 0.0), (True, False, 0.0)]
    if sums_tol is not None:
        variants.append((True, True, sums_tol))
    pairs = 1 if device == "cpu" else 2
    names = ("value", "grad", "no-grad value", "fused", "gx", "gy")
    for N, M in shapes:
        cost = torch.rand(pairs, N, M, dtype=dtype, device=device)
        x = randn(rng, 1, N, 3, dtype=dtype, device=device)
        y = randn(rng, 1, M, 3, dtype=dtype, device=device)
        go = randn(rng, pairs, dtype=dtype, device=device)
        got = []
        for forward_mover, backward_mover, _ in variants:
            with overrides(mover=forward_mover, backward_mover=backward_mover, sweep_grads=False):
                c = cost.clone().requires_grad_()
                v = sdtw.softdtw_from_cost(c, gamma=gamma, backend="cuda")
                (gc,) = torch.autograd.grad(v, c, go)
                with torch.no_grad():
                    v0 = sdtw.softdtw_from_cost(cost, gamma=gamma, backend="cuda")
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                vf = sdtw.softdtw(xs, ys, gamma=gamma, backend="cuda", fused=True)
                gf = torch.autograd.grad(vf, (xs, ys), go[:1])
            got.append((v, gc, v0, vf, *gf))
        for (forward_mover, backward_mover, tol), theirs in zip(variants[1:], got[1:], strict=True):
            where = (N, M, forward_mover, backward_mover)
            for name, a, b in zip(names, got[0], theirs, strict=True):
                if name in ("gx", "gy") and tol:
                    assert rel_err(b, a) <= tol, (*where, name)
                else:
                    assert torch.equal(a, b), (*where, name)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (tens of seconds of simulator: nox -s slow)
def test_sim_movers_match_one_warp(rng):
    """:func:`_check_mover_matches_one_warp` in the simulator, the forward's mover and both
    movers, at a shape with a one-row band (row groups past the band's last row), three
    column chunks written out by the movers' items and the last by their tails: E bit for
    bit, the fused gradients within float32 rounding with the backward's mover (a partial
    band's column sums are added in another order).  float32 only
    (:func:`test_gpu_mover_matches_one_warp` compares float64's backward movers, ~50 s of
    simulator time less on CI)."""
    _check_mover_matches_one_warp(rng, "cpu", torch.float32, [(33, 70)], sums_tol=1e-6)


def _check_tiled_matches_park(rng, device, shapes):
    """The fused float32 forward in mode tiled (its distances from its own third warp, one
    launch), with gradients (forced) and without, against the park kernel and the one-warp
    hilo forward (two launches): values and gradients bit for bit (the tile's float64
    distances are the park's, bit for bit), on fresh randn inputs of shapes (B, N, M, D), an
    upstream gradient other than ones."""
    counts = sdtw.cuda.launch_counts()
    for B, N, M, D in shapes:
        x = randn(rng, B, N, D, dtype=torch.float32, device=device)
        y = randn(rng, B, M, D, dtype=torch.float32, device=device)
        go = randn(rng, B, dtype=torch.float32, device=device)
        got = []
        for tiled in (False, True):
            with overrides(tiled=tiled, mover=False, backward_mover=False):
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                before = counts["forward"]
                v = sdtw.softdtw(xs, ys, gamma=0.1, backend="cuda", fused=True)
                assert counts["forward"] - before == (1 if tiled else 2)
                got.append((v, *torch.autograd.grad(v, (xs, ys), go)))
                if tiled:  # without gradients: the same kernel, no weights kept
                    with torch.no_grad():
                        v0 = sdtw.softdtw(x, y, gamma=0.1, backend="cuda", fused=True)
                    assert torch.equal(v0, v), (B, N, M, D, "no-grad value")
        for name, a, b in zip(("value", "gx", "gy"), *got, strict=True):
            assert torch.equal(a, b), (B, N, M, D, name)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (tens of seconds of simulator: nox -s slow)
def test_sim_tiled_matches_park(rng):
    """:func:`_check_tiled_matches_park` in the simulator: D with a tail pass (17, 40), a
    pass exactly (16), one feature; a one-row table; two bands, the second partial; M past
    a chunk boundary (two tiles)."""
    shapes = [(1, 5, 40, 17), (1, 33, 5, 40), (1, 1, 3, 16), (1, 3, 2, 1)]
    _check_tiled_matches_park(rng, "cpu", shapes)


@requires_gpu
@pytest.mark.cuda
def test_gpu_tiled_matches_park(rng):
    """:func:`_check_tiled_matches_park` on the GPU: lengths around the chunk and band
    boundaries, D around the passes of 16 features."""
    shapes = [(2, 1, 1, 1), (3, 33, 31, 16), (2, 70, 97, 17), (2, 95, 160, 64), (1, 300, 257, 130)]
    _check_tiled_matches_park(rng, "cuda", shapes)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gpu_mover_matches_one_warp(rng, dtype):
    """:func:`_check_mover_matches_one_warp` on the GPU at lengths around the chunk and
    row-group boundaries."""
    shapes = [(1, 1), (8, 9), (33, 31), (70, 97), (95, 160)]
    tol = 1e-6 if dtype == torch.float32 else 1e-13
    _check_mover_matches_one_warp(rng, "cuda", dtype, shapes, sums_tol=tol)


def _check_sweep_grads(monkeypatch, rng, device, cases):
    """The gradients wrt x and y from the backward's own sweep (its gradient warp, E never
    written; the rule forced on) against the float64 reference from x and y and against the
    gradients from E (forced off): fresh randn float32 inputs, (B, N, M, D, gamma, bandwidth,
    normalize, fused) cases, an upstream gradient other than ones.  Checks that the sweep's
    kernel ran (and only it: one backward launch per pass)."""
    from sdtw.cuda import _launch

    calls = []
    real = _launch.backward_grads
    monkeypatch.setattr(_launch, "backward_grads", lambda *a: calls.append(1) or real(*a))
    counts = sdtw.cuda.launch_counts()
    for B, N, M, D, gamma, bandwidth, normalize, fused in cases:
        x = randn(rng, B, N, D, dtype=torch.float32, device=device)
        y = randn(rng, B, M, D, dtype=torch.float32, device=device)
        go = randn(rng, B, dtype=torch.float32, device=device)
        kw = dict(gamma=gamma, bandwidth=bandwidth, normalize=normalize)
        xr, yr = (t.cpu().double().requires_grad_() for t in (x, y))
        vr = sdtw.softdtw(xr, yr, backend="cpu", **kw)
        ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.cpu().double()))
        got = {}
        for sweep in (True, False):
            with overrides(backward_mover=True, sweep_grads=sweep):
                xs, ys = x.clone().requires_grad_(), y.clone().requires_grad_()
                n_calls, n_bwd = len(calls), counts["backward"]
                v = sdtw.softdtw(xs, ys, backend="cuda", fused=fused, **kw)
                got[sweep] = (v, *torch.autograd.grad(v, (xs, ys), go))
            passes = 3 if normalize else 1
            assert len(calls) - n_calls == (passes if sweep else 0)
            assert counts["backward"] - n_bwd == passes
        tol = TOL_COST32 if not fused else TOL[torch.float32]
        for k, name in enumerate(("value", "grad_x", "grad_y")):
            case = (B, N, M, D, gamma, bandwidth, normalize, fused, name)
            assert torch.isfinite(got[True][k]).all(), case
            assert rel_err(got[True][k], ref[k]) <= tol, (*case, rel_err(got[True][k], ref[k]))
            # (the two paths' products are rounded differently: 3xTF32 against float32)
            assert rel_err(got[True][k], got[False][k]) <= 1e-5, case


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (tens of seconds of simulator: nox -s slow)
def test_sim_sweep_grads_match_reference(monkeypatch, rng):
    """:func:`_check_sweep_grads` in the simulator (the gradient warp's twins compute each
    lane's outputs from the same tiles): N != M, lengths 1, one past the band and chunk size
    (32), D from 1 to 16 (partial 8-feature tiles; every variant of :func:`sweep_tiles`;
    whole chunks with D a multiple of 8, g_y's paired reductions), band, normalize, fused
    and unfused."""
    _check_sweep_grads(
        monkeypatch,
        rng,
        "cpu",
        [
            (2, 5, 7, 3, 1.0, None, False, True),
            (1, 1, 1, 2, 0.1, None, False, True),
            (1, 33, 40, 9, 0.01, 4, False, True),
            (2, 1, 33, 1, 1e-3, None, False, False),
            (1, 33, 1, 2, 0.1, None, True, True),
            (1, 3, 5, 15, 0.1, None, False, True),
            (2, 4, 3, 16, 1.0, 2, False, True),
            (1, 1, 40, 8, 0.1, None, False, True),  # a whole chunk, D = 8 nt: gy_out_full
        ],
    )


@requires_gpu
@pytest.mark.cuda
def test_gpu_sweep_grads_match_reference(monkeypatch, rng):
    """:func:`_check_sweep_grads` on the GPU (the tensor-core fragments): shapes past every
    tile (32 rows, 32 positions, 8 features), N != M, D up to 16 (each variant of
    :func:`sweep_tiles`, full and partial), all gammas of the issue, band, normalize, fused and
    unfused."""
    _check_sweep_grads(
        monkeypatch,
        rng,
        "cuda",
        [
            (3, 77, 1025, 5, 0.1, None, True, True),
            (2, 1, 300, 3, 1.0, None, False, True),
            (2, 513, 31, 7, 0.01, 40, True, True),
            (1, 1000, 1001, 16, 1e-3, 5, False, True),
            (5, 33, 65, 1, 1.0, None, False, False),
            (2, 64, 64, 15, 1e-4, None, False, True),
            (4, 512, 512, 16, 1.0, None, False, False),
            (2, 100, 97, 12, 0.1, None, False, True),
            (2, 65, 129, 16, 0.01, None, True, True),
            (2, 96, 50, 8, 1.0, 7, False, True),
            (1, 40, 41, 9, 0.1, None, False, False),
        ],
    )


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("gamma", GAMMAS)
def test_gpu_sweep_grads_paper_case(rng, gamma):
    """The issue's accuracy case (B = 4, N = M = 512, float32, randn) at D = 16, the largest
    with the gradients from the sweep: values and both gradients within 1e-4 of float64."""
    x = randn(rng, 4, 512, 16, dtype=torch.float32, device="cuda").requires_grad_()
    y = randn(rng, 4, 512, 16, dtype=torch.float32, device="cuda").requires_grad_()
    go = randn(rng, 4, dtype=torch.float32, device="cuda")
    xr, yr = (t.detach().cpu().double().requires_grad_() for t in (x, y))
    vr = sdtw.softdtw(xr, yr, gamma=gamma, backend="cpu")
    with overrides(sweep_grads=True, backward_mover=True):
        v = sdtw.softdtw(x, y, gamma=gamma, fused=True, backend="cuda")
        out = (v, *torch.autograd.grad(v, (x, y), go))
    ref = (vr, *torch.autograd.grad(vr, (xr, yr), go.cpu().double()))
    for a, b in zip(out, ref, strict=True):
        assert rel_err(a, b) <= 1e-4


def test_sweep_grads_rule():
    """Which eager gradients come from the sweep: float32 with D <= 16 where the backward
    takes its mover variant (on a GPU, or forced); forced off, none; never float64 or
    D > 16, nor without the mover variant."""
    from sdtw.cuda import policy as R

    assert [R.sweep_grads(True, d, False) for d in (1, 16, 17, 64)] == [True, True, False, False]
    assert not R.sweep_grads(False, 16, False) and not R.sweep_grads(True, 1, True)
    with overrides(backward_mover=True):
        assert R.sweep_grads(True, 16, True) and not R.sweep_grads(True, 17, True)
        with overrides(sweep_grads=False):
            assert not R.sweep_grads(True, 1, True)
    with overrides(sweep_grads=True, backward_mover=False):
        assert not R.sweep_grads(True, 1, False)
    assert not R.sweep_grads(True, 1, False, capability=(8, 0))  # (sm_90's reductions)


def test_sweep_tiles():
    """The gradient warp's variant for D features: the fewest feature tiles of 8 among
    ``SWEEP_TILES`` that hold them (D = 1 does the products of one tile, not of two)."""
    from sdtw.cuda.kernels import geometry as K

    got = {D: K.sweep_tiles(D) for D in (1, 8, 9, 16)}
    assert got == {1: 1, 8: 1, 9: 2, 16: 2}
    assert K.SWEEP_TILES[-1] * 8 == K.SWEEP_MAX_D
