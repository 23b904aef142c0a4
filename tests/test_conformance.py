"""The conformance suite: every backend (CUDA in Numba's simulator) and every recurrence,
against the recurrence's float64 oracle, through the public functions and through the
engine's value-and-gradient path that the PyTorch operators call.

One ``backend`` and one ``recurrence`` fixture parametrise everything here, so a new backend
or measure is tested by adding it to :data:`sdtw.engine.BACKENDS` or
:data:`sdtw.engine.RECURRENCES`.  Shapes are small (the simulator runs a block's threads as
Python threads) but cover N != M, length 1 and lengths past the CUDA kernels' 32-row bands.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

import sdtw
from sdtw import engine
from sdtw.band import band_offsets
from sdtw.distances import pairwise
from tests.conftest import SIMULATOR, randn, rel_err

_SIM = pytest.mark.skipif(not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1")
TOL = 1e-10  # float64 inputs on every backend


@pytest.fixture(params=[pytest.param(n, marks=_SIM) if n == "cuda" else n for n in engine.BACKENDS])
def backend(request) -> str:
    return request.param


def _cases(*axes, default) -> list:
    """Every backend x the product of ``axes``; the simulator's CUDA runs of every
    combination but ``default`` are marked slow (nox -s slow: the default suite must stay
    within CI's minutes)."""
    out = []
    for name in engine.BACKENDS:
        for combo in itertools.product(*axes):
            marks = []
            if name == "cuda":
                marks = [_SIM] if combo == default else [_SIM, pytest.mark.slow]
            out.append(pytest.param(name, *combo, marks=marks))
    return out


@pytest.fixture(params=list(engine.RECURRENCES))
def recurrence(request) -> engine.Recurrence:
    return engine.RECURRENCES[request.param]


def at(rec, gamma: float) -> float:
    """The gamma a call passes to run ``rec`` (exact DTW is ``gamma=0``)."""
    return 0.0 if rec.name == "dtw" else gamma


def measure(rec):
    """The public function that runs ``rec``: soft-DTW's entry for the recurrences over a
    cost, the recurrence's own for those over the sequences (Soft-MSM, with its settings)."""
    if rec.kind == "sequences":
        return functools.partial(sdtw.soft_msm, **dict(rec.params))
    return sdtw.softdtw


def sequence_oracle(rec, x, y, gamma, bandwidth=None, lengths=None):
    """:func:`oracle` of a recurrence over the sequences: its oracle's own gradients."""
    params = dict(rec.params)
    a, b_ = x.detach().double(), y.detach().double()
    gx, gy, values = torch.zeros_like(a), torch.zeros_like(b_), []
    for b in range(x.shape[0]):
        n = x.shape[1] if lengths is None else int(lengths[0][b])
        m = y.shape[1] if lengths is None else int(lengths[1][b])
        xb, yb = a[b : b + 1, :n].numpy(), b_[b : b + 1, :m].numpy()
        v, state = rec.oracle_forward(xb, yb, gamma, bandwidth, **params)
        ex, ey = rec.oracle_backward(xb, yb, state, gamma, bandwidth, **params)
        values.append(v[0])
        gx[b, :n], gy[b, :m] = torch.from_numpy(ex[0]), torch.from_numpy(ey[0])
    return torch.tensor(values), gx, gy


def oracle(rec, x, y, gamma, bandwidth=None, lengths=None, dist="sqeuclidean"):
    """Values (B,) and gradients wrt x, y of ``sum_b values[b]`` from the recurrence's float64
    oracle, pair by pair over each pair's own lengths; the cost's gradient by autograd through
    :func:`sdtw.distances.pairwise` (an independent path from the backends' own)."""
    if rec.kind == "sequences":
        return sequence_oracle(rec, x, y, gamma, bandwidth, lengths)
    B = x.shape[0]
    xs, ys = x.detach().double().requires_grad_(), y.detach().double().requires_grad_()
    total, values = 0.0, []
    for b in range(B):
        n = x.shape[1] if lengths is None else int(lengths[0][b])
        m = y.shape[1] if lengths is None else int(lengths[1][b])
        cost = pairwise(xs[b : b + 1, :n], ys[b : b + 1, :m], dist)
        c = cost.detach().numpy()
        R = rec.oracle_forward(c, gamma, bandwidth)
        E = rec.oracle_backward(c, R, gamma, bandwidth)
        values.append(R[0, n, m])
        total = total + (cost * torch.from_numpy(E)).sum()
    gx, gy = torch.autograd.grad(total, (xs, ys))
    return torch.tensor(values), gx, gy


# (B, N, M, D): N != M, length 1, past a 32-row band, odd sizes
CASES = [(2, 5, 7, 3), (1, 1, 1, 2), (2, 1, 6, 2), (1, 33, 9, 2)]


@pytest.mark.parametrize("B, N, M, D", CASES)
@pytest.mark.parametrize("gamma", [1.0, 0.01])
def test_values_and_gradients_match_the_oracle(rng, backend, recurrence, B, N, M, D, gamma):
    if backend == "cuda" and gamma == 1.0 and N > 32:
        pytest.skip("(the simulator is slow: the 33-row case runs once, at gamma = 0.01)")
    if recurrence.name == "dtw" and gamma == 1.0:
        pytest.skip("(exact DTW has no gamma: it runs once, at gamma = 0)")
    gamma = at(recurrence, gamma)
    x, y = randn(rng, B, N, D).requires_grad_(), randn(rng, B, M, D).requires_grad_()
    g = torch.as_tensor(rng.uniform(0.5, 2.0, B))  # an upstream gradient other than ones
    v = measure(recurrence)(x, y, gamma=gamma, backend=backend)
    (v * g).sum().backward()
    want, gx, gy = oracle(recurrence, x, y, gamma)
    assert rel_err(v, want) < TOL
    assert rel_err(x.grad, gx * g[:, None, None]) < TOL
    assert rel_err(y.grad, gy * g[:, None, None]) < TOL


@pytest.mark.parametrize("bandwidth", [None, 1, 2.5])
def test_band_and_lengths_match_the_oracle(rng, backend, recurrence, bandwidth):
    B, N, M, D = 3, 9, 7, 2
    x, y = randn(rng, B, N, D).requires_grad_(), randn(rng, B, M, D).requires_grad_()
    xl, yl = [9, 4, 1], [7, 7, 3]
    x_pad = x.detach().clone()
    x_pad[1, 4:] = float("nan")  # what the padding holds never matters
    x_pad.requires_grad_()
    gamma = at(recurrence, 0.3)
    v = measure(recurrence)(x_pad, y, gamma=gamma, bandwidth=bandwidth, backend=backend,
                            x_lengths=xl, y_lengths=yl)  # fmt: skip
    v.sum().backward()
    want, gx, gy = oracle(recurrence, x, y, gamma, bandwidth, (xl, yl))
    assert rel_err(v, want) < TOL
    assert rel_err(x_pad.grad, gx) < TOL and rel_err(y.grad, gy) < TOL
    assert torch.equal(x_pad.grad[1, 4:], torch.zeros_like(x_pad.grad[1, 4:]))


# (the simulator's CUDA runs take 17 s each: all in the slow set; test_cuda's
# test_sim_matches_reference keeps a CUDA divergence in the default suite)
@pytest.mark.parametrize("backend, shape", _cases([(6, 6), (6, 4)], default=None))
def test_divergence_is_its_three_terms(rng, backend, shape):
    N, M = shape
    x, y = randn(rng, 2, N, 2).requires_grad_(), randn(rng, 2, M, 2)
    d = sdtw.softdtw(x, y, gamma=0.5, normalize=True, backend=backend)
    s = lambda a, b: sdtw.softdtw(a, b, gamma=0.5, backend=backend)  # noqa: E731
    assert rel_err(d, s(x, y) - 0.5 * (s(x, x) + s(y, y))) < TOL
    z = sdtw.softdtw(x, x, gamma=0.5, normalize=True, backend=backend)
    assert z.abs().max() < 1e-12


@pytest.mark.parametrize(
    "backend, dist, normalize, gamma",
    _cases(
        ["sqeuclidean", "euclidean", "l1"],
        [False, True],
        [0.4, 0.0],
        # (the simulator's CUDA soft-DTW with gradients takes ~30 s here: exact DTW by default)
        default=("sqeuclidean", True, 0.0),
    ),
)
def test_operator_path_equals_the_eager_path(rng, backend, normalize, dist, gamma):
    """What the operators return (the engine's values and gradients, no autograd) against the
    eager autograd path, with lengths, band and N != M."""
    x, y = randn(rng, 3, 7, 2).requires_grad_(), randn(rng, 3, 5, 2).requires_grad_()
    xl, yl = torch.tensor([7, 3, 1]), torch.tensor([5, 2, 5])
    kw = dict(gamma=gamma, bandwidth=3, normalize=normalize, dist=dist, backend=backend)
    v = sdtw.softdtw(x, y, x_lengths=xl, y_lengths=yl, **kw)
    v.sum().backward()
    opts = engine.Options.make(fused=None, memory="auto", **kw)
    plan = engine.plan_pairs(opts, x, y, True, True)
    pairs = engine.Pairs(xl, yl)
    with torch.no_grad():
        v2, gx, gy = engine.pair_value_and_grads(plan, x, y, pairs, True, True)
    assert rel_err(v2, v) < TOL
    assert rel_err(gx, x.grad) < TOL and rel_err(gy, y.grad) < TOL


def test_cost_path_and_alignment_match_the_oracle(rng, backend, recurrence):
    if recurrence.kind == "sequences":
        pytest.skip("(a recurrence over the sequences has no cost path)")
    B, N, M = 2, 6, 35
    gamma = at(recurrence, 0.2)
    cost = torch.as_tensor(rng.random((B, N, M))).requires_grad_()
    g = torch.as_tensor([0.7, -1.3])
    v = sdtw.softdtw_from_cost(cost, gamma=gamma, bandwidth=4, backend=backend)
    (v * g).sum().backward()
    c = cost.detach().numpy()
    R = recurrence.oracle_forward(c, gamma, 4)
    E = torch.from_numpy(recurrence.oracle_backward(c, R, gamma, 4))
    assert rel_err(v, torch.from_numpy(R[:, N, M])) < TOL
    assert rel_err(cost.grad, E * g[:, None, None]) < TOL
    x, y = randn(rng, B, N, 2), randn(rng, B, M, 2)
    A = sdtw.alignment(x, y, gamma=gamma, bandwidth=4, backend=backend)
    cxy = pairwise(x, y, "sqeuclidean").numpy()
    want = recurrence.oracle_backward(cxy, recurrence.oracle_forward(cxy, gamma, 4), gamma, 4)
    assert rel_err(A, torch.from_numpy(want)) < TOL
    lo, hi = band_offsets(N, M, 4)
    d = np.arange(M)[None, :] - np.arange(N)[:, None]
    # (zero outside the band; the CUDA backward leaves the weights' rounding there, ~1e-16 of E
    # on a +inf cell beside the band: p_left = 1 - p_diag - p_up)
    assert A[:, (d < -lo) | (d > hi)].abs().max() <= (1e-12 if backend == "cuda" else 0.0)


# (the simulator runs the kernels' float arithmetic in NumPy, which warns on inf - inf)
@pytest.mark.filterwarnings("ignore:.*(invalid value|overflow|divide by zero):RuntimeWarning")
def test_special_values(rng, backend):
    x, y = randn(rng, 3, 5, 2).requires_grad_(), randn(rng, 3, 4, 2)
    bad = x.detach().clone()
    bad[1, 2, 0] = math.nan
    bad[2, 0, 1] = math.inf
    v = sdtw.softdtw(bad, y, gamma=0.3, backend=backend)
    want = sdtw.softdtw(x.detach()[:1], y[:1], gamma=0.3, backend="reference")
    assert rel_err(v[:1], want) < TOL
    assert math.isnan(v[1]) and (math.isnan(v[2]) or v[2] == math.inf)
    cost = torch.as_tensor(rng.random((2, 4, 4)))
    cost[1, 0, :] = math.inf  # no finite path
    cost.requires_grad_()
    vc = sdtw.softdtw_from_cost(cost, gamma=0.3, backend=backend)
    vc.sum().backward()
    assert vc[1] == math.inf and torch.equal(cost.grad[1], torch.zeros(4, 4, dtype=cost.dtype))


@pytest.mark.parametrize(
    "kw, exc, words",
    [
        (dict(gamma=-1.0), ValueError, ["gamma", "-1.0"]),
        (dict(bandwidth="2"), TypeError, ["bandwidth", "'2'"]),
        (dict(x_lengths=[5, 9]), ValueError, ["x_lengths", "9"]),
        (dict(x_lengths=[2.5, 3.0]), TypeError, ["x_lengths", "integers"]),
        (dict(memory="half"), ValueError, ["memory", "'half'"]),
    ],
)
def test_bad_inputs_are_named(rng, backend, kw, exc, words):
    x, y = randn(rng, 2, 5, 2), randn(rng, 2, 4, 2)
    with pytest.raises(exc) as info:
        sdtw.softdtw(x, y, backend=backend, **kw)
    for word in words:
        assert word in str(info.value), (str(info.value), word)


def test_the_capabilities_table_names_every_backend():
    table = engine.capabilities_table()
    for name, b in engine.BACKENDS.items():
        assert f"| {name} |" in table
        assert set(b.caps.recurrences) <= set(engine.RECURRENCES)
