"""LatticeNMT (Su et al., AAAI 2017): word-lattice GRU encoder + RNNSearch attentional GRU decoder.

``--arch lattice_{swl,dwl}_{pooling,gating}`` (and ``lattice_rnnsearch`` = DWL + gating) are the four LatticeNMT rows of Table 1 (embeddings
320, hidden 512; train with RMSprop lr 5e-4, batch 80, clip 1.0: see configs/lattice/).  The
encoder is :class:`fairseq_local.modules.lattice_gru.BiLatticeGRU` (Eq. 10-21, batched over all
edges of a batch at each character position); the decoder is the shared
:class:`~fairseq_local.modules.recurrent_seq2seq.RecurrentAttentionDecoder` with GRU layers,
initialised with tanh(W [f(N); g(0)]) and attending over the per-segment annotations.

The RNNSearch baselines with the same decoder (``rnnsearch_zh_word``, ``rnnsearch_zh_char``) are
in :mod:`fairseq_local.models.baselines`.
"""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import FairseqEncoder, FairseqEncoderDecoderModel, register_model
from fairseq.modules import FairseqDropout
from fairseq.tasks import TASK_REGISTRY, FairseqTask

from fairseq_local.models.rnnsearch import RNNSearchConfig  # registers ``rnnsearch`` before our archs
from fairseq_local.modules.fast_path import apply_impl_config
from fairseq_local.modules.lattice_gru import COMPOSITIONS, VARIANTS, BiLatticeGRU
from fairseq_local.models.arch_defaults import fill_defaults, register_arch
from fairseq_local.modules.recurrent_seq2seq import Embedding, RecurrentAttentionDecoder, RecurrentEncoder
from fairseq_local.config_checks import check_choice, check_sizes
from fairseq_local_core.errors import ConfigError
from fairseq_local.data.lattice_dataset import LatticeBatch
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer


@dataclass
class LatticeRNNSearchConfig(RNNSearchConfig):
    """RNNSearch's options with the paper's sizes as defaults (``--arch lattice_rnnsearch`` = DWL + gating)."""

    cell: str = field(default="gru", metadata={"help": "decoder cell (GRU, as in the paper)"})
    dropout: float = field(default=0.0, metadata={"help": "dropout probability (the paper uses none)"})
    encoder_embed_dim: int = field(default=320, metadata={"help": "source word embedding dimension"})
    encoder_hidden_size: int = field(default=512, metadata={"help": "lattice GRU hidden size (per direction)"})
    encoder_layers: int = field(default=1, metadata={"help": "must be 1 (one bidirectional lattice layer)"})
    decoder_embed_dim: int = field(default=320, metadata={"help": "target word embedding dimension"})
    decoder_hidden_size: int = field(default=512, metadata={"help": "decoder GRU hidden size"})
    decoder_layers: int = field(default=1, metadata={"help": "number of decoder GRU layers"})
    lattice_variant: str = field(default="dwl", metadata={"help": "swl (Eq. 10-15) or dwl (Eq. 16-20)"})
    lattice_composition: str = field(default="gating", metadata={"help": "pooling or gating (Eq. 21)"})


class LatticeGRUEncoder(FairseqEncoder):
    """Bidirectional SWL/DWL-GRU over the lattice tensors of the lattice_translation task."""

    def __init__(self, dictionary, embed_tokens, hidden_size, variant, composition,
                 dropout_in=0.0, dropout_out=0.0, max_positions=int(1e5)):
        super().__init__(dictionary)
        self.embed_tokens = embed_tokens
        self.lattice = BiLatticeGRU(embed_tokens.embedding_dim, hidden_size, variant, composition)
        self.dropout_in_module = FairseqDropout(dropout_in, module_name=self.__class__.__name__)
        self.dropout_out_module = FairseqDropout(dropout_out, module_name=self.__class__.__name__)
        self.output_dim = 2 * hidden_size
        self.max_source_positions = max_positions

    def forward(self, src_tokens, src_lengths=None, lattice: Optional[LatticeBatch] = None, return_extras=False):
        if lattice is None:
            raise ValueError("the lattice encoder needs --task lattice_translation (missing the lattice batch)")
        anno, pad, final, extras = self.lattice(
            self.embed_tokens, *LatticeBatch.of(lattice), embed_dropout=self.dropout_in_module,
            record_gates=return_extras)
        out = {
            "encoder_out": [self.dropout_out_module(anno)],
            "encoder_padding_mask": [pad],
            "encoder_final_hidden": [final],
            "src_tokens": [],
            "src_lengths": [],
        }
        if return_extras:
            out["lattice_extras"] = extras
        return out

    reorder_encoder_out = RecurrentEncoder.reorder_encoder_out

    def max_positions(self):
        return self.max_source_positions


@register_model("lattice_rnnsearch", dataclass=LatticeRNNSearchConfig)
class LatticeRNNSearchModel(FairseqEncoderDecoderModel):
    @classmethod
    def build_model(cls, cfg, task):
        fill_defaults(cfg, LatticeRNNSearchConfig)
        check_sizes(cfg, LatticeRNNSearchConfig)
        check_choice("lattice_variant", cfg.lattice_variant, VARIANTS)
        check_choice("lattice_composition", cfg.lattice_composition, COMPOSITIONS)
        if cfg.encoder_layers != 1 or cfg.encoder_unidirectional or cfg.encoder_output_dim:
            raise ConfigError("--encoder-layers must be 1, without --encoder-unidirectional or --encoder-output-dim: "
                              "the lattice encoder is one bidirectional layer")
        if cfg.cell != "gru" or cfg.share_all_embeddings:
            raise ConfigError(f"--cell {cfg.cell!r}{' --share-all-embeddings' if cfg.share_all_embeddings else ''}: "
                              "lattice_rnnsearch uses GRU decoder layers (--cell gru) and separate source/target "
                              "embeddings (no --share-all-embeddings)")
        # a fairseq task of another kind (a duck-typed task carrying dictionaries, as the harness's
        # parameter count passes, is not refused); the task class is looked up in fairseq's registry,
        # as fairseq builds it (tasks sit above the models)
        if isinstance(task, FairseqTask) and not isinstance(task, TASK_REGISTRY["lattice_translation"]):
            arch = cfg.get("_name", None) if hasattr(cfg, "get") else getattr(cfg, "arch", None)
            raise ConfigError(f"--arch {arch or 'lattice_rnnsearch'} reads word lattices: add --task "
                              "lattice_translation")
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary

        def opt(v):
            return cfg.dropout if v is None else v

        encoder = LatticeGRUEncoder(
            src_dict, Embedding(len(src_dict), cfg.encoder_embed_dim, src_dict.pad()), cfg.encoder_hidden_size,
            cfg.lattice_variant, cfg.lattice_composition, dropout_in=opt(cfg.encoder_dropout_in),
            dropout_out=opt(cfg.encoder_dropout_out), max_positions=cfg.max_source_positions)
        decoder = RecurrentAttentionDecoder(
            tgt_dict, Embedding(len(tgt_dict), cfg.decoder_embed_dim, tgt_dict.pad()),
            lambda i, inp, hid: TorchRNNLayer("gru", inp, hid), cfg.decoder_layers, cfg.decoder_hidden_size,
            encoder.output_dim, attention_dim=cfg.attention_dim, input_feeding=not cfg.no_input_feeding,
            init_from_encoder=not cfg.no_decoder_init, dropout_in=opt(cfg.decoder_dropout_in),
            dropout_out=opt(cfg.decoder_dropout_out), out_embed_dim=cfg.decoder_out_embed_dim,
            share_input_output_embed=cfg.share_decoder_input_output_embed,
            max_positions=cfg.max_target_positions)
        return apply_impl_config(cls(encoder, decoder), cfg)


# Su et al. 2017, Setup: embeddings 320, hidden 512, one bidirectional GRU encoder layer and a GRU
# decoder as in Bahdanau et al. (no dropout); the readout layer has the embedding size.
PAPER = dict(cell="gru", encoder_layers=1, decoder_layers=1, encoder_embed_dim=320, decoder_embed_dim=320,
             encoder_hidden_size=512, decoder_hidden_size=512, dropout=0.0)


def _lattice_arch(name, variant, composition, doc):
    return register_arch("lattice_rnnsearch", name, doc, config=LatticeRNNSearchConfig, lattice_variant=variant,
                         lattice_composition=composition, **PAPER)


lattice_swl_pooling = _lattice_arch("lattice_swl_pooling", "swl", "pooling", "Table 1: SWL-GRU + Pooling.")
lattice_swl_gating = _lattice_arch("lattice_swl_gating", "swl", "gating", "Table 1: SWL-GRU + Gating.")
lattice_dwl_pooling = _lattice_arch("lattice_dwl_pooling", "dwl", "pooling", "Table 1: DWL-GRU + Pooling.")
lattice_dwl_gating = _lattice_arch("lattice_dwl_gating", "dwl", "gating", "Table 1: DWL-GRU + Gating (best).")
