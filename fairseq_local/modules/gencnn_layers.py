"""genCNN layers (Wang et al., ACL 2015, "genCNN: A Convolutional Architecture for Word Sequence
Prediction"), vectorised over every position of a sentence.

Vocabulary of this file (paper Sections 3.1-3.3):

* A *window* is what one αCNN / βCNN unit reads: ``N = L + 1`` vectors, a *slot* at position 0
  (the output of the βCNN before it, or the zero padding vector "/" when the switch is off) followed
  by ``L`` word embeddings, oldest first.  Words before the sentence start are zero vectors.
* A convolution layer ``ℓ`` has kernel ``k`` and two kinds of feature maps
  - TIME-FLOW (Eq. 3): ``z_i = σ(w_TF · ẑ_i + b_TF)``, weights shared by every location ``i``;
  - TIME-ARROW (Eq. 4): ``z_i = σ(w_TA^(i) · ẑ_i + b_TA^(i))``, one weight matrix per location;
  where ``ẑ_i`` is the concatenation of the ``k`` lower-layer vectors ``i .. i+k-1``.
* Which lower maps each kind reads (the paper does not say; ``tf_input`` chooses):
  - ``"tf"`` (default): TIME-FLOW maps read only the TIME-FLOW maps below them, so the TIME-FLOW
    stream is a genuine location-independent CNN that "summarizes what has been said", while
    TIME-ARROW maps read all maps below (TIME-FLOW + TIME-ARROW) and so "pick the most relevant part
    from the representation of TIME-FLOW for the prediction task" (Section 3.4.1);
  - ``"all"``: both kinds read all lower maps (the literal reading of "the segment of Layer ℓ-1").
  Layer 1 reads the word embeddings for both kinds.
* Every convolution layer is followed by a gating layer (Eq. 5 and the equation before it): the
  convolution locations are merged in pairs ``(2j-1, 2j)``; a logistic gate per feature map reads
  ``z̄_j``, the union of the two candidates' input segments (``k + 1`` lower-layer vectors), and
  ``z_j = g z_{2j-1} + (1 - g) z_{2j}``.  Gate weights are shared across ``j`` for TIME-FLOW maps and
  location-dependent for TIME-ARROW maps; each gate reads the same lower maps as its convolution.
  When a layer has an odd number of locations, the oldest one passes through ungated, so the pairs
  always end at the newest word.
* ``merge="pooling"`` replaces the gates by max-pooling over the same pairs, the "direct pooling
  over feature-maps" Section 3.2 compares gating with: ``z_j = max(z_{2j-1}, z_{2j})`` per feature
  map, after the activation, with no gate parameters (the oldest location of an odd count passes
  through as with gates).
* After the last gating layer a fully connected layer (sigmoid in the paper) gives the output.

Vectorisation.  ``GatedConvStack.forward_sequence`` computes *all* windows of a sequence at once.
Only location 0 of each layer depends on the slot (which differs per window); every other location
of a TIME-FLOW map that reads only TIME-FLOW maps (all of them with ``tf_input="tf"``; layer 1
always) is a function of absolute positions, fixed by the window's gating alignment: location
``i >= 1`` of layer ``l``'s input in window ``r`` is ``Seq_l[r + a_l + d_l*i]`` with dilation
``d_l = 2^l``.  So these TIME-FLOW layers (convolution, gate and Eq. 5) are dilated ``conv1d``s
over the sequence computed once per position and shared by all windows (``shared_streams``), and
location 0 is computed per window from the slot chain (exactly the same expressions).  For the βCNN
the streams do not depend on the recursion, so they are computed once for all recursion blocks.
TIME-ARROW maps (one weight matrix per window location), and TIME-FLOW maps that read TIME-ARROW
maps (``tf_input="all"``), act on the windows as batched matrix products over locations, taken on
strided views of the window tensors (``_WindowMatmul``: no gathered copies in the forward, every
kernel tap's gradient added into the input gradient by one ``index_add`` in the backward); window gathers
are ``index_select``s (backward: ``index_add``).  All windows of a batch go through each layer
together, so the number of operators per training step does not grow with the sentence length or
the number of sentences (on a GPU a step is bound by kernel launches, not arithmetic).
``forward_windows`` is the same computation for explicit windows (used for incremental decoding).

``GenCNNBody`` wires αCNN and the recursive βCNN (Section 3.3, Figure 4): ``S(e)``, the βCNN summary
of the history ending at position ``e``, reads the slot ``S(e - L_β)`` and the words
``e-L_β+1 .. e``; the switch replaces it by the zero padding vector when no real (non-pad) word
exists up to ``e``.  αCNN at position ``t`` reads the slot ``S(t - L_α)`` and words ``t-L_α+1 .. t``.
So with history no longer than ``L_α`` the βCNN is switched off and the model is αCNN alone.  The
recursion ``S(e) <- S(e - L_β)`` is evaluated block by block (``L_β`` positions at a time, all in
parallel); that loop is over blocks of the recursion, not over positions.
"""
import functools
import math
from dataclasses import dataclass
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_local.modules.amp import autocast_inputs

MERGES = ("gating", "pooling")  # Section 3.2: gating networks (Eq. 5) or max-pooling of the pairs

_ACTIVATIONS = {
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


def get_activation(name: str):
    if name not in _ACTIVATIONS:
        raise ValueError(f"genCNN: unknown activation {name!r} (choose from {sorted(_ACTIVATIONS)})")
    return _ACTIVATIONS[name]


@dataclass
class LayerShape:
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
    def conv_taps(self) -> "Taps":  # Eq. 3-4: location i reads i .. i+k-1
        return Taps(width=self.kernel, stride=1, start=0, count=self.n_conv)

    @property
    def gate_taps(self) -> "Taps":  # Eq. 5: gate j reads its pair's segments, offset+2j .. offset+2j+k
        return Taps(width=self.kernel + 1, stride=2, start=self.offset, count=self.n_pairs)


class Taps(NamedTuple):
    """Output location ``i < count`` reads ``width`` input locations from ``start + stride * i``."""
    width: int
    stride: int
    start: int
    count: int


def parse_layers(spec: str) -> List[Tuple[int, int, int]]:
    """``"(3,150,150),(3,100,100)"`` -> [(kernel, TIME-FLOW maps, TIME-ARROW maps), ...]."""
    import ast

    try:
        value = ast.literal_eval(spec if spec.strip().startswith("[") else f"[{spec}]")
        layers = [tuple(int(v) for v in layer) for layer in value]
        assert all(len(layer) == 3 for layer in layers) and layers
        assert all(k >= 1 and tf >= 0 and ta >= 0 and tf + ta > 0 for k, tf, ta in layers)
    except Exception:
        raise ValueError(
            f"genCNN: bad layer spec {spec!r}: expected '(kernel, time_flow_maps, time_arrow_maps), ...'"
        ) from None
    return layers


class GatedConvStack(nn.Module):
    """One αCNN or βCNN unit: convolution (TIME-FLOW / TIME-ARROW) + gating layers and an FC layer.

    Parameter layout in ``self.w`` (also what the plain reference in tests/test_gencnn.py reads):
    ``conv_tf_w{l}``: (n_tf, k, c_tf), ``conv_ta_w{l}``: (n_conv, n_ta, k, c_ta),
    ``gate_tf_w{l}``: (n_tf, k+1, c_tf), ``gate_ta_w{l}``: (n_pairs, n_ta, k+1, c_ta), biases
    ``conv_tf_b{l}``: (n_tf,), ``conv_ta_b{l}``: (n_conv, n_ta), gates alike; a kind with no maps
    has no parameters, and no gate has any with ``merge="pooling"``;
    the FC reads the final locations flattened as (location, channel), channels TIME-FLOW first.
    """

    def __init__(self, window: int, in_dim: int, layers: Sequence[Tuple[int, int, int]], out_dim: int,
                 tf_input: str = "tf", activation: str = "relu", out_activation: str = "sigmoid",
                 init_range: float = 0.1, name: str = "αCNN", merge: str = "gating"):
        super().__init__()
        if tf_input not in ("tf", "all"):
            raise ValueError(f"genCNN: tf_input must be 'tf' or 'all', got {tf_input!r}")
        if merge not in MERGES:
            raise ValueError(f"genCNN: merge must be one of {MERGES}, got {merge!r}")
        self.window, self.in_dim, self.out_dim, self.tf_input = window, in_dim, out_dim, tf_input
        self.gated = merge == "gating"
        self.act = get_activation(activation)
        self.out_act = get_activation(out_activation)
        self.shapes: List[LayerShape] = []
        n_in, prev_tf, prev_all = window, in_dim, in_dim
        for li, (k, n_tf, n_ta) in enumerate(layers):
            c_tf = prev_all if (li == 0 or tf_input == "all") else prev_tf
            if n_tf < 0 or n_ta < 0 or n_tf + n_ta == 0:
                raise ValueError(f"{name}: layer {li + 1} needs at least one feature map, got {n_tf} TIME-FLOW "
                                 f"and {n_ta} TIME-ARROW")
            if n_tf > 0 and c_tf == 0:
                raise ValueError(f"{name}: layer {li + 1} has TIME-FLOW maps but nothing TIME-FLOW below "
                                 "to read (use tf_input='all')")
            n_conv = n_in - k + 1
            if n_conv < 2:
                raise ValueError(f"{name}: window of {window} positions is too short for layer {li + 1} "
                                 f"(kernel {k} on {n_in} locations); enlarge L or shrink kernels")
            off, pairs = n_conv % 2, n_conv // 2
            self.shapes.append(LayerShape(k, n_tf, n_ta, n_in, c_tf, prev_all, n_conv, off, pairs,
                                          pairs + off))
            n_in, prev_tf, prev_all = pairs + off, n_tf, n_tf + n_ta
        # kinds with no maps get no parameters (every parameter must receive a gradient)
        self.w = nn.ParameterDict()
        for li, s in enumerate(self.shapes):
            k = s.kernel
            if s.n_tf:
                self.w[f"conv_tf_w{li}"] = nn.Parameter(torch.empty(s.n_tf, k, s.c_tf))
                self.w[f"conv_tf_b{li}"] = nn.Parameter(torch.empty(s.n_tf))
            if s.n_tf and self.gated:
                self.w[f"gate_tf_w{li}"] = nn.Parameter(torch.empty(s.n_tf, k + 1, s.c_tf))
                self.w[f"gate_tf_b{li}"] = nn.Parameter(torch.empty(s.n_tf))
            if s.n_ta:
                self.w[f"conv_ta_w{li}"] = nn.Parameter(torch.empty(s.n_conv, s.n_ta, k, s.c_ta))
                self.w[f"conv_ta_b{li}"] = nn.Parameter(torch.empty(s.n_conv, s.n_ta))
            if s.n_ta and self.gated:
                self.w[f"gate_ta_w{li}"] = nn.Parameter(torch.empty(s.n_pairs, s.n_ta, k + 1, s.c_ta))
                self.w[f"gate_ta_b{li}"] = nn.Parameter(torch.empty(s.n_pairs, s.n_ta))
        last = self.shapes[-1]
        self.fc = nn.Linear(last.n_out * last.channels, out_dim)
        self.reset_parameters(init_range)

    def reset_parameters(self, init_range: float):
        """Paper Section 4.1: uniform in [-0.1, 0.1]; ``init_range <= 0`` uses fan-in scaling."""
        for p in self.parameters():
            if init_range > 0:
                nn.init.uniform_(p, -init_range, init_range)
            else:
                fan_in = p.shape[-1] * (p.shape[-2] if p.dim() >= 3 else 1)
                bound = 1.0 / math.sqrt(max(fan_in, 1))
                nn.init.uniform_(p, -bound, bound)

    # ---------------------------------------------------------------------------------------
    # Per-window computation.  A layer's input is a list of *parts* (M, n_in, c) whose channels
    # concatenate to the lower layer's maps: [X] at layer 1, [TIME-FLOW, TIME-ARROW] above (a kind
    # with no maps is left out), so TIME-FLOW maps reading only TIME-FLOW maps never slice channels.
    # Products are taken over window locations on strided views of the parts (no gathered copies),
    # location-major: (locations, M, maps).
    def _conv(self, parts: List[Tensor], W: Tensor, b: Tensor, taps: Taps, shared: bool) -> Tensor:
        """The ``taps.count`` output locations of one convolution (or gate) over the first
        ``W.shape[-1]`` channels of ``parts``: W (F, width, c) shared by every location (TIME-FLOW)
        or (count, F, width, c) one matrix per location (TIME-ARROW), b (F,) / (count, F).
        -> (count, M, F)."""
        width, stride, start, n = taps
        out, c0, c_all = None, 0, W.shape[-1]
        for part in parts:  # at most two: the TIME-FLOW and TIME-ARROW maps below
            if c0 >= c_all:
                break
            c = part.shape[-1]
            Wp = W if (c0 == 0 and c == c_all) else W[..., c0:c0 + c]
            Wp = Wp.reshape(Wp.shape[:-2] + (width * c,))
            if shared:
                Wp = Wp.expand(n, *Wp.shape)
            bias = None if out is not None else (b.expand(n, b.shape[-1]) if shared else b)
            r = _WindowMatmul.apply(*autocast_inputs(part, Wp, bias), taps)
            out = r if out is None else out + r
            c0 += c
        return out

    def _merge(self, left: Tensor, right: Tensor, g: Optional[Tensor]) -> Tensor:
        """Eq. 5, ``g * left + (1 - g) * right`` with ``g = sigmoid(gate pre-activation)``, or
        max-pooling of the pair (``merge="pooling"``, ``g`` None).  A tie (two positions before
        the sentence start) selects the older location, so its gradient goes there alone, as
        max-pooling's first maximal index does (``torch.maximum`` would split it)."""
        if g is None:
            return torch.where(left >= right, left, right)
        return torch.lerp(right, left, torch.sigmoid(g))

    def _gate_merge(self, s: LayerShape, z: Tensor, g: Optional[Tensor]) -> Tensor:
        """Activation, then Eq. 5: z (n_conv, M, F), gate pre-activations g (n_pairs, M, F) or
        None (pooling) -> (M, n_out, F).  The oldest location passes through when n_conv is odd."""
        a = self.act(z)
        o, J = s.offset, s.n_pairs
        first, rest = a.split([o, 2 * J], 0)
        left, right = rest.unflatten(0, (J, 2)).unbind(1)  # conv locations o+2j, o+2j+1
        out = self._merge(left, right, g)
        if o:
            out = torch.cat([first, out], 0)
        return out.transpose(0, 1).contiguous()

    def _layer_parts(self, li: int, parts: List[Tensor], kinds=("tf", "ta")) -> List[Tensor]:
        """Layer ``li`` on explicit windows given as parts -> [TIME-FLOW (M, n_out, n_tf),
        TIME-ARROW (M, n_out, n_ta)] (kinds with no maps, or not in ``kinds``, left out)."""
        s, w = self.shapes[li], self.w
        out = []
        for kind, shared in (("tf", True), ("ta", False)):  # TIME-FLOW: one matrix for every location
            if (s.n_tf if shared else s.n_ta) == 0 or kind not in kinds:
                continue
            z = self._conv(parts, w[f"conv_{kind}_w{li}"], w[f"conv_{kind}_b{li}"], s.conv_taps, shared)
            g = None
            if self.gated:
                g = self._conv(parts, w[f"gate_{kind}_w{li}"], w[f"gate_{kind}_b{li}"], s.gate_taps, shared)
            out.append(self._gate_merge(s, z, g))
        return out

    def _split(self, li: int, H: Tensor) -> List[Tensor]:
        if li == 0:
            return [H]
        n_tf = self.shapes[li - 1].n_tf
        return [p for p in (H[..., :n_tf], H[..., n_tf:]) if p.shape[-1]]

    def _layer_windows(self, li: int, H: Tensor) -> Tensor:
        """Layer ``li`` on explicit windows: H (M, n_in, C) -> (M, n_out, n_tf + n_ta)."""
        return torch.cat(self._layer_parts(li, self._split(li, H)), -1)

    def _head(self, parts: List[Tensor]) -> Tensor:
        H = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        return self.out_act(self.fc(H.flatten(-2)))

    def forward_windows(self, X: Tensor) -> Tensor:
        """X: (M, window, in_dim) explicit windows (slot at position 0) -> (M, out_dim)."""
        assert X.shape[1] == self.window, (X.shape, self.window)
        parts = [X]
        for li in range(len(self.shapes)):
            parts = self._layer_parts(li, parts)
        return self._head(parts)

    # ---------------------------------------------------------------------------------------
    # Whole-sequence computation.  Window ``r`` of a sequence (B, P, C) reads positions
    # ``r .. r+window-1``, its location 0 replaced by a per-window slot.  Only location 0 of every
    # layer depends on the slot (conv location i reads input locations i .. i+k-1, a gate pair
    # reads its two locations' segments), so the other locations of a TIME-FLOW stream that reads
    # only TIME-FLOW maps are functions of absolute positions: location i >= 1 of layer l's input
    # in window r is ``Seq_l[r + a_l + d_l*i]`` with ``a_0 = 0, d_0 = 1``, and gating (pair of
    # conv locations ``o+2j, o+2j+1``) gives ``a_{l+1} = a_l - d_l*o``, ``d_{l+1} = 2*d_l``.
    # Such a layer is a dilated convolution over the sequence (computed once per position, shared
    # by every window with the same gating alignment), and only location 0 is computed per window.
    def _tf_shareable(self, li: int) -> bool:
        s = self.shapes[li]
        return s.n_tf > 0 and (li == 0 or s.c_tf == self.shapes[li - 1].n_tf)

    def shared_streams(self, seq: Tensor) -> list:
        """The slot-independent TIME-FLOW streams of ``seq`` (B, P, in_dim): per shareable layer
        ``(Seq_l (B, Q_l, c), activated conv (B, Q_l - d(k-1), n_tf), a_l, d_l)``, then the stream
        after the last one ``(Seq, None, a, d)``.  Depends on the sequence only, so the βCNN
        recursion computes it once for all its blocks."""
        streams, Seq, a, d = [], seq, 0, 1
        for li, s in enumerate(self.shapes):
            if not self._tf_shareable(li):
                break
            x = Seq.transpose(1, 2)
            C = self.act(_dilated_conv(x, self.w[f"conv_tf_w{li}"], self.w[f"conv_tf_b{li}"], d))
            G = _dilated_conv(x, self.w[f"gate_tf_w{li}"], self.w[f"gate_tf_b{li}"], d) if self.gated else None
            streams.append((Seq, C, a, d))
            # Eq. 5 once per position q: the pair of conv outputs (q, q + d), gate at q
            n = max(C.shape[1] - d, 0)  # = G.shape[1]
            Seq = self._merge(C[:, :n], C[:, d:d + n], G)
            a, d = a - d * s.offset, 2 * d
        streams.append((Seq, None, a, d))
        return streams

    def _shared_location0(self, li: int, stream, loc0: Tensor, r0: int, R: int) -> Tensor:
        """TIME-FLOW output location 0 of layer ``li`` for windows ``r0 .. r0+R-1`` (M, n_tf),
        from their input location 0 ``loc0`` (M, c) and the shared stream (exactly Eq. 3-5)."""
        s = self.shapes[li]
        Seq, C, a, d = stream
        k, o, Fn = s.kernel, s.offset, s.n_tf
        u = _gather_rows(Seq, loc0, R, a, d, k + 1 - o, r0, window_major=True)  # (M, k+1-o, c)
        w = self.w[f"conv_tf_w{li}"].reshape(Fn, -1)
        z0 = self.act(torch.addmm(self.w[f"conv_tf_b{li}"], u[:, :k].reshape(u.shape[0], -1), w.t()))
        if o:
            return z0  # the oldest location passes through ungated
        g0 = None
        if self.gated:
            v = self.w[f"gate_tf_w{li}"].reshape(Fn, -1)
            g0 = torch.addmm(self.w[f"gate_tf_b{li}"], u.reshape(u.shape[0], -1), v.t())
        z1 = _gather_rows(C, None, R, a + d, 1, 1, r0)[0]  # conv location 1 (clean)
        return self._merge(z0, z1, g0)

    def forward_sequence(self, seq: Tensor, slot: Tensor, streams: Optional[list] = None,
                         r0: int = 0) -> Tensor:
        """Every window of ``seq`` (B, P, in_dim): window ``r`` (``r0 <= r < r0 + R``, R =
        ``slot.shape[1]``, by default every window: ``R = P - window + 1``) is
        ``seq[r .. r+window-1]`` with position 0 replaced by ``slot[:, r - r0]``.  Returns
        (B, R, out_dim).  ``streams``: ``shared_streams(seq)`` if already computed.

        TIME-FLOW maps that read only TIME-FLOW maps (all of them with ``tf_input="tf"``, the
        first layer's always) are dilated convolutions over the sequence shared by all windows
        (``shared_streams``); location 0, which reads the slot, is computed per window.
        TIME-ARROW maps act on the gathered windows, one weight matrix per location (batched
        products over locations on strided views).  All windows go through each layer together,
        so the number of operators does not depend on the sentence length or the batch.
        """
        B, P, E = seq.shape
        assert r0 + slot.shape[1] <= P - self.window + 1, (r0, slot.shape[1], P, self.window)
        if streams is None:
            streams = self.shared_streams(seq)
        return self._forward_rows(seq, slot, streams, r0)

    # ---------------------------------------------------------------------------------------
    # The location-0 chain.  When every layer is a shared TIME-FLOW stream (the βCNN), a window's
    # output depends on its slot only through location 0 of each layer, and every term of Eq. 3-5
    # and of the FC layer that reads another location is a function of absolute positions.  Those
    # terms are computed once for all windows (``chain_terms``), so a window given its slot costs
    # two small products per layer and one for the FC layer (``chain``): what the βCNN recursion
    # of Section 3.3 evaluates once per block of L_β positions.
    @property
    def is_chain(self) -> bool:
        """Every layer is a shared TIME-FLOW stream (no TIME-ARROW maps)."""
        return all(s.n_ta == 0 and self._tf_shareable(li) for li, s in enumerate(self.shapes))

    def chain_terms(self, streams: list, R: int) -> list:
        """Slot-independent terms for windows ``0 .. R-1`` of the sequence of ``streams``, rows
        window-major (row ``r*B + b``): per layer ``(conv pre-activation of location 0 without its
        slot tap, gate pre-activation of location 0 without it, activated conv location 1)`` (the
        last two None when the oldest location passes through ungated, the gate's None with
        pooling), then the FC pre-activation without location 0."""
        terms = []
        for li, s in enumerate(self.shapes):
            Seq, C, a, d = streams[li]
            k, o, Fn = s.kernel, s.offset, s.n_tf
            u = _gather_rows(Seq, None, R, a + d, d, k - o, 0, position_major=True)  # locations 1 .. k-o
            w = self.w[f"conv_tf_w{li}"][:, 1:].reshape(Fn, -1)
            z = torch.addmm(self.w[f"conv_tf_b{li}"], u[:, :w.shape[1]], w.t())
            if o:
                terms.append((z, None, None))
                continue
            g = None
            if self.gated:
                v = self.w[f"gate_tf_w{li}"][:, 1:].reshape(Fn, -1)
                g = torch.addmm(self.w[f"gate_tf_b{li}"], u, v.t())
            z1 = _gather_rows(C, None, R, a + d, 1, 1, 0, position_major=True)
            terms.append((z, g, z1))
        Seq, _, a, d = streams[-1]
        last = self.shapes[-1]
        rest = _gather_rows(Seq, None, R, a + d, d, last.n_out - 1, 0, position_major=True)
        ch = last.channels
        terms.append(torch.addmm(self.fc.bias, rest, self.fc.weight[:, ch:].t()))
        return terms

    @staticmethod
    def split_terms(terms: list, rows: int) -> List[list]:
        """``chain_terms`` cut into consecutive blocks of ``rows`` rows (one split per tensor, whose
        backward is one concatenation, where slicing per block would cost a zero-filled gradient
        of the whole tensor per block)."""
        flat = [t for layer in terms[:-1] for t in layer] + [terms[-1]]
        pieces = [None if t is None else t.split(rows) for t in flat]
        n = len(next(p for p in pieces if p is not None))
        out = []
        for i in range(n):
            f = [None if p is None else p[i] for p in pieces]
            out.append([tuple(f[3 * li:3 * li + 3]) for li in range(len(terms) - 1)] + [f[-1]])
        return out

    def chain_weights(self) -> list:
        """The weights that read location 0: per layer (conv, gate) transposed slot taps, then
        the FC columns of location 0 (sliced once for all blocks of a recursion)."""
        ws = [(self.w[f"conv_tf_w{li}"][:, 0].t(),
               self.w[f"gate_tf_w{li}"][:, 0].t() if self.gated and not s.offset else None)
              for li, s in enumerate(self.shapes)]
        return ws + [self.fc.weight[:, :self.shapes[-1].channels].t()]

    def chain(self, terms: list, slot: Tensor, weights: Optional[list] = None) -> Tensor:
        """Outputs (M, out_dim) of the windows of ``terms`` (``chain_terms`` or a block of it)
        given their slots ``slot`` (M, in_dim): Eq. 3 and 5 for location 0 of each layer, then
        the FC layer.  ``weights``: ``chain_weights()`` if already computed."""
        if weights is None:
            weights = self.chain_weights()
        h = slot
        for (z, g, z1), (wz, wg) in zip(terms[:-1], weights[:-1]):
            z0 = self.act(torch.addmm(z, h, wz))
            if z1 is None:
                h = z0  # the oldest location passes through ungated
            else:
                h = self._merge(z0, z1, None if g is None else torch.addmm(g, h, wg))
        return self.out_act(torch.addmm(terms[-1], h, weights[-1]))

    def _forward_rows(self, seq: Tensor, slot: Tensor, streams: list, r0: int) -> Tensor:
        B, P, E = seq.shape
        R = slot.shape[1]
        tf_loc0, tf_win = slot.reshape(B * R, E), None  # TIME-FLOW input: location 0 / per-window
        ta_win: Optional[Tensor] = None
        for li, s in enumerate(self.shapes):
            shared = li < len(streams) - 1
            # a layer above one with no TIME-FLOW maps has no TIME-FLOW input to gather
            need_tf_win = (li == 0 or self.shapes[li - 1].n_tf > 0) and \
                (s.n_ta > 0 or (s.n_tf > 0 and not shared))
            if need_tf_win and tf_win is None:  # gather the TIME-FLOW input of every window
                Seq, _, a, d = streams[li]
                tf_win = _gather_rows(Seq, tf_loc0, R, a, d, s.n_in, r0, window_major=True)
            parts = [p for p in (tf_win, ta_win) if p is not None and p.shape[-1]]
            new_ta = self._layer_parts(li, parts, ("ta",)) if s.n_ta else []
            if shared:
                tf_loc0, tf_win = self._shared_location0(li, streams[li], tf_loc0, r0, R), None
            elif s.n_tf:
                tf_loc0, tf_win = None, self._layer_parts(li, parts, ("tf",))[0]
            else:
                tf_loc0, tf_win = None, None
            ta_win = new_ta[0] if new_ta else None
        if tf_loc0 is not None:
            Seq, _, a, d = streams[-1]
            tf_win = _gather_rows(Seq, tf_loc0, R, a, d, self.shapes[-1].n_out, r0, window_major=True)
        return self._head([p for p in (tf_win, ta_win) if p is not None]).reshape(B, R, self.out_dim)


class _WindowMatmul(torch.autograd.Function):
    """``out[i] = u_i @ W[i].T (+ b[i])`` for ``i < taps.count``, where row ``m`` of ``u_i`` is
    ``H[m, start + stride*i : ... + width]`` flattened: a batched product over window locations
    on a strided view of H (M, n_in, C) (no gathered copy); the backward adds all taps' gradients
    into H's gradient with one ``index_add_`` (no unfold, no zero-filled gather gradients)."""

    @staticmethod
    def forward(ctx, H, W, b, taps: Taps):
        H = H.contiguous()
        u = _strided(H, taps)
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
            gW = torch.bmm(go.transpose(1, 2), _strided(H, taps))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = go.sum(1)
        return gH, gW, gb, None


@functools.lru_cache(maxsize=64)
def _tap_index(taps: Taps, device: torch.device) -> Tensor:
    """Input location of every (tap, output location) pair, tap-major (built once per geometry)."""
    width, stride, start, n = taps
    return (torch.arange(width, device=device)[:, None] + start + stride * torch.arange(n, device=device)).reshape(-1)


def _dilated_conv(x: Tensor, w: Tensor, b: Tensor, d: int) -> Tensor:
    """Dilated convolution of a stream x (B, c, Q) with w (F, width, c) -> (B, Q - d(width-1), F).

    A stream shorter than the dilated kernel gives no positions (an empty result, where ``conv1d``
    would raise).  That happens when the sequence is exactly one window long (a βCNN recursion of
    one block: the longest sentence of a batch has L_α + 1 tokens) and the last layer keeps only
    location 0: the windows then need no position of the stream, only the per-window location 0."""
    if x.shape[-1] < d * (w.shape[1] - 1) + 1:
        return x.new_zeros(x.shape[0], 0, w.shape[0])
    return F.conv1d(x, w.permute(0, 2, 1), b, dilation=d).transpose(1, 2)


def _strided(H: Tensor, taps: Taps) -> Tensor:
    """(count, M, width*C) view of contiguous H (M, n_in, C): [i, m] = H[m, start+stride*i ..][:width]."""
    width, stride, start, n = taps
    M, n_in, C = H.shape
    return H.as_strided((n, M, width * C), (stride * C, n_in * C, 1), H.storage_offset() + start * C)


@functools.lru_cache(maxsize=64)
def _row_index(B: int, Q: int, R: int, start: int, stride: int, n: int, with_first: bool, layout: str,
               device: torch.device) -> Tensor:
    """The row indices ``_gather_rows`` selects (a function of the shapes only: built once per
    batch shape, not on every step, since each ``arange`` / ``add`` is a kernel on a GPU)."""
    ar = torch.arange
    idx = (ar(n, device=device)[:, None, None] * stride + start
           + ar(B, device=device)[:, None] * Q + ar(R, device=device))  # [i, b, r]
    if with_first:
        idx[0] = B * Q + ar(B * R, device=device).view(B, R)
    if layout == "window":
        return idx.view(n, B * R).t().reshape(-1)
    if layout == "position":
        return idx.permute(2, 1, 0).reshape(-1)
    return idx.reshape(-1)


def _gather_rows(seq: Tensor, first: Optional[Tensor], R: int, start: int, stride: int, n: int,
                 r0: int = 0, window_major: bool = False, position_major: bool = False) -> Tensor:
    """(n, B*R, C) with [i, b*R + r] = seq[b, r0 + r + start + stride*i], except location 0, which
    is ``first[b*R + r]`` when given: one index_select (its backward is an index_add, no
    zero-filled gather gradients).  ``window_major``: (B*R, n, C) instead; ``position_major``:
    (R*B, n*C), row ``r*B + b``, locations concatenated."""
    B, Q, C = seq.shape
    layout = "window" if window_major else "position" if position_major else "location"
    idx = _row_index(B, Q, R, start + r0, stride, n, first is not None, layout, seq.device)
    src = seq.reshape(B * Q, C)
    if first is not None:
        src = torch.cat([src, first.reshape(B * R, C)], 0)
    out = src.index_select(0, idx)
    if window_major:
        return out.view(B * R, n, C)
    if position_major:
        return out.view(R * B, n * C)
    return out.view(n, B * R, C)


class GenCNNBody(nn.Module):
    """αCNN + recursive βCNN over embedded sequences (Section 3.3), full-sequence and step-wise.

    ``beta_layers=None`` gives the "αCNN only" model (the slot is always the padding vector).
    """

    def __init__(self, embed_dim: int, L_alpha: int, alpha_layers, out_dim: int,
                 L_beta: int = 0, beta_layers=None, tf_input: str = "tf", activation: str = "relu",
                 fc_activation: str = "sigmoid", init_range: float = 0.1, merge: str = "gating"):
        super().__init__()
        self.embed_dim, self.L_alpha, self.out_dim = embed_dim, L_alpha, out_dim
        self.alpha = GatedConvStack(L_alpha + 1, embed_dim, alpha_layers, out_dim, tf_input, activation,
                                    fc_activation, init_range, name="αCNN", merge=merge)
        self.use_beta = bool(beta_layers) and L_beta > 0
        self.L_beta = L_beta if self.use_beta else 0
        self.beta = None
        if self.use_beta:
            self.beta = GatedConvStack(L_beta + 1, embed_dim, beta_layers, embed_dim, tf_input,
                                       activation, fc_activation, init_range, name="βCNN", merge=merge)

    @property
    def history_size(self) -> int:
        """Tokens the incremental state keeps: αCNN's window plus the βCNN chunk before it."""
        return self.L_alpha + self.L_beta

    def beta_summaries(self, emb: Tensor, has_hist: Tensor, n: int) -> Tensor:
        """``S(e)`` for ``e`` in ``[0, n)`` (B, n, E); zero where the switch is off.

        The recursion ``S(e) <- S(e - L_β)`` runs one block of L_β positions at a time (all in
        parallel); with a TIME-FLOW-only βCNN (the paper's) everything that does not read the
        slot is computed once for all blocks (``GatedConvStack.chain_terms``), so a block costs
        the location-0 chain only."""
        B, _, E = emb.shape
        Lb = self.L_beta
        seq = torch.cat([emb.new_zeros(B, Lb, E), emb[:, :n]], 1)  # window e = seq[e .. e+Lb]
        streams = self.beta.shared_streams(seq)  # slot-independent: once for all blocks
        blocks: List[Tensor] = []
        if self.beta.is_chain:
            terms = self.beta.chain_terms(streams, n)
            switch = has_hist[:, :n].t().reshape(n * B, 1).to(emb.dtype)  # rows e*B + b
            slot, weights = emb.new_zeros(min(Lb, n) * B, E), self.beta.chain_weights()
            # over blocks of the recursion, not positions: block i holds e = i*Lb .. i*Lb + Lb - 1
            for block, on in zip(self.beta.split_terms(terms, Lb * B), switch.split(Lb * B)):
                slot = self.beta.chain(block, slot[: on.shape[0]], weights) * on
                blocks.append(slot)
            return torch.cat(blocks, 0).view(n, B, E).transpose(0, 1)
        for b0 in range(0, n, Lb):
            b1 = min(b0 + Lb, n)
            slot = blocks[-1][:, :b1 - b0] if blocks else emb.new_zeros(B, b1 - b0, E)
            out = self.beta.forward_sequence(seq, slot, streams, r0=b0)
            blocks.append(out * has_hist[:, b0:b1, None].to(out.dtype))
        return torch.cat(blocks, 1)

    def forward(self, emb: Tensor, nonpad: Tensor) -> Tuple[Tensor, Tensor]:
        """emb (B, T, E) with pads already zero, nonpad (B, T) bool -> features (B, T, out_dim)
        and the βCNN summaries ``S`` (B, max(T - L_α, 0), E)."""
        B, T, E = emb.shape
        La = self.L_alpha
        n_beta = max(T - La, 0)
        if self.use_beta and n_beta > 0:
            has_hist = nonpad.cumsum(1) > 0
            S = self.beta_summaries(emb, has_hist, n_beta)
        else:
            S = emb.new_zeros(B, n_beta, E)
        slot = torch.cat([emb.new_zeros(B, T - n_beta, E), S], 1)  # slot of window t = S(t - La)
        seq = torch.cat([emb.new_zeros(B, La, E), emb], 1)  # window t = seq[t .. t+La]
        return self.alpha.forward_sequence(seq, slot), S

    def step(self, emb_buf: Tensor, s_buf: Tensor, hist: Tensor, nonpad_e: Tensor):
        """One generation step, constant cost.

        emb_buf (B, L_α + L_β, E): embeddings of the newest ``L_α + L_β`` positions ending at ``t``
        (zeros before the start); s_buf (B, L_β, E): ``S(e)`` for ``e = t-1-L_α-L_β+1 .. t-1-L_α``;
        hist (B,) bool: a real word exists up to ``t-1-L_α``; nonpad_e (B,) bool: position
        ``t-L_α`` is a real word.  Returns (features (B, out_dim), new s_buf, new hist).
        """
        La, Lb = self.L_alpha, self.L_beta
        B, _, E = emb_buf.shape
        if self.use_beta:
            hist = hist | nonpad_e
            window = torch.cat([s_buf[:, :1], emb_buf[:, :Lb]], 1)
            s_new = self.beta.forward_windows(window) * hist[:, None].to(emb_buf.dtype)
            s_buf = torch.cat([s_buf[:, 1:], s_new[:, None]], 1)
            slot = s_new
        else:
            slot = emb_buf.new_zeros(B, E)
        window = torch.cat([slot[:, None], emb_buf[:, Lb:]], 1)
        return self.alpha.forward_windows(window), s_buf, hist
