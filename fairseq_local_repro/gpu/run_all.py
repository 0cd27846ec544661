"""The GPU benchmark set and one time-boxed paper-scale training run (driven by run_all.sh).

Benchmarks: every family's ``scripts/bench.py`` comparison against its fairseq baseline, with the
model arguments of the family's docs "Speed" section and GPU-sized batches, each in fp32 and bf16
(``--dtypes``), training tokens/s and beam-5 generation, plus ``--lengths`` scaling where the docs
have it.  Each comparison is its own process (a crash or a timeout costs that entry only) and the
results are rewritten to OUT/bench.json (OUT/fastpath.json for ``--part fastpath``) after every
entry, so a call stopped at its limit keeps what it measured.  No new entry starts after the bench share of ``--budget-minutes``.

Training: MC-RNN-3 vs its Baseline-RNN (``--train-archs``) on the binarized Multi30k De-En from
scripts/gpu/prepare_data.sh, the minutes left split evenly (``--stop-time-hours``), then beam-5
decoding of valid (``fairseq_local_repro.tools.generate``) and tokenized BLEU (``tools.score``); OUT/train.json.

Precision (``--part precision``, its own call): ``--precision-arch`` trained for
``--precision-updates`` updates in fp32 and with fairseq's ``--bf16``, same seed and data order;
OUT/precision.json has both losses and whether bf16 is within 1% of fp32's valid loss.

CPU (``--cpu``): the CPU profile runs each family's main comparisons (``cpu=True`` in ENTRIES) in
fp32 on one thread with CPU-sized batches, and writes OUT/check.json: the processor, the versions,
the command, ``--machine-note`` and, per comparison, the 1-minute load average before and after it
and its process's CPU seconds against its wall seconds.  The CPU tables of the family pages are
this output (docs/results/cpu/, rendered by scripts/docs_speed_table.py)::

    python scripts/gpu/run_all.py docs/results/cpu --part bench --cpu

OUT gets at most seven files (the device tool returns eight): bench.json, train.json,
precision.json, summary.txt, run_all.log (every command and its output), with --cpu check.json,
with ``--part check`` fast_path_check.json and with ``--part startup`` startup.json.  ``--dry-run`` checks every command instead (archs registered, bench and fairseq
options valid) and writes OUT/plan.json; ``--cpu --tiny`` runs the same code on CPU with tiny
batches and step counts.
"""
import argparse
import contextlib
import io
import json
import os
import re
import shlex
import sys
import tempfile
import time

from fairseq_local_repro import clock
from fairseq_local_repro.bench_entries import ENTRIES
from fairseq_local_repro.gpu.runner import REPO, Run, children_cpu_seconds, shown, write_json
from fairseq_local_repro.gpu.startup_runs import run_startup
from fairseq_local_repro.gpu.train_runs import run_precision, run_train

# the modules each part runs (python -m MODULE), the code of scripts/bench.py and scripts/gpu/check_install.py
BENCH = "fairseq_local_repro.bench"
CHECK_INSTALL = "fairseq_local_repro.gpu.check_install"

# batch sizes and step counts: GPU-sized on cuda; cpu (--cpu): what one core measures in about
# twenty minutes for the comparisons marked cpu; --tiny: the least that exercises every code path
PROFILES = {
    "gpu": "--max-tokens 4000 --steps 20 --warmup 5 --rounds 5 --gen-sentences 96 --gen-batch 32",
    "cpu": "--max-tokens 1000 --steps 72 --warmup 2 --rounds 6 --gen-sentences 48 --gen-batch 8 --threads 1",
    "tiny": "--max-tokens 48 --steps 2 --warmup 1 --rounds 2 --gen-sentences 2 --gen-batch 2 --gen-len 5 "
            "--vocab 100 --src-len 8 --tgt-len 8 --threads 1",
}
# an entry's own options that a profile drops (None) or replaces; otherwise an entry's options win.
# The CPU profile leaves out --lengths: the length scaling is a GPU latency question and would
# double a CPU run.
PROFILE_OVERRIDES = {
    "gpu": {},
    "cpu": {"--lengths": None},
    "tiny": {"--vocab": None, "--tgt-len": None, "--src-len": None, "--gen-len": None, "--lengths": "6,8",
             "--steps": "2", "--warmup": "1", "--rounds": "2", "--gen-sentences": "2"},
}


def profile_of(args):
    return "tiny" if args.tiny else "cpu" if args.cpu else "gpu"


def selected_entries(args):
    """The entries this run measures: --only's matches; with the CPU profile only those marked cpu;
    --part fastpath the compiled-vs-eager ones, every other part the rest."""
    cpu = profile_of(args) == "cpu"
    fast = args.part == "fastpath"
    return [e for e in ENTRIES if args.only_re.search(e["name"]) and (e.get("cpu") or not cpu)
            and bool(e.get("fastpath")) == fast]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (created)")
    p.add_argument("--part", choices=["all", "bench", "train", "precision", "fastpath", "check", "startup"],
                   default="all",
                   help="all: bench then train; precision: fp32 vs --bf16 training; fastpath: --rnn-impl compiled "
                        "vs eager for every family with the option; check: check_install.py --fast-path (auto and "
                        "compiled == eager on the device, CUDA graphs included); startup: scripts/startup_cost.py "
                        "(eager, auto, compiled over five batch shapes) for every family with the option; each of "
                        "the last four is its own call")
    p.add_argument("--budget-minutes", type=float, default=None,
                   help="wall time of this run (default 8.5: one 10-minute device call with bootstrap.sh before it; "
                        "60 with --cpu)")
    p.add_argument("--bench-share", type=float, default=None,
                   help="fraction of the budget for benchmarks with --part all (default 0.6)")
    p.add_argument("--dtypes", default=None, help="comma list of fp32, bf16, fp16 (default fp32,bf16; fp32 with --cpu)")
    p.add_argument("--only", default="", help="regex: run the bench entries whose name matches")
    p.add_argument("--data", default=os.path.join(REPO, "gpu_kit", "data"),
                   help="folder with multi30k/ and lattice/ (scripts/gpu/prepare_data.sh)")
    p.add_argument("--train-data", default=None, help="binarized translation data (default: DATA/multi30k)")
    p.add_argument("--train-archs", default="mc_rnn_iwslt_de_en_3 rnnsearch_iwslt_de_en")
    p.add_argument("--train-args", default="--optimizer adam --lr 0.001 --clip-norm 1.0 --dropout 0.2 "
                                           "--max-tokens 4096 --seed 1",
                   help="fairseq-train options for the training run (besides time and checkpoint options)")
    p.add_argument("--train-dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--precision-arch", default="mc_rnn_iwslt_de_en_3", help="arch of --part precision")
    p.add_argument("--precision-updates", type=int, default=1000, help="updates of each --part precision run")
    p.add_argument("--per-run-timeout", type=float, default=None,
                   help="seconds for one bench comparison (default 240; 900 with --cpu)")
    p.add_argument("--cpu", action="store_true",
                   help="run on CPU (default: cuda, which must be present): the CPU profile, one thread, CPU-sized "
                        "batches, the comparisons marked cpu in fp32; OUT/check.json describes the machine")
    p.add_argument("--tiny", action="store_true", help="tiny batches and step counts (CPU checks)")
    p.add_argument("--machine-note", default="",
                   help="what else ran on the machine during the run (--cpu: kept in OUT/check.json)")
    p.add_argument("--dry-run", action="store_true", help="check every command; run nothing")
    a = p.parse_args(argv)
    cpu_profile = a.cpu and not a.tiny
    if a.dtypes is None:
        a.dtypes = "fp32" if cpu_profile else "fp32,bf16"
    if a.budget_minutes is None:
        a.budget_minutes = 60.0 if cpu_profile else 8.5
    if a.per_run_timeout is None:
        a.per_run_timeout = 900.0 if cpu_profile else 240.0
    a.dtypes = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in a.dtypes if d not in ("fp32", "bf16", "fp16")]
    if bad or not a.dtypes:
        p.error(f"--dtypes: expected a comma list of fp32, bf16, fp16, got {','.join(bad) or 'nothing'}")
    if a.precision_updates < 1:
        p.error("--precision-updates must be >= 1")
    if a.budget_minutes <= 0:
        p.error("--budget-minutes must be > 0")
    if a.per_run_timeout <= 0:
        p.error("--per-run-timeout must be > 0")
    try:
        a.only_re = re.compile(a.only)
    except re.error as e:
        p.error(f"--only {a.only!r}: {e}")
    if a.bench_share is None:
        a.bench_share = {"all": 0.6, "bench": 1.0, "train": 0.0, "precision": 0.0, "fastpath": 1.0,
                         "check": 0.0, "startup": 0.0}[a.part]
    if not 0 <= a.bench_share <= 1:
        p.error("--bench-share must be in [0, 1]")
    a.device = "cpu" if a.cpu else "cuda"
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.train_data = a.train_data or os.path.join(a.data, "multi30k")
    return a


# ------------------------------------------------------------------------------------------------
def bench_argv(entry, dtype, args, json_path=None):
    """The bench.py command line of one entry: its own arguments (less those its profile drops or
    replaces, PROFILE_OVERRIDES), then the profile's batch and step counts that the entry does not
    set itself, device and dtype."""
    profile = profile_of(args)
    overrides = PROFILE_OVERRIDES[profile]
    own, it = [], iter(shlex.split(entry["args"]))
    for tok in it:
        if tok in overrides:
            next(it)
            if overrides[tok] is not None:
                own += [tok, overrides[tok]]
        else:
            own.append(tok)
    set_by_entry = {t for t in own if t.startswith("--")}
    pruned, it = [], iter(shlex.split(PROFILES[profile]))
    for tok in it:
        val = next(it)
        if tok not in set_by_entry:
            pruned += [tok, val]
    argv = own + pruned + ["--device", args.device, "--dtype", dtype]
    if entry.get("data"):
        argv += ["--data", shown(os.path.join(args.data, entry["data"]))]
    if json_path:
        argv += ["--json", json_path]
    return argv


def check_entry(entry, args):
    """Problems with one entry's command (dry run): bench's own options, the archs registered, and
    fairseq's parser accepting each model's arguments.  Returns a list of messages."""
    from fairseq import options
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_local_repro import bench

    problems = []
    if args.device == "cuda" and not _cuda():  # checking a GPU plan here: bench.py would refuse cuda
        args = argparse.Namespace(**{**vars(args), "device": "cpu"})
    argv = bench_argv(entry, args.dtypes[0], args)
    if entry.get("data") and not os.path.isdir(os.path.join(REPO, argv[argv.index("--data") + 1])):
        del argv[argv.index("--data"):argv.index("--data") + 2]  # missing data is a note; options still checked
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            b = bench.parse_args(argv)
    except SystemExit:
        return [f"bench.py rejects the command: {err.getvalue().strip().splitlines()[-1]}"]
    for role, arch, extra in (("arch", b.arch, b.arch_args), ("baseline", b.baseline, b.baseline_args)):
        if arch not in ARCH_MODEL_REGISTRY:
            problems.append(f"--{role} {arch}: not a registered architecture")
            continue
        fargv = [tempfile.gettempdir(), "--user-dir", os.path.join(REPO, "fairseq_local"), "--task", b.task,
                 "--arch", arch] + shlex.split(b.task_args) + shlex.split(extra)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                options.parse_args_and_arch(options.get_training_parser(), fargv)
        except SystemExit:
            problems.append(f"fairseq rejects --{role} {arch} {extra}: {err.getvalue().strip().splitlines()[-1]}")
    return problems


def _cuda():
    import torch

    return torch.cuda.is_available()


def run_bench(run, args):
    results = []
    # a --part fastpath call keeps its own file, so that it never replaces a --part bench result
    path = os.path.join(args.out, "fastpath.json" if args.part == "fastpath" else "bench.json")
    machine = cpu_machine(args, run.env) if args.cpu else None  # OUT/check.json of a CPU run
    stop_at = run.t0 + 60 * args.budget_minutes * args.bench_share
    with tempfile.TemporaryDirectory(prefix="run_all_bench_") as tmp:
        for entry in selected_entries(args):
            for dtype in args.dtypes:
                rec = {"name": entry["name"], "family": entry["family"], "dtype": dtype, "goal": entry["goal"]}
                jpath = os.path.join(tmp, f"{entry['name']}.{dtype}.json")
                argv = bench_argv(entry, dtype, args)
                rec["command"] = "python scripts/bench.py " + shlex.join(argv)  # less this run's own --json
                if entry.get("data") and not os.path.isdir(os.path.join(args.data, entry["data"])):
                    rec.update(status="skipped", reason=f"no {os.path.join(args.data, entry['data'])}: "
                                                        "run scripts/gpu/prepare_data.sh and carry gpu_kit")
                elif time.time() >= stop_at:
                    rec.update(status="skipped", reason="out of time (--budget-minutes)")
                else:
                    load, cpu, t = os.getloadavg()[0], children_cpu_seconds(), time.time()
                    rc, tail = run.sh([sys.executable, "-m", BENCH] + argv + ["--json", jpath],
                                      timeout=min(args.per_run_timeout, run.deadline - time.time()))
                    rec["seconds"] = clock.seconds(time.time() - t)
                    if rc == 0 and os.path.isfile(jpath):
                        with open(jpath, encoding="utf-8") as f:
                            res = json.load(f)
                        res["args"]["json"] = None  # a temporary file of this run
                        rec.update(status="ok", train_ratio=res["train_ratio"], result=res)
                        rows = res["rows"]
                        if "gen_sent_per_s" in rows[0]:
                            rec["gen_ratio"] = rows[0]["gen_sent_per_s"] / rows[1]["gen_sent_per_s"]
                        if entry["goal"] is not None:
                            rec["meets_goal"] = res["train_ratio"] >= entry["goal"]
                        rec["device_name"] = res.get("device_name")
                        # time to the first update (compilation included) and compiled variants, A and B
                        rec["first_step_s"] = [r.get("first_step_s") for r in rows]
                        rec["compiled_variants"] = [r.get("compiled_variants") for r in rows]
                    else:
                        rec.update(status="timeout" if rc is None else "failed", error=tail)
                    if machine is not None:
                        machine["entries"].append({
                            "name": entry["name"], "dtype": dtype, "status": rec["status"],
                            "load_1min_before": round(load, 2), "load_1min_after": round(os.getloadavg()[0], 2),
                            "cpu_seconds": clock.seconds(children_cpu_seconds() - cpu), "wall_seconds": rec["seconds"],
                            "torch_threads": rec.get("result", {}).get("torch_threads")})
                        write_json(os.path.join(args.out, "check.json"), machine)
                run.say(f"bench {entry['name']} {dtype}: {rec['status']}"
                        + (f" train ratio {rec['train_ratio']:.2f}" if "train_ratio" in rec else ""))
                results.append(rec)
                write_json(path, {"device": args.device, "tiny": args.tiny, "entries": results})
    return results


def run_check(run, args):
    """scripts/gpu/check_install.py --fast-path on the run's device: OUT/fast_path_check.json."""
    path = os.path.join(args.out, "fast_path_check.json")
    cmd = [sys.executable, "-m", CHECK_INSTALL, "--device", args.device, "--fast-path",
           "--json", path]
    if args.tiny:
        cmd.append("--tiny")
    rc, tail = run.sh(cmd, timeout=max(60.0, run.left()))
    run.say(f"check --fast-path: {'ok' if rc == 0 else 'failed'}")
    if rc != 0:
        write_json(path, {"status": "failed" if rc is not None else "timeout", "error": tail})
    return rc


def cpu_machine(args, env):
    """The machine description of a CPU run (OUT/check.json): processor, versions, threads, the
    command, --machine-note; run_bench adds each comparison's 1-minute load average before and
    after it and the CPU seconds of its process against its wall seconds (1.0: a whole core)."""
    import torch

    from fairseq_local_repro.bench import cpu_model
    from fairseq_local_repro.gpu import check_install

    command = ["python", "scripts/gpu/run_all.py"] + [shown(a) if a == args.out else a for a in args.argv]
    report = {"device": "cpu", "cpu_model": cpu_model(), "logical_cpus": os.cpu_count(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), **check_install.versions(),
              "profile": profile_of(args), "command": shlex.join(command),
              "env_threads": {k: env.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
              "note": args.machine_note, "entries": []}
    write_json(os.path.join(args.out, "check.json"), report)
    return report


def summary(args, bench, train, precision=None):
    lines = [f"device={args.device} dtypes={','.join(args.dtypes)} tiny={args.tiny}", ""]
    if bench:
        lines.append(f"{'comparison':36} {'dtype':5} {'train A/B':>9} {'goal':>5} {'gen A/B':>8}  status")
        for r in bench:
            ratio = f"{r['train_ratio']:9.2f}" if "train_ratio" in r else f"{'-':>9}"
            goal = f"{r['goal']:5.2f}" if r["goal"] is not None else f"{'-':>5}"
            gen = f"{r['gen_ratio']:8.2f}" if "gen_ratio" in r else f"{'-':>8}"
            first = r.get("first_step_s")
            first = f"  first update A {first[0]:.1f} s, B {first[1]:.1f} s" if first and None not in first else ""
            lines.append(f"{r['name']:36} {r['dtype']:5} {ratio} {goal} {gen}  {r['status']}{first}")
        names = {r["device_name"] for r in bench if r.get("device_name")}
        if names:
            lines[0] += f" ({', '.join(sorted(names))})"
    if train:
        lines += ["", f"training ({train.get('minutes_each', '-')} min each): {train.get('status')}"]
        for arch, r in train.get("archs", {}).items():
            bleu = r.get("valid_bleu", {}).get("bleu", "-")
            last = r.get("valid_loss_per_epoch") or ["-"]
            lines.append(f"  {arch:28} {r['status']:6} updates {r.get('num_updates')} words/s {r.get('train_wps')} "
                         f"valid loss {last[-1]} BLEU {bleu}")
    if precision:
        lines += ["", f"precision ({precision['arch']}, {precision['updates']} updates): {precision.get('status')}"]
        for dtype, r in precision.get("runs", {}).items():
            last = r.get("valid_loss_per_epoch") or ["-"]
            lines.append(f"  {dtype:5} {r['status']:6} updates {r.get('num_updates')} words/s {r.get('train_wps')} "
                         f"valid loss {last[-1]}")
        if "valid_loss_rel_diff" in precision:
            lines.append(f"  bf16 vs fp32 valid loss {100 * precision['valid_loss_rel_diff']:+.2f}% "
                         f"(goal within 1%: {'met' if precision['meets_goal'] else 'not met'})")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "summary.txt.tmp"), "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(os.path.join(args.out, "summary.txt.tmp"), os.path.join(args.out, "summary.txt"))
    print(text)


def main(argv=None):
    args = parse_args(argv)
    if args.dry_run:
        import warnings

        warnings.filterwarnings("ignore")
        import fairseq_local  # noqa: F401  (registers our archs)

        plan, bad = [], 0
        for entry in selected_entries(args):
            problems = check_entry(entry, args)
            bad += bool(problems)
            data = os.path.join(args.data, entry["data"]) if entry.get("data") else None
            missing = data if data and not os.path.isdir(data) else None
            if missing:
                print(f"run_all: note: {entry['name']} needs {missing} (scripts/gpu/prepare_data.sh): "
                      "skipped in a run without it", file=sys.stderr)
            plan.append({"name": entry["name"], "problems": problems, "missing_data": missing,
                         "commands": ["python scripts/bench.py " + " ".join(shlex.quote(a) for a in
                                                                            bench_argv(entry, d, args))
                                      for d in args.dtypes]})
            for c in plan[-1]["commands"]:
                print(c)
            for msg in problems:
                print(f"run_all: error: {entry['name']}: {msg}", file=sys.stderr)
        os.makedirs(args.out, exist_ok=True)
        write_json(os.path.join(args.out, "plan.json"), plan)
        sys.exit(1 if bad else 0)
    if not args.cpu and not _cuda():
        sys.exit("run_all: error: no CUDA device (use --cpu --tiny to check the script on CPU)")
    run = Run(args)
    run.say(f"run_all {' '.join(sys.argv[1:])}: budget {args.budget_minutes} min")
    bench = run_bench(run, args) if args.part in ("all", "bench", "fastpath") else []
    if args.part == "check":
        run_check(run, args)
    if args.part == "startup":
        run_startup(run, args)
    train = run_train(run, args) if args.part in ("all", "train") else None
    precision = run_precision(run, args) if args.part == "precision" else None
    summary(args, bench, train, precision)


if __name__ == "__main__":
    main()
