"""One field of a fairseq-generate log, one line per sentence in corpus order.

    python -m fairseq_local_repro.text.gen_text GEN_LOG H|T|S OUT [--expect N]

H = the best hypothesis of each sentence (the first H- line of its id, as fairseq writes the n-best
best first), T = the binarized reference, S = the source.  Every sentence id 0..N-1 must appear
exactly once (N: --expect, else the number of S- lines): a log that lost sentences is an error,
not a silently shorter file.  OUT is written atomically.
"""
import os
import sys

from fairseq_local_core import file_io

PROG = "gen_text.py"


class GenTextError(ValueError):
    """A log that is missing, not UTF-8 or lost sentences (one line)."""


def fail(msg):
    raise GenTextError(msg)


def parse(path, field):
    """{sentence id: text} of `field` (H, T or S) and the number of S- lines of a generate log."""
    if not os.path.isfile(path):
        fail(f"generate log '{path}' does not exist")
    texts, sources = {}, set()
    text_col = 2 if field in ("H", "D") else 1  # H-/D- lines carry a score before the text
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            for n, line in enumerate(f, 1):
                if len(line) < 3 or line[1] != "-" or line[0] not in "STHD":
                    continue
                head, _, rest = line.rstrip("\n").partition("\t")
                try:
                    sid = int(head[2:])
                except ValueError:
                    continue  # e.g. a log line that happens to start with "S-"
                if line[0] == "S":
                    sources.add(sid)
                if line[0] == field and sid not in texts:
                    cols = rest.split("\t")
                    if field in ("H", "D") and len(cols) < 1:
                        fail(f"{path}:{n}: malformed {field}- line")
                    texts[sid] = cols[text_col - 1] if len(cols) >= text_col else ""
        except UnicodeDecodeError as e:
            fail(f"{path}:{n + 1}: not UTF-8 ({e.reason})")
    return texts, len(sources)


def extract(path, field, expect=None):
    """The ``field`` text of every sentence of the log ``path`` in corpus order (``expect``: the
    number of sentences, else the number of S- lines); :class:`GenTextError` when any is lost."""
    texts, n_src = parse(path, field)
    n = n_src if expect is None else expect
    missing = [i for i in range(n) if i not in texts]
    extra = sorted(i for i in texts if not 0 <= i < n)
    if n == 0:
        fail(f"{path}: no sentences (is it a fairseq-generate log?)")
    if missing or extra:
        first = missing[0] if missing else extra[0]
        fail(f"{path}: {len(texts)} {field}- lines for {n} sentences (first {'missing' if missing else 'unexpected'}"
             f" id {first}); generation lost or added sentences")
    return [texts[i] for i in range(n)]


def write(path, field, out, expect=None):
    """:func:`extract` written to ``out`` atomically (a full disk: :class:`GenTextError` naming ``out``)."""
    lines = extract(path, field, expect)
    try:
        file_io.write_lines(out, lines)
    except file_io.DiskFullError as e:  # OUT: no space left on device (OUT left as it was)
        fail(str(e))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    expect = None
    try:
        if "--expect" in argv:
            i = argv.index("--expect")
            try:
                expect = int(argv[i + 1])
            except (IndexError, ValueError):
                fail("--expect needs an integer")
            argv = argv[:i] + argv[i + 2:]
        if len(argv) != 3 or argv[1] not in ("H", "T", "S", "D"):
            fail("usage: gen_text.py GEN_LOG H|T|S|D OUT [--expect N]")
        write(argv[0], argv[1], argv[2], expect)
    except GenTextError as err:
        sys.exit(f"{PROG}: error: {err}")


if __name__ == "__main__":
    main()
