"""``--task lattice_translation``: translate word lattices (Su et al., AAAI 2017).

Data directories come from ``scripts/preprocess_lattices.py``: ``dict.{src}.txt`` (words over
lattice edges), ``dict.{tgt}.txt``, per split the source lattices ``{split}.{src}-{tgt}.{src}``
(+ ``.nchars.npy``) and the target exactly as ``fairseq-preprocess`` writes it.  Batches are made
by character length (``--max-source-positions 70 --max-target-positions 50`` reproduce the
paper's filter).  ``fairseq-interactive`` reads raw Chinese and builds lattices on the fly with
``--lattice-segmenters`` (the same segmenters as scripts/build_lattices.py; the source side skips
``--tokenizer``/``--bpe``, which apply to the target only).  ``--lattice-one-best`` replaces every
lattice by its primary path as a chain (the paper's Table 2 analysis).
"""
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq import utils
from fairseq.data import data_utils
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_local.data.lattice import LatticeBuilder, unpack
from fairseq_local.data.lattice_dataset import (
    LatticeDataset,
    LatticePairDataset,
    collate_lattices,
    lattice_dataset_from,
    load_lattice_dataset,
)


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
        self._builder = None

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)] if split == self.cfg.train_subset else paths[0]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        prefix = os.path.join(data_path, f"{split}.{src}-{tgt}.")
        if not os.path.exists(prefix + src + ".idx"):
            raise FileNotFoundError(f"lattice dataset split {split} not found: {prefix}{src}.bin/.idx "
                                    "(make it with scripts/preprocess_lattices.py)")
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

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """Raw sentences -> packed lattices (built with --lattice-segmenters) and their lengths."""
        lattices = [self.lattice_builder(line, f"input line {n}") for n, line in enumerate(lines, 1)]
        ds = lattice_dataset_from(lattices, self.src_dict)
        return [ds[i] for i in range(len(ds))], [int(s) for s in ds.sizes]

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        if constraints is not None:
            raise ValueError("lattice_translation does not support --constraints")
        # fairseq-interactive rebuilds net_input from src_tokens/src_lengths only: remember each
        # lattice under its primary path's word ids so that inference_step can restore it
        self._inference_lattices = {}
        for packed in src_tokens:
            _, _, _, words, path = unpack(packed.numpy())
            self._inference_lattices.setdefault(tuple(words[path].tolist()), []).append(packed)
        src = LatticeDataset(src_tokens, np.asarray(src_lengths))
        return LatticePairDataset(src, self.src_dict, tgt_dict=self.tgt_dict, left_pad_source=self.cfg.left_pad_source,
                                  shuffle=False, one_best=self.cfg.lattice_one_best)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        net = sample["net_input"]
        if "lat_in_mask" not in net:  # fairseq-interactive dropped the lattice tensors
            net.update(self._restore_lattices(net["src_tokens"]))
        return super().inference_step(generator, models, sample, prefix_tokens=prefix_tokens,
                                      constraints=constraints)

    def _restore_lattices(self, src_tokens):
        pad = self.src_dict.pad()
        packed = []
        for row in src_tokens.cpu():
            candidates = getattr(self, "_inference_lattices", {}).get(tuple(row[row.ne(pad)].tolist()))
            if not candidates:
                raise ValueError("lattice_translation: a batch without lattice tensors whose source was not "
                                 "built by build_dataset_for_inference")
            # inputs with identical primary paths are told apart in input order
            packed.append(candidates.pop(0) if len(candidates) > 1 else candidates[0])
        batch = collate_lattices(packed, pad, self.cfg.left_pad_source, self.cfg.lattice_one_best)
        return {k: v.to(src_tokens.device) for k, v in batch.items() if k.startswith("lat_")}
