"""MC-RNN language model (Xu et al., AAAI 2019, Section 4.3, Table 4).

A decoder-only stack of :class:`~fairseq_local.modules.multi_channel_rnn.MultiChannelRNNLayer`
(:class:`~fairseq_local.modules.recurrent_lm_decoder.RecurrentLMDecoder`) with the AWD-LSTM
regularisation the paper adopts (Merity, Keskar and Socher, ICLR 2018): DropConnect on the
hidden-to-hidden matrices of every layer (W_hh, or the W_j with ``--mc-weight-space gates``;
``--weight-dropout``), word-level embedding dropout
(``--dropout-embed``), variational (locked) dropout on the embeddings (``--dropout-in``), between
layers (``--dropout-hidden``) and on the top output (``--dropout``), and tied input/output
embeddings (the last layer has ``--decoder-embed-dim`` units).

``mc_rnn_lm_ptb`` is the Table 4 row: 3 layers, 1150 hidden units, 400-d embeddings, MC-RNN-3,
AWD-LSTM's PTB dropouts (0.4 / 0.25 / 0.4 / 0.1, DropConnect 0.5).  ``mc_rnn_lm_ptb_awd_lstm`` is
its baseline row ("AWD-LSTM w/o finetune"): the same model with one channel and W_1 in gate space,
which is exactly a standard LSTM (W_1 = W_hh, DropConnect on it) with no channel attention.  Train it with
``--task stateful_language_modeling`` (truncated BPTT with the state carried across batches, as
AWD-LSTM) or fairseq's ``language_modeling``; evaluate with ``fairseq-eval-lm``.

For AR/TAR (``--criterion ar_tar_cross_entropy``, Merity et al. 2018, Section 4.6) the decoder's
output carries the last layer's output before and after its dropout, ``extra["raw_output"]`` and
``extra["dropped_output"]`` (``B x T x C``).  AWD-LSTM's other procedures are the task's and the
optimiser's: ``--variable-bptt`` (Section 4.1) and ``--optimizer nt_asgd`` (Section 3).
"""
from dataclasses import dataclass, field

from fairseq.models import FairseqLanguageModel, register_model, register_model_architecture

from fairseq_local.config_checks import check_sizes
from fairseq_local.models.mc_rnn import check_mc_options
from fairseq_local.modules.fast_path import RecurrentImplConfig, apply_impl_config
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.models.arch_defaults import fill_defaults
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import Embedding
from fairseq_local.modules.torch_rnn_layer import check_cell_type


@dataclass
class MCRNNLMConfig(RecurrentImplConfig):
    cell: str = field(default="lstm", metadata={"help": "recurrent cell: lstm, gru or rnn"})
    mc_channels: int = field(default=3, metadata={"help": "channels k per layer (block size k + 1)"})
    mc_cell_memory: str = field(default="chain", metadata={"help": "LSTM memory input: chain or block_mean"})
    mc_weight_space: str = field(default="hidden", metadata={"help": "W_j in 'hidden' (H x H) or 'gates' space"})
    decoder_embed_dim: int = field(default=400, metadata={"help": "embedding size (= last layer size when tied)"})
    decoder_hidden_size: int = field(default=1150, metadata={"help": "hidden size of the inner layers"})
    decoder_layers: int = field(default=3, metadata={"help": "number of layers"})
    untie_embeddings: bool = field(default=False, metadata={"help": "separate output embeddings (AWD ties them)"})
    dropout: float = field(default=0.4, metadata={"help": "variational dropout on the top output"})
    dropout_in: float = field(default=0.4, metadata={"help": "variational dropout on the embeddings (dropouti)"})
    dropout_hidden: float = field(default=0.25, metadata={"help": "variational dropout between layers (dropouth)"})
    dropout_embed: float = field(default=0.1, metadata={"help": "word-level embedding dropout (dropoute)"})
    weight_dropout: float = field(default=0.5, metadata={"help": "DropConnect on W_hh (wdrop)"})


def _max_positions(cfg):
    """The task's --max-target-positions when given; a recurrent LM has no length limit of its own."""
    value = getattr(cfg, "max_target_positions", None)
    return value if value is not None else 100000


class AWDLMDecoder(RecurrentLMDecoder):
    """:class:`RecurrentLMDecoder` whose output also carries the last layer's output before and after
    the top dropout (read off that dropout module by a forward hook), for AR/TAR."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._top_output = None
        self.drop_out.register_forward_hook(self._keep_top_output)

    def _keep_top_output(self, module, inputs, output):
        self._top_output = (inputs[0], output)  # T x B x C

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None,
                features_only: bool = False, bptt_state=None, **unused):
        self._top_output = None
        x, extra = super().forward(prev_output_tokens, encoder_out, incremental_state, features_only, bptt_state)
        raw, dropped = self._top_output
        self._top_output = None
        extra["raw_output"], extra["dropped_output"] = raw.transpose(0, 1), dropped.transpose(0, 1)
        return x, extra


@register_model("mc_rnn_lm", dataclass=MCRNNLMConfig)
class MCRNNLanguageModel(FairseqLanguageModel):
    supports_bptt_state = True  # --task stateful_language_modeling carries the state

    @classmethod
    def build_model(cls, cfg, task):
        fill_defaults(cfg, MCRNNLMConfig)
        check_sizes(cfg, MCRNNLMConfig)
        check_cell_type(cfg.cell)
        check_mc_options(cfg)
        d = task.target_dictionary
        embed = Embedding(len(d), cfg.decoder_embed_dim, d.pad())

        def factory(i, input_size, hidden_size):
            return MultiChannelRNNLayer(input_size, hidden_size, cfg.mc_channels, cell=cfg.cell,
                                        cell_memory=cfg.mc_cell_memory, dropconnect=cfg.weight_dropout,
                                        weight_space=cfg.mc_weight_space)

        decoder = AWDLMDecoder(
            d, embed, factory, cfg.decoder_layers, cfg.decoder_hidden_size,
            last_hidden_size=cfg.decoder_embed_dim if not cfg.untie_embeddings else cfg.decoder_hidden_size,
            dropout_embed=cfg.dropout_embed, dropout_in=cfg.dropout_in, dropout_hidden=cfg.dropout_hidden,
            dropout_out=cfg.dropout, share_input_output_embed=not cfg.untie_embeddings,
            max_positions=_max_positions(cfg))
        return apply_impl_config(cls(decoder), cfg)


@register_model_architecture("mc_rnn_lm", "mc_rnn_lm_ptb")
def mc_rnn_lm_ptb(args):
    """Table 4: MC-RNN-3 with AWD-LSTM settings on PTB (3 x 1150 LSTM, 400-d tied embeddings)."""
    fill_defaults(args, MCRNNLMConfig, cell="lstm", mc_channels=3, decoder_layers=3, decoder_hidden_size=1150,
                  decoder_embed_dim=400, dropout=0.4, dropout_in=0.4, dropout_hidden=0.25, dropout_embed=0.1,
                  weight_dropout=0.5)


@register_model_architecture("mc_rnn_lm", "mc_rnn_lm_ptb_awd_lstm")
def mc_rnn_lm_ptb_awd_lstm(args):
    """Table 4 baseline, AWD-LSTM w/o finetune: ``mc_rnn_lm_ptb`` with k = 1 in gate space, i.e. a
    plain 3 x 1150 LSTM with the same regularisation (DropConnect 0.5 on W_hh)."""
    fill_defaults(args, MCRNNLMConfig, mc_channels=1, mc_weight_space="gates")
    mc_rnn_lm_ptb(args)
