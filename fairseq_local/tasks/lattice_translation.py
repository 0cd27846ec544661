"""``--task lattice_translation``: translate word lattices (Su et al., AAAI 2017).

Data directories come from ``scripts/preprocess_lattices.py``: ``dict.{src}.txt`` (words over
lattice edges), ``dict.{tgt}.txt``, per split the source lattices ``{split}.{src}-{tgt}.{src}``
(+ ``.nchars.npy``) and the target exactly as ``fairseq-preprocess`` writes it.  Batches are made
by character length.  The paper's length filter (70 characters, 50 words) belongs to data
preparation and applies to the training pairs only (``scripts/recipes/lattice_zh_en_small.sh``);
``--max-source-positions``/``--max-target-positions`` would also drop dev and test sentences.
``fairseq-interactive`` reads what the hub reads: raw Chinese, whose lattices it builds on the fly
with ``--lattice-segmenters`` (the same segmenters as scripts/build_lattices.py; the source side
skips ``--tokenizer``/``--bpe``, which apply to the target only), or lines in the lattice text
format; an empty input line gets an empty translation, and a line it cannot read stops it with
one line naming the input line.  ``--lattice-one-best`` replaces every lattice by its primary path
as a chain (the paper's Table 2 analysis).
"""
import os
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_local_core.lattice import SEGMENTERS, LatticeBuilder, read_input, unpack
from fairseq_local.data.lattice_dataset import (
    LatticeBatch,
    LatticeDataset,
    LatticePairDataset,
    collate_lattices,
    lattice_dataset_from,
    load_lattice_dataset,
)
from fairseq_local.data.text_input import input_where, lowercase_input
from fairseq_local_core.errors import ConfigError, InputFileError


@dataclass
class LatticeTranslationConfig(TranslationConfig):
    lattice_segmenters: str = field(
        default="jieba,thulac,snownlp",
        metadata={"help": "comma-separated segmenters that build lattices from raw input (fairseq-interactive); "
                          "the first gives the primary path"})
    lattice_one_best: bool = field(
        default=False, metadata={"help": "replace each lattice by its primary path (1-best chain lattice)"})


@register_task("lattice_translation", dataclass=LatticeTranslationConfig)
class LatticeTranslationTask(TranslationTask):
    cfg: LatticeTranslationConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        names = [s for s in str(cfg.lattice_segmenters).split(",") if s]
        unknown = [n for n in names if n not in SEGMENTERS]
        if unknown or not names:  # refused now, not at the first fairseq-interactive line
            why = f"unknown segmenter '{unknown[0]}'" if unknown else "no segmenter given"
            raise ConfigError(f"--lattice-segmenters {cfg.lattice_segmenters!r}: {why} (a comma-separated list "
                              f"of {', '.join(sorted(SEGMENTERS))})")
        self._builder = None
        self._interactive_lines = 0  # input lines read so far (fairseq-interactive's buffers)
        self._inference_lattices = {}

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)] if split == self.cfg.train_subset else paths[0]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        prefix = os.path.join(data_path, f"{split}.{src}-{tgt}.")
        if not (os.path.exists(prefix + src + ".idx") or os.path.exists(prefix + src + ".bin")):
            raise FileNotFoundError(f"lattice dataset split {split} not found: {prefix}{src}.bin/.idx "
                                    "(make it with scripts/preprocess_lattices.py)")
        if not os.path.exists(prefix + src + ".nchars.npy"):
            raise InputFileError(f"{prefix}{src}.bin holds plain binarized text, not lattices (no {prefix}{src}"
                                 ".nchars.npy): make lattice data with scripts/preprocess_lattices.py")
        src_ds = load_lattice_dataset(prefix + src)
        tgt_ds = data_utils.load_indexed_dataset(prefix + tgt, self.tgt_dict, self.cfg.dataset_impl)
        if tgt_ds is None:
            raise FileNotFoundError(f"target side of split {split} not found: {prefix}{tgt}.bin/.idx")
        if len(tgt_ds) != len(src_ds):
            raise ValueError(f"{prefix}{src} has {len(src_ds)} lattices but {prefix}{tgt} has {len(tgt_ds)} sentences")
        self.datasets[split] = LatticePairDataset(
            src_ds, self.src_dict, tgt_ds, tgt_ds.sizes, self.tgt_dict, left_pad_source=self.cfg.left_pad_source,
            shuffle=(split != "test"), one_best=self.cfg.lattice_one_best)

    @property
    def lattice_builder(self) -> LatticeBuilder:
        if self._builder is None:
            self._builder = LatticeBuilder([s for s in self.cfg.lattice_segmenters.split(",") if s])
        return self._builder

    def input_lattice(self, line: str, where: str = "input"):
        """The lattice of one input sentence of ``fairseq-interactive`` or the hub: a line in the
        lattice text format, or a raw sentence segmented with ``--lattice-segmenters``; ``None`` for
        a blank line (see :func:`fairseq_local_core.lattice.read_input`).  When the training text
        was lowercased (see :func:`fairseq_local.data.text_input.lowercase_input`), so
        is the input."""
        return read_input(lowercase_input(line, self.src_dict), lambda: self.lattice_builder, where)

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """Input lines (raw sentences or lattice lines, :meth:`input_lattice`) -> packed lattices
        and their lengths.

        fairseq-interactive calls this once per ``--buffer-size`` lines: errors name the line
        number in the whole input.  An empty line becomes the empty lattice (0 characters), which
        :meth:`inference_step` translates into an empty sentence."""
        first = self._interactive_lines + 1
        self._interactive_lines += len(lines)
        lattices = [self.input_lattice(line, input_where(n)) for n, line in enumerate(lines, first)]
        ds = lattice_dataset_from(lattices, self.src_dict)
        return [ds[i] for i in range(len(ds))], [int(s) for s in ds.sizes]

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        if constraints is not None:
            raise ValueError("lattice_translation does not support --constraints")
        src = LatticeDataset(src_tokens, np.asarray(src_lengths))
        dataset = LatticePairDataset(src, self.src_dict, tgt_dict=self.tgt_dict, left_pad_source=self.cfg.left_pad_source,
                                     shuffle=False, one_best=self.cfg.lattice_one_best)
        # fairseq-interactive rebuilds net_input from src_tokens/src_lengths only, so inference_step
        # finds each row's lattice again by its primary path's word ids.  Inputs sharing them (words
        # outside the dictionary are all <unk>) are told apart by order: the batches come in the
        # dataset's ordered_indices() order (by characters; inputs too long for
        # --skip-invalid-size-inputs-valid-test are the last), so each queue follows that order.
        self._inference_lattices = {}
        for i in dataset.ordered_indices():
            _, _, _, words, path = unpack(src_tokens[i].numpy())
            self._inference_lattices.setdefault(tuple(words[path].tolist()), deque()).append(src_tokens[i])
        return dataset

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        net = sample["net_input"]
        if net.get("lattice") is None:  # fairseq-interactive dropped the lattice tensors
            net["lattice"] = self._restore_lattices(net["src_tokens"])
        net["lattice"] = LatticeBatch.of(net["lattice"])
        empty = net["src_lengths"].eq(0)  # empty input lines: an empty translation each
        if not bool(empty.any()):
            return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                          constraints=constraints)
        bsz = empty.numel()
        hypos = [[self._empty_hypothesis(net["src_lengths"].device)] for _ in range(bsz)]
        rows = (~empty).nonzero(as_tuple=True)[0]
        if rows.numel() > 0:
            decoded = super().inference_step(
                generator, models, _select_rows(sample, rows, bsz),
                prefix_tokens=None if prefix_tokens is None else prefix_tokens.index_select(0, rows),
                constraints=None if constraints is None else constraints.index_select(0, rows))
            for row, hypo in zip(rows.tolist(), decoded):
                hypos[row] = hypo
        return hypos

    def _empty_hypothesis(self, device):
        eos = self.tgt_dict.eos()
        return {"tokens": torch.tensor([eos], device=device), "score": torch.tensor(0.0, device=device),
                "attention": torch.empty(0, device=device), "alignment": torch.empty(0, device=device),
                "positional_scores": torch.zeros(1, device=device)}

    def _restore_lattices(self, src_tokens):
        pad = self.src_dict.pad()
        packed = []
        for row in src_tokens.cpu():
            queue = self._inference_lattices.get(tuple(row[row.ne(pad)].tolist()))
            if not queue:
                raise ValueError("lattice_translation: a batch without lattice tensors whose source was not "
                                 "built by build_dataset_for_inference")
            # rows arrive in the queue's order; the last lattice stays for a repeated step
            packed.append(queue.popleft() if len(queue) > 1 else queue[0])
        batch = collate_lattices(packed, pad, self.cfg.left_pad_source, self.cfg.lattice_one_best)
        return batch["lattice"].to(src_tokens.device)


def _select_rows(sample, rows, bsz):
    """``sample`` restricted to the batch rows ``rows`` (every tensor whose first dimension is the batch)."""
    if isinstance(sample, dict):
        out = {k: _select_rows(v, rows, bsz) for k, v in sample.items()}
        if "nsentences" in out:
            out["nsentences"] = rows.numel()
        return out
    if isinstance(sample, LatticeBatch):
        return LatticeBatch(*(_select_rows(t, rows, bsz) for t in sample))
    if torch.is_tensor(sample) and sample.dim() > 0 and sample.size(0) == bsz:
        return sample.index_select(0, rows.to(sample.device))
    return sample
