"""A paper row's training schedule, read from its YAML (``configs/<family>/<row>.yaml``) and written
as fairseq-train options.

The YAML is the one place of a row's schedule: its task, criterion, optimizer, learning-rate
scheduler, optimization, dataset and checkpoint sections (:data:`TRAIN_SECTIONS`), and its model
(``model._name``, the row's arch, which holds its sizes).  The harness owns what is about one run and
not about the row (:data:`HARNESS_KEYS`: the data folder, where checkpoints go and how many are
kept; ``common:`` and ``generation:`` are not read).  A scale that changes the schedule does so with
named overrides (:func:`apply_overrides`), listed per family in ``families.py``.  PyYAML and the
standard library only: ``families.py`` reads the rows without importing fairseq.
"""
import copy
import functools
import os
from typing import Any, Dict, List, Mapping

import yaml

from fairseq_local_repro.processes import REPO, ReproError

TRAIN_SECTIONS = ("task", "criterion", "optimizer", "lr_scheduler", "optimization", "dataset", "checkpoint")
# Sections whose ``_name`` is a fairseq-train choice (--task, --criterion, --optimizer, --lr-scheduler)
NAMED_SECTIONS = ("task", "criterion", "optimizer", "lr_scheduler")
# Keys of a row that belong to one run of the harness, not to the row's schedule
HARNESS_KEYS = {("task", "data"), ("checkpoint", "save_dir"), ("checkpoint", "keep_last_epochs")}
# An override's value that removes the row's key (fairseq's default applies)
UNSET = None
# fairseq's defaults of the values a scale records, for a row that leaves them unset
# (tests/test_schedules.py checks them against fairseq's dataclasses)
FAIRSEQ_DEFAULTS = {"dataset.max_tokens": None, "checkpoint.patience": -1, "optimization.max_epoch": 0,
                    "optimization.clip_norm": 0.0, "optimization.lr": [0.25]}


def row_path(row: str) -> str:
    """The absolute path of ``row`` (``configs/<family>/<row>.yaml``, relative to the repository)."""
    return row if os.path.isabs(row) else os.path.join(REPO, row)


def load_row(row: str) -> Dict[str, Any]:
    """The row's YAML as a dict (a copy); ReproError naming the file when it is missing or not a row's."""
    return copy.deepcopy(_read_row(row_path(row)))


@functools.lru_cache(maxsize=None)
def _read_row(path: str) -> Dict[str, Any]:
    row = os.path.relpath(path, REPO)
    try:
        with open(path, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise ReproError(f"{row}: cannot read the row's YAML: {e}")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict) or "_name" not in cfg["model"]:
        raise ReproError(f"{row}: not a row's YAML (no model._name)")
    return cfg


def row_value(row, path: str):
    """The value of ``section.key`` in the row (a path, or a dict already read): its YAML's, else
    fairseq's default (:data:`FAIRSEQ_DEFAULTS`)."""
    cfg = load_row(row) if isinstance(row, str) else row
    section, _, key = path.partition(".")
    node = cfg.get(section) or {}
    return node[key] if key in node else FAIRSEQ_DEFAULTS[path]


def apply_overrides(cfg: Mapping[str, Any], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """``cfg`` with ``overrides`` applied, in order: ``"section.key": value`` sets one key (:data:`UNSET`
    removes it), ``"section": {...}`` replaces the whole section (another optimizer's options are not
    the row's)."""
    out = copy.deepcopy(dict(cfg))
    for path, value in overrides.items():
        section, _, key = path.partition(".")
        if not key:
            out[section] = copy.deepcopy(dict(value))
            continue
        node = out.setdefault(section, {})
        if value is UNSET:
            node.pop(key, None)
        else:
            node[key] = value
    return out


def _is_interpolation(value) -> bool:
    return isinstance(value, str) and value.startswith("${")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _value(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_value(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def schedule_values(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """The training sections of ``cfg`` as one flat ``{option name: value}`` (fairseq-train's single
    namespace): ``_name`` of a named section under the section's name, the harness's keys and Hydra
    interpolations (a key that restates another, e.g. a legacy optimizer's ``lr``) left out.
    ReproError when two sections give one option different values."""
    flat: Dict[str, Any] = {}
    for section in TRAIN_SECTIONS:
        for key, value in (cfg.get(section) or {}).items():
            if (section, key) in HARNESS_KEYS or _is_interpolation(value):
                continue
            name = section if key == "_name" else key
            if key == "_name" and section not in NAMED_SECTIONS:
                continue
            if name in flat and flat[name] != value:
                raise ReproError(f"{section}.{key}: {value!r} differs from {flat[name]!r} given for the same "
                                 f"fairseq-train option {_flag(name)}")
            flat[name] = value
    return flat


def model_values(cfg: Mapping[str, Any]) -> Dict[str, Any]:
    """The model section as ``{"arch": name, option: value, ...}``."""
    model = dict(cfg["model"])
    return {"arch": model.pop("_name"), **model}


def options(values: Mapping[str, Any]) -> List[str]:
    """``{"lr": [0.25], "sentence_avg": True, "max_tokens": None}`` -> ``["--lr", "0.25", "--sentence-avg"]``:
    a true boolean is a flag, a false one or None is left to fairseq's default."""
    argv: List[str] = []
    for key, value in values.items():
        if isinstance(value, bool):
            argv += [_flag(key)] if value else []
        elif value is not None:
            argv += [_flag(key), _value(value)]
    return argv


def cli_args_from_yaml(row, overrides: Mapping[str, Any] = None) -> List[str]:
    """The fairseq-train options of a row (a path, or a dict already read) with ``overrides``
    (:func:`apply_overrides`): its training sections, then ``--arch`` and the model's keys."""
    cfg = load_row(row) if isinstance(row, str) else row
    cfg = apply_overrides(cfg, overrides or {})
    return options(schedule_values(cfg)) + options(model_values(cfg))
