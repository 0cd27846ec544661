"""Per-update learning probe for MC-RNN against its Baseline-RNN on a small real corpus.

    python scripts/analysis/mc_rnn_learning_probe.py --data ../shared/data/multi30k-de-en \
        --pairs 2000 --updates 300 --dims 64 \
        --system lstm=rnnsearch_iwslt_de_en \
        --system k1=mc_rnn_iwslt_de_en_3:--mc-channels=1 \
        --system k3=mc_rnn_iwslt_de_en_3 --json probe.json

Every system sees the same batches in the same order from the same seed (word-level vocabulary
of the first ``--pairs`` lowercased, whitespace-split pairs; the next ``--valid-pairs`` held out),
trains with Adam and label-smoothed cross entropy normalised per target token (as fairseq does),
and records:

* the training loss of every update and the held-out loss every ``--eval-every`` updates;
* per-parameter-group gradient norms (W_j ``block_weight``, ``weight_hh``, ``weight_ih``,
  channel attention, the rest) every ``--eval-every`` updates;
* the mean entropy of the channel weights alpha (Eq. 5) on the held-out pairs, divided by log k:
  1 when alpha is uniform, 0 when one channel takes all the weight;
* the gradient *path length* profile of the first encoder layer, at initialisation and trained: the norm of
  d h_T / d x_t (summed over the batch) as a function of the distance T - t (Section 5.2 argues
  that MC-RNN's block averaging shortens gradient paths; this measures it).

The models are built through fairseq's architecture registry with ``--dims`` embedding and hidden
units, so what is probed is the registered arch, with only its width changed.
"""
import argparse
import json
import math
import os
import random
from collections import Counter
from types import SimpleNamespace
from typing import Dict, List

import torch
import torch.nn.functional as F

import fairseq_local  # noqa: F401
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local_core.file_io import write_json


# ---- data --------------------------------------------------------------------------------------
def read_pairs(data_dir: str, src: str, tgt: str, n: int) -> List[tuple]:
    with open(os.path.join(data_dir, f"train.{src}"), encoding="utf-8") as fs, \
            open(os.path.join(data_dir, f"train.{tgt}"), encoding="utf-8") as ft:
        pairs = []
        for s, t in zip(fs, ft):
            pairs.append((tokenize(s), tokenize(t)))
            if len(pairs) == n:
                break
    return pairs


def tokenize(line: str) -> List[str]:
    """Lowercase, split off the final full stop and commas (Multi30k captions), split on spaces."""
    return line.lower().replace(",", " ,").replace(".", " .").split()


def build_dict(sentences, max_words: int) -> Dictionary:
    d = Dictionary()
    for w, _ in Counter(w for s in sentences for w in s).most_common(max_words):
        d.add_symbol(w)
    d.finalize(padding_factor=1)
    return d


def make_batches(pairs, src_dict, tgt_dict, batch_size: int, seed: int):
    """Length-bucketed batches (left-padded source, right-padded target, as fairseq builds them),
    shuffled once with ``seed``."""
    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    encoded = [(torch.tensor([src_dict.index(w) for w in s] + [eos]),
                torch.tensor([tgt_dict.index(w) for w in t] + [eos])) for s, t in pairs]
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i][0]), len(encoded[i][1])))
    batches = []
    for start in range(0, len(order), batch_size):
        items = [encoded[i] for i in order[start:start + batch_size]]
        S, T = max(len(s) for s, _ in items), max(len(t) for _, t in items)
        src = torch.full((len(items), S), pad)
        tgt = torch.full((len(items), T), pad)
        prev = torch.full((len(items), T), pad)
        for b, (s, t) in enumerate(items):
            src[b, S - len(s):] = s
            tgt[b, :len(t)] = t
            prev[b, 0] = eos
            prev[b, 1:len(t)] = t[:-1]
        lengths = torch.tensor([len(s) for s, _ in items])
        batches.append((src, lengths, prev, tgt))
    random.Random(seed).shuffle(batches)
    return batches


# ---- models ------------------------------------------------------------------------------------
def parse_system(spec: str):
    """``name=arch[:--opt=value:--flag...]`` -> (name, arch, {opt: value})."""
    name, rest = spec.split("=", 1)
    arch, *opts = rest.split(":")
    overrides = {}
    for opt in opts:
        key, _, value = opt.lstrip("-").partition("=")
        key = key.replace("-", "_")
        if value == "":
            overrides[key] = True
        else:
            try:
                overrides[key] = int(value)
            except ValueError:
                try:
                    overrides[key] = float(value)
                except ValueError:
                    overrides[key] = value
    return name, arch, overrides


def build(arch: str, overrides: Dict, dims: int, layers: int, dropout: float, src_dict, tgt_dict, seed: int):
    args = SimpleNamespace(**overrides)
    for key in ("encoder_embed_dim", "decoder_embed_dim", "encoder_hidden_size", "decoder_hidden_size"):
        setattr(args, key, getattr(args, key, dims))
    if layers:
        args.encoder_layers = getattr(args, "encoder_layers", layers)
        args.decoder_layers = getattr(args, "decoder_layers", layers)
    args.dropout = getattr(args, "dropout", dropout)
    ARCH_CONFIG_REGISTRY[arch](args)
    torch.manual_seed(seed)
    task = SimpleNamespace(source_dictionary=src_dict, target_dictionary=tgt_dict)
    return ARCH_MODEL_REGISTRY[arch].build_model(args, task)


_TORCH_RNN_NAMES = {"weight_ih": "rnn.weight_ih_l0", "bias_ih": "rnn.bias_ih_l0", "bias_hh": "rnn.bias_hh_l0",
                    "weight_hh": "rnn.weight_hh_l0", "block_weight": "rnn.weight_hh_l0"}


def copy_shared_init(model, reference) -> int:
    """Paired initialisation: give ``model`` the initial values of ``reference`` (the baseline built
    from the same seed) wherever the two hold the same thing -- embeddings, attention, readout and
    output layers by name, and for MC-RNN layers W_ih, b_ih, b_hh and, in gate space, the first lag
    W_1 <- the LSTM's W_hh (the other lags keep their own draw).  With k = 1 in gate space the model
    then starts exactly where the baseline starts.  Returns the number of values copied."""
    ref = dict(reference.named_parameters())
    copied = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            prefix, _, leaf = name.rpartition(".")
            src = ref.get(name)
            if src is None and leaf in _TORCH_RNN_NAMES:
                src = ref.get(f"{prefix}.{_TORCH_RNN_NAMES[leaf]}")
            if src is None:
                continue
            if src.shape == p.shape:
                p.copy_(src)
            elif leaf == "block_weight" and p.dim() == 3 and p.shape[1:] == src.shape:
                p[0].copy_(src)
            else:
                continue
            copied += src.numel()
    return copied


def label_smoothed_loss(logits, target, pad, eps):
    """fairseq's label_smoothed_cross_entropy, summed over non-pad tokens; returns (loss, ntokens)."""
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.size(-1))
    target = target.reshape(-1)
    keep = target.ne(pad)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)
    smooth = -lprobs.sum(-1)
    eps_i = eps / (lprobs.size(-1) - 1)
    loss = (1.0 - eps - eps_i) * nll + eps_i * smooth
    return loss[keep].sum(), nll[keep].sum(), int(keep.sum())


def group_of(name: str) -> str:
    for key, group in (("block_weight", "W_j"), ("weight_hh", "W_hh"), ("weight_ih", "W_ih"),
                       ("att_", "channel_attention"), ("embed", "embeddings")):
        if key in name:
            return group
    return "other"


def grad_norms(model) -> Dict[str, float]:
    sq: Dict[str, float] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            g = group_of(name)
            sq[g] = sq.get(g, 0.0) + float(p.grad.double().pow(2).sum())
    return {g: math.sqrt(v) for g, v in sorted(sq.items())}


def heldout(model, batches, pad):
    model.eval()
    mc_layers = [m for m in model.modules() if isinstance(m, MultiChannelRNNLayer) and m.channels > 1]
    for m in mc_layers:
        m.record_attention = True
    total, ntok, ent_sum, ent_n = 0.0, 0, 0.0, 0
    with torch.no_grad():
        for src, lengths, prev, tgt in batches:
            logits, _ = model(src, lengths, prev)
            _, nll, n = label_smoothed_loss(logits, tgt, pad, 0.0)
            total, ntok = total + float(nll), ntok + n
            for m in mc_layers:
                valid = m.last_attention.sum(-1) > 0  # padded positions have alpha = 0
                a = m.last_attention.clamp_min(1e-12)
                ent = -(a * a.log()).sum(-1) / math.log(m.channels)  # 1 = uniform, 0 = one channel
                ent_sum, ent_n = ent_sum + float(ent[valid].sum()), ent_n + int(valid.sum())
    for m in mc_layers:
        m.record_attention = False
    model.train()
    return total / ntok, (ent_sum / ent_n if ent_n else None)


def path_length_profile(model, batches, max_len: int = 16) -> List[float]:
    """||d h_T / d x_t|| of the first forward encoder layer, for distances 0..max_len-1, averaged
    over held-out sentences of at least ``max_len`` tokens (no padding inside the window)."""
    layer = model.encoder.layers[0]
    model.eval()
    profile = torch.zeros(max_len, dtype=torch.float64)
    count = 0
    for src, lengths, _, _ in batches:
        keep = lengths >= max_len
        if not bool(keep.any()):
            continue
        toks = src[keep][:, -max_len:]  # last max_len tokens of left-padded sources: no padding
        x = model.encoder.embed_tokens(toks).transpose(0, 1).detach().requires_grad_(True)
        out, _ = layer(x)
        out[-1].sum().backward()
        profile += x.grad.double().norm(dim=-1).sum(1).flip(0)  # index = distance T - t
        count += int(keep.sum())
    model.train()
    return (profile / max(count, 1)).tolist()


# ---- training ----------------------------------------------------------------------------------
def run_system(name, arch, overrides, opts, src_dict, tgt_dict, train_batches, valid_batches, log=print,
               reference=None):
    model = build(arch, overrides, opts.dims, opts.layers, opts.dropout, src_dict, tgt_dict, opts.seed)
    if reference is not None:
        copy_shared_init(model, reference)
    optim = torch.optim.Adam(model.parameters(), lr=opts.lr)
    pad = tgt_dict.pad()
    profile_at_init = path_length_profile(model, valid_batches)
    torch.manual_seed(opts.seed)  # the same dropout masks for every system of the same shape
    curve, evals = [], []
    for update in range(1, opts.updates + 1):
        src, lengths, prev, tgt = train_batches[(update - 1) % len(train_batches)]
        logits, _ = model(src, lengths, prev)
        loss, nll, n = label_smoothed_loss(logits, tgt, pad, opts.label_smoothing)
        optim.zero_grad()
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), opts.clip_norm)
        optim.step()
        curve.append(nll.item() / n / math.log(2))
        if update % opts.eval_every == 0 or update == opts.updates:
            norms = grad_norms(model)
            vloss, entropy = heldout(model, valid_batches, pad)
            evals.append({"update": update, "valid_nll_bits": vloss / math.log(2), "grad_norms": norms,
                          "alpha_entropy": entropy})
            log(f"{name} update {update}: train nll {curve[-1]:.3f} bits, valid {vloss / math.log(2):.3f} bits, "
                f"alpha entropy {entropy if entropy is None else round(entropy, 3)}")
    return {
        "system": name, "arch": arch, "overrides": overrides,
        "params": sum(p.numel() for p in model.parameters()),
        "train_nll_bits": curve, "evals": evals,
        "final_valid_nll_bits": evals[-1]["valid_nll_bits"],
        "path_length_profile": path_length_profile(model, valid_batches),
        "path_length_profile_at_init": profile_at_init,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder with train.SRC / train.TGT raw text")
    p.add_argument("--src", default="de")
    p.add_argument("--tgt", default="en")
    p.add_argument("--pairs", type=int, default=2000)
    p.add_argument("--valid-pairs", type=int, default=200)
    p.add_argument("--max-words", type=int, default=2000, help="vocabulary size per side")
    p.add_argument("--dims", type=int, default=64)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--updates", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--system", action="append", required=True,
                   help="name=arch[:--option=value...], e.g. k1=mc_rnn_iwslt_de_en_3:--mc-channels=1")
    p.add_argument("--paired-init", action="store_true",
                   help="start every system from the first system's initial values where they hold the same "
                        "thing (see copy_shared_init), so differences are the architecture's, not the draw's")
    p.add_argument("--json", help="write the curves and probes here")
    opts = p.parse_args(argv)
    for key in ("pairs", "valid_pairs", "dims", "updates", "eval_every", "batch_size", "max_words"):
        if getattr(opts, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be >= 1")
    torch.set_num_threads(1)
    pairs = read_pairs(opts.data, opts.src, opts.tgt, opts.pairs + opts.valid_pairs)
    if len(pairs) < opts.pairs + opts.valid_pairs:
        p.error(f"--data {opts.data}: only {len(pairs)} pairs, need {opts.pairs + opts.valid_pairs}")
    train, valid = pairs[:opts.pairs], pairs[opts.pairs:]
    src_dict = build_dict([s for s, _ in train], opts.max_words)
    tgt_dict = build_dict([t for _, t in train], opts.max_words)
    train_batches = make_batches(train, src_dict, tgt_dict, opts.batch_size, opts.seed)
    valid_batches = make_batches(valid, src_dict, tgt_dict, opts.batch_size, 0)
    systems = [parse_system(spec) for spec in opts.system]
    reference = None
    if opts.paired_init:
        name, arch, overrides = systems[0]
        reference = build(arch, overrides, opts.dims, opts.layers, opts.dropout, src_dict, tgt_dict, opts.seed)
    results = [run_system(*system, opts, src_dict, tgt_dict, train_batches, valid_batches, reference=reference)
               for system in systems]
    if opts.json:
        write_json(opts.json, {"settings": {k: v for k, v in vars(opts).items() if k != "json"}, "systems": results})
    for r in results:
        print(f"{r['system']}\t{r['arch']}\tparams {r['params']}\tfinal valid nll {r['final_valid_nll_bits']:.4f} bits")
    return results


if __name__ == "__main__":
    main()
