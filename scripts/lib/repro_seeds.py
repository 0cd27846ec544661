"""Across-seed summary of a reproduction comparison run with ``--seeds N``.

One training run per system says little when two systems are within a BLEU point: a second seed of
the same system moves BLEU by about as much.  Following Clark et al. (2011), "Better hypothesis
testing for statistical machine translation: controlling for optimizer instability" (MultEval),
each system is summarised over its seeds by the mean and sample standard deviation of its test
score, and two systems are compared by a paired bootstrap over test sentences that scores each
resample with the *average over seeds* of the corpus score, so both the test-set sample and the
optimizer's randomness are in the comparison:

    score_s(b)  = 1/|seeds_s| * sum_{k in seeds_s} corpus_score(stats_{s,k}[idx_b])
    d(b)        = |score_s(b) - score_base(b)|,   observed d0 = |mean_s - mean_base|
    p           = (#{b : d(b) - mean_b d(b) > d0} + 1) / (B + 1)

which is sacrebleu's paired-bootstrap p-value (``--paired-bs``) with the seed average in place of
the single run.  The same resamples ``idx_b`` serve every system and seed.

A run's sufficient statistics are per test sentence: sacrebleu's BLEU counts for translation (the
13a tokenizer, case-insensitive, as ``scripts/score.py`` scores) and ``(nll, tokens)`` for language
models (corpus perplexity ``exp(sum nll / sum tokens)``).
"""
import json
from itertools import combinations
from typing import Callable, Dict, List, Tuple

import numpy as np

Key = Tuple[str, int]  # (system, seed)


def bleu_statistics(hyp_paths: Dict[Key, str], ref_path: str) -> Tuple[Dict[Key, np.ndarray], Callable]:
    """Per-sentence BLEU statistics of every run's hypotheses, and the corpus score of each row of
    summed statistics."""
    import sacrebleu

    metric = sacrebleu.metrics.BLEU(lowercase=True, tokenize="13a")
    refs = [_lines(ref_path)]
    stats = {}
    for key, path in hyp_paths.items():
        hyps = _lines(path)
        if len(hyps) != len(refs[0]):
            raise ValueError(f"{path}: {len(hyps)} hypotheses for {len(refs[0])} references in {ref_path}")
        stats[key] = np.asarray(metric._extract_corpus_statistics(hyps, refs), dtype=np.float64)
    return stats, lambda totals: np.array([metric._compute_score_from_stats(list(t)).score for t in totals])


def perplexity_statistics(nll_paths: Dict[Key, str]) -> Tuple[Dict[Key, np.ndarray], Callable]:
    """Per-sentence ``(nll, tokens)`` of every run (``sentence_nll.json``), and the corpus
    perplexity of each row of summed statistics."""
    stats = {}
    for key, path in nll_paths.items():
        with open(path, encoding="utf-8") as f:
            stats[key] = np.asarray(json.load(f), dtype=np.float64)
    return stats, lambda totals: np.exp(totals[:, 0] / totals[:, 1])


def seed_summary(stats: Dict[Key, np.ndarray], score: Callable, baseline: str, higher_is_better: bool,
                 n_samples: int = 1000, rng_seed: int = 12345) -> dict:
    """Mean and standard deviation over seeds of every system with two or more seeds, how many
    seeds beat the baseline's run of the same seed, and the pooled paired-bootstrap p-value of
    every pair of systems (module docstring).  Returns ``{}`` when fewer than two systems have two
    or more seeds."""
    seeds_of: Dict[str, List[int]] = {}
    for system, seed in sorted(stats):
        seeds_of.setdefault(system, []).append(seed)
    systems = [s for s, seeds in seeds_of.items() if len(seeds) >= 2]
    if baseline not in systems or len(systems) < 2:
        return {}
    n_sent = {len(a) for a in stats.values()}
    if len(n_sent) != 1:
        raise ValueError(f"the runs scored different numbers of test sentences: {sorted(n_sent)}")
    n = n_sent.pop()
    idx = np.random.default_rng(rng_seed).choice(n, size=(n_samples, n), replace=True)
    observed, boot = {}, {}
    for s in systems:
        observed[s] = [float(score(stats[(s, k)].sum(0)[None])[0]) for k in seeds_of[s]]
        boot[s] = np.mean([score(stats[(s, k)][idx].sum(1)) for k in seeds_of[s]], axis=0)

    def p_value(a: str, b: str) -> float:
        d0 = abs(float(np.mean(observed[a])) - float(np.mean(observed[b])))
        diffs = np.abs(boot[a] - boot[b])
        return round(float((np.sum(diffs - diffs.mean() > d0) + 1) / (n_samples + 1)), 4)

    better = (lambda x, y: x > y) if higher_is_better else (lambda x, y: x < y)
    base_by_seed = dict(zip(seeds_of[baseline], observed[baseline]))
    rows = {}
    for s in systems:
        mean = float(np.mean(observed[s]))
        shared = [k for k in seeds_of[s] if k in base_by_seed]
        scores = dict(zip(seeds_of[s], observed[s]))
        rows[s] = {"seeds": seeds_of[s], "scores": [round(x, 2) for x in observed[s]], "mean": round(mean, 2),
                   "sd": round(float(np.std(observed[s], ddof=1)), 2)}
        if s != baseline:
            rows[s].update(delta_vs_baseline=round(mean - float(np.mean(observed[baseline])), 2),
                           better_than_baseline_in=sum(better(scores[k], base_by_seed[k]) for k in shared),
                           paired_seeds=len(shared), pooled_p_vs_baseline=p_value(s, baseline))
    pairs = {f"{a}|{b}": p_value(a, b) for a, b in combinations(systems, 2)}
    return {"method": "mean and sample sd over seeds; paired bootstrap over test sentences of the seed-averaged "
                      f"corpus score (Clark et al. 2011), {n_samples} resamples",
            "n_samples": n_samples, "systems": rows, "pooled_p": pairs}


def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()
