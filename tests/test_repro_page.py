"""scripts/lib/repro_page.py: what results.md shows of a comparison run in several commands or
with several seeds."""
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
    variant = {**{k: v for k, v in headline.items() if k not in ("seed_summary", "systems")}, "command": command,
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
    assert f"| Baseline-RNN | {base['params'] / 1e6:.2f}M | 1 | {base['updates']:,} | early stop | 19.50 " \
           "| 31.25 ± 1.30 | (baseline) |" in section
    # the headline table still shows the seed-1 baseline's own score
    assert f"| {base['test']['bleu']:.2f} | ± {base['test']['ci95']:.2f} | (baseline) |" in page


def test_the_committed_page_is_the_one_the_committed_json_gives(tmp_path):
    import shutil

    shutil.copytree(REPO / "docs" / "results" / "reproduce", tmp_path / "results" / "reproduce")
    page = Path(repro_page.write_page(str(tmp_path))).read_text(encoding="utf-8")
    assert page == (REPO / "docs" / "results.md").read_text(encoding="utf-8"), \
        "docs/results.md is stale: run python scripts/reproduce.py --page-only"
