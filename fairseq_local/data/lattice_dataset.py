"""Binarized word lattices and lattice-to-text pairs for fairseq.

On disk a split's source side is a fairseq indexed dataset (``{split}.{src}-{tgt}.{src}.bin/.idx``)
with one packed int vector per sentence (``Lattice.pack``)::

    [N, E, i_1..i_E, j_1..j_E, w_1..w_E, p_1..p_L]

(N characters, E edges e_{i:j} with word ids w, primary path as edge indices p) next to
``{split}.{src}-{tgt}.{src}.nchars.npy`` holding N per sentence (batching is by characters, as in
the paper).  The target side is what ``fairseq-preprocess`` writes.

``collate_lattices`` pads a batch into a :class:`LatticeBatch` of per-node tensors over node
positions 0..T (T = the longest sentence's N), K = the largest in-degree (out-degree) in the batch,
and returns ``{"lattice": LatticeBatch, "src_tokens", "src_lengths"}`` (a sample's ``net_input``):

* ``in_words / in_prev / in_mask`` ``B x (T+1) x K``: for node v_t, the word ids and start nodes of
  its incoming edges (ordered by start node, as in the paper) and a validity mask;
* ``out_words / out_next / out_mask``: the same for outgoing edges (backward encoder);
* ``src_tokens`` / ``src_lengths``: the primary path's word ids (padded on the left when
  ``left_pad``), read by word-level baselines and by fairseq's generator for length limits.
"""
from typing import List, NamedTuple, Sequence

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils
from torch import Tensor

from fairseq_local_core.lattice import unpack


class LatticeBatch(NamedTuple):
    """A batch of lattices as per-node tensors, ``B x (T+1) x K`` each (see the module docstring)."""

    in_words: Tensor  # word ids of the edges entering node t
    in_prev: Tensor  # their start nodes
    in_mask: Tensor  # which of the K slots hold an edge
    out_words: Tensor  # word ids of the edges leaving node t
    out_next: Tensor  # their end nodes
    out_mask: Tensor

    @classmethod
    def of(cls, value) -> "LatticeBatch":
        """``value`` as a LatticeBatch: fairseq's sample helpers (``move_to_cuda``) turn it into a plain tuple."""
        return value if isinstance(value, cls) else cls(*value)

    def to(self, device) -> "LatticeBatch":
        return LatticeBatch(*(t.to(device) for t in self))


class LatticeDataset(FairseqDataset):
    """Packed lattices (an indexed dataset or a list of 1-D tensors) with N per sentence as sizes."""

    def __init__(self, packed, sizes: np.ndarray):
        assert len(packed) == len(sizes), "one size (characters) per lattice"
        self.packed = packed
        self.sizes = np.asarray(sizes, dtype=np.int64)

    def __getitem__(self, index):
        return torch.as_tensor(np.asarray(self.packed[index]), dtype=torch.long)

    def __len__(self):
        return len(self.sizes)

    def num_tokens(self, index):
        return int(self.sizes[index])

    def size(self, index):
        return int(self.sizes[index])


def _pad_node_edges(node: np.ndarray, other: np.ndarray, words: np.ndarray, order_key: np.ndarray):
    """Sort edges by ``node`` then ``order_key``; return (node, slot within node, other end, word)."""
    order = np.lexsort((order_key, node))
    node, other, words = node[order], other[order], words[order]
    first = np.searchsorted(node, node, side="left")
    slot = np.arange(len(node)) - first
    return node, slot, other, words


def collate_lattices(lattices: Sequence[torch.Tensor], pad_idx: int, left_pad: bool = True, one_best: bool = False):
    """Pad packed lattices into the per-node tensors described in the module docstring."""
    unpacked = [unpack(x.numpy()) for x in lattices]
    if one_best:  # decode with the primary path as a chain lattice (Table 2 of the paper)
        unpacked = [(n, s[p], e[p], w[p], np.arange(len(p))) for n, s, e, w, p in unpacked]
    bsz = len(unpacked)
    T = max(u[0] for u in unpacked)
    in_groups, out_groups = [], []
    for n, s, e, w, _ in unpacked:
        in_groups.append(_pad_node_edges(e, s, w, s))  # incoming: by end node, slots by start
        out_groups.append(_pad_node_edges(s, e, w, s))  # outgoing: by start node
    tensors = []
    for groups in (in_groups, out_groups):
        # an empty lattice (an empty fairseq-interactive input line) has no edges
        K = max((int(g[1].max()) + 1 for g in groups if len(g[1])), default=1)
        words = torch.full((bsz, T + 1, K), pad_idx, dtype=torch.long)
        nodes = torch.zeros((bsz, T + 1, K), dtype=torch.long)
        mask = torch.zeros((bsz, T + 1, K), dtype=torch.bool)
        for b, (node, slot, oth, wid) in enumerate(groups):
            node, slot = torch.from_numpy(node), torch.from_numpy(slot)
            words[b, node, slot] = torch.from_numpy(wid)
            nodes[b, node, slot] = torch.from_numpy(oth)
            mask[b, node, slot] = True
        tensors += [words, nodes, mask]
    paths = [torch.from_numpy(w[p]) for _, _, _, w, p in unpacked]
    return {"lattice": LatticeBatch(*tensors),
            "src_tokens": data_utils.collate_tokens(paths, pad_idx, left_pad=left_pad),
            "src_lengths": torch.tensor([len(p) for p in paths], dtype=torch.long)}


class LatticePairDataset(FairseqDataset):
    """Source lattices + target sentences (target handled as in fairseq's LanguagePairDataset)."""

    def __init__(self, src: LatticeDataset, src_dict, tgt=None, tgt_sizes=None, tgt_dict=None,
                 left_pad_source=True, shuffle=True, one_best=False):
        if tgt is not None:
            assert len(src) == len(tgt), "source and target must have the same number of sentences"
        self.src, self.tgt = src, tgt
        self.src_dict, self.tgt_dict = src_dict, tgt_dict
        self.src_sizes = src.sizes
        self.tgt_sizes = np.asarray(tgt_sizes, dtype=np.int64) if tgt_sizes is not None else None
        self.left_pad_source, self.shuffle, self.one_best = left_pad_source, shuffle, one_best

    @property
    def sizes(self):
        if self.tgt_sizes is None:
            return self.src_sizes
        return np.vstack((self.src_sizes, self.tgt_sizes)).T

    def __getitem__(self, index):
        item = {"id": index, "source": self.src[index]}
        if self.tgt is not None:
            item["target"] = self.tgt[index]
        return item

    def __len__(self):
        return len(self.src)

    def collater(self, samples: List[dict], pad_to_length=None):
        if len(samples) == 0:
            return {}
        pad = self.src_dict.pad()
        net_input = collate_lattices([s["source"] for s in samples], pad, self.left_pad_source, self.one_best)
        batch = {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "net_input": net_input,
        }
        if self.tgt is not None:
            tpad, teos = self.tgt_dict.pad(), self.tgt_dict.eos()
            tgts = [s["target"] for s in samples]
            length = (pad_to_length or {}).get("target")  # the shape plan's declared length (graphs)
            batch["target"] = data_utils.collate_tokens(tgts, tpad, teos, left_pad=False, pad_to_length=length)
            net_input["prev_output_tokens"] = data_utils.collate_tokens(
                tgts, tpad, teos, left_pad=False, move_eos_to_beginning=True, pad_to_length=length)
            batch["ntokens"] = sum(len(t) for t in tgts)
        else:
            batch["ntokens"] = int(net_input["src_lengths"].sum())
        return batch

    def num_tokens(self, index):
        return max(self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def num_tokens_vec(self, indices):
        sizes = self.src_sizes[indices]
        if self.tgt_sizes is not None:
            sizes = np.maximum(sizes, self.tgt_sizes[indices])
        return sizes

    def size(self, index):
        return (self.src_sizes[index], self.tgt_sizes[index] if self.tgt_sizes is not None else 0)

    def ordered_indices(self):
        if self.shuffle:
            indices = np.random.permutation(len(self)).astype(np.int64)
        else:
            indices = np.arange(len(self), dtype=np.int64)
        if self.tgt_sizes is not None:
            indices = indices[np.argsort(self.tgt_sizes[indices], kind="mergesort")]
        return indices[np.argsort(self.src_sizes[indices], kind="mergesort")]

    @property
    def supports_prefetch(self):
        return False

    def filter_indices_by_size(self, indices, max_sizes):
        return data_utils.filter_paired_dataset_indices_by_size(
            self.src_sizes, self.tgt_sizes, indices, max_sizes)


def load_lattice_dataset(prefix: str) -> LatticeDataset:
    """Open ``prefix.bin/.idx`` + ``prefix.nchars.npy`` written by scripts/preprocess_lattices.py."""
    from fairseq.data import indexed_dataset

    packed = indexed_dataset.make_dataset(prefix, impl="mmap")
    if packed is None:
        raise FileNotFoundError(f"lattice dataset not found: {prefix}.bin/.idx")
    return LatticeDataset(packed, np.load(prefix + ".nchars.npy"))


def pack_lattices(lattices, src_dict) -> List[torch.Tensor]:
    """Lattices -> packed tensors with word ids from ``src_dict`` (unknown words -> unk).

    ``None`` stands for an empty sentence: the empty lattice ``[0, 0]`` (no characters, no edges),
    whose primary path is empty too."""
    return [torch.zeros(2, dtype=torch.long) if lat is None
            else torch.from_numpy(lat.pack([src_dict.index(w) for w in lat.words()])) for lat in lattices]


def lattice_dataset_from(lattices, src_dict) -> LatticeDataset:
    return LatticeDataset(pack_lattices(lattices, src_dict),
                          np.array([0 if lat is None else lat.n_chars for lat in lattices], dtype=np.int64))


__all__ = ["LatticeBatch", "LatticeDataset", "LatticePairDataset", "collate_lattices", "load_lattice_dataset",
           "pack_lattices", "lattice_dataset_from"]
