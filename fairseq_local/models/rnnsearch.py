"""RNNSearch (Bahdanau, Cho and Bengio, ICLR 2015) with LSTM, GRU or tanh-RNN layers.

``--arch rnnsearch`` is the recurrent attentional encoder-decoder of
:mod:`fairseq_local.modules.recurrent_seq2seq` (bidirectional encoder, decoder initialised with
tanh(W h_final), additive attention, the context fed to the first decoder layer) with standard
``torch.nn`` recurrent layers.  It is the *Baseline-RNN* of the MC-RNN paper (Xu et al., AAAI 2019,
Tables 2, 3 and 5: 2 layers of 256-unit LSTMs and 256-d embeddings on IWSLT14 De-En, 4 layers on
Gigaword) and the RNNSearch baseline of the other papers.  ``RNNSearchModel.build_layer_factory``
is the single hook other recurrent families override (MC-RNN does).
"""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import FairseqEncoderDecoderModel, register_model, register_model_architecture

from fairseq_local.models.arch_defaults import fill_defaults, set_defaults
from fairseq_local.modules.recurrent_seq2seq import Embedding, RecurrentAttentionDecoder, RecurrentEncoder
from fairseq_local.config_checks import check_sizes
from fairseq_local.modules.fast_path import RecurrentImplConfig, apply_impl_config
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer, check_cell_type


@dataclass
class RNNSearchConfig(RecurrentImplConfig):
    cell: str = field(default="lstm", metadata={"help": "recurrent cell: lstm, gru or rnn"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability (default of the others)"})
    encoder_embed_dim: int = field(default=256, metadata={"help": "encoder embedding dimension"})
    encoder_hidden_size: int = field(default=256, metadata={"help": "encoder hidden size (per direction)"})
    encoder_layers: int = field(default=2, metadata={"help": "number of encoder layers"})
    encoder_unidirectional: bool = field(
        default=False, metadata={"help": "use a forward-only encoder (RNNSearch is bidirectional)"})
    encoder_output_dim: Optional[int] = field(
        default=None, metadata={"help": "project the (concatenated) encoder output to this size"})
    encoder_dropout_in: Optional[float] = field(default=None, metadata={"help": "encoder embedding dropout"})
    encoder_dropout_out: Optional[float] = field(default=None, metadata={"help": "encoder layer-output dropout"})
    decoder_embed_dim: int = field(default=256, metadata={"help": "decoder embedding dimension"})
    decoder_hidden_size: int = field(default=256, metadata={"help": "decoder hidden size"})
    decoder_layers: int = field(default=2, metadata={"help": "number of decoder layers"})
    decoder_out_embed_dim: Optional[int] = field(
        default=None, metadata={"help": "readout size before the vocabulary projection (default: embed dim)"})
    decoder_dropout_in: Optional[float] = field(default=None, metadata={"help": "decoder embedding dropout"})
    decoder_dropout_out: Optional[float] = field(default=None, metadata={"help": "decoder layer-output dropout"})
    attention_dim: Optional[int] = field(default=None, metadata={"help": "attention MLP size (default: decoder hidden)"})
    no_input_feeding: bool = field(
        default=False, metadata={"help": "query the attention with s_i after the stack instead of feeding "
                                         "c_i = attn(s_{i-1}) into the first layer (faster, Luong-style)"})
    no_decoder_init: bool = field(
        default=False, metadata={"help": "start the decoder from zeros instead of tanh(W h_final)"})
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie decoder input and output embeddings"})
    share_all_embeddings: bool = field(
        default=False, metadata={"help": "share encoder, decoder and output embeddings (joined dictionary)"})
    max_source_positions: int = field(default=100000, metadata={"help": "max source length"})
    max_target_positions: int = field(default=100000, metadata={"help": "max target length"})


@register_model("rnnsearch", dataclass=RNNSearchConfig)
class RNNSearchModel(FairseqEncoderDecoderModel):
    config_class = RNNSearchConfig

    @classmethod
    def build_layer_factory(cls, cfg, side: str):
        """``factory(layer_index, input_size, hidden_size) -> layer`` for ``side`` in encoder/decoder."""
        check_cell_type(cfg.cell)
        return lambda i, input_size, hidden_size: TorchRNNLayer(cfg.cell, input_size, hidden_size)

    @classmethod
    def validate(cls, cfg):
        check_cell_type(cfg.cell)

    @classmethod
    def build_model(cls, cfg, task):
        fill_defaults(cfg, cls.config_class)
        check_sizes(cfg, cls.config_class)
        cls.validate(cfg)
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        drop = cfg.dropout

        def opt(v):
            return drop if v is None else v

        enc_embed = Embedding(len(src_dict), cfg.encoder_embed_dim, src_dict.pad())
        if cfg.share_all_embeddings:
            if src_dict != tgt_dict:
                raise ValueError("--share-all-embeddings requires a joined dictionary")
            if cfg.encoder_embed_dim != cfg.decoder_embed_dim:
                raise ValueError("--share-all-embeddings requires --encoder-embed-dim == --decoder-embed-dim")
            dec_embed = enc_embed
        else:
            dec_embed = Embedding(len(tgt_dict), cfg.decoder_embed_dim, tgt_dict.pad())
        encoder = RecurrentEncoder(
            src_dict, enc_embed, cls.build_layer_factory(cfg, "encoder"), cfg.encoder_layers,
            cfg.encoder_hidden_size, bidirectional=not cfg.encoder_unidirectional,
            dropout_in=opt(cfg.encoder_dropout_in), dropout_out=opt(cfg.encoder_dropout_out),
            output_dim=cfg.encoder_output_dim, max_positions=cfg.max_source_positions)
        decoder = RecurrentAttentionDecoder(
            tgt_dict, dec_embed, cls.build_layer_factory(cfg, "decoder"), cfg.decoder_layers,
            cfg.decoder_hidden_size, encoder.output_dim, attention_dim=cfg.attention_dim,
            input_feeding=not cfg.no_input_feeding, init_from_encoder=not cfg.no_decoder_init,
            dropout_in=opt(cfg.decoder_dropout_in), dropout_out=opt(cfg.decoder_dropout_out),
            out_embed_dim=cfg.decoder_out_embed_dim,
            share_input_output_embed=cfg.share_decoder_input_output_embed or cfg.share_all_embeddings,
            max_positions=cfg.max_target_positions)
        return apply_impl_config(cls(encoder, decoder), cfg)


# ``--arch rnnsearch`` itself is registered by fairseq (register_model with a dataclass): the
# dataclass defaults above.
# ---- the MC-RNN paper's Baseline-RNN rows (Xu et al. 2019, Tables 2, 3, 5) ----------------------
@register_model_architecture("rnnsearch", "rnnsearch_iwslt_de_en")
def rnnsearch_iwslt_de_en(args):
    """Baseline-RNN, IWSLT14 De-En (Table 2/5): 2-layer LSTM, 256 embeddings and hidden units."""
    fill_defaults(args, RNNSearchConfig, cell="lstm", encoder_layers=2, decoder_layers=2,
                  encoder_embed_dim=256, decoder_embed_dim=256, encoder_hidden_size=256,
                  decoder_hidden_size=256, dropout=0.2)


@register_model_architecture("rnnsearch", "rnnsearch_iwslt_de_en_large")
def rnnsearch_iwslt_de_en_large(args):
    """Baseline-RNN-large (Table 5), the size-matched control of MC-RNN-3: wider hidden states.

    The paper widens 256 -> 286 units and reports 29M parameters, "almost the same" as MC-RNN-3.
    With our counting 286 units add only 1.0M (25.1M against MC-RNN-3's 28.2M at 25k/25k BPE
    types), so the row would not control for size; 364 units give 28.26M, within 0.2 % of
    ``mc_rnn_iwslt_de_en_3`` (pinned by a test).  ``--encoder-hidden-size 286
    --decoder-hidden-size 286`` is the paper's literal width."""
    set_defaults(args, encoder_hidden_size=364, decoder_hidden_size=364)
    rnnsearch_iwslt_de_en(args)


@register_model_architecture("rnnsearch", "rnnsearch_iwslt_de_en_deep")
def rnnsearch_iwslt_de_en_deep(args):
    """Baseline-RNN-deep (Table 5), the other size-matched control: 3 layers.

    The paper goes from 2 to 3 layers and reports 29M parameters.  With our counting 3 layers of
    256 units are 26.1M, 7 % below MC-RNN-3's 28.2M, so the layers are also widened to 296 units
    (28.25M, within 0.1 %; pinned by a test).  ``--encoder-hidden-size 256 --decoder-hidden-size
    256`` is the paper's literal width."""
    set_defaults(args, encoder_layers=3, decoder_layers=3, encoder_hidden_size=296, decoder_hidden_size=296)
    rnnsearch_iwslt_de_en(args)


@register_model_architecture("rnnsearch", "rnnsearch_gigaword")
def rnnsearch_gigaword(args):
    """Baseline-RNN, Gigaword summarisation (Table 3): 4-layer LSTM, 256/256."""
    fill_defaults(args, RNNSearchConfig, cell="lstm", encoder_layers=4, decoder_layers=4,
                  encoder_embed_dim=256, decoder_embed_dim=256, encoder_hidden_size=256,
                  decoder_hidden_size=256, dropout=0.2)
