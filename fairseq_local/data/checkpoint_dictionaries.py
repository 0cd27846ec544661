"""Which dictionaries (and corpus) a checkpoint was trained with, and the checks against a task's.

A model's embedding and output rows are indexed by its dictionaries' entries; fairseq notices other
dictionaries only when their size differs.  Every checkpoint therefore stores, in its extra state
(:data:`KEY`, written by ``patches/dictionary_fingerprint.py``), the size and a SHA-256 of the
entries in order of each dictionary of its task (:func:`task_fingerprints`), with the language of
each side, and, for a data directory made by ``scripts/preprocess.sh``, that directory and its
corpus fingerprint (:data:`CORPUS_KEY`, :func:`task_corpus`).  :func:`stored` reads them back;
:func:`check` compares a checkpoint with a task's dictionaries wherever the two meet (the loads of
``patches/checkpoint_fit.py``, ``fairseq_local_repro/tools/average_checkpoints.py``).  A checkpoint
without a fingerprint passes (its size is still checked by fairseq).
"""
import hashlib
import logging
import os

from fairseq_local_core import corpus_manifest
from fairseq_local_core.errors import CheckpointError

logger = logging.getLogger(__name__)

KEY = "dictionaries"
CORPUS_KEY = "corpus"
_WARNED = set()


def forget_warnings():
    """Warn again about a (checkpoint, data directory) pair already warned about (check_corpus)."""
    _WARNED.clear()


def fingerprint(dictionary) -> dict:
    """Size and SHA-256 of ``dictionary``'s entries in index order."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()
    return {"size": len(dictionary), "sha256": digest}


def _pair(cfg):
    """(source language, target language) of a task config (a dict, DictConfig or Namespace); Nones
    where it names none."""
    if cfg is None:
        return None, None
    get = cfg.get if hasattr(cfg, "get") else lambda k, d=None: getattr(cfg, k, d)
    return get("source_lang", None), get("target_lang", None)


def _dictionaries(task) -> dict:
    out = {}
    for side in ("source", "target"):
        try:
            dictionary = getattr(task, f"{side}_dictionary")
        except (NotImplementedError, AttributeError):
            dictionary = None
        if dictionary is not None and hasattr(dictionary, "symbols"):
            out[side] = dictionary
    return out


def task_fingerprints(task) -> dict:
    """Each dictionary's fingerprint, with the language it is of when the task names one (a
    translation task's ``--source-lang``/``--target-lang``, given or read from the data directory)."""
    prints = {side: fingerprint(d) for side, d in _dictionaries(task).items()}
    for side, lang in zip(("source", "target"), _pair(getattr(task, "cfg", None))):
        if lang is not None and side in prints:
            prints[side]["lang"] = lang
    return prints


def _dict_file(task, side) -> str:
    """The dictionary file the task read for ``side`` (for the message)."""
    cfg = getattr(task, "cfg", None)
    lang = getattr(cfg, f"{side}_lang", None) if cfg is not None else None
    return f"dict.{lang}.txt" if lang else "dict.txt"


def stored(state, key=KEY) -> dict:
    extra = state.get("extra_state") if isinstance(state, dict) else None
    found = extra.get(key) if isinstance(extra, dict) else None
    return found if isinstance(found, dict) else {}


def task_corpus(task) -> dict:
    """``{"data", "fingerprint"}`` of the data directory ``task`` reads, when it has a corpus.json."""
    data = getattr(getattr(task, "cfg", None), "data", None)
    if not data:
        return {}
    manifest = corpus_manifest.read(str(data))
    if not manifest or not manifest.get("corpus"):
        return {}
    return {"data": os.path.abspath(corpus_manifest.first_data_dir(str(data))), "fingerprint": manifest["corpus"]}


def check_corpus(path, state, data):
    """Warn (once per checkpoint and data directory) when the checkpoint was trained on another corpus
    than the one ``data`` was made from."""
    saved = stored(state, CORPUS_KEY)
    if not saved.get("fingerprint") or not data:
        return
    manifest = corpus_manifest.read(str(data))
    here = (manifest or {}).get("corpus")
    if not here or here == saved["fingerprint"] or (path, str(data)) in _WARNED:
        return
    _WARNED.add((path, str(data)))
    logger.warning(f"{path} was trained on another corpus ({saved.get('data')}, corpus {saved['fingerprint'][:12]}) "
                   f"than {corpus_manifest.first_data_dir(str(data))} was made from (corpus {here[:12]}): their "
                   "dictionaries match, so it runs, but check that this is the data directory you mean")


def check_direction(path, state, task):
    """Raise :class:`CheckpointError` when ``task`` translates the other way round than the checkpoint
    was trained to (``-s en -t de`` for a de -> en model).  With a joint BPE both languages share one
    dictionary, so the dictionary check cannot see the swap, and the model would "translate" its
    target language with exit status 0."""
    saved = stored(state)
    trained = tuple((saved.get(side) or {}).get("lang") for side in ("source", "target"))
    asked = _pair(getattr(task, "cfg", None))
    if None in trained or None in asked or trained == asked:
        return
    if asked == trained[::-1]:
        raise CheckpointError(
            f"{path} translates {trained[0]} -> {trained[1]}, but this task translates {asked[0]} -> {asked[1]} "
            f"(--source-lang/-s, --target-lang/-t): give -s {trained[0]} -t {trained[1]}, or a checkpoint "
            f"trained {asked[0]} -> {asked[1]}")


def check(path, state, task, data=None):
    """Raise :class:`CheckpointError` when a dictionary of ``task`` has the size of the one the
    checkpoint ``state`` was trained with but other entries (a different size is left to the
    weight-shape check, which names the mismatching parameter), or when ``task`` translates the
    other way round (:func:`check_direction`)."""
    saved = stored(state)
    if task is None:
        return
    check_direction(path, state, task)
    data = data or getattr(getattr(task, "cfg", None), "data", None)
    same_sizes = True
    for side, dictionary in _dictionaries(task).items():
        want = saved.get(side)
        if not isinstance(want, dict) or want.get("size") != len(dictionary):
            same_sizes = same_sizes and not isinstance(want, dict)
            continue
        if fingerprint(dictionary)["sha256"] != want.get("sha256"):
            where = f"{data}/{_dict_file(task, side)}" if data else f"this task's {side} dictionary"
            raise CheckpointError(
                f"{path} was trained with another {side} dictionary than {where}: both have {len(dictionary)} "
                "entries, but not the same ones (another corpus or BPE model?); give the data directory the "
                "checkpoint was trained with")
    if same_sizes:  # otherwise the weight-shape check's error follows: no warning that "their dictionaries match"
        check_corpus(path, state, data)
