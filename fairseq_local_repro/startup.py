"""The start-up cost of ``--rnn-impl``: one architecture trained over a sequence of batch shapes.

    python scripts/startup_cost.py --arch mc_rnn_iwslt_de_en_3 --impls eager,compiled \\
        [--shapes 64x25x25,96x14x12,128x9x7,80x15x14,160x8x6] [--device cpu|cuda] [--json OUT]

A fast path pays once per variant (a compilation, a capture) and a real run meets many batch
shapes, so its cost is the sum over the shapes of a run, not one step's time.  For each
implementation the model is built afresh (same seed), and each shape ``BxSxT`` (batch, source
length, target length; ``BxT`` for language models) gets one training step (forward, backward,
Adam) on random tokens.  Per step it reports the wall seconds and what the step added to
``fast_path.stats()``: step compilations, inductor kernels, forward and backward compile seconds,
CUDA graphs captured and their capture seconds.  The default shapes are five shapes in three time
buckets (T 25; 12, 14; 7, 6).  The last lines give each implementation's total seconds and the
kernels generated after its second shape.
"""
import argparse
import json
import time

import torch

from fairseq_local_core.file_io import write_json
from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local_repro import bench, clock

DEFAULT_SHAPES = "64x25x25,96x14x12,128x9x7,80x15x14,160x8x6"
KEYS = ("compiles", "kernels", "compile_fwd_s", "compile_bwd_s", "graphs_captured", "capture_s", "graph_fallbacks")


def parse_shapes(text: str, lm: bool):
    shapes = []
    for item in text.split(","):
        try:
            dims = tuple(int(x) for x in item.strip().split("x"))
        except ValueError:
            dims = ()
        if len(dims) != (2 if lm else 3) or min(dims) < 1:
            raise argparse.ArgumentTypeError(f"--shapes: {item!r} is not {'BxT' if lm else 'BxSxT'} with positive sizes")
        shapes.append(dims if not lm else (dims[0], dims[1], dims[1]))
    return shapes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--arch", required=True)
    p.add_argument("--arch-args", default="", help="extra fairseq model args")
    p.add_argument("--task", default="translation")
    p.add_argument("--impls", default="eager,compiled", help="comma list of --rnn-impl values")
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma list of BxSxT (BxT for language models)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args(argv)
    try:
        a.shapes = parse_shapes(a.shapes, a.task in bench.LM_TASKS)
        a.impls = [fast_path.check_rnn_impl(i) for i in a.impls.split(",")]
    except (argparse.ArgumentTypeError, ValueError) as e:
        p.error(str(e))
    return a


def batch(task, lm: bool, B: int, S: int, T: int, g: torch.Generator, device):
    d = task.target_dictionary
    tgt = torch.randint(d.nspecial, len(d), (B, T), generator=g)
    tgt[:, -1] = d.eos()
    prev = torch.cat([torch.full((B, 1), d.eos()), tgt[:, :-1]], dim=1)
    if lm:
        net = {"src_tokens": prev, "src_lengths": torch.full((B,), T)}
    else:
        src = torch.randint(d.nspecial, len(task.source_dictionary), (B, S), generator=g)
        src[:, -1] = task.source_dictionary.eos()
        net = {"src_tokens": src, "src_lengths": torch.full((B,), S), "prev_output_tokens": prev}
    return bench.to_device([{"id": torch.arange(B), "net_input": net, "target": tgt, "ntokens": B * T,
                             "nsentences": B}], device)[0]


def run(a):
    torch.set_num_threads(a.threads)
    lm = a.task in bench.LM_TASKS
    results = []
    for impl in a.impls:
        fast_path.reset()
        extra = f"{a.arch_args} --rnn-impl {impl}"
        bargs = bench.parse_args(["--arch", a.arch, "--baseline", a.arch, "--task", a.task, "--vocab", str(a.vocab),
                                  "--device", a.device, "--seed", str(a.seed),
                                  "--tgt-len", str(max(T for _, _, T in a.shapes))])
        cfg, task, model, criterion = bench.build(a.arch, extra, bargs, bench.synthetic_data_dir(bargs))
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        model.train()
        g = torch.Generator().manual_seed(a.seed)
        for B, S, T in a.shapes:
            sample = batch(task, lm, B, S, T, g, a.device)
            before = fast_path.stats()
            bench.sync()
            t = time.perf_counter()
            loss, _, _ = criterion(model, sample)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            bench.sync()
            after = fast_path.stats()
            row = {"impl": impl, "B": B, "S": S, "T": T, "time_bucket": cuda_graphs.length_bucket(T),
                   "seconds": clock.seconds_since(t), "graphs_live": after["graphs_live"]}
            row.update({k: clock.seconds(after[k] - before[k]) if isinstance(after[k], float) else after[k] - before[k]
                        for k in KEYS})
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


def summary(results):
    out = {}
    for impl in dict.fromkeys(r["impl"] for r in results):
        rows = [r for r in results if r["impl"] == impl]
        out[impl] = {"seconds": clock.seconds(sum(r["seconds"] for r in rows)),
                     "kernels": sum(r["kernels"] for r in rows),
                     "kernels_after_second_shape": sum(r["kernels"] for r in rows[2:]),
                     "compiles": sum(r["compiles"] for r in rows),
                     "graphs_captured": sum(r["graphs_captured"] for r in rows)}
    return out


def main(argv=None):
    a = parse_args(argv)
    results = run(a)
    totals = summary(results)
    for impl, s in totals.items():
        print(f"{impl}: {s['seconds']:.1f} s over {len(a.shapes)} shapes, {s['kernels']} kernels "
              f"({s['kernels_after_second_shape']} after the second shape), {s['compiles']} compilations, "
              f"{s['graphs_captured']} graphs")
    if a.json:
        write_json(a.json, {"arch": a.arch, "arch_args": a.arch_args, "device": a.device,
                            "device_name": bench.device_name(a.device), "threads": a.threads,
                            "torch": torch.__version__, "steps": results, "totals": totals})


if __name__ == "__main__":
    main()
