"""Count the ATen operators (≈ kernel launches on a GPU) and host-device synchronisations of one
training forward + backward, genCNN against a baseline, on the batches ``scripts/bench.py`` uses.

    python scripts/gencnn_op_count.py --arch gencnn_paper --baseline fconv_lm \
        --baseline-args '--decoder-embed-dim 400 --decoder-layers [(400,3)]*4 --decoder-out-embed-dim 400' \
        --tgt-len 50 --max-tokens 4000 --lengths 25,50,100 [--json OUT]

On a GPU a training step of small models is bound by how many kernels it launches and how often
the host waits for the device, not by arithmetic; both are properties of the program and can be
counted on a CPU.  ``torch.profiler`` records every ATen call of one step; *leaf* operators (no
ATen operator below them) are what reaches a kernel.  Synchronising calls are those that copy a
device value to the host: ``aten::item`` / ``_local_scalar_dense`` (``.item()``, ``.tolist()``,
Python ``bool``/``int`` of a tensor), ``aten::nonzero`` (also behind boolean-mask indexing) and
``aten::unique*``.  The Adam step is left out: it is the same ``foreach`` kernels for every model.
"""
import argparse
import collections
import sys
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

from fairseq_local_core.file_io import write_json
from fairseq_local_repro import bench

# operators that only make tensor metadata (views, allocation): no kernel
METADATA_OPS = {"aten::" + n for n in (
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "reshape", "expand", "permute", "transpose",
    "t", "unsqueeze", "squeeze", "select", "slice", "split", "split_with_sizes", "unbind", "narrow",
    "unflatten", "flatten", "movedim", "moveaxis", "alias", "detach", "lift_fresh", "resolve_conj", "resolve_neg", "empty",
    "empty_strided", "empty_like", "resize_", "as_strided_", "chunk", "new_empty")}
# operators that run a kernel of their own besides the ones they call (a matrix product after
# copying a broadcast bias, a convolution after packing its input)
COMPUTE_OPS = {"aten::" + n for n in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mkldnn_convolution", "convolution_backward",
    "_slow_conv2d_forward", "_slow_conv2d_backward")}
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::unique", "aten::_unique2",
            "aten::masked_select")


def count_step(runner, sample):
    """Leaf ATen operators and synchronising operators of one forward + backward."""
    runner.model.train()
    runner.train_step(sample)  # warm-up (lazy initialisation, caches)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss, _, _ = runner.criterion(runner.model, sample)
        loss.backward()
    runner.opt.zero_grad(set_to_none=True)
    events = [e for e in prof.events() if e.name.startswith("aten::")]

    def computes_below(e):  # does an ATen operator under e do more than make views?
        return any(c.name.startswith("aten::") and (c.name not in METADATA_OPS or computes_below(c))
                   for c in e.cpu_children)

    kernels = [e for e in events if e.name not in METADATA_OPS
               and (e.name in COMPUTE_OPS or not computes_below(e))]
    ids_with_aten_child = {e.id for e in events for c in e.cpu_children if c.name.startswith("aten::")}
    leaves = [e for e in events if e.id not in ids_with_aten_child]
    names = collections.Counter(e.name for e in kernels)
    syncs = sum(1 for e in events if e.name in SYNC_OPS)
    return {"kernel_ops": len(kernels), "leaf_ops": len(leaves), "aten_calls": len(events), "syncs": syncs,
            "top_kernel_ops": dict(names.most_common(12))}


def main(argv=None):
    p = argparse.ArgumentParser(prog="gencnn_op_count.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", required=True)
    p.add_argument("--baseline", required=True)
    p.add_argument("--arch-args", default="")
    p.add_argument("--baseline-args", default="")
    p.add_argument("--task", default="language_modeling")
    p.add_argument("--tgt-len", type=int, default=50)
    p.add_argument("--max-tokens", type=int, default=4000)
    p.add_argument("--lengths", default="", help="comma list of further sentence lengths")
    p.add_argument("--json", help="also write the counts to this JSON file")
    a = p.parse_args(argv)
    try:
        lengths = [a.tgt_len] + [int(x) for x in a.lengths.split(",") if x.strip()]
    except ValueError:
        p.error(f"--lengths {a.lengths!r}: expected comma-separated integers")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")  # fairseq's and Hydra's deprecation notices
    bargs = bench.parse_args(["--arch", a.arch, "--baseline", a.baseline, "--task", a.task,
                              "--tgt-len", str(max(lengths)), "--max-tokens", str(a.max_tokens),
                              "--device", "cpu", "--threads", "1"])
    data_dir = bench.synthetic_data_dir(bargs)
    rows = []
    runners = [bench.Runner("A", a.arch, a.arch_args, bargs, data_dir),
               bench.Runner("B", a.baseline, a.baseline_args, bargs, data_dir)]
    for length in lengths:
        batch = bench.synthetic_batches(runners[0].task, bargs, 1, length, length)[0]
        for r in runners:
            c = count_step(r, batch)
            rows.append({"arch": r.arch, "length": length, "sentences": batch["nsentences"], **c})
            print(f"{r.arch:>24} len {length:>4} x {batch['nsentences']:>3}: {c['kernel_ops']:>6} kernel ops, "
                  f"{c['leaf_ops']:>6} leaf ATen ops, "
                  f"{c['aten_calls']:>6} ATen calls, {c['syncs']:>3} host syncs", flush=True)
    if a.json:
        write_json(a.json, {"args": vars(a), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
