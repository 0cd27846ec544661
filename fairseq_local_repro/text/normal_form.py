"""The one Unicode normalisation of the text a model learns and of the text it is scored against.

``scripts/preprocess.sh`` writes every input line in :data:`FORM` (NFC, canonical composition: the
same characters, one code-point sequence) before tokenization and BPE, and trains sentencepiece with
:data:`SPM_RULE` (``identity``: no normalisation of its own; its default ``nmt_nfkc`` would fold
full-width punctuation and digits, which the raw references keep).  ``scripts/score.py`` reads
hypotheses and references in :data:`FORM` too, and says in one note when that changed a file.  A
system that reproduces the raw references therefore scores 100, whichever normal form each file is in.

    python -m fairseq_local_repro.text.normal_form <IN >OUT    # the filter preprocess.sh runs
"""
import sys
import unicodedata

FORM = "NFC"
SPM_RULE = "identity"


def normalise(text: str) -> str:
    return unicodedata.normalize(FORM, text)


def normalise_lines(lines):
    """``(lines in FORM, how many of them changed)``."""
    out = [normalise(line) for line in lines]
    return out, sum(a != b for a, b in zip(lines, out))


def main() -> int:
    stdin = open(sys.stdin.fileno(), encoding="utf-8", newline="\n", closefd=False)
    stdout = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    for line in stdin:
        stdout.write(normalise(line))
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
