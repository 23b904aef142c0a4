"""The per-pair table: which lengths each pair of a call runs over.

A call answers one question per pair ``p``: the measure between ``x[p, :n_p]`` and
``y[p, :m_p]``.  :class:`Pairs` carries the ``n_p``, ``m_p`` of a padded batch (or none: every
pair at full length) from the front door to a backend, which takes them in its own form (the
CPU kernels as NumPy tables of lengths and band offsets, the CUDA kernels as one (2 P,) device
tensor, the reference as a loop over slices).  The divergence's self terms are tables of their
own (:meth:`Pairs.self_x`, :meth:`Pairs.self_y`), and so will be an all-pairs matrix's blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FULL", "Pairs"]


@dataclass(frozen=True)
class Pairs:
    """Each pair's lengths: ``x_lengths``, ``y_lengths`` int64 (P,) on the inputs' device, both
    given or both None (every pair at full length)."""

    x_lengths: torch.Tensor | None = None
    y_lengths: torch.Tensor | None = None

    @classmethod
    def of(cls, lengths: tuple[torch.Tensor, torch.Tensor] | None) -> Pairs:
        """The table of validated lengths (:func:`sdtw._validation.check_lengths`)."""
        return FULL if lengths is None else cls(*lengths)

    @property
    def lengths(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(x_lengths, y_lengths)``, or None at full length."""
        return None if self.x_lengths is None else (self.x_lengths, self.y_lengths)

    def self_x(self) -> Pairs:
        """The table of the self term ``s(x, x)``: x's lengths on both sides."""
        return self if self.x_lengths is None else Pairs(self.x_lengths, self.x_lengths)

    def self_y(self) -> Pairs:
        """The table of the self term ``s(y, y)``: y's lengths on both sides."""
        return self if self.y_lengths is None else Pairs(self.y_lengths, self.y_lengths)

    def stacked(self, *tables: Pairs) -> Pairs:
        """This table followed by ``tables`` (one call over all their pairs)."""
        if self.x_lengths is None:
            return self
        every = (self, *tables)
        return Pairs(
            torch.cat([t.x_lengths for t in every]), torch.cat([t.y_lengths for t in every])
        )


#: Every pair at full length.
FULL = Pairs()
