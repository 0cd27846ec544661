"""The verdicts of ``docs/results.md``: a family's ``verdict.md`` and the word each tested claim gets.

A ``verdict.md`` starts with its fields, then the summary, then ``## Analysis``::

    **Claim:** M9 beats M1 ...              (the family's claim, as the paper states it)
    **Paper:** +1.61 BLEU (IWSLT14 ...)     (the paper's numbers)
    **Tested:** clean_split: m9 > m1 (paper +1.61); clean_split: m9 > m5 (paper +1.36)
    **Also tested:** m9 > m1 (paper +1.61)   (older splits and other settings: the appendix's table)
    **Chosen on dev:** ...                  (every choice of setting, made on dev only)
    **To settle it:** ...                   (what scale, seeds or data would settle the question)

    **No effect.** A few lines ...

    ## Analysis
    ...

Each tested item is ``[variant:] A > B (paper EFFECT[; reading])``: "A is better than B" in the
folder ``variant`` (the family's own folder without one), with the paper's effect in the claim's
direction as the score's difference (``+1.61``: BLEU) or as a relative change (``-5.9 %``: perplexity),
or ``none`` where the paper gives no number; ``reading`` names the reading of an ambiguous paper the
item tests.  Links in a verdict are relative to ``docs/``.

The word of each item is computed from the folder's statistics, never copied from the prose
(:func:`claim_verdict`, :data:`WORDS`); ``tests/test_repro_page.py`` checks that each summary's bold
opening states the words of its tested items.
"""
import os
import re
from typing import Dict, List, NamedTuple, Optional

from fairseq_local_repro import compare

SIGNIFICANCE = 0.05  # the seed-level test's level, Holm-corrected across a folder's comparisons
PAPER_LEVEL = 0.025  # the paper test's one-sided level: the paper's effect outside the 95% interval

# the verdict words and what each means, in the order the page defines them
WORDS = {
    "holds": "the seed-level Holm p is below 0.05 in the paper's direction and the paper's effect lies in "
             "(or below) the 95% interval",
    "smaller than the paper's": "the seed-level Holm p is below 0.05 in the paper's direction, but the paper's "
                                "effect lies above the 95% interval: a real gain, smaller than published",
    "consistent with the paper": "no significant difference, and the 95% interval holds both zero and the "
                                 "paper's effect: too few seeds to tell",
    "no effect": "no significant difference, and the paper's effect lies above the 95% interval: the paper's "
                 "gain is excluded, a smaller one is not",
    "contradicted": "the seed-level Holm p is below 0.05 against the paper's direction",
    "not significant": "no significant difference where the paper gives no number to test",
    "one seed": "one seed per system, which allows no seed-level test",
}

FIELDS = {"claim": "Claim", "paper": "Paper", "tested": "Tested", "also": "Also tested", "dev": "Chosen on dev",
          "settle": "To settle it"}
FIELD_RE = re.compile(r"^\*\*(" + "|".join(map(re.escape, FIELDS.values())) + r"):\*\*\s*(.*)$")
TESTED_RE = re.compile(r"^(?:([\w.]+):\s*)?(\w+)\s*>\s*(\w+)\s*\(paper\s+(none|[+\-−]?\d+(?:\.\d+)?)(\s*%)?"
                       r"(?:;\s*([^)]+))?\)$")


class Verdict(NamedTuple):
    fields: Dict[str, str]  # the fields given (keys of FIELDS)
    summary: str  # the lines before "## Analysis"
    analysis: str  # "## Analysis" and what follows, or ""


class Tested(NamedTuple):
    variant: Optional[str]  # the folder below the family's, or None
    better: str
    other: str
    paper: Optional[float]  # the paper's effect in the claim's direction (None: no number)
    relative: bool  # paper is a relative change in percent
    reading: Optional[str]  # the reading of an ambiguous paper this item tests


def read_verdict(path: str) -> Verdict:
    """A family's ``verdict.md``: its fields, its summary and its analysis."""
    if not os.path.isfile(path):
        return Verdict({}, "", "")
    with open(path, encoding="utf-8") as f:
        lines = f.read().rstrip("\n").split("\n")
    fields = {}
    while lines and (FIELD_RE.match(lines[0]) or (not lines[0].strip() and not fields)):
        m = FIELD_RE.match(lines.pop(0))
        if m:
            fields[next(k for k, v in FIELDS.items() if v == m.group(1))] = m.group(2).strip()
    cut = next((i for i, line in enumerate(lines) if line.strip() == "## Analysis"), len(lines))
    return Verdict(fields, "\n".join(lines[:cut]).strip(), "\n".join(lines[cut:]).strip())


def tested_items(verdict: Verdict, path: str, field: str = "tested") -> List[Tested]:
    """The items of ``**Tested:**`` (or ``**Also tested:**`` with ``field="also"``)."""
    items = []
    for item in _split_items(verdict.fields.get(field, "")):
        m = TESTED_RE.match(item)
        if not m:
            raise ValueError(f"{path}: **{FIELDS[field]}:** '{item}' is not "
                             "'[variant:] system > system (paper EFFECT[ %][; reading])'")
        variant, better, other, paper, pct, reading = m.groups()
        if variant and not os.path.isfile(os.path.join(os.path.dirname(path), variant, "comparison.json")):
            raise ValueError(f"{path}: **{FIELDS[field]}:** '{item}' names '{variant}', which has no published "
                             "comparison")
        value = None if paper == "none" else float(paper.replace("−", "-"))
        items.append(Tested(variant, better, other, value, bool(pct), reading))
    return items


def _split_items(text: str) -> List[str]:
    """``;``-separated items, a ``;`` inside parentheses (a reading) kept in its item."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [x for x in items + [cur.strip()] if x]


def claim_verdict(comparison: dict, better: str, other: str, paper: Optional[float] = None,
                  relative: bool = False) -> dict:
    """The verdict on "``better`` beats ``other``" from the folder's statistics: the means and their
    difference, the seed-level test, the paper test of the paper's effect ``paper`` (a relative change
    in percent of ``other``'s mean with ``relative``) and the word of :data:`WORDS`."""
    st = comparison.get("statistics") or {}
    for c in st.get("comparisons", []):
        if (c["system"], c["reference"]) in ((better, other), (other, better)):
            break
    else:
        raise ValueError(f"{comparison['family']}: no comparison of {better} with {other} in its statistics")
    sign = 1 if c["system"] == better else -1
    higher = st.get("higher_is_better", comparison.get("kind") != "lm")
    a, b = st["systems"][better], st["systems"][other]
    seed = c["seed_level"]
    if seed is not None and sign < 0:  # the claim's direction
        seed = dict(seed, delta=-seed["delta"], ci95=[-seed["ci95"][1], -seed["ci95"][0]])
    out = {"better": better, "other": other, "mean": a["mean"], "ref_mean": b["mean"],
           "delta": sign * c["delta_of_means"], "seeds": c["paired_seeds"], "better_in": None, "seed_level": seed,
           "per_sentence": {k: dict(v, delta=sign * v["delta"]) for k, v in c["per_sentence"].items()},
           "paper": None, "paper_p": None, "excluded": None}
    out["better_in"] = c["better_in"] if sign > 0 else c["paired_seeds"] - c["better_in"]
    if paper is not None:
        out["paper"] = round(paper / 100 * b["mean"], 2) if relative else paper
    if seed is None:
        out["word"] = "one seed"
        return out
    gain = seed["delta"] if higher else -seed["delta"]
    significant = seed["p_holm"] < SIGNIFICANCE
    if out["paper"] is not None:
        out["paper_p"] = round(compare.paper_test(seed["delta"], seed["sd"], len(seed["seeds"]), out["paper"],
                                                  higher), 4)
        out["excluded"] = out["paper_p"] < PAPER_LEVEL
    if significant and gain < 0:
        out["word"] = "contradicted"
    elif out["paper"] is None:
        out["word"] = "holds" if significant else "not significant"
    elif significant:
        out["word"] = "smaller than the paper's" if out["excluded"] else "holds"
    else:
        out["word"] = "no effect" if out["excluded"] else "consistent with the paper"
    return out
