#!/usr/bin/env python
"""Score hypotheses against one or more references: sacrebleu BLEU (detokenized and tokenized),
optionally lowercased (NIST-style), multi-reference, and ROUGE-1/2/L F1 (rouge-score).

    python scripts/score.py --hyp hyp.txt --ref ref0.txt [--ref ref1.txt ...] [--lowercase]
                            [--tokenize 13a|intl|zh|char|none] [--rouge] [--json OUT]

"detokenized BLEU" is sacrebleu with its own tokenizer (``--tokenize``, default 13a; use zh for
Chinese targets) on the text as given; "tokenized BLEU" is sacrebleu with ``tokenize=none`` on the
text split on whitespace, which equals multi-bleu.perl on already tokenized text.
"""
import argparse
import json
import os
import sys


def read_lines(path, what):
    if not os.path.isfile(path):
        sys.exit(f"score.py: error: {what} file '{path}' does not exist")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hyp", required=True)
    p.add_argument("--ref", required=True, action="append", help="reference file; repeat for multi-reference")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive scores (NIST-style)")
    p.add_argument("--tokenize", default="13a", choices=["13a", "intl", "zh", "char", "none"])
    p.add_argument("--rouge", action="store_true", help="also report ROUGE-1/2/L F1 (summarization)")
    p.add_argument("--json", help="write the scores to this JSON file too")
    return p.parse_args(argv)


def score(hyps, refs, lowercase=False, tokenize="13a", rouge=False):
    import sacrebleu

    out = {}
    bleu = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize=tokenize)
    out["bleu"] = bleu.corpus_score(hyps, refs).score
    out["bleu_signature"] = str(bleu.get_signature())
    tok = sacrebleu.metrics.BLEU(lowercase=lowercase, tokenize="none")
    out["bleu_tokenized"] = tok.corpus_score(hyps, refs).score
    if rouge:
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
        totals = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
        for i, h in enumerate(hyps):
            # multi-reference: the best F1 over references, per sentence
            for key in totals:
                totals[key] += max(scorer.score(r[i], h)[key].fmeasure for r in refs)
        out.update({f"{k}_f1": 100 * v / max(1, len(hyps)) for k, v in totals.items()})
    return out


def main(argv=None):
    a = parse_args(argv)
    hyps = read_lines(a.hyp, "--hyp")
    refs = [read_lines(r, "--ref") for r in a.ref]
    for path, r in zip(a.ref, refs):
        if len(r) != len(hyps):
            sys.exit(f"score.py: error: {path} has {len(r)} lines but {a.hyp} has {len(hyps)}")
    if not hyps:
        sys.exit(f"score.py: error: {a.hyp} is empty")
    s = score(hyps, refs, a.lowercase, a.tokenize, a.rouge)
    case = " (lowercased)" if a.lowercase else ""
    print(f"BLEU (detokenized, sacrebleu{case}) = {s['bleu']:.2f}   [{s['bleu_signature']}]")
    print(f"BLEU (tokenized, tokenize=none{case}) = {s['bleu_tokenized']:.2f}")
    if a.rouge:
        print(f"ROUGE F1: R-1 = {s['rouge1_f1']:.2f}  R-2 = {s['rouge2_f1']:.2f}  R-L = {s['rougeL_f1']:.2f}")
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump(s, f, indent=2)
        os.replace(a.json + ".tmp", a.json)
    return s


if __name__ == "__main__":
    main()
