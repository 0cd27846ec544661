"""fairseq_local_repro.page: what docs/results.md and its per-family appendices show of the
published comparisons: the claims table's verdicts, the sections, sweeps and probes, publishing."""
import json
from pathlib import Path

import pytest

from fairseq_local_repro import page as repro_page
from fairseq_local_repro import publish as repro_publish
from fairseq_local_repro import verdicts
from fairseq_local_repro import significance

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results" / "reproduce"


def first_seed(comparison: dict) -> dict:
    """The published comparison's seed-1 runs, as its first command trained them."""
    runs = [r for r in comparison["systems"] if r["seed"] == 1]
    return {**comparison, "systems": runs, "command": runs[0]["command"]}


def test_equal_budget_tables_keep_one_column_per_system_with_several_seeds():
    comparison = first_seed(repro_page.load_family(str(REPO / "docs" / "results" / "reproduce" / "lattice")))
    one_seed = repro_page.equal_budget_tables(comparison)
    n = len({r["system"] for r in comparison["systems"]})
    assert one_seed[2].count("|") == n + 2 and "(seed" not in one_seed[2]
    comparison["systems"] = comparison["systems"] + [
        {**r, "seed": 2, "curve": [{**p, "dev_ppl": 99.0} for p in r["curve"]]} for r in comparison["systems"]]
    lines = repro_page.equal_budget_tables(comparison)
    assert lines[2].count("|") == n + 2 and lines[2].count("(seed 1)") == n
    assert not any("99.00" in line for line in lines)



def test_runs_of_another_command_are_named_with_their_command():
    comparison = first_seed(repro_page.load_family(str(REPO / "docs" / "results" / "reproduce" / "lattice")))
    assert repro_page.other_commands(comparison) == []
    later = "python scripts/reproduce.py lattice --scale cpu --seeds 3 --systems char"
    comparison["systems"] = comparison["systems"] + [
        {**r, "seed": 2, "command": later} for r in comparison["systems"] if r["system"] in ("word", "char")]
    comparison["command"] = later
    earlier = comparison["systems"][0]["command"]
    lines = repro_page.other_commands(comparison)
    assert lines[0] == (f"Trained by `{earlier}`: DWL-GRU + Gating, seed 1; SWL-GRU + Gating, seed 1; "
                        "RNNSearch (word, jieba), seed 1; RNNSearch (char), seed 1.")
    folder = str(RESULTS / "lattice")
    section = "\n".join(repro_page.appendix(comparison, folder, repro_page.Verdict({}, "", ""), []))
    assert section.index(lines[0]) < section.index("| system | arch |")


def test_masking_table_rows_are_groups_and_the_most_harmful_mask_is_bold():
    masking = {"conditions": ["none", "mask1", "mask2", "mask3"], "subset": "test", "layer": "all",
               "overall": {"none": 40.0, "mask1": 55.5, "mask2": 61.25, "mask3": 48.0},
               "groups": {"copular verbs": {"none": 3.0, "mask1": 9.0, "mask2": 4.0, "mask3": 5.0},
                          "colours": {"none": 80.0, "mask1": 81.0, "mask2": 82.0, "mask3": 95.0}},
               "group_words": {"copular verbs": ["is", "are"], "colours": ["red"]}}
    comparison = {"systems": [{"label": "wide 1 (LSTM)", "seed": 1},
                              {"label": "wide 3", "seed": 2, "cell_masking": masking}]}
    lines = repro_page.masking_tables(comparison)
    assert lines[0].startswith("Cell masking (Section 4.1) of wide 3, seed 2, test set: cell i's hidden state "
                               "zeroed in every layer;")
    assert lines[2:7] == ["| words | none | mask 1 | mask 2 | mask 3 |", "|---|---|---|---|---|",
                          "| all words | 40.00 | 55.50 | **61.25** | 48.00 |",
                          "| copular verbs (is, are) | 3.00 | **9.00** | 4.00 | 5.00 |",
                          "| colours (red) | 80.00 | 81.00 | 82.00 | **95.00** |"]
    assert repro_page.masking_tables({"systems": comparison["systems"][:1]}) == []


def test_publish_draws_the_curves_of_every_run_in_the_folder(tmp_path, monkeypatch):
    """Two processes publishing runs of one comparison, one after the other (``--queued`` names the
    other's runs): the curves drawn at the second publish show the first's runs too."""
    family = repro_page.load_family(str(RESULTS / "mc_rnn"))
    base = next(r for r in family["systems"] if r["system"] == family["baseline"] and r["seed"] == 1)
    other = next(r for r in family["systems"] if r["system"] != family["baseline"] and r["seed"] == 1)
    meta = {k: v for k, v in family.items() if k not in ("statistics", "systems")}
    drawn = []
    monkeypatch.setattr(repro_publish, "draw_curves",
                        lambda comparison, path: drawn.append(
                            (path, sorted((r["system"], r["seed"]) for r in comparison["systems"]))))
    docs = tmp_path / "docs"
    repro_publish.publish({**meta, "systems": [base]}, str(docs), "probe")
    repro_publish.publish({**meta, "systems": [other]}, str(docs), "probe")
    dest = str(docs / "results" / "reproduce" / "mc_rnn" / "probe" / "curves.png")
    assert drawn == [(dest, [(base["system"], 1)]), (dest, sorted([(base["system"], 1), (other["system"], 1)]))]


def test_a_variant_is_shown_under_its_family_and_does_not_replace_its_runs(tmp_path):
    import os
    import shutil

    docs = tmp_path / "docs"
    fam = docs / "results" / "reproduce" / "mc_rnn"
    shutil.copytree(REPO / "docs" / "results" / "reproduce" / "mc_rnn", fam,  # the family's own runs only
                    ignore=lambda d, names: [n for n in names if os.path.isdir(os.path.join(d, n))])
    (fam / "verdict.md").write_text("VERDICT TEXT\n")
    headline = repro_page.load_family(str(fam))
    base = next(r for r in headline["systems"] if r["system"] == "baseline" and r["seed"] == 1)
    command = "python scripts/reproduce.py mc_rnn --scale cpu --systems baseline --dropout 0.4"
    run = {**base, "command": command, "dev_ppl": 19.5, "test": {**base["test"], "bleu": 31.25, "ci95": 1.3}}
    variant = {**{k: v for k, v in headline.items() if k not in ("statistics", "systems")}, "command": command,
               "scale_notes": headline["scale_notes"] + "; this run overrides --dropout 0.4", "systems": [run]}
    page = Path(repro_publish.publish(variant, str(docs), "dropout_0.4")).read_text()
    # the family's own runs are untouched; the variant sits in its own folder
    assert repro_page.load_family(str(fam))["systems"] == headline["systems"]
    assert sorted(p.name for p in (fam / "dropout_0.4").iterdir()) == ["baseline-s1.json", "comparison.json",
                                                                       "curves.png"]
    # the results page has the family's section with its verdict; the sweep point is in the appendix only
    assert "## mc_rnn (cpu scale)" in page and "**Verdict.** VERDICT TEXT" in page and command not in page
    lines = (docs / "results" / "mc_rnn.md").read_text().splitlines()
    start = lines.index("## Other settings")
    section = lines[start:]
    assert lines.index("## Runs") < start
    assert "### `dropout_0.4`" in section
    assert "This run overrides --dropout 0.4; [JSON](reproduce/mc_rnn/dropout_0.4/)." in section
    assert command in section
    section = "\n".join(section)
    # no outputs were published with these runs: the interval is the recorded one, marked †
    assert f"| Baseline-RNN | {base['params'] / 1e6:.2f}M | 1 | {base['updates']:,} | early stop | 19.50 " \
           "| 31.25 ± 1.30† | (baseline) |" in section
    # the appendix's run table still shows the seed-1 baseline's own score
    assert f"| {base['test']['bleu']:.2f} | ± {base['test']['ci95']:.2f}† | (baseline) |" in "\n".join(lines[:start])


def test_the_committed_page_is_the_one_the_committed_json_gives(tmp_path):
    import shutil

    shutil.copytree(RESULTS, tmp_path / "results" / "reproduce")
    page = Path(repro_page.write_page(str(tmp_path))).read_text(encoding="utf-8")
    stale = "is stale: run python scripts/reproduce.py --page-only"
    assert page == (REPO / "docs" / "results.md").read_text(encoding="utf-8"), f"docs/results.md {stale}"
    for appendix in sorted((tmp_path / "results").glob("*.md")):
        assert appendix.read_text(encoding="utf-8") == (REPO / "docs" / "results" / appendix.name).read_text(
            encoding="utf-8"), f"docs/results/{appendix.name} {stale}"
    assert sorted(p.name for p in (tmp_path / "results").glob("*.md")) == sorted(
        p.name for p in (REPO / "docs" / "results").glob("*.md"))


def test_publish_commits_outputs_lists_queued_runs_and_refuses_another_test_set(tmp_path):
    """Publishing with the run folders: each run's hypotheses and the references go beside its JSON
    (gzip'd, hashed), the statistics come from them, runs still queued are named on the page until
    published, and a run scored on other references cannot join the folder."""
    from fairseq_local_repro import compare
    from fairseq_local_repro.processes import ReproError

    base = json.loads((REPO / "docs" / "results" / "reproduce" / "mc_rnn" / "baseline-s1.json").read_text())
    refs = ["a man rides a horse .", "two dogs play in the snow .", "a girl is reading a book ."]
    hyps = {"baseline": ["a man rides a horse .", "two dogs play .", "a girl reads ."],
            "mc_rnn_3": ["a man is riding a horse .", "two dogs play in the snow .", "a girl is reading a book ."]}
    root = tmp_path / "out"
    runs = []
    for name, lines in hyps.items():
        (root / f"{name}-s1" / "test").mkdir(parents=True)
        (root / f"{name}-s1" / "test" / "hyp.txt").write_text("".join(x + "\n" for x in lines))
        bleu = significance.corpus_bleu(significance.bleu_statistics(lines, refs).sum(0))[0]
        label = {"baseline": "Baseline-RNN", "mc_rnn_3": "MC-RNN-3"}[name]
        runs.append({**base, "system": name, "label": label, "test": {**base["test"], "bleu": round(float(bleu), 2)}})
    ref = tmp_path / "test.en"
    ref.write_text("".join(x + "\n" for x in refs))
    comparison = {**{k: v for k, v in repro_page.load_family(str(REPO / "docs" / "results" / "reproduce" / "mc_rnn"))
                     .items() if k not in ("statistics", "systems")}, "systems": runs}
    docs = tmp_path / "docs"
    repro_publish.publish(comparison, str(docs), "probe", run_root=str(root), test_ref=str(ref),
                       queued=["mc_rnn_3-s1", "mc_rnn_3-s2"])
    dest = docs / "results" / "reproduce" / "mc_rnn" / "probe"
    assert compare.read_gz(str(dest / "mc_rnn_3-s1.hyp.gz")).splitlines() == hyps["mc_rnn_3"]
    assert compare.read_gz(str(dest / "test.ref.gz")).splitlines() == refs
    stats = json.loads((dest / "comparison.json").read_text())["statistics"]
    assert stats["runs_with_outputs"] == 2 and stats["comparisons"][0]["per_sentence"]["1"]["p"] > 0
    # the published run is no longer queued; the other one is named with its label
    lines = repro_page.seed_table(repro_page.load_family(str(dest)))
    assert "Still training or queued (their rows appear as they finish): MC-RNN-3, seed 2." in lines
    other = tmp_path / "other.en"
    other.write_text("other references\n" * 3)
    with pytest.raises(ReproError, match="scored on another test set"):
        repro_publish.publish({**comparison, "systems": runs[1:]}, str(docs), "probe",
                           run_root=str(root), test_ref=str(other))


def test_publish_commits_language_model_sentence_scores(tmp_path):
    """A language-model family's runs publish their per-sentence (nll, tokens) as .nll.gz; the
    folder's perplexities and per-sentence test are recomputed from them."""
    import math

    from fairseq_local_repro import compare

    folder = REPO / "docs" / "results" / "reproduce" / "parallel_cells"
    family = repro_page.load_family(str(folder))
    nll = {"wide1": [[12.5, 6], [30.25, 11], [8.0, 4], [21.0, 9]],
           "wide3": [[11.0, 6], [29.5, 11], [8.5, 4], [19.75, 9]]}
    root = tmp_path / "out"
    runs = []
    for name, rows in nll.items():
        (root / f"{name}-s1" / "test").mkdir(parents=True)
        (root / f"{name}-s1" / "test" / "sentence_nll.json").write_text(json.dumps(rows))
        run = next(r for r in family["systems"] if r["system"] == name and r["seed"] == 1)
        ppl = math.exp(sum(n for n, _ in rows) / sum(t for _, t in rows))
        runs.append({**run, "test": {**run["test"], "ppl": round(ppl, 2)}})
    docs = tmp_path / "docs"
    comparison = {**{k: v for k, v in family.items() if k not in ("statistics", "systems")}, "systems": runs}
    repro_publish.publish(comparison, str(docs), "probe", run_root=str(root),
                       test_ref=str(root / "wide1-s1" / "test" / "sentence_nll.json"))
    dest = docs / "results" / "reproduce" / "parallel_cells" / "probe"
    assert json.loads(compare.read_gz(str(dest / "wide3-s1.nll.gz"))) == nll["wide3"]
    assert not (dest / compare.REF_FILE).exists()  # the sentence scores are self-contained
    stats = json.loads((dest / "comparison.json").read_text())["statistics"]
    assert stats["run_intervals"]["wide3-s1"]["score"] == runs[1]["test"]["ppl"]
    (c,) = stats["comparisons"]
    expected = significance.sentence_test(nll["wide3"], nll["wide1"], significance.corpus_ppl, rng_seed=12346)
    assert c["per_sentence"]["1"]["p"] == round(expected["p"], 4) and c["per_sentence"]["1"]["delta"] < 0


def _two_systems(kind: str, a_scores, b_scores):
    """A loaded comparison of 'new' against 'old': one run per seed with its test score."""
    key = "ppl" if kind == "lm" else "bleu"
    runs = [{"system": s, "label": s.upper(), "seed": k + 1, "test": {key: x}}
            for s, xs in (("new", a_scores), ("old", b_scores)) for k, x in enumerate(xs)]
    return {"family": "toy", "kind": kind, "systems": runs}


def test_the_claim_verdict_is_the_t_interval_of_the_paired_seeds_at_the_claims_level():
    """The interval, p and word of a claim from its runs' seed scores, against scipy's t-test."""
    from scipy import stats

    a, b = [30.0, 31.0, 32.5], [29.0, 30.0, 30.5]
    c = _two_systems("translation", a, b)
    for level in (0.05, 0.025):
        v = verdicts.claim_verdict(c, verdicts.Tested(None, "new", "old", 1.2, False, None, 30.0), level)
        d = [x - y for x, y in zip(a, b)]
        ref = stats.ttest_1samp(d, 0.0).confidence_interval(1 - level)
        assert v["ci"] == pytest.approx((ref.low, ref.high)) and v["p"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
        assert v["delta"] == pytest.approx(sum(d) / 3) and v["better_in"] == 3 and v["seeds"] == 3
        assert v["paper_other"] == pytest.approx(1.2 / 30.0 * sum(b) / 3)  # relative BLEU at our reference mean
        assert v["word"] == verdicts.decide(ref.low, ref.high, 1.2, v["mde"])[0]
    # lower perplexity is better: the gain is the other system's score minus ours
    lm = _two_systems("lm", [30.0, 30.5, 31.0], [32.0, 32.4, 33.1])
    v = verdicts.claim_verdict(lm, verdicts.Tested(None, "new", "old", -5.0, True, None, 100.0))
    assert v["paper"] == pytest.approx(-0.05 * (32.0 + 32.4 + 33.1) / 3) and v["paper_other"] == pytest.approx(-5.0)
    assert v["word"] == verdicts.HOLDS and v["ci"][1] < 0
    assert verdicts.claim_verdict(lm, verdicts.Tested(None, "old", "new", -5.0, True, None))["word"] == \
        verdicts.CONTRADICTED
    one = verdicts.claim_verdict(_two_systems("lm", [30.0], [32.0]),
                                 verdicts.Tested(None, "new", "old", -5.0, True, None))
    assert one["word"] == verdicts.ONE_SEED and one["ci"] is None
    with pytest.raises(ValueError, match="toy: no run of nobody"):
        verdicts.claim_verdict(c, verdicts.Tested(None, "new", "nobody", 1.0, False, None))


def test_a_verdict_file_gives_fields_summary_and_analysis(tmp_path):
    path = tmp_path / "verdict.md"
    path.write_text("**Claim:** A beats B\n**Paper:** +1.0 BLEU\n**Tested:** a > b (paper +1.0); probe_x: a > c "
                    "(paper −5.9 %; slice reading)\n**Also tested:** a > c (paper none)\n**Chosen on dev:** nothing\n"
                    "**To settle it:** more seeds\n\n**Holds.** Short.\nSecond line.\n\n## Analysis\n\n"
                    "*Why.* See [mc_rnn.md](mc_rnn.md), [web](https://x.org/) and [here](#anchor).\n")
    v = repro_page.read_verdict(str(path))
    assert v.fields == {"claim": "A beats B", "paper": "+1.0 BLEU", "also": "a > c (paper none)", "dev": "nothing",
                        "tested": "a > b (paper +1.0); probe_x: a > c (paper −5.9 %; slice reading)",
                        "settle": "more seeds"}
    assert v.summary == "**Holds.** Short.\nSecond line."
    assert v.analysis.startswith("## Analysis\n\n*Why.*")
    with pytest.raises(ValueError, match="names 'probe_x', which has no published comparison"):
        verdicts.tested_items(v, str(path))
    (tmp_path / "probe_x").mkdir()
    (tmp_path / "probe_x" / "comparison.json").write_text("{}")
    assert verdicts.tested_items(v, str(path)) == [verdicts.Tested(None, "a", "b", 1.0, False, None),
                                                   verdicts.Tested("probe_x", "a", "c", -5.9, True, "slice reading")]
    assert verdicts.tested_items(v, str(path), "also") == [verdicts.Tested(None, "a", "c", None, False, None)]
    # the appendix lives one folder down: relative links are rebased, others kept
    assert repro_page._rebase_links(v.analysis).endswith(
        "See [mc_rnn.md](../mc_rnn.md), [web](https://x.org/) and [here](#anchor).")
    for bad in ("a beats b", "a > b"):  # no paper effect: every tested claim names the paper's
        with pytest.raises(ValueError, match=f"verdict.md: \\*\\*Tested:\\*\\* '{bad}' is not"):
            verdicts.tested_items(v._replace(fields={"tested": bad}), str(path))
    assert repro_page.read_verdict(str(tmp_path / "missing.md")) == repro_page.Verdict({}, "", "")


def test_every_committed_verdict_states_the_words_its_tests_give():
    """The prose cannot claim more than the statistics: each verdict's bold opening names the word
    computed for every claim it tests, and each family's verdict tests at least one."""
    import re

    for folder in sorted(p.parent for p in RESULTS.glob("*/comparison.json")):
        path = folder / "verdict.md"
        verdict = repro_page.read_verdict(str(path))
        assert {"claim", "paper", "tested", "dev", "settle"} <= set(verdict.fields), path
        opening = re.match(r"\*\*(.+?)\*\*", verdict.summary, re.S).group(1).lower().replace("\n", " ")
        items = verdicts.tested_items(verdict, str(path))
        assert items, path
        for item, v in zip(items, verdicts.family_verdicts(str(folder), items, repro_page.load_family)):
            word = verdicts.shown_word(v["word"], v["margin"], "ppl" if v["unit"] == "ppl" else "BLEU")
            assert word.lower() in opening, (path, item, word, opening)
        assert len(verdict.summary.splitlines()) <= 8, f"{path}: the summary is a few lines; the rest is analysis"


def _figures(folder: Path) -> list:
    """Every figure a family's prose may quote: each number in its committed JSON (statistics, run
    scores, dev perplexities, parameters in millions, means of dev perplexity over the first k seeds),
    and each tested claim's paper effect, paper test and relative change."""
    import glob
    import statistics as st

    out = []

    def walk(x):
        if isinstance(x, bool):
            return
        if isinstance(x, (int, float)):
            out.append(float(x))
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in glob.glob(str(folder / "**" / "*.json"), recursive=True):
        data = json.loads(Path(path).read_text())
        if path.endswith("comparison.json"):
            walk(data.get("statistics"))
        else:
            walk(data.get("test"))
            out += [data.get("dev_ppl") or 0.0, data.get("params", 0) / 1e6, data.get("dropout") or 0.0]
    for comp in [folder, *sorted(p.parent for p in folder.glob("*/comparison.json"))]:
        runs = {}
        for p in comp.glob("*-s*.json"):
            r = json.loads(p.read_text())
            runs.setdefault(r["system"], {})[r["seed"]] = r.get("dev_ppl")
        for seeds in runs.values():
            ks = sorted(seeds)
            out += [st.mean(seeds[k] for k in ks[:n]) for n in range(1, len(ks) + 1) if None not in seeds.values()]
    verdict = repro_page.read_verdict(str(folder / "verdict.md"))
    claims = verdicts.tested_items(verdict, str(folder / "verdict.md"))
    rows = list(zip(claims, verdicts.family_verdicts(str(folder), claims, repro_page.load_family)))
    for field in ("also", "controls"):
        for item in verdicts.tested_items(verdict, str(folder / "verdict.md"), field):
            c = repro_page.load_family(str(folder / item.variant) if item.variant else str(folder))
            rows.append((item, verdicts.claim_verdict(c, item)))
    for item, v in rows:
        out += [x for x in (item.paper, v["paper"], v["paper_other"], v["paper_p"], v["mde"], v["margin"], v["p"])
                if x is not None]
        out += list(v["ci"] or ()) + [100 * (1 - v["level"])]
        if v["ci"] is not None:
            out += [v["delta"], 100 * v["delta"] / v["ref_mean"]]
    return out


def test_every_number_in_a_verdict_summary_is_in_the_committed_json():
    """No sentence can outlive its numbers: every decimal in a verdict's summary and in its
    "Chosen on dev" is, at the precision shown, a figure of the family's committed JSON (or its
    claims' paper effects and paper tests)."""
    import re

    for folder in sorted(p.parent for p in RESULTS.glob("*/comparison.json")):
        verdict = repro_page.read_verdict(str(folder / "verdict.md"))
        figures = _figures(folder)
        for text in (verdict.summary, verdict.fields.get("dev", "")):
            for m in re.finditer(r"(?<![\w.])[−+-]?(\d+\.\d+)", text):
                shown = m.group(1)
                digits = len(shown.split(".")[1])
                assert any(round(abs(x), digits) == float(shown) for x in figures), \
                    f"{folder.name}/verdict.md quotes {shown} (…{text[max(0, m.start() - 60):m.end() + 20]}…), " \
                    "which no committed figure gives"


def test_every_statistic_quoted_in_prose_is_in_the_committed_json():
    """No sentence can outlive its numbers: every p-value, interval, t, gap and score that a verdict
    (its analysis and "To settle it" too) or a family page's Results section quotes is a figure of
    that kind in the family's committed files (the convention: fairseq_local_repro.quoted_figures)."""
    from fairseq_local_repro import quoted_figures

    stale = []
    for folder in sorted(p.parent for p in RESULTS.glob("*/comparison.json")):
        figures = quoted_figures.committed_figures(folder)
        texts = quoted_figures.checked_texts(folder)
        assert f"docs/{folder.name}.md" in texts, folder.name  # every family page has its Results section
        for name, text in texts.items():
            stale += [f"{name}: {kind} {shown} (…{' '.join(text[max(0, at - 60):at + 30].split())}…)"
                      for kind, shown, at in quoted_figures.stale_figures(text, figures)]
    assert not stale, "figures no committed file gives:\n" + "\n".join(stale)


@pytest.mark.parametrize("old,new,kind,shown", [
    ("Holm 1.000 over", "Holm 0.93 over", "p", "0.93"),  # DWL − jieba's Holm value at an earlier stage
    ("interval −0.81 to +1.97", "interval −1.47 to +2.65", "interval", "−1.47 to +2.65"),  # over four seeds
    ("Holm 0.23; two-level", "Holm 0.27; two-level", "p", "0.27"),
    ("by 0.46 BLEU", "by 0.45 BLEU", "score", "0.45"),
    ("SWL vs jieba +1.38", "SWL vs jieba +1.36", "gap", "+1.36"),
])
def test_the_prose_check_fails_on_a_planted_stale_figure(old, new, kind, shown):
    from fairseq_local_repro import quoted_figures

    folder = RESULTS / "lattice"
    text = quoted_figures.checked_texts(folder)["lattice/verdict.md"]
    figures = quoted_figures.committed_figures(folder)
    assert old in text and quoted_figures.stale_figures(text, figures) == []
    bad = quoted_figures.stale_figures(text.replace(old, new, 1), figures)
    assert [(k, s) for k, s, _ in bad] == [(kind, shown)], bad


def test_the_claims_table_has_one_row_per_claim_with_its_word_and_the_controls_outside_it():
    page = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    rows = page.split("\n".join(repro_page.CLAIMS_HEAD) + "\n")[1].split("\n\n")[0].splitlines()
    assert len(rows) == sum(len(verdicts.tested_items(repro_page.read_verdict(str(p)), str(p)))
                            for p in RESULTS.glob("*/verdict.md"))
    words = sorted(verdicts.WORDS, key=len, reverse=True)
    for row in rows:
        cells = row.split(" | ")
        assert " at " in cells[4] and "%" in cells[4], row  # the interval says the level it was decided on
        assert any(cells[-1].startswith(f"**{w.replace('±m', '±')}") for w in words), row
    controls = page.split("\n".join(repro_page.ROWS_HEAD) + "\n")[1].split("\n\n")[0].splitlines()
    assert any("fconv_lm" in r for r in controls) and not any("fconv_lm" in r for r in rows)
    for word in verdicts.WORDS:  # the words are defined once, on the page
        assert page.count(f"* **{word}**: ") == 1
    assert len(page.splitlines()) <= 350


def test_every_link_of_the_generated_pages_resolves(tmp_path):
    """The results page, its appendices (one folder down, so a verdict's links are rebased) and the
    family pages link to files and anchors that exist."""
    import re
    import shutil

    shutil.copytree(RESULTS, tmp_path / "results" / "reproduce")
    page = Path(repro_page.write_page(str(tmp_path)))
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)}
    pages = [page, *sorted((tmp_path / "results").glob("*.md"))]
    assert len(pages) == 1 + len(list(RESULTS.glob("*/comparison.json")))
    for path in pages:
        for link in re.findall(r"\]\(([^)]+)\)", path.read_text(encoding="utf-8")):
            if link.startswith(("http://", "https://")):
                continue
            target, _, anchor = link.partition("#")
            resolved = (path.parent / target).resolve() if target else path
            # a generated file, or a page of the repository's docs outside the generated tree
            assert resolved.exists() or (REPO / "docs" / resolved.relative_to(tmp_path)).exists(), (path.name, link)
            if anchor and resolved == page:
                assert anchor in anchors, (path.name, link)


def _clean_runs(folder: Path) -> set:
    """The runs published in ``folder`` on the clean split (their split records the dropped pairs)."""
    return {p.stem for p in folder.glob("*-s*.json")
            if "test_dropped" in (json.loads(p.read_text()).get("split") or {})}


def test_the_still_to_run_list_is_the_registry_less_the_published_runs():
    """docs/results.md lists, for every registered comparison (Family.planned), exactly the runs not
    yet published on the clean split, with the one command that trains them; every registered system
    without a published clean-split run is among them."""
    import re

    from fairseq_local_repro.families import FAMILIES

    page = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    todo = page[page.index("\n## Still to run\n"):]
    pending = {}
    for fam in FAMILIES.values():
        for runset in fam.planned:
            names = [s.name for s in fam.systems if not runset.systems or s.name in runset.systems or s.baseline]
            done = _clean_runs(RESULTS / fam.name / runset.variant)
            missing = [(n, [k for k in range(1, runset.seeds + 1) if f"{n}-s{k}" not in done]) for n in names]
            missing = [(n, k) for n, k in missing if k]
            heading = f"### `{fam.name}/{runset.variant}`"
            if not missing:
                assert heading not in todo
                continue
            entry = todo.split(heading + "\n")[1].split("\n### ")[0]
            listed = entry.split("Still to run (")[1].split("\n")[0]
            assert listed.startswith(f"{sum(len(k) for _, k in missing)} run")
            for n, seeds in missing:
                label = fam.system(n).label
                seeds_text = (f"seeds {seeds[0]}-{seeds[-1]}" if len(seeds) > 1 and seeds == list(
                    range(seeds[0], seeds[-1] + 1)) else ("seed " if len(seeds) == 1 else "seeds ")
                    + ", ".join(map(str, seeds)))
                assert f"{label}, {seeds_text}" in listed, (heading, label)
                pending.setdefault(fam.name, set()).add(n)
            assert f"```bash\n{runset.command(fam.name)}\n```" in entry
            assert re.search(r"<!-- doc-test: parse \(.+\) -->\n```bash\n" + re.escape(runset.command(fam.name)), entry)
    # with nothing left the section stays (the page's promise that no row is still running) and says so
    assert ("No registered run is missing: every comparison registered" in todo) == (not pending), todo[:300]
    for fam in FAMILIES.values():
        clean = {r.rsplit("-s", 1)[0] for d in [RESULTS / fam.name, *(RESULTS / fam.name).glob("*/")]
                 for r in _clean_runs(d)}
        for s in fam.systems:
            assert s.name in clean or s.name in pending.get(fam.name, ()), (fam.name, s.name)
    # the new baselines of the registry are planned, and on the list until every planned run is published
    new = {"mc_rnn": {"baseline_deep", "baseline_large"},
           "dpn_s2s": {"wider_cnn", "deeper_cnn", "wider_san", "deeper_san", "m5"}}
    for fam_name, names in new.items():
        fam = FAMILIES[fam_name]
        for n in names:
            runsets = [r for r in fam.planned if not r.systems or n in r.systems]
            assert runsets, (fam_name, n)
            complete = all(f"{n}-s{k}" in _clean_runs(RESULTS / fam_name / r.variant)
                           for r in runsets for k in range(1, r.seeds + 1))
            assert complete or n in pending.get(fam_name, ()), (fam_name, n)


def test_a_published_clean_run_leaves_the_still_to_run_list(tmp_path):
    """The list is computed from the published files: a run published on the clean split leaves it;
    one published before the overlap check stays (its command trains it again)."""
    import shutil

    from fairseq_local_repro.families import FAMILIES

    shutil.copytree(RESULTS, tmp_path / "results" / "reproduce")
    root = tmp_path / "results" / "reproduce"
    fam = FAMILIES["mc_rnn"]
    runset = next(r for r in fam.planned if r.variant == "clean_split")
    folder = root / "mc_rnn" / "clean_split"
    folder.mkdir(exist_ok=True)  # other clean runs may be published already
    before = repro_page.missing_runs(str(root), fam, runset)
    if not before:  # every clean run is published: take one back out of the copy
        next(folder.glob("baseline_deep-s*.json")).unlink()
        before = repro_page.missing_runs(str(root), fam, runset)
    system, seeds = before[-1]
    seed = seeds[-1]
    run = json.loads((RESULTS / "mc_rnn" / "baseline-s1.json").read_text())
    (folder / f"{system}-s{seed}.json").write_text(json.dumps(run))  # the old split: still to run
    assert repro_page.missing_runs(str(root), fam, runset) == before
    run["split"] = {"train": 10000, "dev": 997, "test": 1012, "dev_dropped": 3, "test_dropped": 2}
    (folder / f"{system}-s{seed}.json").write_text(json.dumps(run))
    after = repro_page.missing_runs(str(root), fam, runset)
    expected = [(s, [x for x in ss if not (s == system and x == seed)]) for s, ss in before]
    assert after == [(s, ss) for s, ss in expected if ss]
    page = Path(repro_page.write_page(str(tmp_path))).read_text(encoding="utf-8")
    left = sum(len(ss) for _, ss in after)
    assert left == sum(len(ss) for _, ss in before) - 1
    if left:
        assert f"**Still to run:** `clean_split` ({left} run" in page
    else:
        assert "`clean_split` (" not in page.split("## mc_rnn", 1)[1].split("\n## ", 1)[0]


def test_the_still_to_run_estimate_is_the_median_published_wall_time(tmp_path):
    """Each pending command's core-hours: per missing run, the median wall time of the same system's
    published runs in its family (probe variants left out; the family's median for a system with
    none); the page states the sum per command and in all."""
    import statistics

    from fairseq_local_repro.families import FAMILIES

    fam = FAMILIES["parallel_cells"]
    root = tmp_path / "results" / "reproduce"
    folder = root / fam.name
    (folder / "some_variant").mkdir(parents=True)
    (folder / "probe_cut").mkdir()
    run = json.loads((RESULTS / "parallel_cells" / "wide1-s1.json").read_text())
    for path, wall in [(folder / "wide1-s1.json", 3600.0), (folder / "wide1-s2.json", 7200.0),
                       (folder / "some_variant" / "wide1-s1.json", 1800.0), (folder / "wide3-s1.json", 900.0),
                       (folder / "probe_cut" / "wide1-s1.json", 36.0), (folder / "probe_cut" / "wide5-s1.json", 36.0)]:
        (path).write_text(json.dumps({**run, "wall_s": wall}))
    hours = repro_page.run_hours(str(root), fam)
    assert hours["wide1"] == 1.0  # median of 1, 2 and 0.5 hours; the probe's 0.01 left out
    assert hours["wide3"] == 0.25
    family_median = statistics.median([1.0, 2.0, 0.5, 0.25])
    assert hours["wide5"] == family_median and hours["wide3_full"] == family_median
    runset = next(r for r in fam.planned if r.variant == "clean_split")
    missing = repro_page.missing_runs(str(root), fam, runset)
    expected = sum(hours[s] * len(seeds) for s, seeds in missing)
    page = "\n".join(repro_page.pending_section(str(root), []))
    runs = sum(len(seeds) for _, seeds in missing)
    shown = f"{expected:.1f}" if expected < 10 else f"{expected:.0f}"  # one decimal below ten hours
    assert f"Still to run ({runs} runs, about {shown} core-hours)" in page
    assert repro_page.run_hours(str(tmp_path / "nothing"), fam) == {}


def test_the_still_to_run_section_says_so_when_every_planned_run_is_published(tmp_path, monkeypatch):
    """A registry whose planned runs are all published, with every family implemented, gives a
    section that says nothing is left, rather than no section (a link to it would land nowhere)."""
    from fairseq_local_repro import families

    monkeypatch.setattr(families, "FAMILIES", {})
    monkeypatch.setattr(families, "PLANNED", {})
    section = "\n".join(repro_page.pending_section(str(tmp_path), []))
    assert section.startswith("## Still to run\n\nNo registered run is missing: every comparison registered")
    monkeypatch.setattr(families, "PLANNED", {"newfam": "Some paper"})
    section = "\n".join(repro_page.pending_section(str(tmp_path), []))
    assert "No registered run is missing" not in section and "### `newfam`" in section


def test_the_layer_and_head_entropy_table_shows_each_flow_layer_and_head():
    """DPN-S2S's normalised alignment entropies (the analysis JSON) on the page: a row per flow, a
    column per decoder layer, the SAN decoder path's heads in brackets; nothing for an older JSON."""
    from fairseq_local_repro.tables import layer_head_table

    e = {"per_layer_normalised": {"cc": [0.91, 0.52], "aa": [0.8, 0.4]},
         "per_head_normalised": {"aa": [[0.7, 0.9], [0.35, 0.45]]}}
    lines = layer_head_table(e)
    assert "| flow | layer 1 | layer 2 |" in lines
    assert "| CNN -> CNN | 0.910 | 0.520 |" in lines
    assert "| SAN -> SAN | 0.800 (0.70 / 0.90) | 0.400 (0.35 / 0.45) |" in lines
    assert not any(line.startswith("| CNN -> SAN") for line in lines)  # a flow the model lacks
    assert layer_head_table({"entropy": {"cc": 1.0}}) == []


def test_bleu_by_source_length_is_recomputed_from_the_committed_files(tmp_path):
    """The MC-RNN Figure 4 table: per bucket of the family's length_buckets, each system's mean over
    seeds of the bucket's corpus BLEU equals sacrebleu on those sentences; the difference is over
    paired seeds.  Committed hypotheses of two published systems stand in for MC-RNN-3 and its baseline."""
    import gzip
    import shutil

    import numpy as np
    import sacrebleu

    from fairseq_local_repro.families import FAMILIES
    from fairseq_local_repro.tables import SRC_LEN_FILE, length_bucket_tables

    src = RESULTS / "lattice" / "clean_split"
    shutil.copy(src / "test.ref.gz", tmp_path / "test.ref.gz")
    refs = gzip.open(src / "test.ref.gz", "rt", encoding="utf-8").read().splitlines()
    lengths = np.random.default_rng(0).integers(1, 25, len(refs))
    (tmp_path / SRC_LEN_FILE).write_bytes(gzip.compress("".join(f"{n}\n" for n in lengths).encode()))
    systems, hyps = [], {}
    for stand_in, name, label in (("dwl_gating", "mc_rnn_3", "MC-RNN-3"), ("word", "baseline", "Baseline-RNN")):
        for seed in (1, 2):
            run = json.loads((src / f"{stand_in}-s{seed}.json").read_text())
            shutil.copy(src / run["outputs"]["file"], tmp_path / f"{name}-s{seed}.hyp.gz")
            hyps[name, seed] = gzip.open(src / run["outputs"]["file"], "rt", encoding="utf-8").read().splitlines()
            systems.append(dict(run, system=name, label=label, outputs=dict(run["outputs"], file=f"{name}-s{seed}.hyp.gz")))
    comparison = {"family": "mc_rnn", "baseline": "baseline", "systems": systems}
    lines = length_bucket_tables(comparison, str(tmp_path))
    edges = FAMILIES["mc_rnn"].length_buckets
    rows = {line.split(" | ")[0].lstrip("| "): line.strip("| ").split(" | ") for line in lines if line.startswith("| ")}
    assert "| source words | sentences | MC-RNN-3 (2 seeds) | Baseline-RNN (2 seeds) | MC-RNN-3 - Baseline-RNN |" in lines
    for name, (lo, hi) in zip([f"1-{edges[0]}", f"{edges[0] + 1}-{edges[1]}", f">{edges[-1]}"],
                              [(1, edges[0]), (edges[0] + 1, edges[1]), (edges[-1] + 1, 99)]):
        ids = [i for i, n in enumerate(lengths) if lo <= n <= hi]
        bleu = {k: sacrebleu.corpus_bleu([h[i] for i in ids], [[refs[i] for i in ids]], lowercase=True).score
                for k, h in hyps.items()}
        row = rows[name]
        assert int(row[1]) == len(ids)
        assert float(row[2]) == pytest.approx((bleu["mc_rnn_3", 1] + bleu["mc_rnn_3", 2]) / 2, abs=0.006)
        assert float(row[3]) == pytest.approx((bleu["baseline", 1] + bleu["baseline", 2]) / 2, abs=0.006)
        d = [bleu["mc_rnn_3", k] - bleu["baseline", k] for k in (1, 2)]
        assert row[4] == f"{np.mean(d):+.2f} ({sum(x > 0 for x in d)} of 2)"
    # source lengths of another test set: an error naming the file
    (tmp_path / SRC_LEN_FILE).write_bytes(gzip.compress(b"5\n" * 3))
    with pytest.raises(ValueError, match=f"{SRC_LEN_FILE}: 3 source lengths for the {len(refs)} test sentences"):
        length_bucket_tables(comparison, str(tmp_path))
    # a family without buckets, or a folder without source lengths: no table
    assert length_bucket_tables(dict(comparison, family="lattice"), str(tmp_path)) == []
    (tmp_path / SRC_LEN_FILE).unlink()
    assert length_bucket_tables(comparison, str(tmp_path)) == []
