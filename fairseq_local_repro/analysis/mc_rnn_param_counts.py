"""Parameter counts of the MC-RNN paper's table rows (Xu et al. 2019, Tables 2-5) as built here.

    python scripts/analysis/mc_rnn_param_counts.py [--src-vocab 25000] [--tgt-vocab 25000] [--lm-vocab 10000]

Counts every registered MC-RNN / Baseline-RNN arch for the given dictionary sizes (the paper uses
~25k BPE types on IWSLT14, 30k words on Gigaword and PTB's 10k words) and prints them next to the
paper's figures; the last column is with ``--mc-weight-space gates``.
"""
import argparse

from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

import fairseq_local  # noqa: F401

ROWS = [  # arch, paper row, paper params, which vocab
    ("rnnsearch_iwslt_de_en", "IWSLT14 Baseline-RNN", "25M", "mt"),
    ("rnnsearch_iwslt_de_en_large", "IWSLT14 Baseline-RNN-large", "29M", "mt"),
    ("rnnsearch_iwslt_de_en_deep", "IWSLT14 Baseline-RNN-deep", "29M", "mt"),
    ("mc_rnn_iwslt_de_en_2", "IWSLT14 MC-RNN-2", "28M", "mt"),
    ("mc_rnn_iwslt_de_en_3", "IWSLT14 MC-RNN-3", "29M", "mt"),
    ("mc_rnn_iwslt_de_en_4", "IWSLT14 MC-RNN-4", "31M", "mt"),
    ("rnnsearch_gigaword", "Gigaword Baseline-RNN", "36M", "sum"),
    ("mc_rnn_gigaword_2", "Gigaword MC-RNN-2", "38M", "sum"),
    ("mc_rnn_gigaword_3", "Gigaword MC-RNN-3", "40M", "sum"),
    ("mc_rnn_gigaword_4", "Gigaword MC-RNN-4", "42M", "sum"),
    ("mc_rnn_lm_ptb", "PTB MC-RNN (AWD settings)", "-", "lm"),
    ("mc_rnn_lm_ptb_awd_lstm", "PTB AWD-LSTM baseline", "24M", "lm"),
]


def _dict(n):
    d = Dictionary()
    for i in range(n - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def count(arch, src, tgt, extra=()):
    task_name = "language_modeling" if "lm" in arch else "translation"
    args = options.parse_args_and_arch(options.get_training_parser(),
                                       ["/dev/null", "--task", task_name, "--arch", arch, *extra])

    class Task:
        source_dictionary = src
        target_dictionary = tgt
        dictionary = tgt

    model = ARCH_MODEL_REGISTRY[arch].build_model(args, Task())
    return sum(p.numel() for p in model.parameters())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--src-vocab", type=int, default=25000)
    p.add_argument("--tgt-vocab", type=int, default=25000)
    p.add_argument("--sum-vocab", type=int, default=30000)
    p.add_argument("--lm-vocab", type=int, default=10000)
    a = p.parse_args()
    vocab = {"mt": (_dict(a.src_vocab), _dict(a.tgt_vocab)), "sum": (_dict(a.sum_vocab),) * 2,
             "lm": (_dict(a.lm_vocab),) * 2}
    print(f"{'arch':32s} {'paper row':30s} {'paper':>6s} {'ours':>8s} {'gates':>8s}")
    for arch, row, paper, kind in ROWS:
        n = count(arch, *vocab[kind])
        g = count(arch, *vocab[kind], ["--mc-weight-space", "gates"]) if arch.startswith("mc_") else n
        print(f"{arch:32s} {row:30s} {paper:>6s} {n / 1e6:7.2f}M {g / 1e6:7.2f}M")


if __name__ == "__main__":
    main()
