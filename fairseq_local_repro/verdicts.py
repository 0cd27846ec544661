"""The verdicts of ``docs/results.md``: a family's ``verdict.md`` and the word each claim gets.

A ``verdict.md`` starts with its fields, then the summary, then ``## Analysis``::

    **Claim:** M9 beats M1 ...              (the family's claim, as the paper states it)
    **Paper:** +1.61 BLEU (IWSLT14 ...)     (the paper's numbers)
    **Tested:** clean_split: m9 > m1 (paper +1.61 of 30.38); ...   (the primary setting of each claim)
    **Also tested:** m9 > m1 (paper +1.61 of 30.38)   (sensitivity rows: other splits and settings)
    **Controls:** clean_split: m9 > wider_cnn (paper none)   (comparisons the paper makes no claim on)
    **Chosen on dev:** ...                  (how each primary setting was chosen, on dev)
    **To settle it:** ...                   (what scale, seeds or data would settle the question)

    **Smaller than the paper's, sign open.** A few lines ...

    ## Analysis
    ...

Each item is ``[variant:] A > B (paper EFFECT[ %][ of REF][; reading])``: "A is better than B" in
the folder ``variant`` (the family's own folder without one), with the paper's effect in the
claim's direction as the score's difference (``+1.61``: BLEU) or as a relative change (``-5.9 %``:
perplexity), or ``none`` where the paper gives no number; ``REF`` is the paper's score of B, which
gives the effect's reading in the other unit (relative BLEU, absolute perplexity); ``reading`` names
the reading of an ambiguous paper the item tests.  ``**Tested:**`` holds one item per claim, its
primary setting (declared here, chosen on dev by the rule ``**Chosen on dev:**`` states); the other
settings of a claim are ``**Also tested:**`` rows, shown without a word.  Links in a verdict are
relative to ``docs/``.

The word of each claim is computed from the runs' seed scores by :func:`decide`, never copied from
the prose: the paired seed differences give a t interval at the level Holm's procedure assigns the
claim among its family's claims (:func:`holm_levels`; controls are no claims and take no part), and
the word follows from where that interval lies against zero and the paper's effect, and from the
minimum detectable effect at that level (:func:`minimum_detectable_effect`).
``tests/test_repro_page.py`` checks that each summary's bold opening states the words of its claims.
"""
import math
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

ALPHA = 0.05  # the family-wise level of the claims' tests (Holm over a family's claims)
POWER = 0.8  # the power at which the minimum detectable effect is computed
EQUIVALENCE_SHARE = 0.5  # "no effect larger than ±m" needs m at most this share of the paper's effect

HOLDS = "holds"
SMALLER = "smaller than the paper's"
NO_EFFECT = "no effect larger than ±m"
INCONCLUSIVE = "inconclusive"
SIGN_OPEN = "smaller than the paper's, sign open"
CONTRADICTED = "contradicted"
ONE_SEED = "one seed"

# the verdict words and what each means, in the order the page defines them ("the interval": the
# claim's interval at its Holm level; "the paper's effect": in the unit that carries it; "the claim's
# side": higher BLEU, lower perplexity)
WORDS = {
    HOLDS: "the interval lies on the claim's side of zero and holds the paper's effect (or lies beyond it)",
    SMALLER: "the interval lies between zero and the paper's effect: a real gain, smaller than published",
    NO_EFFECT: "an equivalence test (two one-sided tests, each at half the claim's level): the interval holds zero "
               "and lies within ±m, with m (stated) at most half the paper's effect",
    INCONCLUSIVE: "the interval holds zero and the paper's effect, or it holds zero and the minimum detectable "
                  "effect exceeds the paper's: these seeds cannot tell",
    SIGN_OPEN: "the interval holds zero but not the paper's effect, and its width allows no equivalence "
               "margin of half the paper's effect: the paper's size is excluded, the sign is not",
    CONTRADICTED: "the interval lies on the other side of zero: the other system is better",
}

FIELDS = {"claim": "Claim", "paper": "Paper", "tested": "Tested", "also": "Also tested", "controls": "Controls",
          "dev": "Chosen on dev", "settle": "To settle it"}
FIELD_RE = re.compile(r"^\*\*(" + "|".join(map(re.escape, FIELDS.values())) + r"):\*\*\s*(.*)$")
TESTED_RE = re.compile(r"^(?:([\w.]+):\s*)?(\w+)\s*>\s*(\w+)\s*\(paper\s+(none|[+\-−]?\d+(?:\.\d+)?)(\s*%)?"
                       r"(?:\s+of\s+(\d+(?:\.\d+)?))?(?:;\s*([^)]+))?\)$")


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
    ref: Optional[float] = None  # the paper's score of ``other`` (the effect's reading in the other unit)


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
    """The items of ``**Tested:**`` (``field="also"``: ``**Also tested:**``; ``"controls"``: ``**Controls:**``)."""
    items = []
    for item in _split_items(verdict.fields.get(field, "")):
        m = TESTED_RE.match(item)
        if not m:
            raise ValueError(f"{path}: **{FIELDS[field]}:** '{item}' is not "
                             "'[variant:] system > system (paper EFFECT[ %][ of REF][; reading])'")
        variant, better, other, paper, pct, ref, reading = m.groups()
        if variant and not os.path.isfile(os.path.join(os.path.dirname(path), variant, "comparison.json")):
            raise ValueError(f"{path}: **{FIELDS[field]}:** '{item}' names '{variant}', which has no published "
                             "comparison")
        value = None if paper == "none" else float(paper.replace("−", "-"))
        items.append(Tested(variant, better, other, value, bool(pct), reading, float(ref) if ref else None))
    if field == "tested":
        claims = [(i.better, i.other, i.reading) for i in items]
        twice = sorted({c for c in claims if claims.count(c) > 1})
        if twice:
            raise ValueError(f"{path}: **Tested:** names the claim {twice[0][0]} > {twice[0][1]} more than once; "
                             "one primary setting per claim, the others go to **Also tested:**")
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


# ---- the word ------------------------------------------------------------------------------------


def holm_levels(pvalues: Sequence[float], alpha: float = ALPHA) -> List[float]:
    """The two-sided level of each claim's test under Holm's step-down procedure (Holm 1979) over the
    family's claims, in the order given: sorted by p, the j-th of m (from 0) is tested at
    ``alpha / (m - j)`` until the first that is not rejected, whose level every later one keeps.  A
    claim's interval at ``1 - level`` excludes zero exactly when Holm rejects its null hypothesis."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    levels = [0.0] * m
    stopped = None
    for j, i in enumerate(order):
        level = stopped if stopped is not None else alpha / (m - j)
        levels[i] = level
        if stopped is None and not pvalues[i] < level:
            stopped = level
    return levels


def minimum_detectable_effect(sd: float, k: int, level: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference that the two-sided paired t-test over ``k`` seeds at
    ``level`` finds with probability ``power``, when the seed differences have standard deviation
    ``sd``: the root in delta of P(|T| > t_{1-level/2, k-1}) = power, T noncentral t with k - 1
    degrees of freedom and noncentrality delta / (sd / sqrt(k)) (scipy.stats.nct)."""
    from scipy import optimize, stats

    if k < 2:
        raise ValueError("minimum_detectable_effect needs two or more paired seeds")
    if sd == 0.0:
        return 0.0
    df, se = k - 1, sd / math.sqrt(k)
    t = stats.t.ppf(1 - level / 2, df)

    def short(delta: float) -> float:
        nc = delta / se
        wrong_side = stats.nct.cdf(-t, df, nc)  # a vanishing tail, which scipy returns as nan for some nc
        return stats.nct.sf(t, df, nc) + (0.0 if math.isnan(wrong_side) else wrong_side) - power

    hi = se
    while short(hi) < 0:
        hi *= 2
    return float(optimize.brentq(short, 0.0, hi, xtol=1e-10))


def decide(lo: float, hi: float, paper: float, mde: float) -> Tuple[str, Optional[float]]:
    """The word of :data:`WORDS` for a claim whose gain (its score difference in the claim's
    direction) has the interval ``[lo, hi]`` at the claim's level, against the paper's effect
    ``paper`` (> 0, the same direction and unit) and the minimum detectable effect ``mde`` at that
    level; with the equivalence margin m for :data:`NO_EFFECT` (None for the other words).  The
    interval is closed: an end on zero or on the paper's effect holds it."""
    if not paper > 0:
        raise ValueError(f"the paper's effect in the claim's direction must be positive (got {paper})")
    if lo > hi:
        raise ValueError(f"the interval [{lo}, {hi}] has its ends swapped")
    if hi < 0:
        return CONTRADICTED, None
    if lo > 0:
        return (SMALLER if hi < paper else HOLDS), None
    if hi >= paper or mde > paper:
        return INCONCLUSIVE, None
    margin = max(-lo, hi)  # two one-sided tests at the level reject |gain| >= margin
    if margin <= EQUIVALENCE_SHARE * paper:
        return NO_EFFECT, margin
    return SIGN_OPEN, None


def shown_word(word: str, margin: Optional[float], unit: str) -> str:
    """The word as the page prints it: the equivalence margin rounded up to two decimals."""
    if word != NO_EFFECT:
        return word
    return f"no effect larger than ±{math.ceil(round(margin * 100, 6)) / 100:.2f} {unit}"


# ---- a claim's statistics ------------------------------------------------------------------------


def _key(comparison: dict) -> Tuple[str, bool]:
    return ("ppl", False) if comparison.get("kind") == "lm" else ("bleu", True)


def seed_scores(comparison: dict, system: str) -> Dict[int, float]:
    """The test score of each seed of ``system`` in a loaded comparison (``page.load_family``)."""
    key, _ = _key(comparison)
    scores = {r["seed"]: float(r["test"][key]) for r in comparison["systems"] if r["system"] == system}
    if not scores:
        raise ValueError(f"{comparison['family']}: no run of {system}")
    return scores


def seed_p(comparison: dict, better: str, other: str) -> Optional[float]:
    """The two-sided paired t-test p over the seeds both systems ran (None with fewer than two)."""
    from fairseq_local_repro.significance import seed_t_test

    t = seed_t_test(seed_scores(comparison, better), seed_scores(comparison, other))
    return None if t is None else t["p"]


def claim_verdict(comparison: dict, item: Tested, level: float = ALPHA) -> dict:
    """The verdict on ``item`` ("``better`` beats ``other``") from the seed scores of a loaded
    comparison: the means, the paired seeds, the mean paired difference ``delta`` (score units:
    better minus other) with its t interval ``ci`` at ``1 - level``, the minimum detectable effect,
    the paper's effect in score units (``paper``; ``paper_other``: its reading in the other unit,
    with ``item.ref``), and the word (:func:`decide`; ``word_other`` in the other unit)."""
    from scipy import stats

    from fairseq_local_repro.significance import paper_test, seed_t_test

    key, higher = _key(comparison)
    a, b = seed_scores(comparison, item.better), seed_scores(comparison, item.other)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    out = {"better": item.better, "other": item.other, "mean": mean(list(a.values())),
           "ref_mean": mean(list(b.values())), "unit": key, "level": level, "paper": None, "paper_other": None,
           "word": ONE_SEED, "margin": None, "word_other": None, "margin_other": None, "ci": None, "mde": None,
           "p": None, "paper_p": None}
    shared = sorted(set(a) & set(b))
    out["seeds"] = len(shared)
    out["better_in"] = sum((a[k] > b[k]) if higher else (a[k] < b[k]) for k in shared)
    out["delta"] = mean([a[k] - b[k] for k in shared]) if shared else out["mean"] - out["ref_mean"]
    if item.paper is not None:
        if item.relative:
            out["paper"] = item.paper / 100 * out["ref_mean"]
            out["paper_other"] = None if item.ref is None else item.paper / 100 * item.ref
        else:
            out["paper"] = item.paper
            out["paper_other"] = None if item.ref is None else item.paper / item.ref * out["ref_mean"]
    t = seed_t_test(a, b)
    if t is None:
        return out
    k = len(t["seeds"])
    half = float(stats.t.ppf(1 - level / 2, k - 1) * t["sd"] / math.sqrt(k))
    out.update(p=t["p"], sd=t["sd"], ci=(t["delta"] - half, t["delta"] + half),
               mde=minimum_detectable_effect(t["sd"], k, level))
    if out["paper"] is None:
        out["word"] = None
        return out
    sign = 1.0 if higher else -1.0
    lo, hi = sorted((sign * out["ci"][0], sign * out["ci"][1]))
    out["word"], out["margin"] = decide(lo, hi, sign * out["paper"], out["mde"])
    out["paper_p"] = paper_test(t["delta"], t["sd"], k, out["paper"], higher)
    if out["paper_other"] is not None:
        out["word_other"], out["margin_other"] = decide(lo, hi, sign * out["paper_other"], out["mde"])
    return out


def family_verdicts(folder: str, items: List[Tested], load) -> List[dict]:
    """The verdicts of a family's claims (``items``, its ``**Tested:**``), each at the level Holm's
    procedure gives it over those claims (:func:`holm_levels`; ``load``: ``page.load_family``)."""
    comps = [load(os.path.join(folder, i.variant) if i.variant else folder) for i in items]
    ps = [seed_p(c, i.better, i.other) for c, i in zip(comps, items)]
    tested = [j for j, p in enumerate(ps) if p is not None]
    levels = dict(zip(tested, holm_levels([ps[j] for j in tested])))
    return [claim_verdict(c, i, levels.get(j, ALPHA)) for j, (c, i) in enumerate(zip(comps, items))]
