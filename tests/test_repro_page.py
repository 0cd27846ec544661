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
