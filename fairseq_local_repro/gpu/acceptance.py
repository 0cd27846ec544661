"""The GPU acceptance run: a real fairseq-train per family with CUDA graphs in strict mode, time-boxed.

    python scripts/gpu/acceptance.py OUT [--data gpu_kit/data/acceptance] [--budget-minutes 8.5] [--started-at EPOCH]

For every family (:data:`FAMILIES`: MC-RNN-3, the parallel-cell LM and seq2seq, the lattice model,
genCNN, DPN-S2S, each with the model and fairseq baseline of its main speed comparison in
``bench_entries.py``), three fairseq-train runs on the corpus of :mod:`.acceptance_corpus`
(IWSLT14-like sentence lengths; fairseq's data loader with its defaults, ``--max-tokens 4000``):

* ``graphs``: ``--rnn-impl cuda-graphs --graph-fallback error`` (the captured path, strict: any
  fallback to eager is an error) for ``--updates`` updates, crossing an epoch boundary;
* ``eager``: the same run with ``--rnn-impl eager``, ``--compare-updates`` updates;
* ``baseline``: the family's fairseq baseline, ``--compare-updates`` updates.

Each family's runs go one after the other in one process (:mod:`.acceptance_train`: a start-up
per family, not per run), the family time-boxed: it gets an equal share of the time left before
the deadline (``--started-at`` + ``--budget-minutes``, so a device call's install counts), so the
time a family leaves unused goes to the families after it; inside it each run is told to stop
(fairseq's ``--stop-time-hours``) at its weight's share (``--weights``) of the family's time left,
less ``--soft-margin`` seconds for start-up and validation; the process, with its process group,
is killed at the box's end.  A run cut off is recorded as such (``timeout``; stopped before its
updates: ``short``) and the rest still runs.  OUT/acceptance.json (rewritten after every family)
has per family each run's updates, tokens/s, peak memory and ``fast_path.stats()`` (variants,
graphs captured, capture and capture-ahead seconds, fallbacks, graph bytes, graphs captured per
epoch), the graphs' ratios to eager and to the baseline, and a verdict: ``ok`` only when every family's three runs finished, its
graphs run met no fallback, captured graphs and captured none after its first epoch
(:func:`family_verdict`); OUT/acceptance.log has every run's output.

CPU checks (tests/test_gpu_kit.py): ``--cpu --tiny`` (tiny models and batches) with
``--graphs-options "--rnn-impl eager"``, which stands in for the GPU-only options.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import torch

from fairseq_local_core.file_io import read_json, write_json
from fairseq_local_repro.bench_entries import ENTRIES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = "fairseq_local_repro.gpu.acceptance_train"
MODES = ("graphs", "eager", "baseline")
GRAPHS_OPTIONS = "--rnn-impl cuda-graphs --graph-fallback error"
EAGER_OPTIONS = "--rnn-impl eager"
TRAIN_OPTIONS = "--optimizer adam --lr 0.0005 --clip-norm 1.0 --seed 1 --log-format json --log-interval 50"
DATA_OPTIONS = {"translation": "--source-lang de --target-lang en",
                "lm": "--sample-break-mode eos --tokens-per-sample 512",
                "lattice": "--source-lang zh --target-lang en"}
# family: its main speed comparison (bench_entries.ENTRIES), corpus, and whether its training loop
# is captured (the parallel-cell LM runs the fused cuDNN kernel per cell: no graph to capture)
FAMILIES = {  # in the order they run: the slower ones last, where the time the others leave goes
    "parallel_lm": dict(entry="parallel_lm648_wide3_vs_lstm_lm", data="lm", expect_graphs=False),
    "gencnn": dict(entry="gencnn_vs_fconv_lm", data="lm", expect_graphs=True),
    "dpn_s2s": dict(entry="dpn_vs_transformer", data="translation", expect_graphs=True),
    "parallel_mt": dict(entry="parallel_mt510_wide3_vs_lstm", data="translation", expect_graphs=True),
    "lattice": dict(entry="lattice_dwl_gating_vs_word", data="lattice", expect_graphs=True),
    "mc_rnn": dict(entry="mc_rnn3_vs_lstm", data="translation", expect_graphs=True),
}
# --tiny: model sizes that train in seconds on CPU (arch options, baseline options)
_TINY_RNN = "--encoder-embed-dim 8 --encoder-hidden-size 8 --decoder-embed-dim 8 --decoder-hidden-size 8"
TINY = {
    "mc_rnn": (_TINY_RNN + " --attention-dim 8", _TINY_RNN + " --decoder-out-embed-dim 8"),
    "parallel_lm": ("--wide 2 --decoder-hidden-size 8 --decoder-embed-dim 8 --decoder-layers 1",
                    "--decoder-hidden-size 8 --decoder-embed-dim 8 --decoder-out-embed-dim 8 --decoder-layers 1"),
    "parallel_mt": ("--wide 2 " + _TINY_RNN, _TINY_RNN + " --decoder-out-embed-dim 8"),
    "lattice": (_TINY_RNN + " --decoder-out-embed-dim 8 --attention-dim 8",
                _TINY_RNN + " --decoder-out-embed-dim 8 --attention-dim 8"),
    "gencnn": ("--decoder-embed-dim 6 --alpha-length 6 --beta-length 4 --alpha-layers (2,3,3),(2,2,2) "
               "--beta-layers (2,3,0),(1,3,0) --fc-dim 8",
               "--decoder-embed-dim 8 --decoder-layers [(8,3)]*2 --decoder-out-embed-dim 8"),
    "dpn_s2s": ("--encoder-embed-dim 8 --decoder-embed-dim 8 --encoder-conv-dim 8 --decoder-conv-dim 8 "
                "--encoder-ffn-embed-dim 16 --decoder-ffn-embed-dim 16 --encoder-attention-heads 2 "
                "--decoder-attention-heads 2",
                "--encoder-embed-dim 8 --decoder-embed-dim 8 --encoder-ffn-embed-dim 16 --decoder-ffn-embed-dim 16 "
                "--encoder-attention-heads 2 --decoder-attention-heads 2"),
}
STATUSES = ("ok", "short", "failed", "timeout", "skipped")
SCHEMA = 1


def family_models(family: str) -> dict:
    """The task, arch and baseline of ``family``'s main comparison (its bench entry's options)."""
    entry = next(e for e in ENTRIES if e["name"] == FAMILIES[family]["entry"])
    toks = shlex.split(entry["args"])
    opt = {k: v for k, v in zip(toks, toks[1:]) if k.startswith("--")}
    return {"task": opt.get("--task", "translation"), "arch": opt["--arch"], "arch_args": opt.get("--arch-args", ""),
            "baseline": opt["--baseline"], "baseline_args": opt.get("--baseline-args", "")}


def train_argv(family: str, mode: str, args, save_dir: str) -> list:
    """fairseq-train's command line of one run (its data folder first)."""
    spec, m = FAMILIES[family], family_models(family)
    tiny = TINY[family] if args.tiny else None
    if mode == "baseline":
        model = ["--arch", m["baseline"], *shlex.split(tiny[1] if tiny else m["baseline_args"])]
    else:
        impl = args.graphs_options if mode == "graphs" else EAGER_OPTIONS
        model = ["--arch", m["arch"], *shlex.split(tiny[0] if tiny else m["arch_args"]), *shlex.split(impl)]
    updates = args.updates if mode == "graphs" else args.compare_updates
    argv = [os.path.join(args.data, spec["data"]), "--user-dir", os.path.join(REPO, "fairseq_local"),
            "--task", m["task"], *shlex.split(DATA_OPTIONS[spec["data"]]), *model, *shlex.split(TRAIN_OPTIONS),
            "--max-tokens", str(args.max_tokens), "--max-update", str(updates), "--save-dir", save_dir, "--no-save"]
    return argv + (["--cpu"] if args.cpu else [])


def time_box(now: float, deadline: float, weights: list) -> float:
    """Seconds for the next part: its weight's share (``weights[0]``) of the time left, shared with
    the parts still to run (``weights[1:]``), so time a part leaves unused goes to the rest."""
    return max(0.0, deadline - now) * weights[0] / sum(weights)


def run_part(cmd: list, box: float, log, env: dict):
    """Run ``cmd`` in its own process group, output appended to ``log``; kill the group once ``box``
    seconds have passed, or when this process is stopped (SIGTERM, Ctrl-C) while it runs.  Returns
    (returncode or None when killed, seconds)."""
    t = time.time()
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True)
    rc = None
    try:
        rc = proc.wait(timeout=max(0.1, box))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return rc, round(time.time() - t, 2)


def _stop(signum, frame):
    """SIGTERM (the device call's own time limit): end like Ctrl-C, so the running family is killed."""
    raise SystemExit(128 + signum)


def _tail(path: str, since: int, lines: int = 6) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(since)
        return "\n".join(f.read().strip().splitlines()[-lines:])


def run_record(mode: str, rc, result: dict, args) -> dict:
    """A finished run's status and its headline numbers (lifted from the worker's record)."""
    fp = (result or {}).get("fast_path", {})
    variants = fp.get("variants")
    rec = {"updates": (result or {}).get("updates"), "tokens_per_s": (result or {}).get("tokens_per_s"),
           "peak_memory_bytes": (result or {}).get("peak_memory_bytes"),
           "graphs_captured": fp.get("graphs_captured"), "capture_s": fp.get("capture_s"),
           "capture_ahead_s": fp.get("capture_ahead_s"), "graph_fallbacks": fp.get("graph_fallbacks"),
           "variants": sum(variants.values()) if isinstance(variants, dict) else variants,
           "graph_bytes": fp.get("graph_bytes"),
           "captures_after_epoch_1": sum(e["graphs_captured"] for e in (result or {}).get("epochs", [])[1:])}
    need = args.updates if mode == "graphs" else args.warmup_updates + args.min_measured
    if rc is None:
        rec["status"] = "timeout"
    elif rc != 0 or not result or result.get("error"):
        rec["status"] = "failed"
    elif (rec["updates"] or 0) < need or rec["tokens_per_s"] is None:
        rec["status"] = "short"
        rec["reason"] = f"{rec['updates']} updates of the {need} it needs (stopped at its time box)"
    else:
        rec["status"] = "ok"
    return rec


def family_verdict(family: str, runs: dict):
    """(``ok`` or ``failed``, reasons): ok only when the three runs finished and the graphs run met
    no fallback, captured nothing after its first epoch and, where the family's loop is captured,
    captured graphs."""
    reasons = []
    for mode in MODES:
        r = runs.get(mode)
        if r is None:
            reasons.append(f"{mode}: not run")
        elif r["status"] != "ok":
            reasons.append(f"{mode}: {r['status']}" + (f" ({r.get('reason') or r.get('error')})"
                                                      if r.get("reason") or r.get("error") else ""))
    g = runs.get("graphs")
    if g is not None and g["status"] in ("ok", "short"):
        if g.get("graph_fallbacks") is None:
            reasons.append("graphs: fast_path.stats() has no graph_fallbacks")
        elif g["graph_fallbacks"] > 0:
            reasons.append(f"graphs: {g['graph_fallbacks']} graph fallbacks (must be 0)")
        if FAMILIES[family]["expect_graphs"] and not g.get("graphs_captured"):
            reasons.append("graphs: no CUDA graph captured (the captured path did not run)")
        if g.get("captures_after_epoch_1"):
            reasons.append(f"graphs: {g['captures_after_epoch_1']} graphs captured after epoch 1 (the declared "
                           "shapes are all captured in the first)")
    return ("ok" if not reasons else "failed"), reasons


def verdict(families: dict):
    """(``ok`` or ``failed``, reasons) of the whole run: every family of FAMILIES present and ok."""
    reasons = [f"{f}: not run" for f in FAMILIES if f not in families]
    reasons += [f"{f}: {why}" for f, rec in families.items() for why in rec.get("reasons", [])]
    reasons += [f"{f}: {rec.get('status')}" for f, rec in families.items()
                if rec.get("status") != "ok" and not rec.get("reasons")]
    return ("ok" if not reasons else "failed"), reasons


def ratios(runs: dict) -> dict:
    """The graphs run's tokens/s over eager's and over the baseline's, and its peak memory over eager's."""
    def ratio(a, b, key):
        x, y = (runs.get(a) or {}).get(key), (runs.get(b) or {}).get(key)
        return round(x / y, 3) if x and y else None

    return {"graphs_over_eager_tokens_per_s": ratio("graphs", "eager", "tokens_per_s"),
            "graphs_over_baseline_tokens_per_s": ratio("graphs", "baseline", "tokens_per_s"),
            "graphs_over_eager_peak_memory": ratio("graphs", "eager", "peak_memory_bytes")}


def check_schema(report: dict) -> list:
    """Problems with an acceptance.json (an empty list when it has the documented shape)."""
    problems = []
    for key, kind in (("schema", int), ("device", str), ("verdict", str), ("reasons", list), ("families", dict),
                      ("options", dict), ("budget_s", (int, float)), ("seconds", (int, float))):
        if not isinstance(report.get(key), kind):
            problems.append(f"{key}: missing or not {getattr(kind, '__name__', kind)}")
    if report.get("verdict") not in ("ok", "failed", "running"):
        problems.append(f"verdict: {report.get('verdict')!r}")
    for fam, rec in (report.get("families") or {}).items():
        if fam not in FAMILIES:
            problems.append(f"families.{fam}: not a family")
        for key in ("arch", "baseline", "runs", "status", "reasons", "ratios", "box_s", "seconds"):
            if key not in rec:
                problems.append(f"families.{fam}.{key}: missing")
        for mode, run in (rec.get("runs") or {}).items():
            if mode not in MODES:
                problems.append(f"families.{fam}.runs.{mode}: not a mode")
            if run.get("status") not in STATUSES:
                problems.append(f"families.{fam}.runs.{mode}.status: {run.get('status')!r}")
            for key in ("command", "seconds", "updates", "tokens_per_s", "peak_memory_bytes",
                        "graphs_captured", "capture_s", "capture_ahead_s", "graph_fallbacks", "variants",
                        "captures_after_epoch_1"):
                if key not in run:
                    problems.append(f"families.{fam}.runs.{mode}.{key}: missing")
    return problems


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="output folder (created): acceptance.json, acceptance.log")
    p.add_argument("--data", default=os.path.join(REPO, "gpu_kit", "data", "acceptance"),
                   help="the corpora of acceptance_corpus.py (default gpu_kit/data/acceptance)")
    p.add_argument("--budget-minutes", type=float, default=8.5,
                   help="wall time from --started-at to the last run's end (default 8.5)")
    p.add_argument("--started-at", type=float, default=None,
                   help="Unix time the budget counts from (default: now; a device call passes its start, so "
                        "the install counts)")
    p.add_argument("--only", default=",".join(FAMILIES), help="comma list of families (default: all; a run "
                                                              "without every family is never accepted)")
    p.add_argument("--modes", default=",".join(MODES), help="comma list of graphs, eager, baseline (default all)")
    p.add_argument("--updates", type=int, default=200, help="updates of each graphs run (default 200)")
    p.add_argument("--compare-updates", type=int, default=60, help="updates of each eager and baseline run (default 60)")
    p.add_argument("--warmup-updates", type=int, default=5, help="updates left out of tokens/s (default 5)")
    p.add_argument("--min-measured", type=int, default=10,
                   help="measured updates an eager or baseline run needs past its warm-up (default 10)")
    p.add_argument("--max-tokens", type=int, default=4000, help="fairseq's --max-tokens (default 4000)")
    p.add_argument("--weights", default="3,1,1", help="time-box weights of a graphs, eager and baseline run (default 3,1,1)")
    p.add_argument("--soft-margin", type=float, default=15.0,
                   help="seconds of each run's share kept for its start-up and validation: the rest is training "
                        "(default 15)")
    p.add_argument("--min-box", type=float, default=20.0,
                   help="a family whose box would be shorter is skipped (default 20)")
    p.add_argument("--reserve", type=float, default=5.0, help="seconds kept back at the deadline (default 5)")
    p.add_argument("--graphs-options", default=GRAPHS_OPTIONS,
                   help=f"the graphs runs' options (default '{GRAPHS_OPTIONS}'; CPU checks pass '{EAGER_OPTIONS}')")
    p.add_argument("--cpu", action="store_true", help="train on CPU (fairseq's --cpu; the CPU checks)")
    p.add_argument("--tiny", action="store_true", help="tiny models (TINY) and batches (the CPU checks)")
    a = p.parse_args(argv)
    a.families = [f for f in a.only.split(",") if f]
    a.mode_list = [m for m in a.modes.split(",") if m]
    bad = [f for f in a.families if f not in FAMILIES] + [m for m in a.mode_list if m not in MODES]
    if bad or not a.families or not a.mode_list:
        p.error(f"--only/--modes: unknown {', '.join(bad) or 'nothing chosen'} (families: {', '.join(FAMILIES)}; "
                f"modes: {', '.join(MODES)})")
    try:
        a.weight = dict(zip(MODES, (float(w) for w in a.weights.split(",")), strict=True))
    except ValueError:
        p.error(f"--weights: expected three numbers, got {a.weights!r}")
    if min(a.weight.values()) <= 0:
        p.error("--weights must be > 0")
    for opt, v in (("--budget-minutes", a.budget_minutes), ("--updates", a.updates),
                   ("--compare-updates", a.compare_updates), ("--max-tokens", a.max_tokens)):
        if v <= 0:
            p.error(f"{opt} must be > 0 (got {v})")
    if a.compare_updates < a.warmup_updates + a.min_measured:
        p.error(f"--compare-updates must be >= --warmup-updates + --min-measured ({a.warmup_updates + a.min_measured})")
    a.started_at = time.time() if a.started_at is None else a.started_at
    a.argv = list(sys.argv[1:] if argv is None else argv)
    return a


def _say(log, msg, t0):
    line = f"[{time.strftime('%H:%M:%S')} +{time.time() - t0:5.0f}s] {msg}"
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


def _fmt(x, unit=""):
    return "-" if x is None else f"{x:,.0f}{unit}" if isinstance(x, (int, float)) and abs(x) >= 100 else f"{x}{unit}"


def main(argv=None):
    a = parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    if not a.cpu and not torch.cuda.is_available():
        sys.exit("acceptance: error: no CUDA device (use --cpu --tiny to check the kit on CPU)")
    for f in a.families:
        d = os.path.join(a.data, FAMILIES[f]["data"])
        if not os.path.isdir(d):
            sys.exit(f"acceptance: error: --data {a.data}: no {FAMILIES[f]['data']}/ (build it with "
                     f"python scripts/gpu/acceptance_corpus.py {a.data})")
    deadline = a.started_at + 60 * a.budget_minutes - a.reserve
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "acceptance.json")
    log_path = os.path.join(a.out, "acceptance.log")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    corpus = os.path.join(a.data, "corpus.json")
    report = {"schema": SCHEMA, "device": "cpu" if a.cpu else "cuda", "device_name": None, "verdict": "running",
              "reasons": [], "command": shlex.join(["python", "scripts/gpu/acceptance.py", *a.argv]),
              "options": {k: getattr(a, k) for k in ("updates", "compare_updates", "warmup_updates", "min_measured",
                                                     "max_tokens", "weights", "graphs_options", "tiny")},
              "train_options": TRAIN_OPTIONS, "budget_s": round(deadline - a.started_at, 1), "seconds": 0.0,
              "corpus": read_json(corpus) if os.path.isfile(corpus) else None, "families": {}}
    for f in a.families:
        m = family_models(f)
        report["families"][f] = {"arch": m["arch"], "baseline": m["baseline"], "task": m["task"],
                                 "expect_graphs": FAMILIES[f]["expect_graphs"], "runs": {}, "status": "running",
                                 "reasons": [], "ratios": {}, "box_s": None, "seconds": 0.0}
    modes = [m for m in MODES if m in a.mode_list]
    with open(log_path, "a", encoding="utf-8") as log, tempfile.TemporaryDirectory(prefix="acceptance_") as tmp:
        t0 = time.time()
        _say(log, f"acceptance: {len(a.families)} families x {len(modes)} runs, {deadline - t0:.0f} s left "
                  f"of {a.budget_minutes} min", t0)
        for i, f in enumerate(a.families):
            fam = report["families"][f]
            box = min(time_box(time.time(), deadline, [1.0] * (len(a.families) - i)), deadline - time.time())
            fam["box_s"], fam["seconds"] = round(box, 1), 0.0
            runs = [{"mode": m, "weight": a.weight[m], "json": os.path.join(tmp, f"{f}.{m}.json"),
                     "argv": train_argv(f, m, a, os.path.join(tmp, f"{f}.{m}"))} for m in modes]
            plan = os.path.join(tmp, f"{f}.plan.json")
            write_json(plan, {"deadline": time.time() + box, "margin": a.soft_margin,
                              "warmup_updates": a.warmup_updates, "runs": runs})
            rc, since = "skipped", os.path.getsize(log_path)
            if box >= a.min_box:
                _say(log, f"{f}: start ({', '.join(modes)}; {box:.0f} s box)", t0)
                rc, fam["seconds"] = run_part([sys.executable, "-m", WORKER, plan], box, log, env)
            for run in runs:
                result = read_json(run["json"]) if os.path.isfile(run["json"]) else None
                rec = {"command": shlex.join(["python", "-m", WORKER, "--", *[
                    os.path.relpath(c, REPO) if os.path.isabs(c) and c.startswith(REPO) else c for c in run["argv"]]])}
                if rc == "skipped":
                    rec.update(run_record(run["mode"], 0, None, a), status="skipped",
                               reason=f"out of time ({box:.0f} s left for the family, --min-box {a.min_box:g})")
                elif result is None:  # never finished: the box ended first, or the process died
                    rec.update(run_record(run["mode"], None if rc is None else rc or 1, None, a))
                    rec["error"] = "killed at the end of the family's time box" if rc is None else _tail(log_path, since)
                else:
                    rec.update(run_record(run["mode"], 1 if result.get("error") else 0, result, a))
                    rec.update(seconds=result.get("seconds"), stop_after_s=result.get("stop_after_s"), result=result)
                    if result.get("error"):
                        rec["error"] = result["error"]
                    report["device_name"] = report["device_name"] or result.get("device_name")
                rec.setdefault("seconds", None)
                fam["runs"][run["mode"]] = rec
                _say(log, f"{f} {run['mode']}: {rec['status']}; {_fmt(rec['updates'])} updates, "
                          f"{_fmt(rec['tokens_per_s'])} tok/s, peak "
                          f"{_fmt(rec['peak_memory_bytes'] and rec['peak_memory_bytes'] / 2**20, ' MiB')}, "
                          f"variants {_fmt(rec['variants'])}, captured {_fmt(rec['graphs_captured'])}, capture "
                          f"{_fmt(rec['capture_s'])} s (ahead {_fmt(rec['capture_ahead_s'])} s), fallbacks "
                          f"{_fmt(rec['graph_fallbacks'])}" + (f" ({(rec.get('reason') or rec.get('error'))[-300:]})"
                                                                if rec.get("reason") or rec.get("error") else ""), t0)
            fam["status"], fam["reasons"] = family_verdict(f, fam["runs"])
            fam["ratios"] = ratios(fam["runs"])
            report["seconds"] = round(time.time() - a.started_at, 1)
            write_json(path, report, indent=2)
        report["verdict"], report["reasons"] = verdict(report["families"])
        report["seconds"] = round(time.time() - a.started_at, 1)
        write_json(path, report, indent=2)
        for f, fam in report["families"].items():
            r = fam["ratios"]
            _say(log, f"{f}: {fam['status']}; graphs/eager tok/s {_fmt(r['graphs_over_eager_tokens_per_s'])}, "
                      f"graphs/baseline {_fmt(r['graphs_over_baseline_tokens_per_s'])}, graphs/eager peak memory "
                      f"{_fmt(r['graphs_over_eager_peak_memory'])}", t0)
        _say(log, f"verdict: {report['verdict']}" + "".join(f"\n  {why}" for why in report["reasons"]), t0)
    return 0 if report["verdict"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
