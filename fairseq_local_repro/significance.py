"""Significance tests of the reproduction harness (:mod:`fairseq_local_repro.compare` applies them).

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
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

N_RESAMPLES = 10_000
RNG_SEED = 12345

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
