"""The CNN and SAN paths of DPN-S2S (Song et al., COLING 2018, Section 3), built from fairseq modules.

* ``ConvPath``: a stack of gated linear unit convolutions with residual connections (Eq. 5, as in
  ConvS2S / fairseq ``fconv``: weight-normalised ``ConvTBC`` in the encoder, causal
  ``LinearizedConvolution`` in the decoder, so incremental decoding buffers the last k inputs).
* ``SANLayer``: a Transformer layer (Eq. 6-7) on fairseq's ``MultiheadAttention`` (which keeps its
  own incremental state); causal self-attention in the decoder.

In the decoder every layer of either path attends to each encoder path that exists (the four
flows of Eq. 8: cc, ca, ac, aa) and fuses the two contexts with one ``DPNGate`` (Eq. 9), its own
flow first: the CNN path computes ``ctx^c = ctx^cc (1 - g^c) + ctx^ca g^c`` and the SAN path
``ctx^a = ctx^aa (1 - g^a) + ctx^ac g^a``. With a single encoder path there is no gate.

Encoder memories are passed as ``{"c": (keys, values), "a": (keys, values)}`` (S x B x d).
The CNN-path attention is ConvS2S's dot attention (Eq. 4): the query is
``(W_in h + target embedding) * sqrt(1/2)``, one query projection shared by both flows (Eq. 8 uses
the same q^c for ctx^cc and ctx^ca), the context is scaled by sqrt(source length) and fused before
the output projection. The SAN path's decoder-to-encoder attention is fairseq's multi-head
attention; fairseq's encoder-decoder attention projects keys and values from the same states, so
it reads the CNN encoder's output h^c (the keys k^c) for both. ``shared_cross_attention`` gives
each SAN decoder layer one set of projections (W^q, W^k, W^v, W^o of Eq. 6) for both encoder
paths, as the authors' code applies one ``encdec_attention`` to both encoder outputs (Eq. 8 uses
the same q^a for ctx^aa and ctx^ac); otherwise each encoder path has its own.

Attention weights are computed only where they are read (``need_attn``: every layer for the
alignment analyses, the last layer for fairseq's alignment, none in training); the attentions that
return none are fused: the SAN path's through ``torch.nn.functional.multi_head_attention_forward``
(``scaled_dot_product_attention``), the CNN path's two flows as the two heads of one
``scaled_dot_product_attention`` on the devices in ``FUSED_DEVICES``.

``ConvPath(io_projections=False)`` is Eq. 5 with h^0 = e (Section 2.2): the first convolution reads
the embeddings and the path's output is the last layer's h^L, with no ConvS2S ``fc1`` / ``fc2``
between the embedding width and the convolution width (which must then be equal).
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from fairseq.models.fconv import ConvTBC as WeightNormConvTBC
from fairseq.models.fconv import Linear as WeightNormLinear
from fairseq.modules import FairseqDropout, LayerNorm, LinearizedConvolution, MultiheadAttention
from torch import Tensor, nn

from fairseq_local.modules.dpn_gate import DPNGate

Memory = Dict[str, Tuple[Tensor, Tensor]]
IncState = Optional[Dict[str, Dict[str, Optional[Tensor]]]]
NeedAttn = Union[bool, str]  # False: no layer, True: every layer, "last": the last layer only
# devices where the CNN path's attention without weights is one fused kernel; on CPU (one head of the
# embedding width) the explicit products are faster: 11-12 against 18-22 ms forward + backward per
# layer at the IWSLT widths, batch 64 x 27 x 25, one thread
FUSED_DEVICES = ("cuda",)
SQRT_HALF = math.sqrt(0.5)
PATH_NAMES = {"c": "cnn", "a": "san"}


def attention_layers(need_attn: NeedAttn, num_layers: int) -> List[bool]:
    """Which of ``num_layers`` decoder layers return their decoder-to-encoder attention weights.

    The others take the fused attention, which computes no weights: training needs none, beam
    search the last layer's (fairseq's alignment), the alignment analyses every layer's."""
    if need_attn not in (False, True, "last"):
        raise ValueError(f"need_attn must be False, True or 'last', got {need_attn!r}")
    if need_attn == "last":
        return [i == num_layers - 1 for i in range(num_layers)]
    return [bool(need_attn)] * num_layers


class CrossAttention(MultiheadAttention):
    """fairseq's encoder-decoder ``MultiheadAttention`` (projected encoder states cached in the
    incremental state), reordered exactly for any ``new_order``.

    fairseq skips reordering that cache whenever the batch size is unchanged (with beam size 1):
    right for beam search, where all beams of a sentence share one source, wrong for a general
    reorder across sentences. Here the cache is always reordered unless fairseq's beamable mode
    (``set_beam_size`` > 1, used by ``SequenceGenerator``) keeps one copy per sentence.
    """

    def __init__(self, dim, heads, dropout):
        super().__init__(dim, heads, dropout=dropout, encoder_decoder_attention=True)

    def reorder_incremental_state(self, incremental_state, new_order):
        if self.beam_size > 1:
            return super().reorder_incremental_state(incremental_state, new_order)
        buffer = self._get_input_buffer(incremental_state)
        if buffer is not None:
            for k in list(buffer.keys()):
                if buffer[k] is not None:
                    buffer[k] = buffer[k].index_select(0, new_order)
            incremental_state = self._set_input_buffer(incremental_state, buffer)
        return incremental_state


class ViewLinearizedConvolution(LinearizedConvolution):
    """fairseq's ``LinearizedConvolution`` whose (out x k*in) decoding weight is a view, not a copy.

    fairseq 0.12's ``_get_linearized_weight`` never stores what it computes, so every decoding
    step copies the whole kernel into a contiguous (out, k, in) tensor (16% of a beam-5 step of
    ``dpn_s2s_iwslt_de_en`` on CPU). The ConvTBC weight is (k, in, out); permuted to (out, k, in)
    its last two dimensions still merge into one of stride ``out``, so the linearized weight is
    a view whose transpose is the contiguous (k*in, out) matrix that ``F.linear`` multiplies by:
    no copy, and nothing cached that could go stale after an update or a cast.
    """

    def _get_linearized_weight(self):
        return self.weight.permute(2, 0, 1).reshape(self.out_channels, -1)


def causal_conv1d(in_channels, out_channels, kernel_size, dropout=0.0):
    """fairseq ``fconv.LinearizedConv1d`` (same init and weight norm) without the per-step weight copy."""
    m = ViewLinearizedConvolution(in_channels, out_channels, kernel_size, padding=kernel_size - 1)
    nn.init.normal_(m.weight, mean=0, std=math.sqrt((4 * (1.0 - dropout)) / (m.kernel_size[0] * in_channels)))
    nn.init.constant_(m.bias, 0)
    return nn.utils.weight_norm(m, dim=2)


class ConvPathAttention(nn.Module):
    """Dec-Enc attention of one CNN decoder layer over one or two encoder paths, fused by Eq. 9."""

    def __init__(self, conv_dim: int, embed_dim: int, paths: Sequence[str], forced_gate=None):
        super().__init__()
        self.paths = tuple(paths)
        self.in_projection = WeightNormLinear(conv_dim, embed_dim)
        self.out_projection = WeightNormLinear(embed_dim, conv_dim)
        self.gate = DPNGate(embed_dim, forced_gate) if len(self.paths) == 2 else None

    @staticmethod
    def fuses(need_weights: bool, x: Tensor) -> bool:
        """Whether ``forward`` takes the fused attention."""
        return not need_weights and x.device.type in FUSED_DEVICES

    def stacked_memory(self, memory: Memory) -> Tuple[Tensor, Tensor]:
        """Keys and values of this layer's encoder paths as B x paths x S x d, for ``forward``'s
        fused attention (the same for every layer of a path: built once per forward pass)."""
        keys = torch.stack([memory[p][0] for p in self.paths], 2).permute(1, 2, 0, 3)
        values = torch.stack([memory[p][1] for p in self.paths], 2).permute(1, 2, 0, 3)
        return keys, values

    def forward(self, x: Tensor, target_embedding: Tensor, memory: Memory, memory_padding_mask: Optional[Tensor],
                need_weights: bool = True, stacked: Optional[Tuple[Tensor, Tensor]] = None):
        """x: T x B x H (GLU output), target_embedding: T x B x d -> (T x B x H, {path: B x T x S or None}).

        Eq. 4 is softmax(q k^T) v with no 1/sqrt(d) scaling.  With ``need_weights``, or on a device
        not in ``FUSED_DEVICES``, the distributions are computed explicitly (and returned if asked);
        otherwise both paths' attentions are one fused ``scaled_dot_product_attention`` (the paths
        as its heads, ``scale=1``), which gives no weights.  ``stacked``: ``stacked_memory(memory)``
        if already built."""
        residual = x
        q = ((self.in_projection(x) + target_embedding) * SQRT_HALF).transpose(0, 1)  # B x T x d
        ctxs, probs = [], {}
        if not self.fuses(need_weights, x):
            for p in self.paths:
                keys, values = memory[p]
                scores = torch.bmm(q, keys.permute(1, 2, 0))  # B x T x S
                if memory_padding_mask is not None:
                    scores = scores.masked_fill(memory_padding_mask.unsqueeze(1), float("-inf"))
                attn = F.softmax(scores, dim=-1)
                ctxs.append(torch.bmm(attn, values.transpose(0, 1)))  # B x T x d
                probs[p] = attn if need_weights else None
        else:
            keys, values = self.stacked_memory(memory) if stacked is None else stacked
            keep = None if memory_padding_mask is None else ~memory_padding_mask[:, None, None, :]
            q = q.unsqueeze(1).expand(-1, len(self.paths), -1, -1)
            ctxs = list(F.scaled_dot_product_attention(q, keys, values, attn_mask=keep, scale=1.0).unbind(1))
            probs = dict.fromkeys(self.paths)
        ctx = ctxs[0] if self.gate is None else self.gate(ctxs[0], ctxs[1])[0]
        # ConvS2S scales the context by sqrt(number of real source positions)
        s = memory[self.paths[0]][0].size(0)
        if memory_padding_mask is None:
            ctx = ctx * math.sqrt(s)
        else:
            ctx = ctx * (s - memory_padding_mask.type_as(ctx).sum(dim=1)).sqrt().view(-1, 1, 1)
        return (self.out_projection(ctx.transpose(0, 1)) + residual) * SQRT_HALF, probs


class ConvPath(nn.Module):
    """Eq. 5: h^l = GLU(conv(h^{l-1})) + h^{l-1} (residuals scaled by sqrt(1/2) as in ConvS2S).

    ``causal`` selects the decoder form (left padding k-1, future steps removed, incremental
    buffering by ``LinearizedConvolution``); ``paths`` lists the encoder paths each layer attends.
    Input and output are T x B x d (the embedding size); the convolutions run at ``conv_dim``,
    reached through ConvS2S's projections ``fc1`` / ``fc2`` when ``io_projections`` (needed when
    ``conv_dim != embed_dim``); without them h^0 = e as in Eq. 5.
    """

    def __init__(self, embed_dim, conv_dim, num_layers, kernel_size, dropout, causal, paths=(), forced_gate=None,
                 io_projections=True):
        super().__init__()
        side = "decoder" if causal else "encoder"
        if not causal and kernel_size % 2 == 0:
            raise ValueError(f"--encoder-kernel-size must be odd for the CNN encoder path, got {kernel_size}")
        if not io_projections and conv_dim != embed_dim:
            raise ValueError(f"--{side}-conv-dim {conv_dim} differs from the embedding size {embed_dim}: the CNN "
                             f"path needs its input/output projections (--cnn-path-projections always)")
        self.causal = causal
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.fc1 = WeightNormLinear(embed_dim, conv_dim, dropout=dropout) if io_projections else None
        self.convolutions = nn.ModuleList()
        for _ in range(num_layers):
            if causal:
                conv = causal_conv1d(conv_dim, 2 * conv_dim, kernel_size, dropout=dropout)
            else:
                conv = WeightNormConvTBC(conv_dim, 2 * conv_dim, kernel_size, dropout=dropout, padding=kernel_size // 2)
            self.convolutions.append(conv)
        self.attention = nn.ModuleList(
            [ConvPathAttention(conv_dim, embed_dim, paths, forced_gate) for _ in range(num_layers)] if paths else []
        )
        self.fc2 = WeightNormLinear(conv_dim, embed_dim) if io_projections else None

    def forward(self, emb: Tensor, padding_mask: Optional[Tensor] = None, memory: Optional[Memory] = None,
                memory_padding_mask: Optional[Tensor] = None, incremental_state: IncState = None,
                need_attn: NeedAttn = True):
        """emb: T x B x d; padding_mask: B x T (encoder only). Returns (T x B x d, per-layer attn);
        ``need_attn`` says which layers return their attention weights (the others: None)."""
        x = emb if self.fc1 is None else self.fc1(emb)
        pad = padding_mask.t().unsqueeze(-1) if padding_mask is not None else None
        attns: List[Dict[str, Optional[Tensor]]] = []
        weights = attention_layers(need_attn, len(self.attention))
        fused = any(a.fuses(w, emb) for a, w in zip(self.attention, weights))
        stacked = self.attention[0].stacked_memory(memory) if fused else None  # once for every layer
        for i, conv in enumerate(self.convolutions):
            residual = x
            if pad is not None:
                x = x.masked_fill(pad, 0.0)
            x = self.dropout_module(x)
            if incremental_state is not None:  # LinearizedConvolution steps in B x T x C
                x = conv(x.transpose(0, 1), incremental_state).transpose(0, 1)
            else:
                x = conv(x)
            x = F.glu(x, dim=2)
            if len(self.attention) > 0:
                x, probs = self.attention[i](x, emb, memory, memory_padding_mask, weights[i], stacked)
                attns.append(probs)
            x = (x + residual) * SQRT_HALF
        if self.fc2 is not None:
            x = self.fc2(x)
        if pad is not None:
            x = x.masked_fill(pad, 0.0)
        return x, attns


class SANLayer(nn.Module):
    """One self-attention layer (Eq. 6-7), post-norm by default; in the decoder it is causal and
    attends to the encoder paths in ``paths``, fused by Eq. 9: with one multi-head attention per
    path, or with ``shared_cross_attention`` one set of projections serving every path (each path
    keeps its own module, so its own cache of projected encoder states in incremental decoding)."""

    def __init__(self, dim, ffn_dim, heads, dropout, attention_dropout, activation_dropout,
                 normalize_before=False, paths=(), forced_gate=None, shared_cross_attention=False):
        super().__init__()
        self.normalize_before = normalize_before
        self.dropout_module = FairseqDropout(dropout, module_name=self.__class__.__name__)
        self.activation_dropout_module = FairseqDropout(activation_dropout, module_name=self.__class__.__name__)
        self.self_attn = MultiheadAttention(dim, heads, dropout=attention_dropout, self_attention=True)
        self.self_attn_layer_norm = LayerNorm(dim)
        self.paths = tuple(paths)
        self.encoder_attn = nn.ModuleDict({p: CrossAttention(dim, heads, attention_dropout) for p in self.paths})
        if shared_cross_attention and len(self.paths) == 2:
            first, second = (self.encoder_attn[p] for p in self.paths)
            for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
                setattr(second, name, getattr(first, name))
        self.encoder_attn_layer_norm = LayerNorm(dim) if self.paths else None
        self.gate = DPNGate(dim, forced_gate) if len(self.paths) == 2 else None
        self.fc1 = nn.Linear(dim, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, dim)
        self.final_layer_norm = LayerNorm(dim)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def _sublayer(self, x, norm, fn):
        residual = x
        if self.normalize_before:
            x = norm(x)
        x, extra = fn(x)
        x = residual + self.dropout_module(x)
        if not self.normalize_before:
            x = norm(x)
        return x, extra

    def forward(self, x: Tensor, self_attn_mask: Optional[Tensor] = None, padding_mask: Optional[Tensor] = None,
                memory: Optional[Memory] = None, memory_padding_mask: Optional[Tensor] = None,
                incremental_state: IncState = None, need_attn: bool = False):
        """x: T x B x d -> (T x B x d, {path: B x T x S head-averaged attention or None})."""
        x, _ = self._sublayer(x, self.self_attn_layer_norm, lambda h: self.self_attn(
            query=h, key=h, value=h, key_padding_mask=padding_mask, incremental_state=incremental_state,
            need_weights=False, attn_mask=self_attn_mask))
        probs: Dict[str, Optional[Tensor]] = {}
        if self.paths:
            def cross(h):
                ctxs = []
                for p in self.paths:
                    keys = memory[p][0]  # fairseq's enc-dec attention projects k and v from one input
                    # static_kv caches the projected encoder states while decoding step by step; the
                    # full pass takes fairseq's torch path (fused attention when no weights are asked)
                    ctx, w = self.encoder_attn[p](
                        query=h, key=keys, value=keys, key_padding_mask=memory_padding_mask,
                        incremental_state=incremental_state, static_kv=incremental_state is not None,
                        need_weights=need_attn)
                    probs[p] = None if w is None else w.to(h.dtype)  # fairseq's step path: float32
                    ctxs.append(ctx)
                return (ctxs[0] if self.gate is None else self.gate(ctxs[0], ctxs[1])[0]), None

            x, _ = self._sublayer(x, self.encoder_attn_layer_norm, cross)

        def ffn(h):
            return self.fc2(self.activation_dropout_module(F.relu(self.fc1(h)))), None

        x, _ = self._sublayer(x, self.final_layer_norm, ffn)
        return x, probs


class SANPath(nn.Module):
    """A stack of ``SANLayer`` (plus a final LayerNorm in pre-norm mode)."""

    def __init__(self, dim, ffn_dim, heads, num_layers, dropout, attention_dropout, activation_dropout,
                 normalize_before=False, paths=(), forced_gate=None, shared_cross_attention=False):
        super().__init__()
        self.layers = nn.ModuleList([
            SANLayer(dim, ffn_dim, heads, dropout, attention_dropout, activation_dropout, normalize_before,
                     paths, forced_gate, shared_cross_attention)
            for _ in range(num_layers)
        ])
        self.layer_norm = LayerNorm(dim) if normalize_before else None

    def forward(self, x, self_attn_mask=None, padding_mask=None, memory=None, memory_padding_mask=None,
                incremental_state: IncState = None, need_attn: NeedAttn = False):
        """``need_attn`` says which layers return their attention weights (``attention_layers``)."""
        attns = []
        for layer, weights in zip(self.layers, attention_layers(need_attn, len(self.layers))):
            x, probs = layer(x, self_attn_mask, padding_mask, memory, memory_padding_mask, incremental_state,
                             weights)
            attns.append(probs)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x, attns
