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
Parameter counts (``5.16M``), seeds, epochs, updates, unsigned percentages and the training logs'
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
    return kinds


def _shown(x: float, shown: str) -> bool:
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return round(abs(x), digits) == abs(float(shown.replace("−", "-")))


def _num(s: str) -> float:
    return float(s.replace("−", "-"))


def stale_figures(text: str, figures: dict) -> list:
    """The figures of ``text`` in the checked forms that ``figures`` (:func:`committed_figures`) does
    not give: ``(kind, shown, offset)`` each."""
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
    return bad


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
