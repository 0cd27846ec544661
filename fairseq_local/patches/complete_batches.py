"""Keep every sentence in fairseq's batches (fairseq issues #5036, #5351).

``fairseq.data.data_utils.batch_by_size`` drops the last batch when its size is not a multiple of
``--required-batch-size-multiple`` (default 8): a 61-sentence test set yields 56 hypotheses, a
5-sentence one none at all, and validation loss and ``fairseq-generate``'s BLEU are computed on
what is left, without a warning.  The Cython helpers it calls (``batch_by_size_vec``,
``batch_by_size_fn`` and ``batch_fixed_shapes_fast`` in ``data_utils_fast``) partition the indices
completely; the loss is that one line of ``batch_by_size`` alone.

:func:`install` wraps ``batch_by_size`` so that the sentences fairseq would drop come back as a
final batch (batched again with the same ``--max-tokens`` / ``--batch-size`` limits, multiple 1).
Every entry point goes through it: ``FairseqDataset.batch_by_size`` (hence
``FairseqTask.get_batch_iterator``: fairseq-train's training and validation, fairseq-validate,
fairseq-generate, fairseq-interactive, fairseq-eval-lm, Hydra) looks the function up on the
``data_utils`` module at call time, and modules that imported it by name before the plugin was
loaded get the wrapper too.  The multiple only aligns batch sizes for fp16 tensor cores; a smaller
last batch is correct in training as well (distributed ranks shard batches, not sentences).
"""
import functools
import logging
import sys

import numpy as np

logger = logging.getLogger(__name__)

_MARK = "_fairseq_local_complete_batches"


def complete(batch_by_size):
    """``batch_by_size`` with the same signature that never leaves an index out of its batches."""

    @functools.wraps(batch_by_size)
    def batch_by_size_keeping_all(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                                  max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        # materialise iterables once (fairseq accepts any iterable of indices)
        if not isinstance(indices, np.ndarray):
            indices = np.fromiter(indices, dtype=np.int64, count=-1)
        if num_tokens_vec is not None and not isinstance(num_tokens_vec, np.ndarray):
            num_tokens_vec = np.fromiter(num_tokens_vec, dtype=np.int64, count=-1)
        if len(indices) == 0:  # fairseq would fail on b[-1] (every sentence filtered out, say)
            return []
        batches = batch_by_size(indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                                required_batch_size_multiple, fixed_shapes)
        n_batched = sum(len(b) for b in batches)
        if n_batched == len(indices):
            return batches
        batched = np.concatenate([np.asarray(b, dtype=indices.dtype) for b in batches]) if batches else indices[:0]
        if np.array_equal(batched, indices[:n_batched]):  # fairseq drops a tail of the ordered indices
            left = np.zeros(len(indices), dtype=bool)
            left[n_batched:] = True
        else:
            left = ~np.isin(indices, batched)
        rest = batch_by_size(indices[left], num_tokens_fn,
                             None if num_tokens_vec is None else num_tokens_vec[left],
                             max_tokens, max_sentences, 1, fixed_shapes)
        logger.debug(f"kept {int(left.sum())} sentences fairseq's batching would drop "
                     f"(--required-batch-size-multiple {required_batch_size_multiple})")
        return list(batches) + list(rest)

    setattr(batch_by_size_keeping_all, _MARK, True)
    return batch_by_size_keeping_all


def install():
    """Replace ``fairseq.data.data_utils.batch_by_size`` (and every module-level alias of it)."""
    from fairseq.data import data_utils

    original = data_utils.batch_by_size
    if getattr(original, _MARK, False):
        return
    wrapped = complete(original)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("batch_by_size") is original:
            setattr(module, "batch_by_size", wrapped)
    data_utils.batch_by_size = wrapped
