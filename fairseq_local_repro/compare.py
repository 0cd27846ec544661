"""A family's comparison (the significance tests applied to its runs), and the command that
recomputes every p-value and interval from the committed files.

    python -m fairseq_local_repro.compare --recompute docs/results/reproduce [--write]

recomputes, from the committed files alone (each run's JSON and, where committed, its per-sentence
outputs: ``<system>-s<seed>.hyp.gz`` with the family's ``test.ref.gz``, or ``<system>-s<seed>.nll.gz``),
every p-value and interval that ``docs/results.md`` shows, and checks them against the
``statistics`` of each ``comparison.json`` (exit status 1 and one line per difference when they
disagree; ``--write`` stores the recomputed ones instead).

The tests themselves are :mod:`fairseq_local_repro.significance`'s.
"""
import argparse
import gzip
import hashlib
import json
import math
import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_local_core.file_io import read_json, write_json
from fairseq_local_repro.significance import (N_RESAMPLES, RNG_SEED, bleu_statistics, bootstrap_weights, format_p,
                                              holm, metric_of, score_interval, seed_t_test, sentence_test,
                                              two_level_test)

PROG = "python -m fairseq_local_repro.compare"

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
