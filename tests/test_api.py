"""Public API: validation at the entry, drop-in behaviour, agreement of the CPU backends."""

from __future__ import annotations

import pytest
import torch

import sdtw
from sdtw.distances import pairwise as pairwise_cost
from tests.conftest import GAMMAS, RTOL, SHAPES, randn, rel_err


def _pair(rng, B, N, M, D, dtype=torch.float64):
    x = randn(rng, B, N, D, dtype=dtype).requires_grad_()
    y = randn(rng, B, M, D, dtype=dtype).requires_grad_()
    return x, y


def _value_and_grads(x, y, go, **kw):
    v = sdtw.softdtw(x, y, **kw)
    gx, gy = torch.autograd.grad(v, (x, y), go)
    return v, gx, gy


@pytest.mark.parametrize("B,N,M,D", SHAPES)
@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("bandwidth", [None, 2])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_cpu_matches_reference(rng, B, N, M, D, gamma, bandwidth, normalize, dtype):
    x, y = _pair(rng, B, N, M, D, dtype)
    go = randn(rng, B, dtype=dtype)
    kw = dict(gamma=gamma, bandwidth=bandwidth, normalize=normalize)
    ref = _value_and_grads(x, y, go, backend="reference", **kw)
    out = _value_and_grads(x, y, go, backend="cpu", **kw)
    for a, b in zip(out, ref, strict=True):
        assert a.dtype == dtype
        assert rel_err(a, b) <= RTOL[dtype]


@pytest.mark.parametrize("dist", ["euclidean", "l1", "callable"])
def test_distances_and_cost_entry(rng, dist):
    x, y = _pair(rng, 2, 5, 6, 3)
    fn = (lambda a, b: torch.cdist(a, b, p=3.0)) if dist == "callable" else dist
    v = sdtw.softdtw(x, y, gamma=0.1, dist=fn, backend="cpu")
    cost = pairwise_cost(x, y, fn)
    v2 = sdtw.softdtw_from_cost(cost, gamma=0.1, backend="reference")
    assert rel_err(v, v2) < 1e-10
    v.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()


@pytest.mark.parametrize("B,N,M,D", [(2, 5, 7, 3), (1, 1, 1, 1), (3, 4, 2, 6)])
def test_sqeuclidean_cost_and_its_backward(rng, B, N, M, D):
    """The squared-Euclidean cost's own backward against autograd of the broadcast formula,
    with an upstream gradient other than ones; then gradcheck and double backward."""
    x, y = _pair(rng, B, N, M, D)
    cost = pairwise_cost(x, y, "sqeuclidean")
    ref = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
    assert rel_err(cost, ref) < 1e-13
    g = randn(rng, B, N, M)
    got = torch.autograd.grad(cost, (x, y), g)
    want = torch.autograd.grad(ref, (x, y), g)
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) < 1e-13
    fn = lambda a, b: pairwise_cost(a, b, "sqeuclidean")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, y))
    assert torch.autograd.gradgradcheck(fn, (x, y))


def test_unbatched_returns_scalar(rng):
    x, y = randn(rng, 6, 2), randn(rng, 4, 2)
    v = sdtw.softdtw(x, y)
    assert v.shape == ()
    assert torch.allclose(v, sdtw.softdtw(x[None], y[None])[0])
    assert sdtw.softdtw_from_cost(torch.rand(3, 4)).shape == ()


def test_module_matches_functional_and_repr(rng):
    x, y = _pair(rng, 3, 7, 5, 2)
    m = sdtw.SoftDTW(gamma=0.5, bandwidth=2, normalize=True)
    assert torch.equal(m(x, y), sdtw.softdtw(x, y, gamma=0.5, bandwidth=2, normalize=True))
    assert "gamma=0.5" in repr(m)


def test_normalize_is_zero_on_identical_and_works_for_n_ne_m(rng):
    x = randn(rng, 2, 6, 3)
    assert sdtw.softdtw(x, x, normalize=True).abs().max() < 1e-10
    y = randn(rng, 2, 9, 3)
    d = sdtw.softdtw(x, y, normalize=True)
    manual = sdtw.softdtw(x, y) - 0.5 * (sdtw.softdtw(x, x) + sdtw.softdtw(y, y))
    assert rel_err(d, manual) < 1e-12


def test_band_disabled_by_none_or_nonpositive(rng):
    x, y = _pair(rng, 2, 6, 6, 2)
    base = sdtw.softdtw(x, y)
    assert torch.equal(base, sdtw.softdtw(x, y, bandwidth=0))
    assert torch.equal(base, sdtw.softdtw(x, y, bandwidth=-3))
    assert not torch.equal(base, sdtw.softdtw(x, y, bandwidth=1))


def test_inputs_not_modified(rng):
    x, y = _pair(rng, 2, 5, 7, 3)
    x0, y0 = x.detach().clone(), y.detach().clone()
    sdtw.softdtw(x, y, normalize=True).sum().backward()
    assert torch.equal(x.detach(), x0) and torch.equal(y.detach(), y0)


def test_nan_propagates(rng):
    x, y = randn(rng, 2, 5, 3), randn(rng, 2, 4, 3)
    x[1, 2, 0] = float("nan")
    v = sdtw.softdtw(x, y)
    assert torch.isfinite(v[0]) and torch.isnan(v[1])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs(rng, dtype):
    """Half inputs: the loss in their dtype, equal to the float64 loss of the same (rounded)
    inputs rounded once, and gradients in their dtype within their rounding of float64's."""
    x, y = randn(rng, 2, 5, 3, dtype=dtype), randn(rng, 2, 4, 3, dtype=dtype)
    x.requires_grad_()
    v = sdtw.softdtw(x, y, gamma=0.5)
    assert v.dtype == dtype
    x64 = x.detach().double().requires_grad_()
    w = sdtw.softdtw(x64, y.double(), gamma=0.5, backend="reference")
    assert torch.equal(v, w.to(dtype))
    v.sum().backward()
    w.sum().backward()
    assert x.grad.dtype == dtype
    assert rel_err(x.grad, x64.grad) < 2 * torch.finfo(dtype).eps


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(gamma=1e-300), ValueError, "gamma"),  # (0 is exact DTW; below GAMMA_MIN not)
        (dict(gamma=-1.0), ValueError, "gamma"),
        (dict(gamma=float("nan")), ValueError, "gamma"),
        (dict(gamma=float("inf")), ValueError, "gamma"),
        (dict(gamma="1"), TypeError, "gamma"),
        (dict(bandwidth="1"), TypeError, "bandwidth"),
        (dict(dist="cosine"), ValueError, "dist"),
        (dict(backend="tpu"), ValueError, "backend"),
        (dict(fused="yes"), TypeError, "fused"),
        (dict(fused=True, backend="cpu"), ValueError, "fused=True"),
    ],
)
def test_bad_settings(rng, kwargs, exc, match):
    x, y = randn(rng, 2, 5, 3), randn(rng, 2, 4, 3)
    with pytest.raises(exc, match=match):
        sdtw.softdtw(x, y, **kwargs)


@pytest.mark.parametrize(
    "x_shape,y_shape,match",
    [
        ((2, 5, 3), (3, 4, 3), "batch sizes differ"),
        ((2, 5, 3), (2, 4, 2), "feature dimensions differ"),
        ((5,), (4,), r"\(B, N, D\)"),
        ((2, 5, 3), (4, 3), "same rank"),
        ((2, 0, 3), (2, 4, 3), "empty"),
        ((0, 5, 3), (0, 4, 3), "empty"),
        ((2, 5, 0), (2, 4, 0), "empty"),
    ],
)
def test_bad_shapes_name_the_shapes(x_shape, y_shape, match):
    with pytest.raises(ValueError, match=match) as info:
        sdtw.softdtw(torch.zeros(x_shape), torch.zeros(y_shape))
    assert str(tuple(x_shape)) in str(info.value) or "x" in str(info.value)


def test_bad_dtypes_and_types():
    with pytest.raises(TypeError, match="x must have a floating dtype"):
        sdtw.softdtw(torch.zeros(2, 3, 1, dtype=torch.int64), torch.zeros(2, 3, 1))
    with pytest.raises(TypeError, match="floating dtype"):
        sdtw.softdtw(torch.zeros(2, 3, 1, dtype=torch.complex64), torch.zeros(2, 3, 1))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        sdtw.softdtw([[0.0]], torch.zeros(1, 1))
    with pytest.raises(ValueError, match="cost must be"):
        sdtw.softdtw_from_cost(torch.zeros(2, 2, 2, 2))


def test_callable_dist_wrong_shape():
    with pytest.raises(ValueError, match="dist callable must return"):
        sdtw.softdtw(torch.zeros(2, 3, 1), torch.zeros(2, 4, 1), dist=lambda a, b: a)


def test_different_devices():
    if not torch.cuda.is_available():
        x, y = torch.zeros(1, 2, 1), torch.zeros(1, 2, 1, device="meta")
    else:
        x, y = torch.zeros(1, 2, 1), torch.zeros(1, 2, 1, device="cuda")
    with pytest.raises(ValueError, match="same device"):
        sdtw.softdtw(x, y)


def test_cuda_backend_on_cpu_tensors_is_an_error(monkeypatch):
    # (imported before the variable goes: sdtw.cuda.config reads it once, at first import,
    # and a first import without it would leave the simulator off for the tests after this)
    from sdtw import cuda as sdtw_cuda

    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr(sdtw_cuda, "simulator_enabled", lambda: False)
    monkeypatch.setattr(sdtw_cuda, "cuda_usable", lambda: (True, ""))
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        sdtw.softdtw(torch.zeros(1, 2, 1), torch.zeros(1, 2, 1), backend="cuda")


def test_import_does_not_touch_cuda():
    import subprocess
    import sys

    code = (
        "import sys, sdtw; "
        "assert 'numba.cuda' not in sys.modules and 'sdtw.cuda' not in sys.modules, "
        "sorted(m for m in sys.modules if 'cuda' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cpu_benchmark(benchmark, rng):
    """CPU path, forward + backward, B=32, N=M=128, D=8 (timed only with --benchmark-enable)."""
    x, y = _pair(rng, 32, 128, 128, 8, torch.float32)

    def step():
        x.grad = y.grad = None
        sdtw.softdtw(x, y, gamma=0.1, backend="cpu").sum().backward()

    benchmark.group = "cpu fwd+bwd B=32 N=M=128 D=8"
    benchmark(step)
    ref = sdtw.softdtw(x[:2].double(), y[:2].double(), gamma=0.1, backend="reference")
    assert rel_err(sdtw.softdtw(x[:2], y[:2], gamma=0.1, backend="cpu"), ref) < 1e-5
