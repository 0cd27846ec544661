"""Learning curves, tables and ``docs/results.md`` for ``scripts/reproduce.py``.

Everything on the page is computed from the committed JSON in ``docs/results/reproduce/<family>/``
(``comparison.json`` and one ``<system>-s<seed>.json`` per run), so the page can be rewritten
without the checkpoints: ``python scripts/reproduce.py --page-only``.
"""
import json
import os
import shutil
from typing import List, Optional

from repro_run import write_json

PAGE_HEADER = """# Reproduction results

Each paper's central comparison, every system trained to convergence on real data by
`scripts/reproduce.py` (learning rate halved on a dev plateau, early stopping with patience, a
max-epoch safety cap reported when hit), one thread per system.  Generated from the JSON in
`docs/results/reproduce/` by `python scripts/reproduce.py --page-only`; each table shows the
command that reproduces it.  BLEU is detokenized sacrebleu (signature under each table).  A
family's sweep points and probes (a changed `--dropout` or `--limit-train`, published with
`--variant NAME`) follow its comparison, each with its own command and its own baseline run.  Wall
times are on a shared 2-core machine: compare updates, not minutes, across rows.

**Statistics** (`fairseq_local_repro/compare.py`; every test two-sided, each shown by simulation to
hold its level in `tests/test_repro_compare.py`):

* *Seed-level test*, which every verdict follows: a paired t-test over seeds of the runs' test
  scores (each system's run of seed k against the reference's run of seed k), with the 95% interval
  of the mean difference.  With three seeds it has 2 degrees of freedom: it detects only gaps that
  are large against the seed-to-seed spread.
* *Two-level test* (seeds and sentences), where every run's test outputs are committed: the
  between-seed variance plus the between-sentence variance from a paired bootstrap over sentences,
  Welch t reference.
* *Per-sentence test* of one seed's pair of runs, where both runs' outputs are committed: paired
  approximate randomization over test sentences, 1,000 resamples, so its smallest p is shown as
  "≤ 0.001"; beside it a bootstrap 95% interval.  It sees the test set's sampling error only, never
  the optimizer's: a per-sentence p < 0.05 says "these two runs differ", not "these two systems do".
* Every test's p-values are Holm-corrected across the family's comparisons ("Holm p").

From the runs published with their per-sentence outputs (test hypotheses, gzip'd, beside the run's
JSON with the test references `test.ref.gz`, or per-sentence log-likelihoods `*.nll.gz` for
language models) every p-value and interval on this page can be recomputed from the committed files:

<!-- doc-test: parse (reads the whole published tree; tests/test_repro_compare.py runs it) -->
```bash
python scripts/reproduce.py --recompute
```

(the same as `python -m fairseq_local_repro.compare --recompute docs/results/reproduce`; it exits with
status 1 and names every figure that differs from the committed one).

Runs published before outputs were kept have their per-seed scores only: their seed-level tests
are recomputable, their per-sentence tests are not, and the page says so where it applies.
"""


def _fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _per_sentence(comparison: dict, r: dict) -> Optional[dict]:
    """The per-sentence test of run ``r`` against the baseline's run of its seed, if computed."""
    for c in (comparison.get("statistics") or {}).get("comparisons", []):
        if c["system"] == r["system"] and c["reference"] == comparison["baseline"]:
            return c["per_sentence"].get(str(r["seed"]))
    return None


def _cells(comparison: dict, r: dict, p_digits: int) -> dict:
    """One run's formatted figures: test score, its 95% half-width (recomputed from its committed
    outputs; else the one recorded at training time, marked †), the per-sentence p against the
    baseline's run of its seed (Holm-corrected), stop reason."""
    from fairseq_local_repro.compare import format_p

    t = r["test"]
    stats = comparison.get("statistics") or {}
    interval = stats.get("run_intervals", {}).get(f"{r['system']}-s{r['seed']}")
    if interval is not None:
        ci = f"{interval['ci95']:.2f}"
    else:
        ci = f"{t['ci95']:.2f}†" if t.get("ci95") is not None else None
    if r["system"] == comparison["baseline"]:
        p = "(baseline)"
    else:
        test = _per_sentence(comparison, r)
        p = "–" if test is None else (f"{format_p(test['p_holm'], stats.get('n_resamples'))}"
                                      f" (Δ {test['delta']:+.2f})")
    return {"score": f"{t['ppl'] if comparison.get('kind') == 'lm' else t['bleu']:.2f}", "ci": ci, "p": p,
            "stopped": "**max-epoch cap**" if r["hit_max_epoch"] else r["stopped"].replace("_", " ")}


def _metric(comparison: dict) -> str:
    return "test ppl" if comparison.get("kind") == "lm" else "test BLEU"


def table(comparison: dict) -> str:
    """The comparison as a Markdown table (one row per system and seed)."""
    rows = ["| system | arch | params | seed | epochs | updates | wall | stopped by | dev loss (bits) | dev ppl "
            f"| {_metric(comparison)} | 95% CI | per-sentence Holm p vs baseline |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in comparison["systems"]:
        c = _cells(comparison, r, 4)
        rows.append(f"| {r['label']} | `{r['arch']}` | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['epochs']} "
                    f"| {r['updates']} | {_fmt_minutes(r['wall_s'])} | {c['stopped']} | {r['dev_loss_bits']:.3f} "
                    f"| {r['dev_ppl']:.2f} | {c['score']} | {'± ' + c['ci'] if c['ci'] else '–'} | {c['p']} |")
    return "\n".join(rows)


def summary_table(comparison: dict) -> str:
    """The comparison's headline rows for a family page: system, size, training length, dev and
    test scores with the test interval and the p-value against the baseline."""
    rows = [f"| system | params | seed | updates | stopped by | dev ppl | {_metric(comparison)} (95% CI) "
            "| per-sentence Holm p vs baseline |", "|---|---|---|---|---|---|---|---|"]
    for r in comparison["systems"]:
        c = _cells(comparison, r, 3)
        rows.append(f"| {r['label']} | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['updates']:,} | {c['stopped']} "
                    f"| {r['dev_ppl']:.2f} | {c['score']}{' ± ' + c['ci'] if c['ci'] else ''} | {c['p']} |")
    return "\n".join(rows)


def seed_table(comparison: dict) -> List[str]:
    """The family's statistics (``comparison['statistics']``, fairseq_local_repro.compare): every
    system with several seeds over its seeds, then every comparison with its seed-level t-test
    (which the verdict follows), its two-level test where the outputs are committed, each with the
    Holm-corrected p, and a plain line on which runs' per-sentence outputs are committed."""
    from fairseq_local_repro.compare import format_p

    stats = comparison.get("statistics") or {}
    if not stats.get("comparisons") and not stats.get("systems"):
        return []
    labels = {r["system"]: r["label"] for r in comparison["systems"]}
    order = comparison.get("system_order", [])
    rank = lambda n: (order.index(n) if n in order else len(order), n)  # noqa: E731
    metric = _metric(comparison)
    lines = []
    several = sorted((n for n, r in stats["systems"].items() if len(r["seeds"]) > 1), key=rank)
    if several:
        lines += [f"| system | seeds | {metric} per seed | mean ± sd |", "|---|---|---|---|"]
        for n in several:
            r = stats["systems"][n]
            lines.append(f"| {labels.get(n, n)} | {len(r['seeds'])} | {' / '.join(f'{x:.2f}' for x in r['scores'])} "
                         f"| {r['mean']:.2f} ± {r['sd']:.2f} |")
        lines.append("")
    tested = [c for c in stats["comparisons"] if c["seed_level"] or c["two_level"]]
    if tested:
        n = len([c for c in stats["comparisons"] if c["seed_level"]])
        lines += [f"Seed-level tests (paired t-test over seeds; Holm over the family's {n} seed-level "
                  f"comparison{'' if n == 1 else 's'}; the verdict follows these):", "",
                  "| comparison | paired seeds | better in | Δ of means (95% CI) | seed-level p | Holm p "
                  "| two-level p (Holm) |", "|---|---|---|---|---|---|---|"]
        for c in tested:
            s_ = c["seed_level"]
            ci = f"{s_['delta']:+.2f} [{s_['ci95'][0]:+.2f}, {s_['ci95'][1]:+.2f}]" if s_ else f"{c['delta_of_means']:+.2f}"
            two = c["two_level"]
            lines.append(f"| {labels.get(c['system'], c['system'])} vs {labels.get(c['reference'], c['reference'])} "
                         f"| {c['paired_seeds']} | {c['better_in']} of {c['paired_seeds']} | {ci} "
                         f"| {format_p(s_['p']) if s_ else '–'} | {format_p(s_['p_holm']) if s_ else '–'} "
                         f"| {(format_p(two['p']) + ' (' + format_p(two['p_holm']) + ')') if two else '–'} |")
        lines.append("")
    else:
        lines += ["No seed-level test: no comparison has two or more seeds of both systems.", ""]
    with_outputs, runs = stats.get("runs_with_outputs", 0), stats.get("runs", 0)
    if with_outputs == 0:
        lines += ["Per-sentence outputs of these runs were not committed (they were published before outputs were "
                  "kept): their per-sentence and two-level tests cannot be recomputed and are not shown, and the "
                  "95% CIs marked † are the ones recorded at training time.", ""]
    elif with_outputs < runs:
        lines += [f"Per-sentence outputs are committed for {with_outputs} of the {runs} runs; the others' per-sentence "
                  "tests are not shown.", ""]
    queued = comparison.get("queued") or []
    if queued:
        import repro_families

        family = repro_families.FAMILIES.get(comparison.get("family"))
        names = {s.name: s.label for s in family.systems} if family else {}
        names.update(labels)
        lines += ["Still training or queued (their rows appear as they finish): " + "; ".join(
            f"{names.get(q.rsplit('-s', 1)[0], q.rsplit('-s', 1)[0])}, seed {q.rsplit('-s', 1)[1]}" for q in queued)
            + ".", ""]
    return lines


def equal_budget_tables(comparison: dict, points: int = 6) -> List[str]:
    """Dev perplexity of every system at equal updates (the update counts every run reached) and
    at equal wall time (the last validation within each budget), read from the JSON curves."""
    runs = comparison["systems"]
    if not runs or not all(r["curve"] for r in runs):
        return []
    first = min(r["seed"] for r in runs)
    if any(r["seed"] != first for r in runs):  # one column per system: its first seed's run
        runs = [r for r in runs if r["seed"] == first]
    names = [f"{r['label']} (seed {r['seed']})" if len(runs) < len(comparison["systems"]) else r["label"]
             for r in runs]
    common = sorted(set.intersection(*[{p["updates"] for p in r["curve"]} for r in runs]))
    lines = []
    if common:
        step = max(1, len(common) // points)
        picks = common[::-1][::step][::-1][-points:]
        lines += ["Dev perplexity at equal updates:", "", "| updates | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(runs)]
        for u in picks:
            cells = [next(p["dev_ppl"] for p in r["curve"] if p["updates"] == u) for r in runs]
            lines.append(f"| {u} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
        lines.append("")
    horizon = min(r["curve"][-1]["wall_s"] for r in runs)
    budgets = [horizon * (i + 1) / points for i in range(points)]
    lines += ["Dev perplexity at equal wall time (the last validation within the budget; one thread each):", "",
              "| minutes | " + " | ".join(names) + " |", "|---|" + "---|" * len(runs)]
    for b in budgets:
        cells = []
        for r in runs:
            done = [p for p in r["curve"] if p["wall_s"] <= b + 1e-6]
            cells.append(f"{done[-1]['dev_ppl']:.2f} ({done[-1]['updates']} upd.)" if done else "–")
        lines.append(f"| {b / 60:.0f} | " + " | ".join(cells) + " |")
    return lines + [""]


def draw_curves(comparison: dict, path: str):
    """Dev loss against updates and against wall time, one line per system and seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors, styles = {}, ["-", "--", ":", "-."]
    seeds = sorted({r["seed"] for r in comparison["systems"]})
    for r in comparison["systems"]:  # one colour per system, one line style per seed
        curve = r["curve"]
        label = f"{r['label']} (seed {r['seed']})"
        ups = [p["updates"] for p in curve]
        mins = [p["wall_s"] / 60 for p in curve]
        loss = [p["dev_loss"] for p in curve]
        style = dict(marker="o", ms=3, ls=styles[seeds.index(r["seed"]) % len(styles)], label=label)
        if r["system"] in colors:
            style["color"] = colors[r["system"]]
        line, = axes[0].plot(ups, loss, **style)
        colors[r["system"]] = style["color"] = line.get_color()
        axes[1].plot(mins, loss, **style)
    axes[0].set_xlabel("updates")
    axes[1].set_xlabel("wall time (min, one thread per system)")
    for ax in axes:
        ax.set_ylabel("dev loss (bits/token)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{comparison['family']}: dev loss ({comparison['scale']} scale)")
    fig.tight_layout()
    tmp = f"{path}.tmp.{os.getpid()}.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


# per-run test fields of an older results.json that the folder's statistics replace (a single-run
# bootstrap p-value that over-rejects and sees no seed variance): not published
SUPERSEDED = ("paired_bs_p_vs_baseline", "paired_bs_samples", "bootstrap_mean")


def publish(comparison: dict, curves_png: str, docs: str, variant: str = None, run_root: str = None,
            test_ref: str = None, queued: List[str] = None) -> str:
    """Copy the comparison's JSON and curves to ``docs/results/reproduce/<family>/`` (a variant's to
    ``<family>/<variant>/``) and rewrite ``docs/results.md``; returns the page's path.  With
    ``run_root`` (the harness's ``OUT/<family>``) each run's per-sentence test outputs go beside its
    JSON (``<system>-s<seed>.hyp.gz`` with the references ``test.ref.gz``, or ``.nll.gz``), with their
    sha256 in the run's JSON; runs scored on another test set than the folder's are refused.  The
    folder's statistics are then computed from the committed files (fairseq_local_repro.compare);
    ``queued`` names the runs still training, shown on the page."""
    from fairseq_local_repro import compare as stats

    from repro_run import ReproError, read_json

    dest = os.path.join(docs, "results", "reproduce", comparison["family"], *([variant] if variant else []))
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
            stats.write_gz(os.path.join(dest, stats.REF_FILE), ref_text)
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
            stats.write_gz(os.path.join(dest, name), text)
            r.update(outputs={"file": name, "sha256": stats.sha256_text(text)}, test_ref_sha256=ref_sha)
        write_json(os.path.join(dest, f"{r['system']}-s{r['seed']}.json"), r)
    shutil.copy(curves_png, os.path.join(dest, "curves.png"))
    meta = {k: v for k, v in comparison.items() if k not in ("systems", "statistics", "queued")}
    queued = [q for q in queued or [] if not os.path.isfile(os.path.join(dest, q + ".json"))]  # still to come
    if queued:
        meta["queued"] = queued
    write_json(os.path.join(dest, "comparison.json"), meta)
    try:
        meta["statistics"] = stats.analyse_folder(dest)
    except ValueError as e:
        raise ReproError(str(e))
    write_json(os.path.join(dest, "comparison.json"), meta)
    return write_page(docs)


def load_family(folder: str) -> dict:
    """A published comparison: ``comparison.json`` plus its systems' JSON files."""
    with open(os.path.join(folder, "comparison.json"), encoding="utf-8") as f:
        comparison = json.load(f)
    systems = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json") and name != "comparison.json" and not name.startswith("verdict"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                systems.append(json.load(f))
    order = {n: i for i, n in enumerate(comparison.get("system_order", []))}
    systems.sort(key=lambda r: (order.get(r["system"], len(order)), r["system"], r["seed"]))
    comparison["systems"] = systems
    return comparison


def entropy_tables(comparison: dict) -> List[str]:
    """DPN-S2S Table 5: the alignment entropy of each decoder path (columns) to each encoder path
    (rows) for every run that measured it, beside the paper's figures when the comparison has them."""
    runs = [r for r in comparison["systems"] if r.get("alignment_entropy")]
    if not runs:
        return []
    paper = comparison.get("paper_reference", {}).get("alignment_entropy")
    lines = []
    for r in runs:
        e = r["alignment_entropy"]
        cell = lambda m, f: f"{m[f]:.3f}" if f in m else "–"  # noqa: E731
        lines += [f"Alignment entropy of {r['label']}, seed {r['seed']}, {e['subset']} set, {e['sentences']} "
                  f"sentences, {e['layer']} decoder layer (nats; rows: encoder path, columns: decoder path"
                  + ("; the paper's Table 5 in brackets" if paper else "") + "):", "",
                  "| encoder \\ decoder | CNN | SAN |", "|---|---|---|"]
        for enc, name in (("c", "CNN"), ("a", "SAN")):
            cells = []
            for dec in "ca":
                ours = cell(e["entropy"], dec + enc)
                cells.append(ours + (f" ({paper[dec + enc]:.3f})" if paper and dec + enc in paper else ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def masking_tables(comparison: dict) -> List[str]:
    """Parallel cells, Section 4.1 (Figure 5 as a table): the test perplexity of predicting each word
    group's words with no cell masked and with cell i's hidden state zeroed, for every run that
    measured it; in each row the mask that hurts most is in bold."""
    lines = []
    for r in (r for r in comparison["systems"] if r.get("cell_masking")):
        m = r["cell_masking"]
        conds = m["conditions"]
        masks = [c for c in conds if c != "none"]
        lines += [f"Cell masking (Section 4.1) of {r['label']}, seed {r['seed']}, {m['subset']} set: cell i's hidden "
                  f"state zeroed in {'every layer' if m['layer'] == 'all' else 'layer ' + str(m['layer'])}; perplexity "
                  "of predicting the row's words (none: no cell masked; the most harmful mask of each row in bold):", "",
                  "| words | " + " | ".join(c.replace("mask", "mask ") for c in conds) + " |",
                  "|---" * (len(conds) + 1) + "|"]
        rows = [("all words", m["overall"])] + [(f"{name} ({', '.join(m['group_words'][name])})", m["groups"][name])
                                                 for name in m["groups"]]
        for name, ppl in rows:
            worst = max(masks, key=lambda c: ppl[c]) if masks else None
            cells = [(f"**{ppl[c]:.2f}**" if c == worst else f"{ppl[c]:.2f}") for c in conds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


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


def variant_sections(folder: str, folder_rel: str) -> List[str]:
    """The family's sweep points and probes (``<family>/<variant>/comparison.json``, published with
    ``--variant``): per variant its setting, its command and its runs, each run against the
    variant's own baseline."""
    names = sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "comparison.json")))
    if not names:
        return []
    lines = ["### Other settings of this comparison", "",
             "Sweep points and probes, each trained by the command shown (the p-values are against the "
             "baseline trained in the same setting):", ""]
    for name in names:
        v = load_family(os.path.join(folder, name))
        notes = v.get("scale_notes") or ""
        setting = notes[notes.rfind("this run overrides "):] if "this run overrides " in notes else "the family's setting"
        lines += [f"**`{name}`** ({setting}; [JSON]({folder_rel}/{name}/)):", "",
                  "<!-- doc-test: parse (trains every system to convergence) -->", "```bash", v["command"], "```",
                  "", *([split_line(v), ""] if v.get("split") else []), *other_commands(v), summary_table(v), "",
                  *seed_table(v)]
    return lines


def split_line(comparison: dict) -> str:
    """What the comparison's dev and test sets share with its training part."""
    split = comparison.get("split")
    kind = "captions" if comparison.get("kind") == "lm" else "pairs"
    if not split or "test_dropped" not in split:
        return ("**Split:** published before the overlap check: dev and test were not cleaned of sources that also "
                "occur in the training part.")
    return (f"**Split:** {split['train']:,} train / {split['dev']:,} dev / {split['test']:,} test {kind}; "
            f"{split['dev_dropped']} dev and {split['test_dropped']} test {kind} were dropped because their source "
            "(case-folded, whitespace collapsed) occurs in the training part, so no dev or test source is a training "
            "source.")


def family_section(comparison: dict, folder_rel: str, verdict: str = "", folder: str = None) -> List[str]:
    sigs = sorted({r["test"].get("signature") or r["test"].get("label", "") for r in comparison["systems"]})
    capped = [r["label"] for r in comparison["systems"] if r["hit_max_epoch"]]
    lines = [f"## {comparison['family']} ({comparison['scale']} scale)", "",
             f"**Paper:** {comparison['paper']}.  **Claim:** {comparison['claim']}.", "",
             f"**Data:** {comparison['data']}.", "", split_line(comparison), ""]
    if comparison.get("scale_notes"):
        lines += [f"**Scaled:** {comparison['scale_notes']}.", ""]
    lines += ["Reproduce:", "", "<!-- doc-test: parse (trains every system to convergence) -->", "```bash",
              comparison["command"], "```", "", *other_commands(comparison), table(comparison), "",
              *seed_table(comparison),
              ("Metric: " if comparison.get("kind") == "lm" else "BLEU signature: ")
              + "; ".join(f"`{s}`" for s in sigs) + ".", ""]
    lines.append("Max-epoch cap hit by: " + (", ".join(capped) + " (not converged)." if capped else
                                             "none (every run ended by early stopping or the learning-rate floor)."))
    lines += [""] + equal_budget_tables(comparison) + entropy_tables(comparison) + masking_tables(comparison)
    lines += [f"![dev loss vs updates and wall time]({folder_rel}/curves.png)", ""]
    if folder:
        lines += variant_sections(folder, folder_rel)
    if verdict:
        lines += ["**Verdict.** " + verdict.strip(), ""]
    return lines


def pending_section(published: List[str]) -> List[str]:
    """The families of the registry with no published comparison yet, and those not implemented."""
    import repro_families

    todo = [f for f in sorted(repro_families.FAMILIES) if f not in published]
    if not todo and not repro_families.PLANNED:
        return []
    lines = ["## Not yet on this page", ""]
    for name in todo:
        fam = repro_families.FAMILIES[name]
        systems = ", ".join(s.label for s in fam.systems)
        lines.append(f"* `{name}` ({systems}; {fam.data_cpu}): implemented, not yet run to convergence: "
                     f"`python scripts/reproduce.py {name} --scale cpu --publish`.")
    for name, what in sorted(repro_families.PLANNED.items()):
        lines.append(f"* `{name}` ({what}): not implemented in the harness yet.")
    return lines + [""]


def write_page(docs: str) -> str:
    """Rewrite ``docs/results.md`` from ``docs/results/reproduce/*/`` (a ``verdict.md`` beside a
    family's JSON is included as its verdict)."""
    root = os.path.join(docs, "results", "reproduce")
    lines = [PAGE_HEADER]
    families = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "comparison.json"))) \
        if os.path.isdir(root) else []
    if not families:
        lines.append("No comparison has been published yet (`scripts/reproduce.py FAMILY --publish`).\n")
    for fam in families:
        folder = os.path.join(root, fam)
        verdict = ""
        vpath = os.path.join(folder, "verdict.md")
        if os.path.isfile(vpath):
            with open(vpath, encoding="utf-8") as f:
                verdict = f.read()
        lines += family_section(load_family(folder), f"results/reproduce/{fam}", verdict, folder)
    lines += pending_section(families)
    path = os.path.join(docs, "results.md")
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    os.replace(tmp, path)
    return path
