"""Tiny binarized corpora cut from the real data in ``shared/data`` (the ``shared_data`` fixture),
one builder per kind of dataset a config row trains on.  Each takes the first few hundred lines of
a real corpus and binarizes them with a small vocabulary (the rest -> <unk>), laid out as the
row's recipe lays out the full dataset (same file and language names), so a YAML runs unchanged
apart from its data path.

* ``lm``: PTB validation text (Mikolov's version), ``fairseq-preprocess --only-source``;
* ``de_en``: Multi30k De-En (IWSLT14 rows), languages ``de`` / ``en``;
* ``gigaword``: ``article`` / ``headline`` pairs cut from Multi30k's English side: the article is
  two consecutive captions, the headline the first caption's first words (Gigaword rows);
* ``zh_en``: Tatoeba Zh-En with the Chinese side segmented into words by jieba, as the NIST Zh-En
  recipes do (DPN Table 2 and parallel-cell Table 3 rows); the last dev pair is the first
  ``LONG_PAIR`` dev pairs joined, longer than the 50-word training limit of the recipes;
* ``lattice`` / ``lattice_word`` / ``lattice_char``: Tatoeba Zh-En through
  ``scripts/build_lattices.py`` (jieba + thulac + snownlp lattices; jieba chains; character
  chains) and ``scripts/preprocess_lattices.py``.
"""
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from contract_lib import REPO, _preprocess

N_TRAIN, N_VALID = 240, 40
VOCAB = "400"  # small vocabularies: tiny output layers, real <unk> rates
LONG_PAIR = N_VALID  # zh_en's last dev pair joins this many pairs: > 50 words (the recipes' training limit)


def _lines(path: Path, start: int, n: int) -> List[str]:
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return [line for line in lines[start:] if line][:n]


def _write(path: Path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _splits(n_train=N_TRAIN, n_valid=N_VALID):
    return (("train", 0, n_train), ("valid", n_train, n_valid), ("test", n_train + n_valid, n_valid))


def _binarize_pairs(raw: Path, out: Path, src: str, tgt: str):
    _preprocess(["--source-lang", src, "--target-lang", tgt, "--trainpref", str(raw / "train"),
                 "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"),
                 "--destdir", str(out), "--nwordssrc", VOCAB, "--nwordstgt", VOCAB, "--workers", "1"])
    return out


def build_lm(shared: Path, tmp: Path) -> Path:
    raw = tmp / "raw"
    for split, start, n in _splits():
        _write(raw / f"{split}.txt", _lines(shared / "lm" / "ptb.valid.txt", start, n))
    out = tmp / "bin"
    _preprocess(["--only-source", "--trainpref", str(raw / "train.txt"), "--validpref", str(raw / "valid.txt"),
                 "--testpref", str(raw / "test.txt"), "--destdir", str(out), "--nwordssrc", VOCAB,
                 "--workers", "1"])
    return out


def build_de_en(shared: Path, tmp: Path) -> Path:
    raw = tmp / "raw"
    for split, start, n in _splits():
        for lang in ("de", "en"):
            _write(raw / f"{split}.{lang}", _lines(shared / "multi30k-de-en" / f"train.{lang}", start, n))
    return _binarize_pairs(raw, tmp / "bin", "de", "en")


def build_gigaword(shared: Path, tmp: Path) -> Path:
    raw = tmp / "raw"
    en = _lines(shared / "multi30k-de-en" / "train.en", 0, 2 * (N_TRAIN + 2 * N_VALID) + 1)
    for split, start, n in _splits():
        pairs = [(en[2 * i] + " " + en[2 * i + 1], " ".join(en[2 * i].split()[:8])) for i in range(start, start + n)]
        _write(raw / f"{split}.article", [a for a, _ in pairs])
        _write(raw / f"{split}.headline", [h for _, h in pairs])
    return _binarize_pairs(raw, tmp / "bin", "article", "headline")


def build_zh_en(shared: Path, tmp: Path) -> Path:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    raw = tmp / "raw"
    for split, start, n in _splits():
        zh = [" ".join(w for w in jieba.cut(s) if w.strip())
              for s in _lines(shared / "tatoeba-zh-en" / "train.zh", start, n)]
        en = _lines(shared / "tatoeba-zh-en" / "train.en", start, n)
        if split == "valid":  # NIST dev sets hold sentences longer than any training limit
            zh.append(" ".join(zh[:LONG_PAIR]))
            en.append(" ".join(en[:LONG_PAIR]))
        _write(raw / f"{split}.zh", zh)
        _write(raw / f"{split}.en", en)
    return _binarize_pairs(raw, tmp / "bin", "zh", "en")


def _build_lattices(shared: Path, tmp: Path, segmenters: str) -> Path:
    raw = tmp / "raw"
    for split, start, n in _splits():
        _write(raw / f"{split}.raw.zh", _lines(shared / "tatoeba-zh-en" / "train.zh", start, n))
        _write(raw / f"{split}.en", _lines(shared / "tatoeba-zh-en" / "train.en", start, n))
        proc = subprocess.run([sys.executable, str(REPO / "scripts" / "build_lattices.py"),
                               "--input", str(raw / f"{split}.raw.zh"), "--output", str(raw / f"{split}.zh"),
                               "--segmenters", segmenters], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
    out = tmp / "bin"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "preprocess_lattices.py"),
                           "--source-lang", "zh", "--target-lang", "en", "--trainpref", str(raw / "train"),
                           "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"),
                           "--destdir", str(out), "--nwordssrc", VOCAB, "--nwordstgt", VOCAB, "--workers", "1"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


BUILDERS: Dict[str, object] = {
    "lm": build_lm,
    "de_en": build_de_en,
    "gigaword": build_gigaword,
    "zh_en": build_zh_en,
    "lattice": lambda shared, tmp: _build_lattices(shared, tmp, "jieba,thulac,snownlp"),
    "lattice_word": lambda shared, tmp: _build_lattices(shared, tmp, "jieba"),
    "lattice_char": lambda shared, tmp: _build_lattices(shared, tmp, "char"),
}


class RealData:
    """Builds each kind of corpus once (per pytest session) under ``root``."""

    def __init__(self, shared: Path, root: Path):
        self.shared, self.root = shared, root
        self._built: Dict[str, Path] = {}

    def __call__(self, kind: str) -> Path:
        if kind not in self._built:
            self._built[kind] = BUILDERS[kind](self.shared, self.root / kind)
        return self._built[kind]
