"""Parallel-cell LSTM language model (Zhu et al., "Going Wider", Section 3.1, Tables 1-2).

A stack of :class:`~fairseq_local.modules.parallel_cell_rnn.ParallelCellRNNLayer` (``--wide`` cells
per layer) on the generic :class:`~fairseq_local.modules.recurrent_lm_decoder.RecurrentLMDecoder`,
regularised as Zaremba et al. (2014): dropout on the non-recurrent connections (embeddings, between
layers, before the softmax; per-element masks, or ``--variational-dropout`` for one mask per
sequence), every parameter initialised uniformly in [-init_scale, init_scale].

Train with the stateful truncated-BPTT task (the final state of one batch starts the next)::

    fairseq-train data-bin/ptb --user-dir fairseq_local --task stateful_language_modeling \
        --arch parallel_lstm_lm_1950h_wide3 --tokens-per-sample 35 --batch-size 20 ...

Archs: ``parallel_lstm_lm_1950h_wide{1,2,3,4,5,10,15}`` (Table 2; wide=3 is Table 1's best) and
``parallel_lstm_lm_420h_wide3_1layer`` (Section 4.1's cell-masking model). 1950 units cannot be
split into 4 equal cells, so ``..._wide4`` has 1952 (cells of 488; the paper does not say how it
split them).

``--cell-input``: these archs use ``slice`` (each cell reads its own m/n slice of the layer input).
Figure 3 draws every cell reading x (``full``, the model's default), but the paper's parameter
claims hold only for ``slice``: Section 2.2 counts a wide-n LSTM layer as 8m^2/n + 4m, "about 1/n"
of the LSTM's 8m^2 + 4m, and Section 3.1 says that at wide=10 "the LSTM cell contains about only
10% of parameters" (55% in the full reading); Section 4.2 compares a wide-n layer with n small
RNNs of m/n units as costing the same, which again is the slice reading. Table 2's "recurrent
parameters size" (2 layers x 4m^2/n) is the same in both readings.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch.nn as nn
from fairseq.models import FairseqLanguageModel, register_model, register_model_architecture
from fairseq.dataclass import ChoiceEnum
from fairseq.modules import FairseqDropout

from fairseq_local.config_checks import check_divides, check_sizes
from fairseq_local_core.errors import ConfigError
from fairseq_local.modules.fast_path import RecurrentImplConfig, apply_impl_config
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.models.arch_defaults import fill_defaults, register_arch
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import Embedding

CELL_CHOICES = ChoiceEnum(["lstm", "gru", "rnn"])
CELL_INPUT_CHOICES = ChoiceEnum(["full", "slice"])


@dataclass
class ParallelLSTMLMConfig(RecurrentImplConfig):
    wide: Optional[int] = field(default=1, metadata={"help": "parallel cells per layer (paper's 'wide')"})
    cell_type: CELL_CHOICES = field(default="lstm", metadata={"help": "cell of every parallel cell"})
    cell_input: CELL_INPUT_CHOICES = field(
        default="full", metadata={"help": "what each cell reads: the whole layer input ('full', Figure 3) or "
                                          "its own 1/wide slice of it ('slice', Section 2.2's 8m^2/n + 4m count)"})
    decoder_embed_dim: Optional[int] = field(default=1950, metadata={"help": "word embedding size"})
    decoder_hidden_size: Optional[int] = field(default=1950, metadata={"help": "total hidden units per layer (m)"})
    decoder_layers: Optional[int] = field(default=2, metadata={"help": "number of recurrent layers"})
    dropout: Optional[float] = field(default=0.65, metadata={"help": "dropout on non-recurrent connections"})
    variational_dropout: Optional[bool] = field(
        default=False, metadata={"help": "one dropout mask per sequence (Gal & Ghahramani) instead of per element"})
    init_scale: Optional[float] = field(default=0.04, metadata={"help": "uniform init range [-s, s] of all weights"})
    share_decoder_input_output_embed: Optional[bool] = field(
        default=False, metadata={"help": "tie input and output embeddings (needs embed dim == hidden size)"})
    max_target_positions: Optional[int] = field(default=100000, metadata={"help": "max sequence length"})


class ParallelCellLMDecoder(RecurrentLMDecoder):
    """The generic recurrent LM decoder (it carries its per-layer state across truncated-BPTT
    batches through ``bptt_state``, see :mod:`fairseq_local.tasks.stateful_language_modeling`)
    with Zaremba-style dropout and cell masking."""

    def __init__(self, *args, variational_dropout: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if not variational_dropout:  # Zaremba et al.: independent masks per element and step
            name = self.__class__.__name__
            self.drop_in, self.drop_hidden, self.drop_out = (
                FairseqDropout(m.p, module_name=name) for m in (self.drop_in, self.drop_hidden, self.drop_out))

    def mask_cells(self, layer: Optional[int], cells):
        """Zero the hidden state of ``cells`` in ``layer`` (every layer when None) at test time
        (paper Section 4.1); ``cells=[]`` unmasks."""
        layers = self.layers if layer is None else [self.layers[layer]]
        for lay in layers:
            lay.mask_cells(cells)


@register_model("parallel_lstm_lm", dataclass=ParallelLSTMLMConfig)
class ParallelLSTMLanguageModel(FairseqLanguageModel):

    @classmethod
    def build_model(cls, args, task):
        base_architecture(args)
        check_sizes(args, ParallelLSTMLMConfig)
        check_divides(args, "decoder_hidden_size", "wide")
        if not args.init_scale > 0:
            raise ConfigError(f"--init-scale must be > 0 (got {args.init_scale}): weights start uniform in "
                              "[-init_scale, init_scale]")
        dictionary = task.target_dictionary
        embed = Embedding(len(dictionary), args.decoder_embed_dim, dictionary.pad())
        hidden = args.decoder_hidden_size

        def factory(i, input_size, hidden_size):
            return ParallelCellRNNLayer(input_size, hidden_size, wide=args.wide, cell=str(args.cell_type),
                                        cell_input=str(args.cell_input))

        decoder = ParallelCellLMDecoder(
            dictionary, embed, factory, args.decoder_layers, hidden, last_hidden_size=hidden,
            dropout_in=args.dropout, dropout_hidden=args.dropout, dropout_out=args.dropout,
            share_input_output_embed=args.share_decoder_input_output_embed,
            max_positions=args.max_target_positions, variational_dropout=args.variational_dropout,
        )
        for p in decoder.parameters():
            nn.init.uniform_(p, -args.init_scale, args.init_scale)
        nn.init.zeros_(embed.weight[dictionary.pad()].data)
        return apply_impl_config(cls(decoder), args)


def base_architecture(args):
    fill_defaults(args, ParallelLSTMLMConfig)


# Table 2: 2 layers x 1950 units, wide in {1, 2, 3, 4, 5, 10, 15}
PAPER_LM_WIDES = (1, 2, 3, 4, 5, 10, 15)


def table2_hidden_size(wide: int) -> int:
    """1950 units, rounded up to a multiple of ``wide`` so the cells are equal: 1952 for wide=4
    (cells of 488); every other Table 2 width divides 1950."""
    return -(-1950 // wide) * wide


def _register_table2(wide):
    m = table2_hidden_size(wide)
    return register_arch("parallel_lstm_lm", f"parallel_lstm_lm_1950h_wide{wide}",
                         f"Table 2: 2 layers x {m} units in {wide} parallel cells.", config=ParallelLSTMLMConfig,
                         wide=wide, decoder_hidden_size=m, decoder_embed_dim=m, decoder_layers=2, dropout=0.65,
                         init_scale=0.04, cell_input="slice")


TABLE2_ARCHS: Dict[int, object] = {w: _register_table2(w) for w in PAPER_LM_WIDES}


@register_model_architecture("parallel_lstm_lm", "parallel_lstm_lm_420h_wide3_1layer")
def parallel_lstm_lm_420h_wide3_1layer(args):
    """Section 4.1's cell-masking model: one layer, 420 units, wide=3, dropout 0.2, the slice reading
    of Table 2 (each cell reads 140 of the 420 embedding units)."""
    fill_defaults(args, ParallelLSTMLMConfig, wide=3, decoder_hidden_size=420, decoder_embed_dim=420,
                  decoder_layers=1, dropout=0.2, cell_input="slice")
