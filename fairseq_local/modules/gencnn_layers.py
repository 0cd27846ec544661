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
* After the last gating layer a fully connected layer (sigmoid in the paper) gives the output.

Vectorisation.  ``GatedConvStack.forward_sequence`` computes *all* windows of a sequence at once.
First layer: the TIME-FLOW convolution and TIME-FLOW gate are convolutions over the whole sequence,
computed once per position and gathered (unfold) by every window that contains it; the slot
differs per window, so its contribution is corrected exactly on the (linear) pre-activations at
window location 0.  TIME-ARROW maps (one weight matrix per window location) act on the gathered
windows as one batched matrix product over locations; so do the higher layers (their gating pairs
are aligned to each window's end: only windows with the same alignment, 2^l classes at layer l,
could share them; that sharing is not implemented).
``forward_windows`` is the same computation for explicit windows (used for incremental decoding).

``GenCNNBody`` wires αCNN and the recursive βCNN (Section 3.3, Figure 4): ``S(e)``, the βCNN summary
of the history ending at position ``e``, reads the slot ``S(e - L_β)`` and the words
``e-L_β+1 .. e``; the switch replaces it by the zero padding vector when no real (non-pad) word
exists up to ``e``.  αCNN at position ``t`` reads the slot ``S(t - L_α)`` and words ``t-L_α+1 .. t``.
So with history no longer than ``L_α`` the βCNN is switched off and the model is αCNN alone.  The
recursion ``S(e) <- S(e - L_β)`` is evaluated block by block (``L_β`` positions at a time, all in
parallel); that loop is over blocks of the recursion, not over positions.
"""
import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

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
    has no parameters;
    the FC reads the final locations flattened as (location, channel), channels TIME-FLOW first.
    """

    def __init__(self, window: int, in_dim: int, layers: Sequence[Tuple[int, int, int]], out_dim: int,
                 tf_input: str = "tf", activation: str = "relu", out_activation: str = "sigmoid",
                 init_range: float = 0.1, name: str = "αCNN"):
        super().__init__()
        if tf_input not in ("tf", "all"):
            raise ValueError(f"genCNN: tf_input must be 'tf' or 'all', got {tf_input!r}")
        self.window, self.in_dim, self.out_dim, self.tf_input = window, in_dim, out_dim, tf_input
        self.act = get_activation(activation)
        self.out_act = get_activation(out_activation)
        self.shapes: List[LayerShape] = []
        n_in, prev_tf, prev_all = window, in_dim, in_dim
        for li, (k, n_tf, n_ta) in enumerate(layers):
            c_tf = prev_all if (li == 0 or tf_input == "all") else prev_tf
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
                self.w[f"gate_tf_w{li}"] = nn.Parameter(torch.empty(s.n_tf, k + 1, s.c_tf))
                self.w[f"gate_tf_b{li}"] = nn.Parameter(torch.empty(s.n_tf))
            if s.n_ta:
                self.w[f"conv_ta_w{li}"] = nn.Parameter(torch.empty(s.n_conv, s.n_ta, k, s.c_ta))
                self.w[f"conv_ta_b{li}"] = nn.Parameter(torch.empty(s.n_conv, s.n_ta))
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
    def _merge(self, s: LayerShape, z_tf, z_ta, g_tf, g_ta) -> Tensor:
        """Activation, then Eq. 5 on pre-activations: z (..., n_conv, F), g (..., n_pairs, F)."""
        z = torch.cat([z_tf, z_ta], -1)
        g = torch.sigmoid(torch.cat([g_tf, g_ta], -1))
        z = self.act(z)
        o, J = s.offset, s.n_pairs
        left = z[..., o:o + 2 * J:2, :]
        right = z[..., o + 1:o + 2 * J:2, :]
        out = g * left + (1 - g) * right
        if o:
            out = torch.cat([z[..., :1, :], out], -2)
        return out

    def _shared(self, u: Tensor, kind: str, li: int, n_out: int) -> Tensor:
        """Location-shared (TIME-FLOW) linear map of u (..., n, width*C) -> (..., n, n_out)."""
        if n_out == 0:
            return u.new_zeros(u.shape[:-1] + (0,))
        w, b = self.w[f"{kind}_tf_w{li}"], self.w[f"{kind}_tf_b{li}"]
        return u @ w.reshape(n_out, -1).t() + b

    def _located(self, u: Tensor, kind: str, li: int, n_out: int) -> Tensor:
        """Location-dependent (TIME-ARROW) map of u (M, n, width*C) -> (M, n, n_out), one matrix
        per location (a batched matrix product over locations)."""
        if n_out == 0:
            return u.new_zeros(u.shape[:-1] + (0,))
        w, b = self.w[f"{kind}_ta_w{li}"], self.w[f"{kind}_ta_b{li}"]
        return torch.einsum("mnc,nfc->mnf", u, w.reshape(w.shape[0], n_out, -1)) + b

    def _layer_windows(self, li: int, H: Tensor) -> Tensor:
        """Layer ``li`` on explicit windows: H (M, n_in, C) -> (M, n_out, n_tf + n_ta)."""
        s = self.shapes[li]
        M, k, J, o = H.shape[0], s.kernel, s.n_pairs, s.offset
        h_tf = H[..., :s.c_tf]
        # unfold -> (M, n_conv, C, k) -> (M, n_conv, k*C) in (offset, channel) order
        u_tf = h_tf.unfold(1, k, 1).transpose(2, 3).reshape(M, s.n_conv, k * s.c_tf)
        u_ta = H.unfold(1, k, 1).transpose(2, 3).reshape(M, s.n_conv, k * s.c_ta)
        # gating windows: union of the segments of conv locations o+2j and o+2j+1 (k+1 vectors)
        v_tf = h_tf[:, o:].unfold(1, k + 1, 2).transpose(2, 3).reshape(M, J, (k + 1) * s.c_tf)
        v_ta = H[:, o:].unfold(1, k + 1, 2).transpose(2, 3).reshape(M, J, (k + 1) * s.c_ta)
        return self._merge(s, self._shared(u_tf, "conv", li, s.n_tf),
                           self._located(u_ta, "conv", li, s.n_ta),
                           self._shared(v_tf, "gate", li, s.n_tf),
                           self._located(v_ta, "gate", li, s.n_ta))

    def _head(self, H: Tensor) -> Tensor:
        return self.out_act(self.fc(H.flatten(-2)))

    def forward_windows(self, X: Tensor) -> Tensor:
        """X: (M, window, in_dim) explicit windows (slot at position 0) -> (M, out_dim)."""
        assert X.shape[1] == self.window, (X.shape, self.window)
        H = X
        for li in range(len(self.shapes)):
            H = self._layer_windows(li, H)
        return self._head(H)

    # ---------------------------------------------------------------------------------------
    def forward_sequence(self, seq: Tensor, slot: Tensor) -> Tensor:
        """Every window of ``seq`` (B, P, in_dim): window ``r`` (``0 <= r < R = P - window + 1``) is
        ``seq[r .. r+window-1]`` with position 0 replaced by ``slot[:, r]``.  Returns (B, R, out_dim).

        First layer: TIME-FLOW convolution and gate are convolutions over the whole sequence,
        computed once per position and gathered by every window that contains it; the slot's
        share is corrected on the (linear) pre-activations at window location 0.  TIME-ARROW
        maps act on the gathered windows, one weight matrix per location (batched products).
        """
        s = self.shapes[0]
        B, P, E = seq.shape
        N, k, n, J, o = self.window, s.kernel, s.n_conv, s.n_pairs, s.offset
        R = P - N + 1
        diff = slot - seq[:, :R]  # what the slot changes in window r's position 0
        if s.n_tf:
            x = seq.transpose(1, 2)
            w, b = self.w["conv_tf_w0"], self.w["conv_tf_b0"]
            conv = F.conv1d(x, w.permute(0, 2, 1), b).transpose(1, 2)  # (B, P-k+1, F): reads q..q+k-1
            z_tf = _add_at0(conv.unfold(1, n, 1).transpose(2, 3), diff @ w[:, 0].t())  # (B, R, n, F)
            w, b = self.w["gate_tf_w0"], self.w["gate_tf_b0"]
            gate = F.conv1d(x, w.permute(0, 2, 1), b).transpose(1, 2)  # (B, P-k, F): reads q..q+k
            g_tf = gate[:, o:].unfold(1, 2 * J - 1, 1)[..., ::2].transpose(2, 3)  # r+o+2j: (B, R, J, F)
            if o == 0:
                g_tf = _add_at0(g_tf, diff @ w[:, 0].t())
            z_tf, g_tf = z_tf.reshape(B * R, n, -1), g_tf.reshape(B * R, J, -1)
        else:
            z_tf, g_tf = seq.new_zeros(B * R, n, 0), seq.new_zeros(B * R, J, 0)
        if s.n_ta:
            X = seq.unfold(1, N, 1).transpose(2, 3)  # (B, R, N, E) explicit windows
            X = torch.cat([slot[:, :, None], X[:, :, 1:]], 2).reshape(B * R, N, E)
            u = X.unfold(1, k, 1).transpose(2, 3).reshape(B * R, n, k * E)
            v = X[:, o:].unfold(1, k + 1, 2).transpose(2, 3).reshape(B * R, J, (k + 1) * E)
            z_ta, g_ta = self._located(u, "conv", 0, s.n_ta), self._located(v, "gate", 0, s.n_ta)
        else:
            z_ta, g_ta = seq.new_zeros(B * R, n, 0), seq.new_zeros(B * R, J, 0)
        H = self._merge(s, z_tf, z_ta, g_tf, g_ta)
        for li in range(1, len(self.shapes)):
            H = self._layer_windows(li, H)
        return self._head(H).reshape(B, R, self.out_dim)


def _add_at0(x: Tensor, delta: Optional[Tensor]) -> Tensor:
    """x (B, R, n, F) with delta (B, R, F) added at location 0 (out of place, autograd-safe)."""
    if delta is None:
        return x
    return torch.cat([(x[:, :, 0] + delta).unsqueeze(2), x[:, :, 1:]], 2)


class GenCNNBody(nn.Module):
    """αCNN + recursive βCNN over embedded sequences (Section 3.3), full-sequence and step-wise.

    ``beta_layers=None`` gives the "αCNN only" model (the slot is always the padding vector).
    """

    def __init__(self, embed_dim: int, L_alpha: int, alpha_layers, out_dim: int,
                 L_beta: int = 0, beta_layers=None, tf_input: str = "tf", activation: str = "relu",
                 fc_activation: str = "sigmoid", init_range: float = 0.1):
        super().__init__()
        self.embed_dim, self.L_alpha, self.out_dim = embed_dim, L_alpha, out_dim
        self.alpha = GatedConvStack(L_alpha + 1, embed_dim, alpha_layers, out_dim, tf_input, activation,
                                    fc_activation, init_range, name="αCNN")
        self.use_beta = bool(beta_layers) and L_beta > 0
        self.L_beta = L_beta if self.use_beta else 0
        self.beta = None
        if self.use_beta:
            self.beta = GatedConvStack(L_beta + 1, embed_dim, beta_layers, embed_dim, tf_input,
                                       activation, fc_activation, init_range, name="βCNN")

    @property
    def history_size(self) -> int:
        """Tokens the incremental state keeps: αCNN's window plus the βCNN chunk before it."""
        return self.L_alpha + self.L_beta

    def beta_summaries(self, emb: Tensor, has_hist: Tensor, n: int) -> Tensor:
        """``S(e)`` for ``e`` in ``[0, n)`` (B, n, E); zero where the switch is off."""
        B, _, E = emb.shape
        Lb = self.L_beta
        seq = torch.cat([emb.new_zeros(B, Lb, E), emb[:, :n]], 1)  # window e = seq[e .. e+Lb]
        blocks: List[Tensor] = []
        for b0 in range(0, n, Lb):  # the recursion S(e) <- S(e - Lb): one block of Lb at a time
            b1 = min(b0 + Lb, n)
            slot = blocks[-1][:, :b1 - b0] if blocks else emb.new_zeros(B, b1 - b0, E)
            out = self.beta.forward_sequence(seq[:, b0:b1 + Lb], slot)
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
