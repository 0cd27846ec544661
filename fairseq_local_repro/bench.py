"""Benchmark two fairseq architectures on identical batches: training tokens/s, beam search
sentences/s, peak memory and parameter count.

    python scripts/bench.py --arch mc_rnn_iwslt_de_en_3 --baseline lstm \
        [--task translation|language_modeling|lattice_translation] [--data BIN_DIR] \
        [--arch-args "..."] [--baseline-args "..."] [--steps N] [--max-tokens N] \
        [--device cpu|cuda] [--bf16|--fp16] [--json OUT] [--lengths 20,40]

Both models are built through fairseq's registry (``--user-dir fairseq_local`` is implied) and are
fed the same batches: synthetic ones by default (random tokens over a ``--vocab``-word dictionary,
sentences of ``--src-len`` / ``--tgt-len`` tokens, ``--max-tokens`` target tokens per batch), or
the first batches of ``--subset`` of a binarized dataset with ``--data``.  After ``--warmup``
steps each, A and B alternate in ``--rounds`` rounds, so slow drifts of the machine hit both.
A training step is forward + backward + Adam step.  Generation is fairseq's SequenceGenerator
with ``--beam`` (prefix-conditioned for language models), every hypothesis forced to the same
length so both models do the same number of steps.  Peak memory is ``max_memory_allocated`` on
CUDA; on CPU it is parameters + gradients + Adam state + the tensors autograd saves for backward
during one training step (deduplicated by storage).  ``--bf16`` / ``--fp16`` (``--dtype``) run the
training step and generation under ``torch.autocast`` (fairseq's ``--amp`` scheme: fp32 weights and
Adam state, fp16 with a GradScaler), on CUDA and on CPU alike; the default is plain fp32.

Each round times A and B back to back on the same batches; the reported ratio is the median of
the per-round ratios (robust to a machine whose speed drifts), with their min and max as the
spread.  The last line is exactly ``ratio train_tokens_per_s A/B = X.XX``.

The fast path of the recurrent models (``--rnn-impl``, fairseq_local/modules/fast_path.py) is a
model option: ``--arch-args "--rnn-impl compiled" --baseline-args "--rnn-impl eager"`` compares it
with the eager loop on the same arch.  Each row records what its layers resolved to (``rnn_impl``:
eager, graphs, compiled or compiled+graphs), the wall time of its first training step
(``first_step_s``: the time to the first update, compilation and capture included) and the start-up
costs of the whole run (``fast_path.stats``): step compilations and inductor kernels (``compiles``,
``kernels``), forward and backward compile seconds (``compile_fwd_s``, ``compile_bwd_s``), CUDA
graphs captured and still alive (``graphs_captured``, ``graphs_live``) and capture seconds
(``capture_s``), with their sums ``compiled_variants`` and ``compile_s``; the JSON records the
device's name.
"""
import argparse
import atexit
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch

import fairseq_local  # registers our archs before fairseq's parsers are built
from fairseq_local_core.file_io import write_json
from fairseq_local.modules import fast_path
from fairseq import options, tasks, utils
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

LM_TASKS = ("language_modeling", "stateful_language_modeling")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", required=True, help="architecture A (the one being measured)")
    p.add_argument("--baseline", required=True, help="architecture B (the reference)")
    p.add_argument("--task", default="translation", help="fairseq task (default: translation)")
    p.add_argument("--data", help="binarized data dir; default: synthetic batches")
    p.add_argument("--subset", default="valid", help="split of --data to draw batches from")
    p.add_argument("--arch-args", default="", help="extra fairseq args for A, e.g. \"--encoder-layers 2\"")
    p.add_argument("--baseline-args", default="", help="extra fairseq args for B")
    p.add_argument("--task-args", default="", help="extra fairseq task args for both")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per model")
    p.add_argument("--warmup", type=int, default=3, help="untimed training steps per model")
    p.add_argument("--rounds", type=int, default=5, help="alternations of A and B")
    p.add_argument("--max-tokens", type=int, default=2000, help="target tokens per batch")
    p.add_argument("--src-len", type=int, default=25, help="synthetic source length")
    p.add_argument("--tgt-len", type=int, default=25, help="synthetic target length")
    p.add_argument("--vocab", type=int, default=8000, help="synthetic vocabulary size")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--gen-sentences", type=int, default=32, help="sentences for the generation timing")
    p.add_argument("--gen-batch", type=int, default=16)
    p.add_argument("--gen-len", type=int, default=20, help="generated length (hypotheses forced to it)")
    p.add_argument("--no-generate", action="store_true", help="skip the generation timing")
    p.add_argument("--lengths", default="", help="comma list of sentence lengths for a scaling table")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    prec = p.add_mutually_exclusive_group()
    prec.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                      help="mixed precision: forward/backward and generation under torch.autocast with this "
                           "dtype (fairseq's --amp; fp16 with a GradScaler), on cuda and cpu; default fp32")
    prec.add_argument("--bf16", dest="dtype", action="store_const", const="bf16", help="same as --dtype bf16")
    prec.add_argument("--fp16", dest="dtype", action="store_const", const="fp16", help="same as --dtype fp16")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", help="also write the results to this JSON file")
    a = p.parse_args(argv)
    for opt in ("steps", "rounds", "max_tokens", "src_len", "tgt_len", "vocab", "beam", "gen_sentences",
                "gen_batch", "gen_len"):
        if getattr(a, opt) < 1:
            p.error(f"--{opt.replace('_', '-')} must be >= 1")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available")
    if a.device == "cuda" and a.dtype == "bf16" and not torch.cuda.is_bf16_supported():
        p.error("--dtype bf16: this CUDA device does not support bfloat16")
    if a.data and not os.path.isdir(a.data):
        p.error(f"--data {a.data}: no such directory")
    if a.steps % a.rounds:
        a.rounds = max(d for d in range(1, a.rounds + 1) if a.steps % d == 0)
    try:
        a.lengths = [int(x) for x in a.lengths.split(",") if x.strip()]
    except ValueError:
        p.error(f"--lengths {a.lengths!r}: expected comma-separated integers")
    return a


# ------------------------------------------------------------------------------------------------
# building
# ------------------------------------------------------------------------------------------------
def synthetic_data_dir(args):
    """A data dir holding only dictionaries (all the task needs to build models), removed when the
    process ends."""
    d = tempfile.mkdtemp(prefix="bench_dict_")
    atexit.register(shutil.rmtree, d, True)
    dictionary = Dictionary()
    for i in range(args.vocab - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}", n=args.vocab - i)
    names = ["dict.txt"] if args.task in LM_TASKS else ["dict.src.txt", "dict.tgt.txt"]
    for name in names:
        dictionary.save(os.path.join(d, name))
    return d


def build(arch, extra, args, data_dir):
    user_dir = os.path.dirname(os.path.abspath(fairseq_local.__file__))
    argv = [data_dir, "--user-dir", user_dir, "--task", args.task, "--arch", arch]
    if args.task not in LM_TASKS and not args.data:
        argv += ["--source-lang", "src", "--target-lang", "tgt"]
    if args.task in LM_TASKS:
        argv += ["--tokens-per-sample", str(max(args.tgt_len, max(args.lengths or [0])) + 1)]
    argv += shlex.split(args.task_args) + shlex.split(extra)
    if args.device == "cpu":
        argv.append("--cpu")
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(args.seed)
    model = task.build_model(cfg.model).to(args.device)
    criterion = task.build_criterion(cfg.criterion).to(args.device)
    return cfg, task, model, criterion


def synthetic_batches(task, args, n, src_len, tgt_len):
    g = torch.Generator().manual_seed(args.seed)
    d = task.target_dictionary
    bsz = max(1, args.max_tokens // tgt_len)
    lo, hi = d.nspecial, len(d)
    out = []
    for _ in range(n):
        tgt = torch.randint(lo, hi, (bsz, tgt_len), generator=g)
        tgt[:, -1] = d.eos()
        prev = torch.cat([torch.full((bsz, 1), d.eos()), tgt[:, :-1]], dim=1)
        if args.task in LM_TASKS:
            net = {"src_tokens": prev, "src_lengths": torch.full((bsz,), tgt_len)}
        else:
            src = torch.randint(lo, hi, (bsz, src_len), generator=g)
            src[:, -1] = task.source_dictionary.eos()
            net = {"src_tokens": src, "src_lengths": torch.full((bsz,), src_len), "prev_output_tokens": prev}
        out.append({"id": torch.arange(bsz), "net_input": net, "target": tgt,
                    "ntokens": bsz * tgt_len, "nsentences": bsz})
    return out


def dataset_batches(task, args, n):
    task.load_dataset(args.subset)
    itr = task.get_batch_iterator(task.dataset(args.subset), max_tokens=args.max_tokens, seed=args.seed,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    out = [b for _, b in zip(range(n), itr)]
    if not out:
        sys.exit(f"bench.py: error: --data {args.data}: split '{args.subset}' yielded no batch")
    while len(out) < n:
        out += out[: n - len(out)]
    return out


# ------------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------------
class Runner:
    def __init__(self, name, arch, extra, args, data_dir):
        self.name, self.arch = name, arch
        self.cfg, self.task, self.model, self.criterion = build(arch, extra, args, data_dir)
        self.args = args
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        # fp16 needs loss scaling to train (bf16 has fp32's exponent range and does not)
        self.scaler = torch.amp.GradScaler(args.device) if args.dtype == "fp16" else None
        self.params = sum(p.numel() for p in self.model.parameters())
        self.times, self.tokens = [], 0
        impls = {m.rnn_impl for m in self.model.modules() if isinstance(m, fast_path.FastPathMixin)}
        probe = torch.zeros(1, device=args.device)
        # what the recurrent loops run as on this device (None: a model without them)
        self.rnn_impl = (None if not impls else "+".join(sorted(
            resolved(fast_path.execution(i, probe)) for i in impls)))
        self.compiles = bool(self.rnn_impl and self.rnn_impl != "eager")  # compiles or captures per shape
        self.first_step_s = None
        self.startup = dict.fromkeys(STARTUP_KEYS, 0)

    def tracked(self, fn, *a):
        """``fn(*a)``, adding what it spent compiling steps and capturing graphs (``fast_path.stats``)."""
        before = fast_path.stats()
        out = fn(*a)
        after = fast_path.stats()
        for k in STARTUP_KEYS:
            self.startup[k] += after[k] - before[k]
        return out

    def _autocast(self):
        a = self.args
        if a.dtype != "fp32":
            return torch.autocast(a.device, dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float16)
        return torch.autocast(a.device, enabled=False)

    def train_step(self, sample):
        self.model.train()
        with self._autocast():
            loss, _, _ = self.criterion(self.model, sample)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def timed(self, batches):
        sync()
        t = time.perf_counter()
        for b in batches:
            self.train_step(b)
        sync()
        self.times.append(time.perf_counter() - t)
        self.tokens += sum(b["ntokens"] for b in batches)

    def peak_memory_mib(self, sample):
        if self.args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            self.train_step(sample)
            sync()
            return torch.cuda.max_memory_allocated() / 2**20
        seen, total = set(), [0]

        def pack(t):
            try:
                key = t.untyped_storage().data_ptr()
                if key not in seen:
                    seen.add(key)
                    total[0] += t.untyped_storage().nbytes()
            except RuntimeError:
                pass
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            self.train_step(sample)
        state = sum(p.numel() * p.element_size() for p in self.model.parameters()) * 4  # w, grad, adam m, v
        return (total[0] + state) / 2**20

    def inference_model(self):
        """A copy prepared as fairseq-generate prepares a loaded model (weight norm removed...)."""
        if getattr(self, "_inference_model", None) is None:
            # a fresh copy (deepcopy cannot copy weight-normed modules), as if loaded from a checkpoint
            m = self.task.build_model(self.cfg.model).to(self.args.device)
            m.load_state_dict(self.model.state_dict())
            m.eval()
            m.prepare_for_inference_(self.cfg)
            self._inference_model = m
        return self._inference_model

    def generate(self, batches):
        from fairseq.sequence_generator import SequenceGenerator

        a = self.args
        model = self.inference_model()
        gen = SequenceGenerator([model], self.task.target_dictionary, beam_size=a.beam, max_len_a=0,
                                max_len_b=a.gen_len, min_len=a.gen_len)
        n = 0
        sync()
        t = time.perf_counter()
        with torch.no_grad(), self._autocast():
            for b in batches:
                if a.task in LM_TASKS:
                    prefix = b["net_input"]["src_tokens"][:, 1:4]
                    s = {"net_input": {"src_tokens": prefix, "src_lengths": torch.full((prefix.size(0),), 3,
                                                                                      device=prefix.device)}}
                    gen.generate([model], s, prefix_tokens=prefix)
                else:
                    gen.generate([model], {"net_input": {k: v for k, v in b["net_input"].items()
                                                              if k != "prev_output_tokens"}})
                n += b["nsentences"]
        sync()
        return n / (time.perf_counter() - t)


def cpu_model():
    """The processor's name: /proc/cpuinfo's model name (Linux), else what platform reports."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def device_name(device):
    """The GPU's name on cuda; the processor's on cpu."""
    return torch.cuda.get_device_name(0) if device == "cuda" else cpu_model()


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def to_device(batches, device):
    return [utils.move_to_cuda(b) if device == "cuda" else b for b in batches]


def gen_batches(batches, args):
    """Re-slice the training batches into ``--gen-sentences`` sentences of ``--gen-batch``."""
    out, left = [], args.gen_sentences
    for b in batches:
        if left <= 0:
            break
        k = min(args.gen_batch, left, b["nsentences"])
        net = {key: v[:k] for key, v in b["net_input"].items()}
        out.append({"net_input": net, "nsentences": k})
        left -= k
    return out


def measure(args):
    data_dir = args.data or synthetic_data_dir(args)
    a = Runner("A", args.arch, args.arch_args, args, data_dir)
    b = Runner("B", args.baseline, args.baseline_args, args, data_dir)
    n = args.warmup + args.steps
    if args.data:
        batches = dataset_batches(a.task, args, n)
    else:
        batches = synthetic_batches(a.task, args, n, args.src_len, args.tgt_len)
    batches = to_device(batches, args.device)
    for r in (a, b):
        for i, s in enumerate(batches[: max(1, args.warmup)]):
            sync()
            t = time.perf_counter()
            r.tracked(r.train_step, s)
            sync()
            if i == 0:
                r.first_step_s = time.perf_counter() - t  # the time to the first update
        if r.compiles:  # compile every batch shape before timing (real data: several buckets)
            seen = set()
            for s in batches[args.warmup:]:
                key = tuple(tuple(v.shape) for v in s["net_input"].values() if torch.is_tensor(v))
                if key not in seen:
                    seen.add(key)
                    r.tracked(r.train_step, s)
    timed = batches[args.warmup:]
    per = len(timed) // args.rounds
    for i in range(args.rounds):
        chunk = timed[i * per:(i + 1) * per]
        for r in ((a, b) if i % 2 == 0 else (b, a)):
            r.timed(chunk)
    # paired rounds: A and B ran back to back on the same batches, so the per-round ratio cancels
    # slow drifts of the machine; the headline ratio is their median
    paired = [tb / ta for ta, tb in zip(a.times, b.times)]
    rows = []
    for r in (a, b):
        row = {"model": r.name, "arch": r.arch, "params": r.params, "rnn_impl": r.rnn_impl,
               "first_step_s": r.first_step_s,
               "train_tokens_per_s": r.tokens / sum(r.times),
               "round_spread": (max(r.times) - min(r.times)) / statistics.mean(r.times) if len(r.times) > 1 else 0.0,
               "peak_mem_mib": r.peak_memory_mib(batches[0])}
        rows.append(row)
    if not args.no_generate:
        gb = gen_batches(batches, args)
        for r in (a, b):  # warm-up (first call builds caches and compiles), then alternate batch by batch
            r.tracked(r.generate, gb if r.compiles else gb[:1])
        speeds = {"A": [], "B": []}
        for i, batch in enumerate(gb):
            for r in ((a, b) if i % 2 == 0 else (b, a)):
                speeds[r.name].append(batch["nsentences"] / r.generate([batch]))
        for row in rows:
            row["gen_sent_per_s"] = sum(bt["nsentences"] for bt in gb) / sum(speeds[row["model"]])
    for row, r in zip(rows, (a, b)):
        row.update({k: round(v, 2) if isinstance(v, float) else v for k, v in r.startup.items()})
        row["graphs_live"] = fast_path.stats()["graphs_live"]
        # variants: compiled graphs + captured graphs; their seconds: forward and backward compilation
        # and capture (each capture includes its eager warm-up run and the check against eager)
        row["compiled_variants"] = r.startup["compiles"] + r.startup["graphs_captured"]
        row["compile_s"] = round(r.startup["compile_fwd_s"] + r.startup["compile_bwd_s"] + r.startup["capture_s"], 2)
    ratio = {"train_ratio": statistics.median(paired), "train_ratio_min": min(paired),
             "train_ratio_max": max(paired)}
    scaling = []
    if args.lengths:
        for length in args.lengths:
            lb = to_device(synthetic_batches(a.task, args, 1 + max(2, args.steps // 4), length, length), args.device)
            entry = {"length": length}
            for r in (a, b):
                r.train_step(lb[0])
                r.times, r.tokens = [], 0
                r.timed(lb[1:])
                entry[f"{r.name}_ms_per_batch"] = 1000 * sum(r.times) / len(lb[1:])
                entry[f"{r.name}_tokens_per_s"] = r.tokens / sum(r.times)
            scaling.append(entry)
    return rows, scaling, ratio


def resolved(how) -> str:
    """What ``--rnn-impl`` runs as: eager, graphs (CUDA graphs of the eager loop), compiled (the step
    compiled once) or compiled+graphs."""
    return "+".join(n for n, on in (("compiled", how.compiled), ("graphs", how.graphs)) if on) or "eager"


STARTUP_KEYS = ("compiles", "compile_fwd_s", "compile_bwd_s", "kernels", "graphs_captured", "capture_s",
                "graph_fallbacks")


def report(args, rows, scaling, ratio):
    print(f"device={args.device} ({device_name(args.device)}) dtype={args.dtype} threads={torch.get_num_threads()} "
          f"task={args.task} data={args.data or 'synthetic'} max_tokens={args.max_tokens} steps={args.steps} "
          f"rounds={args.rounds}")
    hdr = (f"{'':2} {'arch':32} {'params':>12} {'train tok/s':>12} {'spread':>7} {'gen sent/s':>11} {'peak MiB':>9} "
           f"{'rnn impl':>8} {'1st step s':>10} {'variants':>8}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        gen = f"{r['gen_sent_per_s']:11.2f}" if "gen_sent_per_s" in r else f"{'-':>11}"
        print(f"{r['model']:2} {r['arch'][:32]:32} {r['params']:12,d} {r['train_tokens_per_s']:12.1f} "
              f"{100 * r['round_spread']:6.1f}% {gen} {r['peak_mem_mib']:9.1f} {r['rnn_impl'] or '-':>8} "
              f"{r['first_step_s']:10.2f} {r['compiled_variants']:8d}")
    if scaling:
        print("\nscaling with sentence length (synthetic, same batch size):")
        print(f"{'length':>6} {'A ms/batch':>11} {'B ms/batch':>11} {'A/B time':>9}")
        base = scaling[0]
        for e in scaling:
            print(f"{e['length']:6d} {e['A_ms_per_batch']:11.1f} {e['B_ms_per_batch']:11.1f} "
                  f"{e['A_ms_per_batch'] / e['B_ms_per_batch']:9.2f}   "
                  f"(A x{e['A_ms_per_batch'] / base['A_ms_per_batch']:.2f}, "
                  f"B x{e['B_ms_per_batch'] / base['B_ms_per_batch']:.2f} vs length {base['length']})")
    if "gen_sent_per_s" in rows[0]:
        print(f"ratio gen_sent_per_s A/B = {rows[0]['gen_sent_per_s'] / rows[1]['gen_sent_per_s']:.2f}")
    print(f"paired rounds: A/B train ratio median {ratio['train_ratio']:.2f}, "
          f"min {ratio['train_ratio_min']:.2f}, max {ratio['train_ratio_max']:.2f} over {args.rounds} rounds")
    print(f"ratio train_tokens_per_s A/B = {ratio['train_ratio']:.2f}")


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=UserWarning)  # hydra/omegaconf deprecation chatter
    warnings.filterwarnings("ignore", category=FutureWarning)
    if args.threads:
        torch.set_num_threads(args.threads)
    rows, scaling, ratio = measure(args)
    if args.json:
        write_json(args.json, {"args": vars(args), "device_name": device_name(args.device),
                               "torch_threads": torch.get_num_threads(), "rows": rows,
                               "scaling": scaling, **ratio}, indent=2)
    report(args, rows, scaling, ratio)



if __name__ == "__main__":
    main()
