"""Window geometry and tensor kernels of the genCNN layers (:mod:`fairseq_local.modules.gencnn_layers`).

``LayerShape`` and ``Taps`` say which lower-layer locations each location of a layer reads (paper
Sections 3.1-3.2).  Three operations carry every product of Eq. 3-5 (Wang et al., ACL 2015) over a
batch of windows:

* :func:`window_product`: one weight matrix per window location (TIME-ARROW maps, Eq. 4, and
  TIME-FLOW maps read per window), a batched product over locations on a strided view of the
  windows (no gathered copy);
* :func:`dilated_conv`: shared weights over a whole sequence (TIME-FLOW maps, Eq. 3, and their
  gates), one ``conv1d``;
* :func:`gather_windows`: the rows of a sequence that a set of windows reads, one
  ``index_select`` (its backward is one ``index_add``).
"""
import functools
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq_local.modules.amp import autocast_inputs


class Taps(NamedTuple):
    """Output location ``i < count`` reads ``width`` input locations from ``start + stride * i``."""
    width: int
    stride: int
    start: int
    count: int


@dataclass
class LayerShape:
    """The geometry of one convolution (Eq. 3-4) + gating (Eq. 5) layer of a window."""
    kernel: int
    n_tf: int  # TIME-FLOW maps
    n_ta: int  # TIME-ARROW maps
    n_in: int  # locations read from below
    c_tf: int  # channels a TIME-FLOW map reads
    c_ta: int  # channels a TIME-ARROW map reads
    n_conv: int  # convolution locations
    offset: int  # 1 when n_conv is odd: the oldest location passes through ungated
    n_pairs: int  # gating windows
    n_out: int  # locations after gating

    @property
    def channels(self):
        return self.n_tf + self.n_ta

    @property
    def conv_taps(self) -> Taps:  # Eq. 3-4: location i reads i .. i+k-1
        return Taps(width=self.kernel, stride=1, start=0, count=self.n_conv)

    @property
    def gate_taps(self) -> Taps:  # Eq. 5: gate j reads its pair's segments, offset+2j .. offset+2j+k
        return Taps(width=self.kernel + 1, stride=2, start=self.offset, count=self.n_pairs)


def window_product(H: Tensor, W: Tensor, b: Optional[Tensor], taps: Taps) -> Tensor:
    """``out[i] = u_i @ W[i].T (+ b[i])`` for ``i < taps.count``, where row ``m`` of ``u_i`` is
    ``H[m, start + stride*i : ... + width]`` flattened.  H (M, n_in, C), W (count, F, width*C),
    b (count, F) or None -> (count, M, F).  Under autocast the inputs are cast as a built-in
    product's would be."""
    return _WindowProduct.apply(*autocast_inputs(H, W, b), taps)


class _WindowProduct(torch.autograd.Function):
    """:func:`window_product`: a batched product over window locations on a strided view of H; the
    backward adds every tap's gradient into H's gradient with one ``index_add_`` (no unfold, no
    zero-filled gradient per tap)."""

    @staticmethod
    def forward(ctx, H, W, b, taps: Taps):
        H = H.contiguous()
        u = _strided_windows(H, taps)
        Wt = W.transpose(1, 2)
        out = torch.bmm(u, Wt) if b is None else torch.baddbmm(b.unsqueeze(1), u, Wt)
        ctx.save_for_backward(H, W)
        ctx.taps, ctx.has_bias = taps, b is not None
        return out

    @staticmethod
    def backward(ctx, go):
        H, W = ctx.saved_tensors
        width, stride, start, n = taps = ctx.taps
        M, n_in, C = H.shape
        gH = gW = gb = None
        if ctx.needs_input_grad[0]:
            gu = torch.bmm(go, W).view(n, M, width, C)  # all taps in one product (wider N: faster)
            # tap t of location i reads input location start + stride*i + t; tap-major order, so a
            # location's terms are summed tap by tap
            rows = _tap_index(taps, H.device)
            gH = H.new_zeros(M, n_in, C).index_add_(1, rows, gu.permute(1, 2, 0, 3).reshape(M, width * n, C))
        if ctx.needs_input_grad[1]:
            gW = torch.bmm(go.transpose(1, 2), _strided_windows(H, taps))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = go.sum(1)
        return gH, gW, gb, None


@functools.lru_cache(maxsize=64)
def _tap_index(taps: Taps, device: torch.device) -> Tensor:
    """Input location of every (tap, output location) pair, tap-major (built once per geometry)."""
    width, stride, start, n = taps
    return (torch.arange(width, device=device)[:, None] + start + stride * torch.arange(n, device=device)).reshape(-1)


def _strided_windows(H: Tensor, taps: Taps) -> Tensor:
    """(count, M, width*C) view of contiguous H (M, n_in, C): [i, m] = H[m, start+stride*i ..][:width]."""
    width, stride, start, n = taps
    M, n_in, C = H.shape
    return H.as_strided((n, M, width * C), (stride * C, n_in * C, 1), H.storage_offset() + start * C)


def dilated_conv(x: Tensor, w: Tensor, b: Tensor, d: int) -> Tensor:
    """Dilated convolution of a stream x (B, c, Q), channels first, with w (F, width, c) ->
    (B, Q - d(width-1), F).

    A stream shorter than the dilated kernel gives no positions (an empty result, where ``conv1d``
    would raise).  That happens when the sequence is exactly one window long (a βCNN recursion of
    one block: the longest sentence of a batch has L_α + 1 tokens) and the last layer keeps only
    location 0: the windows then need no position of the stream, only the per-window location 0."""
    if x.shape[-1] < d * (w.shape[1] - 1) + 1:
        return x.new_zeros(x.shape[0], 0, w.shape[0])
    return F.conv1d(x, w.permute(0, 2, 1), b, dilation=d).transpose(1, 2)


@functools.lru_cache(maxsize=64)
def row_index(B: int, Q: int, R: int, start: int, stride: int, n: int, with_first: bool, by_position: bool,
              device: torch.device) -> Tensor:
    """The row indices :func:`gather_windows` selects (a function of the shapes only: built once
    per batch shape, not on every step, since each ``arange`` / ``add`` is a kernel on a GPU)."""
    ar = torch.arange
    idx = (ar(n, device=device)[:, None, None] * stride + start
           + ar(B, device=device)[:, None] * Q + ar(R, device=device))  # [i, b, r]
    if with_first:
        idx[0] = B * Q + ar(B * R, device=device).view(B, R)
    return (idx.permute(2, 1, 0) if by_position else idx.permute(1, 2, 0)).reshape(-1)


def gather_windows(seq: Tensor, R: int, start: int, stride: int, n: int, r0: int = 0,
                   first: Optional[Tensor] = None, by_position: bool = False) -> Tensor:
    """Locations ``0 .. n-1`` of windows ``r0 .. r0+R-1`` of ``seq`` (B, Q, C): (rows, n, C) with
    ``[row(b, r), i] = seq[b, r0 + r + start + stride*i]``, except location 0, which is
    ``first[b*R + r]`` when given.  Rows are ``b*R + r`` (each sentence's windows together), or
    ``r*B + b`` with ``by_position`` (so consecutive positions are consecutive row blocks).  One
    ``index_select``: its backward is one ``index_add``, no zero-filled gradient per location."""
    B, Q, C = seq.shape
    idx = row_index(B, Q, R, start + r0, stride, n, first is not None, by_position, seq.device)
    src = seq.reshape(B * Q, C)
    if first is not None:
        src = torch.cat([src, first.reshape(B * R, C)], 0)
    return src.index_select(0, idx).view(B * R, n, C)
