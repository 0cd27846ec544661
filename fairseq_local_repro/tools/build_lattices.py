"""Build word lattices (fairseq_local_core/lattice.py format) from Chinese text.

Segment raw text with several segmenters and merge (the first segmenter gives the primary path):

    python scripts/build_lattices.py --input train.zh --output train.lat \
        --segmenters jieba,thulac,snownlp --workers 2

One segmenter gives chain lattices (word-level baseline data); ``--segmenters char`` gives
character chains (character-level baseline).  Merge already tokenized files (one tokenization per
file, tokens separated by spaces, e.g. from the Stanford CTB/PKU/MSR segmenters of the paper):

    python scripts/build_lattices.py --merge train.ctb train.pku train.msr [--raw train.zh] --output train.lat

Without ``--raw`` the first tokenized file defines the sentence.  Any error (unknown segmenter,
empty line or file, input not UTF-8, tokenization not matching its sentence, different line counts,
an --output directory that does not exist) is one line naming the file and line; the output is
written to a temporary file and renamed only when complete (Ctrl-C: one line, nothing written).

The segmenters run one after the other over the whole input (each loaded once, used, then
released, so memory holds one segmenter's model at a time: thulac's is the largest), with a
progress bar per segmenter on a terminal; the tokenizations are then merged line by line.  Only
``fairseq_local_core/lattice.py`` (numpy) is loaded, not torch or fairseq.
"""
import argparse
import gc
import os
import sys
import warnings

from fairseq_local_repro.text import lattice_builder, segment_pool
from fairseq_local_repro.text.text_input import TextInputError, read_lines

# jieba imports setuptools' deprecated pkg_resources; nothing a user of this script can change
warnings.filterwarnings("ignore", message="pkg_resources is deprecated as an API", category=UserWarning)

lattice = lattice_builder.lattice  # fairseq_local_core/lattice.py without torch or fairseq
LatticeError, SEGMENTERS = lattice.LatticeError, lattice.SEGMENTERS

def _progress(items, total, desc):
    """A tqdm bar on a terminal (or for a long input in a log); the items themselves otherwise."""
    from tqdm import tqdm

    return tqdm(items, total=total, desc=desc, unit="sent", file=sys.stderr, mininterval=1.0,
                disable=not (sys.stderr.isatty() or total >= 1000))


def segment_all(names, sentences, workers=1):
    """Every sentence tokenized by each segmenter in turn: ``[[tokens per sentence] per segmenter]``.
    One segmenter is in memory at a time (in ``workers`` processes)."""
    import functools
    import multiprocessing as mp

    out = []
    for name in names:
        factory = functools.partial(lattice.load_segmenter, name)
        if workers <= 1:
            segment_pool.load(factory)
            out.append(list(_progress(map(segment_pool.segment, sentences), len(sentences), name)))
            segment_pool.unload()
        else:
            with mp.get_context("fork").Pool(workers, initializer=lattice_builder.worker_init,
                                            initargs=(segment_pool.load, factory)) as pool:
                out.append(list(_progress(pool.imap(segment_pool.segment, sentences, chunksize=32), len(sentences),
                                          name)))
        gc.collect()  # the model's memory is reused by the next segmenter
    return out


def build_lines(names, raw, path, workers=1):
    """The lattice lines of the sentences ``raw`` (read from ``path``), first segmenter = primary path."""
    sentences = [line.rstrip("\r\n") for line in raw]
    tokenizations = segment_all(names, sentences, workers)
    return [lattice.merge_tokenizations(s, [t[n] for t in tokenizations], f"{path}:{n + 1}").to_line()
            for n, s in enumerate(sentences)]


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
    p = argparse.ArgumentParser(prog="build_lattices.py", description=__doc__.split("\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--input", help="raw Chinese text, one sentence per line")
    p.add_argument("--segmenters", default="jieba,thulac,snownlp",
                   help=f"comma-separated, from {', '.join(sorted(SEGMENTERS))} (first = primary path)")
    p.add_argument("--merge", nargs="+", metavar="TOKENIZED", help="merge these tokenized files instead")
    p.add_argument("--raw", help="with --merge: the raw sentences the tokenizations must match")
    p.add_argument("--output", required=True, help="lattice file to write")
    p.add_argument("--workers", type=int, default=1, help="processes (lines are segmented in parallel)")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers must be >= 1 (got {args.workers})")
    try:
        out_dir = os.path.dirname(os.path.abspath(args.output))
        if not os.path.isdir(out_dir):  # before any segmenting, not after it
            raise LatticeError(f"--output {args.output}: no such directory {out_dir}")
        if args.merge:
            if args.input:
                raise LatticeError("give either --input (segment) or --merge (tokenized files), not both")
            for path in args.merge + ([args.raw] if args.raw else []):
                if not os.path.exists(path):
                    raise LatticeError(f"{path}: no such file")
            items = list(_merge_items(args.merge, args.raw))
            if not items:
                raise LatticeError(f"{args.merge[0]}: the file is empty (no sentences to build lattices from)")
            lines = list(lattice_builder.parallel_map(lattice_builder.merge_item, items, args.workers))
        else:
            if not args.input:
                raise LatticeError("--input (raw text) or --merge (tokenized files) is required")
            if not os.path.exists(args.input):
                raise LatticeError(f"{args.input}: no such file")
            names = [s for s in args.segmenters.split(",") if s]
            for name in names:
                if name not in SEGMENTERS:
                    raise LatticeError(f"unknown segmenter '{name}' (choose from {', '.join(sorted(SEGMENTERS))})")
            if not names:
                raise LatticeError("no segmenter given (--segmenters)")
            raw = _read_lines(args.input)
            if not raw:
                raise LatticeError(f"{args.input}: the file is empty (no sentences to build lattices from)")
            for n, line in enumerate(raw, 1):  # fail fast, before loading any segmenter
                if not line.strip():
                    raise LatticeError(f"{args.input}:{n}: empty line")
            lines = build_lines(names, raw, args.input, args.workers)
        lattice_builder.write_lines(args.output, lines)
    except LatticeError as e:
        print(f"build_lattices.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: the output is written only when complete
        print(f"build_lattices.py: interrupted; {args.output} was not written", file=sys.stderr)
        return 130
    print(f"wrote {len(lines)} lattices to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
