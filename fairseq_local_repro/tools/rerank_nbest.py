"""Re-rank n-best translation lists with a trained fairseq language model (genCNN paper, Section 6.2).

    python scripts/rerank_nbest.py --lm checkpoints/gencnn/checkpoint_best.pt --lm-data data-bin/ptb \
        --dev-nbest dev.nbest --dev-ref dev.en --test-nbest test.nbest --test-ref test.en \
        [--format auto|fairseq|moses] [--lm-weights 0:1.5:0.05] [--output test.reranked.txt]

n-best formats (``--format auto`` tells them apart by the first hypothesis line):

* fairseq-generate output with ``--nbest N``: ``H-<id>\\t<score>\\t<hyp>`` (``D-`` lines, the
  detokenized hypotheses, are preferred when present; ``T-`` lines give references when no
  ``--*-ref`` file is given);
* Moses n-best: ``<id> ||| <hyp> ||| <feature list> ||| <total score>``.

Each hypothesis gets ``base score + w * LM score (+ p * length)``: the base score is the decoder's
(fairseq: per-token log-probability; Moses: the weighted total), the LM score is the LM's
log-probability of the hypothesis (+ end of sentence), normalised per token (``--lm-norm mean``,
the default for fairseq lists) or summed (``sum``, the default for Moses lists).  ``w`` (and ``p``
when ``--length-weights`` has more than one value) is tuned on the dev list for sacrebleu BLEU;
the test list is re-ranked with it.  BLEU before (decoder 1-best) and after is reported for both.

The LM is any fairseq language model checkpoint (genCNN, LSTM LM, transformer LM...); it must
read the hypotheses as they are written (give ``--lm-bpe``/``--lm-bpe-codes``/``--lm-tokenizer``
when the LM was trained on BPE or tokenized text).  Bad input stops with one line naming the file
and line.
"""
import argparse
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

from fairseq_local_core import file_io
from fairseq_local_repro.text import text_input


class NbestError(ValueError):
    """Bad input; the message names the file and line."""


def _check_text(path):
    """A readable UTF-8 file, or NbestError naming it (and its first non-UTF-8 line)."""
    if not os.path.isfile(path):
        raise NbestError(f"{path}: no such file")
    try:
        text_input.scan(path)
    except text_input.TextInputError as e:
        raise NbestError(str(e)) from None


@dataclass
class NbestList:
    path: str
    fmt: str
    hyps: Dict[int, List[Tuple[str, float]]] = field(default_factory=dict)  # id -> [(hyp, score)]
    refs: Dict[int, str] = field(default_factory=dict)  # fairseq T- lines

    def ids(self) -> List[int]:
        return sorted(self.hyps)


_FAIRSEQ_LINE = re.compile(r"^([A-Z])-(\d+)\t(.*)$")


def detect_format(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if " ||| " in line:
                return "moses"
            if _FAIRSEQ_LINE.match(line.rstrip("\n")) and line[0] in "HD":
                return "fairseq"
    raise NbestError(f"{path}: no hypothesis line found (expected fairseq-generate H-/D- lines or Moses 'id ||| hyp ||| feats ||| score')")


def read_nbest(path: str, fmt: str = "auto") -> NbestList:
    _check_text(path)
    fmt = detect_format(path) if fmt == "auto" else fmt
    out = NbestList(path, fmt)
    h_lines: Dict[int, List[Tuple[str, float]]] = {}
    d_lines: Dict[int, List[Tuple[str, float]]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            if fmt == "moses":
                parts = line.split(" ||| ")
                if len(parts) < 4:
                    raise NbestError(f"{where}: expected 'id ||| hypothesis ||| features ||| score', got {len(parts)} fields")
                try:
                    sid, score = int(parts[0].strip()), float(parts[3].strip())
                except ValueError:
                    raise NbestError(f"{where}: sentence id and total score must be numbers") from None
                out.hyps.setdefault(sid, []).append((parts[1].strip(), score))
                continue
            m = _FAIRSEQ_LINE.match(line)
            if m is None:
                if line.startswith(("Generate ", "Translated ", "2")) or "|" in line[:30]:
                    continue  # fairseq's log / summary lines
                raise NbestError(f"{where}: not a fairseq-generate line (expected e.g. 'H-3\\t-0.51\\thypothesis')")
            kind, sid, rest = m.group(1), int(m.group(2)), m.group(3)
            if kind in "HD":
                fields = rest.split("\t", 1)
                try:
                    score = float(fields[0])
                except ValueError:
                    raise NbestError(f"{where}: {kind}- line needs a numeric score before the hypothesis") from None
                text = fields[1] if len(fields) > 1 else ""
                (h_lines if kind == "H" else d_lines).setdefault(sid, []).append((text, score))
            elif kind == "T":
                out.refs[sid] = rest
    if fmt == "fairseq":
        out.hyps = d_lines or h_lines
    if not out.hyps:
        raise NbestError(f"{path}: no hypotheses found")
    return out


def read_refs(path: str, nbest: NbestList) -> Dict[int, str]:
    """References for the ids of ``nbest``: a file (line i = sentence i) or the T- lines."""
    if path:
        _check_text(path)
        with open(path, encoding="utf-8") as f:
            refs = {i: line.rstrip("\n") for i, line in enumerate(f)}
        bad = [i for i in nbest.ids() if i not in refs]
        if bad:
            raise NbestError(f"{path}: has {len(refs)} lines but {nbest.path} has sentence id {bad[0]}")
        if len(refs) != len(nbest.hyps):
            raise NbestError(f"{path}: {len(refs)} references but {nbest.path} has hypotheses for {len(nbest.hyps)} sentences")
        return refs
    if not nbest.refs:
        raise NbestError(f"{nbest.path}: no T- reference lines; give the reference file")
    missing = [i for i in nbest.ids() if i not in nbest.refs]
    if missing:
        raise NbestError(f"{nbest.path}: no T- reference line for sentence {missing[0]}")
    return nbest.refs


def parse_grid(spec: str, option: str) -> List[float]:
    """'0:1.5:0.05' (start:stop:step, inclusive) or '0,0.1,0.5'."""
    try:
        if ":" in spec:
            start, stop, step = (float(v) for v in spec.split(":"))
            assert step > 0 and stop >= start
            n = int(round((stop - start) / step))
            return [round(start + i * step, 10) for i in range(n + 1)]
        return [float(v) for v in spec.split(",") if v.strip()]
    except Exception:
        raise NbestError(f"{option} {spec!r}: expected start:stop:step or a comma list of numbers") from None


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str], tokenize: str) -> float:
    import sacrebleu

    return sacrebleu.corpus_bleu(list(hyps), [list(refs)], tokenize=tokenize).score


def choose(nb: NbestList, lm: Dict[int, List[float]], w: float, p: float) -> List[str]:
    out = []
    for sid in nb.ids():
        cands = nb.hyps[sid]
        best = max(range(len(cands)),
                   key=lambda k: (cands[k][1] + w * lm[sid][k] + p * len(cands[k][0].split()), -k))
        out.append(cands[best][0])
    return out


def tune(nb: NbestList, refs: Dict[int, str], lm, weights, lengths, tokenize) -> Tuple[float, float, float]:
    ref_list = [refs[i] for i in nb.ids()]
    best = None
    for w in weights:
        for p in lengths:
            bleu = corpus_bleu(choose(nb, lm, w, p), ref_list, tokenize)
            if best is None or bleu > best[0] + 1e-9:
                best = (bleu, w, p)
    return best


def lm_scorer(args) -> Callable[[List[str]], List[Tuple[float, int]]]:
    """Returns f(sentences) -> [(sum of log-probs, number of scored tokens)] using the LM."""
    from fairseq_local_repro.lm_hub import load_hub, token_log_probs

    try:
        hub = load_hub(args.lm, args.lm_data, args.lm_bpe, args.lm_bpe_codes, args.lm_tokenizer, args.cpu,
                       max_tokens=args.lm_max_tokens)
    except FileNotFoundError as e:
        raise NbestError(str(e)) from None

    def score(sentences: List[str]):
        """Teacher-forced log-probabilities of every word and of the end of sentence (the LM
        reads ``</s> w1 .. wn`` and predicts ``w1 .. wn </s>``, as in fairseq LM training)."""
        encoded = [hub.encode(s) for s in sentences]  # tokenize / BPE / binarize, ends with </s>
        return [(float(lp.sum()), len(lp)) for lp in token_log_probs(hub, encoded, args.lm_batch)]

    return score


def lm_scores(nb: NbestList, scorer, norm: str) -> Dict[int, List[float]]:
    flat = [(sid, k, h) for sid in nb.ids() for k, (h, _) in enumerate(nb.hyps[sid])]
    scored = scorer([h for _, _, h in flat])
    out: Dict[int, List[float]] = {sid: [0.0] * len(nb.hyps[sid]) for sid in nb.ids()}
    for (sid, k, _), (total, n) in zip(flat, scored):
        out[sid][k] = total / max(n, 1) if norm == "mean" else total
    return out


def run(args, scorer=None) -> Dict[str, float]:
    weights = parse_grid(args.lm_weights, "--lm-weights")
    lengths = parse_grid(args.length_weights, "--length-weights")
    dev = read_nbest(args.dev_nbest, args.format)
    test = read_nbest(args.test_nbest, args.format) if args.test_nbest else None
    dev_refs = read_refs(args.dev_ref, dev)
    test_refs = read_refs(args.test_ref, test) if test else None
    norm = args.lm_norm if args.lm_norm != "auto" else ("mean" if dev.fmt == "fairseq" else "sum")
    scorer = scorer or lm_scorer(args)
    results: Dict[str, float] = {}
    dev_lm = lm_scores(dev, scorer, norm)
    ref_list = [dev_refs[i] for i in dev.ids()]
    results["dev_before"] = corpus_bleu([dev.hyps[i][0][0] for i in dev.ids()], ref_list, args.sacrebleu_tokenize)
    results["dev_after"], results["lm_weight"], results["length_weight"] = tune(
        dev, dev_refs, dev_lm, weights, lengths, args.sacrebleu_tokenize)
    print(f"tuned on {args.dev_nbest}: LM weight {results['lm_weight']:g}, length weight "
          f"{results['length_weight']:g} (LM score: {norm} log-prob)")
    rows = [("dev", results["dev_before"], results["dev_after"])]
    if test:
        test_lm = lm_scores(test, scorer, norm)
        t_refs = [test_refs[i] for i in test.ids()]
        results["test_before"] = corpus_bleu([test.hyps[i][0][0] for i in test.ids()], t_refs,
                                             args.sacrebleu_tokenize)
        chosen = choose(test, test_lm, results["lm_weight"], results["length_weight"])
        results["test_after"] = corpus_bleu(chosen, t_refs, args.sacrebleu_tokenize)
        rows.append(("test", results["test_before"], results["test_after"]))
        if args.output:
            file_io.write_lines(args.output, chosen)
    print(f"{'set':6} {'BLEU before':>12} {'BLEU after':>11} {'delta':>7}")
    for name, before, after in rows:
        print(f"{name:6} {before:12.2f} {after:11.2f} {after - before:+7.2f}")
    return results


def build_parser():
    p = argparse.ArgumentParser(prog="rerank_nbest.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--lm", required=True, help="fairseq LM checkpoint (.pt)")
    p.add_argument("--lm-data", help="directory with the LM's dict.txt (default: the checkpoint's directory)")
    p.add_argument("--lm-bpe", help="fairseq bpe the LM needs (subword_nmt, sentencepiece, gpt2...)")
    p.add_argument("--lm-bpe-codes", help="BPE codes / sentencepiece model for --lm-bpe")
    p.add_argument("--lm-tokenizer", help="fairseq tokenizer the LM needs (moses, space...)")
    p.add_argument("--lm-norm", default="auto", choices=["auto", "mean", "sum"],
                   help="LM score per token (mean) or total (sum); auto: mean for fairseq lists, sum for Moses")
    p.add_argument("--lm-batch", type=int, default=64, help="hypotheses per LM scoring call")
    p.add_argument("--lm-max-tokens", type=int, default=8000)
    p.add_argument("--dev-nbest", required=True)
    p.add_argument("--dev-ref", help="dev references, one per line (default: the list's T- lines)")
    p.add_argument("--test-nbest")
    p.add_argument("--test-ref", help="test references, one per line (default: the list's T- lines)")
    p.add_argument("--format", default="auto", choices=["auto", "fairseq", "moses"])
    p.add_argument("--lm-weights", default="0:1.5:0.05", help="grid of LM weights (start:stop:step or list)")
    p.add_argument("--length-weights", default="0", help="grid of per-word bonuses (default: none)")
    p.add_argument("--sacrebleu-tokenize", default="13a", help="sacrebleu tokenizer (13a, none, zh, intl...)")
    p.add_argument("--output", help="write the re-ranked test 1-best here")
    p.add_argument("--cpu", action="store_true")
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.output and not args.test_nbest:
        parser.error("--output needs --test-nbest")
    for option in ("lm_batch", "lm_max_tokens"):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1 (got {getattr(args, option)})")
    try:
        run(args)
    except NbestError as e:
        print(f"rerank_nbest.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
