"""Refuse an incomplete binarized split instead of loading half of it.

What it changes: ``fairseq.data.indexed_dataset.make_dataset`` and the dataset classes' loaders.
For whom: every run, fairseq's own models included (a complete split loads as in fairseq).  Why:

A ``fairseq-preprocess`` killed mid-way can leave ``train.de-en.en.bin`` without its ``.idx`` (or
a truncated ``.bin``/``.idx``).  fairseq then reports the split as absent and, for a translation
pair, silently loads it as source-only; training fails later deep inside the model.  :func:`install`
wraps the three functions of ``fairseq.data.indexed_dataset`` through which every task looks for a
binarized split (``dataset_exists``, ``infer_dataset_impl``, ``make_dataset``: fairseq's
``translation`` and ``language_modeling`` tasks, ``data_utils.load_indexed_dataset``, our tasks):
when exactly one of ``PREFIX.bin`` / ``PREFIX.idx`` exists, or an mmap index does not match the
sizes of its two files, they raise one line naming the missing or damaged file.

Loading a split (``make_dataset``) also refuses an empty one (an empty test file binarized: mmap
cannot map a 0-byte ``.bin`` and fairseq fails with an ``AttributeError``), naming it, and warns,
once per split, about empty sentences in a text split (blank lines of the text it was binarized
from: an empty source or target in a translation pair), naming the first line.
"""
import functools
import logging
import os
import struct

import numpy as np

from fairseq_local_core.errors import InputFileError

logger = logging.getLogger(__name__)

_STATE = {}
_WARNED = set()
_MMAP_MAGIC = b"MMIDIDX\x00\x00"
_MMAP_HEADER = 9 + 8 + 1 + 8  # magic, version, dtype code, number of items


def _incomplete(prefix: str, detail: str) -> InputFileError:
    return InputFileError(f"binarized split {prefix} is incomplete: {detail} (an interrupted "
                          "fairseq-preprocess?); binarize the data again")


def _check_mmap(prefix: str, idx: str, bin_path: str):
    from fairseq.data import indexed_dataset

    idx_size = os.path.getsize(idx)
    with open(idx, "rb") as f:
        head = f.read(_MMAP_HEADER)
        if not head.startswith(_MMAP_MAGIC[:8]) or head[:9] != _MMAP_MAGIC:
            return  # another format: fairseq's own checks apply
        if len(head) < _MMAP_HEADER:
            raise _incomplete(prefix, f"{idx} is truncated ({idx_size} bytes)")
        code = head[17]
        n = struct.unpack("<Q", head[18:26])[0]
        if idx_size != _MMAP_HEADER + 12 * n:
            raise _incomplete(prefix, f"{idx} has {idx_size} bytes, its header says {_MMAP_HEADER + 12 * n}")
        if n == 0 or code not in indexed_dataset._code_to_dtype:
            return
        f.seek(_MMAP_HEADER + 4 * (n - 1))
        (last_size,) = struct.unpack("<i", f.read(4))
        f.seek(_MMAP_HEADER + 4 * n + 8 * (n - 1))
        (last_pointer,) = struct.unpack("<q", f.read(8))
    expected = last_pointer + last_size * indexed_dataset._code_to_dtype[code]().itemsize
    actual = os.path.getsize(bin_path)
    if actual != expected:
        raise _incomplete(prefix, f"{bin_path} has {actual} bytes, its index {idx} says {expected}")


def check_complete(prefix: str, impl=None):
    """Raise :class:`InputFileError` if ``prefix.bin``/``prefix.idx`` is half of a split."""
    if impl in ("raw", "fasta") or not isinstance(prefix, str):
        return
    idx, bin_path = prefix + ".idx", prefix + ".bin"
    has_idx, has_bin = os.path.isfile(idx), os.path.isfile(bin_path)
    if has_idx != has_bin:
        missing, present = (bin_path, idx) if has_idx else (idx, bin_path)
        raise _incomplete(prefix, f"{missing} is missing but {present} exists")
    if has_idx and impl in (None, "mmap"):
        _check_mmap(prefix, idx, bin_path)


def check_not_empty(prefix: str, impl=None):
    """Raise :class:`InputFileError` for a binarized (mmap) split with no sentence."""
    if impl not in (None, "mmap") or not isinstance(prefix, str) or not os.path.isfile(prefix + ".idx"):
        return
    with open(prefix + ".idx", "rb") as f:
        head = f.read(_MMAP_HEADER)
    if len(head) == _MMAP_HEADER and head[:9] == _MMAP_MAGIC and struct.unpack("<Q", head[18:26])[0] == 0:
        raise InputFileError(f"binarized split {prefix} is empty (0 sentences: binarized from an empty file); "
                             "binarize a file with text, or choose another split")


def warn_empty_sentences(prefix: str, dataset):
    """One warning per split holding sentences with no word (only the end-of-sentence token)."""
    sizes = getattr(dataset, "sizes", None)
    if sizes is None or prefix in _WARNED:
        return
    empty = np.flatnonzero(np.asarray(sizes) <= 1)
    if len(empty):
        _WARNED.add(prefix)
        logger.warning(f"{prefix}: {len(empty)} empty sentence(s), the first is line {int(empty[0]) + 1} of the text it "
                       "was binarized from (blank lines there?): remove them before fairseq-preprocess unless they "
                       "are meant (paragraph breaks of a language-model corpus)")


def install():
    if _STATE:
        return
    from fairseq.data import indexed_dataset

    def guard(fn, impl_arg):
        @functools.wraps(fn)
        def wrapper(path, *args, **kwargs):
            impl = kwargs.get("impl", args[0] if args else None) if impl_arg else None
            check_complete(path, impl)
            return fn(path, *args, **kwargs)

        return wrapper

    for name, impl_arg in (("dataset_exists", True), ("infer_dataset_impl", False)):
        original = getattr(indexed_dataset, name)
        _STATE[name] = original
        setattr(indexed_dataset, name, guard(original, impl_arg))

    make_dataset = indexed_dataset.make_dataset

    @functools.wraps(make_dataset)
    def checked_make_dataset(path, impl, *args, **kwargs):
        check_complete(path, impl)
        check_not_empty(path, impl)
        dataset = make_dataset(path, impl, *args, **kwargs)
        dictionary = kwargs.get("dictionary", args[1] if len(args) > 1 else None)
        if dataset is not None and dictionary is not None:  # a text split (not packed lattices)
            warn_empty_sentences(path, dataset)
        return dataset

    _STATE["make_dataset"] = make_dataset
    indexed_dataset.make_dataset = checked_make_dataset
