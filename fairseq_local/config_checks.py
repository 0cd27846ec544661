"""The checks of options that cannot work: each raises a one-line
:class:`~fairseq_local_core.errors.ConfigError` naming the option, printed as one line by every entry
point.  Models call them from ``build_model``; ``fairseq_local/patches/option_checks.py`` installs
the hooks that call them in fairseq's entry points (see its docstring for which runs where).

* Model sizes (:func:`check_sizes`): every model's ``build_model`` calls it with its config
  dataclass: each integer option whose name says it is a size (``*_dim``, ``*_size``,
  ``*_layers``, ``*_channels``, ``*_heads``, ``*_length``, ``*_positions``, ``wide``) must be >= 1
  (>= 0 for the names in ``allow_zero``, >= ``metadata["min"]`` where the field says so; ``None``
  where the option is optional).  A zero or negative size would otherwise fail deep inside torch
  ("cannot reshape tensor of 0 elements").  :func:`check_divides` and :func:`check_choice` are the
  other checks models share.
* Model options of any model (:func:`check_dropout`, :func:`check_model_keys`,
  :func:`check_task_fits_arch`).
* Options of every run (:func:`check_common_options`), of generation
  (:func:`check_generation_options`) and of ``fairseq-preprocess``
  (:func:`check_preprocess_options`); a float option given as ``nan`` or ``inf`` (which passes
  every range check) is refused; a data directory of the other kind than the task's
  (:func:`check_data_fits_task`: a language-model corpus for a translation task and back).
* A misspelled choice of a fairseq registry (:func:`did_you_mean`).
"""
import argparse
import dataclasses
import difflib
import math
import os
import re
import typing

import torch
from fairseq.models import (
    ARCH_MODEL_NAME_REGISTRY,
    ARCH_MODEL_REGISTRY,
    MODEL_DATACLASS_REGISTRY,
    MODEL_REGISTRY,
    FairseqEncoderDecoderModel,
    FairseqLanguageModel,
)
from fairseq.tasks import TASK_REGISTRY
from fairseq.tasks.language_modeling import LanguageModelingTask
from fairseq.tasks.translation import TranslationTask

from fairseq_local_core.errors import ConfigError

SIZE_RE = re.compile(r"(_dim|_size|_layers|_channels|_heads|_length|_positions)$|^wide$")


def _is_int_field(f) -> bool:
    t = f.type
    if t is int or t == "int":
        return True
    return typing.get_origin(t) is typing.Union and int in typing.get_args(t)


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_sizes(cfg, config_class, allow_zero=(), extra=()):
    """Raise :class:`ConfigError` for the first impossible size option of ``cfg``.

    ``extra``: more option names to check besides the size-like int fields of ``config_class``."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    names = [n for n, f in fields.items() if _is_int_field(f) and SIZE_RE.search(n)]
    for name in list(names) + [n for n in extra if n not in names]:
        value = getattr(cfg, name, None)
        if value is None:
            continue
        low = 0 if name in allow_zero else fields[name].metadata.get("min", 1) if name in fields else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{option(name)} must be an integer >= {low} (got {value!r})")


def check_divides(cfg, whole: str, part: str):
    """``--whole`` must split into ``--part`` equal pieces (e.g. hidden units into parallel cells)."""
    w, p = getattr(cfg, whole), getattr(cfg, part)
    if p and w % p:
        raise ConfigError(f"{option(whole)} {w} must be divisible by {option(part)} {p}")


def check_choice(name: str, value, choices):
    """``--name`` must be one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{option(name)} must be one of {', '.join(choices)} (got {value!r})")


# ------------------------------------------------------------------------------------------------
# generation options
# ------------------------------------------------------------------------------------------------
def _finite(name: str, value):
    """A float option that parsed as nan or inf (argparse's ``float`` accepts both) passes every
    range check (``nan < 0`` is False) and reaches the arithmetic: refused here."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{option(name)} must be a finite number (got {value})")


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
            raise ConfigError(f"{option(name)} must be >= 0 (got {value})")
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
               ("task", "tokens_per_sample"), ("checkpoint", "save_interval"), ("dataset", "validate_interval")]
_AT_LEAST_0 = [("dataset", "num_workers"), ("optimization", "clip_norm"), ("optimization", "max_epoch"),
               ("optimization", "max_update"), ("eval_lm", "context_window"), ("checkpoint", "save_interval_updates"),
               ("dataset", "validate_interval_updates")]


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
            raise ConfigError(f"{option(name)} must be >= 1 (got {value})")
    for group, name in _AT_LEAST_0:
        value = _get(cfg, group, name)
        if _number(value) and value < 0:
            raise ConfigError(f"{option(name)} must be >= 0 (got {value})")
    window, block = _get(cfg, "eval_lm", "context_window"), _get(cfg, "task", "tokens_per_sample")
    if _number(window) and _number(block) and 0 < window and block <= window:
        raise ConfigError(f"--context-window {window} must be smaller than --tokens-per-sample {block} (each block "
                          "scores --tokens-per-sample minus --context-window new tokens)")
    for name, low in (("update_freq", 1), ("lr", 0)):
        values = _get(cfg, "optimization", name)
        listed = hasattr(values, "__iter__") and not isinstance(values, str)
        for value in (values if listed else [values]):
            if _number(value) and value < low:
                raise ConfigError(f"{option(name)} must be >= {low} (got {value})")
    smoothing = _get(cfg, "criterion", "label_smoothing")
    if _number(smoothing) and not 0 <= smoothing < 1:
        raise ConfigError(f"--label-smoothing must be in [0, 1) (got {smoothing})")
    generation = cfg if isinstance(cfg, argparse.Namespace) else (
        cfg.get("generation", None) if hasattr(cfg, "get") else None)
    if generation is not None:
        check_generation_options(generation)
    check_data_fits_task(cfg)
    check_cpu_distributed(cfg)


def check_cpu_distributed(cfg):
    """``--cpu --distributed-world-size N`` (N > 1) works only as N processes over gloo: fairseq would
    otherwise spawn one process per GPU (none on CPU: nothing trained), train one process alone, or
    fail inside NCCL."""
    world = _get(cfg, "distributed_training", "distributed_world_size")
    if not _get(cfg, "common", "cpu") or not _number(world) or world <= max(1, torch.cuda.device_count()):
        return  # (fairseq's default world size is the number of GPUs: a plain --cpu run on a GPU machine)
    missing = []
    if _get(cfg, "distributed_training", "distributed_backend") != "gloo":
        missing.append("--distributed-backend gloo")
    if not _get(cfg, "distributed_training", "distributed_init_method"):
        missing.append("--distributed-init-method tcp://127.0.0.1:PORT")
    if not _get(cfg, "distributed_training", "distributed_no_spawn"):
        missing.append("--distributed-no-spawn")
    if missing:
        raise ConfigError(f"--cpu --distributed-world-size {world} needs {', '.join(missing)}: one fairseq-train per "
                          "rank, each with its --distributed-rank R (and --ddp-backend legacy_ddp)")


def check_data_fits_task(cfg):
    """A translation task on a language-model corpus (``dict.txt`` only) or a language-modeling task
    on a parallel corpus (``dict.L.txt`` only): fairseq stops with "Could not infer language pair"
    or a missing ``dict.txt``, neither saying what the folder holds."""
    name = getattr(cfg, "task", None) if isinstance(cfg, argparse.Namespace) else _get(cfg, "task", "_name")
    data = _get(cfg, "task", "data")
    cls = TASK_REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None or not isinstance(data, str) or not data:
        return
    folder = data.split(os.pathsep)[0]
    if not os.path.isdir(folder):
        return
    dicts = sorted(f for f in os.listdir(folder) if f.startswith("dict.") and f.endswith(".txt"))
    per_lang = [f for f in dicts if f != "dict.txt"]
    lm_task = issubclass(cls, LanguageModelingTask) or getattr(cls, "is_language_modeling", False)
    if (issubclass(cls, TranslationTask) and dicts == ["dict.txt"]
            and _get(cfg, "task", "source_lang") is None and _get(cfg, "task", "target_lang") is None):
        raise ConfigError(f"{folder} holds a language-model corpus (dict.txt, no dict.LANG.txt): --task {name} needs "
                          "parallel data (scripts/preprocess.sh --src L1 --tgt L2); train a language model on it "
                          "with --task language_modeling")
    if lm_task and per_lang and "dict.txt" not in dicts:
        raise ConfigError(f"{folder} holds a parallel corpus ({', '.join(per_lang)}, no dict.txt): --task {name} "
                          "needs a language-model corpus (scripts/preprocess.sh --lm); translate with --task "
                          "translation")


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
            raise ConfigError(f"{option(key)} must be in [0, 1) (got {value})")


# ------------------------------------------------------------------------------------------------
# the model a run builds
# ------------------------------------------------------------------------------------------------
def task_name(task) -> str:
    """The name ``task`` is registered under (``--task``)."""
    cfg = getattr(task, "cfg", None)
    name = cfg.get("_name", None) if hasattr(cfg, "get") else getattr(cfg, "_name", None)
    if name:
        return name
    for key, cls in TASK_REGISTRY.items():
        if cls is type(task):
            return key
    return type(task).__name__


def model_fields(name):
    """The options of model or arch ``name`` (its config dataclass's fields), or None."""
    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(name, name))
    return None if dc is None else [f.name for f in dataclasses.fields(dc)]


def unknown_key(key, name):
    """A model key (a YAML key under ``model:``) that model or arch ``name`` does not have."""
    close = difflib.get_close_matches(str(key), model_fields(name) or [], n=3)
    hint = f"; did you mean {' or '.join('model.' + c for c in close)}?" if close else ""
    return ConfigError(f"model.{key}: {name} has no such option{hint}")


def check_model_keys(cfg, from_checkpoint=False):
    """Hydra configs whose ``model._name`` is one of our archs: fairseq applies the arch function
    and keeps unknown keys without a word, so a misspelled YAML key would be silently ignored."""
    if from_checkpoint or isinstance(cfg, argparse.Namespace) or not hasattr(cfg, "keys"):
        return
    name = cfg.get("_name", None)
    model_cls = ARCH_MODEL_REGISTRY.get(name)
    fields = model_fields(name)
    if model_cls is None or fields is None or not model_cls.__module__.startswith("fairseq_local."):
        return
    for key in cfg.keys():
        if key not in fields and key not in ("_name", "arch"):
            raise unknown_key(key, name)


def check_task_fits_arch(cfg, task):
    """One of our language models built for a translation task, or one of our translation models
    for a language-modeling task: fairseq builds either and fails in the first forward pass."""
    arch = _get(cfg, "model", "arch") if isinstance(cfg, argparse.Namespace) else (
        cfg.get("_name", None) if hasattr(cfg, "get") else None)
    model_cls = ARCH_MODEL_REGISTRY.get(arch) or MODEL_REGISTRY.get(arch)
    if model_cls is None or not model_cls.__module__.startswith("fairseq_local."):
        return
    lm_task = isinstance(task, LanguageModelingTask) or getattr(task, "is_language_modeling", False)
    if issubclass(model_cls, FairseqLanguageModel) and isinstance(task, TranslationTask):
        raise ConfigError(f"--arch {arch} is a language model: train it with --task language_modeling or "
                          f"stateful_language_modeling, not --task {task_name(task)}")
    if issubclass(model_cls, FairseqEncoderDecoderModel) and lm_task:
        raise ConfigError(f"--arch {arch} is a translation model: train it with --task translation on parallel data, "
                          f"not --task {task_name(task)}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


_RESETS = ("reset_optimizer", "reset_dataloader", "reset_meters", "reset_lr_scheduler")


def finished_run(cfg, num_updates: int, next_epoch: int):
    """The line saying that the run ``cfg`` resumes has already finished (``--max-update`` or
    ``--max-epoch`` reached by ``checkpoint_last.pt``), or None.  fairseq would train one more update
    past ``--max-update`` on every rerun of the same command and overwrite the best and last
    checkpoints; only a resumed run (the default ``--restore-file``, no ``--reset-*`` and
    no ``--finetune-from-model``) counts."""
    restore = _get(cfg, "checkpoint", "restore_file")
    if (restore not in (None, "checkpoint_last.pt") or _get(cfg, "checkpoint", "finetune_from_model")
            or any(_get(cfg, "checkpoint", name) for name in _RESETS) or num_updates <= 0):
        return None
    max_update, max_epoch = _get(cfg, "optimization", "max_update"), _get(cfg, "optimization", "max_epoch")
    last = os.path.join(_get(cfg, "checkpoint", "save_dir") or ".", "checkpoint_last.pt")
    if _number(max_update) and 0 < max_update <= num_updates:
        reached, raise_ = f"{_count(num_updates, 'update')}, --max-update {max_update}", "--max-update"
    elif _number(max_epoch) and 0 < max_epoch < next_epoch:
        reached, raise_ = f"{_count(next_epoch - 1, 'epoch')}, --max-epoch {max_epoch}", "--max-epoch"
    else:
        return None
    return (f"{last} is a finished run ({reached}): left as it is, nothing trained (raise {raise_} to train on, "
            "or choose another --save-dir)")


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


HELP_POINTER = "the same command with --help lists the options, its --arch's and --task's included"


def unknown_options(message: str, known) -> str:
    """argparse's "unrecognized arguments" message -> one line naming the closest of the ``known``
    option strings for each unknown option (None for any other message)."""
    if not message.startswith("unrecognized arguments: "):
        return None
    given = [a.split("=")[0] for a in message[len("unrecognized arguments: "):].split() if a.startswith("--")]
    hints = [f"{a}: did you mean {' or '.join(close)}?" for a in given
             for close in [difflib.get_close_matches(a, list(known), n=2, cutoff=0.75)] if close]
    return f"{message}{'; ' if hints else ''}{'; '.join(hints)} ({HELP_POINTER})"


def check_preprocess_options(args):
    for name in ("nwordssrc", "nwordstgt"):
        value = getattr(args, name, None)
        if _number(value) and value != -1 and value < 1:
            raise ConfigError(f"{option(name)} must be -1 (no cap) or >= 1 (got {value})")
