"""Impossible options are one line naming the option, in every entry point that builds a model or
a generator, reads data or trains.

* ``FairseqTask.build_generator`` (the base of ``translation``, ``language_modeling`` and our
  tasks; used by ``fairseq-generate``, ``fairseq-interactive``, ``--eval-bleu`` validation and
  the hub interface of ``scripts/sample_lm.py``): ``--beam`` and ``--nbest`` must be >= 1,
  ``--nbest`` <= ``--beam``, ``--max-len-a``/``--max-len-b``/``--min-len`` >= 0 with room for
  ``--min-len`` tokens, ``--temperature`` > 0, ``--sampling-topk``/``--sampling-topp`` -1 or in
  range.  fairseq itself accepts ``--beam 0`` and fails inside beam search; its own assertions
  ("--sampling requires --nbest to be equal to --beam") become one line too.
* Options of every run (:func:`check_common_options`, from ``distributed_utils.call_main``, which
  fairseq-train, -hydra-train, -eval-lm, -interactive and -validate call, and from
  ``fairseq_cli.generate.main``): ``--max-tokens``/``--batch-size`` (and their ``-valid``
  variants) >= 1 (fairseq reads 0 as "unset" and a negative value as an empty dataset),
  ``--update-freq`` >= 1, ``--lr`` >= 0, ``--clip-norm`` >= 0, ``--label-smoothing`` in [0, 1),
  ``--tokens-per-sample`` >= 1, ``--num-workers`` >= 0, ``fairseq-eval-lm --context-window`` >= 0 and
  below ``--tokens-per-sample``; a float option given as ``nan`` or ``inf`` (which passes every
  range check) is refused, here and among the generation options (``--lenpen``, ``--unkpen``...).
* ``fairseq.models.build_model``: every model option whose name holds ``dropout`` must be in
  [0, 1); a ``ValueError`` whose message starts with an option name (``"--cell must be one of
  ..."``, the convention of our models' checks, see ``fairseq_local/config_checks.py``) becomes a
  :class:`~fairseq_local.errors.ConfigError`; a YAML key the model does not have (Hydra's
  ``ConfigKeyError``) names the key and the closest option.  A recurrent language model that
  carries its state across windows (the parallel-cell and MC-RNN LMs) built for another task than
  ``stateful_language_modeling`` gets a warning naming that task.  One of our language models built
  for a translation task, or one of our translation models for a language-modeling task, is refused
  (fairseq builds both and fails in the first forward pass).
* ``fairseq-preprocess --user-dir fairseq_local``: ``--nwordssrc``/``--nwordstgt`` must be -1 (no
  cap) or >= 1 (fairseq ignores 0).
* A misspelled choice of a fairseq registry (``--arch``, ``--task``, ``--optimizer``...) is one
  line with the closest names (``difflib``), not argparse's list of every choice; any other
  argparse error of a parser whose usage is long (fairseq's: over 100 lines before the error) is
  the error line alone, pointing to ``--help``.
"""
import argparse
import difflib
import functools
import logging
import math
import re
import sys

from fairseq_local.errors import ConfigError, UserError
from fairseq_local.patches.checkpoint_fit import _CONTEXT, _task_name
from fairseq_local.tasks.stateful_language_modeling import StatefulLanguageModelingTask, supports_bptt_state

logger = logging.getLogger(__name__)

_STATE = {}


def _opt(name: str) -> str:
    return "--" + name.replace("_", "-")


def _finite(name: str, value):
    """A float option that parsed as nan or inf (argparse's ``float`` accepts both) passes every
    range check (``nan < 0`` is False) and reaches the arithmetic: refused here."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{_opt(name)} must be a finite number (got {value})")


GENERATION_FLOATS = ("lenpen", "unkpen", "temperature", "max_len_a", "sampling_topp", "diversity_rate")


def check_generation_options(args):
    def get(name, default=None):
        return getattr(args, name, default)

    for name in GENERATION_FLOATS:
        _finite(name, get(name))

    beam, nbest = get("beam"), get("nbest")
    if beam is not None and beam < 1:
        raise ConfigError(f"--beam must be >= 1 (got {beam})")
    if nbest is not None and nbest < 1:
        raise ConfigError(f"--nbest must be >= 1 (got {nbest})")
    if beam is not None and nbest is not None and nbest > beam:
        raise ConfigError(f"--nbest {nbest} must not exceed --beam {beam}")
    for name in ("max_len_a", "max_len_b", "min_len"):
        value = get(name)
        if value is not None and value < 0:
            raise ConfigError(f"{_opt(name)} must be >= 0 (got {value})")
    max_len_a, max_len_b, min_len = get("max_len_a"), get("max_len_b"), get("min_len")
    if max_len_a == 0 and max_len_b is not None and min_len is not None and min_len > max_len_b:
        raise ConfigError(f"--min-len {min_len} exceeds the longest output --max-len-a 0 --max-len-b {max_len_b} "
                          "allows")
    if get("sampling") and beam is not None and nbest is not None and nbest != beam:
        raise ConfigError(f"--sampling requires --nbest to be equal to --beam (got --nbest {nbest}, --beam {beam})")
    temperature = get("temperature")
    if temperature is not None and temperature <= 0:
        raise ConfigError(f"--temperature must be > 0 (got {temperature})")
    topk, topp = get("sampling_topk"), get("sampling_topp")
    if topk is not None and topk != -1 and topk < 1:
        raise ConfigError(f"--sampling-topk must be -1 (off) or >= 1 (got {topk})")
    if topp is not None and topp != -1 and not 0 < topp <= 1:
        raise ConfigError(f"--sampling-topp must be -1 (off) or in (0, 1] (got {topp})")


# ------------------------------------------------------------------------------------------------
# options of every run
# ------------------------------------------------------------------------------------------------
_AT_LEAST_1 = [("dataset", "max_tokens"), ("dataset", "batch_size"), ("dataset", "max_tokens_valid"),
               ("dataset", "batch_size_valid"), ("dataset", "required_batch_size_multiple"),
               ("task", "tokens_per_sample")]
_AT_LEAST_0 = [("dataset", "num_workers"), ("optimization", "clip_norm"), ("optimization", "max_epoch"),
               ("optimization", "max_update"), ("eval_lm", "context_window")]


def _get(cfg, group, name):
    """``cfg.group.name`` of an omegaconf config, ``cfg.name`` of an argparse namespace."""
    if isinstance(cfg, argparse.Namespace):
        return getattr(cfg, name, None)
    sub = cfg.get(group, None) if hasattr(cfg, "get") else getattr(cfg, group, None)
    if sub is None:
        return None
    if hasattr(sub, "get"):
        try:
            return sub.get(name, None)
        except Exception:  # an interpolation that cannot resolve: fairseq reports it itself
            return None
    return getattr(sub, name, None)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_common_options(cfg):
    """Raise :class:`ConfigError` for the first impossible value among the options of every run."""
    for group, name in (("optimization", "clip_norm"), ("optimization", "lr"), ("criterion", "label_smoothing"),
                        ("optimizer", "weight_decay")):
        values = _get(cfg, group, name)
        listed = hasattr(values, "__iter__") and not isinstance(values, str)
        for value in (values if listed else [values]):
            _finite(name, value)
    for group, name in _AT_LEAST_1:
        value = _get(cfg, group, name)
        if _number(value) and value < 1:
            raise ConfigError(f"{_opt(name)} must be >= 1 (got {value})")
    for group, name in _AT_LEAST_0:
        value = _get(cfg, group, name)
        if _number(value) and value < 0:
            raise ConfigError(f"{_opt(name)} must be >= 0 (got {value})")
    window, block = _get(cfg, "eval_lm", "context_window"), _get(cfg, "task", "tokens_per_sample")
    if _number(window) and _number(block) and 0 < window and block <= window:
        raise ConfigError(f"--context-window {window} must be smaller than --tokens-per-sample {block} (each block "
                          "scores --tokens-per-sample minus --context-window new tokens)")
    for name, low in (("update_freq", 1), ("lr", 0)):
        values = _get(cfg, "optimization", name)
        listed = hasattr(values, "__iter__") and not isinstance(values, str)
        for value in (values if listed else [values]):
            if _number(value) and value < low:
                raise ConfigError(f"{_opt(name)} must be >= {low} (got {value})")
    smoothing = _get(cfg, "criterion", "label_smoothing")
    if _number(smoothing) and not 0 <= smoothing < 1:
        raise ConfigError(f"--label-smoothing must be in [0, 1) (got {smoothing})")
    generation = cfg if isinstance(cfg, argparse.Namespace) else (
        cfg.get("generation", None) if hasattr(cfg, "get") else None)
    if generation is not None:
        check_generation_options(generation)


def check_dropout(cfg):
    """Every numeric model option whose name holds ``dropout`` must be in [0, 1)."""
    if cfg is None:
        return
    keys = vars(cfg).keys() if isinstance(cfg, argparse.Namespace) else cfg.keys() if hasattr(cfg, "keys") else ()
    for key in [k for k in keys if "dropout" in str(k)]:
        try:
            value = getattr(cfg, key)
        except Exception:  # a missing or unresolvable value: fairseq reports it itself
            continue
        if _number(value) and not 0 <= value < 1:
            raise ConfigError(f"{_opt(key)} must be in [0, 1) (got {value})")


def _warn_stateless(model, task):
    if _CONTEXT or isinstance(task, StatefulLanguageModelingTask) or not supports_bptt_state(model):
        return  # a loaded checkpoint is checked against its training task (checkpoint_fit.py)
    logger.warning(f"{type(model).__name__} carries its recurrent state across windows only with --task "
                   "stateful_language_modeling; with this task every window starts from a zero state (a "
                   "different perplexity than the paper's): pass --task stateful_language_modeling")


def _model_fields(name):
    """The options of model or arch ``name`` (its config dataclass's fields), or None."""
    import dataclasses

    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY

    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(name, name))
    return None if dc is None else [f.name for f in dataclasses.fields(dc)]


def _unknown_key(key, name):
    """A model key (a YAML key under ``model:``) that model or arch ``name`` does not have."""
    close = difflib.get_close_matches(str(key), _model_fields(name) or [], n=3)
    hint = f"; did you mean {' or '.join('model.' + c for c in close)}?" if close else ""
    return ConfigError(f"model.{key}: {name} has no such option{hint}")


def check_model_keys(cfg, from_checkpoint=False):
    """Hydra configs whose ``model._name`` is one of our archs: fairseq applies the arch function
    and keeps unknown keys without a word, so a misspelled YAML key would be silently ignored."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    if from_checkpoint or isinstance(cfg, argparse.Namespace) or not hasattr(cfg, "keys"):
        return
    name = cfg.get("_name", None)
    model_cls = ARCH_MODEL_REGISTRY.get(name)
    fields = _model_fields(name)
    if model_cls is None or fields is None or not model_cls.__module__.startswith("fairseq_local."):
        return
    for key in cfg.keys():
        if key not in fields and key not in ("_name", "arch"):
            raise _unknown_key(key, name)


def check_task_fits_arch(cfg, task):
    """One of our language models built for a translation task, or one of our translation models
    for a language-modeling task: fairseq builds either and fails in the first forward pass."""
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, FairseqEncoderDecoderModel, FairseqLanguageModel
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    arch = _get(cfg, "model", "arch") if isinstance(cfg, argparse.Namespace) else (
        cfg.get("_name", None) if hasattr(cfg, "get") else None)
    model_cls = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    if model_cls is None or not model_cls.__module__.startswith("fairseq_local."):
        return
    lm_task = isinstance(task, (LanguageModelingTask, StatefulLanguageModelingTask))
    if issubclass(model_cls, FairseqLanguageModel) and isinstance(task, TranslationTask):
        raise ConfigError(f"--arch {arch} is a language model: train it with --task language_modeling or "
                          f"stateful_language_modeling, not --task {_task_name(task)}")
    if issubclass(model_cls, FairseqEncoderDecoderModel) and lm_task:
        raise ConfigError(f"--arch {arch} is a translation model: train it with --task translation on parallel data, "
                          f"not --task {_task_name(task)}")


# ------------------------------------------------------------------------------------------------
# misspelled registry choices
# ------------------------------------------------------------------------------------------------
_CHOICE_RE = re.compile(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", re.S)


def did_you_mean(message: str):
    """argparse's "invalid choice" message with many choices -> one line with the closest ones
    (None for any other message)."""
    m = _CHOICE_RE.match(message)
    if m is None:
        return None
    choices = re.findall(r"'([^']*)'", m.group(3))
    if len(choices) < 10:
        return None
    option = m.group(1).split("/")[0]
    close = difflib.get_close_matches(m.group(2), choices, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return f"{option}: unknown choice '{m.group(2)}'{hint} ({len(choices)} choices, listed by --help)"


_USAGE_LINES = 5  # a longer usage (fairseq's parsers: over 100 lines) is left to --help


def _install_argparse():
    error = argparse.ArgumentParser.error
    if getattr(error, "_fairseq_local", False):
        return

    @functools.wraps(error)
    def parser_error(self, message):
        short = did_you_mean(message)
        if short is None:
            if self.format_usage().count("\n") <= _USAGE_LINES:
                return error(self, message)
            short = f"{message} ({self.prog} --help lists the options)"  # not fairseq's 130 lines of usage first
        self.exit(2, f"{self.prog}: error: {short}\n")

    parser_error._fairseq_local = True
    argparse.ArgumentParser.error = parser_error


def check_preprocess_options(args):
    for name in ("nwordssrc", "nwordstgt"):
        value = getattr(args, name, None)
        if _number(value) and value != -1 and value < 1:
            raise ConfigError(f"{_opt(name)} must be -1 (no cap) or >= 1 (got {value})")


def _wrap_cli_main(module_name, check):
    module = sys.modules.get(module_name)
    if module is None or getattr(module.main, "_fairseq_local", False):
        return
    main = module.main

    @functools.wraps(main)
    def checked_main(args, *rest, **kwargs):
        check(args)
        return main(args, *rest, **kwargs)

    checked_main._fairseq_local = True
    module.main = checked_main


def install():
    # CLIs imported before the plugin (their entry point modules): wrapped whenever install runs
    _wrap_cli_main("fairseq_cli.generate", check_common_options)
    _wrap_cli_main("fairseq_cli.preprocess", check_preprocess_options)
    if _STATE:
        return
    from fairseq import models
    from fairseq.distributed import utils as distributed_utils
    from fairseq.tasks import FairseqTask
    from omegaconf.errors import ConfigKeyError

    _install_argparse()
    build_generator = FairseqTask.build_generator

    @functools.wraps(build_generator)
    def checked_build_generator(self, models_, args, *rest, **kwargs):
        check_generation_options(args)
        try:
            return build_generator(self, models_, args, *rest, **kwargs)
        except AssertionError as err:  # fairseq's own checks: "--sampling requires --nbest to be ..."
            if not str(err).startswith("--"):
                raise
            raise ConfigError(str(err)) from None

    build_model = models.build_model

    @functools.wraps(build_model)
    def checked_build_model(cfg, task, *rest, **kwargs):
        check_dropout(cfg)
        from_checkpoint = kwargs.get("from_checkpoint", rest[0] if rest else False)
        check_model_keys(cfg, from_checkpoint)
        if not from_checkpoint:
            check_task_fits_arch(cfg, task)
        try:
            model = build_model(cfg, task, *rest, **kwargs)
        except ConfigKeyError as err:
            key = getattr(err, "key", None) or (re.findall(r"Key '([^']+)'", str(err)) or [None])[0]
            raise _unknown_key(key, cfg.get("_name", None) if hasattr(cfg, "get") else None) from None
        except ValueError as err:
            if isinstance(err, UserError) or not str(err).startswith("--"):
                raise
            raise ConfigError(str(err)) from err
        _warn_stateless(model, task)
        return model

    call_main = distributed_utils.call_main

    @functools.wraps(call_main)
    def call_main_checking_options(cfg, main, **kwargs):
        check_common_options(cfg)
        return call_main(cfg, main, **kwargs)

    _STATE.update(build_generator=build_generator, build_model=build_model, call_main=call_main)
    FairseqTask.build_generator = checked_build_generator
    models.build_model = checked_build_model
    distributed_utils.call_main = call_main_checking_options
