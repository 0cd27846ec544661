"""Blank lines of a corpus, which fairseq binarizes as sentences without a word (only ``</s>``).

A line is blank when it holds nothing but spaces, byte-order marks (U+FEFF) and line ends.  In a
translation corpus a pair with one blank side is an error (:class:`BlankLineError`): it teaches
translating something into nothing or nothing into something, and usually means a sentence broken
over two lines on one side, the pairs after it shifted.  A pair blank on both sides and a blank
line of a language-model corpus (blank lines between paragraphs are what fairseq's own LM recipes
keep) are one warning line each, naming the lines (:func:`check_blank`).

``scripts/preprocess.sh`` checks its inputs with it (``fairseq_local_repro.text.text_input``), and
``fairseq_local/patches/preprocess_input.py`` checks what ``fairseq-preprocess`` is given directly.
Standard library only.
"""
from fairseq_local_core.errors import InputFileError

BOM = "\ufeff"


class BlankLineError(InputFileError):
    """A pair with one blank side; the message names the file and line."""


def _blank(line: bytes) -> bool:
    return not line.replace(BOM.encode("utf-8"), b"").strip()


def first(numbers, most=5) -> str:
    """``1, 2, 3, 4, 5, ...``: the first ``most`` of ``numbers``."""
    shown = ", ".join(map(str, numbers[:most]))
    return f"{shown}, ..." if len(numbers) > most else shown


def blank_pairs(a, b):
    """Line numbers (from 1) of the pairs blank on both sides and of those blank on one side only."""
    both, one = [], []
    with open(a, "rb") as fa, open(b, "rb") as fb:
        for n, (la, lb) in enumerate(zip(fa, fb), 1):
            ba, bb = _blank(la), _blank(lb)
            if ba and bb:
                both.append(n)
            elif ba or bb:
                one.append((n, a if ba else b, b if ba else a))
    return both, one


def blank_lines(path):
    with open(path, "rb") as f:
        return [n for n, line in enumerate(f, 1) if _blank(line)]


def check_blank(pairs=(), files=()):
    """Warnings (lines) for blank lines that fairseq binarizes as sentences without a word; raises
    :class:`BlankLineError` for a pair with one blank side."""
    warnings = []
    for a, b in dict.fromkeys(map(tuple, pairs)):  # a file given for two splits: said once
        both, one = blank_pairs(a, b)
        if one:
            n, blank, full = one[0]
            more = f" (and {len(one) - 1} more such pairs, lines {first([m for m, _, _ in one[1:]])})" if len(one) > 1 else ""
            raise BlankLineError(
                f"{blank}:{n}: blank line, but line {n} of {full} has text{more}: a pair with one empty side "
                "teaches the model to translate into (or from) nothing, and usually means a sentence broken over two "
                "lines, the pairs after it shifted; fix the line, or remove the pair from both files")
        if both:
            warnings.append(f"{a}, {b}: {len(both)} pairs blank on both sides (lines {first(both)}) are binarized "
                            "as sentences without a word (only </s>); remove them from both files if they are not meant")
    for path in dict.fromkeys(files):
        lines = blank_lines(path)
        if lines:
            warnings.append(f"{path}: {len(lines)} blank lines (lines {first(lines)}) are binarized as sentences "
                            "without a word (only </s>), as fairseq's LM recipes keep paragraph breaks; remove them "
                            "if they are not meant")
    return warnings
