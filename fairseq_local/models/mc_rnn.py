"""MC-RNN encoder-decoder (Xu et al., AAAI 2019, Sections 3 and 4.1-4.2).

The RNNSearch model of :mod:`fairseq_local.models.rnnsearch` (the paper's Baseline-RNN) with
every recurrent layer of the encoder (both directions) and of the decoder replaced by a
:class:`~fairseq_local.modules.multi_channel_rnn.MultiChannelRNNLayer` with ``--mc-channels`` k
channels (block size n = k + 1).  The decoder is a ``FairseqIncrementalDecoder`` whose
incremental state holds, per layer, each channel's last n-1 hidden states (and LSTM cells), and
reorders them for beam search.

Named architectures, one per row of the paper's tables (all 256-d embeddings and hidden units;
``--mc-weight-space gates --mc-init-state all``, see ``TABLE_ROW_DEFAULTS``):
``mc_rnn_iwslt_de_en_{2,3,4}`` (Tables 2 and 5, 2 layers) and ``mc_rnn_gigaword_{2,3,4}``
(Table 3, 4 layers); the Baseline-RNN rows are ``rnnsearch_iwslt_de_en``,
``rnnsearch_iwslt_de_en_large`` (286 hidden), ``rnnsearch_iwslt_de_en_deep`` (3 layers) and
``rnnsearch_gigaword``.
"""
from dataclasses import dataclass, field

from fairseq.models import register_model, register_model_architecture

from fairseq_local.models.rnnsearch import RNNSearchConfig, RNNSearchModel, rnnsearch_gigaword, rnnsearch_iwslt_de_en
from fairseq_local.modules.multi_channel_rnn import (
    BLOCK_INITS,
    CELL_MEMORY,
    INIT_STATES,
    WEIGHT_SPACES,
    MultiChannelRNNLayer,
)
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer
from fairseq_local.models.arch_defaults import fill_defaults, register_arch, set_defaults
from fairseq_local.config_checks import check_choice
from fairseq_local_core.errors import ConfigError


@dataclass
class MCRNNConfig(RNNSearchConfig):
    mc_channels: int = field(default=3, metadata={"help": "number of channels k of every MC-RNN layer "
                                                          "(block size n = k + 1)"})
    mc_cell_memory: str = field(default="chain", metadata={
        "help": "LSTM memory cell input: 'chain' (c_{t-1} of the same channel) or 'block_mean' "
                "(mean of the block's previous cells, like Eq. 2)"})
    mc_weight_space: str = field(default="hidden", metadata={
        "help": "W_j of Eq. 2: 'hidden' (H x H, then the cell's W_hh; literal, fewer multiply-adds) or "
                "'gates' (learned in the cell's gate space, no W_hh; matches the paper's IWSLT14 parameter counts)"})
    mc_block_init: str = field(default="identity", metadata={
        "help": "initial W_j in --mc-weight-space hidden: 'identity' (s starts as the block mean) or 'uniform'"})
    mc_init_state: str = field(default="first", metadata={
        "help": "decoder state from the encoder: h0 in the newest lag slot only ('first', older slots zero) "
                "or in every lag slot ('all')"})
    mc_sides: str = field(default="both", metadata={
        "help": "where the MC-RNN layers are: 'both', 'encoder' or 'decoder' (the other side gets standard "
                "torch.nn layers of the same cell; an ablation)"})


MC_SIDES = ("both", "encoder", "decoder")


def check_mc_options(cfg):
    channels = cfg.mc_channels
    if not isinstance(channels, int) or channels < 1:
        raise ConfigError(f"--mc-channels must be an integer >= 1 (got {channels!r})")
    check_choice("mc_cell_memory", cfg.mc_cell_memory, CELL_MEMORY)
    check_choice("mc_weight_space", cfg.mc_weight_space, WEIGHT_SPACES)
    check_choice("mc_block_init", getattr(cfg, "mc_block_init", "identity"), BLOCK_INITS)
    check_choice("mc_init_state", getattr(cfg, "mc_init_state", "first"), INIT_STATES)
    check_choice("mc_sides", getattr(cfg, "mc_sides", "both"), MC_SIDES)


@register_model("mc_rnn", dataclass=MCRNNConfig)
class MCRNNModel(RNNSearchModel):
    config_class = MCRNNConfig

    @classmethod
    def validate(cls, cfg):
        super().validate(cfg)
        check_mc_options(cfg)

    @classmethod
    def build_layer_factory(cls, cfg, side: str):
        if getattr(cfg, "mc_sides", "both") not in ("both", side):
            return lambda i, input_size, hidden_size: TorchRNNLayer(cfg.cell, input_size, hidden_size)

        def factory(i, input_size, hidden_size):
            return MultiChannelRNNLayer(input_size, hidden_size, cfg.mc_channels, cell=cfg.cell,
                                        cell_memory=cfg.mc_cell_memory, weight_space=cfg.mc_weight_space,
                                        block_init=getattr(cfg, "mc_block_init", "identity"),
                                        init_state=getattr(cfg, "mc_init_state", "first"))

        return factory


# The table rows' reading of the paper's open choices (docs/mc_rnn.md, "Learning per update"):
# W_j learned in the cell's gate space, so MC-RNN-1 is exactly the Baseline-RNN's LSTM (the
# literal H x H W_j in front of W_hh is a product W_hh W_j that Adam optimises measurably slower:
# on Multi30k MC-RNN-3 trails the baseline at equal updates with it and leads without it), and the
# decoder's initial state h0 in every lag slot (no block averages h0 with zeros).  These are also
# the parameter increments of the paper's IWSLT14 rows (+2.6/+4.2/+5.8M vs +3/+4/+6M).
TABLE_ROW_DEFAULTS = dict(mc_weight_space="gates", mc_init_state="all")


def _mc_arch(name, base, channels, doc):
    return register_arch("mc_rnn", name, doc, config=MCRNNConfig, base=base, mc_channels=channels,
                         **TABLE_ROW_DEFAULTS)


mc_rnn_iwslt_de_en_2 = _mc_arch("mc_rnn_iwslt_de_en_2", rnnsearch_iwslt_de_en, 2, "Table 2/5: MC-RNN-2, IWSLT14 De-En.")
mc_rnn_iwslt_de_en_3 = _mc_arch("mc_rnn_iwslt_de_en_3", rnnsearch_iwslt_de_en, 3, "Table 2/5: MC-RNN-3, IWSLT14 De-En.")
mc_rnn_iwslt_de_en_4 = _mc_arch("mc_rnn_iwslt_de_en_4", rnnsearch_iwslt_de_en, 4, "Table 2/5: MC-RNN-4, IWSLT14 De-En.")
mc_rnn_gigaword_2 = _mc_arch("mc_rnn_gigaword_2", rnnsearch_gigaword, 2, "Table 3: MC-RNN-2, Gigaword (4 layers).")
mc_rnn_gigaword_3 = _mc_arch("mc_rnn_gigaword_3", rnnsearch_gigaword, 3, "Table 3: MC-RNN-3, Gigaword (4 layers).")
mc_rnn_gigaword_4 = _mc_arch("mc_rnn_gigaword_4", rnnsearch_gigaword, 4, "Table 3: MC-RNN-4, Gigaword (4 layers).")


@register_model_architecture("mc_rnn", "mc_rnn_demo")
def mc_rnn_demo(args):
    """Small MC-RNN-2 (1 bidirectional encoder layer, 1 decoder layer, 128 units) that learns
    ``scripts/demo.sh``'s synthetic corpus within minutes on 2 CPU cores."""
    set_defaults(args, mc_channels=2, encoder_layers=1, decoder_layers=1, encoder_embed_dim=128,
                 decoder_embed_dim=128, encoder_hidden_size=128, decoder_hidden_size=128, attention_dim=128,
                 dropout=0.1)
    rnnsearch_iwslt_de_en(args)
    fill_defaults(args, MCRNNConfig)
