"""fairseq_local_repro/compare.py: the harness's significance tests hold their level on simulated
null data and find a real difference; the vectorised corpus BLEU equals sacrebleu's; Holm's
correction; the recompute command reproduces the committed statistics."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairseq_local_core.file_io import write_gz
from fairseq_local_repro import compare
from fairseq_local_repro import significance

REPO = Path(__file__).resolve().parents[1]


def mean_score(totals):
    """An additive corpus score (the mean of per-sentence scores): rows of summed (score, 1)."""
    t = np.atleast_2d(totals)
    return t[:, 0] / t[:, 1]


def within_sampling_error(rate, level, trials):
    """|rate - level| within 3 binomial standard errors."""
    return abs(rate - level) <= 3 * np.sqrt(level * (1 - level) / trials)


def bleu_like(n, rng, quality, ref_len):
    """Per-sentence BLEU statistics of a simulated system: each n-gram of the hypothesis matches
    with probability quality ** order."""
    hyp = np.maximum(ref_len + rng.integers(-2, 3, n), 1)
    total = np.stack([np.maximum(hyp - j, 0) for j in range(4)], 1)
    correct = rng.binomial(total, quality[:, None] ** np.arange(1, 5)[None])
    return np.column_stack([hyp, ref_len, correct, total]).astype(np.float64)


def test_corpus_bleu_equals_sacrebleu_on_random_statistics():
    import sacrebleu

    metric = sacrebleu.metrics.BLEU(lowercase=True, tokenize="13a")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(400):
        total = np.sort(rng.integers(0, 30, 4))[::-1]
        if rng.random() < 0.2:
            total[rng.integers(1, 4):] = 0  # no n-grams of the higher orders
        correct = [int(rng.integers(0, t + 1)) if rng.random() < 0.7 else 0 for t in total]  # zeros: smoothing
        rows.append([int(rng.integers(0, 40)), int(rng.integers(1, 40)), *correct, *map(int, total)])
    expected = [metric._compute_score_from_stats(list(r)).score for r in rows]
    assert significance.corpus_bleu(np.array(rows)) == pytest.approx(expected, abs=1e-9)


def test_corpus_bleu_of_sentence_statistics_is_sacrebleus_corpus_bleu():
    import sacrebleu

    hyps = ["The cat sat on the mat .", "a dog runs", "completely wrong", "Two men are playing chess outside ."]
    refs = ["the cat sat on a mat .", "A dog is running", "nothing in common here", "two men play chess outside ."]
    stats = significance.bleu_statistics(hyps, refs)
    assert stats.shape == (4, 10)
    expected = sacrebleu.corpus_bleu(hyps, [refs], lowercase=True, tokenize="13a").score
    assert significance.corpus_bleu(stats.sum(0))[0] == pytest.approx(expected, abs=1e-9)
    with pytest.raises(ValueError, match="3 hypotheses for 4 references"):
        significance.bleu_statistics(hyps[:3], refs)


def test_randomization_test_holds_its_level_on_null_bleu_data():
    """Two systems whose outputs of each sentence come from the same distribution: the paired
    randomization test of corpus BLEU rejects at 5 % in 5 % of trials (within sampling error)."""
    rng = np.random.default_rng(1)
    trials, rejected = 300, 0
    for trial in range(trials):
        n = 80
        quality, ref_len = rng.uniform(0.3, 0.9, n), rng.integers(3, 15, n)
        a, b = bleu_like(n, rng, quality, ref_len), bleu_like(n, rng, quality, ref_len)
        rejected += significance.sentence_test(a, b, significance.corpus_bleu, n_resamples=200, rng_seed=trial)["p"] <= 0.05
    assert within_sampling_error(rejected / trials, 0.05, trials), rejected / trials


def test_randomization_test_finds_a_real_difference_and_floors_its_p():
    rng = np.random.default_rng(2)
    n = 200
    quality, ref_len = rng.uniform(0.3, 0.9, n), rng.integers(3, 15, n)
    better = bleu_like(n, rng, np.minimum(quality + 0.15, 1.0), ref_len)
    worse = bleu_like(n, rng, quality, ref_len)
    res = significance.sentence_test(better, worse, significance.corpus_bleu, n_resamples=1000)
    assert significance.N_RESAMPLES >= 10_000  # the published tests; 1,000 here keeps the test fast
    expected = significance.corpus_bleu(better.sum(0))[0] - significance.corpus_bleu(worse.sum(0))[0]
    assert res["delta"] == pytest.approx(expected) and res["delta"] > 5
    assert res["p"] == pytest.approx(1 / 1001)
    assert significance.format_p(res["p"], 1000) == "≤ 0.001"
    assert res["ci95"][0] < res["delta"] < res["ci95"][1] and res["ci95"][0] > 0
    with pytest.raises(ValueError, match="different test sets"):
        significance.sentence_test(better[:10], worse, significance.corpus_bleu)


def test_seed_t_test_holds_its_level_and_matches_the_formula():
    from scipy import stats

    rng = np.random.default_rng(3)
    trials = 2000
    rejected = sum(significance.seed_t_test(dict(enumerate(rng.normal(0, 1, 3))), dict(enumerate(rng.normal(0, 1, 3))))["p"]
                   <= 0.05 for _ in range(trials))
    assert within_sampling_error(rejected / trials, 0.05, trials), rejected / trials
    a, b = {1: 30.57, 2: 30.32, 3: 31.74}, {1: 28.93, 2: 31.01, 3: 29.95}
    d = np.array([a[k] - b[k] for k in (1, 2, 3)])
    t = d.mean() / (d.std(ddof=1) / np.sqrt(3))
    res = significance.seed_t_test(a, b)
    assert res["t"] == pytest.approx(t) and res["df"] == 2
    assert res["p"] == pytest.approx(2 * stats.t.sf(abs(t), 2))
    assert res["ci95"][1] - res["delta"] == pytest.approx(stats.t.ppf(0.975, 2) * d.std(ddof=1) / np.sqrt(3))
    assert significance.seed_t_test({1: 1.0}, {1: 2.0, 2: 3.0}) is None


def test_seeds_for_power_gives_the_power_it_promises():
    """At the returned number of seeds the seed-level t-test, run on simulated paired differences
    with the given sd and mean, rejects in about 80 % of trials; three seeds fewer fall short."""
    from scipy import stats

    rng = np.random.default_rng(5)
    sd, delta, trials = 1.29, 0.9, 4000
    n = significance.seeds_for_power(sd, delta)
    assert n == 19  # (1.96 + 0.84)^2 (sd / delta)^2 = 16.1, plus the t distribution's heavier tails

    def rejections(k):  # the paired t-test of seed_t_test (its formula is checked above), vectorised
        d = rng.normal(delta, sd, (trials, k))
        t = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(k))
        return float(np.mean(2 * stats.t.sf(np.abs(t), k - 1) <= 0.05))

    assert rejections(n) >= 0.8 - 2.6 * np.sqrt(0.8 * 0.2 / trials)
    assert rejections(n - 3) < 0.8
    assert significance.seeds_for_power(sd, -delta) == n
    with pytest.raises(ValueError):
        significance.seeds_for_power(0.0, 1.0)


def test_two_level_test_holds_its_level_when_seeds_and_sentences_both_vary():
    """Null data with sentence difficulty shared by the systems, a system-by-sentence effect, a
    per-run shift and per-run sentence noise: the two-level test over three seeds per system rejects
    at 5 % within sampling error of 5 %."""
    rng = np.random.default_rng(1)
    trials, rejected = 300, 0
    for trial in range(trials):
        n = 100
        difficulty = rng.normal(0, 1, n)

        def system():
            own = rng.normal(0, 0.5, n)
            return [np.column_stack([difficulty + own + rng.normal(0, 0.3) + rng.normal(0, 1, n), np.ones(n)])
                    for _ in range(3)]

        rejected += significance.two_level_test(system(), system(), mean_score, n_resamples=200, rng_seed=trial)["p"] <= 0.05
    assert within_sampling_error(rejected / trials, 0.05, trials), rejected / trials


def test_two_level_test_counts_seed_variance_that_a_sentence_test_misses():
    """One system's runs shifted by seed noise only: the per-sentence test of one pair of runs calls
    the shift significant, the two-level test does not; a consistent shift is found by both."""
    rng = np.random.default_rng(4)
    n = 400
    difficulty = rng.normal(0, 1, n)
    shifts_a, shifts_b = [1.0, -0.8, 0.2], [-0.9, 0.7, 0.1]
    runs = lambda shifts, gain: [np.column_stack([difficulty + gain + s + rng.normal(0, 0.2, n), np.ones(n)])  # noqa
                                 for s in shifts]
    a, b = runs(shifts_a, 0.0), runs(shifts_b, 0.0)
    assert significance.sentence_test(a[0], b[0], mean_score)["p"] <= 0.01
    assert significance.two_level_test(a, b, mean_score)["p"] > 0.3
    a, b = runs([0.01, -0.02, 0.0], 0.5), runs([0.0, 0.02, -0.01], 0.0)
    res = significance.two_level_test(a, b, mean_score)
    assert res["p"] < 0.001 and res["ci95"][0] < 0.5 < res["ci95"][1]
    assert significance.two_level_test(a[:1], b, mean_score) is None


def test_holm_adjustment():
    assert significance.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert significance.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert significance.holm([]) == []


def test_format_p():
    assert significance.format_p(1 / 1001, 1000) == "≤ 0.001"
    assert significance.format_p(0.0004) == "< 0.001"
    assert significance.format_p(0.0123) == "0.012"
    assert significance.format_p(None) == "–"


def test_p_clause_reads_as_a_sentence():
    assert significance.p_clause(0.0123) == "p = 0.012"
    assert significance.p_clause(0.0001) == "p < 0.001"
    assert significance.p_clause(1 / 1001, 1000) == "p ≤ 0.001"


def test_published_statistics_follow_from_the_run_json():
    """The committed lattice comparison: its seed-level p of DWL vs the word level is the paired
    t-test of the per-seed BLEU in the runs' JSON, and its Holm values the adjustment of the
    unrounded p-values over the family's comparisons."""
    folder = REPO / "docs" / "results" / "reproduce" / "lattice"
    comparison, runs = compare.load_folder(str(folder))
    bleu = {(r["system"], r["seed"]): r["test"]["bleu"] for r in runs}
    stats = comparison["statistics"]
    assert stats["n_resamples"] >= 10_000
    unrounded = [significance.seed_t_test({k: bleu[(c["system"], k)] for k in (1, 2, 3)},
                                     {k: bleu[(c["reference"], k)] for k in (1, 2, 3)})["p"]
                 for c in stats["comparisons"]]
    dwl = next(i for i, c in enumerate(stats["comparisons"])
               if c["system"] == "dwl_gating" and c["reference"] == "word")
    assert stats["comparisons"][dwl]["seed_level"]["p"] == round(unrounded[dwl], 4)
    assert [c["seed_level"]["p_holm"] for c in stats["comparisons"]] == [round(x, 4) for x in significance.holm(unrounded)]


def test_holm_runs_on_unrounded_p_values():
    """analyse stores each Holm value as the adjustment of the unrounded p-values, rounded once."""
    scores = {"base": [30.0, 31.0, 29.0], "a": [30.9, 31.7, 29.6], "b": [30.35, 31.5, 29.1]}
    runs = [{"system": s, "seed": k, "test": {"bleu": v}}
            for s, vals in scores.items() for k, v in zip((1, 2, 3), vals)]
    stats = compare.analyse({"baseline": "base"}, runs, lambda r: None)
    seeds = lambda s: dict(zip((1, 2, 3), scores[s]))  # noqa: E731
    exact = significance.holm([significance.seed_t_test(seeds(s), seeds("base"))["p"] for s in ("a", "b")])
    assert [c["system"] for c in stats["comparisons"]] == ["a", "b"]
    assert [c["seed_level"]["p_holm"] for c in stats["comparisons"]] == [round(x, 4) for x in exact]


def test_bootstrap_weights_draw_n_items_per_resample_uniformly():
    w = significance.bootstrap_weights(50, 4000, np.random.default_rng(0))
    assert w.shape == (4000, 50) and (w.sum(1) == 50).all()
    assert w.mean(0) == pytest.approx(np.ones(50), abs=0.05)  # each item drawn once per resample on average
    assert w.var(0).mean() == pytest.approx(50 * (1 / 50) * (49 / 50), rel=0.05)  # multinomial variance


def test_paper_test_is_the_one_sided_t_test_against_the_papers_effect():
    """MC-RNN-3 - Baseline-RNN on the clean split: -0.96 BLEU over three seeds with the 95 % interval
    [-2.06, +0.14]; the paper's +1.2 lies above it, one-sided p about 0.007.  The paper's value on
    the interval's edge gives p 0.025, and a lower-is-better score flips the direction."""
    from scipy import stats

    folder = REPO / "docs" / "results" / "reproduce" / "mc_rnn" / "clean_split"
    comparison, _ = compare.load_folder(str(folder))
    c = next(c for c in comparison["statistics"]["comparisons"] if c["reference"] == "baseline")
    s = c["seed_level"]
    assert s["ci95"] == pytest.approx([-2.06, 0.14], abs=0.01)
    p = significance.paper_test(s["delta"], s["sd"], len(s["seeds"]), 1.2)
    assert p == pytest.approx(0.007, abs=0.001)
    half = stats.t.ppf(0.975, 2) * 0.5 / math.sqrt(3)
    assert significance.paper_test(1.0, 0.5, 3, 1.0 + half) == pytest.approx(0.025)
    assert significance.paper_test(-1.0, 0.5, 3, -1.0 - half, higher_is_better=False) == pytest.approx(0.025)
    assert significance.paper_test(2.0, 0.5, 3, 1.0) > 0.5  # ours above the paper's: no evidence it is smaller


def test_recompute_command_reproduces_the_committed_statistics(tmp_path):
    """The documented command recomputes every published folder's statistics from the committed
    files and finds them equal; a changed per-seed score in a run's JSON is reported."""
    import shutil

    root = tmp_path / "reproduce"
    shutil.copytree(REPO / "docs" / "results" / "reproduce", root)
    cmd = [sys.executable, "-m", "fairseq_local_repro.compare", "--recompute", str(root)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "every p-value and interval equals the committed one" in p.stdout
    assert "lattice: " in p.stdout and "seed-level p" in p.stdout
    small = tmp_path / "small"  # one folder without outputs is enough for the changed score
    shutil.copytree(REPO / "docs" / "results" / "reproduce" / "lattice", small / "lattice",
                    ignore=shutil.ignore_patterns("clean_split"))
    run = small / "lattice" / "word-s2.json"
    r = json.loads(run.read_text())
    r["test"]["bleu"] = 25.0
    run.write_text(json.dumps(r))
    p = subprocess.run(cmd[:-1] + [str(small)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 1 and "lattice: DIFFERS: " in p.stdout and "differ from the committed" in p.stderr


def test_committed_outputs_are_checked_against_their_hashes(tmp_path):
    """A published folder with per-sentence outputs: the statistics come from the gzip'd
    hypotheses and references, and a hypothesis file that does not match its run's hash is refused."""
    refs = ["a man rides a horse .", "two dogs play in the snow .", "a girl is reading a book ."]
    hyps = {"base": ["a man rides a horse .", "two dogs play in snow .", "a girl reads ."],
            "new": ["a man is riding a horse .", "two dogs play in the snow .", "a girl is reading a book ."]}
    ref_text = "".join(x + "\n" for x in refs)
    write_gz(str(tmp_path / compare.REF_FILE), ref_text)
    for name, lines in hyps.items():
        text = "".join(x + "\n" for x in lines)
        write_gz(str(tmp_path / f"{name}-s1.hyp.gz"), text)
        bleu = significance.corpus_bleu(significance.bleu_statistics(lines, refs).sum(0))[0]
        (tmp_path / f"{name}-s1.json").write_text(json.dumps({
            "system": name, "seed": 1, "test": {"bleu": round(float(bleu), 2)}, "test_ref_sha256":
            compare.sha256_text(ref_text), "outputs": {"file": f"{name}-s1.hyp.gz",
                                                        "sha256": compare.sha256_text(text)}}))
    (tmp_path / "comparison.json").write_text(json.dumps({"baseline": "base", "kind": "translation"}))
    stats = compare.analyse_folder(str(tmp_path))
    (c,) = stats["comparisons"]
    assert stats["runs_with_outputs"] == 2 and c["seed_level"] is None and c["two_level"] is None
    expected = significance.sentence_test(significance.bleu_statistics(hyps["new"], refs),
                                     significance.bleu_statistics(hyps["base"], refs), significance.corpus_bleu, rng_seed=12346)
    assert c["per_sentence"]["1"]["p"] == pytest.approx(expected["p"], abs=1e-4)
    assert c["per_sentence"]["1"]["delta"] == pytest.approx(expected["delta"], abs=1e-4)
    write_gz(str(tmp_path / "new-s1.hyp.gz"), "tampered\n" * 3)
    with pytest.raises(ValueError, match="new-s1.hyp.gz: its sha256 differs"):
        compare.analyse_folder(str(tmp_path))
