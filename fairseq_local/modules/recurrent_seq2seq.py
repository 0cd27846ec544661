"""Generic stacked recurrent encoder and RNNSearch attentional decoder.

Every recurrent model of fairseq_local (RNNSearch baselines, MC-RNN, parallel-cell LSTM, lattice
encoders) is built from these two classes (and the LM decoder of
:mod:`fairseq_local.modules.recurrent_lm_decoder`) plus a *layer factory*
``factory(layer_index, input_size, hidden_size) -> layer`` whose layers follow the contract:

* ``layer.hidden_size``: output size H.
* ``layer(x[T,B,I], state=None, padding_mask=None[T,B] bool) -> (out[T,B,H], new_state)``;
  ``state=None`` means the zero state; where ``padding_mask`` is True the state is left unchanged
  and the output is zero (so left-padded sources are exact without packing).  The same call with
  T=1 is used for incremental decoding, so step-by-step == full pass by construction.
* ``layer.reorder_state(state, new_order) -> state`` (beam search); state is a tensor or a tuple
  of tensors.
* ``layer.state_from_hidden(h0[B,H]) -> state``: the state whose previous hidden output is h0
  (used by decoders initialised from the encoder, as in RNNSearch).
* optional: ``layer.input_projection_parameters() -> (W, b)`` and ``layer(..., input_proj=W x + b)``.
  The input-feeding decoder then computes each step's input projection with a ``StepwiseLinear``,
  so in training the weight gradient is one product over all target steps, not one per step.
* optional: the fast path (``--rnn-impl``, :mod:`fairseq_local.modules.fast_path`): the layer's time
  step is one method ``_step(carry, x, valid, consts)`` that ``fast_path.scan`` runs eagerly,
  compiled once, or captured as CUDA graphs; the layer mixes in ``FastPathMixin`` and runs its step
  code inside a compiled or captured loop.  The decoders below follow the same scheme for their own
  step loops.

Encoders return fairseq's dict convention ``{"encoder_out": [T x B x C], "encoder_padding_mask":
[B x T] or [], "encoder_final_hidden": [B x C] or [], "src_tokens": [], "src_lengths": []}``.

The attentional decoder follows RNNSearch (Bahdanau et al. 2015): s_0 = tanh(W_init h_final);
at step i the context c_i = attention(s_{i-1}, encoder_out) is fed with the previous target
embedding y_{i-1} into the first layer ("input feeding"), and the readout is
tanh(W_o [s_i; c_i; y_{i-1}]).  With ``input_feeding=False`` the stack runs over the whole
target at once and the attention is queried with s_i for all positions in one batched call
(Luong-style, faster).
"""
from typing import Callable, Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder
from fairseq.modules import FairseqDropout
from torch import Tensor

from fairseq_local.modules.cuda_graphs import padded_shape
from fairseq_local.modules.fast_path import (
    FastPathMixin,
    Layout,
    flatten_states,
    pad_dim,
    scan,
    unflatten_states,
)
from fairseq_local.modules.rnn_attention import RNNSearchAttention
from fairseq_local.modules.stepwise_linear import StepwiseLinear

LayerFactory = Callable[[int, int, int], nn.Module]
# the input-feeding loop's batch axes (and source axes): encoder_out, its padding mask, the attention keys
FEED_LAYOUT = Layout(consts=((1, 0), (0, False), (1, 0), None, None), lengths=((0,), (1,), (0,), (), ()))


# ------------------------------------------------------------------------------------------------
# helpers shared by the recurrent models
# ------------------------------------------------------------------------------------------------
def Embedding(num_embeddings: int, embedding_dim: int, padding_idx: int) -> nn.Embedding:
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.uniform_(m.weight, -0.1, 0.1)
    nn.init.constant_(m.weight[padding_idx], 0)
    return m


def Linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    m = nn.Linear(in_features, out_features, bias=bias)
    nn.init.uniform_(m.weight, -0.1, 0.1)
    if bias:
        nn.init.zeros_(m.bias)
    return m


class StateCache:
    """Flattens a list of layer states (tensor or tuple of tensors) into incremental-state keys."""

    def __init__(self):
        self.kinds: Dict[int, int] = {}  # layer -> 0 for a tensor, n for an n-tuple

    def put(self, cache: Dict[str, Optional[Tensor]], states: List):
        for i, s in enumerate(states):
            if isinstance(s, tuple):
                self.kinds[i] = len(s)
                for j, t in enumerate(s):
                    cache[f"layer{i}.{j}"] = t
            else:
                self.kinds[i] = 0
                cache[f"layer{i}.0"] = s

    def get(self, cache: Dict[str, Optional[Tensor]], num_layers: int) -> List:
        states = []
        for i in range(num_layers):
            n = self.kinds[i]
            states.append(cache[f"layer{i}.0"] if n == 0 else tuple(cache[f"layer{i}.{j}"] for j in range(n)))
        return states


def _valid_mask(mask):
    return mask if (mask is not None and bool(mask.any())) else None


# ------------------------------------------------------------------------------------------------
# encoder
# ------------------------------------------------------------------------------------------------
class RecurrentEncoder(FairseqEncoder):
    """Stacked (optionally bidirectional) recurrent encoder.

    Bidirectional layers run a second stack of layers on the time-reversed input; the two
    directions are concatenated (as in RNNSearch) and feed the next layer.  ``output_dim``
    optionally projects the top output (and the final hidden) to a different size.
    ``encoder_final_hidden`` is the top layer's output at the last real token (forward
    direction) concatenated with the backward direction's output at the first real token.
    """

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layer_factory: LayerFactory,
                 num_layers: int, hidden_size: int, bidirectional: bool = False,
                 dropout_in: float = 0.0, dropout_out: float = 0.0, output_dim: Optional[int] = None,
                 max_positions: int = int(1e5)):
        super().__init__(dictionary)
        if num_layers < 1:
            raise ValueError(f"--encoder-layers must be >= 1 (got {num_layers})")
        self.embed_tokens = embed_tokens
        self.padding_idx = embed_tokens.padding_idx
        self.bidirectional = bidirectional
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.max_source_positions = max_positions
        dirs = 2 if bidirectional else 1
        self.layers = nn.ModuleList()
        self.backward_layers = nn.ModuleList()
        in_dim = embed_tokens.embedding_dim
        for i in range(num_layers):
            self.layers.append(layer_factory(i, in_dim, hidden_size))
            if bidirectional:
                self.backward_layers.append(layer_factory(i, in_dim, hidden_size))
            in_dim = hidden_size * dirs
        self.output_proj = Linear(in_dim, output_dim) if output_dim and output_dim != in_dim else None
        self.output_dim = output_dim or in_dim

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, **unused):
        pad = src_tokens.eq(self.padding_idx)  # B x T
        tmask = _valid_mask(pad.t())
        x = self.dropout_in_module(self.embed_tokens(src_tokens)).transpose(0, 1)
        top = x
        for i, layer in enumerate(self.layers):
            if i > 0:
                x = self.dropout_out_module(top)
            top, _ = layer(x, None, tmask)
            if self.bidirectional:
                bwd, _ = self.backward_layers[i](x.flip(0), None, None if tmask is None else tmask.flip(0))
                top = torch.cat([top, bwd.flip(0)], dim=-1)
        final = self._final_hidden(top, pad)
        out = self.dropout_out_module(top)
        if self.output_proj is not None:
            out = self.output_proj(out)
            final = self.output_proj(final)
        return {
            "encoder_out": [out],
            "encoder_padding_mask": [pad] if tmask is not None else [],
            "encoder_final_hidden": [final],
            "src_tokens": [],
            "src_lengths": [],
        }

    def _final_hidden(self, top: Tensor, pad: Tensor) -> Tensor:
        T, B, C = top.shape
        steps = torch.arange(T, device=top.device).unsqueeze(0)  # 1 x T
        last = torch.where(pad, -1, steps).max(1).values.clamp(min=0)  # B
        fwd = top[last, torch.arange(B, device=top.device)]
        if not self.bidirectional:
            return fwd
        first = torch.where(pad, T, steps).min(1).values.clamp(max=T - 1)
        bwd = top[first, torch.arange(B, device=top.device)]
        half = C // 2
        return torch.cat([fwd[:, :half], bwd[:, half:]], dim=-1)

    @torch.jit.export
    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        def sel(key, dim):
            return [t.index_select(dim, new_order) for t in encoder_out.get(key, [])]

        return {
            "encoder_out": sel("encoder_out", 1),
            "encoder_padding_mask": sel("encoder_padding_mask", 0),
            "encoder_final_hidden": sel("encoder_final_hidden", 0),
            "src_tokens": sel("src_tokens", 0),
            "src_lengths": sel("src_lengths", 0),
        }

    def max_positions(self):
        return self.max_source_positions


# ------------------------------------------------------------------------------------------------
# attentional decoder
# ------------------------------------------------------------------------------------------------
class RecurrentDecoderMixin:
    """What the recurrent decoders share: the (possibly tied) output projection, and the
    incremental state (every layer's recurrent state in a ``StateCache`` plus decoder extras)."""

    def _init_input(self, embed_tokens: nn.Embedding, num_layers: int, max_positions: int) -> int:
        """Keep the input embedding and the stack's depth; returns the embedding size."""
        if num_layers < 1:
            raise ValueError(f"--decoder-layers must be >= 1 (got {num_layers})")
        self.embed_tokens = embed_tokens
        self.num_layers = num_layers
        self.max_target_positions = max_positions
        return embed_tokens.embedding_dim

    def _init_output(self, dictionary, out_dim: int, embed_dim: int, share_input_output_embed: bool,
                     out_dim_name: str):
        """The output projection (None: tied to the input embedding, which needs ``out_dim ==
        embed_dim``) and the cache of the layer states."""
        if share_input_output_embed:
            if out_dim != embed_dim:
                raise ValueError(f"--share-decoder-input-output-embed needs {out_dim_name} "
                                 f"== --decoder-embed-dim (got {out_dim} vs {embed_dim})")
            self.fc_out = None
        else:
            self.fc_out = Linear(out_dim, len(dictionary))
        self._states = StateCache()

    def output_layer(self, x):
        if self.fc_out is None:
            return F.linear(x, self.embed_tokens.weight)
        return self.fc_out(x)

    def _reorder_cached_state(self, incremental_state, new_order, reorder_extras):
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        states = [layer.reorder_state(s, new_order)
                  for layer, s in zip(self.layers, self._states.get(cached, self.num_layers))]
        cache: Dict[str, Optional[Tensor]] = reorder_extras(cached)
        self._states.put(cache, states)
        self.set_incremental_state(incremental_state, "cached_state", cache)

    def max_positions(self):
        return self.max_target_positions


class RecurrentAttentionDecoder(FastPathMixin, RecurrentDecoderMixin, FairseqIncrementalDecoder):
    """RNNSearch-style attentional decoder over any stack of contract layers (see module doc)."""

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layer_factory: LayerFactory,
                 num_layers: int, hidden_size: int, encoder_output_dim: int,
                 attention_dim: Optional[int] = None, input_feeding: bool = True,
                 init_from_encoder: bool = True, dropout_in: float = 0.0, dropout_out: float = 0.0,
                 out_embed_dim: Optional[int] = None, share_input_output_embed: bool = False,
                 max_positions: int = int(1e5)):
        super().__init__(dictionary)
        embed_dim = self._init_input(embed_tokens, num_layers, max_positions)
        self.hidden_size = hidden_size
        self.input_feeding = input_feeding
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.layers = nn.ModuleList()
        in_dim = embed_dim + (encoder_output_dim if input_feeding else 0)
        for i in range(num_layers):
            self.layers.append(layer_factory(i, in_dim, hidden_size))
            in_dim = hidden_size
        self.attention = RNNSearchAttention(hidden_size, encoder_output_dim, attention_dim)
        self.init_proj = Linear(encoder_output_dim, hidden_size) if init_from_encoder else None
        out_embed_dim = out_embed_dim or embed_dim
        self.readout = Linear(hidden_size + encoder_output_dim + embed_dim, out_embed_dim)
        self.share_input_output_embed = share_input_output_embed
        self._init_output(dictionary, out_embed_dim, embed_dim, share_input_output_embed, "--decoder-out-embed-dim")

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, **unused):
        x, attn = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [attn], "inner_states": None}

    def _initial(self, enc_final: Optional[Tensor], bsz: int, like: Tensor):
        if self.init_proj is not None and enc_final is not None:
            h0 = torch.tanh(self.init_proj(enc_final))
        else:  # the zero state, as a state (the step loop's carry is a fixed tuple of tensors)
            h0 = like.new_zeros(bsz, self.hidden_size)
        return [layer.state_from_hidden(h0) for layer in self.layers], h0

    def extract_features(self, prev_output_tokens, encoder_out=None, incremental_state=None, **unused):
        if encoder_out is None:
            raise ValueError("RecurrentAttentionDecoder needs encoder_out")
        enc = encoder_out["encoder_out"][0]
        enc_mask = encoder_out["encoder_padding_mask"][0] if len(encoder_out["encoder_padding_mask"]) else None
        enc_final = encoder_out["encoder_final_hidden"][0] if len(encoder_out.get("encoder_final_hidden", [])) else None
        cached = self.get_incremental_state(incremental_state, "cached_state") if incremental_state is not None else None
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
        bsz, seqlen = prev_output_tokens.shape
        y = self.dropout_in_module(self.embed_tokens(prev_output_tokens)).transpose(0, 1)  # T x B x E
        if cached is not None:
            states = self._states.get(cached, self.num_layers)
            query, keys = cached["query"], cached["keys"]
        else:
            states, query = self._initial(enc_final, bsz, y)
            keys = self.attention.project_keys(enc)
        if self.input_feeding:
            flat, kinds = flatten_states(states)
            (top, ctx, attn), carry = self._feed(query, flat, kinds, y, enc, enc_mask, keys)
            query, states = carry[0], unflatten_states(carry[1:], kinds)
        else:
            top = y
            for i, layer in enumerate(self.layers):
                if i > 0:
                    top = self.dropout_out_module(top)
                top, states[i] = layer(top, states[i])
            ctx, attn = self.attention(top, enc, enc_mask, keys)
            query = top[-1]
        out = torch.tanh(self.readout(torch.cat([self.dropout_out_module(top), ctx, y], dim=-1)))
        out = self.dropout_out_module(out)
        if incremental_state is not None:
            cache: Dict[str, Optional[Tensor]] = {"query": query, "keys": keys}
            self._states.put(cache, states)
            self.set_incremental_state(incremental_state, "cached_state", cache)
        return out.transpose(0, 1), attn.transpose(0, 1)

    def _feed(self, query, flat, kinds, y, enc, enc_mask, keys):
        """The input-feeding loop over the target steps (:meth:`_feed_step`; beam search runs it with
        T = 1 per generated token).  Eagerly, layers that expose their input projection get it from a
        ``StepwiseLinear``; captured as CUDA graphs, the source axis is padded to a declared length
        that holds the source and the target (``cuda_graphs.padded_shape``; padded positions masked)
        and ``fast_path.scan`` pads time and batch."""
        how = self.execution(y)
        if not how.fast:
            consts = (enc, enc_mask, keys, kinds, self._stepwise_projections(y.size(0), y.size(1)))
            return scan(self, "_feed_step", (query, *flat), (y,), None, consts, how=how)
        S, B = enc.shape[:2]
        src = S
        if how.graphs:
            # at least the target's length: a batch padded to a declared length (the shape plan's
            # collaters) has its source within it, so source and target take one declared length
            src = padded_shape(max(S, y.size(0)), B)[0]
            enc_mask = enc.new_zeros(B, S, dtype=torch.bool) if enc_mask is None else enc_mask
            enc, keys, enc_mask = pad_dim(enc, 0, src), pad_dim(keys, 0, src), pad_dim(enc_mask, 1, src, True)
        (top, ctx, attn), carry = scan(self, "_feed_step", (query, *flat), (y,), None,
                                       (enc, enc_mask, keys, kinds, None), FEED_LAYOUT, how=how)
        return (top, ctx, attn[..., :S]), carry

    def _feed_step(self, carry, x, valid: Optional[Tensor], consts):
        """One input-feeding step, the decoder's step (:mod:`.fast_path`): c_t = attention(s_{t-1}),
        the first layer reads [y_{t-1}; c_t], every layer advances one step.  carry ``(s, *flat layer
        states)``, x ``(y[B, E],)``, ``valid[B]`` or None (a padded step keeps every state), consts
        ``(encoder_out, encoder_padding_mask, keys, state kinds, stepwise projections or None)``;
        returns ``((s[B, H], c[B, C], attn[B, S]), carry)``."""
        query, flat = carry[0], carry[1:]
        (y,) = x
        enc, enc_mask, keys, kinds, projs = consts
        states = unflatten_states(list(flat), kinds)
        mask = None if valid is None else ~valid.unsqueeze(0)
        ctx, a = self.attention(query, enc, enc_mask, keys)
        inp = torch.cat([y, ctx], dim=-1).unsqueeze(0)
        for i, layer in enumerate(self.layers):
            if i > 0:
                inp = self.dropout_out_module(inp)
            if projs is None or projs[i] is None:
                inp, states[i] = layer(inp, states[i], padding_mask=mask)
            else:
                inp, states[i] = layer(inp, states[i], padding_mask=mask, input_proj=projs[i](inp))
        query = inp[0] if valid is None else torch.where(valid.unsqueeze(-1), inp[0], query)
        return (inp[0], ctx, a), (query, *flatten_states(states)[0])

    def _stepwise_projections(self, seqlen: int, bsz: int) -> List[Optional[StepwiseLinear]]:
        """In training, layers that expose their input projection get it from a ``StepwiseLinear``
        (one weight-gradient product for the whole target instead of one per step)."""
        if seqlen < 2 or not torch.is_grad_enabled():
            return [None] * self.num_layers
        return [StepwiseLinear(*layer.input_projection_parameters(), seqlen, bsz)
                if hasattr(layer, "input_projection_parameters") else None for layer in self.layers]

    def reorder_incremental_state(self, incremental_state, new_order):
        self._reorder_cached_state(incremental_state, new_order, lambda cached: {
            "query": cached["query"].index_select(0, new_order),
            "keys": cached["keys"].index_select(1, new_order),
        })
