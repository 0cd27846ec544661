"""``docs/results.md`` and its per-family appendices, written from the committed JSON.

Everything on the pages is computed from ``docs/results/reproduce/<family>/`` (``comparison.json``
with the folder's statistics, one ``<system>-s<seed>.json`` per run, sweep points and probes in
subfolders published with ``--variant NAME``) and the family's ``verdict.md``, so the pages can be
rewritten without the checkpoints: ``python scripts/reproduce.py --page-only``.

``docs/results.md`` opens with one table, a row per paper claim, and then has a short section per
family (its main comparison with the seed-level and per-sentence tests, and the verdict's summary);
``docs/results/<family>.md`` holds the rest: every run's provenance, the learning curves, the
sweeps and probes, and the verdict's analysis.

A ``verdict.md`` starts with four fields, then the summary, then ``## Analysis``::

    **Claim:** M9 beats M1 ...            (the claim, as the table states it)
    **Paper:** +1.61 BLEU (IWSLT14 ...)   (the paper's number)
    **Tested:** m9 > m1; dropout_0.4: a > b   (the comparisons the verdict follows, "A > B" read
                                           as "A is better than B", optionally in a variant folder)
    **To settle it:** ...                 (what scale, seeds or data would settle the question)

    **Not at this scale.** A few lines ...

    ## Analysis
    ...

Links in a verdict are relative to ``docs/``.  The verdict word in the table (holds / not at this
scale / contradicted) is computed from the tested comparisons' seed-level tests, never copied from
the prose; ``tests/test_repro_page.py`` checks that each summary states the word its test gives.
"""
import os
import re
import shutil
import statistics
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from fairseq_local.file_io import atomic_open, read_json, write_gz, write_json, write_text
from fairseq_local_repro import compare as stats
from fairseq_local_repro.compare import format_p, p_clause
from fairseq_local_repro.processes import ReproError
from fairseq_local_repro.tables import (SRC_LEN_FILE, dagger_note, draw_curves, entropy_tables, equal_budget_tables,
                                        labels, length_bucket_tables, masking_tables, seed_table, summary_table, table)

__all__ = ["load_family", "seed_table", "summary_table", "write_page", "draw_curves", "table", "publish", "dagger_note",
           "equal_budget_tables", "entropy_tables", "masking_tables", "read_verdict", "claim_verdict"]

SIGNIFICANCE = 0.05
PAGE = "results.md"

PAGE_HEADER = """# Reproduction results

Does each paper's central claim hold when its models are trained to convergence on real data?  One
row per claim, at the CPU scale this repository can afford (the verdict follows the seed-level test
of the comparisons named; the sections below give the tables, the appendices everything else):
"""

PAGE_LEGEND = """Verdict words: **holds** (seed-level Holm p < 0.05 in the paper's direction), **contradicted**
(Holm p < 0.05 against it), **not at this scale** (no significant difference, or one seed per system,
which allows no seed-level test).

Every system was trained by `scripts/reproduce.py` (learning rate halved on a dev plateau, early
stopping with patience, a max-epoch safety cap reported when hit), one thread per system.  Generated
from the JSON in `docs/results/reproduce/` by `python scripts/reproduce.py --page-only`.  BLEU is
detokenized sacrebleu; wall times are on a shared 2-core machine.  Each family's appendix
(`docs/results/<family>.md`) holds every run's provenance, the learning curves, the sweeps and probes,
and the analysis.

## The tests

`fairseq_local_repro/compare.py`; every test two-sided, each shown by simulation to hold its level in
`tests/test_repro_compare.py`:

* *Seed-level test*, which every verdict follows: a paired t-test over seeds of the runs' test scores
  (seed k of a system against seed k of the other), with the 95% interval of the mean difference.
  Three seeds give 2 degrees of freedom: only gaps large against the seed-to-seed spread are found.
* *Two-level test* (seeds and sentences), where every run's test outputs are committed: the
  between-seed variance plus the between-sentence variance of a paired bootstrap, Welch t reference.
* *Per-sentence test* of one seed's pair of runs: paired approximate randomization over test
  sentences, 1,000 resamples (its floor shows as "≤ 0.001").  It sees the test set's sampling error,
  never the optimizer's: p < 0.05 says "these two runs differ", not "these two systems do".
* Every test's p-values are Holm-corrected across the family's comparisons ("Holm p").

Every p-value and interval can be recomputed from the committed files (each run's JSON and, where
published, its test hypotheses `*.hyp.gz` with the references `test.ref.gz`, or its per-sentence
log-likelihoods `*.nll.gz`):

<!-- doc-test: parse (reads the whole published tree; tests/test_repro_compare.py runs it) -->
```bash
python scripts/reproduce.py --recompute
```

(the same as `python -m fairseq_local_repro.compare --recompute docs/results/reproduce`; it exits with
status 1 and names every figure that differs from the committed one).  Runs published before outputs
were kept have their per-seed scores only: their seed-level tests are recomputable, their
per-sentence tests are not, and the tables say so.
"""

FIELDS = {"claim": "Claim", "paper": "Paper", "tested": "Tested", "settle": "To settle it"}
FIELD_RE = re.compile(r"^\*\*(" + "|".join(map(re.escape, FIELDS.values())) + r"):\*\*\s*(.*)$")
TESTED_RE = re.compile(r"^(?:([\w.]+):\s*)?(\w+)\s*>\s*(\w+)$")


class Verdict(NamedTuple):
    fields: Dict[str, str]  # claim, paper, tested, settle (the ones given)
    summary: str  # the lines before "## Analysis"
    analysis: str  # "## Analysis" and what follows, or ""


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


def tested_pairs(verdict: Verdict, path: str) -> List[Tuple[Optional[str], str, str]]:
    """The ``**Tested:**`` comparisons as (variant or None, better system, other system)."""
    pairs = []
    for item in filter(None, (x.strip() for x in verdict.fields.get("tested", "").split(";"))):
        m = TESTED_RE.match(item)
        if not m:
            raise ValueError(f"{path}: **Tested:** '{item}' is not '[variant:] system > system'")
        variant = m.group(1)
        if variant and not os.path.isfile(os.path.join(os.path.dirname(path), variant, "comparison.json")):
            raise ValueError(f"{path}: **Tested:** '{item}' names '{variant}', which has no published comparison")
        pairs.append(m.groups())
    return pairs


def claim_verdict(comparison: dict, better: str, other: str) -> dict:
    """The verdict on "``better`` beats ``other``" from the folder's statistics: the word (holds /
    contradicted when the seed-level Holm p is below 0.05, else not at this scale), the means and
    their difference in the claim's direction, and the p-values it rests on."""
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
    out = {"better": better, "other": other, "mean": a["mean"], "ref_mean": b["mean"],
           "delta": sign * c["delta_of_means"], "seeds": c["paired_seeds"], "seed_level": seed,
           "per_sentence": {k: dict(v, delta=sign * v["delta"]) for k, v in c["per_sentence"].items()}}
    if seed is None:
        out["word"] = "not at this scale"
    elif seed["p_holm"] < SIGNIFICANCE:
        out["word"] = "holds" if (sign * seed["delta"] > 0) == higher else "contradicted"
    else:
        out["word"] = "not at this scale"
    return out


def _claim_cells(comparison: dict, v: dict, variant: Optional[str]) -> Tuple[str, str]:
    """The table's "ours" and "verdict" cells of one tested comparison."""
    names = labels(comparison)
    lm = comparison.get("kind") == "lm"
    rel = f" ({100 * v['delta'] / v['ref_mean']:+.1f} %)" if lm else ""
    where = f"`{variant}`: " if variant else ""
    queued = len(comparison.get("queued") or [])
    ours = (f"{where}{names[v['better']]} {v['mean']:.2f} vs {names[v['other']]} {v['ref_mean']:.2f} "
            f"{'ppl' if lm else 'BLEU'}, Δ {v['delta']:+.2f}{rel}; {v['seeds']} paired seed{'s' * (v['seeds'] != 1)}"
            + (f", {queued} run{'s' * (queued != 1)} queued" if queued else ""))
    s = v["seed_level"]
    if s is not None:
        why = f"seed-level {p_clause(s['p'])}, Holm {format_p(s['p_holm'])}"
    else:
        n_res = (comparison.get("statistics") or {}).get("n_resamples")
        why = "one seed: no seed-level test" + "".join(
            f"; seed {k}'s per-sentence Holm p {format_p(p['p_holm'], n_res)}"
            for k, p in sorted(v["per_sentence"].items()))
    return ours, f"{where}**{v['word']}** ({why})"


def claims_table(root: str, families: List[str]) -> List[str]:
    """The page's opening table: per family its claim, the paper's number, ours, the seed-level
    verdict with its p-value, and what would settle it."""
    lines = ["| claim | paper | ours at CPU scale | seed-level verdict | what would settle it |",
             "|---|---|---|---|---|"]
    for fam in families:
        folder = os.path.join(root, fam)
        path = os.path.join(folder, "verdict.md")
        verdict = read_verdict(path)
        comparison = load_family(folder)
        ours, words = [], []
        for variant, better, other in tested_pairs(verdict, path):
            c = load_family(os.path.join(folder, variant)) if variant else comparison
            o, w = _claim_cells(c, claim_verdict(c, better, other), variant)
            ours.append(o)
            words.append(w)
        anchor = f"{fam}-{comparison['scale']}-scale"
        claim = verdict.fields.get("claim") or comparison["claim"]
        lines.append(f"| [{fam}](#{anchor}): {claim} | {verdict.fields.get('paper', '–')} "
                     f"| {'<br>'.join(ours) or '–'} | {'<br>'.join(words) or '–'} "
                     f"| {verdict.fields.get('settle', '–')} |")
    return lines + [""]


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


def family_section(comparison: dict, folder: str, verdict: Verdict, tested: List[str]) -> List[str]:
    """A family's section of ``docs/results.md``: its main comparison (and the variants its verdict
    tests) with the seed-level and per-sentence tests, the verdict's summary, the appendix link."""
    fam = comparison["family"]
    lines = [f"## {fam} ({comparison['scale']} scale)", "",
             f"**Paper:** {comparison['paper']}.  **Claim:** {comparison['claim']}.", "",
             split_line(comparison), "", "Reproduce:", "", *_command(comparison["command"]), *seed_table(comparison)]
    for name in tested:
        v = load_family(os.path.join(folder, name))
        lines += [f"**`{name}`** ({_setting(v)}):", "", split_line(v), "", *_command(v["command"]), *seed_table(v)]
    if verdict.summary:
        lines += ["**Verdict.** " + verdict.summary, ""]
    lines += [f"Every run's provenance, the learning curves, the sweeps and probes, and the analysis: "
              f"[results/{fam}.md](results/{fam}.md).", ""]
    return lines


def _rebase_links(text: str) -> str:
    """Links of a verdict (relative to ``docs/``) as the appendix in ``docs/results/`` needs them."""
    return re.sub(r"\]\((?![a-z]+:|#|/)([^)]+)\)", r"](../\1)", text)


def appendix(comparison: dict, folder: str, verdict: Verdict, tested: List[str]) -> List[str]:
    """``docs/results/<family>.md``: the runs with their provenance, curves and analyses, every
    sweep point and probe, and the verdict's analysis."""
    fam = comparison["family"]
    sigs = sorted({r["test"].get("signature") or r["test"].get("label", "") for r in comparison["systems"]})
    capped = [r["label"] for r in comparison["systems"] if r["hit_max_epoch"]]
    lines = [f"# {fam}: runs, sweeps and analysis", "",
             f"The runs behind the [{fam} section of the results page](../{PAGE}#{fam}-{comparison['scale']}-scale), "
             f"generated from [`reproduce/{fam}/`](reproduce/{fam}/) by `python scripts/reproduce.py --page-only`.", "",
             f"**Data:** {comparison['data']}.", ""]
    if comparison.get("scale_notes"):
        lines += [f"**Scaled:** {comparison['scale_notes']}.", ""]
    runs = table(comparison)
    lines += ["## Runs", "", f"Trained by `{comparison['command']}`"
              + (", except:" if other_commands(comparison) else "."), "", *other_commands(comparison),
              runs, "", *dagger_note(runs),
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
    """The runs of a registered comparison (``families.RunSet``) not yet published on the clean
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


STILL_TO_RUN = """## Still to run

The comparisons registered in `fairseq_local_repro/families.py` whose runs are not all published.  A
run counts once its JSON, split after the overlap check, is in its comparison's folder
(`docs/results/reproduce/FAMILY/VARIANT/`); runs published before that check are trained again.  Each
command trains the missing runs (one thread each, two at a time): it skips those already finished
under its `--out` and those published in its folder with its settings (so on a fresh clone it trains
only the missing ones), resumes interrupted ones, and publishes the folder, which then appears above
with its tests.  A run is trained by one command at a time: a second command that reaches a run
another holds stops with one line (publish the finished runs meanwhile with `--queued
SYSTEM-sSEED,...`, which leaves the named runs to the other command).  The core-hours are an
estimate: per run, the median wall time of the same system's published runs in its family (probes on
cut training data left out; the family's median for a system with none), measured two runs at a time
on the shared 2-core machine.
"""


NOTHING_TO_RUN = """## Still to run

Nothing: every comparison registered in `fairseq_local_repro/families.py` has all its planned runs
published (a run split before the overlap check does not count), and every registered family is
implemented.  What would settle each open question (more seeds, the paper's scale) is in its
verdict's "To settle it".
"""


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
        return [NOTHING_TO_RUN]
    total = (f"In all, {total_runs} runs with an estimate: {_core_hours(total_hours)}, or about "
             f"{total_hours / 2:.0f} hours of this 2-core machine.\n") if total_runs else ""
    return [STILL_TO_RUN, *([total] if total else []), *lines]


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
    (with each family's ``verdict.md``); returns the page's path."""
    root = os.path.join(docs, "results", "reproduce")
    families = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "comparison.json"))) \
        if os.path.isdir(root) else []
    lines = [PAGE_HEADER]
    if families:
        lines += claims_table(root, families)
    else:
        lines += ["No comparison has been published yet (`scripts/reproduce.py FAMILY --publish`).", ""]
    lines.append(PAGE_LEGEND)
    for fam in families:
        folder = os.path.join(root, fam)
        path = os.path.join(folder, "verdict.md")
        verdict = read_verdict(path)
        tested = sorted({variant for variant, _, _ in tested_pairs(verdict, path) if variant})
        comparison = load_family(folder)
        lines += family_section(comparison, folder, verdict, tested) + pending_line(root, fam)
        write_text(os.path.join(docs, "results", f"{fam}.md"),
                   "\n".join(appendix(comparison, folder, verdict, tested)).rstrip() + "\n")
    lines += pending_section(root, families)
    page = os.path.join(docs, PAGE)
    write_text(page, "\n".join(lines).rstrip() + "\n")
    return page


# per-run test fields of an older results.json that the folder's statistics replace (a single-run
# bootstrap p-value that over-rejects and sees no seed variance): not published
SUPERSEDED = ("paired_bs_p_vs_baseline", "paired_bs_samples", "bootstrap_mean")


def publish_dir(docs: str, family: str, variant: Optional[str] = None) -> str:
    """The folder ``--publish`` writes a family's comparison to (a variant's below it)."""
    return os.path.join(docs, "results", "reproduce", family, *([variant] if variant else []))


def publish(comparison: dict, docs: str, variant: str = None, run_root: str = None,
            test_ref: str = None, queued: List[str] = None, test_src: str = None, sources: Sequence[str] = ()) -> str:
    """Copy the comparison's JSON to ``docs/results/reproduce/<family>/`` (a variant's to
    ``<family>/<variant>/``), draw the curves of every run in that folder, and rewrite the pages;
    returns the results page's path.  With
    ``run_root`` (the harness's ``OUT/<family>``) each run's per-sentence test outputs go beside its
    JSON (``<system>-s<seed>.hyp.gz`` with the references ``test.ref.gz``, or ``.nll.gz``), with their
    sha256 in the run's JSON, and for a family with ``length_buckets`` the words of each source line of
    ``test_src`` (``test.src_len.gz``); runs scored on another test set than the folder's are refused
    (ReproError).  The folder's statistics are then computed from the committed files
    (fairseq_local_repro.compare); ``queued`` names the runs still training, shown on the pages.  A
    run read from another published folder of ``sources`` (a sweep point's run standing in for a
    tuned one) brings its committed outputs from there."""
    import json

    dest = publish_dir(docs, comparison["family"], variant)
    os.makedirs(dest, exist_ok=True)
    kind = comparison.get("kind", "translation")
    ref_sha = None
    if run_root and test_ref and os.path.isfile(test_ref):
        with open(test_ref, encoding="utf-8") as f:
            ref_text = f.read()
        ref_sha = stats.sha256_text(ref_text)
        mine = {f"{r['system']}-s{r['seed']}.json" for r in comparison["systems"]}
        for name in sorted(os.listdir(dest)):
            if name.endswith(".json") and name != "comparison.json" and name not in mine:
                if read_json(os.path.join(dest, name)).get("test_ref_sha256") != ref_sha:
                    raise ReproError(f"{dest} holds {name}, scored on another test set than {test_ref}: "
                                     "publish these runs with another --variant")
        if kind != "lm":
            write_gz(os.path.join(dest, stats.REF_FILE), ref_text)
        from fairseq_local_repro.families import FAMILIES

        fam = FAMILIES.get(comparison["family"])
        if fam is not None and fam.length_buckets and test_src and os.path.isfile(test_src):
            with open(test_src, encoding="utf-8") as f:  # source lengths in words, for length_bucket_tables
                write_gz(os.path.join(dest, SRC_LEN_FILE), "".join(f"{len(line.split())}\n" for line in f))
    for r in comparison["systems"]:
        r = dict(r, test={k: v for k, v in r["test"].items() if k not in SUPERSEDED})
        if comparison.get("split"):
            r.setdefault("split", comparison["split"])  # every run of the comparison read the same split
        out = os.path.join(run_root, f"{r['system']}-s{r['seed']}", "test",
                           "sentence_nll.json" if kind == "lm" else "hyp.txt") if run_root else None
        if out and os.path.isfile(out):
            with open(out, encoding="utf-8") as f:
                text = f.read()
            if kind == "lm":  # one [nll, tokens] line per sentence: compact and diffable
                text = "[\n" + ",\n".join(json.dumps(x) for x in json.loads(text)) + "\n]\n"
            name = stats.output_name(r, kind)
            write_gz(os.path.join(dest, name), text)
            r.update(outputs={"file": name, "sha256": stats.sha256_text(text)}, test_ref_sha256=ref_sha)
        elif stats.published_in([dest], r) is None and (source := stats.published_in(sources, r)) is not None:
            name = r["outputs"]["file"]
            with open(os.path.join(source, name), "rb") as src, atomic_open(os.path.join(dest, name), "wb") as f:
                shutil.copyfileobj(src, f)
        write_json(os.path.join(dest, f"{r['system']}-s{r['seed']}.json"), r)
    meta = {k: v for k, v in comparison.items() if k not in ("systems", "statistics", "queued")}
    queued = [q for q in queued or [] if not os.path.isfile(os.path.join(dest, q + ".json"))]  # still to come
    if queued:
        meta["queued"] = queued
    write_json(os.path.join(dest, "comparison.json"), meta)
    # every run of the folder, also those another process published meanwhile
    draw_curves(load_family(dest), os.path.join(dest, "curves.png"))
    try:
        meta["statistics"] = stats.analyse_folder(dest)
    except ValueError as e:
        raise ReproError(str(e))
    write_json(os.path.join(dest, "comparison.json"), meta)
    try:
        return write_page(docs)
    except ValueError as e:
        raise ReproError(str(e))
