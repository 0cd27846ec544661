"""Check a fairseq + fairseq_local installation (run by scripts/gpu/bootstrap.sh).

    python scripts/gpu/check_install.py [--arch mc_rnn_iwslt_de_en_3] [--device cuda|cpu] [--json OUT]
                                        [--fast-path [--tiny]]

Imports fairseq and the plugin, reports the versions and which of fairseq's compiled extensions
load (libbleu, data_utils_fast and token_block_utils_fast are required; the torch-ABI ones, libnat,
libbase and ngram_repeat_block_cuda, are optional and only reported), then builds ``--arch``
through fairseq's registry on ``--device`` (cuda when available; its paper dimensions on cuda, tiny
ones on cpu) and runs one training step (forward, backward, Adam) on a synthetic batch, requiring
a finite loss and finite gradients.  Prints one JSON object; exits non-zero with one line naming
what failed.

``--fast-path`` also checks the fast recurrent loops (``--rnn-impl cuda-graphs``: CUDA graphs of the
eager loop, and ``compiled``: the step compiled once; on cpu only ``compiled``): for one
layer of every family (MC-RNN-3 in gate space, the parallel cells, torch's GRU with a masked hole)
and the lattice encoder (the bidirectional DWL-GRU with gating of Su et al. 2017, Eq. 16-21, whose
loop advances one topological level per step over the padded level grid), fast == eager in fp32
(TF32 off) for outputs, final states and every gradient, twice with fresh inputs (the second call
replays the graph); then a small MC-RNN-2 model: a training step's loss and gradients, and beam-5
search, the same under each.  It reports each one's forward + backward milliseconds, the seconds of
its first call and what that call spent compiling and capturing (``fast_path.stats``).  Sizes: the issue's layer (T = 30, B = 128, H = 256) on cuda, and 128
lattices of 4 to 16 characters; ``--tiny`` (the default on cpu) a few units and 3 lattices.
"""
import argparse
import importlib
import json
import os
import sys
import time
import warnings

from fairseq_local_repro import clock

REQUIRED_EXTENSIONS = ["fairseq.libbleu", "fairseq.data.data_utils_fast", "fairseq.data.token_block_utils_fast"]
OPTIONAL_EXTENSIONS = ["fairseq.libnat", "fairseq.libbase", "fairseq.ngram_repeat_block_cuda", "fairseq.libnat_cuda"]
TINY = ("--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 --decoder-hidden-size 16 "
        "--attention-dim 16")


def fail(msg):
    print(f"check_install.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def versions():
    """The versions of Python, torch, numpy, fairseq and fairseq_local (imported here)."""
    import fairseq
    import numpy
    import torch

    import fairseq_local

    return {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
            "fairseq": fairseq.__version__, "fairseq_local": fairseq_local.__version__}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="mc_rnn_iwslt_de_en_3")
    p.add_argument("--arch-args", default=None, help="extra model args (default: tiny dims on cpu, none on cuda)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda when available")
    p.add_argument("--json", help="also write the report here")
    p.add_argument("--fast-path", action="store_true", help="also check --rnn-impl cuda-graphs and compiled against eager")
    p.add_argument("--tiny", action="store_true", help="--fast-path with a few units (default on cpu)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    warnings.filterwarnings("ignore", category=UserWarning)  # hydra/omegaconf deprecation chatter
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        import torch
        import numpy  # noqa: F401  (versions() reports it)
        import fairseq
        import fairseq_local  # noqa: F401
    except Exception as e:  # noqa: BLE001  (any import failure is the answer)
        fail(f"import failed: {type(e).__name__}: {e}")
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA device")
    report = {**versions(), "fairseq_path": os.path.dirname(fairseq.__file__), "device": device,
              "cuda_device": torch.cuda.get_device_name(0) if device == "cuda" else None,
              "extensions": {}}
    for name in REQUIRED_EXTENSIONS + OPTIONAL_EXTENSIONS:
        try:
            importlib.import_module(name)
            report["extensions"][name] = "ok"
        except Exception as e:  # noqa: BLE001  (ImportError, or OSError for an ABI mismatch)
            report["extensions"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    missing = [n for n in REQUIRED_EXTENSIONS if report["extensions"][n] != "ok"]
    if missing:
        fail(f"fairseq extension {missing[0]} does not load: {report['extensions'][missing[0]]}")

    from fairseq_local_repro import bench  # builds models the way fairseq does

    extra = a.arch_args if a.arch_args is not None else (TINY if device == "cpu" else "")
    args = bench.parse_args(["--arch", a.arch, "--baseline", a.arch, "--arch-args", extra, "--device", device,
                             "--vocab", "1000", "--max-tokens", "160", "--src-len", "10", "--tgt-len", "8"])
    try:
        cfg, task, model, criterion = bench.build(a.arch, extra, args, bench.synthetic_data_dir(args))
        sample = bench.to_device(bench.synthetic_batches(task, args, 1, args.src_len, args.tgt_len), device)[0]
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        model.train()
        loss, _, _ = criterion(model, sample)
        loss.backward()
        bad = [n for n, q in model.named_parameters() if q.grad is not None and not torch.isfinite(q.grad).all()]
        opt.step()
    except Exception as e:  # noqa: BLE001
        fail(f"--arch {a.arch} on {device}: {type(e).__name__}: {e}")
    if not torch.isfinite(loss) or bad:
        fail(f"--arch {a.arch} on {device}: loss {loss.item()}, non-finite gradients in {bad[:3]}")
    report["model"] = {"arch": a.arch, "params": sum(q.numel() for q in model.parameters()),
                       "param_device": str(next(model.parameters()).device), "loss": loss.item()}
    if a.fast_path:
        try:
            report["fast_path"] = fast_path_check(device, tiny=a.tiny or device == "cpu")
        except Exception as e:  # noqa: BLE001
            fail(f"--fast-path on {device}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        bad = [k for k, v in report["fast_path"]["checks"].items() if not v["ok"]]
        if bad:
            fail(f"--fast-path on {device}: fast != eager in {', '.join(bad)}: "
                 + "; ".join(f"{k}: {report['fast_path']['checks'][k]['worst']}" for k in bad))
    report["seconds"] = clock.seconds_since(t0)
    text = json.dumps(report, indent=2)
    if a.json:
        from fairseq_local_core.file_io import write_text

        write_text(a.json, text + "\n")
    print(text)


# ------------------------------------------------------------------------------------------------
# --fast-path
# ------------------------------------------------------------------------------------------------
def _rel(a, b):
    import torch

    return (a - b).abs().max().item() / max(a.abs().max().item(), 1e-6) if a.numel() else 0.0


def _rel_grads(a, b):
    """The largest gradient difference relative to the largest gradient entry of them all (a
    gradient that nearly cancels, such as the MC-RNN channel attention's at initialisation, is
    compared at the scale of the whole gradient, not at its own)."""
    scale = max([g.abs().max().item() for g in a] + [1e-6])
    return max([(x - y).abs().max().item() for x, y in zip(a, b)] + [0.0]) / scale


def _fwd_bwd(module, run, inputs=()):
    """Forward + backward of ``run() -> (output, final states)``, a loss that weighs every output
    entry differently: ([output, final states...], [grads of module's parameters..., of inputs...])."""
    import torch

    module.zero_grad(set_to_none=True)
    out, state = run()
    leaves = [s for s in torch.utils._pytree.tree_leaves(state) if s.is_floating_point()]
    loss = (out * torch.linspace(-1, 1, out.numel(), device=out.device).view_as(out)).sum()
    loss = loss + sum((s ** 2).sum() for s in leaves)
    loss.backward()
    return [out.detach()] + [s.detach() for s in leaves], [
        p.grad.clone() for p in module.parameters() if p.grad is not None] + [x.grad for x in inputs]


def _layer_pass(layer, x, mask):
    """One layer: ([output, final states...], [parameter grads..., input grad])."""
    x = x.detach().clone().requires_grad_(True)
    return _fwd_bwd(layer, lambda: layer(x, None, mask), [x])


def _lattice_pass(encoder, embed, lattice):
    """The lattice encoder: ([annotations, final state], [parameter grads..., embedding grad])."""
    import torch.nn as nn

    def run():
        annotations, _, final, _ = encoder(embed, *lattice)
        return annotations, final
    return _fwd_bwd(nn.ModuleList([encoder, embed]), run)


def fast_impls(device):
    """The fast executions to check: on CUDA ``auto`` (CUDA graphs of the eager loop) and
    ``compiled`` (the step compiled once, in CUDA graphs); on CPU ``compiled``."""
    return ("cuda-graphs", "compiled") if device == "cuda" else ("compiled",)


def _startup(before, after):
    """What a first call cost: compile and capture seconds and counts (``fast_path.stats``)."""
    keys = ("compiles", "compile_fwd_s", "compile_bwd_s", "kernels", "graphs_captured", "capture_s", "graph_fallbacks")
    return {k: clock.seconds(after[k] - before[k]) if isinstance(after[k], float) else after[k] - before[k] for k in keys}


def _compare(module, fresh_pass, reps, tol, impls):
    """Each fast impl == eager for ``fresh_pass()`` (a pass over newly drawn inputs), twice: the
    second call replays what the first captured or compiled; then each one's forward + backward ms,
    its first call's seconds and start-up costs."""
    from fairseq_local.modules import fast_path

    worst, rec = 0.0, {}
    for trial in range(2):
        run = fresh_pass()
        fast_path.set_rnn_impl(module, "eager")
        ref = run()
        for impl in impls:
            fast_path.set_rnn_impl(module, impl)
            before, t = fast_path.stats(), time.perf_counter()
            got = run()
            if trial == 0:
                rec[f"first_{impl}_call_s"] = clock.seconds_since(t)
                rec[f"{impl}_startup"] = _startup(before, fast_path.stats())
            worst = max([worst, _rel_grads(ref[1], got[1])] + [_rel(a, b) for a, b in zip(ref[0], got[0])])
    for impl in ("eager",) + tuple(impls):
        fast_path.set_rnn_impl(module, impl)
        rec[f"{impl}_fwd_bwd_ms"] = round(_timed_ms(run, reps), clock.DIGITS - 3)
    rec.update(worst=worst, ok=worst <= tol)
    return rec


LATTICE_CHARS = "甲乙丙丁戊"


def random_lattices(seed, lengths):
    """A padded batch (``LatticeBatch``, right padding) of lattices over random characters, one
    per entry of ``lengths`` (characters), each the merge of 1 to 3 random segmentations (so nodes
    have 1 to 3 incoming edges and words span 1 to n characters), and its vocabulary size."""
    import torch

    from fairseq_local_core.lattice import merge_tokenizations
    from fairseq_local.data.lattice_dataset import collate_lattices

    g = torch.Generator().manual_seed(seed)

    def rand(n):
        return int(torch.randint(n, (1,), generator=g))

    lats = []
    for n in lengths:
        chars = "".join(LATTICE_CHARS[rand(len(LATTICE_CHARS))] for _ in range(n))
        segs = []
        for _ in range(1 + rand(3)):
            cut = [0] + [i for i in range(1, n) if rand(2)] + [n]
            segs.append([chars[a:b] for a, b in zip(cut, cut[1:])])
        lats.append(merge_tokenizations(chars, segs))
    vocab = {w: i for i, w in enumerate(sorted({w for lat in lats for w in lat.words()}))}
    batch = collate_lattices([torch.from_numpy(lat.pack([vocab[w] for w in lat.words()])) for lat in lats], 1,
                             left_pad=False)
    return batch["lattice"], len(vocab)


def lattice_check(device, tiny, tol, reps, I, H):
    """Each fast impl == eager for the bidirectional DWL-GRU + gating encoder on a padded batch of
    random lattices (``random_lattices``: several levels, sentences of different lengths), the
    embedding table drawn anew for each of the two calls; also reports each direction's level grid
    (``lattice_gru.pad_levels``: levels and their padded count, the padded width)."""
    import torch
    import torch.nn as nn

    from fairseq_local.data.lattice_dataset import LatticeBatch
    from fairseq_local.modules import fast_path
    from fairseq_local.modules.lattice_gru import BiLatticeGRU, pad_levels

    g = torch.Generator().manual_seed(0)
    lengths = (6, 3, 5) if tiny else tuple(torch.randint(4, 17, (128,), generator=g).tolist())
    lattice, vocab = random_lattices(1, lengths)
    lattice = LatticeBatch(*(t.to(device) for t in lattice))
    encoder = BiLatticeGRU(I, H, "dwl", "gating", init_scale=0.5 if tiny else 0.1).to(device)
    embed = nn.Embedding(vocab, I).to(device)

    def fresh_pass():
        with torch.no_grad():
            embed.weight.copy_(torch.randn(vocab, I, generator=g))
        return lambda: _lattice_pass(encoder, embed, lattice)

    rec = _compare(encoder, fresh_pass, reps, tol, fast_impls(device))
    with torch.no_grad():
        schedules = fast_path.set_rnn_impl(encoder, "eager")(embed, *lattice)[3]["schedules"]  # both directions
    grids = []
    for sched in schedules:
        grid = pad_levels(sched)
        grids.append({"levels": len(sched.steps), "padded_levels": grid.levels, "width": grid.width,
                      "edges": sched.edge_words.numel()})
    rec.update(lattices=len(lengths), characters=[min(lengths), max(lengths)], grids=grids)
    return rec


def _timed_ms(fn, reps):
    import torch

    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(1000 * (time.perf_counter() - t))
    return sorted(times)[len(times) // 2]


def fast_path_check(device, tiny):
    """compiled == eager for one layer of each family and a small model (see the module doc)."""
    import torch

    from fairseq_local.modules import fast_path
    from fairseq_local_repro import bench
    from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
    from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
    from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tol = 1e-5 if device == "cpu" else 1e-4
    T, B, I, H = (5, 3, 4, 6) if tiny else (30, 128, 256, 256)
    reps = 3 if tiny else 20
    layers = {
        "mc_rnn3_lstm_gates": MultiChannelRNNLayer(I, H, 3, cell="lstm", weight_space="gates"),
        "parallel_lstm_wide2": ParallelCellRNNLayer(I, H, wide=2, cell="lstm"),
        "torch_gru_masked": TorchRNNLayer("gru", I, H),
    }
    report = {"device": device, "device_name": bench.device_name(device), "sizes": dict(T=T, B=B, I=I, H=H),
              "tolerance_rel": tol, "checks": {}}
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T).unsqueeze(1) < (T - lengths).unsqueeze(0)).to(device)  # left padding
    for name, layer in layers.items():
        layer.to(device)
        m = mask.clone()
        if name.startswith("torch"):
            m[T // 2, 0] = True  # a hole: the masked step loop, not cuDNN's packed sequence

        def fresh_pass(layer=layer, m=m):
            x = torch.randn(T, B, I, generator=g).to(device)
            return lambda: _layer_pass(layer, x, m)
        report["checks"][name] = _compare(layer, fresh_pass, reps, tol, fast_impls(device))
    report["checks"]["lattice_dwl_gating"] = lattice_check(device, tiny, tol, reps, I, H)

    # a small model: one training step and beam search
    from fairseq.sequence_generator import SequenceGenerator

    dims = 8 if tiny else 64
    extra = (f"--encoder-embed-dim {dims} --encoder-hidden-size {dims} --decoder-embed-dim {dims} "
             f"--decoder-hidden-size {dims} --attention-dim {dims} --encoder-layers 1 --decoder-layers 2 --dropout 0")
    args = bench.parse_args(["--arch", "mc_rnn_iwslt_de_en_2", "--baseline", "mc_rnn_iwslt_de_en_2", "--device", device,
                             "--vocab", "50", "--max-tokens", str(6 * (4 if tiny else 16)), "--src-len", "7",
                             "--tgt-len", "6"])
    cfg, task, model, criterion = bench.build("mc_rnn_iwslt_de_en_2", extra, args, bench.synthetic_data_dir(args))
    sample = bench.to_device(bench.synthetic_batches(task, args, 1, args.src_len, args.tgt_len), device)[0]
    src = sample["net_input"]["src_tokens"]
    src[0, :2] = task.source_dictionary.pad()  # left padding, as fairseq batches sources
    sample["net_input"]["src_lengths"][0] -= 2
    outs = {}
    for impl in ("eager",) + fast_impls(device):
        fast_path.set_rnn_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        loss, _, _ = criterion(model, sample)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        model.eval()
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=8)
        with torch.no_grad():
            hyps = gen.generate([model], {"net_input": {k: v for k, v in sample["net_input"].items()
                                                         if k != "prev_output_tokens"}})
        outs[impl] = (loss.detach().reshape(1), grads, [[h["tokens"].tolist() for h in s] for s in hyps],
                      torch.stack([h["score"] for s in hyps for h in s]))
    e = outs["eager"]
    worst = max(max(_rel(e[0], c[0]), _rel(e[3], c[3]), _rel_grads(e[1], c[1])) for c in list(outs.values())[1:])
    same = all(e[2] == c[2] for c in outs.values())
    report["checks"]["mc_rnn2_model_step_and_beam5"] = {"worst": worst if same else "different hypotheses",
                                                         "ok": same and worst <= tol, "sentences": len(e[2])}
    report["fast_path_stats"] = fast_path.stats()
    return report


if __name__ == "__main__":
    main()
