"""Recurrent language-model decoder over any stack of contract layers (the layer contract is in
:mod:`fairseq_local.modules.recurrent_seq2seq`), with AWD-LSTM regularisation."""
from typing import Dict, List, Optional

import torch.nn as nn
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from fairseq_local.modules.awd_dropout import LockedDropout, embedding_dropout
from fairseq_local.modules.fast_path import FastPathMixin, flatten_states, scan, unflatten_states
from fairseq_local.modules.recurrent_seq2seq import LayerFactory, RecurrentDecoderMixin


class RecurrentLMDecoder(FastPathMixin, RecurrentDecoderMixin, FairseqIncrementalDecoder):
    """Decoder-only stack of contract layers for language modelling.

    AWD-LSTM regularisation: word-level embedding dropout (``dropout_embed``), variational
    dropout on the embeddings (``dropout_in``), between layers (``dropout_hidden``) and on the
    top output (``dropout_out``); DropConnect on hidden-to-hidden weights belongs to the layers.
    The last layer has ``last_hidden_size`` units (default: embedding size, needed for tying).
    The incremental state carries every layer's recurrent state, so ``fairseq-eval-lm`` and
    sampling are exact.  With ``--task stateful_language_modeling`` the decoder starts from and
    stores its per-layer states in the task's ``bptt_state`` carry (truncated BPTT).
    """

    def __init__(self, dictionary, embed_tokens: nn.Embedding, layer_factory: LayerFactory,
                 num_layers: int, hidden_size: int, last_hidden_size: Optional[int] = None,
                 dropout_embed: float = 0.0, dropout_in: float = 0.0, dropout_hidden: float = 0.0,
                 dropout_out: float = 0.0, share_input_output_embed: bool = False,
                 max_positions: int = int(1e5)):
        super().__init__(dictionary)
        embed_dim = self._init_input(embed_tokens, num_layers, max_positions)
        last_hidden_size = last_hidden_size or embed_dim
        self.dropout_embed = dropout_embed
        self.drop_in, self.drop_hidden, self.drop_out = (
            LockedDropout(dropout_in), LockedDropout(dropout_hidden), LockedDropout(dropout_out))
        self.layers = nn.ModuleList()
        in_dim = embed_dim
        for i in range(num_layers):
            out_dim = last_hidden_size if i == num_layers - 1 else hidden_size
            self.layers.append(layer_factory(i, in_dim, out_dim))
            in_dim = out_dim
        self._init_output(dictionary, last_hidden_size, embed_dim, share_input_output_embed, "the last layer size")

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, bptt_state=None, **unused):
        x = self.extract_features(prev_output_tokens, incremental_state, bptt_state)
        if not features_only:
            x = self.output_layer(x)
        return x, {"attn": [None], "inner_states": None}

    def extract_features(self, prev_output_tokens, incremental_state=None, bptt_state=None, **unused):
        cached = self.get_incremental_state(incremental_state, "cached_state") if incremental_state is not None else None
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            states = self._states.get(cached, self.num_layers)
        elif bptt_state is not None and bptt_state.get(self) is not None:
            states = list(bptt_state.get(self))
        else:
            states = [None] * self.num_layers
        x = embedding_dropout(self.embed_tokens, prev_output_tokens, self.dropout_embed, self.training)
        x = self.drop_in(x.transpose(0, 1))
        if x.size(0) == 1 and self.execution(x).fast:  # the incremental step: the whole stack is one step
            states = [layer.state_from_hidden(x.new_zeros(x.size(1), layer.hidden_size)) if s is None else s
                      for layer, s in zip(self.layers, states)]
            flat, kinds = flatten_states(states)
            (x,), flat = scan(self, "_stack_step", flat, (x,), None, (kinds,))
            states = unflatten_states(flat, kinds)
        else:  # longer inputs: each layer runs its own (eager or compiled) scan
            (x,), states = self._stack(x, states, None)
        x = self.drop_out(x)
        if bptt_state is not None:
            bptt_state.set(self, list(states))
        if incremental_state is not None:
            cache: Dict[str, Optional[Tensor]] = {}
            self._states.put(cache, states)
            self.set_incremental_state(incremental_state, "cached_state", cache)
        return x.transpose(0, 1)

    def _stack(self, x: Tensor, states: List, valid: Optional[Tensor]):
        mask = None if valid is None else ~valid
        states = list(states)
        for i, layer in enumerate(self.layers):
            if i > 0:
                x = self.drop_hidden(x)
            x, states[i] = layer(x, states[i], padding_mask=mask)
        return (x,), states

    def _stack_step(self, carry, x, valid: Optional[Tensor], consts):
        """One step of the layer stack, the decoder's step (:mod:`.fast_path`) for the incremental
        step: carry the flat layer states, x ``(x[B, E],)``, ``valid[B]`` or None, consts
        ``(state kinds,)``."""
        (kinds,) = consts
        (out,), states = self._stack(x[0].unsqueeze(0), unflatten_states(list(carry), kinds),
                                     None if valid is None else valid.unsqueeze(0))
        return (out[0],), tuple(flatten_states(states)[0])

    def reorder_incremental_state(self, incremental_state, new_order):
        self._reorder_cached_state(incremental_state, new_order, lambda cached: {})
