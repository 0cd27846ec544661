"""Training: fairseq-train on the schedule of each system's row (its YAML, with the scale's named
overrides: :func:`train_command`), resumed from ``checkpoint_last.pt`` when
interrupted (exactly: the plugin's ``patches/exact_resume.py`` restores the patience count, the
missed learning-rate step and the batches), with one dev point per validation recorded in
``curve.jsonl`` and the reason training stopped in ``train_done.json``."""
import json
import math
import os
import shutil
import sys
import time
from typing import List, Optional

from fairseq_local_core.file_io import read_json, write_json
from fairseq_local_repro import clock, schedule
from fairseq_local_repro.context import Data, RunContext
from fairseq_local_repro.family_types import CORPUS_TASK, Family, System
from fairseq_local_repro.plan import model_options
from fairseq_local_repro.processes import USER_DIR, ReproError, run_logged, say, tail


def corpus_task(family: Family, data: Data) -> dict:
    """The task section of the corpus the harness prepared (a scale's :data:`CORPUS_TASK`)."""
    if family.kind == "lm":  # one sentence per sample (Multi30k captions), or blocks of running text
        opts = data.lm_options()
        return {"_name": "language_modeling", **{k.lstrip("-").replace("-", "_"): v
                                                 for k, v in zip(opts[::2], opts[1::2])}}
    return {"_name": family.task, "source_lang": data.src, "target_lang": data.tgt}


def run_overrides(ctx: RunContext, system: System, row: dict) -> dict:
    """The scale's and this run's settings (learning rate, clipping, epoch cap, batch, patience) that
    differ from the row's: the CPU scale's named values, or a paper-scale run's ``--lr``, ``--max-epoch``..."""
    setting = ctx.setting(system.name)
    wanted = {"optimization.lr": [setting["lr"]], "optimization.clip_norm": ctx.scale.clip_norm,
              "optimization.max_epoch": ctx.max_epoch, "dataset.max_tokens": ctx.max_tokens,
              "checkpoint.patience": ctx.scale.patience}
    return {path: value for path, value in wanted.items() if value != schedule.row_value(row, path)}


def schedule_config(ctx: RunContext, system: System) -> dict:
    """The row's YAML with the scale's overrides (``Scale.overrides``, the corpus's task in place of
    :data:`CORPUS_TASK`) and this run's settings (:func:`run_overrides`)."""
    row = schedule.load_row(system.row)
    overrides = dict(ctx.scale.overrides)
    if overrides.get("task") == CORPUS_TASK:
        overrides["task"] = corpus_task(ctx.family, ctx.data.for_system(system))
    row = schedule.apply_overrides(row, overrides)
    return schedule.apply_overrides(row, run_overrides(ctx, system, row))


def train_command(ctx: RunContext, system: System, seed: int) -> List[str]:
    """fairseq-train on the system's row: the training sections of its YAML with the scale's named
    overrides (:func:`schedule_config`), the model of the scale (:func:`plan.model_options`: the row's
    arch at ``--scale paper``) with the run's dropout, and the harness's own options (data, seed,
    checkpoint folder keeping the best and last checkpoints, a JSON log every 25 updates)."""
    data = ctx.data.for_system(system)
    save_dir = os.path.join(ctx.run_dir(system.name, seed), "checkpoints")
    arch, model = model_options(system, ctx.scale, ctx.plan[system.name].width_options)
    dropout = ctx.setting(system.name)["dropout"]
    cmd = [sys.executable, "-m", "fairseq_cli.train", data.bin, "--user-dir", USER_DIR,
           *schedule.options(schedule.schedule_values(schedule_config(ctx, system))), "--arch", arch, *model,
           *([] if dropout is None else ["--dropout", str(dropout)]), "--seed", str(seed), "--save-dir", save_dir,
           "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "25", "--num-workers", "0"]
    if ctx.cpu:
        cmd.append("--cpu")
    return cmd


def _stats(line: str, tag: str) -> Optional[dict]:
    marker = f"| {tag} | {{"
    if marker not in line:
        return None
    try:
        return json.loads(line[line.index(marker) + len(marker) - 1:])
    except ValueError:
        return None


def read_curve(path: str) -> List[dict]:
    """Dev points of ``curve.jsonl``, one per epoch (a repeated epoch after a resume: the last)."""
    if not os.path.isfile(path):
        return []
    by_epoch = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                p = json.loads(line)
                by_epoch[p["epoch"]] = p
    return [by_epoch[e] for e in sorted(by_epoch)]


def read_resumes(log_path: str) -> List[dict]:
    """The resumes ``train.log`` records: after which epoch's checkpoint each one continued, and
    whether that process restored the run's stopping state (the plugin's ``exact_resume`` patch
    logs the learning-rate step it takes; runs resumed before that patch did not)."""
    resumes = []
    if not os.path.isfile(log_path):
        return resumes
    with open(log_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "| Loaded checkpoint " in line and " (epoch " in line:
                epoch = int(line.split(" (epoch ")[1].split()[0])
                resumes.append({"after_epoch": epoch - 1, "stopping_state_restored": False})
            elif "exact_resume | resumed after epoch" in line and resumes:
                resumes[-1]["stopping_state_restored"] = True
    return resumes


def schedule_deviations(curve: List[dict], patience: int, shrink: float = 0.5,
                        threshold: float = 1e-4) -> List[str]:
    """Where a run's curve leaves the schedule of :func:`train_command`, as an uninterrupted run
    follows it: each epoch whose dev loss is not below the best so far by ``threshold`` (relative:
    torch's ``ReduceLROnPlateau``) halves the next epoch's learning rate, and ``patience`` dev losses
    in a row that are not below the best (fairseq's ``should_stop_early``) end the run.  A run resumed
    without its stopping state (before ``patches/exact_resume.py``) shows here; [] when it follows it."""
    found, best, stale, lr = [], None, 0, curve[0]["lr"] if curve else None
    for i, point in enumerate(curve):
        if lr is not None and point["lr"] is not None and not math.isclose(point["lr"], lr, rel_tol=1e-9):
            found.append(f"epoch {point['epoch']} trained at learning rate {point['lr']:g}, the schedule's is {lr:g}")
            lr = point["lr"]
        if best is not None and point["dev_loss"] >= best * (1 - threshold) and lr is not None:
            lr *= shrink
        stale = 0 if best is None or point["dev_loss"] < best else stale + 1
        best = point["dev_loss"] if best is None else min(best, point["dev_loss"])
        if stale == patience and i < len(curve) - 1:
            found.append(f"trained on after epoch {point['epoch']}, where {patience} dev losses in a row not below the "
                         "best end the run")
    return found


def train_system(tag: str, cmd: List[str], sdir: str, max_epoch: int) -> dict:
    """Run (or resume) fairseq-train; record one curve point per validation with the wall time
    accumulated over resumes; return and store ``train_done.json``."""
    done_path = os.path.join(sdir, "train_done.json")
    if os.path.isfile(done_path):
        return read_json(done_path)
    curve_path = os.path.join(sdir, "curve.jsonl")
    previous = read_curve(curve_path)
    offset = previous[-1]["wall_s"] if previous else 0.0
    t0 = time.time()
    state = {"lr": None, "early_stop": False, "min_lr": False, "params": None, "epoch": 0}

    def on_line(line: str):
        if "num. shared model params:" in line:
            state["params"] = int(line.split("num. shared model params:")[1].split("(")[0].replace(",", "").strip())
        elif "early stop since valid performance" in line:
            state["early_stop"] = True
        elif "stopping training because current learning rate" in line:
            state["min_lr"] = True
        inner = _stats(line, "train_inner")
        if inner is not None and "lr" in inner:  # the learning rate of the epoch being trained
            state["lr"] = float(inner["lr"])
        valid = _stats(line, "valid")
        if valid is not None and "valid_loss" in valid:
            point = {"epoch": int(valid["epoch"]), "updates": int(float(valid["valid_num_updates"])),
                     "dev_loss": float(valid["valid_loss"]), "dev_ppl": float(valid["valid_ppl"]),
                     "lr": state["lr"], "wall_s": clock.seconds(offset + time.time() - t0)}
            state["epoch"] = point["epoch"]
            with open(curve_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(point) + "\n")
            say(f"{tag}: epoch {point['epoch']} ({point['updates']} updates, {point['wall_s'] / 60:.1f} min): "
                f"dev loss {point['dev_loss']:.3f} bits, ppl {point['dev_ppl']:.2f}, lr {point['lr']}")

    log = os.path.join(sdir, "train.log")
    say(f"{tag}: training{' (resuming from checkpoint_last.pt)' if previous else ''}")
    rc = run_logged(cmd, log, on_line)
    if rc:
        raise ReproError(f"{tag}: fairseq-train exited with status {rc}: {tail(log)} (full log: {log})")
    curve = read_curve(curve_path)
    if not curve:
        raise ReproError(f"{tag}: fairseq-train ran no validation (full log: {log})")
    stopped = "early_stop" if state["early_stop"] else "min_lr" if state["min_lr"] else (
        "max_epoch" if curve[-1]["epoch"] >= max_epoch else "unknown")
    done = {"stopped": stopped, "hit_max_epoch": stopped == "max_epoch", "epochs": curve[-1]["epoch"],
            "updates": curve[-1]["updates"], "wall_s": curve[-1]["wall_s"], "params": state["params"],
            "resumes": read_resumes(log)}
    write_json(done_path, done)
    return done


def keep_vocabulary(data: Data, ckpt_dir: str):
    """The BPE codes and dictionaries beside the checkpoint, so that it can be used on its own (with
    the corpus's attribution files, where the data dir has them: the dictionaries derive from it)."""
    if not data.src:
        shutil.copy(os.path.join(data.bin, "dict.txt"), os.path.join(ckpt_dir, "dict.txt"))
        return
    for name in (f"dict.{data.src}.txt", f"dict.{data.tgt}.txt"):
        shutil.copy(os.path.join(data.bin, name), os.path.join(ckpt_dir, name))
    for name in sorted(os.listdir(data.bin)):
        if name.endswith(".attribution"):
            shutil.copy(os.path.join(data.bin, name), os.path.join(ckpt_dir, name))
    bpe = os.path.join(data.bin, "bpe")
    for name in sorted(os.listdir(bpe)) if os.path.isdir(bpe) else []:
        if name.startswith("codes."):
            shutil.copy(os.path.join(bpe, name), os.path.join(ckpt_dir, name))


SWEPT_OPTIONS = ("--lr", "--dropout", "--clip-norm")


def check_same_settings(tag: str, sdir: str, cmd: List[str]):
    """A run folder holds one setting: refuse to resume or reuse a run that ``train.log`` shows was
    trained with another learning rate, dropout or clipping threshold (a sweep point needs its own ``--out``)."""
    log = os.path.join(sdir, "train.log")
    if not os.path.isfile(log):
        return
    with open(log, encoding="utf-8", errors="replace") as f:
        first = next((line for line in f if line.startswith("$ ")), None)
    if first is None:
        return
    earlier = first[2:].split()
    for opt in SWEPT_OPTIONS:
        if opt in earlier and opt in cmd:
            was, now = earlier[earlier.index(opt) + 1], cmd[cmd.index(opt) + 1]
            if float(was) != float(now):
                raise ReproError(f"{tag}: {sdir} was trained with {opt} {was}, this run asks for {now}; "
                                 "give this setting its own --out")
