"""The Numba CPU path against the float64 reference (forward table, values, gradients)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from sdtw.band import band_offsets
from sdtw.band import sakoe_chiba_mask as band_mask
from sdtw.cpu import CPUSoftDTW, cpu_backward, cpu_forward
from sdtw.reference import reference_backward, reference_forward

SHAPES = [(2, 1, 1), (3, 1, 5), (2, 5, 1), (2, 7, 4), (3, 4, 9), (2, 13, 13)]
GAMMAS = [1.0, 0.1, 0.01, 0.001]
BANDWIDTHS = [None, 1, 2]
COSTS = ["uniform", "sqdist"]
RTOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def _rng(*key: object) -> np.random.Generator:
    """A generator seeded from the test case, so every case draws different, reproducible data."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _cost(rng: np.random.Generator, shape: tuple[int, int, int], kind: str) -> np.ndarray:
    B, N, M = shape
    if kind == "uniform":
        return rng.random(shape)
    x = rng.standard_normal((B, N, 3))
    y = rng.standard_normal((B, M, 3))
    return ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)


def _relerr(actual: np.ndarray, expected: np.ndarray) -> float:
    scale = np.linalg.norm(expected)
    diff = np.linalg.norm(actual - expected)
    return diff / scale if scale > 0 else diff


def _reference(cost: np.ndarray, gamma: float, bandwidth: int | None, grad_out: np.ndarray):
    """Reference values (B,), padded table (B, N + 1, M + 1) and gradient (B, N, M)."""
    N, M = cost.shape[1:]
    R = reference_forward(cost, gamma, bandwidth)
    E = reference_backward(cost, R, gamma, bandwidth)
    return R[:, N, M], R[:, : N + 1, : M + 1], E * grad_out[:, None, None]


@pytest.mark.parametrize("kind", COSTS)
@pytest.mark.parametrize("bandwidth", BANDWIDTHS)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("shape", SHAPES)
def test_kernels_match_reference(shape, gamma, bandwidth, kind):
    rng = _rng("kernels", shape, gamma, bandwidth, kind)
    cost = _cost(rng, shape, kind)
    grad_out = rng.normal(size=shape[0])
    lo, hi = band_offsets(shape[1], shape[2], bandwidth)
    ref_values, ref_R, ref_grad = _reference(cost, gamma, bandwidth, grad_out)

    values, R = cpu_forward(cost, gamma, lo, hi)
    assert values.shape == (shape[0],) and values.dtype == np.float64
    assert R.shape == ref_R.shape and R.dtype == np.float64
    np.testing.assert_array_equal(np.isposinf(R), np.isposinf(ref_R))
    finite = np.isfinite(ref_R)
    assert _relerr(R[finite], ref_R[finite]) <= RTOL[torch.float64]
    assert _relerr(values, ref_values) <= RTOL[torch.float64]

    grad = cpu_backward(R, gamma, lo, hi, grad_out)
    assert grad.shape == shape and grad.dtype == np.float64
    assert _relerr(grad, ref_grad) <= RTOL[torch.float64]
    outside = ~band_mask(shape[1], shape[2], bandwidth)
    assert np.all(grad[:, outside] == 0.0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bandwidth", BANDWIDTHS)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("shape", SHAPES)
def test_autograd_matches_reference(shape, gamma, bandwidth, dtype):
    rng = _rng("autograd", shape, gamma, bandwidth, str(dtype))
    cost = torch.as_tensor(_cost(rng, shape, "sqdist"), dtype=dtype).requires_grad_()
    grad_out = rng.normal(size=shape[0])
    lo, hi = band_offsets(shape[1], shape[2], bandwidth)
    # The oracle sees exactly the (possibly rounded) input the fast path sees.
    ref_values, _, ref_grad = _reference(cost.detach().double().numpy(), gamma, bandwidth, grad_out)

    values = CPUSoftDTW.apply(cost, gamma, lo, hi)
    assert values.shape == (shape[0],) and values.dtype == dtype
    (values * torch.as_tensor(grad_out, dtype=dtype)).sum().backward()
    assert cost.grad.shape == shape and cost.grad.dtype == dtype
    assert _relerr(values.detach().double().numpy(), ref_values) <= RTOL[dtype]
    assert _relerr(cost.grad.double().numpy(), ref_grad) <= RTOL[dtype]


def test_autograd_gradcheck():
    rng = _rng("gradcheck")
    lo, hi = band_offsets(4, 6, 1)
    cost = torch.as_tensor(rng.random((2, 4, 6))).requires_grad_()
    assert torch.autograd.gradcheck(lambda c: CPUSoftDTW.apply(c, 0.3, lo, hi), (cost,))


def test_no_grad_needed_builds_no_graph():
    cost = torch.as_tensor(_rng("nograd").random((2, 3, 4)))
    values = CPUSoftDTW.apply(cost, 1.0, *band_offsets(3, 4, None))
    assert values.grad_fn is None and not values.requires_grad


def test_inputs_not_modified():
    rng = _rng("inplace")
    cost = rng.random((3, 6, 5))
    grad_out = rng.normal(size=3)
    lo, hi = band_offsets(6, 5, 1)
    cost_copy, grad_out_copy = cost.copy(), grad_out.copy()
    _, R = cpu_forward(cost, 0.1, lo, hi)
    R_copy = R.copy()
    cpu_backward(R, 0.1, lo, hi, grad_out)
    np.testing.assert_array_equal(cost, cost_copy)
    np.testing.assert_array_equal(R, R_copy)
    np.testing.assert_array_equal(grad_out, grad_out_copy)

    # float64 CPU tensors reach the kernels without a copy: they must not be written either.
    cost_t = torch.as_tensor(cost).requires_grad_()
    values = CPUSoftDTW.apply(cost_t, 0.1, lo, hi)
    grad_out_t = torch.as_tensor(grad_out)
    values.backward(grad_out_t)
    np.testing.assert_array_equal(cost_t.detach().numpy(), cost_copy)
    np.testing.assert_array_equal(grad_out_t.numpy(), grad_out_copy)


@pytest.mark.parametrize("gamma", [1e-2, 1e-4, 1e-6])
def test_small_gamma_stays_a_probability(gamma):
    # Every alignment path starts at (0, 0) and ends at (N - 1, M - 1), so with grad_out = 1
    # the expected alignment is exactly 1 there and lies in [0, 1] everywhere.  Large costs and
    # tiny gamma are where the published backward recursion loses all its digits.
    rng = _rng("small-gamma", gamma)
    cost = 100.0 * _cost(rng, (2, 20, 17), "sqdist")
    lo, hi = band_offsets(20, 17, None)
    _, R = cpu_forward(cost, gamma, lo, hi)
    E = cpu_backward(R, gamma, lo, hi, np.ones(2))
    assert np.all(np.isfinite(E))
    np.testing.assert_allclose(E[:, 0, 0], 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(E[:, -1, -1], 1.0, rtol=0, atol=0)
    assert E.min() >= 0.0 and E.max() <= 1.0 + 1e-12


def test_forward_groups_give_the_same_tables():
    """The forward sweeps 1, 2 or 4 pairs per thread at once (full groups, and the partial
    last group of every size), each pair over its own lengths and band: every grouping, serial
    and parallel, writes the same table bit for bit, and its values are the reference's."""
    from sdtw import cpu
    from sdtw.band import pair_offsets
    from sdtw.reference import reference_forward

    rng = _rng("groups")
    N, M = 13, 9
    for B in range(1, 10):
        for mixed in (False, True):
            ns = rng.integers(1, N + 1, B) if mixed else np.full(B, N)
            ms = rng.integers(1, M + 1, B) if mixed else np.full(B, M)
            lo, hi = pair_offsets(ns, ms, 4)
            cost = rng.random((B, N, M))
            tables = []
            for kernel in (cpu._forward_serial, cpu._forward_parallel):
                for group in (1, 2, 4):
                    R = np.full((B, N + 1, M + 1), np.nan)
                    kernel(cost, 0.3, ns, ms, lo, hi, R, group)
                    tables.append(R)
            for R in tables[1:]:
                assert np.array_equal(R, tables[0]), B
            for b in range(B):
                n, m = ns[b], ms[b]
                ref = reference_forward(cost[b : b + 1, :n, :m], 0.3, 4)[0, n, m]
                np.testing.assert_allclose(tables[0][b, n, m], ref, rtol=1e-12)
    assert cpu._group(64, serial=True) == 4
    assert cpu._group(1, serial=False) == 1


@pytest.mark.parametrize("B,N,M", [(1, 40, 50), (4, 100, 90)])
def test_serial_and_parallel_kernels_agree_with_reference(B, N, M):
    """Both compiled variants (serial below SERIAL_MAX_CELLS or for B = 1, parallel above)."""
    from sdtw import cpu
    from sdtw.band import band_offsets
    from sdtw.reference import reference_backward, reference_forward

    rng = np.random.default_rng()
    cost = rng.random((B, N, M))
    go = rng.normal(size=B)
    lo, hi = band_offsets(N, M, None)
    values, R = cpu.cpu_forward(cost, 0.1, lo, hi)
    R_ref = reference_forward(cost, 0.1, None)
    np.testing.assert_allclose(values, R_ref[:, N, M], rtol=1e-12)
    E = cpu.cpu_backward(R, 0.1, lo, hi, go)
    E_ref = reference_backward(cost, R_ref, 0.1, None) * go[:, None, None]
    assert np.linalg.norm(E - E_ref) <= 1e-10 * np.linalg.norm(E_ref)
    assert cpu._serial(B, N, M) == (B * N * M <= cpu.SERIAL_MAX_CELLS or B == 1)


@pytest.mark.parametrize("dist", ["sqeuclidean", "euclidean", "l1"])
@pytest.mark.parametrize("B,N,M,lengths", [(3, 7, 5, False), (5, 13, 11, True), (40, 30, 29, True)])
def test_full_mode_from_sequences_matches_reference(dist, B, N, M, lengths):
    """The full mode with a named cost runs from x and y (the cost and the gradients wrt x, y
    inside the Numba kernels, no E (B, N, M)): values and gradients, with a band, per-pair
    lengths, the serial and the parallel kernels and an upstream gradient other than ones,
    against the float64 reference backend; and against the cost path (a callable dist)."""
    import sdtw
    from sdtw import distances

    rng = _rng("from-sequences", dist, B, N, M, lengths)
    x = torch.as_tensor(rng.standard_normal((B, N, 3)))
    y = torch.as_tensor(rng.standard_normal((B, M, 3)))
    w = torch.as_tensor(rng.normal(size=B))
    kw = {}
    if lengths:
        kw = dict(
            x_lengths=torch.as_tensor(rng.integers(1, N + 1, B)),
            y_lengths=torch.as_tensor(rng.integers(1, M + 1, B)),
        )
    results = []
    for backend, d in (("cpu", dist), ("reference", dist), ("cpu", getattr(distances, dist))):
        xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
        v = sdtw.softdtw(xr, yr, gamma=0.1, bandwidth=6, dist=d, backend=backend, **kw)
        (v * w).sum().backward()
        results.append((v.detach(), xr.grad, yr.grad))
    for got in (results[0], results[2]):
        for a, b in zip(got, results[1], strict=True):
            assert torch.linalg.norm(a - b) <= 1e-10 * torch.linalg.norm(b)
