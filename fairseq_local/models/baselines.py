"""Every baseline the papers compare against, as named architectures of existing models.

**DPN-S2S (Tables 1-2)**: the wider/deeper CNN and SAN baselines, archs of fairseq's ``fconv`` and
``transformer`` models (``dpn_baseline_*``).

**LatticeNMT (Table 1)**: RNNSearch with LatticeNMT's sizes and decoder, archs of the shared
``rnnsearch`` model: ``rnnsearch_zh_word`` (over one segmentation) and ``rnnsearch_zh_char`` (over
characters).  Under ``--task lattice_translation`` they read ``src_tokens`` = the lattice's primary
path, so train them on chain lattices of one segmenter (or of ``char``) built by
scripts/build_lattices.py.

**Recurrent language models:**

**Zaremba, Sutskever and Vinyals (2014), "Recurrent Neural Network Regularization"**, the PTB
baselines of the parallel-cells paper (Tables 1-2: "LSTM-1500h", and the 650-unit model of its
Section 4) and the regularised-LSTM recipe it follows:

* ``zaremba_lstm_lm_medium``: 2 layers x 650 LSTM units, 650-d embeddings, dropout 0.5 on the
  non-recurrent connections, weights uniform in [-0.05, 0.05];
* ``zaremba_lstm_lm_large``: 2 layers x 1500 units, 1500-d embeddings, dropout 0.65, [-0.04, 0.04].

Zaremba's models do not tie the input and output embeddings (tying came later, Inan et al. and
Press and Wolf, 2017), so neither do these.  With a 10k vocabulary they have 19.78M and 66.02M
parameters (the 20M / 66M that Merity et al. 2018, Table 1, list for them); the exact formula is
pinned by tests/test_baselines.py.  Both are the parallel-cell LM with one cell per layer
(``parallel_lstm_lm``, ``--wide 1``, i.e. a plain LSTM layer with one bias vector per gate; Zaremba's
Torch LSTM has two, i_2h and h_2h, 4 x 650 more parameters per layer), because Zaremba's
training carries the final state of one batch into the next (``--task stateful_language_modeling``).
fairseq's own ``lstm_lm`` cannot: its decoder takes no carried state and starts every block from
zeros, so archs on it would not be Zaremba's training regime.

**genCNN (Wang et al., ACL 2015), Tables 2-3, rows "RNN" and "LSTM"**:

* ``wang_gencnn_rnn_lm``: "the implementation of RNN-based language model [rnnlm.org] with hidden size
  600" -- one tanh RNN layer of 600 units, 600-d embeddings, untied.  Mikolov's toolkit feeds the
  one-hot word straight into a sigmoid hidden layer (its V x 600 input matrix is our embedding; we
  add the 600 x 600 input projection of a standard cell and use tanh) and factorises the softmax
  by word classes; fairseq's full softmax is used here.
* ``wang_gencnn_lstm_lm``: GroundHog's LSTM, whose "depth and word-embedding dimension" the paper tuned
  without reporting them.  We choose one layer of 600 units with 600-d embeddings, the RNN row's
  width, so that the two rows differ in the cell only.

The arch names start with the first author's, as ``zaremba_*`` do.  The paper's PTB numbers for
these rows are quoted from earlier work (Table 2's caption) and its FBIS rows (Table 3, 40k
vocabulary) give no sizes beyond the above.  The paper mentions no dropout for either, so both rows
have none; configs/baselines/ trains them with Zaremba's small-model recipe.
"""
from fairseq.models import register_model_architecture
from fairseq.models.fconv import base_architecture as fconv_base_architecture
from fairseq.models.transformer import DEFAULT_MIN_PARAMS_TO_WRAP, base_architecture as transformer_base_architecture

from fairseq_local.models.arch_defaults import fill_defaults, register_arch, set_defaults
from fairseq_local.models.lattice_rnnsearch import PAPER
from fairseq_local.models.parallel_lstm_lm import ParallelLSTMLMConfig
from fairseq_local.models.rnnsearch import RNNSearchConfig

# name -> (layers, units = embedding size, dropout, init scale)
ZAREMBA = {"medium": (2, 650, 0.5, 0.05), "large": (2, 1500, 0.65, 0.04)}
GENCNN_WIDTH = 600


def _register_zaremba(size):
    layers, units, dropout, init_scale = ZAREMBA[size]
    return register_arch("parallel_lstm_lm", f"zaremba_lstm_lm_{size}",
                         f"Zaremba et al. 2014, {size}: {layers} layers x {units} LSTM units, dropout {dropout}.",
                         config=ParallelLSTMLMConfig, wide=1, cell_type="lstm", decoder_layers=layers,
                         decoder_hidden_size=units, decoder_embed_dim=units, dropout=dropout,
                         init_scale=init_scale, share_decoder_input_output_embed=False)


for _size in ZAREMBA:
    _register_zaremba(_size)


@register_model_architecture("parallel_lstm_lm", "wang_gencnn_rnn_lm")
def wang_gencnn_rnn_lm(args):
    """genCNN Tables 2-3, row RNN: one tanh RNN layer of 600 units (rnnlm's hidden size 600)."""
    fill_defaults(args, ParallelLSTMLMConfig, wide=1, cell_type="rnn", decoder_layers=1,
                  decoder_hidden_size=GENCNN_WIDTH, decoder_embed_dim=GENCNN_WIDTH, dropout=0.0,
                  init_scale=0.1, share_decoder_input_output_embed=False)


@register_model_architecture("parallel_lstm_lm", "wang_gencnn_lstm_lm")
def wang_gencnn_lstm_lm(args):
    """genCNN Tables 2-3, row LSTM: one LSTM layer of 600 units (size not given by the paper)."""
    fill_defaults(args, ParallelLSTMLMConfig, wide=1, cell_type="lstm", decoder_layers=1,
                  decoder_hidden_size=GENCNN_WIDTH, decoder_embed_dim=GENCNN_WIDTH, dropout=0.0,
                  init_scale=0.1, share_decoder_input_output_embed=False)


# ------------------------------------------------------------------------------------------------
# DPN-S2S Tables 1-2 baselines as fairseq fconv / transformer archs (Section 4.2)
@register_model_architecture("fconv", "dpn_baseline_wider_cnn_iwslt")
def dpn_baseline_wider_cnn_iwslt(args):
    """Table 1 'Wider CNN': ConvS2S with 4 layers of 512 units.

    Every DPN baseline has learned position tables of 1024 entries (fairseq's translation limit,
    which ``fairseq-train`` also gives the model; under Hydra the model's own keys need it)."""
    set_defaults(args, encoder_embed_dim=256, decoder_embed_dim=256, decoder_out_embed_dim=256, dropout=0.1,
                 encoder_layers="[(512, 3)] * 4", decoder_layers="[(512, 3)] * 4",
                 max_source_positions=1024, max_target_positions=1024)
    fconv_base_architecture(args)


@register_model_architecture("fconv", "dpn_baseline_deeper_cnn_iwslt")
def dpn_baseline_deeper_cnn_iwslt(args):
    """Table 1 'Deeper CNN': ConvS2S with 8 layers of 256 units."""
    set_defaults(args, encoder_layers="[(256, 3)] * 8", decoder_layers="[(256, 3)] * 8")
    dpn_baseline_wider_cnn_iwslt(args)


@register_model_architecture("fconv", "dpn_baseline_cnn_nist")
def dpn_baseline_cnn_nist(args):
    """Table 2 'CNN': ConvS2S with 12 layers of 512 units, dropout 0.2."""
    set_defaults(args, dropout=0.2, encoder_layers="[(512, 3)] * 12", decoder_layers="[(512, 3)] * 12")
    dpn_baseline_wider_cnn_iwslt(args)


@register_model_architecture("transformer", "dpn_baseline_wider_san_iwslt")
def dpn_baseline_wider_san_iwslt(args):
    """Table 1 'Wider SAN': Transformer with 2 layers of 512 (filter 2048, 8 heads); learned positions,
    which reproduce Table 1's parameter counts (27.08M / 13.56M vs 27.06M / 13.54M)."""
    set_defaults(args, encoder_embed_dim=512, decoder_embed_dim=512, encoder_ffn_embed_dim=2048,
                 decoder_ffn_embed_dim=2048, encoder_attention_heads=8, decoder_attention_heads=8,
                 encoder_layers=2, decoder_layers=2, dropout=0.1, encoder_learned_pos=True, decoder_learned_pos=True,
                 max_source_positions=1024, max_target_positions=1024)
    # fairseq's transformer sets this FSDP option on its config while building; under Hydra the
    # model's config is closed to new keys, so the arch names it (fairseq's default)
    set_defaults(args, min_params_to_wrap=DEFAULT_MIN_PARAMS_TO_WRAP)
    transformer_base_architecture(args)


@register_model_architecture("transformer", "dpn_baseline_deeper_san_iwslt")
def dpn_baseline_deeper_san_iwslt(args):
    """Table 1 'Deeper SAN': Transformer with 4 layers of 256 (filter 1024, 4 heads)."""
    set_defaults(args, encoder_embed_dim=256, decoder_embed_dim=256, encoder_ffn_embed_dim=1024,
                 decoder_ffn_embed_dim=1024, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_layers=4, decoder_layers=4)
    dpn_baseline_wider_san_iwslt(args)


@register_model_architecture("transformer", "dpn_baseline_san_nist")
def dpn_baseline_san_nist(args):
    """Table 2 'SAN': Transformer with 6 layers of 512, filter 2048, dropout 0.2."""
    set_defaults(args, encoder_layers=6, decoder_layers=6, dropout=0.2)
    dpn_baseline_wider_san_iwslt(args)


# ------------------------------------------------------------------------------------------------
# LatticeNMT Table 1 RNNSearch baselines (same sizes and decoder as LatticeNMT)
@register_model_architecture("rnnsearch", "rnnsearch_zh_word")
def rnnsearch_zh_word(args):
    """Table 1 RNNSearch on one segmentation (CTB/PKU/MSR rows): same sizes and decoder as LatticeNMT."""
    fill_defaults(args, RNNSearchConfig, **PAPER)


@register_model_architecture("rnnsearch", "rnnsearch_zh_char")
def rnnsearch_zh_char(args):
    """Table 1 character-level RNNSearch (Char row): the same network over character chains."""
    fill_defaults(args, RNNSearchConfig, **PAPER)
