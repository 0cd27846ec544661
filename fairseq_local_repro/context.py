"""The typed state of one harness run: the prepared data (:class:`Data`), each system's widths and
parameter count (:class:`SystemPlan`) and everything a run of the family shares (:class:`RunContext`).

Layout of ``OUT/<family>/`` (never committed):

* ``data/raw``: the split raw text; ``data/bin``: ``scripts/preprocess.sh`` output (binarized
  splits, dictionaries, ``bpe/codes.*``); ``data/prepared.json`` marks it complete;
* ``<system>-s<seed>/``: ``checkpoints/`` (``checkpoint_best.pt``, ``checkpoint_last.pt``, a copy
  of the dictionaries and BPE codes), ``train.log`` (fairseq's log), ``curve.jsonl`` (one dev
  point per validation), ``train_done.json``, ``test/`` (hypotheses, score; DPN-S2S M9's alignment
  entropies, parallel cells' cell-masking table) and ``results.json``;
* ``extra/<name>/``: a test set of the user's, prepared as the family's data, and its ``scores.json``;
* ``comparison.json`` (every system's results + the statistics of :mod:`fairseq_local_repro.compare`).
"""
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional

from fairseq_local_repro.family_types import Family, Scale, System
from fairseq_local_repro.processes import ReproError


@dataclass
class Data:
    """A family's prepared data, as ``data/prepared.json`` records it."""
    bin: str
    src: str               # source and target languages ("" for a language-model corpus)
    tgt: str
    test_ref: str          # raw (untokenized) test references
    description: str
    sizes: Dict[str, int]
    bins: Dict[str, str] = field(default_factory=dict)  # a family whose systems read different sources: key -> dir
    # a language-model corpus: 0 = one sentence per sample; N = running text in N-token blocks that
    # run across sentence boundaries (--running-text)
    lm_block: int = 0

    def lm_options(self) -> List[str]:
        """The language-model task's sample options of this corpus (training and evaluation alike)."""
        if self.lm_block:
            return ["--sample-break-mode", "none", "--tokens-per-sample", str(self.lm_block)]
        return ["--sample-break-mode", "eos", "--tokens-per-sample", "512"]

    def for_system(self, system: System) -> "Data":
        """The data ``system`` reads: the binarized dir of its ``data`` key (the one dir when it has none)."""
        if not system.data:
            return self
        if system.data not in self.bins:
            raise ReproError(f"{system.name} reads the '{system.data}' data, which the prepared data lack "
                             f"({', '.join(sorted(self.bins)) or 'one data dir only'})")
        return dataclasses.replace(self, bin=self.bins[system.data])


@dataclass(frozen=True)
class SystemPlan:
    """A system's width options at the run's scale and its parameter count (None before the data
    are prepared); a size-matched system also names the system it matches and that one's count."""
    width_options: List[str]
    params: Optional[int]
    size_matched_to: Optional[str] = None
    target_params: Optional[int] = None


@dataclass(frozen=True)
class RunContext:
    """What every (system, seed) run of one harness invocation shares."""
    family: Family
    scale: Scale
    scale_name: str                # "cpu" or "paper"
    out: str                       # OUT/<family>, absolute
    max_epoch: int
    max_tokens: int
    command: str                   # the command that reproduces the comparison (shown on the page)
    cpu: bool                      # no GPU visible: fairseq runs with --cpu
    data: Optional[Data]           # None in a dry run before the data are prepared
    plan: Mapping[str, SystemPlan]
    # per system, the learning rate and dropout that replace the scale's (--tuned-on-dev)
    tuned: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # with --publish: the folder it writes (docs/results/reproduce/FAMILY[/VARIANT]), whose runs
    # published with this command's settings are read instead of trained again
    published: Optional[str] = None
    # with --publish --tuned-on-dev: per system, the published folder of its sweep point, whose runs
    # were trained by the same command (the same seed at the same point) and stand in for the tuned ones
    stand_ins: Mapping[str, str] = field(default_factory=dict)

    def setting(self, system: str) -> Dict[str, float]:
        """The learning rate and dropout ``system`` trains with: its tuned ones, else the scale's."""
        return {"lr": self.scale.lr, "dropout": self.scale.dropout, **self.tuned.get(system, {})}

    def published_folders(self, system: Optional[str] = None) -> List[str]:
        """The published folders whose runs stand in for training (``run.published_run``): the one
        ``--publish`` writes, then ``system``'s sweep point (every system's, without ``system``)."""
        extra = [self.stand_ins[system]] if system in self.stand_ins else (
            [] if system else sorted(set(self.stand_ins.values())))
        return ([self.published] if self.published else []) + extra

    def run_dir(self, system: str, seed: int) -> str:
        return os.path.join(self.out, f"{system}-s{seed}")

    def best_checkpoint(self, system: str, seed: int) -> str:
        return os.path.join(self.run_dir(system, seed), "checkpoints", "checkpoint_best.pt")

    def extra_dir(self, test_file: str) -> str:
        """Where a test set of the user's (``--test-src``/``--test-text``) is prepared and scored."""
        return os.path.join(self.out, "extra", os.path.splitext(os.path.basename(test_file))[0])
