"""``sdtw.alignment``: the expected alignment matrix, against the path enumeration on tiny
inputs and across backends, with the band and lengths; its example draws the figure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sdtw
from tests.conftest import randn, requires_sim
from tests.oracles import all_paths


def _enumerated(cost: np.ndarray, gamma: float) -> np.ndarray:
    """E = sum_A A p(A), p(A) ~ exp(-<A, C> / gamma), over every monotone path."""
    N, M = cost.shape
    paths = all_paths(N, M)
    scores = np.array([sum(cost[i, j] for i, j in p) for p in paths])
    w = np.exp(-(scores - scores.min()) / gamma)
    w /= w.sum()
    E = np.zeros((N, M))
    for p, wk in zip(paths, w, strict=True):
        for i, j in p:
            E[i, j] += wk
    return E


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("gamma", [1.0, 0.1])
def test_alignment_is_the_expected_path(rng, backend, gamma):
    x, y = randn(rng, 4, 2), randn(rng, 5, 2)
    E = sdtw.alignment(x, y, gamma=gamma, backend=backend)
    assert E.shape == (4, 5) and E.dtype == x.dtype and not E.requires_grad
    cost = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).numpy()
    np.testing.assert_allclose(E.numpy(), _enumerated(cost, gamma), rtol=1e-9, atol=1e-12)


def test_alignment_band_lengths_and_backends_agree(rng):
    x, y = randn(rng, 3, 9, 2), randn(rng, 3, 7, 2)
    kw = dict(gamma=0.3, bandwidth=2, x_lengths=[9, 4, 1], y_lengths=[7, 7, 3])
    ref = sdtw.alignment(x, y, backend="reference", **kw)
    cpu = sdtw.alignment(x.float(), y.float(), backend="cpu", **kw)
    np.testing.assert_allclose(cpu, ref, atol=1e-6)
    for b, (n, m) in enumerate([(9, 7), (4, 7), (1, 3)]):
        assert (ref[b, n:] == 0).all() and (ref[b, :, m:] == 0).all()
        mask = torch.as_tensor(sdtw.sakoe_chiba_mask(n, m, 2))
        assert (ref[b, :n, :m][~mask] == 0).all()
        assert torch.allclose(ref[b, n - 1, m - 1], torch.tensor(1.0, dtype=ref.dtype))
    xs = x.clone().requires_grad_()
    sdtw.alignment(xs, y, backend="cpu")  # no graph is built through the inputs
    assert xs.grad is None


@requires_sim
@pytest.mark.cudasim
@pytest.mark.slow  # (simulator: nox -s slow)
def test_alignment_on_the_cuda_kernels(rng):
    x, y = randn(rng, 2, 33, 2), randn(rng, 2, 20, 2)
    kw = dict(gamma=0.2, x_lengths=[33, 10], y_lengths=[20, 20])
    got = sdtw.alignment(x, y, backend="cuda", **kw)
    np.testing.assert_allclose(got, sdtw.alignment(x, y, backend="cpu", **kw), atol=1e-10)


def test_alignment_example_draws_the_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from examples import alignment

    out = tmp_path / "alignment.png"
    assert alignment.main(["--length", "20", "--gammas", "1", "0.1", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "gamma 0.1" in capsys.readouterr().out
