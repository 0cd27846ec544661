"""``docs/results.md`` and its per-family appendices, rendered from the committed JSON.

Everything on the pages is computed from ``docs/results/reproduce/<family>/`` (``comparison.json``
with the folder's statistics, one ``<system>-s<seed>.json`` per run, sweep points and probes in
subfolders published with ``--variant NAME``) and the family's ``verdict.md``
(:mod:`fairseq_local_repro.verdicts`), so the pages can be rewritten without the checkpoints:
``python scripts/reproduce.py --page-only``.  The page's prose is the Markdown template
``templates/results.md``; publishing a comparison is :mod:`fairseq_local_repro.publish`.

``docs/results.md`` opens with one table, a line per tested claim (each family's ``**Tested:**``
items, its own setting first), then a short section per family (the folders of its tested claims
with the seed-level and per-sentence tests, the verdict's summary); ``docs/results/<family>.md``
holds the rest: every run's provenance, the learning curves, the older splits and other settings
(``**Also tested:**``, with their claim lines), the sweeps and probes, and the verdict's analysis.
"""
import os
import re
import statistics
from string import Template
from typing import Dict, List, Optional, Tuple

from fairseq_local_core.file_io import read_json, write_text
from fairseq_local_repro import verdicts
from fairseq_local_repro.significance import N_RESAMPLES, format_p
from fairseq_local_repro.tables import (SRC_LEN_FILE, dagger_note, draw_curves, entropy_tables,  # noqa: F401
                                        equal_budget_tables, labels, length_bucket_tables, masking_tables, seed_table,
                                        summary_table, table)
from fairseq_local_repro.verdicts import WORDS, Tested, Verdict, claim_verdict, read_verdict, tested_items

__all__ = ["load_family", "seed_table", "summary_table", "write_page", "draw_curves", "table", "dagger_note",
           "equal_budget_tables", "entropy_tables", "masking_tables", "read_verdict", "claim_verdict", "claim_line"]

PAGE = "results.md"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def template(name: str) -> str:
    """The text of ``templates/<name>.md``."""
    with open(os.path.join(TEMPLATES, f"{name}.md"), encoding="utf-8") as f:
        return f.read()


def _num(x: float, unit: str = "") -> str:
    return f"{x:+.2f}".replace("-", "−") + (f" {unit}" if unit else "")


def _signed(x: float, digits: int = 2) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def setting_cell(comparison: dict, seeds: int, variant: Optional[str]) -> str:
    """Data, scale, training size and paired seeds of a claim's row."""
    data = re.split(r"[:(]", comparison.get("data", ""))[0].strip()
    split = comparison.get("split") or {}
    unit = split.get("unit") or ("captions" if comparison.get("kind") == "lm" else "pairs")
    size = f"{split['train']:,} train {unit}" if "train" in split else "older split (before the overlap check)"
    where = f"`{variant}`: " if variant else ""
    return f"{where}{data}, {comparison['scale']} scale, {size}; {seeds} seed{'s' * (seeds != 1)}"


def paper_cell(v: dict, item: Tested) -> str:
    """The paper's effect in the unit that carries it, with its reading in the other unit."""
    if item.paper is None:
        return "no number"
    lm = v["unit"] == "ppl"
    if lm:
        text = f"{item.paper:+.1f} %".replace("-", "−") + f" ({_num(v['paper'], 'ppl')} at our {v['ref_mean']:.2f})"
        other = None if item.ref is None else f"{_num(v['paper_other'], 'ppl')} absolute, of the paper's {item.ref:g}"
    else:
        text = _num(item.paper, "BLEU")
        other = None if item.ref is None else (f"{100 * item.paper / item.ref:+.1f} % of the paper's {item.ref:g}, "
                                               f"{_num(v['paper_other'], 'BLEU')} at our {v['ref_mean']:.2f}"
                                               ).replace("-", "−")
    return text + (f"; {other}" if other else "")


def claim_line(comparison: dict, item: Tested, fam: str, v: dict, word: bool = True) -> str:
    """One row of a claims table: claim, setting, absolute scores, paper, ours (the mean paired
    difference with the interval at the level ``v`` was decided on), minimum detectable effect and,
    with ``word``, the verdict (and the other unit's reading where it changes the word)."""
    names = labels(comparison)
    unit = "ppl" if v["unit"] == "ppl" else "BLEU"
    anchor = f"{fam}-{comparison['scale']}-scale"
    reading = f", {item.reading}" if item.reading else ""
    cells = [f"[{fam}](#{anchor}): {names[item.better]} > {names[item.other]}{reading}",
             setting_cell(comparison, v["seeds"], item.variant),
             f"{v['mean']:.2f} vs {v['ref_mean']:.2f} {unit}", paper_cell(v, item)]
    if v["ci"] is None:
        cells += [f"{_num(v['delta'], unit)}, one seed", "–"]
        if word:
            cells.append(f"**{v['word']}**: no seed-level test")
        return "| " + " | ".join(cells) + " |"
    ci = f"[{_signed(v['ci'][0])}, {_signed(v['ci'][1])}]"
    rel = f" ({_signed(100 * v['delta'] / v['ref_mean'], 1)} %)" if unit == "ppl" else ""
    level = f"{100 * (1 - v['level']):.4g} %"
    cells += [f"{_num(v['delta'], unit)} {ci} at {level}{rel}; better in {v['better_in']} of {v['seeds']} seeds",
              f"{v['mde']:.2f} {unit}"]
    if word:
        text = f"**{verdicts.shown_word(v['word'], v['margin'], unit)}**" if v["word"] else "no claim"
        if v["word_other"] and v["word_other"] != v["word"]:
            other = "absolute ppl" if unit == "ppl" else "relative BLEU"
            text += f" (in {other}: {verdicts.shown_word(v['word_other'], v['margin_other'], unit)})"
        cells.append(text)
    return "| " + " | ".join(cells) + " |"


CLAIMS_HEAD = ["| claim | setting | scores | paper | ours (interval at the claim's level) | MDE | verdict |",
               "|---|---|---|---|---|---|---|"]
ROWS_HEAD = ["| comparison | setting | scores | paper | ours (95% interval) | MDE |", "|---|---|---|---|---|---|"]


def _load(folder: str, item: Tested) -> dict:
    return load_family(os.path.join(folder, item.variant) if item.variant else folder)


def claims_table(root: str, families: List[str]) -> List[str]:
    """The page's opening table, a row per claim (each family's ``**Tested:**`` items, its primary
    settings), each at its Holm level over the family's claims; then the controls."""
    lines, controls = list(CLAIMS_HEAD), []
    for fam in families:
        folder = os.path.join(root, fam)
        path = os.path.join(folder, "verdict.md")
        verdict = read_verdict(path)
        items = tested_items(verdict, path)
        for item, v in zip(items, verdicts.family_verdicts(folder, items, load_family)):
            lines.append(claim_line(_load(folder, item), item, fam, v))
        for item in tested_items(verdict, path, "controls"):
            c = _load(folder, item)
            controls.append(claim_line(c, item, fam, claim_verdict(c, item), word=False))
    if controls:
        lines += ["", "Controls (comparisons the papers make no claim on, outside the claims' Holm families; 95% "
                  "intervals, no verdict):", "", *ROWS_HEAD, *controls]
    return lines + [""]


def sensitivity_rows(folder: str, fam: str, items: List[Tested]) -> List[str]:
    """The appendix's rows of a claim's other settings (``**Also tested:**``): the same columns as
    the claims table at the uncorrected 95% level, without a verdict."""
    if not items:
        return []
    lines = ["## Sensitivity rows", "",
             "The claims in settings other than their primary one (the results page gives the primary setting's "
             "verdict; these rows are no verdicts), 95% intervals:", "", *ROWS_HEAD]
    for item in items:
        c = _load(folder, item)
        lines.append(claim_line(c, item, fam, claim_verdict(c, item), word=False).replace("](#", f"](../{PAGE}#"))
    return lines + [""]


def words_legend() -> str:
    return "\n".join(f"* **{w}**: {d}." for w, d in WORDS.items())


def other_commands(comparison: dict) -> List[str]:
    """The runs of the table that an earlier command trained (a later ``--systems`` or ``--seeds``
    run adds to a published comparison), each with its own command."""
    runs = [r for r in comparison["systems"] if r.get("command") and r["command"] != comparison["command"]]
    if not runs:
        return []
    by_command = {}
    for r in runs:
        by_command.setdefault(r["command"], []).append(f"{r['label']}, seed {r['seed']}")
    return [f"Trained by `{cmd}`: {'; '.join(names)}." for cmd, names in by_command.items()] + [""]


def split_line(comparison: dict) -> str:
    """What the comparison's dev and test sets share with its training part."""
    split = comparison.get("split")
    kind = (split or {}).get("unit") or ("captions" if comparison.get("kind") == "lm" else "pairs")
    if not split or "test_dropped" not in split:
        return ("**Split:** published before the overlap check: dev and test were not cleaned of sources that also "
                "occur in the training part.")
    return (f"**Split:** {split['train']:,} train / {split['dev']:,} dev / {split['test']:,} test {kind}; "
            f"{split['dev_dropped']} dev and {split['test_dropped']} test {kind} were dropped because their source "
            "(case-folded, whitespace collapsed) occurs in the training part, so no dev or test source is a training "
            "source.")


def _setting(comparison: dict) -> str:
    notes = comparison.get("scale_notes") or ""
    return notes[notes.rfind("this run overrides "):] if "this run overrides " in notes else "the family's setting"


def _command(command: str, why: str = "trains every system to convergence") -> List[str]:
    return [f"<!-- doc-test: parse ({why}) -->", "```bash", command, "```", ""]


def _variants(folder: str) -> List[str]:
    return sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "comparison.json")))


def _main_folders(items: List[Tested]) -> List[str]:
    """The folders of the tested items, in their order ("" for the family's own folder)."""
    return list(dict.fromkeys(item.variant or "" for item in items))


def family_section(comparison: dict, folder: str, verdict: Verdict, tested: List[str]) -> List[str]:
    """A family's section of ``docs/results.md``: the folders of its tested claims (``tested``, ""
    for the family's own) with the seed-level and per-sentence tests, the choices made on dev, the
    verdict's summary, what would settle it, the appendix link."""
    fam = comparison["family"]
    lines = [f"## {fam} ({comparison['scale']} scale)", "",
             f"**Paper:** {comparison['paper']}.  **Claim:** {comparison['claim']}.", ""]
    if verdict.fields.get("dev"):
        lines += [f"**Chosen on dev:** {verdict.fields['dev']}", ""]
    for name in tested:
        v = load_family(os.path.join(folder, name)) if name else comparison
        title = f"`{name}`" if name else "The family's first runs"
        lines += [f"**{title}** ({_setting(v)}). {split_line(v)}", "", *_command(v["command"]), *seed_table(v)]
    if verdict.summary:
        lines += ["**Verdict.** " + verdict.summary, ""]
    if verdict.fields.get("settle"):
        lines += [f"**To settle it:** {verdict.fields['settle']}", ""]
    lines += [f"The older splits, every run's provenance, the learning curves, the sweeps and probes, and the "
              f"analysis: [results/{fam}.md](results/{fam}.md).", ""]
    return lines


def _rebase_links(text: str) -> str:
    """Links of a verdict (relative to ``docs/``) as the appendix in ``docs/results/`` needs them."""
    return re.sub(r"\]\((?![a-z]+:|#|/)([^)]+)\)", r"](../\1)", text)


def appendix(comparison: dict, folder: str, verdict: Verdict, tested: List[str],
             also: Optional[List[Tested]] = None) -> List[str]:
    """``docs/results/<family>.md``: the claim lines of the older splits and other settings
    (``also``), the runs with their provenance, curves and analyses, every sweep point and probe,
    and the verdict's analysis (``tested``: the folders whose tests are on the results page)."""
    fam = comparison["family"]
    sigs = sorted({r["test"].get("signature") or r["test"].get("label", "") for r in comparison["systems"]})
    capped = [r["label"] for r in comparison["systems"] if r["hit_max_epoch"]]
    lines = [f"# {fam}: runs, sweeps and analysis", "",
             f"The runs behind the [{fam} section of the results page](../{PAGE}#{fam}-{comparison['scale']}-scale), "
             f"generated from [`reproduce/{fam}/`](reproduce/{fam}/) by `python scripts/reproduce.py --page-only`.", "",
             f"**Data:** {comparison['data']}.", ""]
    if comparison.get("scale_notes"):
        lines += [f"**Scaled:** {comparison['scale_notes']}.", ""]
    lines += sensitivity_rows(folder, fam, also or [])
    runs = table(comparison)
    lines += ["## Runs", "", f"Trained by `{comparison['command']}`"
              + (", except:" if other_commands(comparison) else "."), "", *other_commands(comparison),
              runs, "", *dagger_note(runs),
              *([] if "" in tested else [split_line(comparison), "", *seed_table(comparison, systems=False)]),
              ("Metric: " if comparison.get("kind") == "lm" else "BLEU signature: ")
              + "; ".join(f"`{s}`" for s in sigs) + ".", "",
              "Max-epoch cap hit by: " + (", ".join(capped) + " (not converged)." if capped else
                                          "none (every run ended by early stopping or the learning-rate floor)."), "",
              *equal_budget_tables(comparison), *entropy_tables(comparison), *masking_tables(comparison),
              *length_bucket_tables(comparison, folder),
              f"![dev loss vs updates and wall time](reproduce/{fam}/curves.png)", ""]
    names = _variants(folder)
    if names:
        lines += ["## Other settings", "",
                  "Sweep points and probes, each trained by the command shown with its own baseline run (its "
                  "p-values are against that baseline):", ""]
    for name in names:
        v = load_family(os.path.join(folder, name))
        lines += [f"### `{name}`", "", f"{_setting(v)[0].upper()}{_setting(v)[1:]}; [JSON](reproduce/{fam}/{name}/).",
                  ""]
        if name in tested:  # its tests are on the results page
            runs = table(v)
            lines += [f"Its tests are in the [{fam} section of the results page]"
                      f"(../{PAGE}#{fam}-{comparison['scale']}-scale).", "", *other_commands(v), runs, ""]
        else:
            runs = summary_table(v)
            lines += [split_line(v), "", *_command(v["command"]), *other_commands(v), runs, "",
                      *seed_table(v, systems=False)]
        lines += dagger_note(runs)
        lines += [*entropy_tables(v), *masking_tables(v), *length_bucket_tables(v, os.path.join(folder, name))]
    if verdict.analysis:
        lines += [_rebase_links(verdict.analysis), ""]
    return lines


def published_clean(path: str) -> bool:
    """Whether the run JSON ``path`` is published and was split after the overlap check."""
    return os.path.isfile(path) and "test_dropped" in (read_json(path).get("split") or {})


def missing_runs(root: str, family, runset) -> List[Tuple[str, List[int]]]:
    """The runs of a registered comparison (``family_types.RunSet``) not yet published on the clean
    split under ``root/<family>/<variant>/``: (system, seeds) in registry order."""
    from fairseq_local_repro.families import select_systems

    folder = os.path.join(root, family.name, runset.variant)
    missing = []
    for s in select_systems(family, ",".join(runset.systems) or None):
        seeds = [k for k in range(1, runset.seeds + 1)
                 if not published_clean(os.path.join(folder, f"{s.name}-s{k}.json"))]
        if seeds:
            missing.append((s.name, seeds))
    return missing


def _seeds(seeds: List[int]) -> str:
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def run_hours(root: str, family) -> Dict[str, float]:
    """Per system of ``family``, the median wall time in hours of its published runs under
    ``root/<family>/`` (every variant but the ``probe_*`` ones, which train on cut data); a system
    with none gets the median of all the family's runs (absent when the family has none)."""
    base = os.path.join(root, family.name)
    walls: Dict[str, List[float]] = {}
    folders = [base] + ([os.path.join(base, v) for v in sorted(os.listdir(base)) if not v.startswith("probe")]
                        if os.path.isdir(base) else [])
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            m = re.fullmatch(r"(.+)-s\d+\.json", name)
            if m:
                wall = read_json(os.path.join(folder, name)).get("wall_s")
                if wall:
                    walls.setdefault(m.group(1), []).append(wall / 3600)
    every = [h for hours in walls.values() for h in hours]
    hours = {s.name: statistics.median(walls[s.name]) for s in family.systems if s.name in walls}
    if every:
        for s in family.systems:
            hours.setdefault(s.name, statistics.median(every))
    return hours


def _core_hours(value: float) -> str:
    return f"about {value:.1f} core-hours" if value < 10 else f"about {value:.0f} core-hours"


def pending_section(root: str, published: List[str]) -> List[str]:
    """``## Still to run``: every registered comparison (``Family.planned``) with runs not yet
    published, the runs and the one command that trains them; families of the registry with no
    published comparison; those not implemented.  With none of these, a section that says so."""
    from fairseq_local_repro.families import FAMILIES, PLANNED

    lines, total_runs, total_hours = [], 0, 0.0
    for name in sorted(FAMILIES):
        fam = FAMILIES[name]
        hours = run_hours(root, fam)
        if name not in published and not fam.planned:
            systems = ", ".join(s.label for s in fam.systems)
            lines += [f"### `{name}`", "", f"{systems} ({fam.data_cpu}): implemented, not yet run to convergence.", "",
                      *_command(f"python scripts/reproduce.py {name} --scale cpu --publish")]
        for runset in fam.planned:
            missing = missing_runs(root, fam, runset)
            if not missing:
                continue
            runs = sum(len(seeds) for _, seeds in missing)
            what = "; ".join(f"{fam.system(s).label}, {_seeds(seeds)}" for s, seeds in missing)
            cost = ""
            if all(s in hours for s, _ in missing):
                estimate = sum(hours[s] * len(seeds) for s, seeds in missing)
                cost, total_runs, total_hours = f", {_core_hours(estimate)}", total_runs + runs, total_hours + estimate
            lines += [f"### `{name}/{runset.variant}`", "",
                      f"{runset.why[0].upper()}{runset.why[1:]}.  Still to run ({runs} run{'s' * (runs != 1)}{cost}): "
                      f"{what}.", "", *_command(runset.command(name), "trains the missing runs to convergence")]
    for name, what in sorted(PLANNED.items()):
        lines += [f"### `{name}`", "", f"{what}: not implemented in the harness yet.", ""]
    if not lines:
        return [template("nothing_to_run")]
    total = (f"In all, {total_runs} runs with an estimate: {_core_hours(total_hours)}, or about "
             f"{total_hours / 2:.0f} hours of this 2-core machine.\n") if total_runs else ""
    return [template("still_to_run"), *([total] if total else []), *lines]


def pending_line(root: str, family: str) -> List[str]:
    """A family section's line naming its comparisons still to run (their commands: ``## Still to run``)."""
    from fairseq_local_repro.families import FAMILIES

    fam = FAMILIES.get(family)
    todo = [(r.variant, sum(len(k) for _, k in missing_runs(root, fam, r))) for r in (fam.planned if fam else ())]
    todo = [(v, n) for v, n in todo if n]
    if not todo:
        return []
    return ["**Still to run:** " + ", ".join(f"`{v}` ({n} run{'s' * (n != 1)})" for v, n in todo)
            + " ([commands](#still-to-run)).", ""]


def load_family(folder: str) -> dict:
    """A published comparison: ``comparison.json`` plus its systems' JSON files."""
    comparison = read_json(os.path.join(folder, "comparison.json"))
    systems = [read_json(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
               if name.endswith(".json") and name != "comparison.json" and not name.startswith("verdict")]
    order = {n: i for i, n in enumerate(comparison.get("system_order", []))}
    systems.sort(key=lambda r: (order.get(r["system"], len(order)), r["system"], r["seed"]))
    comparison["systems"] = systems
    return comparison


def write_page(docs: str) -> str:
    """Rewrite ``docs/results.md`` and ``docs/results/<family>.md`` from ``docs/results/reproduce/``
    (with each family's ``verdict.md``) through ``templates/results.md``; returns the page's path."""
    root = os.path.join(docs, "results", "reproduce")
    families = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "comparison.json"))) \
        if os.path.isdir(root) else []
    claims = claims_table(root, families) if families else [
        "No comparison has been published yet (`scripts/reproduce.py FAMILY --publish`).", ""]
    sections = []
    for fam in families:
        folder = os.path.join(root, fam)
        path = os.path.join(folder, "verdict.md")
        verdict = read_verdict(path)
        items = tested_items(verdict, path)
        tested = _main_folders(items) or [""]
        comparison = load_family(folder)
        sections += family_section(comparison, folder, verdict, tested) + pending_line(root, fam)
        write_text(os.path.join(docs, "results", f"{fam}.md"),
                   "\n".join(appendix(comparison, folder, verdict, tested,
                                       tested_items(verdict, path, "also"))).rstrip() + "\n")
    text = Template(template("results")).substitute(
        claims="\n".join(claims).rstrip(), words=words_legend(), n_resamples=f"{N_RESAMPLES:,}",
        p_floor=f"{1 / N_RESAMPLES:.3g}", families="\n".join(sections),
        still_to_run="\n".join(pending_section(root, families)))
    page = os.path.join(docs, PAGE)
    write_text(page, text.rstrip() + "\n")
    return page
