"""The GPU kit's training parts: ``--part train`` (each ``--train-archs`` arch trained for an equal
share of the minutes left, then beam-5 decoding of valid and tokenized BLEU; OUT/train.json) and
``--part precision`` (fp32 against fairseq's ``--bf16``; OUT/precision.json)."""
import json
import os
import re
import shlex
import sys
import tempfile
import time

from fairseq_local_repro import clock
from fairseq_local_repro.gpu.runner import REPO, write_json

GENERATE = "fairseq_local_repro.tools.generate"  # decoding and scoring run as modules, each time-boxed
SCORE = "fairseq_local_repro.tools.score"


def run_train(run, args):
    path = os.path.join(args.out, "train.json")
    archs = args.train_archs.split()
    data = args.train_data
    report = {"data": data, "archs": {}, "dtype": args.train_dtype}
    if not os.path.isfile(os.path.join(data, "dict.en.txt")) and not args.tiny:
        report["status"] = f"skipped: no binarized data in {data} (scripts/gpu/prepare_data.sh)"
        write_json(path, report)
        return report
    margin = 30 if args.tiny else 75  # decoding + scoring per arch, start-up
    minutes_each = (run.left() - margin * len(archs)) / 60 / len(archs)
    if minutes_each < (0.05 if args.tiny else 1.0):
        report["status"] = "skipped: out of time (--budget-minutes)"
        write_json(path, report)
        return report
    report["minutes_each"] = round(minutes_each, 2)
    with tempfile.TemporaryDirectory(prefix="run_all_train_") as tmp:
        for arch in archs:
            save = os.path.join(tmp, arch)
            rec, rc, tail = fairseq_train(run, args, arch, save, minutes_each,
                                          ["--bf16"] if args.train_dtype == "bf16" else [])
            ckpt = os.path.join(save, "checkpoint_last.pt")
            if rc != 0 or not os.path.isfile(ckpt):
                rec.update(status="failed", error=tail)
            else:
                gen = os.path.join(tmp, f"gen_{arch}")
                rc, tail = run.sh([sys.executable, "-m", GENERATE, "--data", data, "--path",
                                   ckpt, "--out", gen, "--subset", "valid", "--beam", "5"],
                                  timeout=max(90, run.left() + 45))  # may use the budget's slack
                score = os.path.join(tmp, f"bleu_{arch}.json")
                if rc == 0:
                    rc, tail = run.sh([sys.executable, "-m", SCORE, "--hyp",
                                       os.path.join(gen, "hyp.txt"), "--ref", os.path.join(gen, "ref.tok.txt"),
                                       "--tokenize", "none", "--json", score], timeout=120)
                if rc == 0 and os.path.isfile(score):
                    with open(score, encoding="utf-8") as f:
                        rec["valid_bleu"] = json.load(f)
                    rec["status"] = "ok"
                else:
                    rec.update(status="failed", error=tail)
            report["archs"][arch] = rec
            run.say(f"train {arch}: {rec['status']}, {rec.get('num_updates')} updates")
            write_json(path, report)
    report["status"] = "ok" if all(r["status"] == "ok" for r in report["archs"].values()) else "failed"
    write_json(path, report)
    return report


def fairseq_train(run, args, arch, save, minutes, extra):
    """One time-boxed fairseq-train on --train-data; returns (record, returncode, output tail)."""
    cmd = ["fairseq-train", args.train_data, "--user-dir", os.path.join(REPO, "fairseq_local"), "--arch", arch,
           *shlex.split(args.train_args), *extra, "--stop-time-hours", f"{minutes / 60:.5f}",
           "--max-epoch", "1000", "--save-dir", save, "--no-epoch-checkpoints", "--log-format", "json",
           "--log-interval", "50", "--num-workers", "0"]
    if args.cpu:
        cmd.append("--cpu")
    t = time.time()
    rc, tail = run.sh(cmd, timeout=60 * minutes + 120)
    rec = {"command": " ".join(shlex.quote(str(c)) for c in cmd), "train_seconds": clock.seconds(time.time() - t)}
    rec.update(_train_stats(run.log.name, arch))
    return rec, rc, tail


def run_precision(run, args):
    """--precision-arch trained for --precision-updates updates in fp32 and with fairseq's --bf16
    (same seed, data order and options): the issue asks for bf16 within 1% of fp32's loss."""
    path = os.path.join(args.out, "precision.json")
    arch = args.precision_arch
    report = {"arch": arch, "data": args.train_data, "updates": args.precision_updates, "runs": {}}
    if not os.path.isfile(os.path.join(args.train_data, "dict.en.txt")) and not args.tiny:
        report["status"] = f"skipped: no binarized data in {args.train_data} (scripts/gpu/prepare_data.sh)"
        write_json(path, report)
        return report
    minutes_each = (run.left() - (10 if args.tiny else 30) * 2) / 60 / 2
    if minutes_each < (0.05 if args.tiny else 1.0):
        report["status"] = "skipped: out of time (--budget-minutes)"
        write_json(path, report)
        return report
    with tempfile.TemporaryDirectory(prefix="run_all_precision_") as tmp:
        for dtype, extra in (("fp32", []), ("bf16", ["--bf16"])):
            rec, rc, tail = fairseq_train(run, args, arch, os.path.join(tmp, dtype), minutes_each,
                                          extra + ["--max-update", str(args.precision_updates)])
            rec["status"] = "ok" if rc == 0 else "failed"
            if rc != 0:
                rec["error"] = tail
            report["runs"][dtype] = rec
            run.say(f"precision {arch} {dtype}: {rec['status']}, {rec.get('num_updates')} updates")
            write_json(path, report)
    a, b = report["runs"]["fp32"], report["runs"]["bf16"]
    if a["status"] == b["status"] == "ok" and a.get("valid_loss_per_epoch") and b.get("valid_loss_per_epoch"):
        va, vb = a["valid_loss_per_epoch"][-1], b["valid_loss_per_epoch"][-1]
        report["valid_loss_rel_diff"] = (vb - va) / va
        report["same_updates"] = a.get("num_updates") == b.get("num_updates") == args.precision_updates
        report["meets_goal"] = report["same_updates"] and abs(report["valid_loss_rel_diff"]) <= 0.01
        report["status"] = "ok"
    else:
        report["status"] = "failed"
    write_json(path, report)
    return report


def _train_stats(log_path, arch):
    """Updates, words/s and valid losses of the last fairseq-train in the log (--log-format json)."""
    with open(log_path, encoding="utf-8") as f:
        text = f.read()
    text = text[text.rfind(f"--arch {arch}"):]
    stats, valid = {}, []
    for m in re.finditer(r"\| (train|valid) \| (\{.*\})", text):
        try:
            d = json.loads(m.group(2))
        except json.JSONDecodeError:
            continue
        if m.group(1) == "train":
            stats.update(num_updates=int(d.get("train_num_updates", 0)), train_wps=float(d.get("train_wps", 0)),
                         train_loss=float(d.get("train_loss", "nan")), epochs=int(d.get("epoch", 0)))
        else:
            valid.append(float(d.get("valid_loss", "nan")))
    stats["valid_loss_per_epoch"] = valid
    return stats
