"""scripts/lib/repro_page.py: what results.md shows of a comparison run in several commands or
with several seeds."""
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "lib"))
import repro_page  # noqa: E402


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
    section = "\n".join(repro_page.family_section(comparison, "results/reproduce/lattice"))
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
    png = tmp_path / "curves.png"
    png.write_bytes(b"png")
    page = Path(repro_page.publish(variant, str(png), str(docs), "dropout_0.4")).read_text()
    # the family's own runs are untouched; the variant sits in its own folder
    assert repro_page.load_family(str(fam))["systems"] == headline["systems"]
    assert sorted(p.name for p in (fam / "dropout_0.4").iterdir()) == ["baseline-s1.json", "comparison.json",
                                                                       "curves.png"]
    lines = page.splitlines()
    start = lines.index("### Other settings of this comparison")
    section = lines[start:lines.index("**Verdict.** VERDICT TEXT")]
    assert lines.index("## mc_rnn (cpu scale)") < start
    assert ("**`dropout_0.4`** (this run overrides --dropout 0.4; "
            "[JSON](results/reproduce/mc_rnn/dropout_0.4/)):") in section
    assert command in section
    # no outputs were published with these runs: the interval is the recorded one, marked †
    assert f"| Baseline-RNN | {base['params'] / 1e6:.2f}M | 1 | {base['updates']:,} | early stop | 19.50 " \
           "| 31.25 ± 1.30† | (baseline) |" in section
    # the headline table still shows the seed-1 baseline's own score
    assert f"| {base['test']['bleu']:.2f} | ± {base['test']['ci95']:.2f}† | (baseline) |" in page


def test_the_committed_page_is_the_one_the_committed_json_gives(tmp_path):
    import shutil

    shutil.copytree(REPO / "docs" / "results" / "reproduce", tmp_path / "results" / "reproduce")
    page = Path(repro_page.write_page(str(tmp_path))).read_text(encoding="utf-8")
    assert page == (REPO / "docs" / "results.md").read_text(encoding="utf-8"), \
        "docs/results.md is stale: run python scripts/reproduce.py --page-only"


def test_publish_commits_outputs_lists_queued_runs_and_refuses_another_test_set(tmp_path):
    """Publishing with the run folders: each run's hypotheses and the references go beside its JSON
    (gzip'd, hashed), the statistics come from them, runs still queued are named on the page until
    published, and a run scored on other references cannot join the folder."""
    import pytest
    from repro_run import ReproError

    from fairseq_local_repro import compare

    base = json.loads((REPO / "docs" / "results" / "reproduce" / "mc_rnn" / "baseline-s1.json").read_text())
    refs = ["a man rides a horse .", "two dogs play in the snow .", "a girl is reading a book ."]
    hyps = {"baseline": ["a man rides a horse .", "two dogs play .", "a girl reads ."],
            "mc_rnn_3": ["a man is riding a horse .", "two dogs play in the snow .", "a girl is reading a book ."]}
    root = tmp_path / "out"
    runs = []
    for name, lines in hyps.items():
        (root / f"{name}-s1" / "test").mkdir(parents=True)
        (root / f"{name}-s1" / "test" / "hyp.txt").write_text("".join(x + "\n" for x in lines))
        bleu = compare.corpus_bleu(compare.bleu_statistics(lines, refs).sum(0))[0]
        label = {"baseline": "Baseline-RNN", "mc_rnn_3": "MC-RNN-3"}[name]
        runs.append({**base, "system": name, "label": label, "test": {**base["test"], "bleu": round(float(bleu), 2)}})
    ref = tmp_path / "test.en"
    ref.write_text("".join(x + "\n" for x in refs))
    comparison = {**{k: v for k, v in repro_page.load_family(str(REPO / "docs" / "results" / "reproduce" / "mc_rnn"))
                     .items() if k not in ("statistics", "systems")}, "systems": runs}
    png = tmp_path / "curves.png"
    png.write_bytes(b"png")
    docs = tmp_path / "docs"
    repro_page.publish(comparison, str(png), str(docs), "probe", run_root=str(root), test_ref=str(ref),
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
        repro_page.publish({**comparison, "systems": runs[1:]}, str(png), str(docs), "probe",
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
    png = tmp_path / "curves.png"
    png.write_bytes(b"png")
    docs = tmp_path / "docs"
    comparison = {**{k: v for k, v in family.items() if k not in ("statistics", "systems")}, "systems": runs}
    repro_page.publish(comparison, str(png), str(docs), "probe", run_root=str(root),
                       test_ref=str(root / "wide1-s1" / "test" / "sentence_nll.json"))
    dest = docs / "results" / "reproduce" / "parallel_cells" / "probe"
    assert json.loads(compare.read_gz(str(dest / "wide3-s1.nll.gz"))) == nll["wide3"]
    assert not (dest / compare.REF_FILE).exists()  # the sentence scores are self-contained
    stats = json.loads((dest / "comparison.json").read_text())["statistics"]
    assert stats["run_intervals"]["wide3-s1"]["score"] == runs[1]["test"]["ppl"]
    (c,) = stats["comparisons"]
    expected = compare.sentence_test(nll["wide3"], nll["wide1"], compare.corpus_ppl, rng_seed=12346)
    assert c["per_sentence"]["1"]["p"] == round(expected["p"], 4) and c["per_sentence"]["1"]["delta"] < 0
