"""Window geometry and tensor kernels of the genCNN layers (:mod:`fairseq_local.modules.gencnn_layers`).

``LayerShape`` and ``Taps`` say which lower-layer locations each location of a layer reads (paper
Sections 3.1-3.2).  Three operations carry every product of Eq. 3-5 (Wang et al., ACL 2015) over a
batch of windows:

* :func:`window_product`: one weight matrix per window location (TIME-ARROW maps, Eq. 4, and
  TIME-FLOW maps read per window), a batched product over locations on a strided view of the
  windows (no gathered copy);
* :func:`dilated_conv`: shared weights over a whole sequence (TIME-FLOW maps, Eq. 3, and their
  gates), one convolution;
* :func:`gather_windows`: the rows of a sequence that a set of windows reads, one
  ``index_select`` (its backward is one ``index_add``).

and one operation carries Eq. 5, the merge of each gating window's two candidates (or Section
3.2's max-pooling of them): :func:`merge_pairs`, over every pair of a layer's locations at once,
and :func:`merge`, one pair given as two tensors.  Their backward is written by hand: each
candidate's gradient goes straight into the gradient of the tensor that holds the candidates (one
product each), where autograd would build a zero-filled gradient per sliced candidate and add them.
"""
import functools
from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from fairseq_local.modules.amp import autocast_inputs
from fairseq_local.modules.cuda_graphs import is_capturing


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
        # a captured graph owns its index (made in the graph, read by its backward); eagerly, cached
        ctx.rows = _tap_index.__wrapped__(taps, H.device) if is_capturing() and ctx.needs_input_grad[0] else None
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
            rows = _tap_index(taps, H.device) if ctx.rows is None else ctx.rows
            gH = H.new_zeros(M, n_in, C).index_add_(1, rows, gu.permute(1, 2, 0, 3).reshape(M, width * n, C))
        if ctx.needs_input_grad[1]:
            gW = torch.bmm(go.transpose(1, 2), _strided_windows(H, taps))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = go.sum(1)
        return gH, gW, gb, None


@functools.lru_cache(maxsize=64)
def _tap_index(taps: Taps, device: torch.device) -> Tensor:
    """Input location of every (tap, output location) pair, tap-major (built once per geometry; a
    captured graph builds its own, since the cache may free a tensor the graph still reads)."""
    width, stride, start, n = taps
    return (torch.arange(width, device=device)[:, None] + start + stride * torch.arange(n, device=device)).reshape(-1)


def _strided_windows(H: Tensor, taps: Taps) -> Tensor:
    """(count, M, width*C) view of contiguous H (M, n_in, C): [i, m] = H[m, start+stride*i ..][:width]."""
    width, stride, start, n = taps
    M, n_in, C = H.shape
    return H.as_strided((n, M, width * C), (stride * C, n_in * C, 1), H.storage_offset() + start * C)


def dilated_conv(x: Tensor, w: Tensor, b: Tensor, d: int) -> Tensor:
    """Dilated convolution of a stream x (B, Q, c) with w (F, width, c) -> (B, Q - d(width-1), F).

    One 2-D convolution of a height-1 image in channels-last layout: that is the memory layout of
    x, w and the result as they are, so neither the input, the weight, the output nor its gradient
    is copied into a channels-first layout.

    A stream shorter than the dilated kernel gives no positions (an empty result, where the
    convolution would raise).  That happens when the sequence is exactly one window long (a βCNN
    recursion of one block: the longest sentence of a batch has L_α + 1 tokens) and the last layer
    keeps only location 0: the windows then need no position of the stream, only the per-window
    location 0."""
    if x.shape[1] < d * (w.shape[1] - 1) + 1:
        return x.new_zeros(x.shape[0], 0, w.shape[0])
    out = F.conv2d(x.transpose(1, 2).unsqueeze(2), w.permute(0, 2, 1).unsqueeze(2), b, dilation=(1, d))
    return out.squeeze(2).transpose(1, 2)


@functools.lru_cache(maxsize=64)
def row_index(B: int, Q: int, R: int, start: int, stride: int, n: int, with_first: bool, by_position: bool,
              device: torch.device) -> Tensor:
    """The row indices :func:`gather_windows` selects (a function of the shapes only: built once
    per batch shape, not on every step, since each ``arange`` / ``add`` is a kernel on a GPU; a
    captured graph builds its own inside the graph, since the cache may free a tensor it reads)."""
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
    index = row_index.__wrapped__ if is_capturing() else row_index
    idx = index(B, Q, R, start + r0, stride, n, first is not None, by_position, seq.device)
    src = seq.reshape(B * Q, C)
    if first is not None:
        src = torch.cat([src, first.reshape(B * R, C)], 0)
    return src.index_select(0, idx).view(B * R, n, C)


class Pairs(NamedTuple):
    """Eq. 5's gating windows along one axis of a tensor of convolution locations: pair ``j <
    count`` merges location ``start + step*j`` (the older candidate, weight g) with ``start +
    step*j + gap`` (the newer one, weight 1 - g); the ``start`` locations before the first pair
    pass through (the oldest location of a layer with an odd number of locations)."""
    start: int
    step: int
    gap: int
    count: int

    def views(self, t: Tensor, dim: int):
        """(pass-through, older candidates, newer candidates): views of ``t`` along ``dim``."""
        def take(first: int) -> Tensor:
            return t[(slice(None),) * dim + (slice(first, first + self.step * (self.count - 1) + 1, self.step),)]
        return t.narrow(dim, 0, self.start), take(self.start), take(self.start + self.gap)


@functools.lru_cache(maxsize=64)
def _coverage(pairs: Pairs, size: int) -> Tuple[bool, bool]:
    """(some location is a candidate of two pairs, every location of ``size`` is passed through or
    a candidate)."""
    start, step, gap, n = pairs
    older = range(start, start + step * n, step)
    newer = range(start + gap, start + gap + step * n, step)
    overlap = bool(set(older) & set(newer))
    return overlap, set(range(start)) | set(older) | set(newer) == set(range(size))


def merge_pairs(a: Tensor, g: Optional[Tensor], pairs: Pairs, dim: int, out_dim: Optional[int] = None) -> Tensor:
    """Eq. 5 over every pair of ``a`` along ``dim``: ``g_j * older_j + (1 - g_j) * newer_j`` with
    ``g = sigmoid(gate pre-activations)`` (``g``: ``a``'s shape with ``pairs.count`` along
    ``dim``), or, ``g`` None, max-pooling of each pair (a tie selects the older candidate, as
    max-pooling's first maximal index does).  Returns the pass-through locations followed by the
    merged pairs, along ``out_dim`` (default ``dim``: the other axes keep their order).  One
    operator per term forward and backward (see the module doc)."""
    return _MergePairs.apply(a, g, pairs, dim, dim if out_dim is None else out_dim)


def merge(older: Tensor, newer: Tensor, g: Optional[Tensor]) -> Tensor:
    """Eq. 5 (or max-pooling, ``g`` None) of one pair given as two tensors of the same shape."""
    return _Merge.apply(older, newer, g)


def _merge_into(out: Tensor, older: Tensor, newer: Tensor, g: Optional[Tensor]) -> Tensor:
    """Writes the merged pair into ``out``; returns what the backward needs: the gate value
    sigmoid(g), or with max-pooling whether the older candidate was selected (bool)."""
    if g is None:
        pick = older >= newer
        torch.where(pick, older, newer, out=out)
        return pick
    s = torch.sigmoid(g)
    torch.lerp(newer, older, s, out=out)
    return s


def _merge_grads(go: Tensor, older: Tensor, newer: Tensor, s: Tensor, gate_grad: bool, g_older: Tensor,
                 overlap: bool = False, g_newer: Optional[Tensor] = None):
    """Backward of one merge (``s``: what ``_merge_into`` returned): writes ``go * s`` into
    ``g_older``, then ``go - go * s`` into ``g_newer`` (added to it when the two overlap; None: a
    new tensor); returns (the newer candidates' gradient, with ``gate_grad`` the gate
    pre-activations' gradient ``go * (older - newer) * s * (1 - s)``)."""
    torch.mul(go, s, out=g_older)
    if g_newer is None or overlap:
        rest = go - g_older
        g_newer = rest if g_newer is None else g_newer.add_(rest)
    else:
        torch.sub(go, g_older, out=g_newer)
    gg = torch.ops.aten.sigmoid_backward(go * (older - newer), s) if gate_grad else None
    return g_newer, gg


class _MergePairs(torch.autograd.Function):
    """:func:`merge_pairs`."""

    @staticmethod
    def forward(ctx, a, g, pairs: Pairs, dim: int, out_dim: int):
        shape = list(a.shape)
        shape[dim] = pairs.start + pairs.count
        shape.insert(out_dim, shape.pop(dim))
        out = a.new_empty(shape)
        first, older, newer = pairs.views(a, dim)
        o_first, o_pairs = out.movedim(out_dim, dim).split([pairs.start, pairs.count], dim)
        if pairs.start:
            o_first.copy_(first)
        s = _merge_into(o_pairs, older, newer, g)
        ctx.save_for_backward(a, s)
        ctx.geometry = pairs, dim, out_dim
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        a, s = ctx.saved_tensors
        pairs, dim, out_dim = ctx.geometry
        overlap, covered = _coverage(pairs, a.shape[dim])
        ga = a.new_empty(a.shape) if covered and not overlap else a.new_zeros(a.shape)
        g_first, g_older, g_newer = pairs.views(ga, dim)
        go_first, go_pairs = go.movedim(out_dim, dim).split([pairs.start, pairs.count], dim)
        if pairs.start:
            g_first.copy_(go_first)
        _, older, newer = pairs.views(a, dim)
        _, gg = _merge_grads(go_pairs, older, newer, s, ctx.needs_input_grad[1], g_older, overlap, g_newer)
        return ga, gg, None, None, None


class _Merge(torch.autograd.Function):
    """:func:`merge`."""

    @staticmethod
    def forward(ctx, older, newer, g):
        out = torch.empty_like(older)
        s = _merge_into(out, older, newer, g)
        ctx.save_for_backward(older, newer, s)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, go):
        older, newer, s = ctx.saved_tensors
        g_older = torch.empty_like(go)
        g_newer, gg = _merge_grads(go, older, newer, s, ctx.needs_input_grad[2], g_older)
        return g_older, g_newer, gg
