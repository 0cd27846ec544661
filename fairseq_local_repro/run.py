"""Every (system, seed) of a family, ``--jobs`` at a time: trained, evaluated and recorded in its
``results.json``; then the family's ``comparison.json`` with the statistics of
:mod:`fairseq_local_repro.compare`.

A run with a ``results.json`` is finished and skipped (unless it was stopped by a lower
``--max-epoch`` cap than this run's: it then trains on from its ``checkpoint_last.pt``); an
interrupted one resumes from fairseq's ``checkpoint_last.pt``; one whose training ended
(``train_done.json``) goes straight to evaluation.  With ``--publish``, a run with no folder under
``--out`` whose JSON is already published on the clean split, with this command's settings, is
read from there (its per-sentence outputs from the committed files) and not trained again, so the
page's command for the runs still missing trains only those on a fresh clone; with
``--tuned-on-dev`` so is a run published at its system's sweep point (the same command and seed).
A run is worked on by one process at a time: it holds an exclusive lock on the run's ``run.lock``
(released by the system when the process ends, however it ends), and a second command that reaches
the same run stops with one line.
"""
import contextlib
import fcntl
import os
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional

from fairseq_local_core.file_io import read_json, write_json
from fairseq_local_repro import compare as stats
from fairseq_local_repro.context import RunContext
from fairseq_local_repro.evaluate import alignment_entropy, cell_masking, eval_lm, run_statistics, translate_and_score
from fairseq_local_repro.family_types import System
from fairseq_local_repro.plan import model_options
from fairseq_local_repro.processes import ReproError, say
from fairseq_local_repro.train import check_same_settings, keep_vocabulary, read_curve, train_command, train_system


@contextlib.contextmanager
def run_lock(tag: str, sdir: str, name: str):
    """Hold the run folder's ``run.lock`` (``fcntl.flock``, exclusive) while the body runs; if another
    process holds it, a one-line :class:`ReproError` naming that process and the way round it."""
    os.makedirs(sdir, exist_ok=True)
    path = os.path.join(sdir, "run.lock")
    with open(path, "a+", encoding="utf-8") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "unknown"
            raise ReproError(f"{tag}: another process (pid {holder}) is training or evaluating this run ({path}); "
                             f"wait for it to end, or leave the run to it: --publish --queued {name}") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def finished_run(ctx: RunContext, res_path: str):
    """The ``results.json`` of a finished run, or None: absent, or stopped by a lower ``--max-epoch``
    cap than this command's (the run then trains on)."""
    if not os.path.isfile(res_path):
        return None
    earlier = read_json(res_path)
    return None if earlier["hit_max_epoch"] and ctx.max_epoch > earlier["max_epoch"] else earlier


PUBLISHED_SETTINGS = ("arch", "options", "scale", "max_tokens", "patience", "lr", "dropout", "clip_norm", "split")


def published_run(ctx: RunContext, system: System, seed: int, tag: str, folder: Optional[str] = None):
    """The run's published JSON in ``folder`` (by default ``ctx.published``, the folder ``--publish``
    writes) when it stands in for training the run: published on the clean split
    (``page.published_clean``) with the settings this command trains with, scored on this command's
    test set, and not stopped by a lower ``--max-epoch`` cap; None when nothing is published.  In
    ``ctx.published`` a run with other settings is a one-line :class:`ReproError` (it would be
    overwritten by a run of another setting); in another folder (a sweep point's) it is None."""
    from fairseq_local_repro.page import published_clean

    folder = folder or ctx.published
    path = os.path.join(folder, f"{system.name}-s{seed}.json") if folder else None
    if path is None or not published_clean(path):
        return None
    strict = folder == ctx.published
    r = read_json(path)
    plan = ctx.plan[system.name]
    arch, model = model_options(system, ctx.scale, plan.width_options)
    want = {"arch": arch, "options": model, "scale": ctx.scale_name,
            "max_tokens": ctx.max_tokens, "patience": ctx.scale.patience, **ctx.setting(system.name),
            "clip_norm": ctx.scale.clip_norm, "split": ctx.data.sizes}
    for key in PUBLISHED_SETTINGS:
        if r.get(key) != want[key]:
            if not strict:
                return None
            was, now = (" ".join(v) if isinstance(v, list) else v for v in (r.get(key), want[key]))
            raise ReproError(f"{tag}: {path} was published with {key} '{was}', this command trains with '{now}'; "
                             "publish this setting with another --variant")
    if r.get("hit_max_epoch") and ctx.max_epoch > r["max_epoch"]:
        if not strict:
            return None
        raise ReproError(f"{tag}: {path} was stopped by the --max-epoch {r['max_epoch']} cap and its checkpoints are "
                         f"not under {ctx.out}; train it on where they are, or publish with another --variant")
    with open(ctx.data.test_ref, encoding="utf-8") as f:
        test_sha = stats.sha256_text(f.read())
    if r.get("test_ref_sha256") and r["test_ref_sha256"] != test_sha:
        if not strict:
            return None
        raise ReproError(f"{tag}: {path} was scored on another test set than {ctx.data.test_ref}; "
                         "publish these runs with another --variant")
    return r


def run_system(ctx: RunContext, system: System, seed: int) -> dict:
    """Train (or resume), evaluate and record one run, holding its lock; its ``results.json``.  A
    finished run is read without the lock (and is neither trained nor rewritten); so is a run with
    no folder under ``--out`` that is published with this command's settings (:func:`published_run`)."""
    tag = f"{ctx.family.name}/{system.name}-s{seed}"
    sdir = ctx.run_dir(system.name, seed)
    check_same_settings(tag, sdir, train_command(ctx, system, seed))
    earlier = finished_run(ctx, os.path.join(sdir, "results.json"))
    if earlier is not None:
        say(f"{tag}: finished earlier ({os.path.join(sdir, 'results.json')}), skipped")
        return earlier
    if not os.path.isdir(sdir):
        for folder in ctx.published_folders(system.name):
            earlier = published_run(ctx, system, seed, tag, folder)
            if earlier is not None:
                say(f"{tag}: published earlier ({os.path.join(folder, f'{system.name}-s{seed}.json')}), "
                    "not trained again")
                return earlier
    with run_lock(tag, sdir, f"{system.name}-s{seed}"):
        return _run_system(ctx, system, seed, tag)


def _run_system(ctx: RunContext, system: System, seed: int, tag: str) -> dict:
    family, scale = ctx.family, ctx.scale
    data = ctx.data.for_system(system)
    sdir = ctx.run_dir(system.name, seed)
    res_path = os.path.join(sdir, "results.json")
    plan = ctx.plan[system.name]
    cmd = train_command(ctx, system, seed)
    earlier = finished_run(ctx, res_path)  # again, under the lock: another process may have just finished it
    if earlier is not None:
        say(f"{tag}: finished earlier ({res_path}), skipped")
        return earlier
    if os.path.isfile(res_path):
        earlier = read_json(res_path)
        # stopped by a lower cap: train on from checkpoint_last.pt up to the new cap, then re-evaluate
        say(f"{tag}: stopped by --max-epoch {earlier['max_epoch']} earlier; continuing to {ctx.max_epoch}")
        for name in ("train_done.json", "results.json"):
            os.remove(os.path.join(sdir, name))
    os.makedirs(sdir, exist_ok=True)
    done = train_system(tag, cmd, sdir, ctx.max_epoch)
    if done["hit_max_epoch"]:
        say(f"{tag}: WARNING: stopped by the --max-epoch {ctx.max_epoch} cap, not by early stopping")
    keep_vocabulary(data, os.path.join(sdir, "checkpoints"))
    ckpt, test_dir = ctx.best_checkpoint(system.name, seed), os.path.join(sdir, "test")
    if family.kind == "lm":
        say(f"{tag}: test perplexity (fairseq-eval-lm)")
        test = eval_lm(tag, data, ckpt, test_dir)
    else:
        say(f"{tag}: translating the test set (beam 5)")
        test = translate_and_score(tag, data, ckpt, test_dir, "test", data.test_ref, task=family.task)
    curve = read_curve(os.path.join(sdir, "curve.jsonl"))
    best = min(curve, key=lambda p: p["dev_loss"])
    arch, model = model_options(system, scale, plan.width_options)
    results = {
        "family": family.name, "system": system.name, "label": system.label, "arch": arch,
        "options": model, "scale": ctx.scale_name, "seed": seed,
        "params": done["params"] or plan.params, "size_matched_to": plan.size_matched_to,
        "epochs": done["epochs"], "updates": done["updates"], "wall_s": done["wall_s"],
        "stopped": done["stopped"], "hit_max_epoch": done["hit_max_epoch"], "max_epoch": ctx.max_epoch,
        "resumes": done.get("resumes", []),
        "patience": scale.patience, "max_tokens": ctx.max_tokens, **ctx.setting(system.name),
        "clip_norm": scale.clip_norm, "best_epoch": best["epoch"],
        "dev_loss_bits": best["dev_loss"], "dev_ppl": best["dev_ppl"],
        "metric": "ppl" if family.kind == "lm" else "bleu",
        "test": {k: v for k, v in test.items() if k not in ("hyp", "nll")},
        "data": ctx.data.description, "split": ctx.data.sizes, "curve": curve, "command": ctx.command,
        "threads": 1, "device": "cpu" if ctx.cpu else "cuda",
    }
    if system.alignment_entropy:
        say(f"{tag}: alignment entropies on the test set (scripts/analysis/dpn_alignment_entropy.py)")
        results["alignment_entropy"] = alignment_entropy(tag, data, ckpt, test_dir)
    if system.masking_groups:
        say(f"{tag}: cell masking on the test set (scripts/analysis/parallel_cells_masking.py)")
        results["cell_masking"] = cell_masking(tag, data, ckpt, test_dir, system.masking_groups)
    write_json(res_path, results)
    score = f"perplexity {test['ppl']:.2f}" if family.kind == "lm" else f"BLEU {test['bleu']:.2f}"
    say(f"{tag}: test {score} ({done['epochs']} epochs, {done['updates']} updates, "
        f"{done['wall_s'] / 60:.1f} min, stopped by {done['stopped']})")
    return results


def run_all(ctx: RunContext, systems: List[System], seeds: List[int], jobs: int, skip=()) -> List[dict]:
    """Every (system, seed), ``jobs`` at a time in registry order (the next starts when one ends),
    except the runs named in ``skip`` (``SYSTEM-sSEED``: still training elsewhere or queued)."""
    tasks = [(s, seed) for seed in seeds for s in systems if f"{s.name}-s{seed}" not in set(skip)]
    if ctx.published:  # a published run of another setting stops the command before anything trains
        for s, seed in tasks:
            if not os.path.isdir(ctx.run_dir(s.name, seed)):
                published_run(ctx, s, seed, f"{ctx.family.name}/{s.name}-s{seed}")
    errors = []
    results = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_system, ctx, s, seed) for s, seed in tasks]
        for fut in futures:
            try:
                results.append(fut.result())
            except ReproError as e:
                errors.append(str(e))
    if errors:
        raise ReproError(errors[0] + (f" (and {len(errors) - 1} more failures)" if len(errors) > 1 else ""))
    return results


def write_comparison(ctx: RunContext, results: List[dict]) -> dict:
    """The family's comparison (``comparison.json``): every run's results and the statistics of
    ``fairseq_local_repro.compare`` (seed-level t-test, two-level test, per-sentence randomization
    test, Holm-corrected) computed from the runs' test outputs."""
    family = ctx.family
    comparison = {"family": family.name, "kind": family.kind, "paper": family.paper, "claim": family.claim,
                  "baseline": family.baseline.name, "system_order": [s.name for s in family.systems],
                  "scale": ctx.scale_name, "data": ctx.data.description, "split": ctx.data.sizes,
                  "scale_notes": ctx.scale.notes, "command": ctx.command, "systems": results}
    if family.comparisons:
        comparison["comparisons"] = [list(p) for p in family.comparisons]
    if family.reference:
        comparison["paper_reference"] = family.reference
    try:
        comparison["statistics"] = stats.analyse(comparison, results,
                                                 run_statistics(family.kind, ctx.out, ctx.data.test_ref,
                                                                published=ctx.published_folders()))
    except ValueError as e:
        raise ReproError(f"{family.name}: {e}")
    write_json(os.path.join(ctx.out, "comparison.json"), comparison)
    return comparison
