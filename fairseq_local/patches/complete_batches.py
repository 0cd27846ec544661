"""Keep every sentence in fairseq's batches (fairseq issues #5036, #5351), for our models and tasks.

What it changes: ``fairseq.data.data_utils.batch_by_size`` (and its module-level aliases),
``FairseqTask.get_batch_iterator`` (a layer of :mod:`fairseq_local.hook_points`) and
``FairseqTask.filter_indices_by_size``.  For whom: the
batches of a task of ours or of a task a model of ours was built for (:mod:`fairseq_local.ownership`:
fairseq builds the model before it asks for batches); every other call is fairseq's code, so
fairseq's own models batch, train and score exactly as in fairseq.  Where fairseq fails for every
model, the one-line messages below apply to every model and fit the model that hit them: a
``--max-tokens`` smaller than a sentence and a split left empty by the length filter name options
every model has; a sentence longer than the model's positions keeps fairseq's advice (skip or
shorten it) for a model with learned position embeddings, and names the options that raise the
limits for a model without them (fairseq's ``lstm``, our RNN, lattice and genCNN models).  Why:

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

A ``--max-tokens`` smaller than a sentence is one line naming the option and the length it needs:
fairseq-train skips the training sentences longer than ``--max-tokens`` (with a warning) and
stops with "The dataset is empty" after a traceback when that is all of them
(``FairseqTask.filter_indices_by_size`` is wrapped for that), and validation, ``fairseq-generate``
and ``-eval-lm`` fail in the Cython batcher ("Sentences lengths should not exceed max_tokens").
"""
import contextlib
import functools
import logging
import sys

import numpy as np
from fairseq.data import data_utils
from fairseq.modules import LearnedPositionalEmbedding
from fairseq.tasks import FairseqTask

from fairseq_local import hook_points, ownership
from fairseq_local_core.errors import ConfigError

logger = logging.getLogger(__name__)

_MARK = "_fairseq_local_complete_batches"
_MAX_TOKENS = "_fairseq_local_max_tokens"  # dataset attribute: the --max-tokens of its batch iterator
_OURS = []  # one entry per batch iterator being made: whether its task is ours


@contextlib.contextmanager
def batching_for(ours: bool):
    """Within this block ``batch_by_size`` keeps every sentence when ``ours`` (fairseq's otherwise)."""
    _OURS.append(bool(ours))
    try:
        yield
    finally:
        _OURS.pop()


def _for_ours(make_batches, ours: bool):
    """A lazy batch sampler (``--rebuild-batches``) that batches as :func:`batching_for` says."""
    @functools.wraps(make_batches)
    def batches(*args, **kwargs):
        with batching_for(ours):
            return make_batches(*args, **kwargs)

    return batches


def _sizes(indices, num_tokens_fn, num_tokens_vec):
    if num_tokens_vec is not None:
        return np.asarray(num_tokens_vec)
    return np.fromiter((num_tokens_fn(i) for i in indices), dtype=np.int64, count=len(indices))


def learned_positions(model) -> bool:
    """True when ``model`` learned position embeddings (its positions cannot be raised after training)."""
    return any(isinstance(m, LearnedPositionalEmbedding) for m in model.modules())


def too_long(max_tokens, sizes) -> ConfigError:
    """A --max-tokens smaller than some of the ``sizes`` (tokens per sentence)."""
    longest, over = int(sizes.max()), int((sizes > max_tokens).sum())
    return ConfigError(f"--max-tokens {max_tokens} is smaller than {over} of the {len(sizes)} sentences of this "
                       f"split (the longest has {longest} tokens): raise --max-tokens (validation: --max-tokens-valid) "
                       f"to at least {longest}")


def complete(batch_by_size):
    """``batch_by_size`` with the same signature that never leaves an index out of its batches."""

    @functools.wraps(batch_by_size)
    def batch_by_size_keeping_all(indices, num_tokens_fn, num_tokens_vec=None, max_tokens=None,
                                  max_sentences=None, required_batch_size_multiple=1, fixed_shapes=None):
        ours = bool(_OURS and _OURS[-1])  # fairseq's own models and tasks: fairseq's batches
        if ours:  # materialise iterables once (fairseq accepts any iterable of indices)
            if not isinstance(indices, np.ndarray):
                indices = np.fromiter(indices, dtype=np.int64, count=-1)
            if num_tokens_vec is not None and not isinstance(num_tokens_vec, np.ndarray):
                num_tokens_vec = np.fromiter(num_tokens_vec, dtype=np.int64, count=-1)
            if len(indices) == 0:  # fairseq would fail on b[-1] (every sentence filtered out, say)
                return []
        try:
            batches = batch_by_size(indices, num_tokens_fn, num_tokens_vec, max_tokens, max_sentences,
                                    required_batch_size_multiple, fixed_shapes)
        except AssertionError as err:  # data_utils_fast: "Sentences lengths should not exceed max_tokens=N"
            if "should not exceed max_tokens" not in str(err) or max_tokens is None:
                raise
            raise too_long(int(max_tokens), _sizes(np.asarray(indices), num_tokens_fn, num_tokens_vec)) from None
        if not ours:
            return batches
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


def _install_filter():
    """fairseq-train: training sentences longer than --max-tokens are skipped; all of them: one line."""
    filter_by_size = FairseqTask.filter_indices_by_size
    if getattr(filter_by_size, _MARK, False):
        return

    def get_batch_iterator(get_iterator, self, dataset, *args, **kwargs):
        max_tokens = kwargs.get("max_tokens", args[0] if args else None)
        try:
            setattr(dataset, _MAX_TOKENS, max_tokens)
        except AttributeError:  # pragma: no cover - a dataset with __slots__
            pass
        ours = ownership.task_is_ours(self)
        with batching_for(ours):
            iterator = get_iterator(self, dataset, *args, **kwargs)
        if callable(getattr(iterator, "batch_sampler", None)):  # --rebuild-batches: batched at each epoch
            iterator.batch_sampler = _for_ours(iterator.batch_sampler, ours)
        return iterator

    @functools.wraps(filter_by_size)
    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        try:
            kept = filter_by_size(self, indices, dataset, max_positions, ignore_invalid_inputs)
        except Exception as e:  # fairseq's bare Exception for a sentence longer than the model's positions
            model = ownership.model_of(self)
            if not str(e).startswith("Size of sample #") or model is None or learned_positions(model):
                raise  # fairseq's message: its advice (skip or shorten the sentence) fits learned positions
            raise ConfigError(f"{str(e).split(', skip this')[0]} (source and target tokens; --max-source-positions "
                              f"/ --max-target-positions): {type(model).__name__} has no learned position embeddings, "
                              "so raise them: --max-source-positions N --max-target-positions N (fairseq-generate: "
                              "also --model-overrides \"{'max_source_positions': N, 'max_target_positions': N}\"); "
                              "or leave that sentence out with --skip-invalid-size-inputs-valid-test") from None
        if len(indices) == 0 or len(kept) > 0:
            return kept
        max_tokens = getattr(dataset, _MAX_TOKENS, None)
        sizes = np.array([dataset.num_tokens(i) for i in indices], dtype=np.int64)
        if max_tokens is not None and int(sizes.min()) > max_tokens:
            raise too_long(int(max_tokens), sizes)
        raise ConfigError(f"every one of the {len(indices)} sentences of this split is longer than the model allows "
                          f"(max positions {max_positions}; the shortest has {int(sizes.min())} tokens): raise the "
                          "model's --max-source-positions / --max-target-positions (or --tokens-per-sample)")

    setattr(filter_indices_by_size, _MARK, True)
    hook_points.add(hook_points.GET_BATCH_ITERATOR, get_batch_iterator)
    FairseqTask.filter_indices_by_size = filter_indices_by_size


def install():
    """Replace ``fairseq.data.data_utils.batch_by_size`` (and every module-level alias of it)."""
    _install_filter()

    original = data_utils.batch_by_size
    if getattr(original, _MARK, False):
        return
    wrapped = complete(original)
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("batch_by_size") is original:
            setattr(module, "batch_by_size", wrapped)
    data_utils.batch_by_size = wrapped
