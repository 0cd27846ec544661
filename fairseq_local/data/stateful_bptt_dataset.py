"""Contiguous stream batches for stateful truncated BPTT (Zaremba et al. 2014; parallel cells paper
Section 3.1): the token stream is cut into ``bsz`` rows, and window i of the dataset is columns
``[i*bptt, (i+1)*bptt]`` of all rows (inputs = the first bptt columns, targets = the same shifted by
one), so row r of window i+1 continues row r of window i and the final recurrent state of one batch
is the right initial state of the next. Every dataset item is a whole batch.

Two layouts of the rows:

* training (Zaremba's reader): ``bsz`` equal, disjoint rows; the ``numel % bsz`` tail tokens and
  each row's first token are never targets (as in the paper's setup);
* ``predict_all`` (validation, ``fairseq-eval-lm``): every token of the split after the first is a
  target exactly once.  The N - 1 targets are dealt into ``bsz`` rows, the first ``(N - 1) % bsz``
  rows one target longer, and consecutive rows overlap by one token (row r's last target is row
  r+1's first input), so a row's first target is predicted from the token before it.  The shorter
  rows end in one padding target (ignored by the criteria and by ``fairseq-eval-lm``; ``ntokens``
  counts real targets only).  With ``bsz`` 1 this is the whole stream read once.

Variable-length windows (AWD-LSTM, Merity et al. 2018, Section 4.1): ``window_lengths`` replaces the
fixed ``bptt`` split of the columns by the given lengths (:func:`variable_bptt_lengths` draws them
as AWD-LSTM does); each batch then reports its length for the learning-rate rescaling.
"""
from typing import List, Optional, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset

from fairseq_local_core.errors import ConfigError


class StatefulBPTTDataset(FairseqDataset):
    """Windows of ``bptt`` steps over ``bsz`` parallel rows of one contiguous token stream.

    ``stream``: 1-D LongTensor (the corpus, line after line, each line ending in </s>).
    With data parallelism the global batch is ``bsz * num_shards`` rows and shard s sees rows
    ``[s*bsz, (s+1)*bsz)``; every shard gets the same number of windows.  ``predict_all``: the
    evaluation layout (see the module doc).  ``window_lengths``: the windows' lengths (summing to
    the targets per row) instead of ``bptt`` each.
    """

    def __init__(self, stream: torch.Tensor, bsz: int, bptt: int, pad: int, name: str = "train",
                 shard_id: int = 0, num_shards: int = 1, predict_all: bool = False,
                 window_lengths: Optional[Sequence[int]] = None):
        super().__init__()
        if bsz < 1 or bptt < 1:
            raise ConfigError(f"stateful BPTT: batch size ({bsz}) and --tokens-per-sample ({bptt}) must be >= 1")
        global_bsz = bsz * num_shards
        n = stream.numel()
        if (n - 1 if predict_all else n) // global_bsz < (1 if predict_all else 2):
            raise ConfigError(
                f"split {name}: {n} tokens cannot fill {global_bsz} streams of at least "
                f"2 tokens; lower --batch-size"
            )
        self.stream, self.bsz, self.bptt, self.pad, self.name = stream, bsz, bptt, pad, name
        self.shard_id, self.num_shards, self.predict_all = shard_id, num_shards, predict_all
        rows = self._all_rows(global_bsz)
        self.rows = rows[shard_id * bsz : (shard_id + 1) * bsz].contiguous()
        n_targets = rows.size(1) - 1
        if window_lengths is None:
            num_windows = (n_targets + bptt - 1) // bptt  # the last window may be shorter
            self.sizes = (n_targets - torch.arange(num_windows) * bptt).clamp(max=bptt).numpy()
        else:
            self.sizes = np.asarray(window_lengths, dtype=np.int64)
            if self.sizes.ndim != 1 or (self.sizes < 1).any() or int(self.sizes.sum()) != n_targets:
                raise ValueError(f"split {name}: window lengths must be >= 1 and sum to the {n_targets} "
                                 f"targets of a row (got {self.sizes.size} summing to {int(self.sizes.sum())})")
        self.window_lengths = window_lengths
        self.num_windows = len(self.sizes)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    def _all_rows(self, global_bsz: int) -> torch.Tensor:
        """The ``global_bsz`` rows of the stream, one per line (padded at the end where shorter)."""
        stream, n = self.stream, self.stream.numel()
        if not self.predict_all:  # Zaremba's reader: disjoint equal rows, the tail dropped
            row_len = n // global_bsz
            return stream[: row_len * global_bsz].view(global_bsz, row_len)
        per_row, longer = divmod(n - 1, global_bsz)  # targets per row; rows [0, longer) get one more
        r = torch.arange(global_bsz)
        n_targets = per_row + (r < longer).long()
        starts = r * per_row + r.clamp(max=longer)  # row r+1 starts at row r's last target
        cols = torch.arange(per_row + (longer > 0) + 1)
        index = (starts.unsqueeze(1) + cols).clamp(max=n - 1)
        return stream[index].masked_fill(cols > n_targets.unsqueeze(1), self.pad)

    @property
    def targets_per_row(self) -> int:
        return int(self.sizes.sum())

    def rebatch(self, bsz: Optional[int] = None, bptt: Optional[int] = None, shard_id: int = 0,
                num_shards: int = 1, predict_all: Optional[bool] = None,
                window_lengths: Optional[Sequence[int]] = None) -> "StatefulBPTTDataset":
        """A copy with other rows / windows; ``window_lengths`` is kept only when the rows stay the same
        (the same batch size and layout), otherwise given anew or fixed ``bptt`` windows."""
        predict_all = self.predict_all if predict_all is None else predict_all
        same_rows = (bsz or self.bsz) * num_shards == self.bsz * self.num_shards and predict_all == self.predict_all
        if window_lengths is None and same_rows and bptt is None:
            window_lengths = self.window_lengths
        return StatefulBPTTDataset(self.stream, bsz or self.bsz, bptt or self.bptt, self.pad, self.name,
                                   shard_id, num_shards, predict_all, window_lengths)

    def __len__(self):
        return self.num_windows

    def __getitem__(self, i):
        start = int(self.starts[i])
        end = start + int(self.sizes[i])
        return i, self.rows[:, start:end].contiguous(), self.rows[:, start + 1 : end + 1].contiguous()

    def num_tokens(self, index):
        return int(self.sizes[index]) * self.bsz

    def size(self, index):
        return int(self.sizes[index])

    @property
    def supports_prefetch(self):
        return False

    def collater(self, items: List):
        assert len(items) == 1, "every item of a StatefulBPTTDataset is a whole batch"
        i, src, tgt = items[0]
        B, T = src.shape
        first_row = self.shard_id * self.bsz
        return {
            "id": torch.arange(first_row, first_row + B),
            "net_input": {"src_tokens": src, "src_lengths": torch.full((B,), T, dtype=torch.long)},
            "target": tgt,
            "nsentences": B,
            "ntokens": int(tgt.ne(self.pad).sum()),  # the evaluation layout pads a shorter row's end
            # read by StatefulLanguageModelingTask to reset / continue the carried state
            "bptt_stream": self.name,
            "bptt_window": i,
        }


def variable_bptt_lengths(total: int, bptt: int, rng: np.random.RandomState, full_prob: float = 0.95,
                          std: float = 5.0, min_len: int = 5, max_extra: int = 40) -> np.ndarray:
    """Window lengths covering ``total`` targets as AWD-LSTM draws them (Merity et al. 2018,
    Section 4.1): the base length is ``bptt`` with probability ``full_prob``, else ``bptt / 2``;
    ``seq_len = max(min_len, int(N(base, std)))``, at most ``bptt + max_extra``; the last window
    is cut to what is left.  All draws are made at once (``total // min_len + 1`` is enough)."""
    n = total // min_len + 1
    base = np.where(rng.random_sample(n) < full_prob, float(bptt), bptt / 2.0)
    lengths = np.maximum(min_len, rng.normal(base, std).astype(np.int64))  # int(): towards zero
    lengths = np.minimum(lengths, bptt + max_extra)
    ends = np.cumsum(lengths)
    count = int(np.searchsorted(ends, total)) + 1  # the first window reaching the total is the last
    lengths = lengths[:count].copy()
    lengths[-1] -= int(ends[count - 1]) - total
    return lengths


def concatenate_lines(dataset) -> torch.Tensor:
    """One contiguous LongTensor from an indexed dataset of lines (each already ends in </s>)."""
    if len(dataset) == 0:
        return torch.empty(0, dtype=torch.long)
    return torch.cat([dataset[i].long() for i in range(len(dataset))])
