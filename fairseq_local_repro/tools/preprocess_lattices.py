r"""Binarize lattice-to-text data for ``--task lattice_translation`` (fairseq-preprocess's option names).

    python scripts/preprocess_lattices.py --source-lang zh --target-lang en \
        --trainpref data/train --validpref data/valid --testpref data/test \
        --destdir data-bin/zh_en_lattice [--thresholdsrc 0 --nwordssrc 50000] [--srcdict ...]

``{pref}.{src}`` are lattice files (scripts/build_lattices.py), ``{pref}.{tgt}`` plain text.  The
source dictionary counts the words of lattice edges (each edge once per sentence) with the usual
``--thresholdsrc`` / ``--nwordssrc`` (default 50000, as in the paper; same for the target); the
target side is binarized by fairseq-preprocess's own code.  ``--destdir`` is this run's until it
ends (a second run on it is one line naming the holder); everything is written to a temporary
directory beside it, which replaces ``--destdir`` only when complete, and only where ``--destdir`` is
new, empty or an earlier output of a fairseq-local tool (a folder of the user's is left as it is).  Malformed lattices, input that is not
UTF-8, an empty training file and different line counts between source and target are one-line
errors naming file and line; a split with more than 1% of its source edges or target words replaced
by <unk> gets one warning line (use a larger vocabulary).
"""
import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile


# torch, numpy and fairseq are imported where they are used, so -h answers at once


def _count_lines(path):
    """Lines of a UTF-8 file (a last line without newline counts); LatticeError naming the first
    non-UTF-8 line."""
    from fairseq_local_core.lattice import LatticeError
    from fairseq_local_repro.text.text_input import TextInputError, scan

    try:
        return scan(path)
    except TextInputError as e:
        raise LatticeError(str(e)) from None


def parse_args(argv=None):
    """The options this script supports (fairseq-preprocess's names and defaults, 50k-word
    dictionaries as in the paper); fairseq's own parser then reads the same command line."""
    doc = __doc__.split("\n\n")
    p = argparse.ArgumentParser(prog="preprocess_lattices.py", description=doc[0], allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog="\n\n".join(doc[1:]))
    p.add_argument("-s", "--source-lang", metavar="SRC", help="source language: {pref}.{SRC} are lattice files")
    p.add_argument("-t", "--target-lang", metavar="TGT", help="target language: {pref}.{TGT} are plain text")
    p.add_argument("--trainpref", metavar="FP", help="training files prefix")
    p.add_argument("--validpref", metavar="FP", help="comma-separated valid files prefixes")
    p.add_argument("--testpref", metavar="FP", help="comma-separated test files prefixes")
    p.add_argument("--destdir", metavar="DIR", default="data-bin", help="destination dir (default data-bin)")
    p.add_argument("--srcdict", metavar="FP", help="reuse this source dictionary (e.g. a trained system's)")
    p.add_argument("--tgtdict", metavar="FP", help="reuse this target dictionary")
    p.add_argument("--thresholdsrc", metavar="N", type=int, default=0,
                   help="map source words seen at most N times to <unk> (default 0)")
    p.add_argument("--thresholdtgt", metavar="N", type=int, default=0, help="the same for the target side")
    p.add_argument("--nwordssrc", metavar="N", type=int, default=50000, help="source dictionary size (default 50000)")
    p.add_argument("--nwordstgt", metavar="N", type=int, default=50000, help="target dictionary size (default 50000)")
    p.add_argument("--padding-factor", metavar="N", type=int, default=8,
                   help="pad the dictionaries to a multiple of N (default 8)")
    p.add_argument("--workers", metavar="N", type=int, default=1, help="processes binarizing the target side")
    args = p.parse_args(argv)
    for name, least in (("padding_factor", 1), ("workers", 1), ("thresholdsrc", 0), ("thresholdtgt", 0)):
        if getattr(args, name) < least:
            p.error(f"--{name.replace('_', '-')} must be >= {least} (got {getattr(args, name)})")
    return args


UNK_FIX_SRC = ("a larger vocabulary: a lower --thresholdsrc or a larger --nwordssrc, or the character "
               "chains (--segmenters char), whose vocabulary is the characters")
UNK_FIX_TGT = "a larger vocabulary: a lower --thresholdtgt or a larger --nwordstgt"


@contextlib.contextmanager
def _summaries():
    """The messages fairseq-preprocess logs meanwhile (its per-split summaries)."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    log = logging.getLogger("fairseq_cli.preprocess")
    handler, level = Keep(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield records
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _splits(args):
    out = []
    if args.trainpref:
        out.append(("train", args.trainpref))
    for name, prefs in (("valid", args.validpref), ("test", args.testpref)):
        for k, pref in enumerate(prefs.split(",") if prefs else []):
            out.append((f"{name}{k}" if k > 0 else name, pref))
    return out


def build_source_dictionary(lattices_by_split, args):
    from fairseq.data import Dictionary

    d = Dictionary()
    for lat in lattices_by_split:
        for w in lat.words():
            d.add_symbol(w)
    d.finalize(threshold=args.thresholdsrc, nwords=args.nwordssrc, padding_factor=args.padding_factor)
    return d


def write_lattices(lattices, src_dict, prefix, impl):
    import numpy as np
    import torch
    from fairseq.data import indexed_dataset

    packed = [lat.pack([src_dict.index(w) for w in lat.words()]) for lat in lattices]
    top = max([len(src_dict)] + [int(p.max()) + 1 for p in packed])
    builder = indexed_dataset.make_builder(prefix + ".bin", impl=impl, vocab_size=top)
    for p in packed:
        builder.add_item(torch.from_numpy(p))
    builder.finalize(prefix + ".idx")
    np.save(prefix + ".nchars.npy", np.array([lat.n_chars for lat in lattices], dtype=np.int64))
    unk = sum(int((p[2 + 2 * p[1]:2 + 3 * p[1]] == src_dict.unk()).sum()) for p in packed)
    edges = sum(int(p[1]) for p in packed)
    return unk, edges


def main(argv=None):
    """The command line: 0 once ``--destdir`` is written, 1 or 2 with one error line, 130 on Ctrl-C
    or SIGTERM (the temporary folder removed, ``--destdir`` as it was)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parse_args(argv)  # -h, unknown options and bad values: argparse's usage and one line, before any import
    from fairseq_local_core.file_io import sigterm_as_interrupt

    try:
        with sigterm_as_interrupt():
            return preprocess(argv)
    except KeyboardInterrupt:  # Ctrl-C while reading the input: nothing was written yet
        print("preprocess_lattices.py: interrupted; nothing was written", file=sys.stderr)
        return 130


def preprocess(argv=None):
    """Binarize the lattice-to-text data of the command line ``argv`` (fairseq-preprocess's options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parse_args(argv)  # -h, unknown options and bad values: argparse's usage and one line, before any import
    from fairseq import options, tasks
    from fairseq_cli import preprocess as fp

    from fairseq_local_core.lattice import LatticeError, read_lattices
    from fairseq_local_repro.text.text_input import has_text
    from fairseq_local_repro.text.unk_rate import log_rates, unk_warning

    parser = options.get_preprocessing_parser()
    parser.set_defaults(nwordssrc=50000, nwordstgt=50000, dataset_impl="mmap")
    args = parser.parse_args(argv)
    from fairseq_local_core.errors import ConfigError
    from fairseq_local.config_checks import check_preprocess_options
    from fairseq_local_core.file_io import NotOursError, OutputInUseError, check_ours, claim, mark_ours

    try:
        check_preprocess_options(args)  # --nwordssrc 0 would keep every word
    except ConfigError as e:
        print(f"preprocess_lattices.py: error: {e}", file=sys.stderr)
        return 2
    destdir = os.path.abspath(args.destdir)
    try:  # --destdir is this run's until it ends; only a folder a tool of the plugin made is replaced
        claim(destdir, "--destdir", run="preprocess_lattices.py run")
        check_ours(destdir, "--destdir")
    except (OutputInUseError, NotOursError) as e:
        print(f"preprocess_lattices.py: error: {e}", file=sys.stderr)
        return 2
    try:
        if not args.source_lang or not args.target_lang:
            raise LatticeError("--source-lang and --target-lang are required")
        if not args.trainpref and not args.srcdict:
            raise LatticeError("--trainpref is required unless --srcdict and --tgtdict are given")
        src, tgt = args.source_lang, args.target_lang
        splits = _splits(args)
        for _, pref in splits:
            for lang in (src, tgt):
                if not os.path.exists(f"{pref}.{lang}"):
                    raise LatticeError(f"{pref}.{lang}: no such file")
        lattices = {}
        for split, pref in splits:
            for lang in (src, tgt):
                _count_lines(f"{pref}.{lang}")  # UTF-8, before parsing
                if split == "train" and not has_text(f"{pref}.{lang}"):
                    raise LatticeError(f"{pref}.{lang}: the training file is empty")
            lattices[split] = read_lattices(f"{pref}.{src}")
            n_tgt = _count_lines(f"{pref}.{tgt}")
            if n_tgt != len(lattices[split]):
                raise LatticeError(f"line counts differ: {pref}.{src} has {len(lattices[split])} lines, "
                                   f"{pref}.{tgt} has {n_tgt}")
    except LatticeError as e:
        print(f"preprocess_lattices.py: error: {e}", file=sys.stderr)
        return 1

    existed = os.path.exists(destdir)
    parent, base = os.path.split(destdir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{base}.preprocess-", dir=parent)
    old = None
    try:
        args.destdir = tmp
        task = tasks.get_task("translation")
        src_dict = (task.load_dictionary(args.srcdict) if args.srcdict
                    else build_source_dictionary(lattices["train"], args))
        tgt_dict = (task.load_dictionary(args.tgtdict) if args.tgtdict
                    else fp._build_dictionary([fp._train_path(tgt, args.trainpref)], task=task, args=args, tgt=True))
        src_dict.save(os.path.join(tmp, f"dict.{src}.txt"))
        tgt_dict.save(os.path.join(tmp, f"dict.{tgt}.txt"))
        with _summaries() as target_log:
            fp._make_all(tgt, tgt_dict, args)  # exactly fairseq-preprocess's target side
        warnings = []
        for split, pref in splits:
            unk, edges = write_lattices(lattices[split], src_dict, fp.dataset_dest_prefix(args, split, src),
                                        args.dataset_impl)
            pct = 100.0 * unk / max(edges, 1)
            print(f"[{src}] {pref}.{src}: {len(lattices[split])} lattices, {edges} edges, "
                  f"{pct:.2f}% edges replaced by {src_dict.unk_word}", file=sys.stderr)
            warnings.append(unk_warning("preprocess_lattices.py", f"{split} ({src})", pct, edges, UNK_FIX_SRC,
                                        src_dict.unk_word, unit="lattice edges", what="words"))
        split_of = {f"{pref}.{tgt}": split for split, pref in splits}
        for _, path, toks, pct, unk_word in log_rates("\n".join(target_log)):
            warnings.append(unk_warning("preprocess_lattices.py", f"{split_of.get(path, path)} ({tgt})", pct, toks,
                                        UNK_FIX_TGT, unk_word, what="words"))
        for line in filter(None, warnings):
            print(line, file=sys.stderr)
        mark_ours(tmp, "preprocess_lattices.py")
        if existed:  # an earlier output of a tool (check_ours): replaced as a whole
            old = tmp + ".old"
            os.replace(destdir, old)
        os.replace(tmp, destdir)
    except KeyboardInterrupt:  # Ctrl-C: --destdir is replaced only when everything is built
        if old and not os.path.exists(destdir):
            os.replace(old, destdir)
        what = "was left as it was" if existed else "was not written"
        print(f"preprocess_lattices.py: interrupted; {destdir} {what}", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    print(f"wrote {destdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
