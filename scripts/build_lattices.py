#!/usr/bin/env python
"""Build word lattices (fairseq_local/data/lattice.py format) from Chinese text.

Segment raw text with several segmenters and merge (the first segmenter gives the primary path):

    python scripts/build_lattices.py --input train.zh --output train.lat \
        --segmenters jieba,thulac,snownlp --workers 2

One segmenter gives chain lattices (word-level baseline data); ``--segmenters char`` gives
character chains (character-level baseline).  Merge already tokenized files (one tokenization per
file, tokens separated by spaces, e.g. from the Stanford CTB/PKU/MSR segmenters of the paper):

    python scripts/build_lattices.py --merge train.ctb train.pku train.msr [--raw train.zh] --output train.lat

Without ``--raw`` the first tokenized file defines the sentence.  Any error (unknown segmenter,
empty line, input not UTF-8, tokenization not matching its sentence, different line counts) is one
line naming the file and line; the output is written to a temporary file and renamed only when complete.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))

from fairseq_local.data.lattice import (  # noqa: E402
    SEGMENTERS,
    LatticeError,
    atomic_write_lines,
    build_item,
    init_builder_worker,
    merge_item,
    parallel_map,
)
from text_input import TextInputError, read_lines  # noqa: E402


def _read_lines(path):
    try:
        return read_lines(path)
    except TextInputError as e:  # not UTF-8: names the file and the first bad line
        raise LatticeError(str(e)) from None


def _merge_items(files, raw_path):
    tok_lines = [_read_lines(p) for p in files]
    raw = _read_lines(raw_path) if raw_path else None
    counts = {p: len(lines) for p, lines in zip(files, tok_lines)}
    if raw is not None:
        counts[raw_path] = len(raw)
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{p}: {n}" for p, n in counts.items())
        raise LatticeError(f"line counts differ ({detail})")
    ref = raw_path or files[0]
    for n in range(len(tok_lines[0])):
        named = [(p, lines[n].split()) for p, lines in zip(files, tok_lines)]
        yield n + 1, f"{ref}:{n + 1}", raw[n] if raw is not None else None, named


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--input", help="raw Chinese text, one sentence per line")
    p.add_argument("--segmenters", default="jieba,thulac,snownlp",
                   help=f"comma-separated, from {', '.join(sorted(SEGMENTERS))} (first = primary path)")
    p.add_argument("--merge", nargs="+", metavar="TOKENIZED", help="merge these tokenized files instead")
    p.add_argument("--raw", help="with --merge: the raw sentences the tokenizations must match")
    p.add_argument("--output", required=True, help="lattice file to write")
    p.add_argument("--workers", type=int, default=1, help="processes (lines are segmented in parallel)")
    args = p.parse_args(argv)
    try:
        if args.merge:
            if args.input:
                raise LatticeError("give either --input (segment) or --merge (tokenized files), not both")
            for path in args.merge + ([args.raw] if args.raw else []):
                if not os.path.exists(path):
                    raise LatticeError(f"{path}: no such file")
            items = list(_merge_items(args.merge, args.raw))
            lines = list(parallel_map(merge_item, items, args.workers))
        else:
            if not args.input:
                raise LatticeError("--input (raw text) or --merge (tokenized files) is required")
            if not os.path.exists(args.input):
                raise LatticeError(f"{args.input}: no such file")
            names = [s for s in args.segmenters.split(",") if s]
            for name in names:
                if name not in SEGMENTERS:
                    raise LatticeError(f"unknown segmenter '{name}' (choose from {', '.join(sorted(SEGMENTERS))})")
            raw = _read_lines(args.input)
            items = [(f"{args.input}:{n}", line) for n, line in enumerate(raw, 1)]
            for where, line in items:  # fail fast, before loading any segmenter
                if not line.strip():
                    raise LatticeError(f"{where}: empty line")
            lines = list(parallel_map(build_item, items, args.workers, init_builder_worker, (names,)))
        atomic_write_lines(args.output, lines)
    except LatticeError as e:
        print(f"build_lattices.py: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(lines)} lattices to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
