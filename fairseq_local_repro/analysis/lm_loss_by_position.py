"""Test perplexity by position within a block of running text, for several language models scored
on the same blocks: does a model gain from a longer history?

    python scripts/analysis/lm_loss_by_position.py \
        --log genCNN=RUN_A/test/eval_lm.log --log LSTM=RUN_B/test/eval_lm.log \
        [--reference LSTM] [--buckets 30,60,120] [--json out.json]

Inputs are ``fairseq-eval-lm --output-word-probs`` logs (``<run>/test/eval_lm.log`` of a
``--running-text`` run of scripts/reproduce.py: one block of running text per sample, evaluated
without a context window, so position ``p`` of a block has ``p - 1`` words of history in it).  Each
bucket of positions (``--buckets``: upper edges, 1-based; the last bucket runs to the block's end)
gets every model's perplexity, ``exp`` of its mean negative log-likelihood over the bucket's words,
and its ratio to the ``--reference`` model's.  genCNN's βCNN (Wang et al., ACL 2015, Section 3.3)
is switched off while the history is no longer than ``L_α`` (30 words in ``gencnn_paper``), so the
first bucket of the default edges is the αCNN alone and the others add the βCNN's summaries.
"""
import argparse
import math
import os
import sys
from collections import OrderedDict
from typing import Dict, List, Sequence, Tuple

from fairseq_local_core.file_io import write_json
from fairseq_local_repro.evaluate import word_logprobs


def read_word_logprobs(path: str) -> Dict[int, List[float]]:
    """sample id -> natural-log probability of each of its words, from an eval-lm log."""
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: no such file")
    samples: Dict[int, List[float]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = word_logprobs(line)
            if words:
                samples[words[0]] = words[1]
    if not samples:
        raise SystemExit(f"{path}: no word probabilities: is this a fairseq-eval-lm --output-word-probs log?")
    return samples


def bucket_labels(edges: Sequence[int]) -> List[str]:
    lo, labels = 0, []
    for e in edges:
        labels.append(f"{lo + 1}-{e}")
        lo = e
    return labels + [f">{edges[-1]}"]


def perplexity_by_position(models: "OrderedDict[str, Dict[int, List[float]]]", edges: Sequence[int],
                           reference: str) -> List[dict]:
    """One row per bucket of positions: its word count and every model's perplexity on those words,
    with the ratio to ``reference``'s.  The models must cover the same samples with the same lengths."""
    names = list(models)
    first = models[names[0]]
    for name in names[1:]:
        other = models[name]
        if set(other) != set(first) or any(len(other[i]) != len(first[i]) for i in first):
            raise SystemExit(f"{name} and {names[0]} were not scored on the same blocks (sample ids or lengths differ)")
    sums = {name: [0.0] * (len(edges) + 1) for name in names}
    counts = [0] * (len(edges) + 1)
    for i, lps in first.items():
        for p in range(1, len(lps) + 1):
            b = next((k for k, e in enumerate(edges) if p <= e), len(edges))
            counts[b] += 1
            for name in names:
                sums[name][b] -= models[name][i][p - 1]
    rows = []
    for b, label in enumerate(bucket_labels(edges)):
        if not counts[b]:
            continue
        ppl = {name: math.exp(sums[name][b] / counts[b]) for name in names}
        rows.append({"positions": label, "words": counts[b], "ppl": ppl,
                     "ratio": {name: ppl[name] / ppl[reference] for name in names}})
    return rows


def parse_logs(specs: Sequence[str]) -> "OrderedDict[str, str]":
    logs: "OrderedDict[str, str]" = OrderedDict()
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--log {spec!r}: expected NAME=PATH")
        if name in logs:
            raise SystemExit(f"--log {spec!r}: the name {name!r} is given twice")
        logs[name] = path
    return logs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", action="append", required=True, metavar="NAME=PATH",
                   help="a model's fairseq-eval-lm --output-word-probs log (repeat for each model)")
    p.add_argument("--reference", help="the model the ratios are to (default: the first --log)")
    p.add_argument("--buckets", default="30,60,120", help="upper edges of the position buckets (default 30,60,120)")
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args(argv)
    logs = parse_logs(a.log)
    reference = a.reference or next(iter(logs))
    if reference not in logs:
        raise SystemExit(f"--reference {reference!r} is not one of the --log names ({', '.join(logs)})")
    try:
        edges = [int(e) for e in a.buckets.split(",")]
    except ValueError:
        raise SystemExit(f"--buckets must be comma-separated integers (got {a.buckets!r})")
    if any(e < 1 for e in edges) or edges != sorted(set(edges)):
        raise SystemExit(f"--buckets must be increasing positive integers (got {a.buckets!r})")
    models = OrderedDict((name, read_word_logprobs(path)) for name, path in logs.items())
    rows = perplexity_by_position(models, edges, reference)
    names = list(models)
    print("\t".join(["positions", "words"] + names + [f"{n}/{reference}" for n in names if n != reference]))
    for r in rows:
        print("\t".join([r["positions"], str(r["words"])] + [f"{r['ppl'][n]:.2f}" for n in names]
                        + [f"{r['ratio'][n]:.3f}" for n in names if n != reference]))
    if a.json:
        write_json(a.json, {"reference": reference, "logs": dict(logs), "buckets": edges, "rows": rows})
        print(f"wrote {a.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
