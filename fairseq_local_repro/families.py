"""The registry of ``scripts/reproduce.py``: each paper's central comparison as a *family* of
systems, its data, its metric, its scales and the claim the comparison tests.

A family is a :class:`~fairseq_local_repro.family_types.Family`; its systems are
:class:`~fairseq_local_repro.family_types.System` rows.  Each system names its paper
row, ``configs/<family>/<row>.yaml``: the row's arch holds its sizes, the row's YAML its training
schedule (:mod:`fairseq_local_repro.schedule` turns both into fairseq-train options).  At
``--scale paper`` a system trains its row as the YAML gives it (:func:`paper_scale` reads the values the
results record from the family's reference row).  At ``--scale cpu`` the harness shrinks model and
schedule, and says how on top of the row's YAML: the scale's values (:func:`cpu_scale`: width, batch,
patience, epochs, dropout, and the learning rate and clipping where they differ from the row's), the
family's table of overrides of the row's other sections (``Scale.overrides``: another optimizer or
learning-rate scheduler, the prepared corpus's task) and each system's CPU model (``System.arch``,
``System.options`` and its width templates).  Widths at ``--scale cpu`` follow one rule per family
(``Scale.width``): every system gets the same embedding and hidden width, except a system with
``size_match`` set, whose hidden width is the one that gives it the parameter count of the named
system at that width (the size-matched control of the paper).  The first system flagged ``baseline``
is what every other system is compared against (``Family.comparisons`` may name other pairs).
``Family.planned`` lists the comparisons still to train (:class:`RunSet`: systems, seeds, setting and
the one command that trains and publishes them); the results page shows each run of them that is not
yet published.  The standard library and PyYAML only, so that ``reproduce.py`` can report a bad family
name without importing fairseq.
"""
from typing import Dict, List, Optional

from fairseq_local_repro.family_types import (ADAM_HALVING, CORPUS_TASK, DPN_DEEPER_CNN_WIDTHS, DPN_DEEPER_SAN_WIDTHS,
                                              DPN_WIDER_CNN_WIDTHS, DPN_WIDER_SAN_WIDTHS, DPN_WIDTHS, RNN_LM_WIDTHS,
                                              TOKEN_BATCHES, Family, RunSet, System, cpu_scale, paper_scale,
                                              sweep_runsets)
from fairseq_local_repro.schedule import UNSET


# The MC-RNN paper's schedule (Xu et al., AAAI 2019, Section 4.1) is the rows' (configs/mc_rnn/table2_*.yaml,
# table5_*.yaml): Adam 1e-3, clip 1.0, learning rate halved whenever the dev loss stops improving,
# early stop after 5 stale validations, max-tokens 4000; the CPU scale keeps the optimizer.
MC_RNN_ROW = "configs/mc_rnn/table2_mc_rnn_3.yaml"
MULTI30K_CPU = ("Multi30k De-En: first 28,000 training pairs = train, last 1,000 training pairs = dev "
                "(early stopping, learning-rate schedule), the official 1,014-pair validation set = test, dev and "
                "test cleaned of every pair whose source occurs in the training part; "
                "Moses-tokenized, lowercased, joint subword-nmt BPE 8000 (scripts/preprocess.sh)")

FAMILIES: Dict[str, Family] = {
    "mc_rnn": Family(
        name="mc_rnn",
        kind="translation",
        paper="Xu et al., AAAI 2019, Multi-channel encoder-decoder RNNs (MC-RNN), Tables 2 and 5",
        claim="MC-RNN-3 beats Baseline-RNN (+1.2 BLEU on IWSLT14 De-En, Table 2) and the size-matched "
              "Baseline-RNN-large (Table 5): the gain is not just extra parameters",
        systems=(
            System("mc_rnn_3", "MC-RNN-3", MC_RNN_ROW),
            System("baseline", "Baseline-RNN", "configs/mc_rnn/table2_baseline_rnn.yaml", baseline=True),
            System("baseline_large", "Baseline-RNN-large", "configs/mc_rnn/table5_baseline_rnn_large.yaml",
                   size_match="mc_rnn_3"),
            # Table 5's other control: 3 layers instead of 2, "almost the same" size as MC-RNN-3 (29M
            # each): its hidden width is the one that matches MC-RNN-3's parameter count
            System("baseline_deep", "Baseline-RNN-deep", "configs/mc_rnn/table5_baseline_rnn_deep.yaml",
                   size_match="mc_rnn_3"),
        ),
        scales={
            "cpu": cpu_scale(
                MC_RNN_ROW, width=128, max_tokens=1000, patience=2, max_epoch=40, dropout=0.2,
                overrides={"task": CORPUS_TASK}, train_pairs=10000,
                notes="training data: the first 10,000 Multi30k pairs (one thread per system trains MC-RNN-3 on "
                      "all 28,000 at about 6.5 min per epoch on the shared 2-core machine, too slow to converge "
                      "within the 1.5 h budget); widths 256 -> 128 (embeddings and hidden units, every system); "
                      "Baseline-RNN-large's hidden width is the one that matches MC-RNN-3's parameter count at "
                      "that width; batches of 1,000 instead of 4,000 tokens (about 180 updates per epoch: "
                      "4,000-token batches give 46 updates per epoch on 10,000 pairs, and all three systems "
                      "were still improving at a 30-epoch cap); early-stopping patience 5 -> 2 validations; "
                      "max-epoch cap 50 -> 40"),
            "paper": paper_scale(MC_RNN_ROW),
        },
        data_cpu=MULTI30K_CPU,
        data_paper="IWSLT14 De-En (scripts/recipes/prepare_iwslt14.sh: Moses-tokenized, lowercased, joint "
                   "subword-nmt BPE 25000; its valid = dev, its test = test)",
        # Tables 2 and 5: MC-RNN-3 against the baseline and against each size-matched control
        comparisons=(("mc_rnn_3", "baseline"), ("mc_rnn_3", "baseline_large"), ("mc_rnn_3", "baseline_deep")),
        # Figure 4 (BLEU by source length): Multi30k's test sources have 11 words at the median, 16 at
        # the 90th percentile, so about a quarter of the sentences in each of the first four buckets
        length_buckets=(8, 11, 14, 17),
        planned=(
            RunSet("clean_split", 3, "MC-RNN-3 against Baseline-RNN and both size-matched controls of Table 5 "
                                     "(Baseline-RNN-large, Baseline-RNN-deep), three seeds each, on the clean split"),
            RunSet("dropout_0.5", 3, "MC-RNN-3 at the baseline's dropout grid point 0.5 (0.2: the family's setting, "
                                     "0.4: dropout_0.4), three seeds each",
                   systems=("mc_rnn_3",), options=("--max-epoch", "60", "--dropout", "0.5")),
        ),
    ),
}

# The language-model families share one corpus and one schedule at --scale cpu: the English side
# of Multi30k (split as MULTI30K_CPU), one sentence per sample (--sample-break-mode eos), Adam 1e-3,
# clip 1, learning rate halved on a dev plateau, early stopping: the same optimizer for every
# system, so that the comparison is of the architectures.
MULTI30K_EN_LM = ("English side of Multi30k as a language-model corpus: first 28,000 training captions = train, "
                  "last 1,000 = dev, the official 1,014-caption validation set = test, dev and test cleaned of every "
                  "caption that occurs in the training part; Moses-tokenized, lowercased, "
                  "word-level (no BPE), one caption per sample")
PTB = "Penn Treebank (Mikolov's version, scripts/recipes/prepare_ptb.sh), one sentence per sample"
LM_SCHEDULE_NOTE = ("Adam 1e-3 (clip 1.0) for every system instead of each paper's SGD/AdaGrad schedule, learning rate "
                    "halved on a dev plateau, early-stopping patience 2, max-epoch cap {cap}")

# Parallel cells: Table 2's archs (parallel_lstm_lm_1950h_wide{1,3,5}) read the layer input in slices
# (each of the wide cells reads its own 1/wide of it, Section 2.2's parameter count).  At --scale cpu
# every system is the base arch parallel_lstm_lm at the CPU widths, with the slice reading and an
# init of +-0.1: the paper's uniform +-0.04 goes with its SGD at learning rate 1; under Adam 1e-3 it
# leaves the network near context-free for hundreds of updates (docs/results.md, parallel_cells), so
# every system starts from +-0.1, the init of fairseq's own lstm_lm.
PARALLEL_CELLS_OPTIONS = ("--cell-input", "slice", "--init-scale", "0.1")
PARALLEL_CELLS_ROW = "configs/parallel_cells/table2_ptb_wide{}.yaml"
# Section 4.1 masks each cell of the converged wide 3 and compares perplexities per group of similar
# words, all "from about top 100 most frequency word set" (Figure 5 names copular verbs).  These are
# the groups of the corpus's 100 most frequent words (Multi30k's English captions).
MULTI30K_EN_WORD_GROUPS = (
    ("copular verbs", ("is", "are")),
    ("prepositions", ("in", "on", "of", "with", "at", "by", "for", "from", "into", "through", "over", "near",
                      "behind", "around")),
    ("determiners and numerals", ("a", "the", "an", "two", "one", "three", "some", "another")),
    ("colours", ("white", "black", "blue", "red", "green", "yellow", "brown", "orange", "pink")),
    ("people", ("man", "woman", "people", "men", "girl", "boy", "women", "child", "person", "children", "girls")),
    ("-ing verbs", ("wearing", "sitting", "standing", "playing", "walking", "holding", "looking", "running",
                    "riding", "jumping")),
)

FAMILIES["parallel_cells"] = Family(
    name="parallel_cells",
    kind="lm",
    paper="Parallel-cell LSTM language model, Table 2 (2 layers x 1950 units, PTB)",
    claim="splitting each layer's hidden units into wide = 3 or 5 parallel cells at the same total hidden size "
          "lowers perplexity against one LSTM (wide = 1)",
    systems=(
        System("wide1", "wide 1 (LSTM)", PARALLEL_CELLS_ROW.format(1), "parallel_lstm_lm",
               ("--wide", "1") + PARALLEL_CELLS_OPTIONS, baseline=True, widths=RNN_LM_WIDTHS),
        System("wide3", "wide 3", PARALLEL_CELLS_ROW.format(3), "parallel_lstm_lm",
               ("--wide", "3") + PARALLEL_CELLS_OPTIONS, widths=RNN_LM_WIDTHS, masking_groups=MULTI30K_EN_WORD_GROUPS),
        System("wide5", "wide 5", PARALLEL_CELLS_ROW.format(5), "parallel_lstm_lm",
               ("--wide", "5") + PARALLEL_CELLS_OPTIONS, widths=RNN_LM_WIDTHS),
        # the reading of Figure 3's drawing (every cell reads the whole layer input; more parameters):
        # the choice the paper leaves open, checked as its own row (Table 2's wide 3 with full input)
        System("wide3_full", "wide 3, full input", PARALLEL_CELLS_ROW.format(3), "parallel_lstm_lm",
               ("--wide", "3", "--cell-input", "full", "--init-scale", "0.1"), paper_options=("--cell-input", "full"),
               widths=RNN_LM_WIDTHS),
    ),
    scales={
        "cpu": cpu_scale(
            PARALLEL_CELLS_ROW.format(1), width=240, max_tokens=2000, patience=2, max_epoch=30, dropout=0.3,
            lr=1e-3, clip_norm=1.0, overrides={**ADAM_HALVING, **TOKEN_BATCHES},
            notes="2 layers x 240 units (paper 1950; 240 splits into 3 and 5 equal cells, each reading its "
                  "own slice of the layer input as in Table 2's archs; the row 'wide 3, full input' lets "
                  "every cell read the whole input, as Figure 3 draws it), dropout 0.65 -> 0.3; init "
                  "+-0.04 -> +-0.1 (the paper's +-0.04 goes with its SGD at learning rate 1); "
                  + LM_SCHEDULE_NOTE.format(cap=30)),
        "paper": paper_scale(PARALLEL_CELLS_ROW.format(1)),
    },
    data_cpu=MULTI30K_EN_LM,
    data_paper=PTB,
    planned=(RunSet("clean_split", 5, "Table 2's slice reading (wide 3, wide 5) against wide 1, the headline, and the "
                                      "full-input wide 3 as a labelled variant, five seeds each, on the clean split"),),
)

# genCNN's sweep: each system gets its own learning rate and dropout, chosen on the dev loss of one
# seed per grid point (never on the test set); the family's setting (Adam 1e-3, no dropout) is one point.
GENCNN_SWEEP = {"lr": (3e-4, 1e-3, 3e-3), "dropout": (0.0, 0.3)}


# The only running text at hand (--running-text): the PTB and WikiText-2 validation files of
# ../shared/data/lm/, each cut into contiguous parts (prepare.split_running_text).
RUNNING_TEXT_SPLIT = ("the PTB and WikiText-2 validation files, each cut into contiguous parts: its first 80 % of "
                      "lines = train, the next 10 % = dev, the last 10 % = test, blank lines removed and dev and test "
                      "cleaned of every line that also occurs in train; lowercased, no BPE, 256-token blocks that "
                      "run across sentence and article boundaries")

GENCNN_ROW = "configs/gencnn/table2_ptb_gencnn.yaml"
FAMILIES["gencnn"] = Family(
    name="gencnn",
    kind="lm",
    paper="Wang et al., genCNN: a convolutional architecture for word sequence prediction, Table 2 (PTB)",
    claim="genCNN reaches a lower perplexity than an LSTM language model (and a plain convolutional LM) "
          "of about its size",
    systems=(
        System("gencnn", "genCNN", GENCNN_ROW, widths=()),
        # the size-matched controls the paper has no row for: fairseq's lstm_lm and fconv_lm at genCNN's
        # 400-unit top layer and the hidden width that matches its parameter count, on genCNN's schedule
        System("lstm_lm", "LSTM LM (size-matched)", GENCNN_ROW, "lstm_lm", own_model=True, baseline=True,
               size_match="gencnn",
               widths=("--decoder-embed-dim", "{w}", "--decoder-hidden-size", "{h}", "--decoder-out-embed-dim", "{w}")),
        System("fconv_lm", "fconv_lm (size-matched)", GENCNN_ROW, "fconv_lm", own_model=True, size_match="gencnn",
               widths=("--decoder-embed-dim", "{w}", "--decoder-layers", "[({h}, 3)] * 4",
                       "--decoder-out-embed-dim", "{w}")),
    ),
    scales={
        "cpu": cpu_scale(
            GENCNN_ROW, width=400, max_tokens=2000, patience=2, max_epoch=20, dropout=0.0, lr=1e-3,
            clip_norm=1.0, overrides={**ADAM_HALVING, **TOKEN_BATCHES},
            notes="genCNN is the paper's configuration (gencnn_paper); lstm_lm and fconv_lm take 400-d "
                  "embeddings and readout (genCNN's 400-unit top layer) and the hidden width that matches "
                  "genCNN's parameter count; no dropout (the paper uses none); "
                  + LM_SCHEDULE_NOTE.format(cap=20)),
        "paper": paper_scale(GENCNN_ROW, width=400,
                             notes="lstm_lm and fconv_lm at genCNN's 400-unit top layer, size-matched to genCNN"),
    },
    data_cpu=MULTI30K_EN_LM,
    data_paper=PTB,
    # the claim is against the LSTM and against the plain convolutional LM
    comparisons=(("gencnn", "lstm_lm"), ("fconv_lm", "lstm_lm"), ("gencnn", "fconv_lm")),
    sweep=GENCNN_SWEEP,
    planned=(*sweep_runsets(GENCNN_SWEEP, "every system at one point of the learning-rate/dropout grid, one seed: "
                                          "the dev loss that picks each system's setting"),
             RunSet("tuned", 3, "each system at the grid point of its lowest dev loss (--tuned-on-dev), three seeds "
                                "each", options=("--tuned-on-dev",)),
             RunSet("streamed", 3, "running text streamed across sentence boundaries, so that genCNN's βCNN sees a "
                                   "history (" + RUNNING_TEXT_SPLIT + "), three seeds each",
                    options=("--running-text",))),
)

# DPN-S2S (Song et al., COLING 2018), Table 4's M9 against its one-path ablations M1 and M5, as
# configs/dpn_s2s/table4_m{9,1,5}.yaml: the registered archs dpn_s2s_m9/m1/m5 (IWSLT14 sizes: 4 GLU
# convolutions of 256, kernel 3; 2 SAN layers 256/1024, 4 heads; 256-d embeddings; tied output
# embeddings; dropout 0.1).  M9 is the reference row: M1 and M5 are each compared against it.
DPN_SCHEDULE_NOTE = ("Adam 1e-3 (clip 1.0), learning rate halved on a dev plateau, for every system, instead of the "
                     "paper's NAG (lr 0.25, momentum 0.99, clip 0.1) shrunk by 10 on a dev plateau")
DPN_ROW = "configs/dpn_s2s/table4_m9.yaml"
FAMILIES["dpn_s2s"] = Family(
    name="dpn_s2s",
    kind="translation",
    paper="Song et al., COLING 2018, Double path networks for sequence to sequence learning (DPN-S2S), Tables 4 and 5",
    claim="M9 (CNN and SAN paths in encoder and decoder) beats M1 (CNN paths only: 30.38 vs 31.99 BLEU on IWSLT14 "
          "De-En, Table 4) and M5 (SAN paths only: 30.63); Table 5: the decoder's alignments to the CNN encoder path "
          "have a higher entropy than those to the SAN encoder path.  M9 is the reference row (p-values of M1 and M5 "
          "are against M9)",
    systems=(
        System("m9", "M9 (DPN-S2S)", DPN_ROW, baseline=True, widths=DPN_WIDTHS, alignment_entropy=True),
        System("m1", "M1 (CNN only)", "configs/dpn_s2s/table4_m1.yaml", widths=DPN_WIDTHS),
        System("m5", "M5 (SAN only)", "configs/dpn_s2s/table4_m5.yaml", widths=DPN_WIDTHS),
        # Table 1's controls, each larger than M9 (the paper: 20.37M, 13.82M, 27.06M and 13.54M against
        # M9's 11.57M), at the same common width: the wider/deeper CNN-only (ConvS2S) and SAN-only
        # (Transformer) models of fairseq_local/models/baselines.py
        System("wider_cnn", "Wider CNN (4 x 2w)", "configs/dpn_s2s/table1_wider_cnn.yaml", widths=DPN_WIDER_CNN_WIDTHS),
        System("deeper_cnn", "Deeper CNN (8 x w)", "configs/dpn_s2s/table1_deeper_cnn.yaml",
               widths=DPN_DEEPER_CNN_WIDTHS),
        System("wider_san", "Wider SAN (2 x 2w)", "configs/dpn_s2s/table1_wider_san.yaml", widths=DPN_WIDER_SAN_WIDTHS),
        System("deeper_san", "Deeper SAN (4 x w)", "configs/dpn_s2s/table1_deeper_san.yaml",
               widths=DPN_DEEPER_SAN_WIDTHS),
    ),
    scales={
        "cpu": cpu_scale(
            DPN_ROW, width=128, max_tokens=4000, patience=2, max_epoch=30, dropout=0.1, lr=1e-3,
            clip_norm=1.0, overrides=ADAM_HALVING,
            notes="widths 256 -> 128 for every system (embeddings, CNN layers, SAN hidden size; SAN filter "
                  "1024 -> 512), depths, kernels, heads and the rest of the Table 4 configuration unchanged; "
                  "timed on 5 updates of the full 28,000 pairs (123 updates per epoch) at one thread: M9 "
                  "1.5 CPU-s per update (3.4 at width 256), M1 0.9, M5 1.0, i.e. about 3 min per epoch for M9 "
                  "and about an hour for the ~20 epochs it takes to converge; " + DPN_SCHEDULE_NOTE
                  + "; early-stopping patience 2 validations, max-epoch cap 30 (the rows: no early stopping, "
                    "200 epochs)"),
        "paper": paper_scale(DPN_ROW),
    },
    data_cpu=MULTI30K_CPU,
    data_paper="IWSLT14 De-En (scripts/recipes/prepare_iwslt14.sh: Moses-tokenized, lowercased, joint "
               "subword-nmt BPE 10000; its valid = dev, its test = test)",
    bpe_paper=10000,
    # Table 5: alignment entropy per (decoder path, encoder path), c = CNN, a = SAN
    reference={"alignment_entropy": {"cc": 2.208, "ac": 1.406, "ca": 1.886, "aa": 1.377}},
    planned=(RunSet("clean_split", 3, "M9 against its one-path ablations M1 and M5 (Table 4) and against Table 1's "
                                      "wider and deeper CNN-only and SAN-only controls, three seeds each, on the clean "
                                      "split"),),
)

# LatticeNMT (Su et al., AAAI 2017), Table 1: DWL-GRU + Gating and SWL-GRU + Gating against the
# word-level RNNSearch (one segmentation) and the character-level RNNSearch, same decoder and sizes
# (fairseq_local/models/lattice_rnnsearch.py).  Every system reads its own binarized source (lattices,
# jieba word chains, character chains: scripts/recipes/lattice_zh_en_small.sh) under --task
# lattice_translation, which batches every kind by source characters: with one seed the four systems
# see the same batches, and the English side (Moses-tokenized, cased, no BPE) is the same for all.
TATOEBA_ZH_EN_CPU = ("Tatoeba Zh-En (CC-BY 2.0 France, tatoeba.org; authors in the corpus's *.attribution files): "
                     "every 26th training pair = dev (1,000 pairs spread over the training file, which is ordered "
                     "by length), the other 25,655 = train (all within the paper's length filter: <= 70 characters, "
                     "<= 50 words), the official 1,000-pair validation set = test, dev and test cleaned of every "
                     "pair whose source (case-folded, whitespace collapsed) occurs in the training part; "
                     "English Moses-tokenized (cased, no BPE), Chinese as jieba+thulac+snownlp lattices (DWL/SWL), "
                     "jieba word chains (word level) or character chains (char level), word types seen >= 2 times "
                     "(scripts/recipes/lattice_zh_en_small.sh); case-insensitive BLEU, as in the paper")
LATTICE_SCHEDULE_NOTE = ("Adam 1e-3 (clip 1.0) with the learning rate halved on a dev plateau and early stopping on the "
                         "dev loss, for every system, instead of the paper's RMSprop (lr 5e-4, batch 80) stopped on "
                         "dev BLEU")
LATTICE_ROW = "configs/lattice/dwl_gating.yaml"
FAMILIES["lattice"] = Family(
    name="lattice",
    kind="translation",
    paper="Su et al., AAAI 2017, Lattice-based recurrent neural network encoders for neural machine translation, "
          "Table 1",
    claim="the word-lattice encoders beat RNNSearch on one segmentation and on characters (NIST Zh-En, average of "
          "MT05-08: DWL-GRU + Gating 32.95, SWL-GRU + Gating 32.79, word-level RNNSearch 31.35-31.78, character-level "
          "30.74 BLEU, Table 1); the word-level RNNSearch on the jieba segmentation (the lattice's primary path) is "
          "the baseline",
    systems=(
        System("dwl_gating", "DWL-GRU + Gating", LATTICE_ROW, data="lattice"),
        System("swl_gating", "SWL-GRU + Gating", "configs/lattice/swl_gating.yaml", data="lattice"),
        System("word", "RNNSearch (word, jieba)", "configs/lattice/rnnsearch_word.yaml", baseline=True, data="word"),
        System("char", "RNNSearch (char)", "configs/lattice/rnnsearch_char.yaml", data="char"),
        # the other two segmenters of the lattice, each as its own word-level baseline: the paper's
        # claim is against the best single segmentation
        System("word_thulac", "RNNSearch (word, thulac)", "configs/lattice/rnnsearch_word.yaml", data="word_thulac"),
        System("word_snownlp", "RNNSearch (word, snownlp)", "configs/lattice/rnnsearch_word.yaml", data="word_snownlp"),
    ),
    scales={
        "cpu": cpu_scale(
            LATTICE_ROW, width=256, max_tokens=2000, patience=2, max_epoch=30, dropout=0.2, lr=1e-3,
            overrides={**ADAM_HALVING, **TOKEN_BATCHES, "checkpoint.best_checkpoint_metric": "loss",
                  "checkpoint.maximize_best_checkpoint_metric": UNSET},
            notes="widths 320 / 512 -> 256 / 256 (embeddings / hidden units, every system), dropout 0 -> "
                  "0.2 (a 26k-pair corpus), batches of 2,000 source characters or target tokens (about 180 "
                  "pairs, 140 updates per epoch; the paper: 80 sentences); one thread per system: 60-70 s per "
                  "epoch and 16-21 min to early stopping (14-20 epochs) for each system; "
                  + LATTICE_SCHEDULE_NOTE + "; early-stopping patience 2 validations, max-epoch cap 30"),
    },
    data_cpu=TATOEBA_ZH_EN_CPU,
    task="lattice_translation",
    # the claim is against the best single segmentation and against characters, and DWL > SWL
    comparisons=(("dwl_gating", "word"), ("dwl_gating", "word_thulac"), ("dwl_gating", "word_snownlp"),
                 ("dwl_gating", "char"), ("swl_gating", "word"), ("swl_gating", "char"), ("dwl_gating", "swl_gating")),
    planned=(RunSet("clean_split", 5, "both lattice encoders against the word level of each segmenter and "
                                      "characters, five seeds each, on the clean split"),),
    unavailable={"paper": "the paper's NIST Zh-En data are LDC-licensed and not downloadable: prepare them with "
                          "scripts/recipes/prepare_nist_zhen.sh --mode lattice and train the Table 1 rows with "
                          "scripts/recipes/lattice_nist_zhen.sh"},
)

# Families the harness does not run yet: one clear line instead of a traceback.
PLANNED: Dict[str, str] = {}


def get_family(name: str) -> Family:
    """The registered family ``name``; ValueError with one line naming the known ones otherwise."""
    if name in FAMILIES:
        return FAMILIES[name]
    known = ", ".join(sorted(FAMILIES))
    if name in PLANNED:
        raise ValueError(f"family '{name}' ({PLANNED[name]}) is not implemented yet; implemented: {known}")
    raise ValueError(f"unknown family '{name}'; implemented: {known}")


def select_systems(family: Family, names: Optional[str]) -> List[System]:
    """The systems named in the comma-separated ``names`` (all when None), in registry order.
    A size-matched system needs the system it matches (its width is computed from it), and the
    baseline is always kept (the comparisons are against it)."""
    if not names:
        return list(family.systems)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = [s.name for s in family.systems]
    for n in wanted:
        if n not in known:
            raise ValueError(f"--systems: family '{family.name}' has no system '{n}' (it has {', '.join(known)})")
    return [s for s in family.systems if s.name in wanted or s.baseline]
