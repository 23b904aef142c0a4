"""Adversarial inputs at the public API: every case gives the reference's answer or a
``TypeError`` / ``ValueError`` / ``NotImplementedError`` that names the argument and shows what
it got.  On the CPU backends here; the CUDA kernels under the simulator where marked."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdtw
from tests.conftest import randn, rel_err, requires_sim

REPO = Path(__file__).resolve().parent.parent


def _xy(rng, B=2, N=5, M=4, D=3, dtype=torch.float64):
    return randn(rng, B, N, D, dtype=dtype), randn(rng, B, M, D, dtype=dtype)


# --------------------------------------------------------------------------------------------
# Arguments that must be rejected: (keywords, error type, words the message must contain)
# --------------------------------------------------------------------------------------------

_BAD = [
    (dict(normalize="False"), TypeError, ["normalize", "'False'", "str"]),
    (dict(normalize="no"), TypeError, ["normalize", "'no'"]),
    (dict(normalize=1), TypeError, ["normalize", "int"]),
    (dict(normalize=None), TypeError, ["normalize", "None"]),
    (dict(normalize=torch.tensor([1.0])), TypeError, ["normalize", "Tensor"]),
    (dict(bandwidth=True), TypeError, ["bandwidth", "True", "bool"]),
    (dict(bandwidth="3"), TypeError, ["bandwidth", "'3'", "str"]),
    (dict(bandwidth=float("nan")), ValueError, ["bandwidth", "nan"]),
    (dict(bandwidth=[2]), TypeError, ["bandwidth", "list"]),
    (dict(gamma=True), TypeError, ["gamma", "bool"]),
    (dict(gamma="1"), TypeError, ["gamma", "'1'"]),
    (dict(gamma=float("-inf")), ValueError, ["gamma", "-inf"]),
    (dict(gamma=-0.5), ValueError, ["gamma", "-0.5"]),
    (dict(gamma=float("nan")), ValueError, ["gamma", "nan"]),
    (dict(gamma=1e-310), ValueError, ["gamma", "1e-310", "between 1e-200 and 1e+200"]),
    (dict(gamma=1e250), ValueError, ["gamma", "1e+250"]),
    (dict(fused=1), TypeError, ["fused", "1", "int"]),
    (dict(fused="yes"), TypeError, ["fused", "'yes'"]),
    (dict(backend="gpu"), ValueError, ["backend", "'gpu'"]),
    (dict(backend=None), ValueError, ["backend", "None"]),
    (dict(dist="cosine"), ValueError, ["dist", "'cosine'"]),
    (dict(dist=3), ValueError, ["dist", "int"]),
    (dict(fused=True, backend="cpu"), ValueError, ["fused=True", "backend='cpu'"]),
]


@pytest.mark.parametrize("kw, exc, words", _BAD, ids=[repr(k) for k, _, _ in _BAD])
@pytest.mark.parametrize("entry", ["function", "module", "barycenter"])
def test_bad_argument_is_named(rng, kw, exc, words, entry):
    """Each bad setting fails at every entry (the functional API, the module at construction,
    the barycenter) with its name and what it got, never read by truthiness."""
    x, y = _xy(rng)
    if entry == "barycenter" and set(kw) & {"normalize", "dist"}:
        pytest.skip("the barycenter takes no normalize or dist")
    with pytest.raises(exc) as info:
        if entry == "function":
            sdtw.softdtw(x, y, **kw)
        elif entry == "module":
            sdtw.SoftDTW(**kw)(x, y)
        else:
            sdtw.softdtw_barycenter(x, max_iter=1, **kw)
    for word in words:
        assert word in str(info.value), (str(info.value), word)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(verbose="yes"), ["verbose", "'yes'"]),
        (dict(early_stopping=0), ["early_stopping", "int"]),
        (dict(return_history="True"), ["return_history", "'True'"]),
    ],
)
def test_barycenter_flags_are_typed(rng, kw, words):
    x, _ = _xy(rng)
    with pytest.raises(TypeError) as info:
        sdtw.softdtw_barycenter(x, max_iter=1, **kw)
    for word in words:
        assert word in str(info.value)


def test_flags_take_numpy_bools(rng):
    x, y = _xy(rng)
    want = sdtw.softdtw(x, y, normalize=True)
    assert torch.equal(sdtw.softdtw(x, y, normalize=np.bool_(True)), want)


def test_module_setting_is_validated_when_set(rng):
    loss = sdtw.SoftDTW(gamma=0.5)
    with pytest.raises(TypeError, match="normalize"):
        loss.normalize = "False"
    loss.gamma = 0.25
    x, y = _xy(rng)
    assert torch.equal(loss(x, y), sdtw.softdtw(x, y, gamma=0.25))


# --------------------------------------------------------------------------------------------
# The band as a radius
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_bandwidth_is_a_real_radius(rng, backend):
    """A real radius counts by its integer part (|i - j| <= 2.5 is |i - j| <= 2); a radius past
    the table, however large (2**63 - 1, 10**30, 1e30, inf), is no band, as are None and 0."""
    x, y = _xy(rng, N=6, M=6)
    kw = dict(gamma=0.3, backend=backend)
    assert torch.equal(
        sdtw.softdtw(x, y, bandwidth=2.5, **kw), sdtw.softdtw(x, y, bandwidth=2, **kw)
    )
    narrow = sdtw.softdtw(x, y, bandwidth=0.5, **kw)  # the diagonal only
    assert rel_err(narrow, sdtw.softdtw(x, y, bandwidth=None, **kw)) > 1e-6
    cost = sdtw.distances.sqeuclidean(x, y)
    assert rel_err(narrow, torch.diagonal(cost, dim1=1, dim2=2).sum(-1)) < 1e-12
    free = sdtw.softdtw(x, y, **kw)
    for huge in (2**63 - 1, 10**30, 1e30, math.inf, 0, -3):
        assert torch.equal(sdtw.softdtw(x, y, bandwidth=huge, **kw), free), huge


def test_band_helpers_take_what_softdtw_takes():
    assert sdtw.band_offsets(5, 5, 2.5) == sdtw.band_offsets(5, 5, 2) == (2, 2)
    assert sdtw.band_offsets(5, 5, 2**63 - 1) == sdtw.band_offsets(5, 5, None) == (10, 10)
    assert sdtw.band_offsets(4, 6, 1) == (1, 3)
    mask = sdtw.sakoe_chiba_mask(4, 4, 1.9)
    assert mask.sum() == 4 + 2 * 3 and mask[0, 1] and not mask[0, 2]


# --------------------------------------------------------------------------------------------
# dist: names and callables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("SQEUCLIDEAN", "sqeuclidean"),
        ("sq_euclidean", "sqeuclidean"),
        ("Squared_Euclidean", "sqeuclidean"),
        ("Euclidean", "euclidean"),
        ("L1", "l1"),
        ("manhattan", "l1"),
    ],
)
def test_dist_spellings(rng, name, canonical):
    x, y = _xy(rng)
    want = sdtw.softdtw(x, y, dist=canonical, backend="cpu")
    assert torch.equal(sdtw.softdtw(x, y, dist=name, backend="cpu"), want)
    assert sdtw.SoftDTW(dist=name).dist == canonical


@pytest.mark.parametrize(
    "make, exc, words",
    [
        (lambda c: c.long(), TypeError, ["floating", "torch.int64"]),
        (lambda c: c > 0, TypeError, ["floating", "torch.bool"]),
        (lambda c: c.numpy(), TypeError, ["torch.Tensor", "ndarray"]),
        (lambda c: c[:, :-1], ValueError, ["(B, N, M) = (2, 5, 4)", "(2, 4, 4)"]),
        (lambda c: c.to("meta"), ValueError, ["on cpu", "meta"]),
    ],
)
def test_callable_dist_result_is_checked(rng, make, exc, words):
    """A callable ``dist`` must return a floating tensor (B, N, M) on x's device: an integer
    or boolean result would truncate the loss."""
    x, y = _xy(rng)

    def dist(a, b):
        return make(sdtw.distances.sqeuclidean(a, b).detach())

    with pytest.raises(exc) as info:
        sdtw.softdtw(x, y, dist=dist)
    for word in words:
        assert word in str(info.value), (str(info.value), word)


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_callable_dist_of_another_float_dtype(rng, backend):
    """A float64 cost for float32 inputs: the soft-DTW runs on it as returned (float64), and
    the loss comes back in x's dtype; gradients flow back through the cast."""
    x, y = _xy(rng, dtype=torch.float32)
    x.requires_grad_()
    v = sdtw.softdtw(x, y, dist=lambda a, b: sdtw.distances.sqeuclidean(a.double(), b.double()),
                     gamma=0.1, backend=backend)  # fmt: skip
    assert v.dtype == torch.float32
    want = sdtw.softdtw(x.detach().double(), y.double(), gamma=0.1, backend="reference")
    assert rel_err(v, want) < 1e-6
    (g,) = torch.autograd.grad(v.sum(), x)
    assert g.dtype == torch.float32 and torch.isfinite(g).all()


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, y, exc, words",
    [
        (torch.zeros(2, 3, 1, dtype=torch.int64), torch.zeros(2, 3, 1), TypeError, ["x", "int64"]),
        (torch.zeros(2, 3, 1), torch.zeros(2, 3, 1, dtype=torch.bool), TypeError, ["y", "bool"]),
        (torch.zeros(2, 3, 1, dtype=torch.complex64), torch.zeros(2, 3, 1), TypeError, ["x"]),
        ([[0.0]], torch.zeros(1, 1), TypeError, ["x", "torch.Tensor", "list"]),
        (torch.zeros(3), torch.zeros(3), ValueError, ["(3,)"]),
        (torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), ValueError, ["(1, 2, 3, 4)"]),
        (torch.zeros(2, 3, 1), torch.zeros(3, 3, 1), ValueError, ["B=2", "B=3"]),
        (torch.zeros(2, 3, 1), torch.zeros(2, 3, 2), ValueError, ["D=1", "D=2"]),
        (torch.zeros(2, 0, 1), torch.zeros(2, 3, 1), ValueError, ["empty", "(2, 0, 1)"]),
        (torch.zeros(2, 3), torch.zeros(1, 3, 3), ValueError, ["same rank"]),
        (torch.zeros(1, 2, 1), torch.zeros(1, 2, 1, device="meta"), ValueError, ["same device"]),
    ],
)
def test_bad_sequences_are_named(x, y, exc, words):
    with pytest.raises(exc) as info:
        sdtw.softdtw(x, y)
    for word in words:
        assert word in str(info.value), (str(info.value), word)


@pytest.mark.parametrize(
    "cost, exc, words",
    [
        (torch.zeros(2, 3, 4, dtype=torch.int32), TypeError, ["cost", "int32"]),
        (torch.zeros(3), ValueError, ["cost", "(3,)"]),
        (torch.zeros(2, 0, 4), ValueError, ["empty", "(2, 0, 4)"]),
        (np.zeros((2, 3, 4)), TypeError, ["cost", "torch.Tensor", "ndarray"]),
    ],
)
def test_bad_cost_is_named(cost, exc, words):
    with pytest.raises(exc) as info:
        sdtw.softdtw_from_cost(cost)
    for word in words:
        assert word in str(info.value), (str(info.value), word)


def test_barycenter_on_a_missing_gpu_is_named(rng):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    x, _ = _xy(rng)
    with pytest.raises(ValueError, match=r"device='cuda' but no CUDA GPU"):
        sdtw.softdtw_barycenter(x, device="cuda", max_iter=1)
    with pytest.raises(ValueError, match="device must name a torch device"):
        sdtw.softdtw_barycenter(x, device="gpu0", max_iter=1)


# --------------------------------------------------------------------------------------------
# Special values: one semantics on every backend
# --------------------------------------------------------------------------------------------

# (The simulator runs the kernels' float arithmetic in numpy, which warns on inf - inf where a
# GPU computes NaN silently: those warnings are ignored there.)
_SIM = [
    pytest.mark.cudasim,
    requires_sim,
    pytest.mark.filterwarnings("ignore:.*(invalid value|overflow|divide by zero):RuntimeWarning"),
]
_BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=_SIM)]


def _cost_with(rng, where, value):
    cost = torch.as_tensor(rng.random((2, 5, 6)))
    cost[(0, *where)] = value
    return cost


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize(
    "where, value, expect",
    [
        ((2, 3), math.nan, "nan"),  # NaN inside the band: that pair NaN
        ((2, 3), -math.inf, "nan"),  # -inf: outside the domain, NaN
        ((4, 5), -math.inf, "-inf"),  # ... but -inf at the last cell is the value
        ((2, 3), math.inf, "finite"),  # a blocked cell
        ((0, 0), math.inf, "inf"),  # no finite path
        ((0, 5), math.nan, "finite"),  # NaN outside the band (bandwidth 1) never used
    ],
)
def test_special_costs(rng, backend, where, value, expect):
    """A special value in pair 0's cost: the value the semantics give (on every backend), and
    pair 1 untouched (the reference's value)."""
    cost = _cost_with(rng, where, value)
    band = 1 if where == (0, 5) else None
    got = sdtw.softdtw_from_cost(cost, gamma=0.3, bandwidth=band, backend=backend)
    want = sdtw.softdtw_from_cost(cost[1:], gamma=0.3, bandwidth=band, backend="reference")
    assert rel_err(got[1:], want) < 1e-12
    v = float(got[0])
    if expect == "nan":
        assert math.isnan(v)
    elif expect == "finite":
        assert math.isfinite(v)
        ref = sdtw.softdtw_from_cost(cost[:1], gamma=0.3, bandwidth=band, backend="reference")
        assert abs(v - float(ref[0])) <= 1e-12 * max(1.0, abs(v))
    else:
        assert v == float(expect)


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e160])
def test_special_sequences(rng, backend, value):
    """NaN in a pair's sequences gives that pair NaN.  An infinite feature makes the cells it
    touches NaN or +inf (``|x|^2 + |y|^2 - 2 x.y``: inf - inf or inf + inf, by the signs), so
    the pair is NaN or +inf, never finite, and the same on every backend; values whose squared
    distances overflow float64 (1e160) give +inf (no finite path).  The other pair keeps its
    value."""
    x, y = _xy(rng)
    x[0, 2, 1] = value
    if value == 1e160:
        x[0] = 1e160
    got = sdtw.softdtw(x, y, gamma=0.5, backend=backend)
    want = sdtw.softdtw(x, y, gamma=0.5, backend="reference")
    assert rel_err(got[1:], want[1:]) < 1e-12
    v, w = float(got[0]), float(want[0])
    if math.isnan(value):
        assert math.isnan(v)
    elif value == 1e160:
        assert v == math.inf
    else:
        assert not math.isfinite(v) and (math.isnan(v) == math.isnan(w)) and (v == w or v != v)


@pytest.mark.parametrize("backend", _BACKENDS)
@pytest.mark.parametrize("gamma", [1e-200, 1e-5, 1e200])
def test_extreme_gammas_agree(rng, backend, gamma):
    """The ends of gamma's range give the reference's values (a loss of about
    ``-gamma log(paths)`` at 1e200)."""
    x, y = _xy(rng)
    got = sdtw.softdtw(x, y, gamma=gamma, backend=backend)
    want = sdtw.softdtw(x, y, gamma=gamma, backend="reference")
    assert torch.isfinite(got).all()
    assert torch.allclose(got, want, rtol=1e-12, atol=0.0)


# --------------------------------------------------------------------------------------------
# Second derivatives: refused, with one message, on every backend
# --------------------------------------------------------------------------------------------

# (the CUDA paths: tens of seconds of simulator kernels each, gradgradcheck differentiating
# numerically first; nox -s slow runs them)
_PATHS = [
    ("reference", None),
    ("cpu", None),
    pytest.param("cuda", True, marks=[*_SIM, pytest.mark.slow]),
    pytest.param("cuda", False, marks=[*_SIM, pytest.mark.slow]),
]


@pytest.mark.parametrize("backend, fused", _PATHS)
def test_double_backward_raises(rng, backend, fused):
    """gradgradcheck, a gradient taken with create_graph=True and differentiated, and a
    double backward through the cost all raise the same clear error (the first-order gradient
    itself stays right).  Tiny inputs: gradgradcheck differentiates numerically first, two
    backward passes per element of x."""
    x = randn(rng, 1, 3, 1).requires_grad_()
    y = randn(rng, 1, 4, 1)
    kw = dict(backend=backend, fused=fused, gamma=0.5)
    with pytest.raises(RuntimeError, match="second derivatives of soft-DTW"):
        torch.autograd.gradgradcheck(lambda a: sdtw.softdtw(a, y, **kw), (x,))
    v = sdtw.softdtw(x, y, **kw).sum()
    (g,) = torch.autograd.grad(v, x, create_graph=True)
    (g_plain,) = torch.autograd.grad(sdtw.softdtw(x, y, **kw).sum(), x)
    assert torch.equal(g.detach(), g_plain)
    with pytest.raises(RuntimeError, match=f"second derivatives.*backend '{backend}'"):
        g.pow(2).sum().backward()
    cost = torch.as_tensor(rng.random((1, 3, 4))).requires_grad_()
    v = sdtw.softdtw_from_cost(cost, backend=backend, gamma=0.5).sum()
    (gc,) = torch.autograd.grad(v, cost, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivatives"):
        torch.autograd.grad(gc.sum(), cost)


@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_first_derivatives_still_check(rng, backend):
    x = randn(rng, 1, 4, 2).requires_grad_()
    y = randn(rng, 1, 5, 2).requires_grad_()
    fn = lambda a, b: sdtw.softdtw(a, b, backend=backend, gamma=0.5)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, y))


# --------------------------------------------------------------------------------------------
# Threads, and the paper's library's names
# --------------------------------------------------------------------------------------------

_THREADS = """
import threading, torch, sdtw
errors = []
def work():
    try:
        for _ in range(3):
            x = torch.randn(16, 64, 3, requires_grad=True)
            sdtw.softdtw(x, torch.randn(16, 64, 3), backend="cpu").sum().backward()
    except Exception as exc:
        errors.append(exc)
threads = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("ok" if not errors else errors)
"""


@pytest.mark.slow
def test_parallel_cpu_path_under_workqueue_threads():
    """Four Python threads on the parallel CPU path with Numba's ``workqueue`` threading layer
    (which aborts the process on concurrent parallel regions): the parallel kernels are
    serialised, the process finishes.  In a child process (an abort would end this one)."""
    env = {"NUMBA_THREADING_LAYER": "workqueue", "PATH": "/usr/bin:/bin"}
    res = subprocess.run(
        [sys.executable, "-c", _THREADS],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_the_papers_public_names(rng):
    """The names the paper's library's README uses exist with compatible keywords."""
    x, y = _xy(rng)
    loss = sdtw.SoftDTW(gamma=1.0, bandwidth=None, normalize=False, dist="sqeuclidean", fused=None)
    assert loss(x, y).shape == (2,)
    assert sdtw.softdtw(x, y, gamma=0.5).shape == (2,)
    assert sdtw.distances.sqeuclidean(x, y).shape == (2, 5, 4)
    X = randn(rng, 3, 6, 2)
    kw = dict(gamma=1.0, weights=None, max_iter=3, lr=0.1, init=None, verbose=False)
    kw |= dict(early_stopping=True, patience=10, tol=1e-5)
    Z = sdtw.softdtw_barycenter(X, device="cpu", fused=None, **kw)
    Zc = sdtw.softdtw_barycenter_cpu(X, **kw)
    assert Z.shape == Zc.shape == (6, 2) and torch.equal(Z, Zc)
    with pytest.raises(TypeError, match="device"):
        sdtw.softdtw_barycenter_cpu(X, device="cpu")


# --------------------------------------------------------------------------------------------
# Property: every backend gives the same value (and gradient, where the value is finite) on
# costs drawn with special values among ordinary ones
# --------------------------------------------------------------------------------------------

# (+-1e6, not larger: the reference's backward is the published form, which loses ``eps |R| /
# gamma`` to cancellation, exactly what the fast backends avoid; at gamma = 1e-3 and |R| = 1e6
# that is 2e-7 of an exponent, inside the tolerance)
_SPECIAL = [math.nan, math.inf, -math.inf, 1e6, -1e6, 0.0]


def _same(a: torch.Tensor, b: torch.Tensor, rtol: float) -> bool:
    """Equal as the semantics need: NaN where the other is NaN, the same infinities, finite
    values within ``rtol`` (relative to the larger magnitude, and 1e-12 absolute)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    if not torch.equal(a.isnan(), b.isnan()):
        return False
    ok = ~a.isnan()
    a, b = a[ok], b[ok]
    if not torch.equal(a.isinf(), b.isinf()) or not torch.equal(a[a.isinf()], b[b.isinf()]):
        return False
    fin = torch.isfinite(a)
    scale = torch.maximum(a[fin].abs(), b[fin].abs()).clamp_min(1.0)
    return bool(((a[fin] - b[fin]).abs() <= rtol * scale + 1e-12).all())


def _backends() -> list[str]:
    from tests.conftest import SIMULATOR

    return ["reference", "cpu", "cuda"] if SIMULATOR else ["reference", "cpu"]


# (about a minute of simulator kernels on one core: nox -s slow runs it, not nox -s tests)
@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.filterwarnings("ignore:.*(invalid value|overflow|divide by zero):RuntimeWarning")
def test_backends_agree_on_special_values(data):
    """Random costs (B <= 2, N, M <= 5) with NaN, +-inf, +-1e6 and zeros among values in
    [-5, 10], gammas from 1e-3 to 10, with and without a band: the reference, the CPU backend
    and the CUDA kernels (simulator) give the same values (NaN, +-inf or finite alike), and
    where the value is finite the same gradient (E times an upstream gradient)."""
    B = data.draw(st.integers(1, 2), label="B")
    N = data.draw(st.integers(1, 5), label="N")
    M = data.draw(st.integers(1, 5), label="M")
    ordinary = st.floats(-5.0, 10.0, allow_nan=False)
    cells = st.one_of(ordinary, ordinary, ordinary, st.sampled_from(_SPECIAL))
    values = data.draw(st.lists(cells, min_size=B * N * M, max_size=B * N * M), label="cost")
    gamma = data.draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0]), label="gamma")
    bandwidth = data.draw(st.sampled_from([None, 1, 2.5]), label="bandwidth")
    cost = torch.tensor(values, dtype=torch.float64).reshape(B, N, M)
    go = torch.linspace(0.5, 1.5, B, dtype=torch.float64)
    got = {}
    for backend in _backends():
        c = cost.clone().requires_grad_()
        v = sdtw.softdtw_from_cost(c, gamma=gamma, bandwidth=bandwidth, backend=backend)
        (g,) = torch.autograd.grad(v, c, go)
        got[backend] = (v.detach(), g)
    ref_v, ref_g = got["reference"]
    # (a weight exp((R - R_pred - cost) / gamma) carries R's roundings over gamma: with costs
    # of 1e6 and gamma 1e-3 the float64 reference itself is off by 1.2e-7 on a forced path)
    total = cost[torch.isfinite(cost)].abs().sum().item()
    rtol_g = 1e-7 + 8 * 2.0**-52 * total / gamma
    for backend, (v, g) in got.items():
        assert _same(v, ref_v, 1e-9), (backend, v, ref_v)
        fin = torch.isfinite(ref_v)
        assert _same(g[fin], ref_g[fin], rtol_g), (backend, g[fin], ref_g[fin])
