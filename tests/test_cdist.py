"""``sdtw.cdist``: equal to the loop of pair calls (values and gradients) for every option on
every backend (CUDA in the simulator, tiny), the symmetric case, lengths, the divergence and
exact DTW; chunks, progress bar and errors."""

from __future__ import annotations

import pytest
import torch

import sdtw
from tests.conftest import SIMULATOR, randn, rel_err, requires_gpu

_SIM = pytest.mark.skipif(not SIMULATOR, reason="needs NUMBA_ENABLE_CUDASIM=1")
BACKENDS = ["reference", "cpu", pytest.param("cuda", marks=_SIM)]


def loop(X, Y, xl=None, yl=None, **kw) -> torch.Tensor:
    """The matrix by the pair calls (the definition): every pair ``(X[a], Y[b])`` as one
    batched call of B1 B2 pairs, with the inputs expanded."""
    B1, B2 = X.shape[0], Y.shape[0]
    i, j = torch.arange(B1).repeat_interleave(B2), torch.arange(B2).repeat(B1)
    lens = {} if xl is None else dict(x_lengths=torch.tensor(xl)[i], y_lengths=torch.tensor(yl)[j])
    return sdtw.softdtw(X[i], Y[j], **lens, **kw).view(B1, B2)


OPTIONS = [
    dict(gamma=0.5),
    dict(gamma=0.0),
    dict(gamma=0.3, normalize=True),
    dict(gamma=0.0, normalize=True, bandwidth=2),
    dict(gamma=0.7, dist="l1", bandwidth=1.5),
]


def _option_id(kw: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in kw.items())


# (the simulator: no lengths or divergence here (the symmetric test has them); soft-DTW's
# gradients through the CUDA pair kernels take 45 s there: slow)
_CASES = [
    *[(b, kw) for b in ("reference", "cpu") for kw in OPTIONS],
    pytest.param("cuda", OPTIONS[1], marks=_SIM, id=f"cuda-{_option_id(OPTIONS[1])}"),
    pytest.param(
        "cuda", OPTIONS[0], marks=[_SIM, pytest.mark.slow], id=f"cuda-{_option_id(OPTIONS[0])}"
    ),
]


@pytest.mark.parametrize(
    "backend, kw", _CASES, ids=lambda v: v if isinstance(v, str) else _option_id(v)
)
@pytest.mark.parametrize("lengths", [False, True])
def test_cdist_is_the_loop_of_pair_calls(rng, backend, kw, lengths):
    if backend == "cuda" and lengths:
        pytest.skip("(the simulator is slow: lengths in the symmetric test)")
    X, Y = randn(rng, 4, 6, 2).requires_grad_(), randn(rng, 3, 5, 2).requires_grad_()
    xl, yl = ([6, 3, 1, 5], [5, 5, 2]) if lengths else (None, None)
    W = torch.as_tensor(rng.uniform(0.5, 2.0, (4, 3)))  # an upstream gradient other than ones
    chunk = 12 if backend == "cuda" else 5  # (the simulator: one chunk, no recomputation)
    D = sdtw.cdist(X, Y, x_lengths=xl, y_lengths=yl, backend=backend, chunk=chunk, **kw)
    want = loop(X, Y, xl, yl, backend=backend, **kw)
    assert D.shape == (4, 3) and rel_err(D, want) < 1e-12
    g = torch.autograd.grad((D * W).sum(), (X, Y))
    h = torch.autograd.grad((want * W).sum(), (X, Y))
    assert rel_err(g[0], h[0]) < 1e-12 and rel_err(g[1], h[1]) < 1e-12


@pytest.mark.parametrize(
    "backend, normalize",
    [
        *[(b, n) for b in ("reference", "cpu") for n in (False, True)],
        # (40 s in the simulator on the 2-core VM: the divergence's case covers the plain one)
        pytest.param("cuda", True, marks=[_SIM, pytest.mark.slow]),
    ],
)
def test_symmetric_case(rng, backend, normalize):
    X = randn(rng, 4, 5, 2).requires_grad_()
    xl = [5, 2, 4, 5] if backend == "cuda" else None
    chunk = None if backend == "cuda" else 3
    D = sdtw.cdist(X, gamma=0.4, normalize=normalize, x_lengths=xl, backend=backend, chunk=chunk)
    full = sdtw.cdist(X, X.detach(), gamma=0.4, normalize=normalize, x_lengths=xl,
                      y_lengths=xl, backend=backend)  # fmt: skip
    assert torch.equal(D, D.T) and rel_err(D, full) < 1e-12
    if normalize:
        assert torch.equal(D.diagonal(), torch.zeros(4, dtype=D.dtype))
    (g,) = torch.autograd.grad(D.triu().sum(), X)
    if backend == "cuda":  # (the simulator is slow: against the CPU backend, itself tested)
        C = sdtw.cdist(X, gamma=0.4, normalize=normalize, x_lengths=xl, backend="cpu")
        (h,) = torch.autograd.grad(C.triu().sum(), X)
        assert rel_err(D, C) < 1e-12 and rel_err(g, h) < 1e-12
        return
    # each unordered pair once, the diagonal once: the loop over a <= b
    i, j = torch.triu_indices(4, 4)
    want = sdtw.softdtw(X[i], X[j], gamma=0.4, normalize=normalize, backend=backend)
    (h,) = torch.autograd.grad(want.sum(), X)
    assert rel_err(g, h) < 1e-12


def test_forward_only_chunks_progress_and_errors(rng, capsys):
    X, Y = randn(rng, 7, 5, 1), randn(rng, 6, 4, 1)
    want = sdtw.cdist(X, Y, gamma=0.2)
    for chunk in (1, 4, 100):
        assert torch.equal(sdtw.cdist(X, Y, gamma=0.2, chunk=chunk, progress=True), want)
    assert "pair" in capsys.readouterr().err  # (tqdm's bar)
    assert not want.requires_grad
    with torch.no_grad():
        assert not sdtw.cdist(X.requires_grad_(), Y, gamma=0.2).requires_grad
    f32 = sdtw.cdist(X.detach().float(), Y.float(), gamma=0.2)
    assert f32.dtype == torch.float32 and rel_err(f32, want) < 1e-5
    with pytest.raises(ValueError, match="X"):
        sdtw.cdist(X[0], Y)
    with pytest.raises(ValueError, match="D="):
        sdtw.cdist(X, randn(rng, 2, 4, 3))
    with pytest.raises(ValueError, match="y_lengths"):
        sdtw.cdist(X, y_lengths=[1] * 7)
    with pytest.raises(ValueError, match="chunk"):
        sdtw.cdist(X, Y, chunk=0)
    with pytest.raises(ValueError, match="x_lengths"):
        sdtw.cdist(X, Y, x_lengths=[9] * 7)


@pytest.mark.parametrize("bandwidth", [None, 2])
def test_forward_only_exact_dtw_reads_the_rows_in_place(rng, bandwidth):
    """Without gradients, exact DTW on the CPU runs a kernel that reads X and Y in place
    (sdtw.cpu_pairs): the pair calls' values, with lengths, a band, NaN padding, float32."""
    X, Y = randn(rng, 5, 7, 3), randn(rng, 4, 6, 3)
    xl, yl = [7, 3, 1, 7, 5], [6, 2, 6, 4]
    Xp = X.clone()
    Xp[1, 3:] = float("nan")  # (never read)
    kw = dict(gamma=0.0, bandwidth=bandwidth)
    D = sdtw.cdist(Xp, Y, x_lengths=xl, y_lengths=yl, chunk=6, **kw)
    assert rel_err(D, loop(X, Y, xl, yl, **kw)) < 1e-12
    S = sdtw.cdist(X, x_lengths=xl, normalize=True, **kw)
    assert rel_err(S, loop(X, X, xl, xl, normalize=True, **kw)) < 1e-12
    D32 = sdtw.cdist(X.float(), Y.float(), **kw)
    assert D32.dtype == torch.float32 and rel_err(D32, loop(X, Y, **kw)) < 1e-6


@_SIM
@pytest.mark.parametrize(
    "N, M, D, dtype, gamma, bandwidth",
    [
        (1, 5, 1, torch.float64, 0.5, None),  # (length 1)
        (33, 6, 1, torch.float32, 1.0, None),  # (two rows per lane, past 32)
        (32, 9, 2, torch.float64, 0.0, 3),  # (exact DTW, a band, D > 1)
        (40, 7, 1, torch.float32, 0.0, None),  # (exact DTW in float32)
        (9, 40, 3, torch.float64, 1e-3, 2.5),  # (small gamma, N < M)
        (70, 23, 1, torch.float32, 0.0, 5),  # (strips partly outside the band: both paths)
        (70, 23, 1, torch.float64, 0.7, 5),
    ],
)
def test_forward_only_cuda_reads_the_rows_in_place(
    rng, monkeypatch, N, M, D, dtype, gamma, bandwidth
):
    """Without gradients the CUDA backend's table kernels (sdtw.cuda.allpairs, in the
    simulator) give the pair calls' values (float64 reference), with lengths, a band and NaN
    padding that is never read; no pair call is made."""
    from sdtw import engine

    X, Y = randn(rng, 3, N, D), randn(rng, 2, M, D)
    xl, yl = [N, max(1, N // 2), 1], [M, max(1, M - 3)]
    want = loop(X, Y, xl, yl, gamma=gamma, bandwidth=bandwidth, backend="reference")
    Xp = X.clone()
    Xp[1, max(1, N // 2) :] = float("nan")

    def no_pair_calls(*args, **kwargs):
        raise AssertionError("the rows were gathered for a pair call")

    monkeypatch.setattr(engine, "pair_values", no_pair_calls)
    kw = dict(gamma=gamma, bandwidth=bandwidth, backend="cuda")
    got = sdtw.cdist(Xp.to(dtype), Y.to(dtype), x_lengths=xl, y_lengths=yl, **kw)
    assert got.dtype == dtype
    assert rel_err(got.double(), want) < (1e-12 if dtype == torch.float64 else 1e-6)


@_SIM
# (the simulator computes with NumPy scalars, which warn on inf - inf where the GPU is silent)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("gamma", [0.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_only_cuda_nan_inside_a_pair_gives_nan(rng, dtype, gamma):
    """A NaN on a pair's cells (inside its lengths) makes its value NaN in the CUDA table
    kernels (a flag per lane keeps it where the recurrence would not carry it), and
    only its pairs'; the others equal the loop of pair calls."""
    X, Y = randn(rng, 3, 40, 1), randn(rng, 2, 11, 1)
    X[1, 37, 0] = float("nan")  # (past the first lane's strip)
    Y[0, 10, 0] = float("nan")  # (the last column)
    X[2, 0, 0] = float("nan")  # (the first cell: its neighbours' other terms are +inf)
    got = sdtw.cdist(X.to(dtype), Y.to(dtype), gamma=gamma, backend="cuda").double()
    want = loop(X, Y, gamma=gamma, backend="reference")
    assert torch.isnan(got[1:]).all() and torch.isnan(got[:, 0]).all()
    assert torch.isnan(want[1:]).all() and torch.isnan(want[:, 0]).all()
    keep = torch.tensor([True, False, False])
    assert rel_err(got[keep, 1], want[keep, 1]) < (1e-12 if dtype == torch.float64 else 1e-6)


@_SIM
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_forward_only_cuda_pairs_sharing_a_warp(rng, gamma):
    """Short pairs share a warp in the CUDA table kernels (20 rows: one lane a pair for exact
    DTW, 4 for soft-DTW): pairs of different lengths beside each other, a warp only partly
    used, a NaN in one pair that stays out of its neighbours'."""
    from sdtw.cuda import allpairs

    assert allpairs._shape(20, gamma == 0.0, True, True) == ((32, 1) if gamma == 0.0 else (8, 4))
    X, Y = randn(rng, 5, 20, 1), randn(rng, 3, 13, 1)
    xl, yl = [20, 3, 17, 1, 9], [13, 1, 8]
    X[2, 16, 0] = float("nan")  # (inside the third series' length: its row is NaN)
    kw = dict(gamma=gamma, x_lengths=xl, y_lengths=yl)
    got = sdtw.cdist(X, Y, backend="cuda", **kw)
    want = loop(X, Y, xl, yl, gamma=gamma, backend="reference")
    assert torch.isnan(got[2]).all() and torch.isnan(want[2]).all()
    keep = torch.tensor([True, True, False, True, True])
    assert not torch.isnan(got[keep]).any()
    assert rel_err(got[keep], want[keep]) < 1e-12


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize(
    "N, M, D, dtype, gamma, bandwidth",
    [
        (1, 5, 1, torch.float32, 0.0, None),  # (length 1: a lane a pair)
        (20, 13, 1, torch.float32, 0.0, None),  # (pairs sharing a warp)
        (20, 13, 1, torch.float64, 0.5, 3),
        (64, 70, 1, torch.float32, 0.0, 9),
        (128, 100, 1, torch.float32, 1.0, None),
        (129, 128, 1, torch.float64, 0.0, None),
        (256, 250, 8, torch.float32, 0.1, 20),
        (512, 512, 1, torch.float32, 0.0, None),
        (500, 512, 1, torch.float32, 1.0, 40),
        (1000, 1024, 1, torch.float64, 0.0, 50),
        (1024, 999, 2, torch.float32, 0.01, None),
    ],
)
def test_gpu_table_kernels(rng, N, M, D, dtype, gamma, bandwidth):
    """On the GPU the all-pairs table kernels equal the CPU backend's float64 values (itself
    tested against the loop of pair calls): lengths, bands, D > 1, a NaN in a pair's first cell
    and in its last column making only its own pairs NaN."""
    X, Y = randn(rng, 9, N, D, device="cuda"), randn(rng, 7, M, D, device="cuda")
    xl, yl = rng.integers(1, N + 1, 9).tolist(), rng.integers(1, M + 1, 7).tolist()
    X[4, 0, 0] = Y[1, yl[1] - 1, 0] = float("nan")  # (the first cell; the last column)
    kw = dict(gamma=gamma, bandwidth=bandwidth)
    with torch.no_grad():
        got = sdtw.cdist(X.to(dtype), Y.to(dtype), x_lengths=xl, y_lengths=yl, backend="cuda", **kw)
    want = sdtw.cdist(X.cpu(), Y.cpu(), x_lengths=xl, y_lengths=yl, backend="cpu", **kw)
    got = got.double().cpu()
    assert torch.equal(got.isnan(), want.isnan()) and got.isnan()[4].all()
    assert got.isnan()[:, 1].all() and int(got.isnan().sum()) == 7 + 9 - 1
    ok = ~want.isnan()
    assert rel_err(got[ok], want[ok]) < (1e-12 if dtype == torch.float64 else 1e-5)


def test_forward_only_table_chunks_follow_the_backend(rng, monkeypatch):
    """Without gradients the table kernels get chunks of at least 16384 pairs, and of the
    backend's ``table_cells`` (CUDA: 2^32 cells, to hide a launch's host cost); the CPU sets
    no such floor, so that its progress bar moves and its chunks' work stays short."""
    from sdtw.cdist import TABLE_PAIRS
    from sdtw.engine.cpu import CPUBackend

    sizes = []
    real = CPUBackend.table_values

    def counted(self, plan, X, Y, i, j, *rest):
        sizes.append(i.numel())
        return real(self, plan, X, Y, i, j, *rest)

    monkeypatch.setattr(CPUBackend, "table_values", counted)
    X, Y = randn(rng, 170, 64, 1), randn(rng, 100, 64, 1)  # (memory alone: ~7700 pairs a chunk)
    want = sdtw.cdist(X, Y, gamma=0.0, backend="cpu", chunk=1000)
    assert sizes == [1000] * 17
    sizes.clear()
    got = sdtw.cdist(X, Y, gamma=0.0, backend="cpu")
    assert sizes == [TABLE_PAIRS, 17000 - TABLE_PAIRS]
    assert torch.equal(got, want)
    sizes.clear()
    monkeypatch.setattr(CPUBackend, "table_cells", 64 * 64 * 20000)  # (as CUDA's: cells a call)
    assert torch.equal(sdtw.cdist(X, Y, gamma=0.0, backend="cpu"), want)
    assert sizes == [17000]
