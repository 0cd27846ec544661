"""Parallel-cell LSTM translation model (Zhu et al., "Going Wider", Section 3.2, Table 3).

RNNSearch-style attentional encoder-decoder (:class:`~fairseq_local.models.rnnsearch.RNNSearchModel`
and the shared scaffold of :mod:`fairseq_local.modules.recurrent_seq2seq`) whose every recurrent
layer, in encoder and decoder, is a :class:`~fairseq_local.modules.parallel_cell_rnn.ParallelCellRNNLayer`
with ``--wide`` cells. As in the paper (following Wu et al. 2016) only the bottom
``--encoder-bidirectional-layers`` encoder layers are bidirectional (separate parameters per
direction; the two directions have ``hidden/2`` units each and are concatenated to ``hidden``), the
layers above are unidirectional; the decoder is initialised from the encoder (tanh projection),
attends with additive attention and is a fairseq incremental decoder (exact beam search).

Archs (Table 3): ``parallel_lstm_zh_en_baseline`` (wide=1: "Bi-LSTM + Attention") and
``parallel_lstm_zh_en_wide3`` ("RNN_PCs + Bi-LSTM + Attention (wide=3)"): 4 encoder layers
(1 bidirectional + 3 unidirectional), 3 decoder layers, 1024-d embeddings, dropout 0.2. The paper's
1024 hidden units cannot be split equally into 3 cells (nor into 2 directions of 3 cells), so the
wide=3 arch uses 1026 hidden units (cells of 342; 171 per direction in the bidirectional layer).

``--cell-input full`` (default, Figure 3) lets every cell read the whole layer input; ``slice`` gives
cell j only the j-th of ``wide`` consecutive slices of it (Section 2.2's count; uneven slices where
``wide`` does not divide the input, e.g. the first decoder layer's [embedding; context]). The
Table 3 archs keep ``full``: the paper gives no sizes for Table 3.
"""
from dataclasses import dataclass, field

from fairseq.dataclass import ChoiceEnum
from fairseq.models import register_model, register_model_architecture

from fairseq_local.models.rnnsearch import RNNSearchConfig, RNNSearchModel
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer, bidirectional_parallel_cells
from fairseq_local.models.arch_defaults import fill_defaults
from fairseq_local.config_checks import check_divides
from fairseq_local_core.errors import ConfigError

CELL_INPUT_CHOICES = ChoiceEnum(["full", "slice"])


@dataclass
class ParallelLSTMConfig(RNNSearchConfig):
    wide: int = field(default=1, metadata={"help": "parallel cells per recurrent layer (paper's 'wide')"})
    cell_input: CELL_INPUT_CHOICES = field(
        default="full", metadata={"help": "what each cell reads: the whole layer input ('full', Figure 3) or "
                                          "its own 1/wide slice of it ('slice', Section 2.2's 8m^2/n + 4m count)"})
    encoder_bidirectional_layers: int = field(
        default=1, metadata={"min": 0, "help": "number of bottom encoder layers that are bidirectional "
                                     "(two directions of hidden/2 units); the rest are unidirectional"})
    encoder_unidirectional: bool = field(
        default=True, metadata={"help": "must stay true: bidirectionality is set by "
                                        "--encoder-bidirectional-layers"})


@register_model("parallel_lstm", dataclass=ParallelLSTMConfig)
class ParallelLSTMModel(RNNSearchModel):
    config_class = ParallelLSTMConfig

    @classmethod
    def validate(cls, cfg):
        super().validate(cfg)
        if not cfg.encoder_unidirectional:
            raise ValueError("parallel_lstm: set --encoder-bidirectional-layers N instead of "
                             "encoder_unidirectional=false")
        if not 0 <= cfg.encoder_bidirectional_layers <= cfg.encoder_layers:
            raise ValueError(f"--encoder-bidirectional-layers {cfg.encoder_bidirectional_layers} must be "
                             f"between 0 and --encoder-layers {cfg.encoder_layers}")
        hidden, wide = cfg.encoder_hidden_size, cfg.wide
        if cfg.encoder_bidirectional_layers and hidden % (2 * wide):
            raise ConfigError(f"--encoder-hidden-size {hidden} must be divisible by 2 x --wide {wide}: each of the "
                              f"--encoder-bidirectional-layers {cfg.encoder_bidirectional_layers} splits it into two "
                              f"directions of --wide cells (e.g. --encoder-hidden-size "
                              f"{2 * wide * max(1, hidden // (2 * wide))})")
        check_divides(cfg, "encoder_hidden_size", "wide")
        check_divides(cfg, "decoder_hidden_size", "wide")

    @classmethod
    def build_layer_factory(cls, cfg, side: str):
        wide, cell, n_bi, cell_input = cfg.wide, cfg.cell, cfg.encoder_bidirectional_layers, str(cfg.cell_input)

        def factory(i, input_size, hidden_size):
            if side == "encoder" and i < n_bi:
                return bidirectional_parallel_cells(input_size, hidden_size, wide, cell, cell_input)
            return ParallelCellRNNLayer(input_size, hidden_size, wide, cell, cell_input)

        return factory


def _paper_zh_en(args, **overrides):
    fill_defaults(args, ParallelLSTMConfig, **{
        "cell": "lstm", "encoder_layers": 4, "encoder_bidirectional_layers": 1, "decoder_layers": 3,
        "encoder_embed_dim": 1024, "decoder_embed_dim": 1024, "encoder_hidden_size": 1024,
        "decoder_hidden_size": 1024, "dropout": 0.2, "wide": 1, **overrides})


@register_model_architecture("parallel_lstm", "parallel_lstm_zh_en_baseline")
def parallel_lstm_zh_en_baseline(args):
    """Table 3 baseline (Bi-LSTM + Attention): wide=1, 1024 units."""
    _paper_zh_en(args)


@register_model_architecture("parallel_lstm", "parallel_lstm_zh_en_wide3")
def parallel_lstm_zh_en_wide3(args):
    """Table 3: parallel cells with wide=3 in every layer (1026 units: 1024 is not divisible by 3)."""
    _paper_zh_en(args, wide=3, encoder_hidden_size=1026, decoder_hidden_size=1026)
