"""Few batch shapes by construction: the batching of ``--rnn-impl cuda-graphs``.

A CUDA graph is specialised to its shapes, so a captured module keeps one graph (a *variant*) per
padded (length, batch) shape it meets.  fairseq's ``batch_by_size`` makes batches whose length and
size vary freely (an IWSLT-like epoch at ``--max-tokens 4000`` meets about a hundred distinct
padded shapes per module, and the shapes of epoch 2 are not those of epoch 1 in general).  Here the
shapes are declared before the first update:

* **The plan** (:func:`make_plan`): K length buckets ``L_1 < ... < L_K`` on a grid of three steps
  per octave (8, 10, 12, 16, 20, 24, 32, 40, 48, 64, ...: a bucket is at most a third longer than
  the one below it), from the bucket of the shortest sentence to the bucket of the longest one
  (at most the model's max positions), each with a fixed batch size ``B_k = --max-tokens // L_k``
  (at most ``--batch-size``; a multiple of ``--required-batch-size-multiple`` when it is larger
  than that), so ``B_k * L_k`` is about ``--max-tokens``.
* **The batches** (:func:`plan_batches`): every sentence goes into the smallest bucket that holds
  it (its length is fairseq's ``num_tokens``: the longer of source and target), in fairseq's order
  of the indices (sorted by length, ties in the order of the epoch's seed), and each bucket is cut
  into batches of ``B_k`` sentences, its last batch smaller (the graphs path pads it to ``B_k``:
  ``cuda_graphs.padded_shape``).  fairseq's ``EpochBatchIterator`` shuffles the order of the
  batches with the epoch's seed, as it does for ``batch_by_size``'s batches.
* **Nothing is dropped or truncated.**  A sentence longer than ``L_K`` (a validation or test
  sentence longer than every training sentence) gets a bucket of its own grid length, added to the
  plan with a warning that says so (:meth:`ShapePlan.extended`).

The cost is padding: the sentences of a bucket are padded to ``L_k`` and a bucket's last batch to
``B_k`` rows (on an IWSLT-like epoch at ``--max-tokens 4000``, K = 15 and about 17 % of the source
and target positions are padding, against 3 % in ``batch_by_size``'s batches run eagerly and 40 %
in those batches padded to ``cuda_graphs``' generic time and batch buckets).
"""
import inspect
import logging
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

logger = logging.getLogger(__name__)

STEPS_PER_OCTAVE = (4, 5, 6)  # the grid: m * 2^e, m in STEPS_PER_OCTAVE, e >= 1
MIN_LENGTH = 8


def grid_length(n: int) -> int:
    """The smallest grid length ``m * 2^e >= n`` (m in :data:`STEPS_PER_OCTAVE`, at least
    :data:`MIN_LENGTH`)."""
    n = max(int(n), MIN_LENGTH)
    e = max(1, n.bit_length() - 3)
    while True:
        for m in STEPS_PER_OCTAVE:
            if m << e >= n:
                return m << e
        e += 1


def grid_lengths(shortest: int, longest: int) -> List[int]:
    """Every grid length from the one that holds ``shortest`` to the one that holds ``longest``."""
    out = [grid_length(shortest)]
    while out[-1] < longest:
        out.append(grid_length(out[-1] + 1))
    return out


def batch_size_for(length: int, max_tokens: Optional[int], max_sentences: Optional[int],
                   multiple: int = 1) -> int:
    """``B`` of a bucket of ``length``: ``max_tokens // length`` (at least 1), at most
    ``max_sentences``, rounded down to a multiple of ``multiple`` when larger than it."""
    if max_tokens is None and max_sentences is None:
        raise ValueError("a shape plan needs --max-tokens or --batch-size")
    b = max(1, int(max_tokens) // int(length)) if max_tokens is not None else int(max_sentences)
    if max_sentences is not None:
        b = min(b, int(max_sentences))
    if multiple > 1 and b > multiple:
        b -= b % multiple
    return b


class ShapePlan(NamedTuple):
    """K declared (length, batch) shapes, lengths increasing (batch sizes then do not increase).
    ``beam``: the beam of the generation that uses the plan (its one-token steps have ``B * beam``
    rows); ``max_tokens``, ``max_sentences``, ``multiple``: what made the batch sizes (for the
    buckets :meth:`extended` adds)."""

    shapes: Tuple[Tuple[int, int], ...]
    max_tokens: Optional[int] = None
    max_sentences: Optional[int] = None
    multiple: int = 1
    beam: int = 1

    @property
    def lengths(self) -> np.ndarray:
        return np.array([length for length, _ in self.shapes], dtype=np.int64)

    def bucket_of(self, sizes) -> np.ndarray:
        """The index of the smallest bucket that holds each of ``sizes`` (K where none does)."""
        return np.searchsorted(self.lengths, np.asarray(sizes, dtype=np.int64), side="left")

    def extended(self, longest: int) -> "ShapePlan":
        """The plan with buckets of their own grid length for sentences up to ``longest`` tokens
        (itself if it holds them already), saying so in the log."""
        top = self.shapes[-1][0]
        if longest <= top:
            return self
        extra = [(n, batch_size_for(n, self.max_tokens, self.max_sentences, self.multiple))
                 for n in grid_lengths(top + 1, longest)]
        logger.warning(f"shape plan: a sentence of {longest} tokens is longer than the largest declared bucket "
                       f"({top}): batched in {len(extra)} more bucket(s) of their own length "
                       f"({', '.join(f'{n}x{b}' for n, b in extra)}), nothing truncated")
        return self._replace(shapes=self.shapes + tuple(extra))

    def describe(self) -> str:
        return (f"shape plan: K={len(self.shapes)} batch shapes (length x batch) "
                + " ".join(f"{n}x{b}" for n, b in self.shapes))


def make_plan(max_tokens: Optional[int], sizes: Sequence[int], max_positions: Optional[int] = None,
              max_sentences: Optional[int] = None, multiple: int = 1) -> ShapePlan:
    """The plan of a split whose sentences have ``sizes`` tokens (fairseq's ``num_tokens``):
    buckets from the grid length of the shortest to the grid length of the longest (the model's
    ``max_positions`` when that is smaller: fairseq filters longer sentences)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) == 0:
        raise ValueError("a shape plan needs at least one sentence")
    longest = int(sizes.max())
    if max_positions is not None:
        longest = min(longest, int(max_positions))
    shortest = min(int(sizes.min()), longest)
    shapes = tuple((n, batch_size_for(n, max_tokens, max_sentences, multiple)) for n in grid_lengths(shortest, longest))
    return ShapePlan(shapes, max_tokens, max_sentences, multiple)


def plan_batches(indices: np.ndarray, sizes: np.ndarray, plan: ShapePlan) -> Tuple[List[np.ndarray], ShapePlan]:
    """``indices`` (in fairseq's order) cut into the plan's batches: each in the smallest bucket
    that holds its ``sizes`` entry, ``B_k`` per batch, the last batch of a bucket smaller.  Returns
    the batches (bucket by bucket) and the plan, extended where a sentence is longer than every
    bucket (:meth:`ShapePlan.extended`)."""
    indices, sizes = np.asarray(indices, dtype=np.int64), np.asarray(sizes, dtype=np.int64)
    if len(indices):
        plan = plan.extended(int(sizes.max()))
    bucket = plan.bucket_of(sizes)
    order = np.argsort(bucket, kind="stable")  # bucket by bucket, fairseq's order inside each
    bucket = bucket[order]
    rank = np.arange(len(bucket)) - np.searchsorted(bucket, bucket, side="left")
    chunk = rank // np.array([b for _, b in plan.shapes], dtype=np.int64)[bucket]
    cuts = np.flatnonzero((np.diff(bucket) != 0) | (np.diff(chunk) != 0)) + 1
    batches = np.split(indices[order], cuts) if len(indices) else []
    return batches, plan


def batch_length(plan: ShapePlan, sizes: Sequence[int]) -> int:
    """The declared length of a batch whose sentences have ``sizes`` tokens: the bucket of its
    longest (a collater pads source and target to it)."""
    k = int(plan.bucket_of([int(np.max(sizes))])[0])
    if k >= len(plan.shapes):
        raise ValueError(f"a sentence of {int(np.max(sizes))} tokens is longer than every bucket of the plan")
    return plan.shapes[k][0]


def padding_fraction(batch_sizes: Sequence[Tuple[int, int]], real_tokens: int) -> float:
    """The fraction of the positions of batches of ``(length, rows)`` that are padding."""
    total = sum(int(n) * int(b) for n, b in batch_sizes)
    return 1.0 - real_tokens / total if total else 0.0


def dataset_sizes(dataset, indices) -> np.ndarray:
    """fairseq's ``num_tokens`` of the ``indices`` of ``dataset`` (the longer of source and target)."""
    indices = np.asarray(indices, dtype=np.int64)
    vec = getattr(dataset, "num_tokens_vec", None)
    if vec is not None:
        try:
            return np.asarray(vec(indices), dtype=np.int64).reshape(-1)
        except NotImplementedError:  # FairseqDataset's default
            pass
    return np.fromiter((dataset.num_tokens(int(i)) for i in indices), dtype=np.int64, count=len(indices))


def collate_to_plan(collater, dataset, plan: ShapePlan, samples):
    """``collater(samples)`` with source and target padded to the batch's declared length
    (:func:`batch_length`) where the collater takes fairseq's ``pad_to_length``
    (``LanguagePairDataset``); other collaters pad to the batch's longest sentence (the captured
    loops then pad the time axis: ``cuda_graphs.padded_shape``)."""
    if not samples or "pad_to_length" not in inspect.signature(collater).parameters:
        return collater(samples)
    length = batch_length(plan, dataset_sizes(dataset, [s["id"] for s in samples]))
    return collater(samples, pad_to_length={"source": length, "target": length})


__all__ = ["ShapePlan", "make_plan", "plan_batches", "batch_length", "grid_length", "grid_lengths", "batch_size_for",
           "padding_fraction", "dataset_sizes", "collate_to_plan"]
