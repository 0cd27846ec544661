"""BLEU by source-length bucket for two systems (MC-RNN paper, Figure 4).

    python scripts/analysis/mc_rnn_bleu_by_length.py --gen-a mc_rnn3.gen --gen-b baseline.gen \
        [--names MC-RNN-3,Baseline-RNN] [--buckets 10,20,30,40,50] [--bpe-symbol "@@ "] \
        [--tokenize 13a|none] [--png figure4.png] [--tsv out.tsv]

Inputs are ``fairseq-generate`` outputs (S-/T-/H-/D- lines; D- is used when present, else H-)
of the same test set.  Sentences are bucketed by source length in words (BPE joined back); each
bucket's corpus BLEU is computed with sacrebleu for both systems.
"""
import argparse
import os
import sys
from collections import OrderedDict

from fairseq_local_core.file_io import write_lines
from fairseq_local_repro.analysis.figures import save_png


def read_generate(path):
    """-> OrderedDict id -> (src, ref, hyp)."""
    if not os.path.exists(path):
        raise SystemExit(f"{path}: no such file")
    src, ref, hyp_h, hyp_d = {}, {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if len(line) < 3 or line[1] != "-" or line[0] not in "STHD":
                continue
            head, _, rest = line.rstrip("\n").partition("\t")
            try:
                idx = int(head[2:])
            except ValueError:
                raise SystemExit(f"{path}:{lineno}: malformed fairseq-generate line: {line[:60]!r}")
            if head[0] == "S":
                src[idx] = rest
            elif head[0] == "T":
                ref[idx] = rest
            else:
                text = rest.split("\t", 1)[1] if "\t" in rest else ""  # drop the score
                (hyp_d if head[0] == "D" else hyp_h)[idx] = text
    hyp = hyp_d or hyp_h
    if not hyp:
        raise SystemExit(f"{path}: no H-/D- lines: is this fairseq-generate output?")
    missing = sorted(set(hyp) - set(ref) | set(hyp) - set(src))
    if missing:
        raise SystemExit(f"{path}: sentence {missing[0]} has a hypothesis but no S-/T- line")
    return OrderedDict((i, (src[i], ref[i], hyp[i])) for i in sorted(hyp))


def bucket_of(n, edges):
    for e in edges:
        if n <= e:
            return e
    return None  # longer than the last edge


def bleu_by_length(a, b, edges, bpe="@@ ", tokenize="13a"):
    import sacrebleu

    if set(a) != set(b):
        raise SystemExit("--gen-a and --gen-b cover different sentence ids (not the same test set?)")
    buckets = OrderedDict((e, []) for e in edges + [None])
    for i, (src, ref, _) in a.items():
        if src.replace(bpe, "") != b[i][0].replace(bpe, ""):
            raise SystemExit(f"sentence {i}: the two files have different sources")
        n = len(src.replace(bpe, "").split())
        buckets[bucket_of(n, edges)].append(i)
    rows = []
    lo = 0
    for e, ids in buckets.items():
        label = f"{lo + 1}-{e}" if e is not None else f">{edges[-1]}"
        lo = e if e is not None else lo
        if not ids:
            continue
        refs = [[a[i][1].replace(bpe, "") for i in ids]]
        sa = sacrebleu.corpus_bleu([a[i][2].replace(bpe, "") for i in ids], refs, tokenize=tokenize).score
        sb = sacrebleu.corpus_bleu([b[i][2].replace(bpe, "") for i in ids], refs, tokenize=tokenize).score
        rows.append((label, len(ids), sa, sb))
    return rows


def plot(rows, names, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    x = range(len(rows))
    ax.plot(x, [r[2] for r in rows], "o-", label=names[0])
    ax.plot(x, [r[3] for r in rows], "s--", label=names[1])
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{r[0]}\n({r[1]})" for r in rows])
    ax.set_xlabel("source length (words) (sentences)")
    ax.set_ylabel("BLEU")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, out, dpi=150)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gen-a", required=True)
    p.add_argument("--gen-b", required=True)
    p.add_argument("--names", default="A,B")
    p.add_argument("--buckets", default="10,20,30,40,50", help="upper edges of the length buckets")
    p.add_argument("--bpe-symbol", default="@@ ")
    p.add_argument("--tokenize", default="13a", help="sacrebleu tokenizer (13a; none for pre-tokenized)")
    p.add_argument("--png")
    p.add_argument("--tsv")
    a = p.parse_args(argv)
    names = a.names.split(",")
    if len(names) != 2:
        raise SystemExit(f"--names needs two comma-separated names (got {a.names!r})")
    try:
        edges = sorted(int(e) for e in a.buckets.split(","))
    except ValueError:
        raise SystemExit(f"--buckets must be comma-separated integers (got {a.buckets!r})")
    rows = bleu_by_length(read_generate(a.gen_a), read_generate(a.gen_b), edges, a.bpe_symbol, a.tokenize)
    lines = [f"length\tsentences\t{names[0]}\t{names[1]}"] + [f"{r[0]}\t{r[1]}\t{r[2]:.2f}\t{r[3]:.2f}" for r in rows]
    print("\n".join(lines))
    if a.tsv:
        write_lines(a.tsv, lines)
    if a.png:
        plot(rows, names, a.png)
        print(f"wrote {a.png}", file=sys.stderr)


if __name__ == "__main__":
    main()
