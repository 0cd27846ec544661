"""The types of the reproduction registry (:mod:`fairseq_local_repro.families`): a :class:`Family` of
:class:`System` rows, its :class:`Scale` s (:func:`paper_scale` reads one from a row's YAML,
:func:`cpu_scale` names what the CPU scale changes) and the comparisons still to train
(:class:`RunSet`), with the width templates and schedule overrides the families share.  The
standard library and PyYAML only.
"""
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from fairseq_local_repro.schedule import UNSET, load_row, row_value


# Width options as templates: {w} = the scale's common width, {h} = the hidden width (= {w}, or
# the size-matching width of a size-matched system), {f} = 4 {w} (a SAN filter), {w2} = 2 {w} and
# {f2} = 8 {w} (a "wider" control: twice the width, and its filter).
SEQ2SEQ_WIDTHS = ("--encoder-embed-dim", "{w}", "--decoder-embed-dim", "{w}",
                  "--encoder-hidden-size", "{h}", "--decoder-hidden-size", "{h}")
RNN_LM_WIDTHS = ("--decoder-embed-dim", "{w}", "--decoder-hidden-size", "{h}")
# DPN-S2S (and its one-path ablations): embeddings, CNN layers and SAN hidden size all {w}, SAN
# filter size {f} = 4 {w} (the paper's 256 / 1024).
DPN_WIDTHS = ("--encoder-embed-dim", "{w}", "--decoder-embed-dim", "{w}", "--encoder-conv-dim", "{w}",
              "--decoder-conv-dim", "{w}", "--encoder-ffn-embed-dim", "{f}", "--decoder-ffn-embed-dim", "{f}")
# DPN-S2S Table 1's controls (fairseq_local/models/baselines.py) at the same common width: the
# paper's 256 -> {w}, its 512 ("wider") -> {w2}, its 1024 / 2048 filters -> {f} / {f2}.
DPN_CNN_WIDTHS = ("--encoder-embed-dim", "{w}", "--decoder-embed-dim", "{w}", "--decoder-out-embed-dim", "{w}")
DPN_WIDER_CNN_WIDTHS = DPN_CNN_WIDTHS + ("--encoder-layers", "[({w2}, 3)] * 4", "--decoder-layers", "[({w2}, 3)] * 4")
DPN_DEEPER_CNN_WIDTHS = DPN_CNN_WIDTHS + ("--encoder-layers", "[({w}, 3)] * 8", "--decoder-layers", "[({w}, 3)] * 8")
DPN_WIDER_SAN_WIDTHS = ("--encoder-embed-dim", "{w2}", "--decoder-embed-dim", "{w2}", "--encoder-ffn-embed-dim", "{f2}",
                        "--decoder-ffn-embed-dim", "{f2}")
DPN_DEEPER_SAN_WIDTHS = ("--encoder-embed-dim", "{w}", "--decoder-embed-dim", "{w}", "--encoder-ffn-embed-dim", "{f}",
                         "--decoder-ffn-embed-dim", "{f}")


@dataclass(frozen=True)
class System:
    name: str                      # directory name and key in the JSON (e.g. "mc_rnn_3")
    label: str                     # the paper's name of the row (e.g. "MC-RNN-3")
    row: str                       # configs/<family>/<row>.yaml: its arch and training schedule
    # the model at --scale cpu: a registered arch ("" = the row's) with the width templates and
    # these options on top; at --scale paper the row's arch and ``paper_options``
    arch: str = ""
    options: Tuple[str, ...] = ()  # extra model options at --scale cpu
    paper_options: Tuple[str, ...] = ()  # model options on top of the row's arch at --scale paper (a labelled variant)
    # a control the paper has no row for: its model is ``arch`` with the width templates at every scale,
    # its schedule the row's
    own_model: bool = False
    baseline: bool = False
    size_match: Optional[str] = None  # name of the system whose parameter count this one matches
    widths: Tuple[str, ...] = SEQ2SEQ_WIDTHS  # width option templates at --scale cpu (() = the arch's own)
    alignment_entropy: bool = False  # DPN-S2S: Table 5's alignment entropies of its best checkpoint on the test set
    # Parallel cells: Section 4.1's cell-masking table of its best checkpoint on the test set, for
    # these word groups ((name, words), one line each of the analysis's --word-groups file)
    masking_groups: Tuple[Tuple[str, Tuple[str, ...]], ...] = ()
    data: str = ""                 # which of the family's binarized data dirs it reads ("" = the one data dir)

    def __post_init__(self):
        if not self.arch:
            object.__setattr__(self, "arch", self.row_arch)

    @property
    def row_arch(self) -> str:
        """The arch its row's YAML names (``model._name``)."""
        return load_row(self.row)["model"]["_name"]


@dataclass(frozen=True)
class Scale:
    """Training schedule and widths of one scale, as the results record them: :func:`paper_scale` reads
    them from a row's YAML, :func:`cpu_scale` names what the CPU scale changes.  ``width`` None = the
    architectures' own widths; ``dropout`` None = the arch's; ``max_tokens`` None = the row's batch size
    in sentences; ``overrides``: what the scale changes in the rows' other sections
    (:func:`fairseq_local_repro.schedule.apply_overrides`; :data:`CORPUS_TASK` as the task: the
    prepared corpus's)."""
    width: Optional[int]
    max_tokens: Optional[int]
    patience: int                  # early stopping: validations without a better dev loss (-1: none)
    max_epoch: int                 # safety cap; a run that reaches it is reported as such
    lr: float
    dropout: Optional[float]
    clip_norm: float
    train_pairs: Optional[int] = None  # use only the first N training pairs/sentences (None: all)
    notes: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    paper: bool = False            # the systems train their rows' archs (--scale paper)


# A scale override's task: the task of the corpus the harness prepared (its languages, or its
# language-model samples), not the row's
CORPUS_TASK = "<the prepared corpus's task>"


def paper_scale(row: str, width: Optional[int] = None, notes: str = "") -> Scale:
    """The scale that trains each system's row as its YAML gives it; the values the results record
    are those of ``row``, the family's reference row (``tests/test_schedules.py``: every row of the
    family has them)."""
    return Scale(width=width, max_tokens=row_value(row, "dataset.max_tokens"),
                 patience=row_value(row, "checkpoint.patience"), max_epoch=row_value(row, "optimization.max_epoch"),
                 lr=row_value(row, "optimization.lr")[0], dropout=None,
                 clip_norm=row_value(row, "optimization.clip_norm"), notes=notes, paper=True)


def cpu_scale(row: str, *, width: int, max_tokens: int, patience: int, max_epoch: int, dropout: float,
              overrides: Mapping[str, Any], lr: Optional[float] = None, clip_norm: Optional[float] = None,
              train_pairs: Optional[int] = None, notes: str = "") -> Scale:
    """The CPU scale: the named values on top of the rows' YAML (the learning rate and clipping
    threshold of ``row``, the family's reference row, unless given) and ``overrides`` of their other sections."""
    return Scale(width=width, max_tokens=max_tokens, patience=patience, max_epoch=max_epoch,
                 lr=row_value(row, "optimization.lr")[0] if lr is None else lr, dropout=dropout,
                 clip_norm=row_value(row, "optimization.clip_norm") if clip_norm is None else clip_norm,
                 train_pairs=train_pairs, notes=notes, overrides=dict(overrides))


# --scale cpu's optimizer for every family: Adam, the learning rate halved whenever the dev loss does
# not improve, training stopped once it falls below 1e-6; the corpus's task; batches in tokens
# (Scale.max_tokens) and the loss averaged over tokens; checkpoints chosen on the dev loss
ADAM_HALVING = {
    "task": CORPUS_TASK,
    "optimizer": {"_name": "adam", "adam_betas": "(0.9, 0.999)"},
    "lr_scheduler": {"_name": "reduce_lr_on_plateau", "lr_shrink": 0.5, "lr_patience": 0},
    "optimization.stop_min_lr": 1e-06,
}
TOKEN_BATCHES = {"dataset.batch_size": UNSET, "dataset.batch_size_valid": UNSET, "optimization.sentence_avg": UNSET}


@dataclass(frozen=True)
class RunSet:
    """A comparison of the family still to be trained (and, once published, kept complete): the
    registered ``systems`` (every one when empty; the baseline always) over seeds 1..``seeds`` with
    the ``reproduce.py`` options ``options`` (a setting of its own: dropout, learning rate, corpus),
    published to ``docs/results/reproduce/<family>/<variant>/``.  A run counts as done there when
    its JSON is published and was split after the overlap check (its ``split`` records the dropped
    pairs); the results page lists the others with :meth:`command`."""
    variant: str
    seeds: int
    why: str                       # what the comparison tests (one phrase, shown on the page)
    systems: Tuple[str, ...] = ()
    options: Tuple[str, ...] = ()

    def command(self, family: str) -> str:
        """The one command that trains the missing runs and publishes the comparison (runs finished
        under its ``--out`` or published in its folder with its settings are skipped, interrupted
        ones resume)."""
        parts = ["python", "scripts/reproduce.py", family, "--scale", "cpu", "--seeds", str(self.seeds)]
        if self.systems:
            parts += ["--systems", ",".join(self.systems)]
        return " ".join(parts + list(self.options) + ["--out", f"checkpoints/{self.variant}", "--publish",
                                                       "--variant", self.variant])


@dataclass(frozen=True)
class Family:
    name: str
    kind: str                      # "translation" (BLEU) or "lm" (perplexity)
    paper: str
    claim: str
    systems: Tuple[System, ...]
    scales: Dict[str, Scale] = field(default_factory=dict)
    data_cpu: str = ""             # description of the data at --scale cpu
    data_paper: str = ""
    bpe_paper: int = 25000         # --scale paper: IWSLT14's joint BPE size (translation families)
    task: str = "translation"      # the fairseq task of a translation family (training and generation)
    unavailable: Dict[str, str] = field(default_factory=dict)  # scale -> why the harness cannot run it
    reference: Dict[str, Dict[str, float]] = field(default_factory=dict)  # the paper's figures, shown beside ours
    # the comparisons the claim makes, (system, reference) pairs, Holm-corrected together (default:
    # every system against the baseline)
    comparisons: Tuple[Tuple[str, str], ...] = ()
    # upper edges (source words) of the source-length buckets whose BLEU the appendix shows per system
    # (the MC-RNN paper's Figure 4); empty: no length analysis
    length_buckets: Tuple[int, ...] = ()
    # the comparisons still to train (listed on the results page until published)
    planned: Tuple[RunSet, ...] = ()
    # a learning-rate/dropout grid swept per system on dev (``--tuned-on-dev`` picks each system's point)
    sweep: Dict[str, Tuple[float, ...]] = field(default_factory=dict)

    @property
    def baseline(self) -> System:
        return next(s for s in self.systems if s.baseline)

    def system(self, name: str) -> System:
        for s in self.systems:
            if s.name == name:
                return s
        raise KeyError(name)


def sweep_point(lr: float, dropout: float) -> str:
    """The variant folder of one grid point (e.g. ``sweep_lr0.001_dropout0.3``)."""
    return f"sweep_lr{lr:g}_dropout{dropout:g}"


def sweep_runsets(grid: Dict[str, Tuple[float, ...]], why: str) -> Tuple[RunSet, ...]:
    """One seed of every system at each (learning rate, dropout) point of ``grid``."""
    return tuple(RunSet(sweep_point(lr, d), 1, why, options=("--lr", f"{lr:g}", "--dropout", f"{d:g}"))
                 for lr in grid["lr"] for d in grid["dropout"])
