"""Normalisation of raw Chinese text before segmentation (used by scripts/recipes/prepare_nist_zhen.sh).

NFKC maps full-width Latin letters, digits and punctuation to their ASCII forms ("Ｂｉｌｌ２００８" ->
"Bill2008"); whitespace runs become one space; a space next to a Chinese character is dropped (it
is a segmentation of already segmented text, which the segmenters redo), while a space between two
non-Chinese characters is kept: it separates words ("Bill Clinton" stays two words).
"""
import re
import unicodedata

_CJK = "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_SPACE_NEXT_TO_CJK = re.compile(f"(?<=[{_CJK}]) | (?=[{_CJK}])")


def normalize(line: str) -> str:
    s = " ".join(unicodedata.normalize("NFKC", line).split())
    return _SPACE_NEXT_TO_CJK.sub("", s)
