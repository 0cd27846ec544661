"""scripts/lib/repro_seeds.py: the across-seed summary of a reproduction, against references written
from its definition (Clark et al. 2011) with sacrebleu's public corpus_bleu and plain loops."""
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "lib"))
import repro_page  # noqa: E402
import repro_seeds  # noqa: E402

sacrebleu = pytest.importorskip("sacrebleu")

REFS = ["a man rides a red bike down the street .", "two dogs play in the snow .", "a child eats an apple .",
        "people walk on the beach at sunset .", "a woman sings on a stage .", "the cat sleeps on the sofa ."]
# (system, seed) -> hypotheses: the baseline is weakest in seeds 1 and 2, "wide" beats it in every seed
HYPS = {
    ("base", 1): ["a man rides a bike .", "two dogs in snow .", "a child eats .", "people walk on a beach .",
                  "a woman sings .", "a cat sleeps ."],
    ("base", 2): ["a man on a bike down the street .", "dogs play in the snow .", "a kid eats an apple .",
                  "people on the beach .", "a woman is singing on stage .", "the cat sleeps ."],
    ("base", 3): ["a man rides a red bike .", "two dogs play in snow .", "a child eats an apple .",
                  "people walk at sunset .", "a woman sings on a stage .", "the cat is on the sofa ."],
    ("wide", 1): ["a man rides a red bike down the street .", "two dogs play in the snow .",
                  "a child eats an apple .", "people walk on the beach .", "a woman sings on a stage .",
                  "the cat sleeps on a sofa ."],
    ("wide", 2): ["a man rides a bike down the street .", "two dogs play in the snow .", "a child eats an apple .",
                  "people walk on the beach at sunset .", "a woman sings on stage .", "the cat sleeps ."],
    ("wide", 3): ["a man rides a red bike down the street .", "two dogs play in the snow .",
                  "a child eats an apple .", "people walk on the beach at sunset .", "a woman sings .",
                  "the cat sleeps on the sofa ."],
    ("solo", 1): ["a man .", "dogs .", "a child .", "people .", "a woman .", "a cat ."],
}


def corpus_bleu(hyps, idx=None):
    idx = range(len(REFS)) if idx is None else idx
    return sacrebleu.corpus_bleu([hyps[i] for i in idx], [[REFS[i] for i in idx]], lowercase=True,
                                 tokenize="13a").score


def reference_pooled_p(a, b, idx):
    """Clark et al.'s pooled bootstrap written out: each resample scores every seed's corpus BLEU
    separately with sacrebleu, averages over seeds, and sacrebleu's p-value formula compares."""
    def mean_over_seeds(system, rows=None):
        return statistics.mean(corpus_bleu(HYPS[(system, k)], rows) for k in (1, 2, 3))

    d0 = abs(mean_over_seeds(a) - mean_over_seeds(b))
    diffs = [abs(mean_over_seeds(a, rows) - mean_over_seeds(b, rows)) for rows in idx]
    centre = statistics.mean(diffs)
    return (sum(1 for d in diffs if d - centre > d0) + 1) / (len(idx) + 1)


@pytest.fixture()
def bleu_runs(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    paths = {}
    for (system, seed), hyps in HYPS.items():
        p = tmp_path / f"{system}-s{seed}.txt"
        p.write_text("\n".join(hyps) + "\n", encoding="utf-8")
        paths[(system, seed)] = str(p)
    return repro_seeds.bleu_statistics(paths, str(ref))


def test_bleu_seed_summary_matches_the_definition(bleu_runs):
    stats, score = bleu_runs
    n = 40
    summary = repro_seeds.seed_summary(stats, score, "base", higher_is_better=True, n_samples=n)
    # the single-seed system is left out; the others carry each seed's corpus BLEU, mean and sd
    assert set(summary["systems"]) == {"base", "wide"}
    for system in ("base", "wide"):
        per_seed = [corpus_bleu(HYPS[(system, k)]) for k in (1, 2, 3)]
        row = summary["systems"][system]
        assert row["seeds"] == [1, 2, 3]
        assert row["scores"] == pytest.approx(per_seed, abs=0.006)
        assert row["mean"] == pytest.approx(statistics.mean(per_seed), abs=0.006)
        assert row["sd"] == pytest.approx(statistics.stdev(per_seed), abs=0.006)
    wide, base = summary["systems"]["wide"], summary["systems"]["base"]
    assert wide["delta_vs_baseline"] == pytest.approx(wide["mean"] - base["mean"], abs=0.011)
    wins = sum(corpus_bleu(HYPS[("wide", k)]) > corpus_bleu(HYPS[("base", k)]) for k in (1, 2, 3))
    assert (wide["better_than_baseline_in"], wide["paired_seeds"]) == (wins, 3) and wins == 3
    idx = np.random.default_rng(12345).choice(len(REFS), size=(n, len(REFS)), replace=True)
    expected = reference_pooled_p("wide", "base", idx)
    assert wide["pooled_p_vs_baseline"] == pytest.approx(expected, abs=1e-4)
    assert summary["pooled_p"] == {"base|wide": wide["pooled_p_vs_baseline"]}


def test_pooled_p_averages_seeds_rather_than_pooling_their_sentences(bleu_runs):
    """The seed average of corpus BLEU is not the BLEU of the seeds' concatenated output: a summary
    that pooled the sentences would report other means."""
    stats, score = bleu_runs
    summary = repro_seeds.seed_summary(stats, score, "base", higher_is_better=True, n_samples=10)
    concatenated = sacrebleu.corpus_bleu(sum((HYPS[("wide", k)] for k in (1, 2, 3)), []), [REFS * 3],
                                         lowercase=True, tokenize="13a").score
    assert abs(summary["systems"]["wide"]["mean"] - concatenated) > 0.05


def test_perplexity_summary_counts_lower_as_better(tmp_path):
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, 12, size=30)
    nll = {}
    for seed in (1, 2):
        nll[("lstm", seed)] = tokens * (3.0 + 0.1 * seed) + rng.normal(0, 0.5, size=30)
        nll[("cnn", seed)] = tokens * (2.9 + 0.3 * seed) + rng.normal(0, 0.5, size=30)
    paths = {}
    for key, values in nll.items():
        p = tmp_path / f"{key[0]}-s{key[1]}.json"
        p.write_text(json.dumps([[float(v), int(t)] for v, t in zip(values, tokens)]), encoding="utf-8")
        paths[key] = str(p)
    stats, score = repro_seeds.perplexity_statistics(paths)
    summary = repro_seeds.seed_summary(stats, score, "lstm", higher_is_better=False, n_samples=25)
    ppl = {k: math.exp(sum(v) / sum(tokens)) for k, v in nll.items()}
    cnn = summary["systems"]["cnn"]
    assert cnn["scores"] == pytest.approx([ppl[("cnn", 1)], ppl[("cnn", 2)]], abs=0.006)
    wins = sum(ppl[("cnn", k)] < ppl[("lstm", k)] for k in (1, 2))
    assert cnn["better_than_baseline_in"] == wins
    idx = np.random.default_rng(12345).choice(30, size=(25, 30), replace=True)

    def boot(system, rows):
        return statistics.mean(math.exp(sum(nll[(system, k)][rows]) / sum(tokens[rows])) for k in (1, 2))

    diffs = [abs(boot("cnn", rows) - boot("lstm", rows)) for rows in idx]
    d0 = abs(statistics.mean([ppl[("cnn", 1)], ppl[("cnn", 2)]]) - statistics.mean([ppl[("lstm", 1)],
                                                                                     ppl[("lstm", 2)]]))
    expected = (sum(1 for d in diffs if d - statistics.mean(diffs) > d0) + 1) / 26
    assert cnn["pooled_p_vs_baseline"] == pytest.approx(expected, abs=1e-4)


def test_no_summary_without_two_seeded_systems(bleu_runs):
    stats, score = bleu_runs
    only_base = {k: v for k, v in stats.items() if k[0] != "wide"}
    assert repro_seeds.seed_summary(only_base, score, "base", higher_is_better=True, n_samples=5) == {}
    no_base = {k: v for k, v in stats.items() if k[0] != "base"}
    assert repro_seeds.seed_summary(no_base, score, "base", higher_is_better=True, n_samples=5) == {}


def test_mismatched_test_sets_are_refused(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    short = tmp_path / "short.txt"
    short.write_text("a man .\n", encoding="utf-8")
    with pytest.raises(ValueError, match="short.txt: 1 hypotheses for 6 references"):
        repro_seeds.bleu_statistics({("base", 1): str(short)}, str(ref))


def test_seed_table_renders_the_summary(bleu_runs):
    stats, score = bleu_runs
    summary = repro_seeds.seed_summary(stats, score, "base", higher_is_better=True, n_samples=10)
    comparison = {"kind": "translation", "baseline": "base", "system_order": ["wide", "base"],
                  "systems": [{"system": "wide", "label": "Wide"}, {"system": "base", "label": "Base"}],
                  "seed_summary": summary}
    text = "\n".join(repro_page.seed_table(comparison))
    w, b = summary["systems"]["wide"], summary["systems"]["base"]
    assert text.index("| Wide |") < text.index("| Base |")
    assert (f"| Wide | 3 | {' / '.join(f'{x:.2f}' for x in w['scores'])} | {w['mean']:.2f} ± {w['sd']:.2f} "
            f"| {w['delta_vs_baseline']:+.2f} | 3 of 3 | {w['pooled_p_vs_baseline']:.3f} |") in text
    assert f"| Base | 3 | {' / '.join(f'{x:.2f}' for x in b['scores'])} |" in text and "(baseline)" in text
    comparison["seed_summary"] = {}
    assert repro_page.seed_table(comparison) == []


def test_the_harness_summarises_the_runs_it_trained(tmp_path):
    """repro_run.compare's seed summary reads each run's ``<system>-s<seed>/test/hyp.txt`` and the
    family's baseline (here MC-RNN's Baseline-RNN)."""
    import repro_families
    import repro_run

    family = repro_families.get_family("mc_rnn")
    base, other = family.baseline.name, next(s.name for s in family.systems if not s.baseline)
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    results = []
    for (system, seed), hyps in HYPS.items():
        if system == "solo":
            continue
        name = base if system == "base" else other
        (tmp_path / f"{name}-s{seed}" / "test").mkdir(parents=True)
        (tmp_path / f"{name}-s{seed}" / "test" / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        results.append({"system": name, "seed": seed})
    data = repro_run.Data(bin="", src="de", tgt="en", test_ref=str(ref), description="", sizes={})
    summary = repro_run.summarise_seeds({"family": family, "out": str(tmp_path), "data": data}, results)
    assert summary["systems"][other]["scores"] == pytest.approx([corpus_bleu(HYPS[("wide", k)]) for k in (1, 2, 3)],
                                                                abs=0.006)
    assert summary["systems"][other]["better_than_baseline_in"] == 3
    assert "pooled_p_vs_baseline" not in summary["systems"][base]

