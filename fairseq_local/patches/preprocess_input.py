"""``fairseq-preprocess --user-dir fairseq_local`` checks its text for blank lines before binarizing.

What it changes: ``fairseq_cli.preprocess.main`` (the outer layer there, :mod:`fairseq_local.hook_points`).  For whom: ``fairseq-preprocess --user-dir
fairseq_local`` (text without blank lines binarizes byte for byte as in fairseq).  Why:

fairseq binarizes a blank line as a sentence without a word (only ``</s>``), silently.
``scripts/preprocess.sh`` checks its inputs; run directly, fairseq-preprocess gets the same checks
(:mod:`fairseq_local_core.blank_lines`) for every file it reads (``--trainpref``, ``--validpref``,
``--testpref``, each language): a translation pair with one blank side is one error naming the
file and line (exit status 2, nothing binarized); pairs blank on both sides, and blank lines of an
``--only-source`` corpus, are one warning per file with their count and first line numbers.
fairseq-preprocess imports the ``--user-dir`` before it parses its options, so
``patches/shared_targets.py`` finds its module loaded and wraps its ``main``, with this check as
a layer.
"""
import logging
import os

from fairseq_local import hook_points
from fairseq_local_core.blank_lines import check_blank

logger = logging.getLogger(__name__)

def _file(prefix: str, lang) -> str:
    return f"{prefix}.{lang}" if lang else prefix  # fairseq_cli.preprocess._file_name


def text_files(args):
    """``(pairs, files)``: the (source, target) files of each split of a translation corpus, or the
    files of an ``--only-source`` corpus (those that exist: fairseq names a missing one)."""
    prefixes = [args.trainpref, args.validpref] + (args.testpref.split(",") if args.testpref else [])
    prefixes = [p for p in prefixes if p]
    if args.only_source or not args.target_lang:
        files = [_file(p, args.source_lang) for p in prefixes]
        return [], [f for f in files if os.path.isfile(f)]
    pairs = [(_file(p, args.source_lang), _file(p, args.target_lang)) for p in prefixes]
    return [pair for pair in pairs if all(os.path.isfile(f) for f in pair)], []


def check_args(args):
    pairs, files = text_files(args)
    for warning in check_blank(pairs, files):
        logger.warning(warning)


def checked_main(main, args, *rest, **kwargs):
    check_args(args)
    return main(args, *rest, **kwargs)


def install():
    hook_points.add(hook_points.PREPROCESS_MAIN, checked_main)
