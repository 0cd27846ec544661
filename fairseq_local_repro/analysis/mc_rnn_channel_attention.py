"""Draw the channel-attention map of one sentence (MC-RNN paper, Figure 3) to a PNG.

    python scripts/analysis/mc_rnn_channel_attention.py --path CKPT --data BIN_DIR \
        --sentence "home-grown champions have been few and far between at the italian open ." \
        [--side encoder|decoder] [--layer 0] [--direction forward|backward] [--target "..."] \
        --out figure3.png [--tsv weights.tsv]

The sentence is given as it was preprocessed (tokenized / BPE'd like the training data).  For a
seq2seq ``mc_rnn`` model ``--side encoder`` (default) shows the encoder layer's channel weights
alpha_t^k (Eq. 5) over the source; ``--side decoder`` feeds ``--target`` (teacher forcing) and
shows a decoder layer.  For an ``mc_rnn_lm`` model the sentence is the LM input.  Darker cells are
larger weights, as in the paper's figure; the weights are also printed (and written with --tsv).
"""
import argparse
import os

import torch

import fairseq_local  # noqa: F401
from fairseq_local.safe_loading import load_model_checked
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local_core.file_io import write_lines
from fairseq_local_repro.analysis.figures import save_png


def channel_weights(model, task, sentence, side="encoder", layer=0, direction="forward", target=None):
    """Returns (tokens, alpha[T, k]) for the chosen MC-RNN layer."""
    is_lm = not hasattr(model, "encoder")
    if is_lm:
        side = "decoder"
    src_dict = task.target_dictionary if is_lm else task.source_dictionary
    src = src_dict.encode_line(sentence, add_if_not_exist=False, append_eos=not is_lm).long().unsqueeze(0)
    if side == "encoder":
        layers = model.encoder.layers if direction == "forward" else model.encoder.backward_layers
    else:
        layers = model.decoder.layers
    if not 0 <= layer < len(layers):
        raise SystemExit(f"--layer must be in [0, {len(layers) - 1}] (got {layer})")
    mc = layers[layer]
    if not isinstance(mc, MultiChannelRNNLayer):
        raise SystemExit(f"--path: layer {layer} of the {side} is {type(mc).__name__}, not an MC-RNN layer")
    mc.record_attention = True
    collected = []  # a decoder with input feeding calls the layer once per step
    hook = mc.register_forward_hook(lambda module, inp, out: collected.append(module.last_attention))
    with torch.no_grad():
        if is_lm:
            model(src)
            tokens = sentence.split()
        else:
            enc = model.encoder(src, torch.tensor([src.size(1)]))
            tokens = sentence.split() + ["</s>"]
            if side == "decoder":
                if target is None:
                    raise SystemExit("--side decoder needs --target (the reference or a hypothesis)")
                tgt = task.target_dictionary.encode_line(target, add_if_not_exist=False, append_eos=False).long()
                prev = torch.cat([torch.tensor([task.target_dictionary.eos()]), tgt]).unsqueeze(0)
                model.decoder(prev, enc)
                tokens = ["</s>"] + target.split()
    hook.remove()
    mc.record_attention = False
    alpha = torch.cat(collected, 0)[:, 0]  # T x k
    return tokens, alpha


def draw(tokens, alpha, out, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = alpha.size(1)
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(tokens)), 0.6 * k + 1.6))
    im = ax.imshow(alpha.t().numpy(), cmap="Greys", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(tokens)))
    ax.set_xticklabels(tokens, rotation=60, ha="right", fontsize=9)
    ax.set_yticks(range(k))
    ax.set_yticklabels([f"channel {i + 1}" for i in range(k)])
    for t in range(alpha.size(0)):
        for c in range(k):
            v = float(alpha[t, c])
            ax.text(t, c, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v > 0.5 else "black")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    save_png(fig, out, dpi=150)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--path", required=True, help="checkpoint of an mc_rnn or mc_rnn_lm model")
    p.add_argument("--data", required=True, help="binarized data dir (for the dictionaries)")
    p.add_argument("--sentence", required=True, help="preprocessed sentence (source, or LM input)")
    p.add_argument("--target", help="preprocessed target for --side decoder")
    p.add_argument("--side", choices=["encoder", "decoder"], default="encoder")
    p.add_argument("--layer", type=int, default=0)
    p.add_argument("--direction", choices=["forward", "backward"], default="forward")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--tsv", help="also write the weights as token<TAB>alpha_1..alpha_k")
    a = p.parse_args()
    if not os.path.exists(a.path):
        raise SystemExit(f"--path: no such checkpoint: {a.path}")
    models, _cfg, task = load_model_checked(a.path, {"mc_rnn", "mc_rnn_lm"}, "an mc_rnn or mc_rnn_lm model",
                                            arg_overrides={"data": a.data})
    model = models[0].eval()
    tokens, alpha = channel_weights(model, task, a.sentence, a.side, a.layer, a.direction, a.target)
    for tok, row in zip(tokens, alpha.tolist()):
        print(tok + "\t" + "\t".join(f"{v:.3f}" for v in row))
    if a.tsv:
        write_lines(a.tsv, (tok + "\t" + "\t".join(f"{v:.4f}" for v in row)
                            for tok, row in zip(tokens, alpha.tolist())))
    draw(tokens, alpha, a.out, f"MC-RNN channel attention ({a.side} layer {a.layer}, {a.direction})")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
