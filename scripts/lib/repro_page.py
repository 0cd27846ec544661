"""Learning curves, tables and ``docs/results.md`` for ``scripts/reproduce.py``.

Everything on the page is computed from the committed JSON in ``docs/results/reproduce/<family>/``
(``comparison.json`` and one ``<system>-s<seed>.json`` per run), so the page can be rewritten
without the checkpoints: ``python scripts/reproduce.py --page-only``.
"""
import json
import os
import shutil
from typing import List

from repro_run import write_json

PAGE_HEADER = """# Reproduction results

Each paper's central comparison, every system trained to convergence on real data by
`scripts/reproduce.py` (learning rate halved on a dev plateau, early stopping with patience, a
max-epoch safety cap reported when hit), one thread per system.  Generated from the JSON in
`docs/results/reproduce/` by `python scripts/reproduce.py --page-only`; each table shows the
command that reproduces it.  BLEU is detokenized sacrebleu (signature under each table) with the
95% interval of sacrebleu's paired bootstrap (1,000 resamples) and its p-value against the
baseline.  Where a family was run with several seeds, a second table gives each system's mean and
sd over seeds and the paired bootstrap of the seed-averaged score (Clark et al. 2011).  A family's
sweep points and probes (a changed `--dropout` or `--limit-train`, published with `--variant NAME`)
follow its comparison, each with its own command and its own baseline run.  Wall times
are on a shared 2-core machine: compare updates, not minutes, across rows.
"""


def _fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _cells(comparison: dict, r: dict, p_digits: int) -> dict:
    """One run's formatted figures: test score, its 95% half-width, p vs the baseline, stop reason."""
    t = r["test"]
    p = t.get("paired_bs_p_vs_baseline")
    return {"score": f"{t['ppl'] if comparison.get('kind') == 'lm' else t['bleu']:.2f}",
            "ci": f"{t['ci95']:.2f}" if t.get("ci95") is not None else None,
            "p": "(baseline)" if r["system"] == comparison["baseline"] else ("–" if p is None else f"{p:.{p_digits}f}"),
            "stopped": "**max-epoch cap**" if r["hit_max_epoch"] else r["stopped"].replace("_", " ")}


def _metric(comparison: dict) -> str:
    return "test ppl" if comparison.get("kind") == "lm" else "test BLEU"


def table(comparison: dict) -> str:
    """The comparison as a Markdown table (one row per system and seed)."""
    rows = ["| system | arch | params | seed | epochs | updates | wall | stopped by | dev loss (bits) | dev ppl "
            f"| {_metric(comparison)} | 95% CI | paired-bs p vs baseline |",
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
            "| p vs baseline |", "|---|---|---|---|---|---|---|---|"]
    for r in comparison["systems"]:
        c = _cells(comparison, r, 3)
        rows.append(f"| {r['label']} | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['updates']:,} | {c['stopped']} "
                    f"| {r['dev_ppl']:.2f} | {c['score']}{' ± ' + c['ci'] if c['ci'] else ''} | {c['p']} |")
    return "\n".join(rows)


def seed_table(comparison: dict) -> List[str]:
    """Every system over its seeds (``comparison['seed_summary']``, written by ``repro_seeds``):
    the scores per seed, their mean and sd, the gap to the baseline, in how many seeds the system
    beat the baseline's run of the same seed, and the seed-pooled paired-bootstrap p-values."""
    summary = comparison.get("seed_summary") or {}
    if not summary.get("systems"):
        return []
    labels = {r["system"]: r["label"] for r in comparison["systems"]}
    order = comparison.get("system_order", [])
    names = sorted(summary["systems"], key=lambda n: (order.index(n) if n in order else len(order), n))
    metric = _metric(comparison)
    lines = [f"Over seeds: {summary['method']}.", "",
             f"| system | seeds | {metric} per seed | mean ± sd | Δ vs baseline | beats the baseline's run "
             "| pooled p vs baseline |", "|---|---|---|---|---|---|---|"]
    for n in names:
        r = summary["systems"][n]
        per_seed = " / ".join(f"{x:.2f}" for x in r["scores"])
        if n == comparison["baseline"]:
            delta, wins, p = "–", "(baseline)", "–"
        else:
            delta = f"{r['delta_vs_baseline']:+.2f}"
            wins = f"{r['better_than_baseline_in']} of {r['paired_seeds']}"
            p = f"{r['pooled_p_vs_baseline']:.3f}"
        lines.append(f"| {labels.get(n, n)} | {len(r['seeds'])} | {per_seed} | {r['mean']:.2f} ± {r['sd']:.2f} "
                     f"| {delta} | {wins} | {p} |")
    others = [(pair, p) for pair, p in summary["pooled_p"].items() if comparison["baseline"] not in pair.split("|")]
    if others:
        lines += ["", "Pooled p between the other systems: " + "; ".join(
            f"{labels.get(a, a)} vs {labels.get(b, b)} {p:.3f}" for (a, b), p in
            ((pair.split("|"), p) for pair, p in others)) + "."]
    return lines + [""]


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


def publish(comparison: dict, curves_png: str, docs: str, variant: str = None) -> str:
    """Copy the comparison's JSON and curves to ``docs/results/reproduce/<family>/`` (a variant's to
    ``<family>/<variant>/``) and rewrite ``docs/results.md``; returns the page's path."""
    dest = os.path.join(docs, "results", "reproduce", comparison["family"], *([variant] if variant else []))
    os.makedirs(dest, exist_ok=True)
    for r in comparison["systems"]:
        write_json(os.path.join(dest, f"{r['system']}-s{r['seed']}.json"), r)
    write_json(os.path.join(dest, "comparison.json"), {k: v for k, v in comparison.items() if k != "systems"})
    shutil.copy(curves_png, os.path.join(dest, "curves.png"))
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
                  "", *other_commands(v), summary_table(v), "", *seed_table(v)]
    return lines


def family_section(comparison: dict, folder_rel: str, verdict: str = "", folder: str = None) -> List[str]:
    sigs = sorted({r["test"].get("signature") or r["test"].get("label", "") for r in comparison["systems"]})
    capped = [r["label"] for r in comparison["systems"] if r["hit_max_epoch"]]
    lines = [f"## {comparison['family']} ({comparison['scale']} scale)", "",
             f"**Paper:** {comparison['paper']}.  **Claim:** {comparison['claim']}.", "",
             f"**Data:** {comparison['data']}.", ""]
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
