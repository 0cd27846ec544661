"""The scalar sigmoid fusion gate of DPN-S2S (Song et al., COLING 2018, Eq. 9 and Eq. 10).

One module serves both places the paper gates two streams:

* context fusion in every decoder layer (Eq. 9), e.g. for the CNN path
  ``g^c = sigmoid([ctx^cc, ctx^ca] W^c + b^c)``, ``ctx^c = ctx^cc (1 - g^c) + ctx^ca g^c``;
* output fusion of the two decoder paths before the softmax (Eq. 10),
  ``g^o = sigmoid([z^c, z^a] W^o + b^o)``, ``z^o = z^c (1 - g^o) + z^a g^o``.

``W`` is a vector in R^{2d} and ``b`` a scalar, so the gate is one scalar per position, broadcast
over the d features. ``forced`` pins the gate to a constant (0 keeps only the first input, 1 only
the second), which the tests and inference-time ablations use.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor, nn


class DPNGate(nn.Module):
    """Scalar sigmoid gate ``out = a * (1 - g) + b * g`` with ``g = sigmoid([a, b] W + b0)``."""

    def __init__(self, dim: int, forced: Optional[float] = None):
        super().__init__()
        self.proj = nn.Linear(2 * dim, 1)
        nn.init.normal_(self.proj.weight, mean=0.0, std=(2 * dim) ** -0.5)
        nn.init.zeros_(self.proj.bias)  # start at g = 0.5 on average: both streams used
        self.forced: Optional[float] = None
        self.force(forced)

    def force(self, value: Optional[float]) -> None:
        """Pin the gate to ``value`` in [0, 1] (None restores the learned gate)."""
        if value is not None and not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"DPNGate: a forced gate value must lie in [0, 1], got {value}")
        self.forced = None if value is None else float(value)

    def gate(self, a: Tensor, b: Tensor) -> Tensor:
        """The gate value g, shape ``a.shape[:-1] + (1,)``."""
        if self.forced is not None:
            return a.new_full(a.shape[:-1] + (1,), self.forced)
        return torch.sigmoid(self.proj(torch.cat([a, b], dim=-1)))

    def forward(self, a: Tensor, b: Tensor) -> Tuple[Tensor, Tensor]:
        """Fuse ``a`` (kept when g = 0) and ``b`` (kept when g = 1); returns (fused, g)."""
        if a.shape != b.shape:
            raise ValueError(f"DPNGate: inputs must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
        g = self.gate(a, b)
        if self.forced == 0.0:
            return a, g  # exactly a: no rounding from a + 0 * (b - a)
        if self.forced == 1.0:
            return b, g
        return a + g * (b - a), g

    def extra_repr(self) -> str:
        return f"forced={self.forced}" if self.forced is not None else ""
