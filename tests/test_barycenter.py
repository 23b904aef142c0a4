"""Soft-DTW barycenters: objective against tslearn, weights, lengths, K groups, validation.

Objectives are recomputed here, one sequence at a time with its own length, on the float64
CPU backend (itself checked against the reference in test_api.py), so nothing in these checks
depends on how :func:`sdtw.softdtw_barycenter` batches or buckets the pairs.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch

import sdtw
from tests.conftest import randn, rel_err, requires_gpu, requires_sim


def objective(Z, seqs, gamma, weights=None) -> float:
    """sum_i w_i sdtw(Z, X_i), w normalised to 1, each X_i at its own length."""
    Z = torch.as_tensor(Z, dtype=torch.float64)
    w = np.ones(len(seqs)) if weights is None else np.asarray(weights, dtype=float)
    w = w / w.sum()
    vals = [
        float(sdtw.softdtw(Z, torch.as_tensor(x, dtype=torch.float64), gamma=gamma, backend="cpu"))
        for x in seqs
    ]
    return float(np.dot(w, vals))


def sines(rng, lengths, D=2, noise=0.1, shifts=None):
    """Phase-shifted sines with noise: one well-separated optimum, as in the paper's data
    (each shift drawn in [-0.2, 0.2], or ``shifts[k]``)."""
    out = []
    for k, n in enumerate(lengths):
        t = np.linspace(0.0, 1.0, n)[:, None] * (1 + np.arange(D))
        shift = rng.uniform(-0.2, 0.2) if shifts is None else shifts[k]
        out.append(np.sin(2 * np.pi * (t + shift)) + noise * rng.standard_normal((n, D)))
    return out


def test_objective_helper_matches_reference(rng):
    seqs = [rng.standard_normal((n, 2)) for n in (4, 6)]
    Z = rng.standard_normal((5, 2))
    ref = [
        float(sdtw.softdtw(torch.as_tensor(Z), torch.as_tensor(x), gamma=0.1, backend="reference"))
        for x in seqs
    ]
    assert objective(Z, seqs, 0.1, [3.0, 1.0]) == pytest.approx(0.75 * ref[0] + 0.25 * ref[1])


# The objective is not convex: on some data sets either optimiser lands in a worse local
# minimum than the other.  The data here are fixed (seeded) so that the check is about the
# optimiser, not about which basin a random draw falls in.
TSLEARN_CASES = [
    (seed, equal, gamma, method)
    for seed, equal in [(0, True), (1, False)]
    for gamma in (1.0, 0.1, 0.01)
    for method in ("adam", "lbfgs")
]


@pytest.mark.parametrize("seed,equal,gamma,method", TSLEARN_CASES)
def test_objective_within_one_percent_of_tslearn(seed, equal, gamma, method):
    tslearn_bary = pytest.importorskip("tslearn.barycenters")
    data_rng = np.random.default_rng(seed)
    lengths = [16] * 6 if equal else list(data_rng.integers(10, 20, size=6))
    seqs = sines(data_rng, lengths)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tslearn's own import-time and numba warnings
        theirs = tslearn_bary.softdtw_barycenter(
            np.stack(seqs) if equal else seqs, gamma=gamma, max_iter=100
        )
    X = torch.as_tensor(np.stack(seqs)) if equal else [torch.as_tensor(x) for x in seqs]
    ours = sdtw.softdtw_barycenter(X, gamma=gamma, method=method, backend="cpu")
    assert ours.shape == theirs.shape
    f_ours, f_theirs = objective(ours, seqs, gamma), objective(theirs, seqs, gamma)
    assert f_ours <= f_theirs + 0.01 * abs(f_theirs), (f_ours, f_theirs)


@pytest.mark.parametrize("method", ["adam", "lbfgs"])
def test_history_starts_at_init_and_ends_at_the_returned_barycenter(rng, method):
    seqs = sines(rng, [12] * 5)
    X = torch.as_tensor(np.stack(seqs))
    Z, hist = sdtw.softdtw_barycenter(X, gamma=0.1, method=method, return_history=True)
    assert hist.dtype == torch.float64 and hist.dim() == 1 and 2 <= len(hist) <= 101
    assert hist[0].item() == pytest.approx(objective(X.mean(0), seqs, 0.1), rel=1e-10)
    # The best iterate is returned, and the history says what it reached.
    assert hist.min().item() == pytest.approx(objective(Z, seqs, 0.1), rel=1e-10)
    assert hist.min() < hist[0]
    # Decreasing overall: the last quarter lies below the first on average.  (Not every
    # value of it below the first one: where the mean starts near the optimum, Adam's first
    # steps overshoot and its last ones can still sit above the start, as with seed
    # 561762814 on CI: 1 draw in 150 here.)
    q = max(len(hist) // 4, 1)
    assert hist[-q:].mean() < hist[:q].mean()


def test_weights_are_normalised_and_zero_weights_drop_out(rng):
    seqs = sines(rng, [10] * 4)
    X = torch.as_tensor(np.stack(seqs))
    kw = dict(gamma=0.1, max_iter=20, early_stopping=False)
    a, ha = sdtw.softdtw_barycenter(X, weights=[2.0, 1.0, 0.0, 1.0], return_history=True, **kw)
    b = sdtw.softdtw_barycenter(X, weights=torch.tensor([0.5, 0.25, 0.0, 0.25]), **kw)
    c = sdtw.softdtw_barycenter(X[[0, 1, 3]], weights=np.array([0.5, 0.25, 0.25]), **kw)
    assert rel_err(a, b) < 1e-12 and rel_err(a, c) < 1e-12
    init = (2 * X[0] + X[1] + X[3]) / 4
    assert ha[0].item() == pytest.approx(objective(init, seqs, 0.1, [2, 1, 0, 1]), rel=1e-10)


def test_one_hot_weights_recover_that_series(rng):
    # (shifts 0.1 apart, in a random order: with free draws two inputs can be near copies of
    # each other, and "X[2] is clearly the nearest" below would not be a property of Z)
    shifts = rng.permutation(np.linspace(-0.2, 0.2, 5)) + rng.uniform(-0.01, 0.01, 5)
    seqs = sines(rng, [12] * 5, shifts=shifts)
    X = torch.as_tensor(np.stack(seqs))
    w = torch.zeros(5, dtype=torch.float64)
    w[2] = 1.0
    # The weighted mean (default init) is X[2]; at small gamma the optimum stays next to it.
    assert rel_err(sdtw.softdtw_barycenter(X, weights=w, gamma=0.01), X[2]) < 0.02
    # From the plain mean the optimiser may stop in a warped copy of X[2] (as good under DTW),
    # so Z is judged through soft-DTW: most of the gap to sdtw(X[2], X[2]) is closed, and X[2]
    # is clearly its nearest input.
    Z = sdtw.softdtw_barycenter(X, weights=w, gamma=0.1, init=X.mean(0))
    d = [objective(Z, [x], 0.1) for x in seqs]
    best, start = objective(X[2], [seqs[2]], 0.1), objective(X.mean(0), [seqs[2]], 0.1)
    assert d[2] - best < 0.5 * (start - best)
    assert d[2] < 0.8 * min(d[:2] + d[3:])


@pytest.mark.parametrize("method", ["adam", "lbfgs"])
def test_unequal_lengths_give_the_unpadded_objective(rng, method):
    lengths = [9, 14, 14, 17, 11]
    seqs = sines(rng, lengths)
    X = [torch.as_tensor(x) for x in seqs]
    Z, hist = sdtw.softdtw_barycenter(X, gamma=0.1, method=method, return_history=True)
    assert Z.shape == (17, 2)
    # Default init: every sequence resampled (linear interpolation) to length 17, then averaged.
    grid = np.linspace(0, 1, 17)
    resampled = [
        np.stack([np.interp(grid, np.linspace(0, 1, n), x[:, d]) for d in range(2)], -1)
        for n, x in zip(lengths, seqs, strict=True)
    ]
    init = np.mean(resampled, axis=0)
    assert hist[0].item() == pytest.approx(objective(init, seqs, 0.1), rel=1e-10)
    assert hist.min().item() == pytest.approx(objective(Z, seqs, 0.1), rel=1e-10)
    # The true (unpadded) objective has a small gradient at the result: it is what was minimised.
    Zg = Z.clone().requires_grad_()
    total = sum(sdtw.softdtw(Zg, x, gamma=0.1, backend="cpu") for x in X) / len(X)
    (g,) = torch.autograd.grad(total, Zg)
    Z0 = torch.as_tensor(init).requires_grad_()
    total0 = sum(sdtw.softdtw(Z0, x, gamma=0.1, backend="cpu") for x in X) / len(X)
    (g0,) = torch.autograd.grad(total0, Z0)
    assert g.norm() < 0.1 * g0.norm()
    # Zero-padding the short sequences to one tensor without their lengths changes the objective.
    padded = torch.stack([torch.nn.functional.pad(x, (0, 0, 0, 17 - len(x))) for x in X])
    Zp = sdtw.softdtw_barycenter(padded, gamma=0.1, method=method)
    assert objective(Zp, seqs, 0.1) > objective(Z, seqs, 0.1)


@pytest.mark.parametrize("method", ["adam", "lbfgs"])
def test_padded_tensor_with_lengths_is_the_list(rng, method, monkeypatch):
    """A padded tensor with ``lengths`` (NaN in the padding) gives the list's barycenter bit
    for bit; one padded soft-DTW batch gives what one batch per length gives."""
    from sdtw import barycenter

    lengths = [9, 14, 14, 17, 11]
    X = [torch.as_tensor(x) for x in sines(rng, lengths)]
    padded = torch.full((5, 17, 2), float("nan"), dtype=X[0].dtype)
    for s, x in enumerate(X):
        padded[s, : len(x)] = x
    kw = dict(gamma=0.1, method=method, max_iter=15, backend="cpu", return_history=True)
    Zl, hl = sdtw.softdtw_barycenter(X, **kw)
    Zp, hp = sdtw.softdtw_barycenter(padded, lengths=torch.tensor(lengths), **kw)
    assert torch.equal(Zp, Zl) and torch.equal(hp, hl)
    monkeypatch.setattr(barycenter, "PAD_UNEQUAL", False)  # one soft-DTW call per length
    Zb, hb = sdtw.softdtw_barycenter(X, **kw)
    # The two batchings differ in the last bit: the objective at the start agrees to that.
    # Adam keeps it small; L-BFGS's line search may take another branch on it (over 300 seeds:
    # Z within 1e-7 but for 3, one of them 6e-2 apart, its objectives 5e-3 apart), so there
    # only the final objectives are compared, loosely.
    torch.testing.assert_close(hb[0], hl[0], rtol=1e-12, atol=0)
    if method == "adam":
        torch.testing.assert_close(Zb, Zl, rtol=1e-8, atol=1e-10)
        torch.testing.assert_close(hb, hl, rtol=1e-8, atol=0)
    else:
        torch.testing.assert_close(hb[-1], hl[-1], rtol=2e-2, atol=0)


def test_k_sets_with_lengths(rng):
    X = torch.as_tensor(rng.standard_normal((2, 3, 8, 2)))
    lengths = [[8, 5, 3], [2, 8, 7]]
    kw = dict(gamma=0.5, max_iter=5, backend="cpu")
    Z = sdtw.softdtw_barycenter(X, lengths=lengths, length=6, **kw)
    for k in range(2):
        one = sdtw.softdtw_barycenter(X[k], lengths=lengths[k], length=6, **kw)
        torch.testing.assert_close(Z[k], one, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match=r"lengths must be \(K, S\) = \(2, 3\)"):
        sdtw.softdtw_barycenter(X, lengths=[8, 5, 3], **kw)
    with pytest.raises(ValueError, match=r"lengths\[1\] must be between 1 and .* 8, got 9"):
        sdtw.softdtw_barycenter(X, lengths=[[8, 5, 3], [9, 1, 1]], **kw)
    with pytest.raises(TypeError, match="lengths is for a padded tensor"):
        sdtw.softdtw_barycenter(list(X[0]), lengths=[8, 5, 3], **kw)


def test_length_option(rng):
    seqs = sines(rng, [20] * 4)
    X = torch.as_tensor(np.stack(seqs))
    Z, hist = sdtw.softdtw_barycenter(X, gamma=0.1, length=12, return_history=True)
    assert Z.shape == (12, 2)
    grid = np.linspace(0, 1, 12)
    init = np.mean(
        [
            np.stack([np.interp(grid, np.linspace(0, 1, 20), x[:, d]) for d in range(2)], -1)
            for x in seqs
        ],
        axis=0,
    )
    assert hist[0].item() == pytest.approx(objective(init, seqs, 0.1), rel=1e-10)
    assert objective(Z, seqs, 0.1) < hist[0].item()
    # init fixes the length; length=1 is allowed.
    assert sdtw.softdtw_barycenter(X, init=X[0, :7], max_iter=2).shape == (7, 2)
    assert sdtw.softdtw_barycenter(X, length=1, max_iter=2).shape == (1, 2)


@pytest.mark.parametrize("layout", ["tensor", "lists"])
def test_k_groups_in_one_call_equal_k_separate_calls(rng, layout):
    K, S = 3, 4
    if layout == "tensor":
        groups = [torch.as_tensor(np.stack(sines(rng, [11] * S))) for _ in range(K)]
        X = torch.stack(groups)  # (K, S, N, D)
        weights = torch.as_tensor(rng.random((K, S)) + 0.1)
    else:
        groups = [
            [torch.as_tensor(x) for x in sines(rng, rng.integers(8, 13, size=S))] for _ in range(K)
        ]
        X = groups
        weights = [rng.random(S) + 0.1 for _ in range(K)]
    length = 12
    kw = dict(gamma=0.1, max_iter=60, length=length, return_history=True, patience=5, tol=1e-3)
    Z, hists = sdtw.softdtw_barycenter(X, weights=weights, **kw)
    assert Z.shape == (K, length, 2) and len(hists) == K
    stopped = []
    for k in range(K):
        Zk, hk = sdtw.softdtw_barycenter(groups[k], weights=weights[k], **kw)
        assert rel_err(Z[k], Zk) < 1e-9
        assert len(hists[k]) == len(hk) and rel_err(hists[k], hk) < 1e-9
        stopped.append(len(hk))
    print("iterations per group:", stopped)


def test_groups_may_have_different_sizes_and_init(rng):
    groups = [torch.as_tensor(np.stack(sines(rng, [10] * S))) for S in (2, 5)]
    init = torch.stack([g.mean(0) for g in groups])
    Z = sdtw.softdtw_barycenter(groups, init=init, max_iter=5)
    assert Z.shape == (2, 10, 2)
    assert torch.equal(init, torch.stack([g.mean(0) for g in groups]))  # init not modified


def test_early_stopping_stops_early_on_an_easy_problem(rng):
    x = torch.as_tensor(sines(rng, [10])[0])
    X = x.expand(6, -1, -1)
    _, hist = sdtw.softdtw_barycenter(X, gamma=0.1, max_iter=500, return_history=True)
    assert len(hist) - 1 < 500
    _, full = sdtw.softdtw_barycenter(
        X, gamma=0.1, max_iter=30, early_stopping=False, return_history=True
    )
    assert len(full) == 31


def test_dtypes_devices_inputs_untouched(rng):
    X32 = randn(rng, 4, 8, 3, dtype=torch.float32)
    X0 = X32.clone()
    Z = sdtw.softdtw_barycenter(X32, max_iter=3)
    assert Z.dtype == torch.float32 and Z.device == X32.device and not Z.requires_grad
    assert torch.equal(X32, X0)
    Zn = sdtw.softdtw_barycenter(X32.double().numpy(), max_iter=3, device="cpu")
    assert Zn.dtype == torch.float64
    Zh = sdtw.softdtw_barycenter(X32.half(), max_iter=3)
    assert Zh.dtype == torch.float16


def test_verbose_progress_bar_and_missing_tqdm(rng, monkeypatch, capsys):
    pytest.importorskip("tqdm")
    X = randn(rng, 3, 6, 2)
    sdtw.softdtw_barycenter(X, max_iter=3, verbose=True)
    assert "soft-DTW barycenter" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.warns(UserWarning, match="tqdm"):
        Z = sdtw.softdtw_barycenter(X, max_iter=3, verbose=True)
    assert Z.shape == (6, 2)


def _X():
    return torch.zeros(3, 5, 2)


@pytest.mark.parametrize(
    "X,kwargs,exc,match",
    [
        (torch.zeros(0, 5, 2), {}, ValueError, "X is empty"),
        (torch.zeros(3, 0, 2), {}, ValueError, "X is empty"),
        ([], {}, ValueError, "X is empty"),
        ([[torch.zeros(4, 2)], []], {}, ValueError, r"X\[1\] is empty"),
        ([torch.zeros(4, 2), torch.zeros(0, 2)], {}, ValueError, r"X\[1\] is empty"),
        (torch.zeros(5, 2), {}, ValueError, r"\(S, N, D\).*\(5, 2\)"),
        ([torch.zeros(4, 2), torch.zeros(6, 3)], {}, ValueError, r"different feature.*\(6, 3\)"),
        ([[torch.zeros(4, 2)], [torch.zeros(6, 3)]], {}, ValueError, r"X\[1\]\[0\] is \(6, 3\)"),
        ([torch.zeros(4, 2), torch.zeros(3)], {}, ValueError, "X as a list"),
        (torch.zeros(3, 5, 2, dtype=torch.int64), {}, TypeError, "X must have a floating dtype"),
        ("abc", {}, TypeError, "X must be a tensor"),
        (_X(), dict(weights=[1.0, 1.0]), ValueError, r"weights.*shape \(2,\).*S=3"),
        (_X(), dict(weights=[1.0, -1.0, 1.0]), ValueError, "weights must be >= 0"),
        (_X(), dict(weights=[0.0, 0.0, 0.0]), ValueError, "must not all be zero"),
        (_X(), dict(weights=[1.0, float("nan"), 1.0]), ValueError, "weights must be finite"),
        (torch.zeros(2, 3, 5, 2), dict(weights=torch.ones(3, 3)), ValueError, "one row per group"),
        (torch.zeros(2, 3, 5, 2), dict(weights=torch.ones(2, 4)), ValueError, r"weights\[0\]"),
        (_X(), dict(max_iter=0), ValueError, "max_iter must be >= 1"),
        (_X(), dict(max_iter=2.5), TypeError, "max_iter must be an int"),
        (_X(), dict(lr=0.0), ValueError, "lr must be finite and > 0"),
        (_X(), dict(lr=-1e-3), ValueError, "lr must be"),
        (_X(), dict(gamma=0.0), ValueError, "gamma"),
        (_X(), dict(gamma=-1.0), ValueError, "gamma"),
        (_X(), dict(patience=0), ValueError, "patience"),
        (_X(), dict(tol=-1.0), ValueError, "tol"),
        (
            _X(),
            dict(init=torch.zeros(5, 3)),
            ValueError,
            r"init must be \(N, D\) with D=2.*\(5, 3\)",
        ),
        (_X(), dict(init=torch.zeros(1, 5, 2)), ValueError, r"init must be \(N, D\)"),
        (torch.zeros(2, 3, 5, 2), dict(init=torch.zeros(3, 5, 2)), ValueError, r"K=2"),
        (_X(), dict(init=torch.zeros(5, 2), length=4), ValueError, "length=4 disagrees"),
        (_X(), dict(length=0), ValueError, "length must be >= 1"),
        (_X(), dict(method="sgd"), ValueError, "method must be one of"),
        (_X(), dict(backend="tpu"), ValueError, "backend"),
        (_X(), dict(fused="yes"), TypeError, "fused"),
        (_X() + float("nan"), {}, ValueError, "objective at init is not finite"),
    ],
)
def test_bad_input_names_the_argument(X, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        sdtw.softdtw_barycenter(X, **kwargs)


def test_softdtw_settings_are_passed_through(rng, monkeypatch):
    import sdtw.barycenter as bary

    seen = []

    def spy(x, y, **kw):
        seen.append(kw)
        return sdtw.softdtw(x, y, **kw)

    monkeypatch.setattr(bary, "softdtw", spy)
    X = randn(rng, 3, 6, 2)
    bary.softdtw_barycenter(X, gamma=0.3, bandwidth=2, fused=False, backend="reference", max_iter=2)
    want = dict(
        gamma=0.3, bandwidth=2, fused=False, backend="reference", y_lengths=None, memory="auto"
    )
    assert seen and all(kw == want for kw in seen)


@requires_sim
@pytest.mark.cudasim
def test_sim_cuda_backend_matches_cpu(rng):
    # One iteration only: every kernel call takes seconds in the simulator.
    X = randn(rng, 2, 4, 2)
    kw = dict(gamma=0.5, max_iter=1, early_stopping=False, return_history=True)
    Zc, hc = sdtw.softdtw_barycenter(X, backend="cuda", **kw)
    Zr, hr = sdtw.softdtw_barycenter(X, backend="cpu", **kw)
    assert rel_err(Zc, Zr) < 1e-9 and rel_err(hc, hr) < 1e-9


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("fused", [True, False])
def test_gpu_matches_cpu(rng, fused):
    X = randn(rng, 3, 16, 40, 3)  # 3 groups of 16 sequences
    kw = dict(gamma=0.1, max_iter=20, early_stopping=False)
    Zg = sdtw.softdtw_barycenter(X.cuda(), fused=fused, **kw)
    Zc = sdtw.softdtw_barycenter(X, **kw)
    assert Zg.is_cuda and rel_err(Zg, Zc) < 1e-8
