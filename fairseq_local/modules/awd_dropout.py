"""AWD-LSTM dropouts (Merity et al. 2018) for recurrent language models: variational (locked)
dropout and word-level embedding dropout.  DropConnect on hidden-to-hidden weights belongs to the
layers (see :mod:`fairseq_local.modules.multi_channel_rnn`)."""
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class LockedDropout(nn.Module):
    """Variational dropout (Gal & Ghahramani 2016; AWD-LSTM): one mask per sequence, shared over
    time, on ``T x B x C`` tensors."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        mask = x.new_empty(1, x.size(1), x.size(2)).bernoulli_(1 - self.p) / (1 - self.p)
        return x * mask


def embedding_dropout(embed: nn.Embedding, tokens: Tensor, p: float, training: bool) -> Tensor:
    """Embedding dropout (AWD-LSTM, Merity et al. 2018): drop whole word types of the embedding
    matrix for this batch (rescaling the kept ones)."""
    if not training or p == 0:
        return embed(tokens)
    mask = embed.weight.new_empty(embed.weight.size(0), 1).bernoulli_(1 - p) / (1 - p)
    return F.embedding(tokens, embed.weight * mask, embed.padding_idx)
