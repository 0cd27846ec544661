"""The ``<unk>`` warning of the preprocessing scripts (``scripts/preprocess.sh``,
``scripts/preprocess_lattices.py``): one line per split whose tokens are more than 1 % ``<unk>``,
naming the split, the rate and what to do.  The rates come from fairseq-preprocess's summary lines
(:func:`log_rates`) or are counted by the caller."""
import re
from typing import List, Optional, Tuple

__all__ = ["LIMIT_PERCENT", "unk_warning", "log_rates"]

LIMIT_PERCENT = 1.0
# fairseq_cli.preprocess: "[en] data/train.en: 900 sents, 12000 tokens, 3.2% replaced (by <unk>)"
_LOG_LINE = re.compile(r"\[(\S+)\] (\S+): (\d+) sents, (\d+) tokens, (\S+)% replaced \(by (\S+)\)")


def unk_warning(prog: str, split: str, percent: float, tokens: int, fix: str, unk_word: str = "<unk>",
                unit: str = "tokens", what: str = "words or BPE pieces") -> Optional[str]:
    """``PROG: warning: SPLIT: P% of its N UNIT are <unk>, ... (more than 1%: FIX)``, or None at
    or below 1 %."""
    if not percent > LIMIT_PERCENT:  # nan (an empty split) gives no warning
        return None
    return (f"{prog}: warning: {split}: {percent:.1f}% of its {tokens} {unit} are {unk_word}, {what} not in the "
            f"dictionary (more than {LIMIT_PERCENT:g}%: {fix})")


def log_rates(text: str) -> List[Tuple[Optional[str], str, int, float, str]]:
    """(language or None, input file, tokens, percent replaced, unk word) of each summary line of
    fairseq-preprocess in ``text``."""
    return [(None if lang == "None" else lang, path, int(toks), float(pct), unk)
            for lang, path, _, toks, pct, unk in _LOG_LINE.findall(text)]
