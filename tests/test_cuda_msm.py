"""Soft-MSM's CUDA kernels (:mod:`sdtw.cuda.msm`) in Numba's simulator against the float64
reference: the wavefront kernels at sizes past each rows-per-thread boundary (N = 33, 65, 129,
300 take 2, 4, 8, 16 rows in one warp; 513 takes 16 in 2 warps), a strip that ends on the last
thread (N = 64), N != M, length 1, per-pair lengths, a band, several channels, blocks of 2, 4
and 8 warps (the hand-over between warps), a task's rows in bands on blocks of their own (the
hand-over between blocks); the diagonal kernels past ``MAX_N`` rows; an upstream gradient other
than ones throughout; the rules that pick rows, warps and bands."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from sdtw.band import band_offsets, pair_offsets
from sdtw.cpu import _tables
from sdtw.cuda.msm import (
    MAX_N,
    _bands,
    _chunks,
    _depth,
    _kept_fits,
    _kept_index,
    _shape,
    msm_cuda,
)
from sdtw.cuda.tables import device_tables
from sdtw.msm_reference import soft_msm_backward, soft_msm_forward
from tests.conftest import requires_gpu, requires_sim

C, GAMMA = 0.7, 0.3

#: (B, N, M, D, bandwidth, lengths)
CASES = [
    (2, 33, 9, 1, None, None),  # 2 rows per lane, the 17th lane's strip half used
    (1, 64, 7, 1, 3, None),  # 2 rows per lane, the last lane's strip full (no lane below)
    (1, 65, 12, 2, None, None),  # 4 rows per lane, two channels
    (1, 129, 3, 1, None, None),  # 8
    (1, 300, 2, 1, None, None),  # 16
    (1, 513, 2, 1, None, None),  # 16 rows, 2 warps
    (2, 1, 5, 1, None, None),  # one row
    (2, 4, 1, 2, None, None),  # one column
    (1, 1, 1, 1, None, None),
    (3, 40, 12, 2, 2, ([40, 17, 1], [12, 3, 5])),  # lengths and a band, each pair's own
    (2, 6, 35, 1, 4, None),  # M past 32, a band
]


def reference(x, y, bandwidth, lengths, gamma=GAMMA):
    """Values (B,) and gradients of ``sum_b values[b]`` by the float64 reference, pair by pair
    over each pair's own lengths."""
    a, b_ = x.detach().numpy(), y.detach().numpy()
    B = a.shape[0]
    values, gx, gy = np.zeros(B), np.zeros(a.shape), np.zeros(b_.shape)
    for b in range(B):
        n = a.shape[1] if lengths is None else lengths[0][b]
        m = b_.shape[1] if lengths is None else lengths[1][b]
        p, q = a[b : b + 1, :n], b_[b : b + 1, :m]
        v, Rs = soft_msm_forward(p, q, gamma, bandwidth, c=C)
        ex, ey = soft_msm_backward(p, q, Rs, gamma, bandwidth, c=C)
        values[b], gx[b, :n], gy[b, :m] = v[0], ex[0], ey[0]
    return values, gx, gy


def _tables_of(B, N, M, bandwidth, lengths):
    if lengths is None:
        return _tables(B, N, M, *band_offsets(N, M, bandwidth), None)
    return _tables(B, N, M, *pair_offsets(*lengths, bandwidth), lengths)


def run(rng, B, N, M, D, bandwidth, lengths):
    x = torch.as_tensor(rng.standard_normal((B, N, D))).requires_grad_()
    y = torch.as_tensor(rng.standard_normal((B, M, D))).requires_grad_()
    upstream = torch.as_tensor(rng.uniform(0.5, 2.0, B)) * torch.tensor([1.0, -1.0] * B)[:B]
    kw = dict(c=C, gamma=GAMMA, bandwidth=bandwidth, backend="cuda")
    if lengths is not None:
        kw.update(x_lengths=lengths[0], y_lengths=lengths[1])
    v = sdtw.soft_msm(x, y, **kw)
    gx, gy = torch.autograd.grad(v, (x, y), upstream)
    values, ex, ey = reference(x, y, bandwidth, lengths)
    u = upstream.numpy()[:, None, None]
    np.testing.assert_allclose(v.detach().numpy(), values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), ex * u, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(gy.numpy(), ey * u, rtol=1e-10, atol=1e-11)
    return gx, gy


@requires_sim
@pytest.mark.parametrize(("B", "N", "M", "D", "bandwidth", "lengths"), CASES)
def test_wavefront_kernels_match_the_reference(rng, B, N, M, D, bandwidth, lengths):
    run(rng, B, N, M, D, bandwidth, lengths)


@requires_sim
@pytest.mark.parametrize(
    ("warps", "B", "N", "M", "bandwidth", "lengths"),
    [
        (2, 1, 33, 9, None, None),  # 1 row a thread, the second warp's first thread the last
        (4, 1, 65, 12, 4, None),  # 1 row, the third warp's first thread the last
        (4, 1, 200, 3, None, None),  # 2 rows, every warp boundary crossed
        (2, 3, 40, 12, 2, ([40, 17, 1], [12, 3, 5])),
        (8, 1, 40, 3, None, None),
        # (the rule's widest block, a row a thread: 25 s in the simulator)
        pytest.param(16, 1, 300, 3, None, None, marks=pytest.mark.slow),
    ],
)
def test_several_warps_per_task(rng, warps, B, N, M, bandwidth, lengths):
    x = torch.as_tensor(rng.standard_normal((B, N, 1)))
    y = torch.as_tensor(rng.standard_normal((B, M, 1)))
    tables = _tables_of(B, N, M, bandwidth, lengths)
    v, gx, gy = msm_cuda(x, y, C, GAMMA, tables, True, warps=warps)
    values, ex, ey = reference(x, y, bandwidth, lengths)
    np.testing.assert_allclose(v.numpy(), values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), ex, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(gy.numpy(), ey, rtol=1e-10, atol=1e-11)


@requires_sim
@pytest.mark.parametrize(
    ("bands", "warps", "B", "N", "M", "D", "bandwidth", "lengths", "dtype"),
    [
        (3, 1, 1, 70, 20, 1, None, None, "float64"),  # 32-row bands, the last part-full
        (2, 1, 1, 200, 9, 1, None, None, "float64"),  # 4 rows a thread: 128-row bands
        (3, 2, 1, 130, 40, 1, 5, None, "float64"),  # 2 warps a band, a band of the table
        (4, 1, 2, 100, 1, 1, None, None, "float64"),  # one column
        # two channels (the slow session's: channels are covered by run()'s cases too)
        pytest.param(4, 1, 2, 97, 35, 2, None, None, "float64", marks=pytest.mark.slow),
        # per-pair lengths: a pair whose rows end in the first band (the others do nothing)
        (4, 1, 3, 100, 40, 1, 7, ([100, 40, 1], [40, 3, 40]), "float64"),
        # float32 (the slow session's: kept weights in bands have their own test below)
        pytest.param(3, 1, 2, 90, 37, 1, None, None, "float32", marks=pytest.mark.slow),
    ],
)
def test_bands_of_rows_on_blocks_of_their_own(rng, bands, warps, B, N, M, D, bandwidth,
                                              lengths, dtype):  # fmt: skip
    """A task's rows split into bands, a block each, handing each band's last row (forward)
    and what it pushes into the row above and gy's partial sums (backward) to its neighbour
    through global memory: the reference's values and gradients, and with a row a thread the
    same bits as one block of the same rows (the same operations in the same order)."""
    dt = getattr(torch, dtype)
    x = torch.as_tensor(rng.standard_normal((B, N, D))).to(dt)
    y = torch.as_tensor(rng.standard_normal((B, M, D))).to(dt)
    tables = _tables_of(B, N, M, bandwidth, lengths)
    got = msm_cuda(x, y, C, GAMMA, tables, True, warps=warps, bands=bands)
    want = reference(x.double(), y.double(), bandwidth, lengths)
    for g, w in zip(got, want, strict=True):
        if dtype == "float64":
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-12)
        else:
            assert np.linalg.norm(g.numpy() - w) <= 1e-5 * np.linalg.norm(w)
    if _shape(-(-N // bands), B * D * bands, 0, warps)[0] == 1 and N <= 16 * 32:
        whole = msm_cuda(x, y, C, GAMMA, tables, True, warps=-(-N // 32), bands=1)
        assert all(torch.equal(a, b) for a, b in zip(got, whole, strict=True))


@requires_sim
def test_bands_forced_through_the_overrides(rng):
    """``sdtw.cuda.config.overrides(msm_bands=K)`` (the probes' switch) sets the bands where
    the call does not: an invalid K is refused as an argument would be."""
    from sdtw.cuda.config import overrides

    x = torch.as_tensor(rng.standard_normal((1, 40, 1)))
    y = torch.as_tensor(rng.standard_normal((1, 9, 1)))
    tables = _tables_of(1, 40, 9, None, None)
    with overrides(msm_bands=2):
        forced = msm_cuda(x, y, C, GAMMA, tables, True, warps=1)
    given = msm_cuda(x, y, C, GAMMA, tables, True, warps=1, bands=2)
    assert all(torch.equal(a, b) for a, b in zip(forced, given, strict=True))
    with overrides(msm_bands=0), pytest.raises(ValueError, match="bands must be"):
        msm_cuda(x, y, C, GAMMA, tables, False)


@requires_sim
@pytest.mark.parametrize(
    ("B", "N", "M", "D", "bandwidth", "lengths", "warps", "bands", "dtype"),
    [
        (2, 20, 9, 1, None, None, 1, 1, "float64"),  # 1 row a thread
        (3, 40, 12, 2, 2, ([40, 17, 1], [12, 3, 5]), 1, 1, "float64"),  # 2 rows, lengths, band
        (1, 65, 33, 1, None, None, 1, 1, "float32"),  # 4 rows: one step ahead at most
        (1, 70, 20, 1, 6, None, 1, 3, "float32"),  # bands
        (2, 1, 5, 1, None, None, 1, 1, "float64"),  # one row
        (2, 6, 2, 1, None, None, 2, 1, "float32"),  # two columns, 2 warps
        (2, 6, 1, 1, None, None, 1, 1, "float64"),  # one column
    ],
)
def test_costs_steps_ahead_are_the_same_bits(rng, B, N, M, D, bandwidth, lengths, warps,
                                             bands, dtype):  # fmt: skip
    """Each column's costs (forward) and edge weights (backward) computed one or two steps
    before its cells: the same operations on the same values as in the step, so the same
    bits at every depth the registers allow (:func:`_depth`: 2 up to 2 rows a thread, 1 up
    to 4); the override capped at the rule's depth, the argument refused past it (and taking
    precedence over the override).  Float32 inputs (kept weights) read the up and left costs
    steps ahead from their pass as float32: the same bits at every depth from 1, and within
    1e-5 (relative norm, float32's tolerance here) of the costs computed in the step."""
    from sdtw.cuda.config import overrides

    dt = getattr(torch, dtype)
    x = torch.as_tensor(rng.standard_normal((B, N, D))).to(dt)
    y = torch.as_tensor(rng.standard_normal((B, M, D))).to(dt)
    tables = _tables_of(B, N, M, bandwidth, lengths)
    kw = dict(warps=warps, bands=bands)
    rows = _shape(-(-N // bands), B * D * bands, 0, warps)[0]
    deepest = _depth(rows)
    inline = msm_cuda(x, y, C, GAMMA, tables, True, ahead=0, **kw)
    first = None
    for depth in range(1, deepest + 2):  # (the override past the rule: the rule's depth)
        with overrides(msm_ahead=depth):
            got = msm_cuda(x, y, C, GAMMA, tables, True, **kw)
        if dtype == "float64":
            assert all(torch.equal(a, b) for a, b in zip(got, inline, strict=True)), depth
            continue
        first = got if first is None else first
        assert all(torch.equal(a, b) for a, b in zip(got, first, strict=True)), depth
        for a, b in zip(got, inline, strict=True):  # (float32 costs: the gradients' error)
            assert torch.linalg.norm(a - b) <= 1e-5 * torch.linalg.norm(b)
    with overrides(msm_ahead=0), pytest.raises(ValueError, match="ahead must be 0 to"):
        msm_cuda(x, y, C, GAMMA, tables, False, ahead=deepest + 1, **kw)  # (the argument's)
    with overrides(msm_ahead=-1), pytest.raises(ValueError, match="msm_ahead must be"):
        msm_cuda(x, y, C, GAMMA, tables, False, **kw)


def test_the_rule_for_bands():
    assert _bands(512, 32, 132) == 4  # B = 32 on an H100: 4 bands of 128 rows
    assert _shape(128, 4 * 32, 132) == (1, 4)  # (a band: a warp for each sub-partition)
    assert _bands(1024, 32, 132) == 4 and _bands(2048, 1, 132) == 16
    assert _bands(MAX_N + 1, 1, 132) == 1  # (past MAX_N: the diagonal kernels)
    assert _bands(512, 67, 132) == 1  # tasks enough for every other SM: one block a task
    assert _bands(128, 1, 132) == 1 and _bands(129, 1, 132) == 2
    assert _bands(512, 1, 0) == 1  # (the simulator: bands only where asked for)


#: (B, N, M, D, bandwidth, lengths, gamma, repeated, warps): float32 inputs
FAST_CASES = [
    (2, 33, 9, 1, None, None, 0.3, False, None),  # 2 rows a thread
    (1, 40, 9, 1, None, None, 0.3, False, 2),  # a row a thread, 2 warps: the hand-over
    (3, 40, 12, 2, 2, ([40, 17, 1], [12, 3, 5]), 0.01, False, None),
    (2, 37, 23, 1, None, None, 1e-3, False, None),
    (2, 37, 23, 1, None, None, 0.1, True, None),  # repeated samples: gates at u = 0
    (2, 1, 5, 1, None, None, 1.0, False, None),  # one row (a 1 x 1 table has no exp)
    (2, 9, 7, 1, None, None, 0.5, "huge", None),  # a sample of 1e20: u^2 past float32's range
]


@requires_sim
# (the simulator's numpy float32 warns where the GPU overflows to inf silently)
@pytest.mark.filterwarnings("ignore:.*overflow:RuntimeWarning")
@pytest.mark.parametrize(("B", "N", "M", "D", "bandwidth", "lengths", "gamma", "repeated",
                          "warps"), FAST_CASES)  # fmt: skip
def test_float32_inputs_take_float32_transcendentals(
    rng, B, N, M, D, bandwidth, lengths, gamma, repeated, warps
):
    """Float32 inputs run the wavefront kernels with float32 ex2 / lg2 / rcp / rsqrt: within
    1e-5 (relative norm) of the float64 reference, values and gradients, and not the float64
    kernels' bits.  (The upstream gradient is the engine's: ``run`` covers it.)"""
    a, b = rng.standard_normal((B, N, D)), rng.standard_normal((B, M, D))
    if repeated == "huge":
        a[0, 4, 0] = 1e20
    elif repeated:
        a, b = np.round(2 * a) / 2, np.round(2 * b) / 2
    x = torch.as_tensor(a, dtype=torch.float32)
    y = torch.as_tensor(b, dtype=torch.float32)
    tables = _tables_of(B, N, M, bandwidth, lengths)
    # (these kernels, not soft-DTW's band kernels: tests/test_cuda_msm_seam.py has those)
    v, gx, gy = msm_cuda(x, y, C, gamma, tables, True, warps=warps, seam=False)
    v64 = msm_cuda(x.double(), y.double(), C, gamma, tables, False, warps=warps)[0]
    assert not torch.equal(v, v64)  # (the float32 kernels ran)
    values, ex, ey = reference(x.double(), y.double(), bandwidth, lengths, gamma)
    if repeated == "huge":  # (R ~ 1e40: every backend's weights are rounding; finite here too)
        assert np.allclose(v.numpy(), values, rtol=1e-6)
        assert torch.isfinite(gx).all() and torch.isfinite(gy).all()
        return
    for got, want in ((v, values), (gx, ex), (gy, ey)):
        assert got.dtype == torch.float64
        assert np.linalg.norm(got.numpy() - want) <= 1e-5 * np.linalg.norm(want)


@requires_sim
def test_diagonal_kernels_past_max_n(rng):
    run(rng, 1, MAX_N + 1, 2, 1, None, None)


@requires_sim
@pytest.mark.parametrize(
    ("B", "N", "M", "D", "bandwidth", "lengths", "warps", "bands", "chunks"),
    [
        (2, 33, 9, 1, None, None, None, None, 1),  # 2 rows a thread, M < the warp's lanes
        (1, 40, 70, 1, None, None, None, None, 3),  # chunks: columns' sums across them
        (3, 40, 12, 2, 2, ([40, 17, 1], [12, 3, 5]), 2, None, 2),  # lengths, band, channels
        (1, 70, 40, 1, 6, None, 1, 3, 2),  # bands: G through global memory
        (1, 65, 33, 1, None, None, 1, None, 2),  # 4 rows a thread: a step's loads ahead
        (1, 130, 5, 1, None, None, 1, None, 1),  # 8 rows: a step ahead
        (2, 1, 5, 1, None, None, None, None, 2),  # one row
        (2, 6, 1, 1, None, None, None, None, 1),  # one column
    ],
)
def test_kept_weights_match_the_reference(rng, B, N, M, D, bandwidth, lengths, warps, bands,
                                          chunks):  # fmt: skip
    """Float32 inputs keep the forward's edge weights (the rule): with the up and left costs
    from a pass of their own (float32) where the forward works steps ahead, the backward's
    ``G`` from the weights and the gradients' pass over the occupancies in chunks of steps,
    values and gradients are within 1e-5 (relative norm) of the float64 reference and of the
    kernels that keep ``R``, and the same bits on a second run (no atomics; small cases)."""
    x = torch.as_tensor(rng.standard_normal((B, N, D)), dtype=torch.float32)
    y = torch.as_tensor(rng.standard_normal((B, M, D)), dtype=torch.float32)
    tables = _tables_of(B, N, M, bandwidth, lengths)
    kw = dict(warps=warps, bands=bands)
    got = msm_cuda(x, y, C, GAMMA, tables, True, chunks=chunks, **kw)
    if B * N * M * D <= 1000:  # (the simulator's time: a rerun of the small cases)
        again = msm_cuda(x, y, C, GAMMA, tables, True, chunks=chunks, **kw)
        assert all(torch.equal(a, b) for a, b in zip(got, again, strict=True))
    old = msm_cuda(x, y, C, GAMMA, tables, True, kept=False, **kw)
    want = reference(x.double(), y.double(), bandwidth, lengths)
    for g, o, w in zip(got, old, want, strict=True):
        assert g.shape == w.shape and g.dtype == torch.float64
        assert np.linalg.norm(g.numpy() - w) <= 1e-5 * np.linalg.norm(w)
        assert torch.linalg.norm(g - o) <= 1e-5 * torch.linalg.norm(o)


@requires_sim
@pytest.mark.parametrize(("N", "M", "warps", "bands"), [(5, 4, 1, 1), (33, 9, 1, 1), (40, 7, 1, 2)])
def test_kept_weights_are_where_kept_index_says(rng, monkeypatch, N, M, warps, bands):
    """The forward's kept array holds, at :func:`_kept_index` of each cell, the three edge
    weights ``exp((R[i, j] - candidate) / gamma)`` of the float64 reference's ``R`` (match,
    up, left; 0 for a candidate that does not exist) within float32's rounding: the layout
    that the backward and the gradients' pass read (rows of 1 and 2 a thread, two bands)."""
    import math

    from sdtw.cuda import msm as kernels
    from sdtw.msm_reference import transition_cost

    launched = []
    real = kernels.launch

    def spy(kernel, grid, threads, dev, *args):
        real(kernel, grid, threads, dev, *args)
        launched.append([a.clone() if torch.is_tensor(a) else a for a in args])

    monkeypatch.setattr(kernels, "launch", spy)
    x = torch.as_tensor(rng.standard_normal((1, N, 1)), dtype=torch.float32)
    y = torch.as_tensor(rng.standard_normal((1, M, 1)), dtype=torch.float32)
    msm_cuda(x, y, C, GAMMA, _tables_of(1, N, M, None, None), False, kept=True, warps=warps,
             bands=bands)  # fmt: skip
    W = launched[1][4].numpy()  # (the costs pass, then the forward: its kept array)
    R = soft_msm_forward(x.double().numpy(), y.double().numpy(), GAMMA, None, c=C)[1][0][0]
    a, b = x.double().numpy()[0, :, 0], y.double().numpy()[0, :, 0]
    rows, T = _shape(-(-N // bands), bands, 0, warps)[0], 32 * warps
    for i in range(N):
        for j in range(M):
            diag = R[i - 1, j - 1] if i and j else (0.0 if i == j == 0 else math.inf)
            cands = (
                diag + (a[i] - b[j]) ** 2,
                R[i - 1, j] + transition_cost(a[i], a[i - 1], b[j], C, GAMMA) if i else math.inf,
                R[i, j - 1] + transition_cost(b[j], b[j - 1], a[i], C, GAMMA) if j else math.inf,
            )
            band, r = divmod(i, T * rows)
            for e, cand in enumerate(cands):
                at = _kept_index(0, band, bands, M, j, r // rows, e, r % rows, rows, T)
                assert W[at] == pytest.approx(math.exp((R[i, j] - cand) / GAMMA), abs=1e-6)


@requires_sim
def test_kept_weights_switches(rng):
    """``kept`` is float32 inputs' with gradients (refused for float64 ones; a forward alone
    takes the ``R`` kernels), where the kept kernels' shared memory fits 48 KB and their
    offsets 32 bits (refused past them);
    ``overrides(msm_kept=False)`` keeps ``R`` instead, as the argument does; chunks must be
    positive."""
    from sdtw.cuda.config import overrides

    x = torch.as_tensor(rng.standard_normal((1, 20, 1)), dtype=torch.float32)
    y = torch.as_tensor(rng.standard_normal((1, 9, 1)), dtype=torch.float32)
    tables = _tables_of(1, 20, 9, None, None)
    with pytest.raises(ValueError, match="kept weights are float32"):
        msm_cuda(x.double(), y.double(), C, GAMMA, tables, True, kept=True)
    with pytest.raises(ValueError, match="chunks must be >= 1"):
        msm_cuda(x, y, C, GAMMA, tables, True, chunks=0)
    with overrides(msm_kept=False):
        forced = msm_cuda(x, y, C, GAMMA, tables, True)
    given = msm_cuda(x, y, C, GAMMA, tables, True, kept=False)
    kept = msm_cuda(x, y, C, GAMMA, tables, True)
    assert all(torch.equal(a, b) for a, b in zip(forced, given, strict=True))
    assert not torch.equal(kept[1], given[1])  # (the other backward ran)
    # (a forward alone: the R kernels' forward, its costs in the steps, nothing stored)
    assert torch.equal(msm_cuda(x, y, C, GAMMA, tables, False)[0], given[0])
    # (2048 rows a block: the kept kernels' shared memory past 48 KB; R kept instead)
    assert _kept_fits(1, 16) and _kept_fits(2, 8) and _kept_fits(8, 4) and _kept_fits(16, 2)
    assert _kept_fits(4, 8) and not _kept_fits(16, 4) and not _kept_fits(8, 8)
    long = torch.zeros((1, 2048, 1), dtype=torch.float32)  # (16 rows x 4 warps; refused first)
    with pytest.raises(ValueError, match="more than 48 KB"):
        msm_cuda(long, y, C, GAMMA, _tables_of(1, 2048, 9, None, None), True, kept=True)
    # (the kept kernels' 32-bit offsets: a band's part of the array below 2^32 entries)
    x8, wide = torch.zeros((1, 1024, 1)), torch.zeros((1, 2**32 // 3072 + 1, 1))
    with pytest.raises(ValueError, match="32-bit offsets"):
        msm_cuda(x8, wide, C, GAMMA, _tables_of(1, 1024, wide.shape[1], None, None), True,
                 kept=True, warps=4)  # fmt: skip


def test_the_rule_for_chunks():
    # (B = 32, N = 512 on an H100: 4 bands of 4 warps; 24 warps an SM wanted)
    assert _chunks(512 + 31, 128, 4, 132) == 7
    assert _chunks(40 + 31, 128, 4, 132) == 1  # (a chunk at least 64 steps)
    assert _chunks(512 + 31, 4 * 132, 1, 132) == 6
    assert _chunks(512 + 31, 24 * 132, 1, 132) == 1  # (blocks enough)
    assert _chunks(512 + 31, 1, 1, 0) == 1  # (the simulator)


def test_the_rule_for_steps_ahead():
    assert [_depth(r) for r in (1, 2, 4, 8, 16)] == [2, 2, 1, 0, 0]


def test_the_rule_for_rows_and_warps():
    assert _shape(512, 32, 132) == (1, 16)  # few tasks: a row a thread up to 16 warps
    assert _shape(300, 32, 132) == (1, 16) and _shape(256, 32, 132) == (1, 8)
    assert _shape(1024, 32, 132) == (8, 4)  # (longer: 4 warps)
    assert _shape(512, 4 * 132, 132) == (16, 1)  # a warp for each sub-partition
    assert _shape(513, 4 * 132, 132) == (16, 2)  # past 16 rows a thread: more warps
    assert _shape(1, 1, 132) == (1, 1) and _shape(40, 1, 132) == (1, 2)
    assert _shape(33, 1, 132, warps=1) == (2, 1)
    assert _shape(MAX_N, 1, 132) == (16, 4) and _shape(MAX_N + 1, 1, 132) is None
    with pytest.raises(ValueError, match="16 warps a block take one row a thread"):
        _shape(1024, 1, 132, warps=16)  # (2 rows x 512 threads: past the register file)


@requires_sim
def test_gradients_are_deterministic():
    # (no atomics: the same bits on every run)
    first = run(np.random.default_rng(0), 2, 40, 9, 1, 5, None)
    again = run(np.random.default_rng(0), 2, 40, 9, 1, 5, None)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("N", [128, 300, 512, 513, 1024, 2048])
def test_gpu_every_shape_of_the_rule(rng, N, dtype):
    """On the GPU, each shape the rule picks launches and equals the CPU's Soft-MSM: values and
    gradients, per-pair lengths, an upstream gradient other than ones, for few tasks (bands of
    a row a thread, and past ``MAX_N`` the diagonal kernels) and for tasks enough to fill the
    GPU (one block a task: a row a thread on up to 16 warps to N = 512, 4 warps with more rows
    beyond); float32 inputs (the float32 transcendentals) within 1e-5 relative norm per 128
    cells of the longest path (their errors add up along it: on an H100, six seeds' worst
    1.1e-5 at N = 512, 2.1e-5 at 1024, 7.1e-5 at 2048, M = 40; once past 4.2e-5 at 1024:
    ``experiments/results/nvidia-h100/msm-float32-errors.txt``)."""
    B, M = 3, 40
    x = torch.as_tensor(rng.standard_normal((B, N, 1)), dtype=dtype)
    y = torch.as_tensor(rng.standard_normal((B, M, 1)), dtype=dtype)
    xl, yl = [N, N // 2 + 1, 1], [M, 7, M - 1]
    upstream = torch.tensor([0.7, -1.3, 2.0], dtype=dtype)
    out = []
    for device in ("cuda", "cpu"):
        a, b = x.to(device).requires_grad_(), y.to(device).requires_grad_()
        kw = dict(c=C, gamma=GAMMA, x_lengths=xl, y_lengths=yl, backend=device)
        v = sdtw.soft_msm(a, b, **kw)
        out.append((v, *torch.autograd.grad(v, (a, b), upstream.to(device))))
    tol = 1e-5 * max(1.0, (N + M) / 128)
    for got, want in zip(out[0], out[1], strict=True):
        got, want = got.detach().cpu().double().numpy(), want.detach().double().numpy()
        if dtype == torch.float64:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-11)
        else:
            assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)
    # one block a task, the rule's shape for as many tasks as the GPU's SMs (B = 3 gets bands)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tables = _tables_of(B, N, M, None, (xl, yl))
    warps = _shape(N, sms, sms)[1] if N <= MAX_N else None
    whole = msm_cuda(x.cuda(), y.cuda(), C, GAMMA, tables, True, warps=warps, bands=1)
    a, b = x.double().requires_grad_(), y.double().requires_grad_()
    v = sdtw.soft_msm(a, b, c=C, gamma=GAMMA, x_lengths=xl, y_lengths=yl, backend="cpu")
    ref = [t.detach().numpy() for t in (v, *torch.autograd.grad(v.sum(), (a, b)))]
    for got, want in zip(whole, ref, strict=True):
        got = got.cpu().double().numpy()
        if dtype == torch.float64:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-11)
        else:
            assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("gamma", [1.0, 0.0])
def test_gpu_a_second_step_does_not_synchronise(rng, gamma):
    """Soft-MSM (gamma = 1) and exact DTW (gamma = 0) without per-pair lengths: once their
    tables are on the device, a forward + backward step makes no synchronising call
    (``torch.cuda.set_sync_debug_mode("error")`` raises at one), and a captured CUDA graph
    of the step replays to the eager step's gradients."""
    x = torch.as_tensor(rng.standard_normal((8, 64, 1)), dtype=torch.float32).cuda()
    y = torch.as_tensor(rng.standard_normal((8, 48, 1)), dtype=torch.float32).cuda()

    def step():
        a = x.clone().requires_grad_()
        if gamma:
            v = sdtw.soft_msm(a, y, c=C, gamma=gamma, backend="cuda")
        else:
            v = sdtw.softdtw(a, y, gamma=0, backend="cuda")
        v.sum().backward()
        return a.grad

    eager = step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


@requires_gpu
@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_gpu_bands_are_the_one_block_bits(rng, dtype):
    """At the benchmark's size (B = 32, N = M = 512: the rule's 4 bands of 128 rows, every
    band waiting on its neighbour's hand-over values), the same bits as one block of 16 warps
    per task, values and gradients (float32 inputs, kept weights: within 1e-12, the
    gradients' parts summed by torch over as many slots as bands and warps); the same with
    two channels, a band of the table and per-pair lengths (some pairs' rows end in the first
    band); and 16 bands at N = 2048 against 8 rows a thread (float32: each within 1e-5 of the
    float64 kernels)."""
    cases = [  # (B, N, M, D, bandwidth, lengths, warps of the one block)
        (32, 512, 512, 1, None, None, 16),
        (4, 300, 200, 2, 50, ([300, 129, 1, 257], [200, 3, 150, 200]), 16),  # 3 bands
        (2, 2048, 2048, 1, None, None, 8),
    ]
    for B, N, M, D, bandwidth, lengths, warps in cases:
        x = torch.as_tensor(rng.standard_normal((B, N, D)), dtype=dtype).cuda()
        y = torch.as_tensor(rng.standard_normal((B, M, D)), dtype=dtype).cuda()
        tables = _tables_of(B, N, M, bandwidth, lengths)
        banded = msm_cuda(x, y, C, GAMMA, tables, True, seam=False)  # (these kernels' bands)
        whole = msm_cuda(x, y, C, GAMMA, tables, True, warps=warps, bands=1)
        if N <= 512:  # (the costs and weights in the step instead of steps before)
            # (not the same bits: in the step the compiler fuses diag + (x - y)^2 into an fma,
            # which it cannot where the square was computed steps before; float32 inputs keep
            # float32 weights, whose roundings that difference may move by an ulp)
            inline = msm_cuda(x, y, C, GAMMA, tables, True, ahead=0)
            close = 1e-12 if dtype == torch.float64 else 1e-5  # (an H100: 1.1e-13)
            for a, b in zip(banded, inline, strict=True):
                assert torch.linalg.norm(a - b) <= close * torch.linalg.norm(b)
        for a, b in zip(banded, whole, strict=True):
            if N <= 512 and dtype == torch.float64:  # (a row a thread in both)
                assert torch.equal(a, b)
            elif N <= 512:  # (kept weights: torch sums the gradients' parts, more with bands)
                assert torch.linalg.norm(a - b) <= 1e-12 * torch.linalg.norm(b)
            elif dtype == torch.float64:  # (other rows a thread: other sums' orders)
                assert torch.linalg.norm(a - b) <= 1e-12 * torch.linalg.norm(b)
        if N > 512 and dtype == torch.float32:
            # (2048 rows a block keep R, not the weights: each against the float64 kernels;
            # R kept's weights unscaled erred 1e-4 here, kept weights 4e-6)
            exact = msm_cuda(x.double(), y.double(), C, GAMMA, tables, True)
            for got in (banded, whole):
                for a, b in zip(got, exact, strict=True):
                    assert torch.linalg.norm(a - b) <= 1e-5 * torch.linalg.norm(b)


@requires_sim
def test_tables_without_per_pair_entries_are_copied_to_the_device_once():
    """The (4, B) tables go to the device once per (device, B, entries) where every pair has
    the same (a blocking host-to-device copy waits for the stream's queued work); per-pair
    tables are copied each call, a tensor passes as it is; the tensors hold the tables."""
    dev = torch.device("cpu")  # (the simulator's tensors)
    uniform = _tables_of(3, 9, 7, 2, None)
    first = device_tables(uniform, dev)
    assert device_tables(_tables_of(3, 9, 7, 2, None), dev) is first
    np.testing.assert_array_equal(first.numpy(), np.stack(uniform))
    assert device_tables(_tables_of(4, 9, 7, 2, None), dev) is not first  # (another B)
    per_pair = _tables_of(3, 40, 12, 2, ([40, 17, 1], [12, 3, 5]))
    a, b = device_tables(per_pair, dev), device_tables(per_pair, dev)
    assert a is not b
    np.testing.assert_array_equal(a.numpy(), np.stack(per_pair))
    assert device_tables(a, dev) is a
    with pytest.raises(ValueError, match="tables"):
        device_tables(a.T.contiguous(), dev)
    # (the entries are part of the key; the kernels leave the kept tensor as it was)
    assert device_tables(_tables_of(3, 9, 7, 3, None), dev) is not first
    x, y = torch.randn(3, 9, 1, dtype=torch.float64), torch.randn(3, 7, 1, dtype=torch.float64)
    msm_cuda(x, y, C, GAMMA, _tables_of(3, 9, 7, 2, None), True)
    np.testing.assert_array_equal(first.numpy(), np.stack(uniform))
