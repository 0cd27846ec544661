"""fairseq_local_repro.quoted_figures: a sentence that names one comparison is checked against that
comparison's committed figures, so each planted error of the review (a flipped sign, a mirrored
interval, a wrong "Holm p < 0.001", another comparison's Holm value, an unsigned change, a random
wrong two-decimal gap) fails, while the sentence written from the committed numbers passes."""
import json
import random
from pathlib import Path

import pytest

from fairseq_local_repro import quoted_figures

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "reproduce"
NAMES = {"m9": "M9", "m5": "M5", "m1": "M1", "wide3_full": "the full-input wide 3", "wide1": "wide 1",
         "dwl_gating": "DWL", "word": "jieba"}


def _sign(x: float, digits: int = 2) -> str:
    return f"{x:+.{digits}f}".replace("-", "−")


def _comparison(folder: Path, system: str, reference: str) -> dict:
    stats = json.loads((folder / "comparison.json").read_text())["statistics"]
    return next(c for c in stats["comparisons"] if (c["system"], c["reference"]) == (system, reference))


def sentence(c: dict, holm: str = None, two_level: bool = False) -> str:
    """A sentence written from a committed comparison: its gap, seed-level interval and Holm p."""
    s = c["seed_level"]
    h = holm or (f"p {s['p_holm']:.3f}" if s["p_holm"] >= 0.001 else "p < 0.001")
    return (f"{NAMES[c['system']]} − {NAMES[c['reference']]} is {_sign(s['delta'])} "
            f"({_sign(s['ci95'][0])} to {_sign(s['ci95'][1])}, {'two-level ' if two_level else ''}Holm {h}).")


CASES = [("dpn_s2s/clean_split", "m5", "m9"), ("lattice/clean_split", "dwl_gating", "word"),
         ("parallel_cells/clean_split", "wide3_full", "wide1")]


@pytest.mark.parametrize("where,system,reference", CASES)
def test_a_sentence_written_from_its_comparison_passes(where, system, reference):
    folder = RESULTS / where.split("/")[0]
    figures = quoted_figures.committed_figures(folder)
    c = _comparison(RESULTS / where, system, reference)
    assert quoted_figures.stale_figures(sentence(c), figures) == []


def _kinds(text: str, folder: Path) -> list:
    return [k for k, _, _ in quoted_figures.stale_figures(text, quoted_figures.committed_figures(folder))]


def test_a_flipped_sign_and_a_mirrored_interval_fail():
    c = _comparison(RESULTS / "lattice" / "clean_split", "dwl_gating", "word")
    good = sentence(c)
    s = c["seed_level"]
    flipped = good.replace(f"is {_sign(s['delta'])}", f"is {_sign(-s['delta'])}")
    mirrored = good.replace(f"({_sign(s['ci95'][0])} to {_sign(s['ci95'][1])}",
                            f"({_sign(-s['ci95'][1])} to {_sign(-s['ci95'][0])}")
    assert flipped != good and mirrored != good
    assert "orientation" in _kinds(flipped, RESULTS / "lattice")
    assert "orientation" in _kinds(mirrored, RESULTS / "lattice")


def test_a_wrong_holm_below_0001_and_another_comparisons_holm_value_fail():
    folder = RESULTS / "parallel_cells" / "clean_split"
    c = _comparison(folder, "wide3_full", "wide1")
    assert c["seed_level"]["p_holm"] >= 0.001  # the planted "< 0.001" is wrong for this comparison
    assert _kinds(sentence(c, holm="p < 0.001"), RESULTS / "parallel_cells") == ["p"]
    m1 = _comparison(RESULTS / "dpn_s2s" / "clean_split", "m1", "m9")["seed_level"]["p_holm"]
    m5 = _comparison(RESULTS / "dpn_s2s" / "clean_split", "m5", "m9")
    assert f"{m1:.3f}" != f"{m5['seed_level']['p_holm']:.3f}"
    assert _kinds(sentence(m5, holm=f"p {m1:.3f}"), RESULTS / "dpn_s2s") == ["p"]
    # a p-value is checked against its own test: the seed-level Holm value written as the two-level one
    two = m5["two_level"]["p_holm"]
    assert f"{two:.3f}" != f"{m5['seed_level']['p_holm']:.3f}"
    assert _kinds(sentence(m5, two_level=True), RESULTS / "dpn_s2s") == ["p"]
    assert _kinds(sentence(m5, holm=f"p {two:.3f}", two_level=True), RESULTS / "dpn_s2s") == []


def test_an_unsigned_change_fails():
    c = _comparison(RESULTS / "dpn_s2s" / "clean_split", "m5", "m9")
    d = c["seed_level"]["delta"]
    text = f"M5 trails M9 in every seed (Δ {abs(d):.2f})."
    assert _kinds(text, RESULTS / "dpn_s2s") == ["unsigned"]
    assert _kinds(f"M5 trails M9 in every seed (Δ {_sign(d)}).", RESULTS / "dpn_s2s") == []


def test_every_random_wrong_two_decimal_gap_fails():
    """200 random two-decimal gaps near the true one, none a committed figure of this comparison:
    each fails, whichever figures other comparisons of the family have."""
    folder = RESULTS / "lattice"
    figures = quoted_figures.committed_figures(folder)
    pair = figures["pairs"][("dwl_gating", "word")]
    c = _comparison(folder / "clean_split", "dwl_gating", "word")
    good = sentence(c)
    true = f"is {_sign(c['seed_level']['delta'])}"
    legit = {round(s * x, 2) for x in pair["gap"] for s in (1, -1)}
    rng = random.Random(7)
    tried = 0
    while tried < 200:
        x = round(c["seed_level"]["delta"] + rng.uniform(-3, 3), 2)
        if x in legit:
            continue
        tried += 1
        text = good.replace(true, f"is {_sign(x)}")
        bad = quoted_figures.comparison_errors(text, figures["pairs"])  # the comparison's own check catches it
        assert [k for k, _, _ in bad] in (["gap"], ["orientation"]), (x, bad)
        assert quoted_figures.stale_figures(text, figures)
