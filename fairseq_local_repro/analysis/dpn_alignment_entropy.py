"""Alignment entropy of the four DPN-S2S decoder->encoder attention flows (Section 5.5, Table 5),
and alignment heatmaps of one sentence pair (Figure 2).

For every sentence of a binarized test set the trained model is run with teacher forcing on the
reference; for each flow (CNN/SAN decoder path x CNN/SAN encoder path) the alignment of every
target token (the softmax(q k^T) distribution over the source, Eq. 4; head-averaged for the SAN
path) gets its entropy -sum_i a_i log a_i, which is averaged over the target tokens of the
sentence (the end-of-sentence prediction included) and then over sentences.

    python scripts/analysis/dpn_alignment_entropy.py data-bin/iwslt14.de-en --path ckpt/checkpoint_best.pt \
        --gen-subset test [--layer last|mean|N] [--json entropy.json] [--heatmap fig2.png --sentence-id 0]
"""
import argparse
import json
import os
import sys
from typing import Dict, List

import torch

from fairseq_local import file_io
from fairseq_local_repro.analysis.figures import save_png

FLOWS = ("cc", "ca", "ac", "aa")  # decoder path, encoder path (c = CNN, a = SAN), as in Eq. 8
NAMES = {"c": "CNN", "a": "SAN"}


def token_entropies(attn: torch.Tensor) -> torch.Tensor:
    """attn: ... x S distributions -> ... entropies (natural log, 0 log 0 = 0)."""
    attn = attn.double()
    return -(attn * torch.where(attn > 0, attn.log(), torch.zeros_like(attn))).sum(-1)


def sentence_entropies(attn: torch.Tensor, target_mask: torch.Tensor) -> torch.Tensor:
    """attn: B x T x S, target_mask: B x T (True on real target tokens) -> B per-sentence mean entropy."""
    ent = token_entropies(attn) * target_mask
    return ent.sum(1) / target_mask.sum(1).clamp(min=1)


def select_layer(per_layer: List[torch.Tensor], layer: str) -> torch.Tensor:
    """Pick one decoder layer's alignment ('last', an index) or average the layers' distributions ('mean')."""
    if layer == "mean":
        return torch.stack(per_layer).mean(0)
    if layer == "last":
        return per_layer[-1]
    idx = int(layer)
    if not -len(per_layer) <= idx < len(per_layer):
        raise ValueError(f"--layer {layer}: this path has {len(per_layer)} decoder layers")
    return per_layer[idx]


class EntropyTable:
    """Accumulates per-sentence entropies per flow; ``means()`` averages over sentences."""

    def __init__(self):
        self.sums: Dict[str, float] = {}
        self.counts: Dict[str, int] = {}

    def add(self, flow: str, per_sentence: torch.Tensor):
        self.sums[flow] = self.sums.get(flow, 0.0) + per_sentence.sum().item()
        self.counts[flow] = self.counts.get(flow, 0) + per_sentence.numel()

    def means(self) -> Dict[str, float]:
        return {f: self.sums[f] / self.counts[f] for f in FLOWS if self.counts.get(f)}

    def format(self) -> str:
        m = self.means()
        cell = lambda f: f"{m[f]:.3f}" if f in m else "-"  # noqa: E731
        n = max(self.counts.values()) if self.counts else 0
        corner = "Encoder \\ Decoder"
        lines = [f"alignment entropy over {n} sentences (rows: encoder path, columns: decoder path)",
                 f"{corner:<18}{'CNN':>8}{'SAN':>8}"]
        for enc in "ca":
            lines.append(f"{NAMES[enc]:<18}{cell('c' + enc):>8}{cell('a' + enc):>8}")
        if any(f not in m for f in FLOWS):
            lines.append("- : a flow this model does not have (a path removed by --encoder-paths / --decoder-paths)")
        return "\n".join(lines)


def flows_of(model, sample, layer: str) -> Dict[str, torch.Tensor]:
    net = sample["net_input"]
    _, extra = model(**net, return_all_attn=True)
    if "flows" not in extra:
        raise SystemExit("error: the checkpoint is not a dpn_s2s model (its decoder returns no alignment flows)")
    return {f: select_layer(a, layer) for f, a in extra["flows"].items()}


def plot_heatmaps(flows: Dict[str, torch.Tensor], src_words: List[str], tgt_words: List[str], out: str):
    """Figure 2: a 2 x 2 grid, rows = decoder path, columns = encoder path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(4 + 0.35 * len(src_words) * 2, 2 + 0.3 * len(tgt_words) * 2),
                             squeeze=False)
    for r, dec in enumerate("ca"):
        for c, enc in enumerate("ca"):
            ax, f = axes[r][c], dec + enc
            ax.set_title(f"{'abcd'[2 * r + c]}) {NAMES[dec]} decoder -> {NAMES[enc]} encoder", fontsize=9)
            if f not in flows:
                ax.axis("off")
                continue
            ax.imshow(flows[f].cpu().float().numpy(), cmap="Greys", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(len(src_words)))
            ax.set_xticklabels(src_words, rotation=90, fontsize=7)
            ax.set_yticks(range(len(tgt_words)))
            ax.set_yticklabels(tgt_words, fontsize=7)
    fig.tight_layout()
    save_png(fig, out, dpi=150)
    plt.close(fig)


def write_json(path: str, obj):
    file_io.write_json(path, obj, indent=2)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="fairseq-preprocess output directory")
    p.add_argument("--path", required=True, help="DPN-S2S checkpoint")
    p.add_argument("--user-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "fairseq_local"))
    p.add_argument("--gen-subset", default="test")
    p.add_argument("--source-lang", default=None)
    p.add_argument("--target-lang", default=None)
    p.add_argument("--max-tokens", type=int, default=4000)
    p.add_argument("--layer", default="last", help="decoder layer whose alignments are used: last, mean or an index")
    p.add_argument("--json", default=None, help="write the table as JSON here")
    p.add_argument("--heatmap", default=None, help="write Figure 2 (PNG) for --sentence-id here")
    p.add_argument("--sentence-id", type=int, default=0, help="dataset index of the heatmap sentence")
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args(argv)
    if args.layer not in ("last", "mean"):
        try:
            int(args.layer)
        except ValueError:
            p.error(f"--layer must be last, mean or an integer, got {args.layer!r}")
    if not os.path.exists(args.path):
        p.error(f"--path {args.path}: no such checkpoint")
    return args


def main(argv=None):
    args = parse_args(argv)
    from fairseq import utils

    import fairseq_local

    # the plugin is imported already (this module uses it); another --user-dir is imported by fairseq
    if os.path.realpath(args.user_dir) != os.path.realpath(fairseq_local.__path__[0]):
        utils.import_user_module(argparse.Namespace(user_dir=os.path.abspath(args.user_dir)))
    overrides = {"data": args.data}
    if args.source_lang:
        overrides.update(source_lang=args.source_lang, target_lang=args.target_lang)
    from fairseq_local.safe_loading import load_model_checked

    models, _cfg, task = load_model_checked(args.path, {"dpn_s2s"}, "a dpn_s2s model (e.g. dpn_s2s_iwslt_de_en)",
                                            arg_overrides=overrides)
    model = models[0].eval()
    use_cuda = torch.cuda.is_available() and not args.cpu
    if use_cuda:
        model.cuda()
    task.load_dataset(args.gen_subset)
    dataset = task.dataset(args.gen_subset)
    if args.heatmap and not 0 <= args.sentence_id < len(dataset):
        raise SystemExit(f"error: --sentence-id {args.sentence_id} is outside {args.gen_subset} (0..{len(dataset) - 1})")
    itr = task.get_batch_iterator(dataset=dataset, max_tokens=args.max_tokens, max_positions=utils.resolve_max_positions(
        task.max_positions(), model.max_positions()), ignore_invalid_inputs=False).next_epoch_itr(shuffle=False)
    table, pad = EntropyTable(), task.target_dictionary.pad()
    with torch.no_grad():
        for sample in itr:
            sample = utils.move_to_cuda(sample) if use_cuda else sample
            flows = flows_of(model, sample, args.layer)
            tgt_mask = sample["net_input"]["prev_output_tokens"].ne(pad)
            for f, attn in flows.items():
                table.add(f, sentence_entropies(attn, tgt_mask))
            if args.heatmap and (sample["id"] == args.sentence_id).any():
                i = int((sample["id"] == args.sentence_id).nonzero()[0])
                src = sample["net_input"]["src_tokens"][i]
                src_keep = src.ne(task.source_dictionary.pad())
                tgt = sample["target"][i]
                tgt_keep = tgt.ne(pad)
                words = lambda d, toks: [d[t] for t in toks.tolist()]  # noqa: E731
                plot_heatmaps({f: a[i][tgt_keep][:, src_keep] for f, a in flows.items()},
                              words(task.source_dictionary, src[src_keep]), words(task.target_dictionary, tgt[tgt_keep]),
                              args.heatmap)
    print(table.format())
    if args.json:
        write_json(args.json, {"layer": args.layer, "subset": args.gen_subset, "sentences": max(table.counts.values()),
                               "entropy": table.means()})
    return table


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
