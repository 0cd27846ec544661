"""The Markdown tables and the learning-curve figure of a published comparison.

Every function reads a comparison as :func:`fairseq_local_repro.page.load_family` returns it
(``comparison.json`` with its runs under ``systems`` and the folder's ``statistics``, computed by
:mod:`fairseq_local_repro.compare`) and returns Markdown lines; nothing here computes a statistic but
:func:`length_bucket_tables`' per-bucket BLEU, from the folder's committed outputs.
"""
import os
from typing import List, Optional

from fairseq_local_core.file_io import atomic_open
from fairseq_local_repro.significance import format_p


def _fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def metric(comparison: dict) -> str:
    return "test ppl" if comparison.get("kind") == "lm" else "test BLEU"


def labels(comparison: dict) -> dict:
    """Each system's label, from its runs' JSON."""
    return {r["system"]: r["label"] for r in comparison["systems"]}


def _per_sentence(comparison: dict, r: dict) -> Optional[dict]:
    """The per-sentence test of run ``r`` against the baseline's run of its seed, if computed."""
    for c in (comparison.get("statistics") or {}).get("comparisons", []):
        if c["system"] == r["system"] and c["reference"] == comparison["baseline"]:
            return c["per_sentence"].get(str(r["seed"]))
    return None


def _cells(comparison: dict, r: dict) -> dict:
    """One run's formatted figures: test score, its 95% half-width (recomputed from its committed
    outputs; else the one recorded at training time, marked †), the per-sentence p against the
    baseline's run of its seed (Holm-corrected), stop reason."""
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


def dagger_note(rows: str) -> List[str]:
    """The legend of a run table whose intervals include ones recorded at training time."""
    return ["† the 95% CI recorded at training time (the run's test outputs were not committed).", ""] \
        if "†" in rows else []


def table(comparison: dict) -> str:
    """The comparison as a Markdown table (one row per system and seed, with its provenance)."""
    rows = ["| system | arch | params | seed | epochs | updates | wall | stopped by | dev loss (bits) | dev ppl "
            f"| {metric(comparison)} | 95% CI | per-sentence Holm p vs baseline |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in comparison["systems"]:
        c = _cells(comparison, r)
        rows.append(f"| {r['label']} | `{r['arch']}` | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['epochs']} "
                    f"| {r['updates']} | {_fmt_minutes(r['wall_s'])} | {c['stopped']} | {r['dev_loss_bits']:.3f} "
                    f"| {r['dev_ppl']:.2f} | {c['score']} | {'± ' + c['ci'] if c['ci'] else '–'} | {c['p']} |")
    return "\n".join(rows)


def summary_table(comparison: dict) -> str:
    """The comparison's headline rows for a family page: system, size, training length, dev and
    test scores with the test interval and the p-value against the baseline."""
    rows = [f"| system | params | seed | updates | stopped by | dev ppl | {metric(comparison)} (95% CI) "
            "| per-sentence Holm p vs baseline |", "|---|---|---|---|---|---|---|---|"]
    for r in comparison["systems"]:
        c = _cells(comparison, r)
        rows.append(f"| {r['label']} | {r['params'] / 1e6:.2f}M | {r['seed']} | {r['updates']:,} | {c['stopped']} "
                    f"| {r['dev_ppl']:.2f} | {c['score']}{' ± ' + c['ci'] if c['ci'] else ''} | {c['p']} |")
    return "\n".join(rows)


def queued_line(comparison: dict) -> List[str]:
    """The runs of the comparison still training or queued (``comparison.json``'s ``queued``)."""
    queued = comparison.get("queued") or []
    if not queued:
        return []
    from fairseq_local_repro.families import FAMILIES  # the labels of systems with no published run yet

    family = FAMILIES.get(comparison.get("family"))
    names = {s.name: s.label for s in family.systems} if family else {}
    names.update(labels(comparison))
    runs = [q.rsplit("-s", 1) for q in queued]
    return ["Still training or queued (their rows appear as they finish): "
            + "; ".join(f"{names.get(s, s)}, seed {k}" for s, k in runs) + ".", ""]


def _per_sentence_cell(c: dict, n_resamples: Optional[int]) -> str:
    return "; ".join(f"seed {k}: {format_p(s['p_holm'], n_resamples)} (Δ {s['delta']:+.2f})"
                     for k, s in sorted(c["per_sentence"].items(), key=lambda kv: int(kv[0]))) or "–"


def seed_table(comparison: dict, systems: bool = True) -> List[str]:
    """The comparison's main tables (``comparison['statistics']``, fairseq_local_repro.compare):
    every system over its seeds (unless ``systems=False``: beside a table of the runs), then every
    comparison with its seed-level t-test (on which the claims' verdicts rest), its two-level test and each
    seed's per-sentence test, Holm-corrected across the family's comparisons; a line on which runs'
    outputs are committed and which runs are still queued."""
    stats = comparison.get("statistics") or {}
    if not stats.get("comparisons") and not stats.get("systems"):
        return queued_line(comparison)
    names = labels(comparison)
    order = comparison.get("system_order", [])
    rank = lambda n: (order.index(n) if n in order else len(order), n)  # noqa: E731
    params = {r["system"]: r["params"] for r in comparison["systems"]}
    lines = [f"| system | params | seeds | {metric(comparison)} per seed | mean ± sd |", "|---|---|---|---|---|"]
    for n in sorted(stats["systems"], key=rank) if systems else []:
        r = stats["systems"][n]
        spread = f"{r['mean']:.2f} ± {r['sd']:.2f}" if r["sd"] is not None else f"{r['mean']:.2f}"
        lines.append(f"| {names.get(n, n)} | {params[n] / 1e6:.2f}M | {len(r['seeds'])} "
                     f"| {' / '.join(f'{x:.2f}' for x in r['scores'])} | {spread} |")
    lines = lines + [""] if systems else []
    comps = stats.get("comparisons") or []
    if comps:
        n = len([c for c in comps if c["seed_level"]])
        lines += [f"| comparison | paired seeds | better in | Δ of means (95% CI) | seed-level p (Holm) "
                  f"| two-level p (Holm) | per-sentence Holm p |", "|---|---|---|---|---|---|---|"]
        for c in comps:
            s_, two = c["seed_level"], c["two_level"]
            delta = (f"{s_['delta']:+.2f} [{s_['ci95'][0]:+.2f}, {s_['ci95'][1]:+.2f}]" if s_
                     else f"{c['delta_of_means']:+.2f}")
            lines.append(f"| {names.get(c['system'], c['system'])} vs {names.get(c['reference'], c['reference'])} "
                         f"| {c['paired_seeds']} | {c['better_in']} of {c['paired_seeds']} | {delta} "
                         f"| {(format_p(s_['p']) + ' (' + format_p(s_['p_holm']) + ')') if s_ else '–'} "
                         f"| {(format_p(two['p']) + ' (' + format_p(two['p_holm']) + ')') if two else '–'} "
                         f"| {_per_sentence_cell(c, stats.get('n_resamples'))} |")
        lines += ["", (f"Holm's correction runs over the family's {n} seed-level comparison{'' if n == 1 else 's'}; "
                       "the claims' verdicts use their own Holm levels over the family's claims (the claims table)." if n else
                       "No seed-level test: no comparison has two or more seeds of both systems."), ""]
    with_outputs, runs = stats.get("runs_with_outputs", 0), stats.get("runs", 0)
    if with_outputs == 0:
        lines += ["Per-sentence outputs of these runs are not committed: their per-sentence and two-level tests cannot "
                  "be recomputed and are not shown.", ""]
    elif with_outputs < runs:
        lines += [f"Per-sentence outputs are committed for {with_outputs} of the {runs} runs; the others' per-sentence "
                  "tests are not shown.", ""]
    return lines + queued_line(comparison)


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
        lines += layer_head_table(e)
    return lines


def layer_head_table(e: dict) -> List[str]:
    """Every decoder layer's alignment entropy divided by log(source length) (1 = uniform over the
    source, 0 = one position) per flow, and for the SAN decoder path every head's."""
    per_layer, per_head = e.get("per_layer_normalised"), e.get("per_head_normalised", {})
    if not per_layer:
        return []
    flow_name = {"cc": "CNN -> CNN", "ca": "CNN -> SAN", "ac": "SAN -> CNN", "aa": "SAN -> SAN"}
    n = max(len(v) for v in per_layer.values())
    lines = ["Normalised alignment entropy (entropy / log source length) per decoder layer; for the SAN decoder "
             "path, each head's in brackets (decoder path -> encoder path):", "",
             "| flow | " + " | ".join(f"layer {i + 1}" for i in range(n)) + " |", "|---" * (n + 1) + "|"]
    for flow in ("cc", "ca", "ac", "aa"):
        if flow not in per_layer:
            continue
        cells = []
        for i, v in enumerate(per_layer[flow]):
            heads = per_head.get(flow, [])
            cells.append(f"{v:.3f}" + (f" ({' / '.join(f'{h:.2f}' for h in heads[i])})" if i < len(heads) else ""))
        lines.append(f"| {flow_name[flow]} | " + " | ".join(cells) + " |")
    return lines + [""]


SRC_LEN_FILE = "test.src_len.gz"  # a published folder's test source lengths in words, one line per sentence


def length_bucket_tables(comparison: dict, folder: str) -> List[str]:
    """The MC-RNN paper's Figure 4 as a table, from the committed files of ``folder`` alone (the runs'
    hypotheses, ``test.ref.gz`` and ``test.src_len.gz``): per source-length bucket of the family's
    ``length_buckets``, each system's corpus BLEU of the bucket's sentences, averaged over its seeds,
    and each other system's difference from the baseline over paired seeds.  Nothing for a family
    without buckets or a folder without committed outputs."""
    import numpy as np

    from fairseq_local_repro.compare import folder_stats, read_gz
    from fairseq_local_repro.significance import corpus_bleu
    from fairseq_local_repro.families import FAMILIES

    fam = FAMILIES.get(comparison["family"])
    path = os.path.join(folder, SRC_LEN_FILE)
    if fam is None or not fam.length_buckets or not os.path.isfile(path):
        return []
    lengths = np.array([int(x) for x in read_gz(path).split()])
    stats_of = folder_stats(folder, "translation")
    runs = [(r, stats_of(r)) for r in comparison["systems"]]
    runs = [(r, st) for r, st in runs if st is not None]
    if not runs:
        return []
    for r, st in runs:
        if st.shape[0] != len(lengths):
            raise ValueError(f"{path}: {len(lengths)} source lengths for the {st.shape[0]} test sentences of "
                             f"{r['system']}-s{r['seed']}")
    edges = list(fam.length_buckets)
    bucket = np.searchsorted(edges, lengths, side="left")  # bucket i: edges[i-1] < length <= edges[i]
    names = [f"1-{edges[0]}"] + [f"{a + 1}-{b}" for a, b in zip(edges, edges[1:])] + [f">{edges[-1]}"]
    bleu = {}  # (system, seed) -> BLEU per bucket
    for r, st in runs:
        bleu[r["system"], r["seed"]] = [float(corpus_bleu(st[bucket == b].sum(0))[0]) if (bucket == b).any()
                                        else float("nan") for b in range(len(names))]
    order = list(dict.fromkeys(r["system"] for r, _ in runs))
    label = {r["system"]: r["label"] for r, _ in runs}
    seeds = {s: sorted(k for (t, k) in bleu if t == s) for s in order}
    base = comparison.get("baseline")
    others = [s for s in order if s != base and base in order]
    head = ["source words", "sentences", *(f"{label[s]} ({len(seeds[s])} seed{'s' * (len(seeds[s]) != 1)})"
                                           for s in order), *(f"{label[s]} - {label[base]}" for s in others)]
    lines = ["BLEU by source length (the MC-RNN paper's Figure 4): each bucket's sentences scored as a corpus, "
             "the mean over seeds; the differences are over paired seeds, with how many of them the system leads:",
             "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for b, name in enumerate(names):
        n = int((bucket == b).sum())
        if not n:
            continue
        cells = [name, str(n)] + [f"{np.mean([bleu[s, k][b] for k in seeds[s]]):.2f}" for s in order]
        for s in others:
            paired = [k for k in seeds[s] if k in seeds[base]]
            d = [bleu[s, k][b] - bleu[base, k][b] for k in paired]
            cells.append(f"{np.mean(d):+.2f} ({sum(x > 0 for x in d)} of {len(d)})" if d else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


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
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
