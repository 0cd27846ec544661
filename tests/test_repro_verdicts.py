"""fairseq_local_repro.verdicts: each verdict word at the boundaries of its definition, Holm's levels
over a family's claims, and the minimum detectable effect against a simulation."""
import numpy as np
import pytest

from fairseq_local_repro import verdicts
from fairseq_local_repro.verdicts import (CONTRADICTED, HOLDS, INCONCLUSIVE, NO_EFFECT, SIGN_OPEN, SMALLER, decide,
                                          holm_levels, minimum_detectable_effect)

EPS = 1e-9


@pytest.mark.parametrize("lo,hi,paper,mde,word", [
    # contradicted: the whole interval below zero; an upper end on zero holds zero
    (-2.0, -EPS, 1.0, 0.5, CONTRADICTED),
    (-2.0, 0.0, 1.0, 3.0, INCONCLUSIVE),
    # holds / smaller than the paper's: the whole interval above zero, the paper's effect in or above it
    (EPS, 2.0, 1.0, 5.0, HOLDS),
    (0.5, 1.0, 1.0, 0.4, HOLDS),  # an upper end on the paper's effect holds it
    (0.5, 1.0 - EPS, 1.0, 0.4, SMALLER),
    (1.5, 2.0, 1.0, 0.4, HOLDS),  # above the paper's effect: a larger gain still holds the claim
    (0.0, 0.4, 1.0, 0.4, NO_EFFECT),  # a lower end on zero holds zero
    # inconclusive: zero and the paper's effect both in the interval, or the MDE above the paper's effect
    (-0.5, 1.0, 1.0, 0.4, INCONCLUSIVE),
    (-0.2, 0.3, 1.0, 1.0 + EPS, INCONCLUSIVE),
    # no effect larger than ±m: the interval in ±m with m at most half the paper's effect
    (-0.2, 0.3, 1.0, 1.0, NO_EFFECT),  # an MDE equal to the paper's effect does not exceed it
    (-0.5, 0.3, 1.0, 0.9, NO_EFFECT),
    (-0.5 - EPS, 0.3, 1.0, 0.9, SIGN_OPEN),
    (-0.1, 0.5 + EPS, 1.0, 0.9, SIGN_OPEN),
    # smaller than the paper's, sign open: zero in, the paper's effect out, too wide for the margin
    (-2.0, 0.9, 1.0, 0.9, SIGN_OPEN),
])
def test_each_word_at_the_boundaries_of_its_definition(lo, hi, paper, mde, word):
    got, margin = decide(lo, hi, paper, mde)
    assert got == word
    assert (margin is not None) == (word == NO_EFFECT)
    if margin is not None:
        assert margin == max(-lo, hi) <= verdicts.EQUIVALENCE_SHARE * paper


def test_the_word_is_scale_free_and_refuses_a_paper_effect_against_the_claim():
    for scale in (0.01, 1.0, 100.0):
        assert decide(-0.2 * scale, 0.3 * scale, scale, 0.9 * scale) == (NO_EFFECT, 0.3 * scale)
    with pytest.raises(ValueError, match="must be positive"):
        decide(-1.0, 1.0, -0.5, 0.1)
    with pytest.raises(ValueError, match="ends swapped"):
        decide(1.0, -1.0, 0.5, 0.1)


def test_the_shown_word_states_the_margin_rounded_up():
    assert verdicts.shown_word(NO_EFFECT, 0.6812, "BLEU") == "no effect larger than ±0.69 BLEU"
    assert verdicts.shown_word(NO_EFFECT, 0.68, "BLEU") == "no effect larger than ±0.68 BLEU"
    assert verdicts.shown_word(HOLDS, None, "BLEU") == HOLDS


def test_holm_levels_reject_exactly_what_holms_adjusted_p_rejects():
    """A claim's interval at its level excludes zero (p < level) exactly when its Holm-adjusted p is
    below the family-wise 5 %, for random families, ties and boundaries included."""
    from fairseq_local_repro.significance import holm

    rng = np.random.default_rng(0)
    families = [list(rng.uniform(0, 0.1, size=m) ** rng.uniform(0.5, 2)) for m in range(1, 7) for _ in range(200)]
    families += [[0.01, 0.01, 0.2], [0.025, 0.04], [0.0249, 0.05], [0.05], [0.001, 0.03, 0.03]]
    for ps in families:
        levels = holm_levels(ps)
        assert [p < lv for p, lv in zip(ps, levels)] == [p < 0.05 for p in holm(ps)], ps
    assert holm_levels([0.001, 0.2, 0.01]) == [0.05 / 3, 0.05, 0.05 / 2]


def test_the_minimum_detectable_effect_is_found_with_the_stated_power():
    """At the MDE the two-sided paired t-test rejects in 80 % of simulated experiments; it agrees with
    significance.seeds_for_power, which needs more seeds for a smaller effect."""
    from scipy import stats

    from fairseq_local_repro.significance import seeds_for_power

    rng = np.random.default_rng(1)
    for k, sd, level in ((3, 0.5, 0.05), (5, 1.2, 0.0125)):
        mde = minimum_detectable_effect(sd, k, level)
        d = rng.normal(mde, sd, size=(40_000, k))
        t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(k))
        assert np.mean(np.abs(t) > stats.t.ppf(1 - level / 2, k - 1)) == pytest.approx(0.8, abs=0.01)
        assert seeds_for_power(sd, mde * 1.01, alpha=level) <= k < seeds_for_power(sd, mde * 0.95, alpha=level)
    assert minimum_detectable_effect(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="two or more"):
        minimum_detectable_effect(1.0, 1)


def test_a_claim_is_named_once_in_tested(tmp_path):
    path = tmp_path / "verdict.md"
    path.write_text("**Tested:** a > b (paper +1.0); a > b (paper +1.0 of 30)\n")
    with pytest.raises(ValueError, match="names the claim a > b more than once; one primary setting per claim"):
        verdicts.tested_items(verdicts.read_verdict(str(path)), str(path))
    path.write_text("**Tested:** a > b (paper +1.0 of 30.5)\n**Controls:** a > c (paper none)\n")
    v = verdicts.read_verdict(str(path))
    assert verdicts.tested_items(v, str(path)) == [verdicts.Tested(None, "a", "b", 1.0, False, None, 30.5)]
    assert verdicts.tested_items(v, str(path), "controls") == [verdicts.Tested(None, "a", "c", None, False, None)]


def test_each_committed_claim_is_tested_at_its_holm_level_over_its_familys_claims_alone():
    """The claims table's level of a claim is Holm's over the family's Tested items (controls and
    sensitivity rows take no part), and the row prints the interval at that level."""
    from pathlib import Path

    from fairseq_local_repro import page

    root = Path(__file__).resolve().parents[1] / "docs" / "results" / "reproduce"
    text = (root.parents[1] / "results.md").read_text(encoding="utf-8")
    for folder in sorted(p.parent for p in root.glob("*/verdict.md")):
        path = str(folder / "verdict.md")
        v = verdicts.read_verdict(path)
        items = verdicts.tested_items(v, path)
        comps = [page.load_family(str(folder / i.variant) if i.variant else str(folder)) for i in items]
        levels = holm_levels([verdicts.seed_p(c, i.better, i.other) for c, i in zip(comps, items)])
        rows = verdicts.family_verdicts(str(folder), items, page.load_family)
        assert [r["level"] for r in rows] == levels, folder.name
        for r in rows:
            lo, hi = (f"{x:+.2f}".replace("-", "−") for x in r["ci"])
            assert f"[{lo}, {hi}] at {100 * (1 - r['level']):.4g} %" in text, (folder.name, r["better"], r["other"])
