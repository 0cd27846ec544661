"""Significance tests of the reproduction harness, and the command that recomputes them.

    python -m fairseq_local_repro.compare --recompute docs/results/reproduce [--write]

recomputes, from the committed files alone (each run's JSON and, where committed, its per-sentence
outputs: ``<system>-s<seed>.hyp.gz`` with the family's ``test.ref.gz``, or ``<system>-s<seed>.nll.gz``),
every p-value and interval that ``docs/results.md`` shows, and checks them against the
``statistics`` of each ``comparison.json`` (exit status 1 and one line per difference when they
disagree; ``--write`` stores the recomputed ones instead).

Three tests, each two-sided, each at the level it states (``tests/test_repro_compare.py``
simulates null data and checks every test's false-positive rate against its level):

* **Per-sentence test** (one seed of each system, the same test sentences): paired approximate
  randomization (Noreen 1989; Riezler & Maxwell 2005).  Under the null hypothesis the two systems'
  outputs of a sentence are exchangeable, so each resample swaps them in every sentence with
  probability 1/2 and rescores both corpora:

      d0 = score(A) - score(B),   d_r = score(A_r) - score(B_r),
      p  = (1 + #{r : |d_r| >= |d0|}) / (R + 1)

  (R = 10,000; the smallest p is 1/(R+1), shown as "<= 0.0001").  The 95% interval of d is the
  percentile interval of a paired bootstrap over sentences (the same resamples for both systems).
  Corpus scores are recomputed from per-sentence sufficient statistics: sacrebleu's BLEU counts
  (13a, case-insensitive, as ``scripts/score.py`` scores) or ``(nll, tokens)`` for perplexity
  ``exp(sum nll / sum tokens)``.
* **Seed-level test** (every system with two or more seeds paired with the baseline's runs of the
  same seeds): the paired t-test over seeds of the runs' corpus scores,
  ``t = mean(d_k) / (sd(d_k) / sqrt(K))`` with K - 1 degrees of freedom, and its 95% interval.
  It is the test the verdicts follow: the optimizer's randomness, which a per-sentence test of one
  run never sees, is its whole variance.
* **Two-level test** (seeds and sentences, where every run's outputs are committed): the variance
  of the difference of seed-averaged scores ``D = mean_k A_k - mean_j B_j`` split into a
  between-seed part, the runs' sample variances ``s_A^2 / K_A + s_B^2 / K_B``, and a between-sentence
  part from a paired bootstrap over sentences of every run: the covariance of *different* seeds'
  resampled scores, ``C_AA' + C_BB' - 2 C_AB`` (a run's own sentence-level noise is already in its
  seed variance, so a covariance of a run with itself would count it twice).  ``t = D / sqrt(V)``
  with Welch-Satterthwaite degrees of freedom from the seed part.  A percentile bootstrap over two
  or three seeds cannot hold its level (three seeds give at most ten distinct resamples per
  system), hence the t reference.

Holm's step-down correction (Holm 1979) adjusts each test's unrounded p-values across a family's
comparisons (per seed for the per-sentence test); the JSON stores both rounded to 4 decimals.

**Paper test** (:func:`paper_test`): whether the paper's effect size lies in the seed-level 95%
interval.  The one-sided paired t-test of H0 "our true difference is at least the paper's, in the
claim's direction" against "it is smaller": ``t = (mean(d_k) - paper) / (sd(d_k) / sqrt(K))``,
``p = P(T_{K-1} <= t)`` (signs flipped for a lower-is-better score).  ``p < 0.025`` is the same
statement as "the paper's effect lies outside the 95% interval, above it".
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_local_core.file_io import read_json, write_json

N_RESAMPLES = 10_000
RNG_SEED = 12345
PROG = "python -m fairseq_local_repro.compare"

# ---- corpus scores from per-sentence sufficient statistics ---------------------------------------


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str], metric=None) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics (n, 10): hypothesis length, reference length, the
    matching 1-4-gram counts and the hypothesis 1-4-gram counts, as sacrebleu counts them for
    ``BLEU(lowercase=True, tokenize="13a")`` (``metric``: such a BLEU built with ``references=[refs]``,
    whose cached reference n-grams serve every run scored on them)."""
    import sacrebleu

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    if metric is None:
        metric = sacrebleu.metrics.BLEU(lowercase=True, tokenize="13a")
        return np.asarray(metric._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.float64)
    return np.asarray(metric._extract_corpus_statistics(list(hyps), None), dtype=np.float64)


def corpus_bleu(totals: np.ndarray) -> np.ndarray:
    """Corpus BLEU of each row of summed statistics (R, 10): sacrebleu's ``compute_bleu`` with its
    default 'exp' smoothing (Chen & Cherry 2014, method 3; mteval-v13a), vectorised over rows:
    BLEU = BP * exp(1/4 sum_n log p_n), BP = exp(1 - r/c) if c < r, p_n = 100 m_n / t_n, a zero
    m_n replaced by 100 / (2^z t_n) for the z-th zero; orders after one with t_n = 0 count as 0."""
    t = np.atleast_2d(np.asarray(totals, dtype=np.float64))
    sys_len, ref_len, correct, total = t[:, 0], t[:, 1], t[:, 2:6], t[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(sys_len < ref_len, np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        alive = np.cumprod(total > 0, axis=1).astype(bool)  # sacrebleu stops at the first order with no n-grams
        zero = (correct == 0) & alive
        smooth = 2.0 ** np.cumsum(zero, axis=1)
        prec = np.where(zero, 100.0 / (smooth * total), 100.0 * correct / total)
        prec = np.where(alive, prec, 0.0)
        logs = np.where(prec > 0, np.log(np.where(prec > 0, prec, 1.0)), -9999999999.0)
    score = bp * np.exp(logs.sum(1) / 4)
    return np.where(correct.sum(1) > 0, score, 0.0)


def corpus_ppl(totals: np.ndarray) -> np.ndarray:
    """Corpus perplexity of each row of summed ``(nll in nats, tokens)``: exp(sum nll / sum tokens)."""
    t = np.atleast_2d(np.asarray(totals, dtype=np.float64))
    return np.exp(t[:, 0] / t[:, 1])


def metric_of(kind: str) -> Tuple[Callable[[np.ndarray], np.ndarray], bool]:
    """The corpus score of a family's kind and whether higher is better."""
    return (corpus_ppl, False) if kind == "lm" else (corpus_bleu, True)


# ---- the tests ----------------------------------------------------------------------------------


def p_floor(n_resamples: int = N_RESAMPLES) -> float:
    return 1.0 / (n_resamples + 1)


def bootstrap_weights(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(R, n) multiplicities of a bootstrap over n items: row r counts how often each item was drawn
    in the r-th resample of n draws with replacement (the same distribution as a multinomial with
    equal cell probabilities, drawn as indices and counted, which is much faster for large R)."""
    idx = rng.integers(0, n, size=(n_resamples, n))
    idx += (np.arange(n_resamples) * n)[:, None]
    return np.bincount(idx.ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(np.float64)


def sentence_test(a: np.ndarray, b: np.ndarray, score: Callable, n_resamples: int = N_RESAMPLES,
                  rng_seed: int = RNG_SEED) -> dict:
    """Paired approximate randomization of ``score(A) - score(B)`` over the test sentences (rows of
    the statistics ``a`` and ``b``), with the paired-bootstrap 95% interval of the difference."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"the two runs scored different test sets ({a.shape[0]} and {b.shape[0]} sentences)")
    rng = np.random.default_rng(rng_seed)
    n = a.shape[0]
    d0 = float(score(a.sum(0))[0] - score(b.sum(0))[0])
    swap = rng.integers(0, 2, size=(n_resamples, n)).astype(np.float64)
    moved = swap @ (b - a)
    del swap
    d = score(a.sum(0) + moved) - score(b.sum(0) - moved)
    p = (1 + int(np.sum(np.abs(d) >= abs(d0) - 1e-9))) / (n_resamples + 1)
    weights = bootstrap_weights(n, n_resamples, rng)
    boot = score(weights @ a) - score(weights @ b)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return {"delta": d0, "ci95": [float(lo), float(hi)], "p": p, "n_resamples": n_resamples}


def score_interval(a: np.ndarray, score: Callable, n_resamples: int = N_RESAMPLES, rng_seed: int = RNG_SEED,
                   weights: Optional[np.ndarray] = None) -> float:
    """Half-width of the 95% percentile bootstrap interval of one run's corpus score (``weights``:
    bootstrap multiplicities to reuse, as :func:`bootstrap_weights` draws them from ``rng_seed``)."""
    a = np.asarray(a, dtype=np.float64)
    if weights is None:
        weights = bootstrap_weights(a.shape[0], n_resamples, np.random.default_rng(rng_seed))
    lo, hi = np.percentile(score(weights @ a), [2.5, 97.5])
    return float((hi - lo) / 2)


def seed_t_test(a: Dict[int, float], b: Dict[int, float]) -> Optional[dict]:
    """Paired t-test over the seeds both systems ran (scipy.stats.ttest_rel), with the 95% interval
    of the mean difference; None with fewer than two shared seeds."""
    from scipy import stats

    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    d = np.array([a[k] - b[k] for k in seeds], dtype=np.float64)
    k = len(d)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(stats.t.ppf(0.975, k - 1) * sd / math.sqrt(k))
    if sd == 0.0:
        p, t = (1.0 if mean == 0.0 else 0.0), (0.0 if mean == 0.0 else math.copysign(math.inf, mean))
    else:
        res = stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds])
        p, t = float(res.pvalue), float(res.statistic)
    return {"seeds": seeds, "delta": mean, "ci95": [mean - half, mean + half], "t": t, "df": k - 1, "p": p,
            "sd": sd}


def paper_test(delta: float, sd: float, k: int, paper: float, higher_is_better: bool = True) -> float:
    """One-sided p of the paper test (module docstring): how likely a mean paired difference as far
    below the paper's ``paper`` (in the claim's direction: above it for a lower-is-better score) as
    ``delta`` is, over ``k`` seeds whose differences have standard deviation ``sd``, if the true
    difference were the paper's."""
    from scipy import stats

    if k < 2:
        raise ValueError("paper_test needs two or more paired seeds")
    sign = 1.0 if higher_is_better else -1.0
    gap = sign * (delta - paper)  # < 0: ours falls short of the paper's effect
    if sd == 0.0:
        return 0.0 if gap < 0 else 1.0
    return float(stats.t.cdf(gap / (sd / math.sqrt(k)), k - 1))


def seeds_for_power(sd: float, delta: float, alpha: float = 0.05, power: float = 0.8, most: int = 10_000) -> int:
    """The fewest paired seeds n (at least 2) for which the two-sided paired t-test of
    :func:`seed_t_test` at level ``alpha`` finds a true mean difference ``delta`` with probability
    ``power``, when the seed-to-seed differences have standard deviation ``sd``: the power
    P(|T| > t_{1-alpha/2, n-1}) with T noncentral t, n - 1 degrees of freedom, noncentrality
    delta / (sd / sqrt(n)) (scipy.stats.nct)."""
    from scipy import stats

    if sd <= 0 or delta == 0:
        raise ValueError("seeds_for_power needs sd > 0 and delta != 0")
    for n in range(2, most + 1):
        df, nc = n - 1, abs(delta) / (sd / math.sqrt(n))
        t = stats.t.ppf(1 - alpha / 2, df)
        if stats.nct.sf(t, df, nc) + stats.nct.cdf(-t, df, nc) >= power:
            return n
    raise ValueError(f"seeds_for_power: more than {most} seeds")


def two_level_test(a: List[np.ndarray], b: List[np.ndarray], score: Callable, n_resamples: int = N_RESAMPLES,
                   rng_seed: int = RNG_SEED, weights: Optional[np.ndarray] = None) -> Optional[dict]:
    """The two-level test of the module docstring over the runs ``a`` (one statistics array per
    seed of system A) and ``b``; None unless both have two or more runs (``weights``: bootstrap
    multiplicities to reuse, as :func:`bootstrap_weights` draws them from ``rng_seed``)."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    n = a[0].shape[0]
    if any(x.shape != a[0].shape for x in list(a) + list(b)):
        raise ValueError("the runs scored different test sets")
    sa = np.array([score(x.sum(0))[0] for x in a])
    sb = np.array([score(x.sum(0))[0] for x in b])
    d0 = float(sa.mean() - sb.mean())
    if weights is None:
        weights = bootstrap_weights(n, n_resamples, np.random.default_rng(rng_seed))
    ra = np.stack([score(weights @ x) for x in a], 1)  # R x K_A resampled scores
    rb = np.stack([score(weights @ x) for x in b], 1)
    cov = np.cov(np.concatenate([ra, rb], 1), rowvar=False)
    ka, kb = len(a), len(b)
    caa, cbb, cab = cov[:ka, :ka], cov[ka:, ka:], cov[:ka, ka:]
    off = lambda c, k: (c.sum() - np.trace(c)) / (k * (k - 1))  # noqa: E731  (different seeds only)
    v_sent = max(0.0, float(off(caa, ka) + off(cbb, kb) - 2 * cab.mean()))
    va, vb = float(sa.var(ddof=1)) / ka, float(sb.var(ddof=1)) / kb
    v = v_sent + va + vb
    if v == 0.0:
        return {"delta": d0, "ci95": [d0, d0], "t": 0.0, "df": None, "p": 1.0 if d0 == 0.0 else 0.0,
                "var_seeds": 0.0, "var_sentences": 0.0}
    seed_terms = (va ** 2 / (ka - 1) if ka > 1 else 0.0) + (vb ** 2 / (kb - 1) if kb > 1 else 0.0)
    df = v ** 2 / seed_terms if seed_terms > 0 else math.inf
    t = d0 / math.sqrt(v)
    p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(0.975, df) * math.sqrt(v))
    return {"delta": d0, "ci95": [d0 - half, d0 + half], "t": t, "df": df, "p": p, "var_seeds": va + vb,
            "var_sentences": v_sent}


def holm(pvalues: Sequence[float]) -> List[float]:
    """Holm's step-down adjusted p-values: the i-th smallest p times (m - i + 1), made monotone and
    capped at 1, in the order given."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = len(p)
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return [float(x) for x in out]


def format_p(p: Optional[float], n_resamples: Optional[int] = None) -> str:
    """A p-value for the page: '≤ 1/R' at a resampling test's floor, '< 0.001' below it otherwise."""
    if p is None:
        return "–"
    if n_resamples and p <= p_floor(n_resamples) + 1e-12:
        return f"≤ {1 / n_resamples:.3g}"
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3f}"


def p_clause(p: Optional[float], n_resamples: Optional[int] = None) -> str:
    """``p = 0.012``, ``p < 0.001`` or ``p ≤ 0.001``: :func:`format_p` as a clause of a sentence."""
    text = format_p(p, n_resamples)
    return f"p {text}" if text[0] in "<≤" else f"p = {text}"


# ---- a family's comparison -----------------------------------------------------------------------


def default_comparisons(comparison: dict, systems: Sequence[str]) -> List[List[str]]:
    """The comparisons of a family: its ``comparisons`` list of [system, reference] pairs, or every
    system against the baseline."""
    pairs = comparison.get("comparisons")
    if pairs:
        return [list(p) for p in pairs if p[0] in systems and p[1] in systems]
    base = comparison["baseline"]
    order = comparison.get("system_order", [])
    rest = sorted((s for s in systems if s != base), key=lambda s: (order.index(s) if s in order else len(order), s))
    return [[s, base] for s in rest]


def _r(x, digits=4):
    if x is None:
        return None
    if isinstance(x, list):
        return [_r(v, digits) for v in x]
    if isinstance(x, float) and math.isinf(x):
        return None
    return round(float(x), digits)


def analyse(comparison: dict, runs: List[dict], stats_of: Callable[[dict], Optional[np.ndarray]],
            n_resamples: int = N_RESAMPLES, rng_seed: int = RNG_SEED) -> dict:
    """Every statistic the page shows for a family: per system its seeds' scores, mean and sd; per
    comparison the seed-level t-test, the two-level test and the per-sentence test of each seed,
    each Holm-corrected (on the unrounded p-values) across the comparisons; per run with outputs the
    bootstrap half-width of its score.  ``stats_of(run)`` gives a run's per-sentence statistics, or
    None when they are not available.  One set of bootstrap resamples serves every run's interval
    and every two-level test of the folder (its runs scored the same test sentences)."""
    score, higher = metric_of(comparison.get("kind", "translation"))
    key = "ppl" if comparison.get("kind") == "lm" else "bleu"
    by = {}
    for r in runs:
        by.setdefault(r["system"], {})[r["seed"]] = r
    stats = {(r["system"], r["seed"]): stats_of(r) for r in runs}
    with_outputs = sum(v is not None for v in stats.values())
    shapes = {v.shape[0] for v in stats.values() if v is not None}
    weights = (bootstrap_weights(shapes.pop(), n_resamples, np.random.default_rng(rng_seed))
               if len(shapes) == 1 else None)
    systems = {}
    for s, seeds in by.items():
        scores = [float(seeds[k]["test"][key]) for k in sorted(seeds)]
        systems[s] = {"seeds": sorted(seeds), "scores": scores, "mean": _r(np.mean(scores), 2),
                      "sd": _r(np.std(scores, ddof=1), 2) if len(scores) > 1 else None}
    runs_out = {}
    for (s, k), st in sorted(stats.items()):
        if st is not None:
            runs_out[f"{s}-s{k}"] = {"score": _r(score(st.sum(0))[0], 2),
                                     "ci95": _r(score_interval(st, score, n_resamples, rng_seed, weights), 2),
                                     "sentences": int(st.shape[0])}
    comps = []  # unrounded until Holm has run
    for a, b in default_comparisons(comparison, list(by)):
        sa = {k: float(r["test"][key]) for k, r in by[a].items()}
        sb = {k: float(r["test"][key]) for k, r in by[b].items()}
        shared = sorted(set(sa) & set(sb))
        better = sum((sa[k] > sb[k]) if higher else (sa[k] < sb[k]) for k in shared)
        entry = {"system": a, "reference": b, "paired_seeds": len(shared), "better_in": better,
                 "delta_of_means": _r(np.mean(list(sa.values())) - np.mean(list(sb.values())), 2)}
        entry["seed_level"] = seed_t_test(sa, sb)
        ra = [stats[(a, k)] for k in sorted(by[a])]
        rb = [stats[(b, k)] for k in sorted(by[b])]
        entry["two_level"] = None
        if all(x is not None for x in ra + rb):
            entry["two_level"] = two_level_test(ra, rb, score, n_resamples, rng_seed, weights)
        per = {}
        for k in shared:
            if stats[(a, k)] is not None and stats[(b, k)] is not None:
                per[str(k)] = sentence_test(stats[(a, k)], stats[(b, k)], score, n_resamples, rng_seed + k)
        entry["per_sentence"] = per
        comps.append(entry)
    # Holm across the family's comparisons, per test (and per seed for the per-sentence test)
    for name in ("seed_level", "two_level"):
        have = [c for c in comps if c[name] is not None]
        for c, adj in zip(have, holm([c[name]["p"] for c in have])):
            c[name]["p_holm"] = adj
    for k in sorted({k for c in comps for k in c["per_sentence"]}, key=int):
        have = [c for c in comps if k in c["per_sentence"]]
        for c, adj in zip(have, holm([c["per_sentence"][k]["p"] for c in have])):
            c["per_sentence"][k]["p_holm"] = adj
    for c in comps:
        t = c["seed_level"]
        c["seed_level"] = None if t is None else {
            "seeds": t["seeds"], "delta": _r(t["delta"]), "sd": _r(t["sd"]), "ci95": _r(t["ci95"]), "t": _r(t["t"]),
            "df": t["df"], "p": _r(t["p"]), "p_holm": _r(t["p_holm"])}
        c["two_level"] = None if c["two_level"] is None else {k: _r(v) for k, v in c["two_level"].items()}
        c["per_sentence"] = {k: {"delta": _r(v["delta"]), "ci95": _r(v["ci95"]), "p": _r(v["p"]),
                                 "p_holm": _r(v["p_holm"])} for k, v in c["per_sentence"].items()}
    return {"method": "seed level: paired t-test over seeds; two-level: seed variance + sentence-bootstrap covariance "
                      "of different seeds, Welch t; per sentence: paired approximate randomization; Holm-corrected "
                      "across the comparisons on unrounded p-values (fairseq_local_repro.compare)",
            "n_resamples": n_resamples, "rng_seed": rng_seed, "higher_is_better": higher,
            "runs_with_outputs": with_outputs, "runs": len(runs), "systems": systems, "run_intervals": runs_out,
            "comparisons": comps}


# ---- committed per-sentence outputs -------------------------------------------------------------

REF_FILE = "test.ref.gz"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_gz(path: str) -> str:
    with gzip.open(path, "rb") as f:
        return f.read().decode("utf-8")


def output_name(run: dict, kind: str) -> str:
    return f"{run['system']}-s{run['seed']}." + ("nll.gz" if kind == "lm" else "hyp.gz")


def published_in(folders: Sequence[str], run: dict) -> Optional[str]:
    """The first of ``folders`` whose JSON of ``run`` (``<system>-s<seed>.json``) records the same
    committed outputs (file and sha256) as ``run``: where those outputs are read from."""
    out = run.get("outputs")
    for folder in folders if out else ():
        path = os.path.join(folder, f"{run['system']}-s{run['seed']}.json")
        if os.path.isfile(path) and read_json(path).get("outputs") == out:
            return folder
    return None


def folder_stats(folder: str, kind: str) -> Callable[[dict], Optional[np.ndarray]]:
    """``stats_of`` for a published folder: a run's statistics from its committed outputs (None when
    the run has none), checked against the hashes its JSON records."""
    refs = None

    def stats_of(run: dict) -> Optional[np.ndarray]:
        nonlocal refs
        out = run.get("outputs")
        if not out:
            return None
        path = os.path.join(folder, out["file"])
        if not os.path.isfile(path):
            raise ValueError(f"{path}: missing (named by {run['system']}-s{run['seed']}.json)")
        text = read_gz(path)
        if sha256_text(text) != out["sha256"]:
            raise ValueError(f"{path}: its sha256 differs from the one {run['system']}-s{run['seed']}.json records")
        if kind == "lm":
            return np.asarray(json.loads(text), dtype=np.float64)
        if refs is None:
            ref_path = os.path.join(folder, REF_FILE)
            if not os.path.isfile(ref_path):
                raise ValueError(f"{ref_path}: missing (the test references of the committed hypotheses)")
            import sacrebleu

            ref_text = read_gz(ref_path)
            lines = ref_text.splitlines()
            refs = (lines, sha256_text(ref_text), sacrebleu.metrics.BLEU(lowercase=True, tokenize="13a",
                                                                         references=[lines]))
        if run.get("test_ref_sha256") != refs[1]:
            raise ValueError(f"{folder}: {run['system']}-s{run['seed']} was scored on other references than {REF_FILE}")
        return bleu_statistics(text.splitlines(), refs[0], refs[2])

    return stats_of


def load_folder(folder: str) -> Tuple[dict, List[dict]]:
    """A published comparison's ``comparison.json`` and its runs' JSON."""
    comparison = read_json(os.path.join(folder, "comparison.json"))
    runs = [read_json(os.path.join(folder, name)) for name in sorted(os.listdir(folder))
            if name.endswith(".json") and name != "comparison.json"]
    return comparison, runs


def analyse_folder(folder: str) -> dict:
    comparison, runs = load_folder(folder)
    return analyse(comparison, runs, folder_stats(folder, comparison.get("kind", "translation")))


def comparison_folders(root: str) -> List[str]:
    """Every folder under ``root`` with a comparison.json (families and their variants), sorted."""
    found = []
    for d, _, files in os.walk(root):
        if "comparison.json" in files:
            found.append(d)
    return sorted(found)


def _diff(a, b, path="") -> List[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [x for i, (u, v) in enumerate(zip(a, b)) for x in _diff(u, v, f"{path}[{i}]")]
    if a != b:
        return [f"{path}: committed {json.dumps(b)}, recomputed {json.dumps(a)}"]
    return []


def recompute(root: str, write: bool = False, out=sys.stdout) -> int:
    """Recompute every folder's statistics; print the p-values; return the number of differences
    from the committed ones (0 with ``write``, which stores the recomputed ones)."""
    differences = 0
    folders = comparison_folders(root)
    if not folders:
        raise ValueError(f"{root}: no comparison.json below it")
    for folder in folders:
        comparison, _ = load_folder(folder)
        stats = analyse_folder(folder)
        rel = os.path.relpath(folder, root)
        n = stats["n_resamples"]
        print(f"{rel}: {stats['runs_with_outputs']} of {stats['runs']} runs with committed outputs", file=out)
        for c in stats["comparisons"]:
            parts = [f"  {c['system']} vs {c['reference']}: Δ of means {c['delta_of_means']:+.2f}"]
            if c["seed_level"]:
                s = c["seed_level"]
                parts.append(f"seed-level p {format_p(s['p'])} (Holm {format_p(s['p_holm'])}), "
                             f"95% CI [{s['ci95'][0]:+.2f}, {s['ci95'][1]:+.2f}]")
            if c["two_level"]:
                s = c["two_level"]
                parts.append(f"two-level p {format_p(s['p'])} (Holm {format_p(s['p_holm'])})")
            for k, s in c["per_sentence"].items():
                parts.append(f"seed {k} per-sentence p {format_p(s['p'], n)} (Holm {format_p(s['p_holm'], n)})")
            print("; ".join(parts), file=out)
        if write:
            comparison["statistics"] = stats
            write_json(os.path.join(folder, "comparison.json"), comparison)
            continue
        found = _diff(json.loads(json.dumps(stats)), comparison.get("statistics"))
        for line in found:
            print(f"{rel}: DIFFERS: {line}", file=out)
        differences += len(found)
    return differences


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recompute", metavar="DIR", required=True,
                   help="folder of published comparisons (docs/results/reproduce)")
    p.add_argument("--write", action="store_true", help="store the recomputed statistics in each comparison.json")
    a = p.parse_args(argv)
    if not os.path.isdir(a.recompute):
        p.error(f"--recompute: '{a.recompute}' is not a folder")
    try:
        differences = recompute(a.recompute, a.write)
    except ValueError as e:
        sys.exit(f"{PROG}: error: {e}")
    if differences:
        print(f"{differences} figure(s) differ from the committed statistics", file=sys.stderr)
        return 1
    print("every p-value and interval equals the committed one" if not a.write else "statistics written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
