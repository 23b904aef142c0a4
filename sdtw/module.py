"""``SoftDTW`` as an ``nn.Module`` (drop-in for the paper's ``softdtw_cuda.SoftDTW``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from sdtw.functional import Options, softdtw_options

__all__ = ["SoftDTW"]


class SoftDTW(nn.Module):
    """Soft-DTW loss module.

    Parameters
    ----------
    gamma : float
        Smoothing, > 0; exactly 0: exact DTW (as :func:`sdtw.softdtw`).
    bandwidth : float or None
        Sakoe-Chiba radius (tslearn's band for ``N != M``); ``None`` or ``<= 0``: no band.
    normalize : bool
        Soft-DTW divergence ``sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2``; any ``N``, ``M``.
    dist : {"sqeuclidean", "euclidean", "l1"} or callable
        Ground cost; a callable maps ``(x, y)`` (B, N, D), (B, M, D) to (B, N, M).
    fused : bool or None
        ``None`` (per call: fused with gradients, unfused without them when the cost fits; see
        :func:`sdtw.softdtw`), ``True`` (require), ``False`` (never).
    backend : {"auto", "cpu", "cuda", "reference"}
        ``"auto"``: CUDA kernels for CUDA tensors, Numba CPU kernels for CPU tensors.
    memory : {"auto", "full", "checkpoint"}
        Store the backward's per-cell state, or checkpoints only and recompute (see
        :func:`sdtw.softdtw`).

    Shapes
    ------
    ``forward(x, y, x_lengths=None, y_lengths=None)``: x (B, N, D) or (N, D), y (B, M, D) or
    (M, D) -> (B,) (0-dim if unbatched); the lengths (B,) of a padded batch as in
    :func:`sdtw.softdtw`.  Arguments are validated here, once, so a bad setting fails at
    construction, not at the first batch.

    On the CUDA backend a call repeated with the same shapes (B N M <= 2^25) replays the
    library's own CUDA graph of its kernels from the third call on, and a whole training step
    with this loss can be captured in a CUDA graph of your own and replayed (static shapes;
    see the README's "CUDA graphs" section, and ``sdtw.cuda.set_graphs``).
    """

    def __init__(
        self,
        *,
        gamma: float = 1.0,
        bandwidth: int | None = None,
        normalize: bool = False,
        dist: str | Callable = "sqeuclidean",
        fused: bool | None = None,
        backend: str = "auto",
        memory: str = "auto",
    ) -> None:
        super().__init__()
        self.options = Options.make(
            gamma=gamma,
            bandwidth=bandwidth,
            normalize=normalize,
            dist=dist,
            fused=fused,
            backend=backend,
            memory=memory,
        )

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, x_lengths=None, y_lengths=None
    ) -> torch.Tensor:
        return softdtw_options(x, y, self.options, x_lengths, y_lengths)

    def extra_repr(self) -> str:
        o = self.options
        return (
            f"gamma={o.gamma}, bandwidth={o.bandwidth}, normalize={o.normalize}, "
            f"dist={o.dist!r}, fused={o.fused}, backend={o.backend!r}, memory={o.memory!r}"
        )


def _setting(name: str) -> property:
    """A setting of the module, read from and written to its validated options."""

    def get(self: SoftDTW):
        return getattr(self.options, name)

    def set_(self: SoftDTW, value) -> None:
        kw = {f: getattr(self.options, f) for f in _SETTINGS}
        kw[name] = value
        self.options = Options.make(**kw)

    return property(get, set_, doc=f"``{name}`` (validated when set)")


_SETTINGS = ("gamma", "bandwidth", "normalize", "dist", "fused", "backend", "memory")
for _name in _SETTINGS:
    setattr(SoftDTW, _name, _setting(_name))
