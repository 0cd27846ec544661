"""RNNSearch (Bahdanau, Cho and Bengio, ICLR 2015) additive attention over encoder outputs.

For a decoder query s (one per target position) and encoder annotations h_1..h_S:

    e_j   = v^T tanh(W_q s + U_k h_j + b)        (Bahdanau et al. 2015, Eq. 6 / Appendix A.1.2)
    a_j   = softmax_j(e_j)   over non-padded source positions
    c     = sum_j a_j h_j

The key projection U_k h_j does not depend on the query, so callers compute it once per source
(`project_keys`) and pass it to every decoding step (the recurrent decoders cache it in their
incremental state).  Queries may be one step ``B x Q`` or a whole target ``T x B x Q`` (batched,
used by decoders without input feeding).  This is the single attention module shared by every
recurrent seq2seq model of fairseq_local (RNNSearch, MC-RNN, parallel-cell, lattice encoders).
"""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq_local.modules.fast_path import in_trace


def _uniform_linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    m = nn.Linear(in_features, out_features, bias=bias)
    nn.init.uniform_(m.weight, -0.1, 0.1)
    if bias:
        nn.init.zeros_(m.bias)
    return m


class RNNSearchAttention(nn.Module):
    """Additive (Bahdanau) attention with a source padding mask.

    Args:
        query_dim: size of the decoder query (decoder hidden size).
        key_dim: size of the encoder annotations (``encoder_out`` channels).
        attention_dim: size of the hidden layer of the alignment model (default ``query_dim``).
    """

    def __init__(self, query_dim: int, key_dim: int, attention_dim: Optional[int] = None):
        super().__init__()
        attention_dim = attention_dim or query_dim
        self.query_dim, self.key_dim, self.attention_dim = query_dim, key_dim, attention_dim
        self.query_proj = _uniform_linear(query_dim, attention_dim, bias=False)
        self.key_proj = _uniform_linear(key_dim, attention_dim, bias=True)
        self.score = _uniform_linear(attention_dim, 1, bias=False)

    def project_keys(self, encoder_out: Tensor) -> Tensor:
        """U_k h_j + b for every source position: ``S x B x C`` -> ``S x B x A``."""
        return self.key_proj(encoder_out)

    def forward(
        self,
        query: Tensor,
        encoder_out: Tensor,
        encoder_padding_mask: Optional[Tensor] = None,
        keys: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
            query: ``B x Q`` (one step) or ``T x B x Q`` (all target positions at once).
            encoder_out: ``S x B x C`` encoder annotations.
            encoder_padding_mask: ``B x S`` bool, True at padding (or None).
            keys: the result of :meth:`project_keys` (computed here when None).
        Returns:
            context ``B x C`` (or ``T x B x C``) and attention weights ``B x S`` (or ``T x B x S``).
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(0)
        if keys is None:
            keys = self.project_keys(encoder_out)
        q = self.query_proj(query)  # T x B x A
        # T x B x 1 x A  +  1 x B x S x A  ->  T x B x S
        scores = self.score(torch.tanh(q.unsqueeze(2) + keys.transpose(0, 1).unsqueeze(0))).squeeze(-1)
        if encoder_padding_mask is not None and (in_trace() or encoder_padding_mask.any()):
            scores = scores.masked_fill(encoder_padding_mask.unsqueeze(0), float("-inf"))
        attn = F.softmax(scores.float(), dim=-1).type_as(scores)
        context = torch.einsum("tbs,sbc->tbc", attn, encoder_out)
        if single:
            return context.squeeze(0), attn.squeeze(0)
        return context, attn
