"""Alignment entropy of the four DPN-S2S decoder->encoder attention flows (Section 5.5, Table 5),
and alignment heatmaps of one sentence pair (Figure 2).

For every sentence of a binarized test set the trained model is run with teacher forcing on the
reference; for each flow (CNN/SAN decoder path x CNN/SAN encoder path) the alignment of every
target token (the softmax(q k^T) distribution over the source, Eq. 4; head-averaged for the SAN
path) gets its entropy -sum_i a_i log a_i, which is averaged over the target tokens of the
sentence (the end-of-sentence prediction included) and then over sentences.  The JSON also holds
every decoder layer's entropies and, for the SAN decoder path, every head's, each also divided by
the log of the sentence's source length (the entropy of a uniform alignment: 1 = uniform, 0 = one
source position); sentences with a one-position source have no normalised entropy.

    python scripts/analysis/dpn_alignment_entropy.py data-bin/iwslt14.de-en --path ckpt/checkpoint_best.pt \
        --gen-subset test [--layer last|mean|N] [--json entropy.json] [--heatmap fig2.png --sentence-id 0]
"""
import argparse
import json
import os
import sys
from typing import Dict, List

import torch

from fairseq_local_core import file_io
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


def normalised_sentence_entropies(attn: torch.Tensor, target_mask: torch.Tensor,
                                  source_lengths: torch.Tensor) -> torch.Tensor:
    """attn: ... x B x T x S, target_mask: B x T, source_lengths: B -> ... x B per-sentence mean of
    the token entropies divided by log(source length); NaN for a sentence whose source has one position."""
    log_len = source_lengths.double().log()
    ent = token_entropies(attn) / log_len[:, None]
    ent = torch.where(target_mask, ent, torch.zeros_like(ent))
    return torch.where(source_lengths > 1, ent.sum(-1) / target_mask.sum(1).clamp(min=1),
                       torch.full_like(log_len, float("nan")))


def head_weights(mha, query: torch.Tensor, key: torch.Tensor, key_padding_mask) -> torch.Tensor:
    """Every head's alignment of fairseq's ``MultiheadAttention`` (no bias_k / zero attention),
    recomputed from its projections: softmax(q k^T / sqrt(head dim)) with padded keys masked.
    query: T x B x d, key: S x B x d -> heads x B x T x S."""
    (t, b, d), s, h = query.shape, key.size(0), mha.num_heads
    q = (mha.q_proj(query) * mha.scaling).view(t, b, h, d // h).permute(1, 2, 0, 3)
    k = mha.k_proj(key).view(s, b, h, d // h).permute(1, 2, 3, 0)
    scores = (q @ k).float()  # B x heads x T x S
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :].bool(), float("-inf"))
    return torch.softmax(scores, -1).transpose(0, 1)


class HeadCapture:
    """Forward hooks on the SAN decoder path's encoder-decoder attentions that record every head's
    alignment (``head_weights``) per flow and layer, checked against the head average the module
    returns.  ``weights``: {flow: {layer: heads x B x T x S}} of the last forward pass."""

    def __init__(self, model):
        self.weights: Dict[str, Dict[int, torch.Tensor]] = {}
        self.handles = []
        san = getattr(model.decoder, "san", None)
        for i, layer in enumerate(san.layers if san is not None else ()):
            for p, mha in getattr(layer, "encoder_attn", {}).items():
                self.handles.append(mha.register_forward_hook(self._hook("a" + p, i), with_kwargs=True))

    def _hook(self, flow: str, layer: int):
        def hook(module, args, kwargs, output):
            w = head_weights(module, kwargs["query"], kwargs["key"], kwargs.get("key_padding_mask"))
            if output[1] is not None and not torch.allclose(w.mean(0), output[1].float(), atol=1e-5):
                raise RuntimeError(f"flow {flow}, layer {layer}: recomputed head weights disagree with the module's")
            self.weights.setdefault(flow, {})[layer] = w
        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


class LayerHeadTable:
    """Per flow, decoder layer and head: sums of per-sentence (normalised) entropies, for means."""

    def __init__(self):
        self.sums: Dict[tuple, float] = {}
        self.counts: Dict[tuple, int] = {}

    def add(self, key: tuple, per_sentence: torch.Tensor):
        keep = ~per_sentence.isnan()
        self.sums[key] = self.sums.get(key, 0.0) + per_sentence[keep].sum().item()
        self.counts[key] = self.counts.get(key, 0) + int(keep.sum())

    def mean(self, key: tuple) -> float:
        return self.sums[key] / self.counts[key] if self.counts.get(key) else float("nan")

    def nested(self, kind: str) -> Dict[str, list]:
        """{flow: [value per layer]} (kind "layer"), or {flow: [[value per head] per layer]} ("head")."""
        out: Dict[str, list] = {}
        for key in sorted(k for k in self.sums if k[0] == kind):
            _, flow, layer, *head = key
            rows = out.setdefault(flow, [])
            while len(rows) <= layer:
                rows.append([] if kind == "head" else None)
            if kind == "head":
                rows[layer].append(round(self.mean(key), 4))
            else:
                rows[layer] = round(self.mean(key), 4)
        return out


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


def all_flows(model, sample) -> Dict[str, List[torch.Tensor]]:
    """{flow: [B x T x S alignment per decoder layer]} of a teacher-forced forward pass."""
    _, extra = model(**sample["net_input"], return_all_attn=True)
    if "flows" not in extra:
        raise SystemExit("error: the checkpoint is not a dpn_s2s model (its decoder returns no alignment flows)")
    return extra["flows"]


def flows_of(model, sample, layer: str) -> Dict[str, torch.Tensor]:
    return {f: select_layer(a, layer) for f, a in all_flows(model, sample).items()}


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
    table, layers, pad = EntropyTable(), LayerHeadTable(), task.target_dictionary.pad()
    heads = HeadCapture(model)
    with torch.no_grad():
        for sample in itr:
            sample = utils.move_to_cuda(sample) if use_cuda else sample
            per_layer = all_flows(model, sample)
            flows = {f: select_layer(a, args.layer) for f, a in per_layer.items()}
            tgt_mask = sample["net_input"]["prev_output_tokens"].ne(pad)
            src_len = sample["net_input"]["src_tokens"].ne(task.source_dictionary.pad()).sum(1)
            for f, attn in flows.items():
                table.add(f, sentence_entropies(attn, tgt_mask))
            for f, attns in per_layer.items():
                for i, attn in enumerate(attns):
                    layers.add(("layer", f, i), sentence_entropies(attn, tgt_mask))
                    layers.add(("layer_normalised", f, i), normalised_sentence_entropies(attn, tgt_mask, src_len))
            for f, by_layer in heads.weights.items():
                for i, w in by_layer.items():
                    for h, per_sentence in enumerate(normalised_sentence_entropies(w, tgt_mask, src_len)):
                        layers.add(("head", f, i, h), per_sentence)
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
    heads.remove()
    print(table.format())
    if args.json:
        write_json(args.json, {"layer": args.layer, "subset": args.gen_subset, "sentences": max(table.counts.values()),
                               "entropy": table.means(), "per_layer": layers.nested("layer"),
                               "per_layer_normalised": layers.nested("layer_normalised"),
                               "per_head_normalised": layers.nested("head")})
    return table


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
