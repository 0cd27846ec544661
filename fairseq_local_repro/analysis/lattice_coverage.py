"""In-vocabulary coverage of character spans (Su et al. 2017, Table 3).

    python scripts/analysis/lattice_coverage.py \
        --corpus jieba raw/word/valid.zh bin/word/dict.zh.txt \
        --corpus char raw/char/valid.zh bin/char/dict.zh.txt \
        --corpus lattice raw/lattice/valid.zh bin/lattice/dict.zh.txt

For each corpus (a lattice or chain file and the source dictionary it was binarized with) prints
the percentage of characters that lie inside at least one in-vocabulary word (an edge whose word
is in the dictionary): the "character spans covered by in-vocabulary words" of Table 3.  A chain
covers a character only through its one word; a lattice through any of its competing words.
"""
import argparse

import numpy as np

from fairseq_local_core.lattice import read_lattices


def coverage(lattices, vocab) -> float:
    covered = total = 0
    for lat in lattices:
        diff = np.zeros(lat.n_chars + 1, dtype=np.int64)  # +1 at i, -1 at j for every in-vocab edge
        for (i, j), w in zip(lat.edges, lat.words()):
            if w in vocab:
                diff[i] += 1
                diff[j] -= 1
        covered += int((np.cumsum(diff)[:-1] > 0).sum())
        total += lat.n_chars
    return 100.0 * covered / max(total, 1)


def read_vocab(path):
    from fairseq.data import Dictionary

    d = Dictionary.load(path)
    return set(d.symbols[d.nspecial:])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", nargs=3, action="append", required=True, metavar=("NAME", "LATTICES", "DICT"))
    args = p.parse_args(argv)
    rows = [(name, coverage(read_lattices(lat), read_vocab(d))) for name, lat, d in args.corpus]
    print("| " + " | ".join(n for n, _ in rows) + " |")
    print("|" + "---|" * len(rows))
    print("| " + " | ".join(f"{c:.2f}%" for _, c in rows) + " |")


if __name__ == "__main__":
    main()
