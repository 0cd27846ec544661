"""Visualise the Eq. 21 gating weights of competing lattice edges for one sentence (PNG).

    python scripts/analysis/lattice_gates.py --path ckpt/checkpoint_best.pt --data data-bin/lattice \
        --sentence "我们的两个被告人在法庭上表示不服。" [--segmenters jieba,thulac,snownlp] --out gates.png
    python scripts/analysis/lattice_gates.py ... --lattice-line "下 雨 天<TAB>0:1 0:3 1:3"

Every edge e_{i:j} is drawn as a bar over its characters, stacked by length, labelled with its
normalised gate weight in the forward direction (weight among the edges entering v_j) and the
backward direction (among the edges leaving v_i), as in the paper's Figure 3 discussion.  For
DWL-GRU the weights are those of the edge-specific states h_t^(k) (Eq. 20-21), for SWL-GRU those
of the preceding states (Eq. 11).  A table of the weights is printed as well.
"""
import argparse
import sys

import torch

import fairseq_local  # noqa: F401
from fairseq_local_core.lattice import Lattice, LatticeBuilder
from fairseq_local.data.lattice_dataset import collate_lattices, pack_lattices
from fairseq_local_repro.analysis.figures import save_png


def edge_weights(model, lattice: Lattice, src_dict):
    """{(i, j): (forward weight, backward weight)} for one lattice under ``model``'s encoder."""
    batch = collate_lattices(pack_lattices([lattice], src_dict), src_dict.pad(), left_pad=False)
    with torch.no_grad():
        out = model.encoder(**batch, return_extras=True)
    extras = out["lattice_extras"]
    T = lattice.n_chars
    result = {}
    for direction, (sched, gates) in enumerate(zip(extras["schedules"], extras["gates"])):
        if gates is None:
            raise ValueError("this model uses pooling composition: it has no gate weights")
        ends = sched.node_pos[sched.edge_node].tolist()
        for e, (other, p) in enumerate(zip(sched.edge_other.tolist(), ends)):
            edge = (other, p) if direction == 0 else (T - p, T - other)  # backward ran mirrored
            fw_bw = result.setdefault(edge, [None, None])
            fw_bw[direction] = float(gates[e])
    return {e: tuple(w) for e, w in sorted(result.items())}


def plot(lattice: Lattice, weights, out_path: str, title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    cjk = [f.name for f in font_manager.fontManager.ttflist
           if any(k in f.name for k in ("CJK", "Hei", "Song", "Ming", "Kai", "WenQuanYi", "Droid Sans Fallback"))]
    if cjk:
        plt.rcParams["font.family"] = cjk[0]
    n = lattice.n_chars
    levels = {}
    for i, j in lattice.edges:  # stack edges of the same length; place overlapping ones on new rows
        row = 0
        while any(not (j <= a or i >= b) for a, b in levels.get(row, [])):
            row += 1
        levels.setdefault(row, []).append((i, j))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * n), 1.2 + 0.7 * len(levels)))
    cmap = plt.get_cmap("viridis")
    for row, edges in levels.items():
        for i, j in edges:
            fw, bw = weights.get((i, j), (None, None))
            w = fw if fw is not None else 0.0
            ax.add_patch(plt.Rectangle((i + 0.05, row + 0.1), j - i - 0.1, 0.8, color=cmap(w), alpha=0.85))
            label = lattice.word(i, j) if cjk else f"e{i}:{j}"
            ax.text((i + j) / 2, row + 0.5, f"{label}\n{fw:.2f} / {bw:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if w < 0.6 else "black")
    ax.set_xlim(0, n)
    ax.set_ylim(-0.8, len(levels))
    for k, c in enumerate(lattice.chars):
        ax.text(k + 0.5, -0.4, c if cjk else f"c{k + 1}", ha="center", va="center", fontsize=10)
    ax.set_yticks([])
    ax.set_xticks(range(n + 1))
    ax.set_xlabel("lattice nodes v_0..v_N; labels: forward / backward gate weight")
    ax.set_title(title or "Eq. 21 gate weights of competing edges")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, 1))
    fig.colorbar(sm, ax=ax, label="forward weight")
    fig.tight_layout()
    save_png(fig, out_path, dpi=150)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--path", required=True, help="checkpoint of a lattice_rnnsearch model with gating")
    p.add_argument("--data", help="data dir with the dictionaries (default: the checkpoint's)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--sentence", help="raw Chinese sentence (lattice built with --segmenters)")
    g.add_argument("--lattice-line", help="a line of a lattice file")
    p.add_argument("--segmenters", default="jieba,thulac,snownlp")
    p.add_argument("--out", default="lattice_gates.png")
    args = p.parse_args(argv)
    from fairseq_local.safe_loading import load_model_checked

    overrides = {"data": args.data} if args.data else {}
    models, _cfg, task = load_model_checked(args.path, {"lattice_rnnsearch"},
                                            "a lattice_rnnsearch model (e.g. lattice_dwl_gating)", arg_overrides=overrides)
    model = models[0].eval()
    if args.sentence:
        lattice = LatticeBuilder(args.segmenters.split(","))(args.sentence, "--sentence")
    else:
        lattice = Lattice.from_line(args.lattice_line.replace("<TAB>", "\t"), "--lattice-line")
    weights = edge_weights(model, lattice, task.source_dictionary)
    print("edge\tword\tforward\tbackward")
    for (i, j), (fw, bw) in weights.items():
        print(f"{i}:{j}\t{lattice.word(i, j)}\t{fw:.3f}\t{bw:.3f}")
    plot(lattice, weights, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
