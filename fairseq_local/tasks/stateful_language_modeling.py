"""Stateful truncated-BPTT language modelling (``--task stateful_language_modeling``).

The classic recurrent-LM regime of Zaremba et al. (2014), used by the parallel-cells paper
(Section 3.1: "unrolled in 35 steps ... we use the final states of previous batch as the initial
states of the next batch"): the corpus is one contiguous stream (lines end in </s>), cut into
``--batch-size`` rows; batch i holds columns ``[i*T, (i+1)*T]`` of every row
(T = ``--tokens-per-sample``, default 35), and the model starts batch i+1 from its final recurrent
state of batch i (detached, so gradients are truncated at the window boundary). The state is reset
to zero at the first window of every pass over a split (each epoch, each validation, each
fairseq-eval-lm run). Training reads the rows as Zaremba's reader does (equal disjoint rows, the
``numel % rows`` tail dropped). Validation splits and ``fairseq-eval-lm`` (any split) predict every
token of the split after the first exactly once: the rows overlap by one token and the remainder
makes some rows one token longer (see :mod:`fairseq_local.data.stateful_bptt_dataset`), so
fairseq-train's validation loss and ``fairseq-eval-lm`` give the same perplexity, which with batch
size 1 is the model's perplexity over the whole stream read once.
``--batch-size-valid`` sets the number of rows for validation (default: ``--batch-size``, default 20);
``fairseq-eval-lm --batch-size`` for evaluation. ``--context-window`` is refused (the carried state
already provides the context).

Model-side interface (generic: any recurrent LM can opt in, e.g. the parallel-cell and MC-RNN LMs)
----------------------------------------------------------------------------------------------
* ``model(src_tokens, src_lengths, bptt_state=carry)`` reaches ``decoder.forward(..., bptt_state=carry)``
  (``FairseqLanguageModel.forward`` passes extra keywords on); a model opts in by its decoder's
  ``forward`` having a ``bptt_state`` parameter (or explicitly, ``supports_bptt_state = True/False``
  on the model class), as :class:`~fairseq_local.modules.recurrent_lm_decoder.RecurrentLMDecoder` does;
* the decoder reads its initial state with ``carry.get(self)`` (``None`` = start from zeros) and stores
  its final state with ``carry.set(self, state)``. The state is any nest of tensors (e.g. a list of
  per-layer ``(h, c)``); the task detaches it between batches. Keys are per decoder object, so
  ensembles (``fairseq-eval-lm --path a.pt:b.pt``) keep one state per member.
Other models still train and evaluate here, statelessly (with a warning);
``--no-carry-state`` forces that for every model (an ablation).

AWD-LSTM's training procedure (Merity, Keskar and Socher, ICLR 2018; the MC-RNN paper's Table 4)
----------------------------------------------------------------------------------------------
* ``--variable-bptt`` (Section 4.1): every training epoch cuts the rows into windows of random
  length, ``seq_len = max(5, int(N(base, 5)))`` with ``base = --tokens-per-sample`` with probability
  0.95, else half of it, and at most ``--tokens-per-sample + 40``
  (:func:`~fairseq_local.data.stateful_bptt_dataset.variable_bptt_lengths`, seeded by
  ``--seed`` and the epoch, so a resumed epoch has the same windows); each update's learning rate
  is rescaled by ``seq_len / --tokens-per-sample`` (the mean over the batches of an update with
  ``--update-freq``), so every token weighs the same whatever its window's length.  Validation and
  ``fairseq-eval-lm`` keep fixed windows.
* ``--optimizer nt_asgd`` (Section 3, Algorithm 1): this task drives its trigger and its
  evaluation with the averaged weights (:class:`~fairseq_local.optim.nt_asgd.NTASGDDriver`): the
  SGD iterate is restored before every training step, the average is put in the model when a
  validation begins (so the checkpoint written after it holds the average), and the first
  validation subset's ``--best-checkpoint-metric`` is the trigger's check.
"""
import inspect
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import numpy as np
from fairseq import utils
from fairseq.data import Dictionary, data_utils, iterators
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from fairseq_local.data.stateful_bptt_dataset import (StatefulBPTTDataset, concatenate_lines,
                                                      variable_bptt_lengths)
from fairseq_local_core.errors import ConfigError
from fairseq_local.modules.fast_path import FastPathMixin
from fairseq_local.optim.nt_asgd import NTASGDDriver

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 20  # Zaremba et al. / the parallel-cells paper
GRAPHS_RUN_EAGERLY = ("--rnn-impl cuda-graphs: --task stateful_language_modeling batches its own BPTT windows, "
                      "which the shape plan (declared batch shapes, captured before training) does not cover; "
                      "its recurrent loops run eagerly")


def supports_bptt_state(model) -> bool:
    """Whether ``model`` (possibly DDP-wrapped) takes the carried state (see the module doc)."""
    flag = getattr(model, "supports_bptt_state", None)
    if flag is not None:
        return bool(flag)
    decoder = getattr(model, "decoder", None)
    if decoder is None:
        return False
    return "bptt_state" in inspect.signature(decoder.forward).parameters


class BPTTState:
    """The recurrent state each model carries from one batch of a stream to the next."""

    def __init__(self):
        self._states: Dict[int, Any] = {}

    def get(self, owner) -> Optional[Any]:
        return self._states.get(id(owner))

    def set(self, owner, state: Any):
        self._states[id(owner)] = state

    def reset(self):
        self._states.clear()

    def detach_(self):
        """Cut the graph at the window boundary (truncated BPTT)."""
        for key, state in self._states.items():
            self._states[key] = utils.apply_to_sample(lambda t: t.detach(), state)

    def __len__(self):
        return len(self._states)


@dataclass
class StatefulLanguageModelingConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "path to data directory (fairseq-preprocess --only-source)"})
    tokens_per_sample: int = field(default=35, metadata={"help": "BPTT window: time steps unrolled per batch"})
    no_carry_state: bool = field(
        default=False, metadata={"help": "start every batch from a zero state (ablation)"}
    )
    variable_bptt: bool = field(
        default=False, metadata={"help": "AWD-LSTM's random training window lengths around --tokens-per-sample, "
                                         "with the lr rescaled by seq_len / --tokens-per-sample"})
    bptt_std: float = field(default=5.0, metadata={"help": "--variable-bptt: standard deviation of the length"})
    bptt_full_prob: float = field(
        default=0.95, metadata={"help": "--variable-bptt: probability of the full base length (else half)"})
    bptt_min_len: int = field(default=5, metadata={"help": "--variable-bptt: shortest window"})
    bptt_max_extra: int = field(
        default=40, metadata={"help": "--variable-bptt: longest window = --tokens-per-sample + this"})
    batch_size: Optional[int] = II("dataset.batch_size")
    batch_size_valid: Optional[int] = II("dataset.batch_size_valid")
    train_subset: str = II("dataset.train_subset")
    seed: int = II("common.seed")
    best_checkpoint_metric: str = II("checkpoint.best_checkpoint_metric")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")


@register_task("stateful_language_modeling", dataclass=StatefulLanguageModelingConfig)
class StatefulLanguageModelingTask(FairseqTask):
    is_language_modeling = True  # its models are language models (config_checks.check_task_fits_arch)

    def __init__(self, cfg: StatefulLanguageModelingConfig, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        self._carries: Dict[str, BPTTState] = {}
        self._stateless_warned = False
        self._all_models_stateful = True
        self._check_variable_bptt()
        self.nt_asgd = NTASGDDriver(getattr(cfg, "best_checkpoint_metric", None) or "loss",
                                    bool(getattr(cfg, "maximize_best_checkpoint_metric", False)))
        self._window_ratios = []  # seq_len / --tokens-per-sample of the batches of the coming update

    def _check_variable_bptt(self):
        cfg = self.cfg
        if not getattr(cfg, "variable_bptt", False):
            return
        if not 0.0 <= cfg.bptt_full_prob <= 1.0:
            raise ConfigError(f"--bptt-full-prob must be in [0, 1] (got {cfg.bptt_full_prob})")
        if cfg.bptt_std < 0:
            raise ConfigError(f"--bptt-std must be >= 0 (got {cfg.bptt_std})")
        if cfg.bptt_min_len < 1 or cfg.bptt_max_extra < 0:
            raise ConfigError(f"--bptt-min-len must be >= 1 and --bptt-max-extra >= 0 "
                              f"(got {cfg.bptt_min_len}, {cfg.bptt_max_extra})")

    @classmethod
    def setup_task(cls, cfg: StatefulLanguageModelingConfig, **kwargs):
        paths = utils.split_paths(cfg.data)
        if not paths:
            raise ValueError("--task stateful_language_modeling needs a data directory")
        dict_path = os.path.join(paths[0], "dict.txt")
        if not os.path.exists(dict_path):
            raise FileNotFoundError(f"{dict_path}: no dictionary (run fairseq-preprocess --only-source)")
        dictionary = Dictionary.load(dict_path)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def _batch_size(self, split: str) -> int:
        bsz = self.cfg.batch_size if split == self.cfg.train_subset else (
            self.cfg.batch_size_valid or self.cfg.batch_size)
        return bsz or DEFAULT_BATCH_SIZE

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        split_path = os.path.join(paths[(epoch - 1) % len(paths)], split)
        lines = data_utils.load_indexed_dataset(split_path, self.dictionary, combine=combine)
        if lines is None:
            raise FileNotFoundError(f"Dataset not found: {split} ({split_path})")
        stream = concatenate_lines(lines)
        self.datasets[split] = StatefulBPTTDataset(
            stream, self._batch_size(split), self.cfg.tokens_per_sample, self.dictionary.pad(), split,
            predict_all=split != self.cfg.train_subset,  # evaluation: every token after the first
        )
        logger.info(f"{split}: {stream.numel():,} tokens, {len(self.datasets[split])} windows "
                    f"of {self.cfg.tokens_per_sample} x {self.datasets[split].bsz} streams")

    def get_batch_iterator(self, dataset, num_shards=1, shard_id=0, num_workers=0, epoch=1,
                           data_buffer_size=0, skip_remainder_batch=False, **kwargs):
        if not isinstance(dataset, StatefulBPTTDataset):
            raise TypeError("stateful_language_modeling batches only its own StatefulBPTTDataset")
        self._say_max_tokens_unused(kwargs.get("max_tokens"))
        if (dataset.num_shards, dataset.shard_id) != (num_shards, shard_id):
            dataset = dataset.rebatch(shard_id=shard_id, num_shards=num_shards)
        if getattr(self.cfg, "variable_bptt", False) and dataset.name == self.cfg.train_subset \
                and not dataset.predict_all:
            dataset = dataset.rebatch(shard_id=shard_id, num_shards=num_shards,
                                      window_lengths=self.window_lengths(dataset.targets_per_row, epoch))
        return iterators.EpochBatchIterator(
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=[[i] for i in range(len(dataset))],  # every item is a whole batch, in order
            num_workers=num_workers,
            epoch=epoch,
            buffer_size=data_buffer_size,
            disable_shuffling=True,
            skip_remainder_batch=skip_remainder_batch,
        )

    def _say_max_tokens_unused(self, max_tokens):
        """``--max-tokens`` sizes fairseq's batches by tokens; here a batch is ``--batch-size`` rows of
        ``--tokens-per-sample`` tokens, so a given ``--max-tokens`` changes nothing: said once."""
        if max_tokens and not getattr(self, "_said_max_tokens", False):
            self._said_max_tokens = True
            logger.warning(f"--max-tokens {max_tokens} is not used by --task stateful_language_modeling: a batch is "
                           "--batch-size rows of --tokens-per-sample tokens (fairseq-eval-lm: --batch-size rows)")

    def window_lengths(self, targets_per_row: int, epoch: int):
        """The training windows of ``epoch`` (``--variable-bptt``), the same on every shard."""
        cfg = self.cfg
        rng = np.random.RandomState([cfg.seed, epoch])
        return variable_bptt_lengths(targets_per_row, cfg.tokens_per_sample, rng, cfg.bptt_full_prob,
                                     cfg.bptt_std, cfg.bptt_min_len, cfg.bptt_max_extra)

    # ------------------------------------------------------------------ carrying the state
    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if not supports_bptt_state(model):
            self._all_models_stateful = False
        graphs = [m for m in model.modules() if isinstance(m, FastPathMixin) and m.rnn_impl == "cuda-graphs"]
        if graphs:
            logger.warning(GRAPHS_RUN_EAGERLY)
            for m in graphs:
                m.rnn_impl = "eager"
        return model

    def _attach_state(self, sample, stateful: bool, stream: Optional[str] = None):
        """Attach the stream's carried state to ``sample``; a sample that gets none (a dummy batch,
        a stateless model, ``--no-carry-state``) loses any state attached to it earlier, so that a
        reused batch object never runs on (and advances) a live carried state."""
        if sample is None or "bptt_stream" not in sample:
            return sample
        if self.cfg.no_carry_state or not stateful:
            sample.get("net_input", {}).pop("bptt_state", None)
        if self.cfg.no_carry_state:
            return sample
        if not stateful:
            if not self._stateless_warned:
                logger.warning("model does not support bptt_state: every batch starts from a zero state")
                self._stateless_warned = True
            return sample
        carry = self._carries.setdefault(stream or sample["bptt_stream"], BPTTState())
        if sample["bptt_window"] == 0:
            carry.reset()
        else:
            carry.detach_()
        sample["net_input"]["bptt_state"] = carry
        return sample

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        self.nt_asgd.before_train_step(optimizer, model)
        # a dummy batch (ignore_grad) must not advance the carried state
        stateful = supports_bptt_state(model) and not ignore_grad
        self._attach_state(sample, stateful)
        if not ignore_grad and getattr(self.cfg, "variable_bptt", False) and sample is not None \
                and "net_input" in sample:
            self._window_ratios.append(sample["net_input"]["src_tokens"].size(1) / self.cfg.tokens_per_sample)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def optimizer_step(self, optimizer, model, update_num):
        """``--variable-bptt``: the update's lr is scaled by seq_len / --tokens-per-sample (AWD-LSTM)."""
        ratios, self._window_ratios = self._window_ratios, []
        if not ratios:
            return super().optimizer_step(optimizer, model, update_num)
        lr = optimizer.get_lr()
        optimizer.set_lr(lr * sum(ratios) / len(ratios))
        try:
            super().optimizer_step(optimizer, model, update_num)
        finally:
            optimizer.set_lr(lr)

    def valid_step(self, sample, model, criterion):
        self._attach_state(sample, supports_bptt_state(model))
        return super().valid_step(sample, model, criterion)

    def begin_valid_epoch(self, epoch, model):
        """``--optimizer nt_asgd``: validate (and checkpoint) the averaged weights."""
        super().begin_valid_epoch(epoch, model)
        self.nt_asgd.begin_validation()

    def post_validate(self, model, stats, agg):
        """``--optimizer nt_asgd``: the first validation subset's metric is the trigger's check."""
        if self.nt_asgd.after_validation(stats):
            logger.info(f"NT-ASGD: {self.nt_asgd.metric} {stats[self.nt_asgd.metric]} is worse than the best "
                        f"before the last {self.nt_asgd.optimizer.nonmono} checks; averaging the weights from now on")

    def eval_lm_dataloader(self, dataset, max_tokens=None, batch_size=None, max_positions=None,
                           num_shards=1, shard_id=0, num_workers=1, data_buffer_size=10,
                           context_window=0):
        if context_window > 0:
            raise ConfigError("--context-window: stateful_language_modeling carries the recurrent state "
                             "across windows already; leave --context-window at 0")
        self._say_max_tokens_unused(max_tokens)
        if (batch_size and batch_size != dataset.bsz) or not dataset.predict_all:
            dataset = dataset.rebatch(bsz=batch_size or dataset.bsz, predict_all=True)
        itr = self.get_batch_iterator(dataset, num_shards=num_shards, shard_id=shard_id,
                                      num_workers=num_workers, data_buffer_size=data_buffer_size
                                      ).next_epoch_itr(shuffle=False)
        stream = f"eval:{dataset.name}"
        stateful = self._all_models_stateful
        batches = (self._attach_state(sample, stateful, stream) for sample in itr)
        return iterators.CountingIterator(batches, start=0, total=len(itr))

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    def max_positions(self):
        return None
