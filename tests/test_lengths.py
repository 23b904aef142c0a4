"""Variable-length batches (``x_lengths`` / ``y_lengths``): every backend equals the per-pair
results on the unpadded sequences (the float64 reference), with the band, the divergence, an
upstream gradient other than ones and NaN or inf in the padding; the gradients past a pair's
lengths are exactly zero.  The CUDA kernels run under the simulator where marked, which also
checks what they skip (bands past a pair's rows, columns past its length)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sdtw
from sdtw.band import band_radius, pair_offsets, sakoe_chiba_mask
from tests.conftest import randn, requires_gpu, requires_sim

GAMMA = 0.3


def _lengths(rng, B: int, size: int, must: tuple = ()) -> torch.Tensor:
    """Random lengths in [1, size], the first ones set to ``must`` (1, size, past a
    boundary...)."""
    t = torch.as_tensor(rng.integers(1, size + 1, B), dtype=torch.int64)
    for b, v in enumerate(must):
        t[b] = min(v, size)
    return t


def _padded(rng, B, N, M, D, xl, yl, dtype, fill=float("nan")):
    """x (B, N, D), y (B, M, D) with ``fill`` past each pair's lengths."""
    x, y = randn(rng, B, N, D, dtype=dtype), randn(rng, B, M, D, dtype=dtype)
    for b in range(B):
        x[b, int(xl[b]) :] = fill
        y[b, int(yl[b]) :] = -fill if fill == float("inf") else fill
    return x, y


def _per_pair(x, y, xl, yl, g, **kw):
    """The float64 reference on each pair's unpadded sequences: values (B,) and the gradients
    of ``sum(g * values)`` (padded with zeros)."""
    B = x.shape[0]
    vals, gx, gy = [], torch.zeros(x.shape, dtype=torch.float64), torch.zeros(y.shape)
    gy = gy.double()
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        xb = x[b, :n].detach().double().requires_grad_()
        yb = y[b, :m].detach().double().requires_grad_()
        v = sdtw.softdtw(xb, yb, backend="reference", **kw)
        (v * float(g[b])).backward()
        vals.append(float(v.detach()))
        gx[b, :n], gy[b, :m] = xb.grad, yb.grad
    return torch.tensor(vals, dtype=torch.float64), gx, gy


def _check(backend, x, y, xl, yl, rtol, **kw):
    """``softdtw`` with lengths on ``backend`` against :func:`_per_pair`."""
    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    g = torch.linspace(0.5, 2.0, x.shape[0], dtype=x.dtype)
    out = sdtw.softdtw(x, y, gamma=GAMMA, backend=backend, x_lengths=xl, y_lengths=yl, **kw)
    (out * g).sum().backward()
    ref = {k: v for k, v in kw.items() if k != "fused"}
    vals, gx, gy = _per_pair(x, y, xl, yl, g, gamma=GAMMA, **ref)
    assert out.dtype == x.dtype
    np.testing.assert_allclose(out.detach().double(), vals, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(x.grad.double(), gx, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(y.grad.double(), gy, rtol=rtol, atol=rtol)
    for b in range(x.shape[0]):  # exactly zero past the lengths (NaN there included)
        assert (x.grad[b, int(xl[b]) :] == 0).all() and (y.grad[b, int(yl[b]) :] == 0).all()


# --------------------------------------------------------------------------------------------
# The CPU backends
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize(
    ("N", "M", "bandwidth", "normalize"),
    [(9, 9, None, False), (11, 7, 2, False), (6, 13, None, True), (10, 10, 1, True)],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpu_backends_equal_the_unpadded_pairs(rng, backend, N, M, bandwidth, normalize, dtype):
    B = 5
    xl, yl = _lengths(rng, B, N, (1, N, 2)), _lengths(rng, B, M, (M, 1, 2))
    x, y = _padded(rng, B, N, M, 3, xl, yl, dtype)
    rtol = 1e-10 if dtype == torch.float64 else 1e-5
    _check(backend, x, y, xl, yl, rtol, bandwidth=bandwidth, normalize=normalize)


@pytest.mark.parametrize(
    "backend",
    [
        "reference",
        "cpu",
        # (the CUDA kernels zero their copies' padding inside the captured work)
        pytest.param("cuda", marks=[requires_sim, pytest.mark.cudasim, pytest.mark.slow]),
    ],
)
def test_what_the_padding_holds_never_matters(rng, backend):
    B, N, M = 4, 8, 6
    xl, yl = _lengths(rng, B, N, (3,)), _lengths(rng, B, M, (2,))
    x, y = _padded(rng, B, N, M, 2, xl, yl, torch.float64, fill=0.0)
    outs = []
    for fill in (0.0, float("nan"), float("inf"), 1e300):
        xf, yf = x.clone(), y.clone()
        for b in range(B):
            xf[b, int(xl[b]) :], yf[b, int(yl[b]) :] = fill, fill
        xf.requires_grad_()
        v = sdtw.softdtw(xf, yf, backend=backend, x_lengths=xl, y_lengths=yl, normalize=True)
        v.sum().backward()
        outs.append((v.detach(), xf.grad))
    for v, gx in outs[1:]:
        assert torch.equal(v, outs[0][0]) and torch.equal(gx, outs[0][1])


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("bandwidth", [None, 1])
def test_from_cost_takes_each_pairs_table(rng, backend, bandwidth):
    B, N, M = 4, 7, 9
    xl, yl = _lengths(rng, B, N, (1, N)), _lengths(rng, B, M, (M, 1))
    cost = torch.as_tensor(rng.random((B, N, M)))
    for b in range(B):  # never read
        cost[b, int(xl[b]) :] = float("nan")
        cost[b, :, int(yl[b]) :] = float("nan")
    cost.requires_grad_()
    g = torch.linspace(0.5, 2.0, B, dtype=torch.float64)
    out = sdtw.softdtw_from_cost(
        cost, gamma=GAMMA, bandwidth=bandwidth, backend=backend, x_lengths=xl, y_lengths=yl
    )
    (out * g).sum().backward()
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        c = cost[b, :n, :m].detach().clone().requires_grad_()
        v = sdtw.softdtw_from_cost(c, gamma=GAMMA, bandwidth=bandwidth, backend="reference")
        (v * g[b]).backward()
        np.testing.assert_allclose(float(out[b]), float(v), rtol=1e-10)
        np.testing.assert_allclose(cost.grad[b, :n, :m], c.grad, rtol=1e-10, atol=1e-12)
        assert (cost.grad[b, n:] == 0).all() and (cost.grad[b, :, m:] == 0).all()


def test_full_lengths_are_the_plain_call(rng):
    x, y = randn(rng, 3, 6, 2), randn(rng, 3, 5, 2)
    plain = sdtw.softdtw(x, y, backend="cpu")
    for xl, yl in [([6, 6, 6], None), (None, torch.tensor([5, 5, 5])), ([6] * 3, [5] * 3)]:
        assert torch.equal(sdtw.softdtw(x, y, backend="cpu", x_lengths=xl, y_lengths=yl), plain)


def test_module_and_unbatched_inputs(rng):
    x, y = randn(rng, 7, 2), randn(rng, 5, 2)
    loss = sdtw.SoftDTW(gamma=GAMMA, backend="cpu")
    got = loss(x, y, x_lengths=4, y_lengths=torch.tensor(3))
    want = sdtw.softdtw(x[:4], y[:3], gamma=GAMMA, backend="reference")
    assert got.dim() == 0
    np.testing.assert_allclose(float(got), float(want), rtol=1e-10)


def test_pair_offsets_follow_tslearn_per_pair():
    ns, ms = np.array([5, 9, 1, 7]), np.array([9, 5, 4, 7])
    for r in (None, 0, 1, 2.7, 100):
        lo, hi = pair_offsets(ns, ms, r)
        for n, m, a, b in zip(ns, ms, lo, hi, strict=True):
            d = np.arange(m)[None, :] - np.arange(n)[:, None]
            assert np.array_equal((d >= -a) & (d <= b), sakoe_chiba_mask(n, m, r))
    assert band_radius(9, 7, None) == -1 and band_radius(9, 7, 2.7) == 2
    assert band_radius(9, 7, 1e30) == 16
    # torch tensors (the CUDA path's lengths) stay tensors, int64, with the same offsets
    for r in (None, 0, 1, 2.7, 100, 1e30):
        got = pair_offsets(torch.from_numpy(ns).int(), torch.from_numpy(ms), r)
        for t, want in zip(got, pair_offsets(ns, ms, r), strict=True):
            assert isinstance(t, torch.Tensor) and t.dtype == torch.int64
            np.testing.assert_array_equal(t.numpy(), want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)),
    bandwidth=st.sampled_from([None, 0, 1, 3]),
)
def test_property_cpu_equals_reference_for_any_lengths(data, shape, bandwidth):
    B, N, M = shape
    xl = data.draw(st.lists(st.integers(1, N), min_size=B, max_size=B))
    yl = data.draw(st.lists(st.integers(1, M), min_size=B, max_size=B))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, y = _padded(rng, B, N, M, 2, xl, yl, torch.float64)
    kw = dict(gamma=GAMMA, bandwidth=bandwidth, x_lengths=xl, y_lengths=yl)
    cpu = sdtw.softdtw(x, y, backend="cpu", **kw)
    ref = sdtw.softdtw(x, y, backend="reference", **kw)
    np.testing.assert_allclose(cpu, ref, rtol=1e-10)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

_BAD = [
    (dict(x_lengths=[1.5, 2]), TypeError, ["x_lengths", "integers"]),
    (dict(x_lengths=torch.tensor([1.0, 2.0])), TypeError, ["x_lengths", "float32"]),
    (dict(y_lengths=torch.tensor([True, True])), TypeError, ["y_lengths", "bool"]),
    (dict(x_lengths="12"), TypeError, ["x_lengths", "'12'", "str"]),
    (dict(x_lengths=[3]), ValueError, ["x_lengths", "(B,) = (2,)", "(1,)"]),
    (dict(y_lengths=torch.ones(2, 1, dtype=torch.int64)), ValueError, ["y_lengths", "(2, 1)"]),
    (dict(x_lengths=[0, 3]), ValueError, ["x_lengths", "between 1 and", "5", "got 0"]),
    (dict(x_lengths=[6, 3]), ValueError, ["x_lengths", "padded length 5", "got 6"]),
    (dict(y_lengths=[-1, 3]), ValueError, ["y_lengths", "padded length 4", "got -1"]),
]


@pytest.mark.parametrize(("kw", "err", "words"), _BAD)
def test_bad_lengths_name_the_argument(rng, kw, err, words):
    x, y = randn(rng, 2, 5, 3), randn(rng, 2, 4, 3)
    with pytest.raises(err) as info:
        sdtw.softdtw(x, y, backend="cpu", **kw)
    for w in words:
        assert w in str(info.value), (w, str(info.value))
    with pytest.raises(err):
        sdtw.softdtw_from_cost(torch.ones(2, 5, 4), backend="cpu", **kw)


# --------------------------------------------------------------------------------------------
# The CUDA kernels (simulator): every variant the rules can choose
# --------------------------------------------------------------------------------------------

_SLOW = pytest.mark.slow  # (tens of seconds of simulator each: nox -s slow)
_SIM_CASES = [
    # (N, M, D, dtype, bandwidth, normalize, fused, overrides)
    (33, 40, 3, torch.float64, None, False, False, {}),
    pytest.param(34, 34, 2, torch.float64, 3, True, True, {}, marks=_SLOW),
    pytest.param(
        34,
        34,
        3,
        torch.float32,
        2,
        False,
        True,
        {"mover": True, "backward_mover": True},
        marks=_SLOW,
    ),
    pytest.param(
        33,
        40,
        5,
        torch.float32,
        None,
        False,
        True,
        {"backward_mover": True, "sweep_grads": True},
        marks=_SLOW,
    ),
    pytest.param(40, 33, 3, torch.float32, 4, False, False, {"backward_mover": True}, marks=_SLOW),
]


@requires_sim
@pytest.mark.cudasim
@pytest.mark.parametrize(
    ("N", "M", "D", "dtype", "bandwidth", "normalize", "fused", "ov"), _SIM_CASES
)
def test_cuda_equals_the_unpadded_pairs(rng, N, M, D, dtype, bandwidth, normalize, fused, ov):
    from sdtw.cuda import config

    B = 3
    # lengths 1, one past a band of 32 rows / a chunk of 32 columns, and the padded size
    xl = _lengths(rng, B, N, (N, 1, 33))
    yl = _lengths(rng, B, M, (33, M, 1))
    x, y = _padded(rng, B, N, M, D, xl, yl, dtype)
    rtol = 1e-10 if dtype == torch.float64 else 1e-5
    with config.overrides(**ov):
        _check("cuda", x, y, xl, yl, rtol, bandwidth=bandwidth, normalize=normalize, fused=fused)


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (tens of seconds of simulator: nox -s slow)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_from_cost_and_forward_only(rng, dtype):
    B, N, M = 3, 35, 33
    xl, yl = _lengths(rng, B, N, (2, 33, N)), _lengths(rng, B, M, (M, 33, 1))
    x, y = _padded(rng, B, N, M, 2, xl, yl, dtype, fill=0.0)
    cost = torch.cdist(x, y) ** 2
    for b in range(B):
        cost[b, int(xl[b]) :] = float("nan")
        cost[b, :, int(yl[b]) :] = float("nan")
    cost.requires_grad_()
    kw = dict(gamma=GAMMA, x_lengths=xl, y_lengths=yl)
    out = sdtw.softdtw_from_cost(cost, backend="cuda", **kw)
    out.sum().backward()
    want = sdtw.softdtw_from_cost(cost.detach().double().requires_grad_(), backend="cpu", **kw)
    rtol = 1e-10 if dtype == torch.float64 else 1e-5
    np.testing.assert_allclose(out.detach().double(), want.detach(), rtol=rtol)
    cg = cost.detach().double().requires_grad_()
    sdtw.softdtw_from_cost(cg, backend="cpu", **kw).sum().backward()
    np.testing.assert_allclose(cost.grad.double(), cg.grad, rtol=rtol, atol=rtol)
    for b in range(B):
        assert (cost.grad[b, int(xl[b]) :] == 0).all()
        assert (cost.grad[b, :, int(yl[b]) :] == 0).all()
    with torch.no_grad():  # the fused forward without gradients (distances in the kernel)
        fwd = sdtw.softdtw(x, y, backend="cuda", fused=True, **kw)
    ref = sdtw.softdtw(x.double(), y.double(), backend="cpu", **kw)
    np.testing.assert_allclose(fwd.double(), ref, rtol=rtol)


@requires_sim
@pytest.mark.cudasim
def test_cuda_kernels_skip_what_is_past_the_lengths(rng, monkeypatch):
    """The boundary rows show what ran: a band publishes its last row for the band below
    (forward) and its first row's hand-overs for the band above (backward), column by column.
    Bands past a pair's rows publish nothing and a band stops at the pair's last column."""
    from sdtw.cuda import _launch
    from sdtw.cuda import kernels as K

    made = []
    boundary = _launch._boundary

    def keep(*args, **kw):
        bufs = boundary(*args, **kw)
        made.extend(bufs)
        return bufs

    monkeypatch.setattr(_launch, "_boundary", keep)
    B, N, M = 2, 70, 40
    xl, yl = torch.tensor([33, 70]), torch.tensor([9, 40])
    cost = torch.as_tensor(rng.random((B, N, M)))
    lens = torch.cat([xl, yl])
    out, E, _ = _launch.forward_backward(cost, None, GAMMA, band_radius(N, M, None), 0, lens)
    nb = -(-N // K.TB)
    fwd, bwd = (b.tensor() for b in made)
    for buf, first_writer in ((fwd, 0), (bwd, 1)):
        rows = buf[: B * nb * (M + 1)].view(B, nb, M + 1)
        assert torch.equal(buf[B * nb * (M + 1) : -1], lens)  # the lengths, before the ticket
        written = rows != K.SENTINEL
        # pair 0: 33 rows = bands 0 and 1; 9 columns
        assert not written[0, 2:].any()
        for k in range(first_writer, 2):  # (the forward's band 1 publishes row 32, the last)
            assert written[0, k, :9].all() and not written[0, k, 9:].any()
        # pair 1: every band, every column but the padding column
        assert written[1, first_writer:, :M].all()
        assert not written[:, :first_writer].any()  # (the backward's top band hands nothing)
    assert int(fwd[-1] - K.SENTINEL) == B * nb  # every block took its ticket
    for b in range(B):
        n, m = int(xl[b]), int(yl[b])
        c = cost[b, :n, :m].clone().requires_grad_()
        v = sdtw.softdtw_from_cost(c, gamma=GAMMA, backend="reference")
        v.backward()
        np.testing.assert_allclose(float(out[b]), float(v.detach()), rtol=1e-10)
        np.testing.assert_allclose(E[b, :n, :m], c.grad, atol=1e-12)
        assert (E[b, n:] == 0).all() and (E[b, :, m:] == 0).all()


# --------------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(("D", "bandwidth", "normalize"), [(3, None, False), (40, 20, True)])
def test_gpu_equals_the_unpadded_pairs(rng, dtype, fused, D, bandwidth, normalize):
    B, N, M = 6, 97, 130
    xl = _lengths(rng, B, N, (N, 1, 33, 64))
    yl = _lengths(rng, B, M, (M, 65, 1, 96))
    x, y = _padded(rng, B, N, M, D, xl, yl, dtype)
    rtol = 1e-10 if dtype == torch.float64 else 1e-5
    _check_gpu(x, y, xl, yl, rtol, bandwidth=bandwidth, normalize=normalize, fused=fused)


def _check_gpu(x, y, xl, yl, rtol, **kw):
    """:func:`_check` with the inputs on the GPU (lengths too, every other call)."""
    xc, yc = x.cuda().requires_grad_(), y.cuda().requires_grad_()
    g = torch.linspace(0.5, 2.0, x.shape[0], dtype=x.dtype)
    lx, ly = (xl.cuda(), yl) if int(xl.sum()) % 2 else (xl, yl.cuda())
    out = sdtw.softdtw(xc, yc, gamma=GAMMA, backend="cuda", x_lengths=lx, y_lengths=ly, **kw)
    (out * g.cuda()).sum().backward()
    ref = {k: v for k, v in kw.items() if k != "fused"}
    vals, gx, gy = _per_pair(x, y, xl, yl, g, gamma=GAMMA, **ref)
    # (absolute errors to the scale of each result: float32 costs of D = 40 features carry
    # their rounding into the gradient's large entries)
    for got, want in ((out, vals), (xc.grad, gx), (yc.grad, gy)):
        want = np.asarray(want)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got.detach().double().cpu(), want, rtol=rtol, atol=rtol * scale)


@requires_gpu
@pytest.mark.cuda
def test_gpu_library_graphs_take_the_lengths_as_an_input(rng):
    """Repeated calls of one shape replay one library graph whatever the lengths (they are
    copied in, not captured): each call gives what the same call gives eagerly."""
    from sdtw.cuda import _graphs

    B, N, M, D = 8, 64, 48, 4
    _graphs.clear_graphs()
    calls = []
    for _ in range(6):
        xl, yl = _lengths(rng, B, N), _lengths(rng, B, M)
        x, y = _padded(rng, B, N, M, D, xl, yl, torch.float32)
        xc = x.cuda().requires_grad_()
        out = sdtw.softdtw(xc, y.cuda(), x_lengths=xl.cuda(), y_lengths=yl.cuda())
        out.sum().backward()
        calls.append((x, y, xl, yl, out.detach().clone(), xc.grad.clone()))
    assert _graphs.graph_count() == 1
    _graphs.set_graphs(False)
    try:
        for x, y, xl, yl, out, gx in calls:
            xc = x.cuda().requires_grad_()
            eager = sdtw.softdtw(xc, y.cuda(), x_lengths=xl, y_lengths=yl)
            eager.sum().backward()
            assert torch.equal(eager.detach(), out) and torch.equal(xc.grad, gx)
    finally:
        _graphs.set_graphs(True)
