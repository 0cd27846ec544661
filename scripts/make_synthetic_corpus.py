#!/usr/bin/env python
"""Write the synthetic parallel corpus (see fairseq_local/data/synthetic.py) to OUT_DIR."""
import argparse

from fairseq_local.data.synthetic import write_corpus


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--train", type=int, default=4000)
    p.add_argument("--valid", type=int, default=200)
    p.add_argument("--test", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    for opt in ("train", "valid", "test"):
        if getattr(a, opt) < 1:
            p.error(f"--{opt} must be >= 1")
    write_corpus(a.out_dir, (("train", a.train), ("valid", a.valid), ("test", a.test)), a.seed)


if __name__ == "__main__":
    main()
