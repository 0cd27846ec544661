"""Text inputs of the pipeline scripts: UTF-8 checked, lines counted right, one-line errors.

Python scripts import it (``from fairseq_local_repro.text.text_input import read_lines``);
shell scripts run it::

    python -m fairseq_local_repro.text.text_input PROG [--nonempty FILE]... [--same-lines A B]...
        [--blank-lines FILE]... FILE...

which checks that every FILE (and every --nonempty / --same-lines / --blank-lines file) is UTF-8
without NUL bytes (what a binary or UTF-16 file holds, which fairseq would binarize as a word),
that each --nonempty file has some text, and that each --same-lines pair has the same number of
lines, and otherwise prints ``PROG: error: ...`` naming the file and the first bad line, exit
status 2.  Blank lines (nothing but spaces, byte-order marks and line ends), which fairseq would
binarize as sentences without a word: a --same-lines pair with one blank side is an error (it
teaches translating something into nothing or nothing into something, and usually means a sentence
broken over two lines on one side, the pairs after it shifted); a pair blank on both sides and a
blank line of a --blank-lines file (a language-model corpus: blank lines between paragraphs are
what fairseq's own LM recipes keep) are one warning line each, naming the lines.

A line is what ``str.splitlines`` would not split inside: ``\\n``-terminated, plus a last line
without its newline (which ``wc -l`` does not count).  :func:`read_lines` drops byte-order marks
(U+FEFF, which editors on Windows put at the start of a file): invisible, they would otherwise stick
to the first word of a reference or a lattice.  Standard library only (no fairseq import).
"""
import argparse
import sys

from fairseq_local_core import blank_lines as blank
from fairseq_local_core.errors import InputFileError

CHUNK = 16 * 1024 * 1024


class TextInputError(InputFileError):
    """A missing, empty or non-UTF-8 text file; the message names the file and line."""


def _bad_utf8(path, lineno, line: bytes, err: UnicodeDecodeError) -> TextInputError:
    byte = line[err.start:err.start + 1].hex()
    return TextInputError(
        f"{path}:{lineno}: not UTF-8 ({err.reason}: byte 0x{byte} at byte {err.start + 1} of the line); "
        "convert the file to UTF-8 (e.g. iconv -f GB18030 -t UTF-8, or -f LATIN1)")


def _nul_byte(path, lineno, column) -> TextInputError:
    return TextInputError(
        f"{path}:{lineno}: a NUL byte (0x00) at byte {column} of the line: not text (fairseq would make it a "
        "word); remove it, or convert a UTF-16 file to UTF-8 (iconv -f UTF-16 -t UTF-8)")


def scan(path) -> int:
    """Check that ``path`` is UTF-8 without NUL bytes and return its number of lines (a last line without newline counts)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise TextInputError(f"{path}: no such file") from None
    except OSError as err:
        raise TextInputError(f"{path}: cannot read ({err.strerror})") from None
    lines, last = 0, b""
    with f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            if not chunk.endswith(b"\n"):
                chunk += f.readline()  # decode whole lines only
            try:
                chunk.decode("utf-8")
            except UnicodeDecodeError as err:
                start = chunk.rfind(b"\n", 0, err.start) + 1
                end = chunk.find(b"\n", err.start)
                line = chunk[start:end if end >= 0 else len(chunk)]
                sub = UnicodeDecodeError(err.encoding, line, err.start - start, err.end - start, err.reason)
                raise _bad_utf8(path, lines + chunk.count(b"\n", 0, err.start) + 1, line, sub) from None
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise _nul_byte(path, lines + chunk.count(b"\n", 0, nul) + 1, nul - chunk.rfind(b"\n", 0, nul))
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (1 if last not in (b"", b"\n") else 0)


BOM = "\ufeff"


def read_lines(path, what="file"):
    """The lines of a UTF-8 text file, without their line ends (``\\n`` or ``\\r\\n``) and byte-order marks."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TextInputError(f"{what} {path}: no such file") from None
    if b"\0" in data:
        scan(path)  # names the line with the NUL byte
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    try:
        return [line.decode("utf-8").rstrip("\r").replace(BOM, "") for line in lines]
    except UnicodeDecodeError:
        scan(path)  # names the first bad line
        raise  # pragma: no cover - scan raises first


def has_text(path) -> bool:
    """True when the (UTF-8) file has a line with a non-space character."""
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                return True
    return False


blank_pairs, blank_lines = blank.blank_pairs, blank.blank_lines  # the checks fairseq-preprocess gets too


def check_blank(pairs=(), files=()):
    """Warnings (lines) for blank lines that fairseq binarizes as sentences without a word; raises
    :class:`TextInputError` for a pair with one blank side (:mod:`fairseq_local_core.blank_lines`)."""
    try:
        return blank.check_blank(pairs, files)
    except blank.BlankLineError as err:
        raise TextInputError(str(err)) from None


def check(files=(), nonempty=(), same_lines=()):
    """The checks of the command line (raises :class:`TextInputError`)."""
    counts = {}
    for path in list(files) + list(nonempty) + [p for pair in same_lines for p in pair]:
        if path not in counts:
            counts[path] = scan(path)
    for path in nonempty:
        if not has_text(path):
            raise TextInputError(f"{path}: the file is empty (no text to learn from)")
    for a, b in same_lines:
        if counts[a] != counts[b]:
            raise TextInputError(f"line counts differ: {a} has {counts[a]} lines, {b} has {counts[b]}")
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prog", help="program name for the error line")
    p.add_argument("files", nargs="*")
    p.add_argument("--nonempty", action="append", default=[])
    p.add_argument("--same-lines", nargs=2, action="append", default=[])
    p.add_argument("--blank-lines", action="append", default=[])
    a = p.parse_intermixed_args(argv)
    try:
        check(a.files + a.blank_lines, a.nonempty, a.same_lines)
        for warning in check_blank(a.same_lines, a.blank_lines):
            print(f"{a.prog}: warning: {warning}", file=sys.stderr)
    except TextInputError as err:
        print(f"{a.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
