"""The ``barycenter`` sweep's data, modes and Adam loop.

Data: :func:`square_waves`, the paper's Figure 2 setting in D channels.  Modes, each a
separate measurement of one (implementation, configuration) with its own rows and status:

=================================  ===========================================================
mode                               metrics (the CSV's ``metric`` column)
=================================  ===========================================================
``barycenter-adam``                ``ms_per_iter``: one Adam iteration (objective, backward,
                                   clipping, step), median of timed iterations after a
                                   warm-up one; its peak memory and kernel launches
``barycenter-adam-early-stop``     one solve of at most :data:`MAX_ITER` iterations with early
                                   stopping: ``total_ms``, ``iterations`` (Adam steps taken),
                                   ``objective`` (the best one, that of the returned barycenter)
``barycenter-adam-max-iter``       the same solve without early stopping (always
                                   :data:`MAX_ITER` steps): the early-stopping saving is the
                                   difference of the two
=================================  ===========================================================

``--quick`` solves with :data:`QUICK_MAX_ITER` iterations instead (a smoke test: too few for
early stopping to trigger).

Ours solves with :func:`sdtw.softdtw_barycenter` itself; an implementation without a solver
of its own (the paper's design, the other baselines) with :func:`adam_barycenter`, the same
Adam loop around its loss.  The library takes no loss callable, so its loop is restated here
(one set of equal-length sequences, uniform weights), and ``tests/test_experiments.py`` checks
that, given sdtw's loss, it follows the library's trajectory.  The hyper-parameters are the
paper's, which are sdtw's defaults: Adam at lr 0.1 annealed by a cosine schedule to lr / 10 at
``max_iter``, gradient norm clipped at 1, init at the mean of the inputs, early stopping after
``patience = 10`` iterations without a relative improvement of ``tol = 1e-5`` (sdtw's rule; the
paper's code uses an absolute tol, checked only after ``max_iter // 2``).  So "ours vs the
paper design" compares the loss inside one algorithm.  Per-iteration timings use
:class:`AdamBarycenter` for every implementation (the library's loop cannot be stepped from
outside).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = [
    "EARLY_STOP",
    "ITERATION",
    "MAX_ITER",
    "METRICS",
    "MODES",
    "NO_EARLY_STOP",
    "QUICK_MAX_ITER",
    "AdamBarycenter",
    "adam_barycenter",
    "square_waves",
]

ITERATION = "barycenter-adam"
EARLY_STOP = "barycenter-adam-early-stop"
NO_EARLY_STOP = "barycenter-adam-max-iter"
MODES = (ITERATION, EARLY_STOP, NO_EARLY_STOP)
_SOLVE = ("total_ms", "iterations", "objective")
METRICS = {ITERATION: ("ms_per_iter",), EARLY_STOP: _SOLVE, NO_EARLY_STOP: _SOLVE}
"""The metrics each mode writes, one row each; a failed measurement writes the first."""

MAX_ITER = 100
QUICK_MAX_ITER = 4  # --quick: a few iterations, enough to run every code path
LR = 0.1

LossFn = Callable[["torch.Tensor", "torch.Tensor", float], "torch.Tensor"]


def square_waves(
    S: int, N: int, D: int, *, max_shift: float = 0.15, noise: float = 0.1, dtype=None
) -> torch.Tensor:
    """(S, N, D) square waves, channel ``d`` of ``d + 1`` periods over the sequence.

    The D channels of one sequence share one random time shift (uniform, at most
    ``max_shift * N``), so an alignment exists that DTW can find; Gaussian noise of standard
    deviation ``noise`` on every value.  Seeded by the shape: the same data for every
    implementation and gamma.  ``dtype``: the result's (``None``: float32).
    """
    import torch

    gen = torch.Generator().manual_seed(zlib.crc32(repr(("square_waves", S, N, D)).encode()))
    t = torch.arange(N, dtype=torch.float64) / N
    shift = max_shift * (2 * torch.rand(S, 1, 1, generator=gen, dtype=torch.float64) - 1)
    phase = (t[:, None] - shift) * torch.arange(1, D + 1, dtype=torch.float64)
    waves = torch.where(torch.remainder(phase, 1.0) < 0.5, 1.0, -1.0)
    waves = waves + noise * torch.randn(S, N, D, generator=gen, dtype=torch.float64)
    return waves.to(torch.float32 if dtype is None else dtype)


class AdamBarycenter:
    """The Adam loop of :func:`sdtw.softdtw_barycenter` around any ``loss``, one step at a time.

    Minimises :math:`F(Z) = \\frac{1}{S} \\sum_i \\mathrm{loss}_\\gamma(Z, X_i)` from the
    mean of ``X`` (S, M, D); ``Z`` is (M, D).

    Parameters
    ----------
    loss : callable
        ``loss(x, y, gamma) -> (B,)`` for x (B, N, D), y (B, M, D).
    X : Tensor, shape (S, M, D)
        The sequences; not modified.
    gamma : float
        Smoothing passed to ``loss``.
    max_iter : int
        Length of the cosine schedule (lr / 10 at ``max_iter``).
    lr : float
        Initial learning rate.
    """

    def __init__(
        self, loss: LossFn, X: torch.Tensor, gamma: float, max_iter: int, lr: float = LR
    ) -> None:
        import torch

        self.loss, self.X, self.gamma = loss, X, gamma
        self.Z = X.detach().mean(0).requires_grad_()
        self.opt = torch.optim.Adam([self.Z], lr=lr)
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(
            self.opt, T_max=max_iter, eta_min=lr / 10
        )

    def objective(self) -> torch.Tensor:
        """F(Z), a 0-dimensional tensor."""
        return self.loss(self.Z.expand(len(self.X), -1, -1), self.X, self.gamma).mean()

    def gradient(self) -> float:
        """F(Z), leaving its gradient, norm clipped at 1, in ``Z.grad``."""
        import torch

        from sdtw.barycenter import MAX_GRAD_NORM

        self.opt.zero_grad(set_to_none=True)
        value = self.objective()
        objective = value.item()  # the library reads it here too, for early stopping
        value.backward()
        torch.nn.utils.clip_grad_norm_([self.Z], MAX_GRAD_NORM)
        return objective

    def update(self) -> None:
        """One Adam step and one step of the schedule."""
        self.opt.step()
        self.sched.step()

    def iterate(self) -> float:
        """One whole iteration; returns F before the step."""
        objective = self.gradient()
        self.update()
        return objective


def adam_barycenter(
    loss: LossFn,
    X: torch.Tensor,
    *,
    gamma: float,
    max_iter: int = MAX_ITER,
    lr: float = LR,
    early_stopping: bool = True,
    patience: int = 10,
    tol: float = 1e-5,
) -> tuple[torch.Tensor, list[float]]:
    """:func:`sdtw.softdtw_barycenter` (Adam, one set, uniform weights) with any ``loss``.

    Returns
    -------
    barycenter : Tensor, shape (M, D)
        The best iterate (lowest objective).
    history : list of float
        The objective after ``t`` steps for ``t = 0, 1, ...``: ``len(history) - 1`` steps
        were taken (``max_iter`` unless early stopping ended the loop).
    """
    import torch

    solver = AdamBarycenter(loss, X, gamma, max_iter, lr)
    best_Z, history = solver.Z.detach().clone(), []
    ref, wait = math.inf, 0  # the last objective that counted as an improvement
    for _ in range(max_iter):
        value = solver.gradient()
        if value < min(history, default=math.inf):
            best_Z = solver.Z.detach().clone()
        history.append(value)
        if early_stopping:
            if ref == math.inf or value < ref - tol * abs(ref):
                ref, wait = value, 0
            else:
                wait += 1
                if wait >= patience:
                    return best_Z, history
        solver.update()
    with torch.no_grad():
        value = solver.objective().item()
    if value < min(history):
        best_Z = solver.Z.detach().clone()
    return best_Z, [*history, value]
