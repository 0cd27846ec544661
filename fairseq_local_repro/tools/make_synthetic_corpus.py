"""Write the synthetic parallel corpus (see fairseq_local/data/synthetic.py) to OUT_DIR."""
import argparse
import sys

from fairseq_local.data.synthetic import write_corpus


def main(argv=None):
    p = argparse.ArgumentParser(prog="make_synthetic_corpus.py", description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--valid", type=int, default=200)
    p.add_argument("--test", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nouns", type=int, default=120, help="nouns in each language's lexicon")
    p.add_argument("--verbs", type=int, default=30, help="verbs in each language's lexicon")
    p.add_argument("--adjectives", type=int, default=30, help="adjectives in each language's lexicon")
    p.add_argument("--max-len", type=int, default=14, help="longest source sentence, in words (at least 5)")
    a = p.parse_args(argv)
    for opt in ("train", "valid", "test", "nouns", "verbs", "adjectives"):
        if getattr(a, opt) < 1:
            p.error(f"--{opt} must be >= 1")
    if a.max_len < 5:  # the shortest sentence: article, noun, verb, article, noun
        p.error("--max-len must be >= 5")
    write_corpus(a.out_dir, (("train", a.train), ("valid", a.valid), ("test", a.test)), a.seed,
                 n_nouns=a.nouns, n_verbs=a.verbs, n_adjs=a.adjectives, max_len=a.max_len)
    return 0


if __name__ == "__main__":
    sys.exit(main())
