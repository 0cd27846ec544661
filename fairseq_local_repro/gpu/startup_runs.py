"""``--part startup`` of the GPU kit: the start-up cost of ``--rnn-impl`` (``scripts/startup_cost.py``:
one training step per batch shape, five shapes in three time buckets) for one model of every family
with the option; OUT/startup.json."""
import json
import os
import shlex
import sys
import tempfile
import time

from fairseq_local_repro import clock
from fairseq_local_repro.gpu.runner import write_json

STARTUP = "fairseq_local_repro.startup"  # the module of scripts/startup_cost.py
# sizes of the docs' "Speed" sections; the compiled runs last (their compilation takes longest)
# --part startup: the start-up cost of --rnn-impl (scripts/startup_cost.py: one training step per batch
# shape, five shapes in three time buckets) for one model of every family with the option, sizes of
# the docs' "Speed" sections; the compiled runs last (their compilation takes longest)
STARTUP_RUNS = [
    dict(name="mc_rnn3", args="--arch mc_rnn_iwslt_de_en_3"),
    dict(name="parallel_lm648_wide3", args="--task language_modeling --arch parallel_lstm_lm --arch-args "
                                           "'--wide 3 --decoder-hidden-size 648 --decoder-embed-dim 648 --decoder-layers 2' "
                                           "--vocab 10000 --shapes 32x35,48x35,20x35,64x20,40x12"),
    dict(name="gencnn", args="--task language_modeling --arch gencnn_paper --shapes 32x50,48x40,20x50,64x20,40x12"),
    dict(name="dpn_s2s", args="--arch dpn_s2s_iwslt_de_en"),
]
STARTUP_IMPLS = ("eager,cuda-graphs", "compiled")


def startup_argv(run_spec, impls, args):
    argv = shlex.split(run_spec["args"]) + ["--impls", impls, "--device", args.device]
    if args.tiny:  # the least that runs every code path: tiny models, two small shapes
        lm = "language_modeling" in run_spec["args"]
        argv += ["--shapes", "2x5,3x4" if lm else "2x5x6,3x4x5", "--vocab", "100"]
        if "--arch-args" not in run_spec["args"]:
            argv += ["--arch-args", TINY_STARTUP.get(run_spec["name"], "")]
    return argv


TINY_STARTUP = {
    "mc_rnn3": "--encoder-embed-dim 8 --encoder-hidden-size 8 --decoder-embed-dim 8 --decoder-hidden-size 8 "
               "--attention-dim 8",
    "gencnn": "--decoder-embed-dim 6 --alpha-length 6 --beta-length 4 --alpha-layers (2,3,3),(2,2,2) "
              "--beta-layers (2,3,0),(1,3,0) --fc-dim 8",
    "dpn_s2s": "--encoder-embed-dim 8 --decoder-embed-dim 8 --encoder-conv-dim 8 --decoder-conv-dim 8 "
               "--encoder-ffn-embed-dim 16 --decoder-ffn-embed-dim 16 --encoder-attention-heads 2 "
               "--decoder-attention-heads 2",
}


def run_startup(run, args):
    """scripts/startup_cost.py for every STARTUP_RUNS model, eager and cuda-graphs first, compiled after
    (each its own process, time-boxed); OUT/startup.json is rewritten after every run."""
    path = os.path.join(args.out, "startup.json")
    results = []
    with tempfile.TemporaryDirectory(prefix="run_all_startup_") as tmp:
        for impls in STARTUP_IMPLS:
            for spec in (s for s in STARTUP_RUNS if args.only_re.search(s["name"])):
                if args.cpu and not args.tiny and "cuda-graphs" in impls:
                    impls_here = "eager"  # on CPU cuda-graphs is eager
                else:
                    impls_here = impls
                argv = startup_argv(spec, impls_here, args)
                if args.tiny and spec["name"] == "parallel_lm648_wide3":
                    argv[argv.index("--arch-args") + 1] = "--wide 2 --decoder-hidden-size 8 --decoder-embed-dim 8"
                rec = {"name": spec["name"], "impls": impls_here,
                       "command": "python scripts/startup_cost.py " + shlex.join(argv)}
                if run.left() <= 5:
                    rec.update(status="skipped", reason="out of time (--budget-minutes)")
                else:
                    jpath = os.path.join(tmp, f"{spec['name']}.{impls_here}.json")
                    t = time.time()
                    rc, tail = run.sh([sys.executable, "-m", STARTUP] + argv + ["--json", jpath],
                                      timeout=min(args.per_run_timeout, run.left()))
                    rec["seconds"] = clock.seconds(time.time() - t)
                    if rc == 0 and os.path.isfile(jpath):
                        with open(jpath, encoding="utf-8") as f:
                            rec.update(status="ok", result=json.load(f))
                    else:
                        rec.update(status="timeout" if rc is None else "failed", error=tail)
                run.say(f"startup {spec['name']} {impls_here}: {rec['status']}" + "".join(
                    f"; {impl} {t['seconds']} s, {t['kernels']} kernels, {t['graphs_captured']} graphs"
                    for impl, t in rec.get("result", {}).get("totals", {}).items()))
                results.append(rec)
                write_json(path, {"device": args.device, "tiny": args.tiny, "runs": results})
    return results
