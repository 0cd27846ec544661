"""The GPU acceptance run's corpus: synthetic text whose sentence lengths are IWSLT14 De-En's.

    python scripts/gpu/acceptance_corpus.py gpu_kit/data/acceptance [--pairs 12000] [--valid 500]

Lengths in tokens, EOS included, are drawn as ``shared/tools/iwslt_like_lengths.py`` draws them (the
same formula, seed and order, so a split of ``n`` pairs has exactly the tool's ``lengths(n, seed)``):

    target - 1 ~ round(lognormal(log 20.5, 0.62)), clipped to [1, 175]
    source - 1 ~ round((target - 1) * exp(normal(0.05, 0.18))), clipped to [1, 175]

A sentence of length ``L`` is ``L - 1`` words (fairseq adds the EOS), each word drawn from a Zipf
(1/rank) distribution over ``--vocab`` types, so the dictionaries and softmax sizes are
IWSLT-like too.  DEST gets three binarized corpora, each built in DEST/NAME.tmp and moved into place
when complete:

* ``translation``: ``de`` -> ``en`` (MC-RNN, the parallel-cell seq2seq, DPN-S2S), fairseq-preprocess;
* ``lm``: the ``en`` side alone (the parallel-cell LM, genCNN; ``--sample-break-mode eos`` keeps the
  IWSLT-like sentence lengths as the batch lengths), fairseq-preprocess ``--only-source``;
* ``lattice``: ``zh`` lattices -> ``en`` (the lattice family), scripts/preprocess_lattices.py: the
  source sentence is ``source - 1`` characters, words of 1-3 characters merged with two other
  segmentations (first characters split off, single characters), so its lattices have several paths.

``DEST/corpus.json`` records the options and each split's length statistics.
"""
import argparse
import os
import shutil
import sys

import numpy as np
from fairseq import options
from fairseq_cli import preprocess

from fairseq_local_core.lattice import merge_tokenizations
from fairseq_local_core.file_io import read_json, write_json, write_lines
from fairseq_local_repro.tools import preprocess_lattices

# the tool's constants (shared/tools/iwslt_like_lengths.py)
TGT_LOG_MEDIAN, TGT_SIGMA, SRC_SHIFT, SRC_SIGMA, MAX_LEN = np.log(20.5), 0.62, 0.05, 0.18, 175
CJK_FIRST = 0x4E00
SPLITS = ("train", "valid")


def iwslt_like_lengths(n: int, seed: int = 0):
    """(source, target) lengths in tokens, EOS included: ``n`` pairs, as the shared tool draws them."""
    rng = np.random.RandomState(seed)
    tgt = np.clip(np.round(rng.lognormal(TGT_LOG_MEDIAN, TGT_SIGMA, n)), 1, MAX_LEN).astype(np.int64) + 1
    src = np.clip(np.round((tgt - 1) * np.exp(rng.normal(SRC_SHIFT, SRC_SIGMA, n))), 1, MAX_LEN).astype(np.int64) + 1
    return src, tgt


def zipf_ids(rng: np.random.RandomState, count: int, vocab: int) -> np.ndarray:
    """``count`` word ranks in [0, vocab), P(rank k) proportional to 1 / (k + 1)."""
    p = 1.0 / np.arange(1, vocab + 1)
    return rng.choice(vocab, size=count, p=p / p.sum())


def sentences(rng, lengths, vocab: int, prefix: str):
    """One line per length ``L``: ``L - 1`` words ``{prefix}{rank}`` (fairseq adds the EOS)."""
    words = np.char.add(prefix, zipf_ids(rng, int((lengths - 1).sum()), vocab).astype(str))
    return [" ".join(s) for s in np.split(words, np.cumsum(lengths - 1)[:-1])]


def lattice_lines(rng, lengths, vocab: int, char_vocab: int):
    """One lattice line per source length ``L``: ``L - 1`` CJK characters, words of a Zipf
    distribution over ``vocab`` types (each type a fixed string of 1-3 characters; the last word is
    cut to fit), merged with two other segmentations: each word's first character split off, and
    the characters themselves."""
    table = np.random.RandomState(12345)  # the word types do not depend on the seed
    type_len = table.randint(1, 4, size=vocab)
    type_chars = np.array([chr(CJK_FIRST + int(k)) for k in range(char_vocab)])[
        zipf_ids(table, int(type_len.sum()), char_vocab)]
    types = np.array(["".join(w) for w in np.split(type_chars, np.cumsum(type_len)[:-1])])
    lines = []
    for n in lengths - 1:
        words = types[zipf_ids(rng, int(n), vocab)]  # n words hold at least n characters
        ends = np.cumsum(np.char.str_len(words))
        k = int(np.searchsorted(ends, n))
        words = list(words[:k + 1])
        words[-1] = words[-1][:len(words[-1]) - int(ends[k] - n)]
        split = [piece for w in words for piece in ([w[0], w[1:]] if len(w) > 1 else [w])]
        sentence = "".join(words)
        lines.append(merge_tokenizations(sentence, [words, split, list(sentence)]).to_line())
    return lines


def _fairseq_preprocess(argv):
    preprocess.main(options.get_preprocessing_parser().parse_args(argv))


def _lattice_preprocess(argv):
    rc = preprocess_lattices.main(argv)
    if rc != 0:
        raise RuntimeError(f"preprocess_lattices exited with {rc}")


def build(dest: str, pairs: int, valid: int, vocab: int, char_vocab: int, seed: int, only=None):
    """Write DEST/translation, DEST/lm and DEST/lattice (those in ``only``, default all) and
    DEST/corpus.json; an existing corpus is kept.  Returns the record of corpus.json; raises
    ValueError when DEST holds a corpus drawn with other options."""
    sizes = {"train": pairs, "valid": valid}
    record = {"pairs": sizes, "vocab": vocab, "char_vocab": char_vocab, "seed": seed, "splits": {}}
    listing = os.path.join(dest, "corpus.json")
    if os.path.isfile(listing):
        old = read_json(listing)
        if any(old.get(k) != record[k] for k in ("pairs", "vocab", "char_vocab", "seed")):
            raise ValueError(f"{listing}: a corpus of other options ({', '.join(f'{k} {old.get(k)}' for k in ('pairs', 'vocab', 'char_vocab', 'seed'))}): delete {dest} or pass those")
        if all(os.path.isdir(os.path.join(dest, name)) for name in only or ("translation", "lm", "lattice")):
            return old
    os.makedirs(dest, exist_ok=True)
    raw = {}
    for k, split in enumerate(SPLITS):
        src_len, tgt_len = iwslt_like_lengths(sizes[split], seed + k)
        rng = np.random.RandomState(seed + 1000 + k)
        raw[split] = {"de": sentences(rng, src_len, vocab, "d"), "en": sentences(rng, tgt_len, vocab, "e"),
                      "lengths": (src_len, tgt_len)}
        record["splits"][split] = {
            side: {"mean": round(float(x.mean()), 3), "p50": float(np.percentile(x, 50)),
                   "p90": float(np.percentile(x, 90)), "p99": float(np.percentile(x, 99)), "max": int(x.max())}
            for side, x in (("source", src_len), ("target", tgt_len))}
    for name in only or ("translation", "lm", "lattice"):
        final, work = os.path.join(dest, name), os.path.join(dest, name + ".tmp")
        if os.path.isdir(final):
            continue
        shutil.rmtree(work, ignore_errors=True)
        text = os.path.join(work, "text")
        os.makedirs(text)
        for k, split in enumerate(SPLITS):
            r = raw[split]
            write_lines(os.path.join(text, f"{split}.en"), r["en"])
            if name == "translation":
                write_lines(os.path.join(text, f"{split}.de"), r["de"])
            elif name == "lattice":
                lrng = np.random.RandomState(seed + 2000 + k)
                write_lines(os.path.join(text, f"{split}.zh"), lattice_lines(lrng, r["lengths"][0], vocab, char_vocab))
        prefs = [f"--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                 "--destdir", os.path.join(work, "bin"), "--workers", "1"]
        if name == "translation":
            _fairseq_preprocess(["--source-lang", "de", "--target-lang", "en", "--dataset-impl", "mmap"] + prefs)
        elif name == "lm":
            _fairseq_preprocess(["--only-source", "--source-lang", "en", "--dataset-impl", "mmap"] + prefs)
            # language_modeling reads {split}.bin and dict.txt
            for f in os.listdir(os.path.join(work, "bin")):
                if f.startswith(("train.en-None.en.", "valid.en-None.en.")):
                    split, ext = f.split(".")[0], f.rsplit(".", 1)[1]
                    os.replace(os.path.join(work, "bin", f), os.path.join(work, "bin", f"{split}.{ext}"))
            os.replace(os.path.join(work, "bin", "dict.en.txt"), os.path.join(work, "bin", "dict.txt"))
        else:
            _lattice_preprocess(["--source-lang", "zh", "--target-lang", "en"] + prefs)
        os.replace(os.path.join(work, "bin"), final)
        shutil.rmtree(work)
    write_json(os.path.join(dest, "corpus.json"), record, indent=2)
    return record


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", help="output folder (the kit's: gpu_kit/data/acceptance, where scripts/gpu/prepare_data.sh puts it)")
    p.add_argument("--pairs", type=int, default=12000,
                   help="training pairs (default 12000: about 100 updates of 4000 tokens per epoch, so the "
                        "acceptance run's 200 updates cross an epoch boundary)")
    p.add_argument("--valid", type=int, default=500, help="validation pairs (default 500)")
    p.add_argument("--vocab", type=int, default=8000, help="word types per language (default 8000)")
    p.add_argument("--char-vocab", type=int, default=3000, help="characters of the lattice source (default 3000)")
    p.add_argument("--seed", type=int, default=0, help="the train split's lengths are the tool's lengths(PAIRS, SEED)")
    p.add_argument("--only", choices=["translation", "lm", "lattice"], action="append",
                   help="build only this corpus (repeatable)")
    a = p.parse_args(argv)
    for opt, v, least in (("--pairs", a.pairs, 1), ("--valid", a.valid, 1), ("--vocab", a.vocab, 2),
                          ("--char-vocab", a.char_vocab, 2)):
        if v < least:
            p.error(f"{opt} must be >= {least} (got {v})")
    if a.char_vocab > 20000:
        p.error(f"--char-vocab must be <= 20000 (the CJK block; got {a.char_vocab})")
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        rec = build(a.dest, a.pairs, a.valid, a.vocab, a.char_vocab, a.seed, a.only)
    except ValueError as e:
        print(f"acceptance_corpus: error: {e}", file=sys.stderr)
        return 2
    t = rec["splits"]["train"]["target"]
    print(f"acceptance corpus in {a.dest}: {a.pairs} training pairs, target mean {t['mean']} "
          f"(p50 {t['p50']:.0f}, p90 {t['p90']:.0f}, p99 {t['p99']:.0f}, max {t['max']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
