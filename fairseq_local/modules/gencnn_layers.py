"""genCNN layers (Wang et al., ACL 2015, "genCNN: A Convolutional Architecture for Word Sequence
Prediction"), vectorised over every position of a sentence (kernels: ``gencnn_kernels.py``).

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

Vectorisation (``GatedConvStack.forward_sequence``: all windows of a sequence at once).  A
TIME-FLOW layer that reads only TIME-FLOW maps is a *shared stream*: but for location 0, which
reads the slot, its locations are functions of absolute positions, so its convolution, gate and
Eq. 5 are dilated convolutions over the sequence shared by all windows, and location 0 is computed
per window (one path for the αCNN and the βCNN recursion).  Every other layer runs on the gathered
windows as batched products over locations.  All windows of a batch go through each layer
together: the number of operators per step does not grow with the sentence length or the batch.

``GenCNNBody`` wires αCNN and the recursive βCNN (Section 3.3, Figure 4): ``S(e)``, the βCNN summary
of the history ending at position ``e``, reads the slot ``S(e - L_β)`` and the words
``e-L_β+1 .. e``; the switch replaces it by the zero padding vector when no real (non-pad) word
exists up to ``e``.  αCNN at position ``t`` reads the slot ``S(t - L_α)`` and words ``t-L_α+1 .. t``.
So with history no longer than ``L_α`` the βCNN is switched off and the model is αCNN alone.  The
recursion ``S(e) <- S(e - L_β)`` is evaluated block by block (``L_β`` positions at a time, all in
parallel); that loop is over blocks of the recursion, not over positions.
"""
import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from fairseq_local.modules.gencnn_kernels import (LayerShape, Pairs, Taps, dilated_conv, gather_windows, merge,
                                                  merge_pairs, window_product)

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


class Stream(NamedTuple):
    """A shared TIME-FLOW stream (a layer's input over the whole sequence): location ``i >= 1`` of
    window ``r``'s input is ``seq[:, r + start + dilation*i]``."""
    seq: Tensor  # (B, Q, c)
    conv: Optional[Tensor]  # (B, Q - dilation*(k-1), n_tf) activated convolution; None after the last layer
    start: int
    dilation: int


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
            for kind, n_maps, c in (("tf", s.n_tf, s.c_tf), ("ta", s.n_ta, s.c_ta)):
                for part, width, n_loc in (("conv", s.kernel, s.n_conv), ("gate", s.kernel + 1, s.n_pairs)):
                    if n_maps and (part == "conv" or self.gated):
                        per_location = (n_loc,) if kind == "ta" else ()  # TIME-ARROW: one matrix per location
                        self.w[f"{part}_{kind}_w{li}"] = nn.Parameter(torch.empty(*per_location, n_maps, width, c))
                        self.w[f"{part}_{kind}_b{li}"] = nn.Parameter(torch.empty(*per_location, n_maps))
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

    def params(self, part: str, kind: str, li: int) -> Tuple[Tensor, Tensor]:
        """(weight, bias) of layer ``li``'s ``part`` ("conv": Eq. 3-4, "gate": the gate of Eq. 5)
        for the maps of ``kind`` ("tf": TIME-FLOW, "ta": TIME-ARROW)."""
        return self.w[f"{part}_{kind}_w{li}"], self.w[f"{part}_{kind}_b{li}"]

    # ---------------------------------------------------------------------------------------
    # Per-window computation.  A layer's input is a list of *parts* (M, n_in, c) whose channels
    # concatenate to the lower layer's maps: [X] at layer 1, [TIME-FLOW, TIME-ARROW] above (a kind
    # with no maps is left out), so TIME-FLOW maps reading only TIME-FLOW maps never slice channels;
    # maps reading every part read them concatenated once per layer (one product, not one per part).
    def window_maps(self, parts: List[Tensor], W: Tensor, b: Tensor, taps: Taps, location_shared: bool) -> Tensor:
        """Eq. 3 (``location_shared``: TIME-FLOW, W (F, width, c)) or Eq. 4 (TIME-ARROW, one matrix
        per location, W (count, F, width, c)) pre-activations, or a gate's (``taps`` of the gating
        pairs), of the ``taps.count`` output locations over the channels of ``parts`` concatenated;
        b (F,) / (count, F).  -> (count, M, F), location-major: one ``window_product``."""
        H = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        W = W.flatten(-2)
        if location_shared:
            W, b = W.expand(taps.count, *W.shape), b.expand(taps.count, b.shape[-1])
        return window_product(H, W, b, taps)

    def activate_and_merge(self, s: LayerShape, z: Tensor, g: Optional[Tensor]) -> Tensor:
        """Activation of Eq. 3-4, then Eq. 5 (``merge_pairs``): z (n_conv, M, F), gate
        pre-activations g (n_pairs, M, F) or None (pooling) -> (M, n_out, F).  The oldest location
        passes through when n_conv is odd."""
        return merge_pairs(self.act(z), g, Pairs(s.offset, 2, 1, s.n_pairs), 0, out_dim=1)

    def window_layer(self, li: int, parts: List[Tensor], kinds=("tf", "ta")) -> List[Tensor]:
        """Layer ``li`` (Eq. 3-5) on explicit windows given as parts -> [TIME-FLOW (M, n_out, n_tf),
        TIME-ARROW (M, n_out, n_ta)] (kinds with no maps, or not in ``kinds``, left out)."""
        s = self.shapes[li]
        whole = parts if len(parts) == 1 else None  # every part, concatenated at most once
        out = []
        for kind in kinds:
            n_maps, c = (s.n_tf, s.c_tf) if kind == "tf" else (s.n_ta, s.c_ta)
            if n_maps == 0:
                continue
            if c < sum(p.shape[-1] for p in parts):  # TIME-FLOW maps that read only the TIME-FLOW part below
                reads = parts[:1]
            else:
                whole = whole or [torch.cat(parts, -1)]
                reads = whole
            location_shared = kind == "tf"  # TIME-FLOW: one matrix for every location
            z = self.window_maps(reads, *self.params("conv", kind, li), s.conv_taps, location_shared)
            g = None
            if self.gated:
                g = self.window_maps(reads, *self.params("gate", kind, li), s.gate_taps, location_shared)
            out.append(self.activate_and_merge(s, z, g))
        return out

    def _layer_windows(self, li: int, H: Tensor) -> Tensor:
        """Layer ``li`` on explicit windows: H (M, n_in, C) -> (M, n_out, n_tf + n_ta)."""
        n_tf = self.shapes[li - 1].n_tf if li else H.shape[-1]
        parts = [p for p in (H[..., :n_tf], H[..., n_tf:]) if p.shape[-1]]
        return torch.cat(self.window_layer(li, parts), -1)

    def head(self, parts: List[Tensor]) -> Tensor:
        """The fully connected output layer on the final locations (M, n_out, c) of each part."""
        H = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        return self.out_act(self.fc(H.flatten(-2)))

    def forward_windows(self, X: Tensor) -> Tensor:
        """X: (M, window, in_dim) explicit windows (slot at position 0) -> (M, out_dim)."""
        assert X.shape[1] == self.window, (X.shape, self.window)
        parts = [X]
        for li in range(len(self.shapes)):
            parts = self.window_layer(li, parts)
        return self.head(parts)

    # ---------------------------------------------------------------------------------------
    # Shared streams.  Only location 0 of every layer depends on a window's slot (conv location i
    # reads input locations i .. i+k-1, a gate pair its two locations' segments), so the other
    # locations of a TIME-FLOW layer that reads only TIME-FLOW maps are functions of absolute
    # positions: location i >= 1 of layer l's input in window r is ``Seq_l[r + a_l + d_l*i]`` with
    # ``a_0 = 0, d_0 = 1``; gating (conv locations ``o+2j, o+2j+1``) gives ``a_{l+1} = a_l - d_l*o``,
    # ``d_{l+1} = 2*d_l``.
    def _is_shared_stream(self, li: int) -> bool:
        s = self.shapes[li]
        return s.n_tf > 0 and (li == 0 or s.c_tf == self.shapes[li - 1].n_tf)

    @property
    def is_chain(self) -> bool:
        """Every layer is a shared stream (no TIME-ARROW maps): a window's output depends on its
        slot only through location 0 of each layer (``chain``)."""
        return all(s.n_ta == 0 and self._is_shared_stream(li) for li, s in enumerate(self.shapes))

    def shared_streams(self, seq: Tensor) -> List[Stream]:
        """The slot-independent TIME-FLOW streams of ``seq`` (B, P, in_dim), one per shared layer,
        then the stream after the last one (``conv`` None).  Eq. 3 and the gates of Eq. 5 are
        dilated convolutions over the sequence, Eq. 5 is taken once per position.  Depends on the
        sequence only, so the βCNN recursion computes it once for all its blocks."""
        streams, Seq, a, d = [], seq, 0, 1
        for li, s in enumerate(self.shapes):
            if not self._is_shared_stream(li):
                break
            C = self.act(dilated_conv(Seq, *self.params("conv", "tf", li), d))
            G = dilated_conv(Seq, *self.params("gate", "tf", li), d) if self.gated else None
            streams.append(Stream(Seq, C, a, d))
            n = max(C.shape[1] - d, 0)  # = G.shape[1]: the pair of conv outputs (q, q + d), gate at q
            Seq = merge_pairs(C, G, Pairs(0, 1, d, n), 1)
            a, d = a - d * s.offset, 2 * d
        streams.append(Stream(Seq, None, a, d))
        return streams

    def location0_weights(self, li: int) -> tuple:
        """Shared layer ``li``'s weights split at location 0 (one split each: its backward is one
        concatenation): (conv, gate), each (transposed slot tap (c, n_tf), the other taps
        (n_tf, (k-1)*c or k*c), bias); the gate None when location 0 passes through ungated or
        with pooling."""
        def split(part):
            W, b = self.params(part, "tf", li)
            slot, rest = W.split([1, W.shape[1] - 1], 1)
            return slot.flatten(1).t(), rest.flatten(1), b
        return split("conv"), split("gate") if self.gated and not self.shapes[li].offset else None

    def location0_terms(self, li: int, stream: Stream, R: int, r0: int = 0, by_position: bool = False,
                        weights: Optional[tuple] = None) -> tuple:
        """What location 0 of shared layer ``li`` needs besides its slot input, for windows
        ``r0 .. r0+R-1`` (rows as ``gather_windows``'s): (Eq. 3 pre-activation without the slot
        tap, the gate's pre-activation without it, the pair's other candidate: activated conv
        location 1); the last two None when the oldest location passes through ungated (odd
        n_conv), the gate's None with pooling.  ``weights``: ``location0_weights(li)``."""
        (_, W, b), gate = weights or self.location0_weights(li)
        k, o = self.shapes[li].kernel, self.shapes[li].offset
        Seq, C, a, d = stream
        u = gather_windows(Seq, R, a + d, d, k - o, r0, by_position=by_position).flatten(1)  # locations 1 .. k-o
        z = torch.addmm(b, u[:, :W.shape[1]], W.t())
        if o:
            return z, None, None
        g = None if gate is None else torch.addmm(gate[2], u, gate[1].t())
        z1 = gather_windows(C, R, a + d, 1, 1, r0, by_position=by_position).flatten(1)
        return z, g, z1

    def location0(self, terms: tuple, h: Tensor, weights: tuple) -> Tensor:
        """Eq. 3 and Eq. 5 at location 0 of a shared layer, given its input ``h`` (M, c):
        ``location0_terms`` plus the slot taps' products.  -> (M, n_tf)."""
        (z, g, z1), ((wz, _, _), gate) = terms, weights
        z0 = self.act(torch.addmm(z, h, wz))
        if z1 is None:
            return z0  # the oldest location passes through ungated
        return merge(z0, z1, None if g is None else torch.addmm(g, h, gate[0]))

    def _stream_windows(self, stream: Stream, loc0: Tensor, R: int, n: int, r0: int) -> Tensor:
        """Locations ``0 .. n-1`` of windows ``r0 ..`` of a stream, location 0 given: (B*R, n, c)."""
        return gather_windows(stream.seq, R, stream.start, stream.dilation, n, r0, first=loc0)

    def forward_sequence(self, seq: Tensor, slot: Tensor, streams: Optional[List[Stream]] = None,
                         r0: int = 0) -> Tensor:
        """Every window of ``seq`` (B, P, in_dim): window ``r`` (``r0 <= r < r0 + R``, R =
        ``slot.shape[1]``, by default every window: ``R = P - window + 1``) is
        ``seq[r .. r+window-1]`` with position 0 replaced by ``slot[:, r - r0]``.  Returns
        (B, R, out_dim).  ``streams``: ``shared_streams(seq)`` if already computed.

        Shared layers give location 0 per window from their stream (``location0``); every other
        layer runs on the gathered windows (``window_layer``, TIME-ARROW maps always)."""
        B, P, E = seq.shape
        R = slot.shape[1]
        assert r0 + R <= P - self.window + 1, (r0, R, P, self.window)
        if streams is None:
            streams = self.shared_streams(seq)
        n_shared = len(streams) - 1
        tf_loc0 = slot.reshape(B * R, E)  # TIME-FLOW input at location 0, while layers are shared
        tf_win: Optional[Tensor] = None  # TIME-FLOW input of every window (B*R, n_in, c)
        ta_win: Optional[Tensor] = None  # TIME-ARROW input of every window
        for li, s in enumerate(self.shapes):
            shared = li < n_shared
            # a layer above one with no TIME-FLOW maps has no TIME-FLOW input to gather
            reads_tf_windows = (li == 0 or self.shapes[li - 1].n_tf > 0) and (s.n_ta > 0 or (s.n_tf > 0 and not shared))
            if reads_tf_windows and tf_win is None:
                tf_win = self._stream_windows(streams[li], tf_loc0, R, s.n_in, r0)
            parts = [p for p in (tf_win, ta_win) if p is not None and p.shape[-1]]
            ta_out = self.window_layer(li, parts, ("ta",))
            if shared:
                weights = self.location0_weights(li)
                terms = self.location0_terms(li, streams[li], R, r0, weights=weights)
                tf_loc0, tf_win = self.location0(terms, tf_loc0, weights), None
            else:
                tf_out = self.window_layer(li, parts, ("tf",))
                tf_loc0, tf_win = None, (tf_out[0] if tf_out else None)
            ta_win = ta_out[0] if ta_out else None
        if tf_loc0 is not None:
            tf_win = self._stream_windows(streams[-1], tf_loc0, R, self.shapes[-1].n_out, r0)
        return self.head([p for p in (tf_win, ta_win) if p is not None]).reshape(B, R, self.out_dim)

    # ---------------------------------------------------------------------------------------
    # The location-0 chain.  When every layer is a shared stream (the βCNN), every term of Eq. 3-5
    # and of the FC layer that does not read the slot is computed once for all windows
    # (``chain_terms``), so a window given its slot costs two small products per layer and one
    # for the FC layer (``chain``): what the βCNN recursion of Section 3.3 evaluates once per
    # block of L_β positions.
    def chain_terms(self, streams: List[Stream], R: int, weights: Optional[list] = None) -> list:
        """Slot-independent terms for windows ``0 .. R-1`` of the sequence of ``streams``, rows
        ``r*B + b``: ``location0_terms`` per layer, then the FC pre-activation without location 0.
        ``weights``: ``chain_weights()`` if already computed."""
        weights = weights or self.chain_weights()
        terms = [self.location0_terms(li, streams[li], R, by_position=True, weights=weights[li])
                 for li in range(len(self.shapes))]
        Seq, _, a, d = streams[-1]
        rest = gather_windows(Seq, R, a + d, d, self.shapes[-1].n_out - 1, by_position=True).flatten(1)
        terms.append(torch.addmm(self.fc.bias, rest, weights[-1][1].t()))
        return terms

    @staticmethod
    def split_terms(terms: list, rows: int) -> List[list]:
        """``chain_terms`` cut into consecutive blocks of ``rows`` rows (one split per tensor, whose
        backward is one concatenation, where slicing per block would cost a zero-filled gradient
        of the whole tensor per block)."""
        n = -(-terms[-1].shape[0] // rows)

        def pieces(t):
            return [None] * n if t is None else t.split(rows)
        layers = [list(zip(*map(pieces, layer))) for layer in terms[:-1]]  # per layer: n blocks of 3
        return [[blocks[i] for blocks in layers] + [fc] for i, fc in enumerate(pieces(terms[-1]))]

    def chain_weights(self) -> list:
        """``location0_weights`` of every layer, then the FC weight split into its columns for
        location 0 (transposed) and the rest (split once for all blocks of a recursion)."""
        ch = self.shapes[-1].channels
        fc0, fc_rest = self.fc.weight.split([ch, self.fc.weight.shape[1] - ch], 1)
        return [self.location0_weights(li) for li in range(len(self.shapes))] + [(fc0.t(), fc_rest)]

    def chain(self, terms: list, slot: Tensor, weights: Optional[list] = None) -> Tensor:
        """Outputs (M, out_dim) of the windows of ``terms`` (``chain_terms`` or a block of it)
        given their slots ``slot`` (M, in_dim): ``location0`` layer after layer, then the FC
        layer.  ``weights``: ``chain_weights()`` if already computed."""
        weights = weights or self.chain_weights()
        h = slot
        for layer_terms, layer_weights in zip(terms[:-1], weights[:-1]):
            h = self.location0(layer_terms, h, layer_weights)
        return self.out_act(torch.addmm(terms[-1], h, weights[-1][0]))


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
            weights = self.beta.chain_weights()
            terms = self.beta.chain_terms(streams, n, weights)
            switch = has_hist[:, :n].t().reshape(n * B, 1).to(emb.dtype)  # rows e*B + b
            slot = emb.new_zeros(min(Lb, n) * B, E)
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
