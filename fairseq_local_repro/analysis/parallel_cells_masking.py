"""Cell masking (parallel-cells paper Section 4.1, Figures 4-5): evaluate a trained parallel-cell
LM with cell i's hidden state zeroed at test time, for every i, and report the perplexity overall,
per word group and per word of the groups (the perplexity of predicting those words), as a table,
a JSON file and a bar chart PNG (one panel per group, one bar per masked model, like Figure 5).

Word groups file: one group per line, ``NAME: word word ...`` (``#`` starts a comment). Example::

    copular verbs: is was are were be been
    prepositions: of in to for on with

Usage::

    python scripts/analysis/parallel_cells_masking.py --path checkpoints/.../checkpoint_best.pt \
        --data data-bin/ptb --gen-subset test --word-groups groups.txt --out masking.png [--json out.json]

``--layer`` picks the layer whose cells are masked (default: every layer, mask i = cell i of each;
the paper's model has one layer). The model must be a parallel-cell LM (``parallel_lstm_lm``).
"""
import argparse
import json
import math
import os
import sys
from typing import Dict, List, Tuple

import torch

from fairseq_local_core.errors import InputFileError
from fairseq_local_core.file_io import write_json
from fairseq_local_repro.analysis.figures import save_png


def parse_word_groups(path: str) -> List[Tuple[str, List[str]]]:
    """The groups of a ``--word-groups`` file; a malformed line is :class:`InputFileError` naming
    the file and line (one line on the command line)."""
    groups = []
    if not os.path.isfile(path):
        raise InputFileError(f"--word-groups {path}: no such file")
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").split("#", 1)[0].strip()
            except UnicodeDecodeError:
                raise InputFileError(f"{path}:{lineno}: not UTF-8") from None
            if not line:
                continue
            if ":" not in line:
                raise InputFileError(f"{path}:{lineno}: expected 'NAME: word word ...'")
            name, words = line.split(":", 1)
            if not name.strip() or not words.split():
                raise InputFileError(f"{path}:{lineno}: a group needs a name and at least one word")
            groups.append((name.strip(), words.split()))
    if not groups:
        raise InputFileError(f"{path}: no word groups found")
    return groups


@torch.no_grad()
def score_tokens(model, task, dataset, batch_size: int, use_cuda: bool):
    """Summed negative log-likelihood and count per target word id over the whole split."""
    from fairseq import utils

    vocab = len(task.target_dictionary)
    nll, count = torch.zeros(vocab, dtype=torch.float64), torch.zeros(vocab, dtype=torch.float64)
    pad = task.target_dictionary.pad()
    itr = task.eval_lm_dataloader(dataset=dataset, max_tokens=36000, batch_size=batch_size, num_workers=0)
    for sample in itr:
        if use_cuda:
            sample = utils.move_to_cuda(sample)
        net_out = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_out, log_probs=True, sample=sample)
        target = sample["target"]
        lp = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        keep = target.ne(pad)
        ids = target[keep].cpu()
        nll.index_add_(0, ids, -lp[keep].double().cpu())
        count.index_add_(0, ids, torch.ones_like(ids, dtype=torch.float64))
    return nll, count


def perplexity(nll: torch.Tensor, count: torch.Tensor, ids=None) -> float:
    if ids is not None:
        nll, count = nll[ids], count[ids]
    n = count.sum().item()
    return math.exp(nll.sum().item() / n) if n > 0 else float("nan")


def masking_table(model, task, dataset, groups, layer, batch_size, use_cuda) -> Dict:
    decoder = model.decoder
    if not hasattr(decoder, "mask_cells"):
        raise ValueError(f"{type(model).__name__} has no parallel cells to mask (use a parallel_lstm_lm checkpoint)")
    layers = list(decoder.layers) if layer is None else [decoder.layers[layer]]
    wide = {lay.wide for lay in layers}
    if len(wide) != 1:
        raise ValueError(f"--layer all needs the same wide in every layer (got {sorted(wide)}); pick one --layer")
    wide = wide.pop()
    d = task.target_dictionary
    group_ids = []
    for name, words in groups:
        known = [w for w in words if d.index(w) != d.unk()]
        for w in words:
            if w not in known:
                print(f"warning: word group {name!r}: {w!r} is not in the dictionary, skipped", file=sys.stderr)
        group_ids.append((name, known))
    conditions = ["none"] + [f"mask{i + 1}" for i in range(wide)]
    result = {"conditions": conditions, "overall": {}, "groups": {}, "words": {}}
    for c, cond in enumerate(conditions):
        decoder.mask_cells(layer, [] if c == 0 else [c - 1])
        nll, count = score_tokens(model, task, dataset, batch_size, use_cuda)
        result["overall"][cond] = perplexity(nll, count)
        for name, words in group_ids:
            ids = torch.tensor([d.index(w) for w in words], dtype=torch.long)
            result["groups"].setdefault(name, {})[cond] = perplexity(nll, count, ids)
            for w in words:
                result["words"].setdefault(w, {})[cond] = perplexity(nll, count, torch.tensor([d.index(w)]))
    decoder.mask_cells(layer, [])
    result["group_words"] = {name: words for name, words in group_ids}
    return result


def plot(result: Dict, out_png: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = result["conditions"]
    panels = [("overall", [("all words", result["overall"])])]
    for name, words in result["group_words"].items():
        panels.append((name, [(w, result["words"][w]) for w in words] + [("(group)", result["groups"][name])]))
    most_bars = max(len(bars) for _, bars in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(6, 0.3 * most_bars * len(conds) + 2), 3 * len(panels)),
                             squeeze=False)
    width = 0.8 / len(conds)
    for ax, (title, bars) in zip(axes[:, 0], panels):
        for c, cond in enumerate(conds):
            xs = [i + c * width for i in range(len(bars))]
            ax.bar(xs, [b[1][cond] for b in bars], width, label=cond)
        ax.set_xticks([i + width * (len(conds) - 1) / 2 for i in range(len(bars))])
        ax.set_xticklabels([b[0] for b in bars])
        ax.set_xlim(-0.5, len(bars) - 0.5 + width * (len(conds) - 1))
        ax.set_ylabel("perplexity")
        ax.set_title(title)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(conds), fontsize="small")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    save_png(fig, out_png)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True, help="parallel_lstm_lm checkpoint")
    p.add_argument("--data", required=True, help="binarized data directory (fairseq-preprocess --only-source)")
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--word-groups", required=True, help="file of 'NAME: word word ...' lines")
    p.add_argument("--layer", default="all", help="layer index whose cells are masked, or 'all'")
    p.add_argument("--batch-size", type=int, default=20)
    p.add_argument("--out", required=True, help="bar chart PNG")
    p.add_argument("--json", help="also write the numbers here")
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args(argv)

    import fairseq_local  # noqa: F401  (registers the models and the stateful task)
    from fairseq_local.safe_loading import load_model_checked

    groups = parse_word_groups(args.word_groups)
    layer = None if args.layer == "all" else int(args.layer)
    if not os.path.exists(args.path):
        raise FileNotFoundError(f"--path {args.path}: no such checkpoint")
    models, _cfg, task = load_model_checked(args.path, {"parallel_lstm_lm"}, "a parallel_lstm_lm model",
                                            arg_overrides={"data": args.data})
    model = models[0].eval()
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        model.cuda()
    task.load_dataset(args.gen_subset)
    result = masking_table(model, task, task.dataset(args.gen_subset), groups, layer, args.batch_size, use_cuda)

    conds = result["conditions"]
    print("\t".join(["words"] + conds))
    print("\t".join(["overall"] + [f"{result['overall'][c]:.2f}" for c in conds]))
    for name in result["groups"]:
        print("\t".join([name] + [f"{result['groups'][name][c]:.2f}" for c in conds]))
        for w in result["group_words"][name]:
            print("\t".join([f"  {w}"] + [f"{result['words'][w][c]:.2f}" for c in conds]))
    plot(result, args.out)
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
