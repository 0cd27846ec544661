"""Sample sentences from a trained fairseq language model (genCNN paper, Section 5.1).

    # complete prompts (one per line of a file, or --prompt, repeatable), 3 samples each
    python scripts/sample_lm.py --path checkpoints/gencnn/checkpoint_best.pt --data data-bin/ptb \
        --prompts prompts.txt --num-samples 3 --temperature 0.8 --topk 50 --seed 1
    # 5 sentences from scratch
    python scripts/sample_lm.py --path ... --data ... --from-scratch 5

Works with any fairseq language model checkpoint (genCNN, LSTM LM, transformer LM...), through
fairseq's hub interface and SequenceGenerator with sampling: each word is drawn from
p(e_{t+1} | e_{1:t}) (optionally sharpened by --temperature and restricted to the --topk words or
the --topp nucleus) until end of sentence or --max-len words; a tiny temperature is greedy.  Prompt
i is sampled with seed ``--seed + i``, so results do not depend on how many prompts are given with it.

Output (stdout or --output): ``P-<i>\\t<prompt>`` then ``S-<i>-<k>\\t<avg log-prob>\\t<sentence>``,
where avg log-prob is the model's own log-probability per sampled token (untempered, before
--topk / --topp; the end of sentence counted, the prompt not), as fairseq-eval-lm would score it.
"""
import argparse
import os
import sys

from fairseq_local_repro import lm_hub
from fairseq_local_repro.text import text_input

PROG = "sample_lm.py"
SCORE = ("avg log-prob: the model's own log-probability per sampled token (untempered, before "
         "--topk/--topp; end of sentence counted, prompt not)")


def sample(hub, prompt: str, n: int, args, seed: int):
    """``n`` samples continuing ``prompt`` ('' = from scratch): [(text, avg log-prob)], the average
    of the model's own log-probabilities of the sampled tokens (see ``SCORE``)."""
    import torch
    from fairseq import utils

    utils.set_torch_seed(seed)
    tokens = hub.encode(prompt) if prompt.strip() else torch.LongTensor([hub.task.source_dictionary.eos()])
    drawn = lm_hub.sample(hub, tokens, n, temperature=args.temperature, topk=args.topk, topp=args.topp,
                          max_len=args.max_len, min_len=args.min_len)
    return [(hub.decode(torch.cat([tokens[:-1], new])), float(lp.mean())) for new, lp in drawn]


def build_parser():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="LM checkpoint")
    p.add_argument("--data", help="directory with dict.txt (default: the checkpoint's directory)")
    p.add_argument("--prompts", help="file with one prompt per line")
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument("--from-scratch", type=int, default=0, metavar="N", help="also N sentences without prompt")
    p.add_argument("--num-samples", type=int, default=1, help="samples per prompt")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="divides the log-probabilities before sampling (> 0; tiny: greedy)")
    p.add_argument("--topk", type=int, default=-1, help="sample among the k most likely words (-1: all)")
    p.add_argument("--topp", type=float, default=-1.0, help="nucleus sampling (-1: off)")
    p.add_argument("--max-len", type=int, default=60, help="maximum generated words")
    p.add_argument("--min-len", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bpe", help="fairseq bpe of the LM (subword_nmt, sentencepiece, gpt2...)")
    p.add_argument("--bpe-codes")
    p.add_argument("--tokenizer", help="fairseq tokenizer of the LM (moses, space...)")
    p.add_argument("--output", help="write here instead of stdout")
    p.add_argument("--cpu", action="store_true")
    return p


def main(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    if not 0 < args.temperature < float("inf"):
        p.error(f"--temperature must be a number > 0 (got {args.temperature:g}; a tiny value such as 1e-6 is greedy)")
    if args.num_samples < 1:
        p.error("--num-samples must be >= 1")
    if args.topk == 0 or args.topk < -1 or (args.topk > 0 and args.topp > 0):
        p.error(f"--topk must be positive (or -1), and cannot be combined with --topp (got {args.topk})")
    if args.topp != -1 and not 0 < args.topp <= 1:
        p.error(f"--topp must be -1 (off) or in (0, 1] (got {args.topp:g})")
    if args.max_len < 1:
        p.error(f"--max-len must be >= 1 (got {args.max_len})")
    if not 0 <= args.min_len <= args.max_len:
        p.error(f"--min-len must be between 0 and --max-len {args.max_len} (got {args.min_len})")
    if args.from_scratch < 0:
        p.error(f"--from-scratch must be >= 0 (got {args.from_scratch})")
    prompts = list(args.prompt)
    if args.prompts:
        if not os.path.isfile(args.prompts):
            p.error(f"--prompts {args.prompts}: no such file")
        try:
            prompts += text_input.read_lines(args.prompts, "--prompts")
        except text_input.TextInputError as e:
            p.error(str(e))
    prompts += [""] * args.from_scratch
    if not prompts:
        p.error("give --prompt, --prompts or --from-scratch N")

    try:
        hub = lm_hub.load_hub(args.path, args.data, args.bpe, args.bpe_codes, args.tokenizer, args.cpu)
    except FileNotFoundError as e:
        p.error(str(e))
    vocab = len(hub.task.target_dictionary)
    if args.topk > vocab:
        p.error(f"--topk {args.topk} exceeds the vocabulary of {args.path} ({vocab} words)")
    lines = []
    print(f"{PROG}: {SCORE}", file=sys.stderr)
    for i, prompt in enumerate(prompts):
        lines.append(f"P-{i}\t{prompt}")
        for k, (text, score) in enumerate(sample(hub, prompt, args.num_samples, args, args.seed + i)):
            lines.append(f"S-{i}-{k}\t{score:.4f}\t{text}")
    if args.output:
        from fairseq_local_core.file_io import write_lines

        write_lines(args.output, lines)
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
