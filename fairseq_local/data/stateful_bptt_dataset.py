"""Contiguous stream batches for stateful truncated BPTT (Zaremba et al. 2014; parallel cells paper
Section 3.1): the token stream is cut into ``bsz`` equal rows, and window i of the dataset is
columns ``[i*bptt, (i+1)*bptt]`` of all rows (inputs = the first bptt columns, targets = the same
shifted by one), so row r of window i+1 continues row r of window i and the final recurrent state of
one batch is the right initial state of the next. Every dataset item is a whole batch.
"""
from typing import List, Optional

import torch
from fairseq.data import FairseqDataset


class StatefulBPTTDataset(FairseqDataset):
    """Windows of ``bptt`` steps over ``bsz`` parallel rows of one contiguous token stream.

    ``stream``: 1-D LongTensor (the corpus, line after line, each line ending in </s>).
    With data parallelism the global batch is ``bsz * num_shards`` rows and shard s sees rows
    ``[s*bsz, (s+1)*bsz)``; every shard gets the same number of windows.
    """

    def __init__(self, stream: torch.Tensor, bsz: int, bptt: int, pad: int, name: str = "train",
                 shard_id: int = 0, num_shards: int = 1):
        super().__init__()
        if bsz < 1 or bptt < 1:
            raise ValueError(f"stateful BPTT: batch size ({bsz}) and --tokens-per-sample ({bptt}) must be >= 1")
        global_bsz = bsz * num_shards
        row_len = stream.numel() // global_bsz
        if row_len < 2:
            raise ValueError(
                f"split {name}: {stream.numel()} tokens cannot fill {global_bsz} streams of at least "
                f"2 tokens; lower --batch-size"
            )
        self.stream, self.bsz, self.bptt, self.pad, self.name = stream, bsz, bptt, pad, name
        self.shard_id, self.num_shards = shard_id, num_shards
        rows = stream[: row_len * global_bsz].view(global_bsz, row_len)
        self.rows = rows[shard_id * bsz : (shard_id + 1) * bsz].contiguous()
        self.num_windows = (row_len - 1 + bptt - 1) // bptt  # the last window may be shorter
        self.sizes = torch.tensor(
            [min(bptt, row_len - 1 - i * bptt) for i in range(self.num_windows)]
        ).numpy()

    def rebatch(self, bsz: Optional[int] = None, bptt: Optional[int] = None,
                shard_id: int = 0, num_shards: int = 1) -> "StatefulBPTTDataset":
        return StatefulBPTTDataset(self.stream, bsz or self.bsz, bptt or self.bptt, self.pad,
                                   self.name, shard_id, num_shards)

    def __len__(self):
        return self.num_windows

    def __getitem__(self, i):
        start = i * self.bptt
        end = min(start + self.bptt, self.rows.size(1) - 1)
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
            "ntokens": B * T,
            # read by StatefulLanguageModelingTask to reset / continue the carried state
            "bptt_stream": self.name,
            "bptt_window": i,
        }


def concatenate_lines(dataset) -> torch.Tensor:
    """One contiguous LongTensor from an indexed dataset of lines (each already ends in </s>)."""
    if len(dataset) == 0:
        return torch.empty(0, dtype=torch.long)
    return torch.cat([dataset[i].long() for i in range(len(dataset))])
