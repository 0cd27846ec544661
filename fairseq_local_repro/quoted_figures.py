"""The figures a results text quotes, checked against the committed JSON (issue: no sentence may
outlive its numbers).

The convention: the check covers our measured statistics wherever a verdict (``verdict.md``: its
fields but the claim, the paper and the tested items, its summary and its analysis) or a family
page's "Results" section (outside the generated ``results-table`` blocks) quotes them, in these
forms:

* a p-value: the number after ``p``, ``p =``, ``p <``, ``Holm`` or ``Holm p``, and the numbers
  listed right after it (``Holm p 0.188 and 0.072``, ``(p 0.49, 0.11, 0.50)``); after ``Holm`` it
  must be a Holm-corrected value;
* an interval: ``[a, b]`` or ``a to b`` with both ends signed (``−0.81 to +1.97``);
* a t statistic: ``t = x``;
* a gap: a signed number (``+1.46``, ``Δ −0.57``), and a signed percentage (``−2.8 %``);
* a score: a number followed by ``BLEU``, ``ppl``, ``test ppl`` or ``dev ppl``.

Each must equal, at the precision shown, a figure of its kind that the family's committed files
give (:func:`committed_figures`): the statistics of every ``comparison.json`` of the family (p and
Holm values, intervals, t, differences, means, sds), its runs (test scores, their intervals, best and
per-epoch dev perplexities), the differences and relative changes of runs of the same seed and of
system means, the tables the appendix ``docs/results/<family>.md`` generates from the committed
files (length buckets, equal-update tables, entropies), and each tested claim's paper test.  A figure
of another kind is not written in these forms, or is one of the paper's: the numbers of the
verdict's ``**Paper:**`` field and its tested items' paper effects count as gaps and scores.
Where a sentence names exactly two systems of the family (:data:`ALIASES`), its figures are checked
against that comparison alone (:func:`comparison_errors`): signed gaps and intervals in one
orientation of the pair for the whole sentence (a flipped sign or a mirrored interval fails), each
p-value against its own test (the last one the sentence names: seed-level, two-level, per-sentence
or the paper test; ``Holm p < 0.001`` must hold for that test's value), and a change after ``Δ``
carries its sign.  Parameter counts (``5.16M``), seeds, epochs, updates, unsigned percentages and the training logs'
figures are outside the check.  A figure of an earlier stage (two seeds of five, a test of fewer
resamples) is in no committed file, so the check fails on it.
"""
import itertools
import json
import re
import statistics
from pathlib import Path

from fairseq_local_repro import page as repro_page
from fairseq_local_repro import verdicts

NUM = r"\d+(?:\.\d+)?"
SIGNED = r"[+\-−]\d+\.\d+"
P_RE = re.compile(r"(?<![\w'’])(p|Holm(?: p)?)\s*(=|<|≈)?\s*(" + NUM + r")((?:(?:,\s*|,?\s+and\s+)" + NUM + r"(?![\w.]))*)")
INTERVAL_RE = re.compile(r"\[\s*(" + SIGNED + r"),\s*(" + SIGNED + r")\s*\]|(?<![\w.])(" + SIGNED + r")\s+to\s+(" + SIGNED + r")(?![\d.])")
T_RE = re.compile(r"(?<![\w'’])t\s*=\s*(" + SIGNED.replace("\\.\\d+", "(?:\\.\\d+)?") + "|" + NUM + ")")
GAP_RE = re.compile(r"(?<![\w.\d])(?<!t = )(" + SIGNED + r")(?![\d.])(?!\s*%)")
SCORE_RE = re.compile(r"(?<![\w.+\-−])(\d+\.\d+)\s+(?:BLEU|ppl|test ppl|dev ppl)\b")
PCT_RE = re.compile(r"(?<![\w.\d])(" + SIGNED.replace(r"\.\d+", r"(?:\.\d+)?") + r")\s*%")


def _walk(x, key=None, out=None):
    out = [] if out is None else out
    if isinstance(x, dict):
        for k, v in x.items():
            _walk(v, k, out)
    elif isinstance(x, list):
        if key == "ci95" and len(x) == 2 and all(isinstance(v, (int, float)) for v in x):
            out.append((key, tuple(x)))
        else:
            for v in x:
                _walk(v, key, out)
    elif isinstance(x, (int, float)) and not isinstance(x, bool):
        out.append((key, float(x)))
    return out


def committed_figures(folder: Path) -> dict:
    """Per kind (``p``, ``holm``, ``interval``, ``t``, ``gap``, ``relative``, ``score``), the figures the
    committed files of the family folder ``docs/results/reproduce/<family>`` give."""
    kinds = {"p": set(), "holm": set(), "interval": set(), "gap": set(), "score": set(), "relative": set(), "t": set()}
    metric = lambda r: r["test"].get("bleu", r["test"].get("ppl"))  # noqa: E731
    dev = lambda r: r.get("dev_ppl")  # noqa: E731
    family_runs, means = [], []
    for comp in [folder, *sorted(p.parent for p in folder.glob("**/comparison.json") if p.parent != folder)]:
        stats = json.loads((comp / "comparison.json").read_text()).get("statistics") or {}
        for key, x in _walk(stats):
            if key in ("p", "p_holm"):
                kinds["p"].add(x)
                if key == "p_holm":
                    kinds["holm"].add(x)
            elif key == "ci95" and isinstance(x, tuple):
                kinds["interval"].add(x)
            elif key == "t":
                kinds["t"].add(x)
            elif key in ("delta", "delta_of_means"):
                kinds["gap"].add(x)
            elif key in ("mean", "sd", "scores", "score", "ci95"):
                kinds["score"].add(x)
        runs = [dict(json.loads(p.read_text()), _folder=str(comp)) for p in comp.glob("*-s*.json")]
        family_runs += runs
        for system in {r["system"] for r in runs}:
            for f in (metric, dev):
                xs = [f(r) for r in runs if r["system"] == system and f(r) is not None]
                if xs:
                    kinds["score"] |= {max(xs) - min(xs), statistics.mean(xs)}
                    means.append(statistics.mean(xs))
        for r in runs:
            kinds["score"].update(x for x in (metric(r), r["test"].get("ci95"), r.get("dev_ppl")) if x is not None)
            kinds["score"].update(p["dev_ppl"] for p in r.get("curve") or [] if p.get("dev_ppl") is not None)
    for a, b in itertools.permutations(family_runs, 2):
        # paired seeds: two systems of a folder, or one system in two of the family's folders
        if a["seed"] == b["seed"] and (a["_folder"] == b["_folder"]) != (a["system"] == b["system"]):
            for f in (metric, dev):
                if f(a) is not None and f(b) is not None:
                    kinds["gap"].add(f(a) - f(b))
                    kinds["relative"].add(100 * (f(a) / f(b) - 1))
    for a, b in itertools.permutations(means, 2):
        kinds["gap"].add(a - b)
        kinds["relative"].add(100 * (a / b - 1))
    # the tables the appendix generates from the committed files (length buckets, equal updates, ...)
    analysis = repro_page.read_verdict(str(folder / "verdict.md")).analysis
    appendix = folder.parents[1] / f"{folder.name}.md"
    for line in appendix.read_text(encoding="utf-8").splitlines() if appendix.is_file() else []:
        if line.startswith("|") and line not in analysis:
            for x in re.findall(r"[+\-−]?\d+\.\d+", line):
                kinds["score"].add(abs(_num(x)))
                kinds["gap"].add(abs(_num(x)))
    path = folder / "verdict.md"
    verdict = repro_page.read_verdict(str(path))
    paper = {float(x) for x in re.findall(NUM, verdict.fields.get("paper", ""))}
    claims = verdicts.tested_items(verdict, str(path))
    rows = list(zip(claims, verdicts.family_verdicts(str(folder), claims, repro_page.load_family)))
    for field in ("also", "controls"):
        for item in verdicts.tested_items(verdict, str(path), field):
            c = repro_page.load_family(str(folder / item.variant) if item.variant else str(folder))
            rows.append((item, verdicts.claim_verdict(c, item)))
    for item, v in rows:  # each claim row's figures: its interval at its level, MDE, margin, paper test
        if item.paper is not None:
            paper |= {abs(item.paper), abs(v["paper"])} | ({abs(v["paper_other"])} if v["paper_other"] else set())
        if v["paper_p"] is not None:
            kinds["p"].add(v["paper_p"])
        if v["ci"] is not None:
            kinds["interval"].add(tuple(v["ci"]))
            kinds["gap"].add(v["delta"])
            kinds["score"] |= {v["mde"]} | ({v["margin"]} if v["margin"] else set())
            kinds["p"].add(v["p"])
    for k in ("gap", "score", "relative"):
        kinds[k] |= paper
    kinds["pairs"] = pair_figures(folder)
    return kinds


def _shown(x: float, shown: str) -> bool:
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return round(abs(x), digits) == abs(float(shown.replace("−", "-")))


def _num(s: str) -> float:
    return float(s.replace("−", "-"))


def stale_figures(text: str, figures: dict) -> list:
    """The figures of ``text`` in the checked forms that ``figures`` (:func:`committed_figures`) does
    not give, and, where a sentence names one comparison, those its comparison does not give
    (:func:`comparison_errors`): ``(kind, shown, offset)`` each."""
    bad = []
    taken = []
    for m in INTERVAL_RE.finditer(text):
        lo, hi = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        taken.append(m.span())
        if not any((_shown(a, lo) and _shown(b, hi) and (a < 0) == (_num(lo) < 0)) or
                   (_shown(-b, lo) and _shown(-a, hi) and (b > 0) == (_num(lo) < 0)) for a, b in figures["interval"]):
            bad.append(("interval", m.group(0), m.start()))
    for m in P_RE.finditer(text):
        values = [m.group(3)] + re.findall(NUM, m.group(4))
        pool = figures["holm"] if m.group(1).startswith("Holm") else figures["p"]
        for s in values:
            if m.group(2) == "<":
                ok = any(x < float(s) for x in pool)
            else:
                ok = any(_shown(x, s) for x in pool)
            if not ok:
                bad.append(("p", s, m.start()))
    for m in T_RE.finditer(text):
        if not any(_shown(x, m.group(1)) for x in figures["t"]):
            bad.append(("t", m.group(1), m.start()))
    for m in GAP_RE.finditer(text):
        if any(a <= m.start() < b for a, b in taken):
            continue
        if not any(_shown(x, m.group(1)) for x in figures["gap"]):
            bad.append(("gap", m.group(1), m.start()))
    for m in SCORE_RE.finditer(text):
        if not any(_shown(x, m.group(1)) for x in figures["score"] | figures["gap"]):
            bad.append(("score", m.group(1), m.start()))
    for m in PCT_RE.finditer(text):
        if not any(_shown(x, m.group(1)) for x in figures["relative"]):
            bad.append(("relative", m.group(1), m.start()))
    if "pairs" in figures:
        bad += comparison_errors(text, figures["pairs"])
    return bad


# ---- figures checked against the comparison their sentence names ----------------------------------

# the words by which prose names each system (a sentence that names exactly two systems of the family
# names their comparison)
ALIASES = {
    "dwl_gating": r"DWL(?:-GRU)?", "swl_gating": r"SWL(?:-GRU)?", "word": r"jieba(?!\+)",
    "word_thulac": r"(?<!\+)thulac(?!\+)", "word_snownlp": r"(?<!\+)snownlp", "char": r"char(?:acter)?s?\b(?! chains)",
    "m1": r"\bM1\b", "m5": r"\bM5\b", "m9": r"\bM9\b", "wider_cnn": r"wider CNN", "deeper_cnn": r"deeper CNN",
    "wider_san": r"wider SAN", "deeper_san": r"deeper SAN",
    "mc_rnn_3": r"MC-RNN-3", "baseline": r"Baseline-RNN(?![-\w])", "baseline_large": r"Baseline-RNN-large",
    "baseline_deep": r"Baseline-RNN-deep", "gencnn": r"genCNN", "lstm_lm": r"\bLSTM(?![-\w])", "fconv_lm": r"fconv_lm",
    "wide1": r"\bwide[ =]*1\b", "wide3": r"(?<!full-input )\bwide[ =]*3\b(?!, full)", "wide5": r"\bwide[ =]*5\b",
    "wide3_full": r"full-input wide 3|wide 3, full input",
}
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(`\[])|\n\s*\n|\n(?=- )")
TEST_WORDS = re.compile(r"(?P<two>two-level)|(?P<sentence>per-sentence|per-block|sentence-level|[Ss]eed \d)|"
                        r"(?P<paper>paper(?:'s)? test|paper's effect)|(?P<seed>seed-level)")


def _add_pair(pairs: dict, a: str, b: str, kind: str, value) -> None:
    """Store ``value`` (a figure of a − b) under the sorted pair; a gap negated and an interval
    mirrored when the pair sorts the other way."""
    key = tuple(sorted((a, b)))
    if key != (a, b) and kind in ("gap", "interval"):  # a p-value has no orientation
        value = (-value[1], -value[0]) if isinstance(value, tuple) else -value
    pairs.setdefault(key, {}).setdefault(kind, set()).add(value)


def pair_figures(folder: Path) -> dict:
    """Per pair of systems (sorted names), the figures the family's committed files give for their
    comparison, as figures of first − second: ``gap`` (differences of means, seed-level, two-level and
    per-sentence deltas, each seed's difference, the claim rows'), ``interval`` (each test's), and the
    p-values of each test (``p:seed``, ``p:two``, ``p:sentence``, ``p:paper``; ``holm:...`` likewise)."""
    pairs: dict = {}
    for comp in [folder, *sorted(p.parent for p in folder.glob("**/comparison.json") if p.parent != folder)]:
        c = repro_page.load_family(str(comp))
        stats = c.get("statistics") or {}
        for x in stats.get("comparisons", []):
            a, b = x["system"], x["reference"]
            _add_pair(pairs, a, b, "gap", x["delta_of_means"])
            for test, t in (("seed", x.get("seed_level")), ("two", x.get("two_level"))):
                if t:
                    _add_pair(pairs, a, b, "gap", t["delta"])
                    _add_pair(pairs, a, b, "interval", tuple(t["ci95"]))
                    _add_pair(pairs, a, b, f"p:{test}", t["p"])
                    _add_pair(pairs, a, b, f"holm:{test}", t["p_holm"])
            for t in (x.get("per_sentence") or {}).values():
                _add_pair(pairs, a, b, "gap", t["delta"])
                _add_pair(pairs, a, b, "interval", tuple(t["ci95"]))
                _add_pair(pairs, a, b, "p:sentence", t["p"])
                _add_pair(pairs, a, b, "holm:sentence", t["p_holm"])
        key = "ppl" if c.get("kind") == "lm" else "bleu"
        scores = {}
        for r in c["systems"]:
            scores.setdefault(r["system"], {})[r["seed"]] = float(r["test"][key])
        for a, b in itertools.permutations(scores, 2):
            for k in set(scores[a]) & set(scores[b]):
                _add_pair(pairs, a, b, "gap", scores[a][k] - scores[b][k])
            _add_pair(pairs, a, b, "gap", statistics.mean(scores[a].values()) - statistics.mean(scores[b].values()))
    verdict = repro_page.read_verdict(str(folder / "verdict.md"))
    path = str(folder / "verdict.md")
    claims = verdicts.tested_items(verdict, path)
    rows = list(zip(claims, verdicts.family_verdicts(str(folder), claims, repro_page.load_family)))
    for field in ("also", "controls"):
        for item in verdicts.tested_items(verdict, path, field):
            rows.append((item, verdicts.claim_verdict(
                repro_page.load_family(str(folder / item.variant) if item.variant else str(folder)), item)))
    for item, v in rows:
        if v["ci"] is not None:
            _add_pair(pairs, item.better, item.other, "gap", v["delta"])
            _add_pair(pairs, item.better, item.other, "interval", tuple(v["ci"]))
            _add_pair(pairs, item.better, item.other, "p:seed", v["p"])
        if v["paper_p"] is not None:
            _add_pair(pairs, item.better, item.other, "p:paper", v["paper_p"])
        if v["paper"] is not None:  # the paper's effect, as the score's difference and as the paper writes it
            for x in (v["paper"], item.paper, v["paper_other"]):
                if x is not None:
                    _add_pair(pairs, item.better, item.other, "gap", x)
    return pairs


def named_pair(sentence: str, systems) -> tuple:
    """The two systems a sentence names, in the order it names them (None unless exactly two)."""
    found = []
    for s in systems:
        m = re.search(ALIASES.get(s, re.escape(s)), sentence)
        if m:
            found.append((m.start(), s))
    return tuple(s for _, s in sorted(found)) if len(found) == 2 else None


def _test_of(sentence: str, at: int) -> str:
    """The test a p-value at ``at`` of ``sentence`` belongs to: the last test the sentence names before
    it (seed-level when it names none)."""
    named = [m.lastgroup for m in TEST_WORDS.finditer(sentence[:at])]
    return named[-1] if named else "seed"


def comparison_errors(text: str, pairs: dict) -> list:
    """The figures of the sentences of ``text`` that name one comparison (two systems) and that this
    comparison's committed figures do not give: a signed gap or an interval of no orientation of the
    pair, or signed figures of one sentence in opposite orientations (a flipped sign, a mirrored
    interval); a p-value not of its own test of this pair ("Holm p < 0.001" included); a change after
    "Δ" written without its sign.  ``(kind, shown, offset)`` each."""
    bad = []
    systems = sorted({s for key in pairs for s in key}, key=len, reverse=True)
    starts = [0] + [m.end() for m in SENTENCE_END.finditer(text)]
    ends = [m.start() for m in SENTENCE_END.finditer(text)] + [len(text)]
    for m in re.finditer(r"Δ\s*(\d+\.\d+)", text):
        bad.append(("unsigned", m.group(1), m.start()))
    for start, end in zip(starts, ends):
        sentence = text[start:end]
        pair = named_pair(sentence, systems)
        if pair is None:
            continue
        key = tuple(sorted(pair))
        figs = pairs.get(key, {})
        orients = {1, -1}
        for m in INTERVAL_RE.finditer(sentence):
            lo, hi = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            fits = {o for o in (1, -1) for a, b in figs.get("interval", ())
                    if (o == 1 and _shown_signed(a, lo) and _shown_signed(b, hi))
                    or (o == -1 and _shown_signed(-b, lo) and _shown_signed(-a, hi))}
            if not fits:
                bad.append(("interval", m.group(0), start + m.start()))
            elif not fits & orients:
                bad.append(("orientation", m.group(0), start + m.start()))
            else:
                orients &= fits
        spans = [m.span() for m in INTERVAL_RE.finditer(sentence)]
        for m in GAP_RE.finditer(sentence):
            if any(a <= m.start() < b for a, b in spans):
                continue
            fits = {o for o in (1, -1) for x in figs.get("gap", ()) if _shown_signed(o * x, m.group(1))}
            if not fits:
                bad.append(("gap", m.group(1), start + m.start()))
            elif not fits & orients:
                bad.append(("orientation", m.group(1), start + m.start()))
            else:
                orients &= fits
        for m in P_RE.finditer(sentence):
            test = _test_of(sentence, m.start())
            holm_ = m.group(1).startswith("Holm")
            pool = figs.get(("holm:" if holm_ else "p:") + test, set())
            for s in [m.group(3)] + re.findall(NUM, m.group(4)):
                ok = any(x < float(s) for x in pool) if m.group(2) == "<" else any(_shown(x, s) for x in pool)
                if not ok:
                    bad.append(("p", s, start + m.start()))
    return bad


def _shown_signed(x: float, shown: str) -> bool:
    """``x`` at the precision shown, sign included (0.00 either way)."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return round(x, digits) == round(_num(shown), digits) or (round(x, digits) == 0 == _num(shown))


def checked_texts(folder: Path) -> dict:
    """The texts the check covers for a family folder ``docs/results/reproduce/<family>``: its
    verdict (fields but claim, paper and tested items; summary; analysis) and its family page's
    "Results" section without the generated tables, by name."""
    verdict = repro_page.read_verdict(str(folder / "verdict.md"))
    fields = "\n".join(v for k, v in verdict.fields.items() if k in ("dev", "settle"))
    texts = {f"{folder.name}/verdict.md": "\n\n".join([fields, verdict.summary, verdict.analysis])}
    page = folder.parents[2] / f"{folder.name}.md"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        start = text.find("\n## 3. Results")
        if start >= 0:
            end = text.find("\n## ", start + 1)
            section = text[start:end if end >= 0 else len(text)]
            texts[f"docs/{page.name}"] = re.sub(r"<!-- results-table:begin.*?<!-- table:end -->", "", section,
                                                flags=re.S)
    return texts
