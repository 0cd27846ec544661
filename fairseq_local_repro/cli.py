"""Reproduce one paper's central comparison on real data, every system trained to convergence.

    python scripts/reproduce.py FAMILY [--scale cpu|paper] [--seeds N] [--out DIR] [--systems a,b]
        [--test-src F --test-ref F] [--max-epoch N] [--lr LR] [--dropout P] [--clip-norm C] [--tuned-on-dev]
        [--running-text] [--dry-run] [--publish [--variant NAME]]
    python scripts/reproduce.py --page-only        # rewrite docs/results.md from the committed JSON
    python scripts/reproduce.py --recompute        # recompute every p-value and interval from committed files

For the family's systems (``fairseq_local_repro/families.py``) it prepares the data once
(scripts/preprocess.sh: the same tokenisation, BPE and dictionaries for every system; the lattice
family's scripts/recipes/lattice_zh_en_small.sh: lattices, word or character chains, one English
side), trains each system with fairseq-train on the paper's schedule (learning rate halved on a dev
plateau, early stopping with patience, a ``--max-epoch`` safety cap that is reported when hit), one thread per
system and ``--jobs`` systems at a time; translates the test set with beam 5 (tools/generate.py)
and scores it with scripts/score.py (detokenized sacrebleu with its signature); tests every
comparison of the family (fairseq_local_repro/compare.py: the paired t-test over seeds, the
two-level test over seeds and sentences, the per-sentence randomization test, Holm-corrected); and
draws the learning curves (dev loss vs updates and vs wall time).  With ``--seeds N`` every system
is trained with seeds 1..N.  Dev and test keep no pair whose source occurs in the training part.
Everything goes to ``OUT/FAMILY/`` (checkpoints, BPE codes,
dictionaries, logs, ``results.json`` per system, ``comparison.json``).  Interrupted, it resumes
where it stopped: finished systems are skipped, a training resumes from its checkpoint_last.pt.
``--publish`` copies the JSON, each run's test outputs (gzip'd) and the curves to
docs/results/reproduce/FAMILY/ and rewrites docs/results.md; ``--variant NAME`` publishes a sweep
point or probe (``--lr``, ``--dropout``, ``--clip-norm``, ``--limit-train``, ``--tuned-on-dev``,
``--running-text``) to docs/results/reproduce/FAMILY/NAME/, shown under the family's comparison.
``--tuned-on-dev`` trains each system at the point of the family's registered learning-rate/dropout
grid where its published seed-1 run had the lowest dev loss (with ``--publish`` that seed-1 run, the
same command, is read from the sweep point and not trained again); ``--running-text`` trains a
language-model family on running text streamed across sentence boundaries.  The results page lists
every registered comparison still to run (``Family.planned``) with the one command that trains it.
``--test-src F --test-ref F`` also scores every trained system on a raw parallel test set of your
own (no retraining).  ``python -m fairseq_local_repro`` takes the same options.
"""
import argparse
import dataclasses
import os
import re
import shlex
import signal
import sys

from fairseq_local_repro import families
from fairseq_local_repro.family_types import Family, Scale
from fairseq_local_repro.processes import REPO

PROG = "reproduce.py"


def fail(msg: str):
    sys.exit(f"{PROG}: error: {msg}")


def default_data_root() -> str:
    env = os.environ.get("FAIRSEQ_LOCAL_SHARED_DATA")
    return env if env else os.path.join(os.path.dirname(REPO), "shared", "data")


def _checked(convert, ok, expected: str):
    """An argparse ``type``: ``convert(text)``, refused with "must be EXPECTED, not 'TEXT'" unless ``ok``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {expected}, not '{text}'")
        return value

    return parse


positive = _checked(int, lambda v: v >= 1, "a positive integer")
learning_rate = _checked(float, lambda v: 0.0 < v < float("inf"), "a positive number")
dropout_rate = _checked(float, lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
clip_threshold = _checked(float, lambda v: 0.0 <= v < float("inf"), "a number >= 0 (0: no clipping)")


def variant_name(text: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9_.]*", text):
        raise argparse.ArgumentTypeError(f"must be lower-case letters, digits, '_' and '.', not '{text}'")
    return text


def run_names(text: str):
    names = [x.strip() for x in text.split(",") if x.strip()]
    for name in names:
        if not re.fullmatch(r"[a-z0-9_]+-s[1-9][0-9]*", name):
            raise argparse.ArgumentTypeError(f"runs are SYSTEM-sSEED (e.g. word-s2), not '{name}'")
    return names


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("family", nargs="?", help="one of: " + ", ".join(sorted(families.FAMILIES)))
    p.add_argument("--scale", choices=["cpu", "paper"], default="cpu",
                   help="cpu: scaled-down widths on the small real corpora; paper: the published setting")
    p.add_argument("--seeds", type=positive, default=1, help="seeds 1..N for every system (default 1)")
    p.add_argument("--out", default=os.path.join("checkpoints", "reproduce"),
                   help="output folder; the family's files go to OUT/FAMILY (default checkpoints/reproduce)")
    p.add_argument("--systems", help="comma-separated subset of the family's systems (the baseline is always run)")
    p.add_argument("--test-src", action="append", default=[], help="extra raw test source file (with --test-ref)")
    p.add_argument("--test-ref", action="append", default=[], help="its raw reference file")
    p.add_argument("--test-text", action="append", default=[], help="extra raw test text (language-model families)")
    p.add_argument("--max-epoch", type=positive, help="safety cap on epochs (default: the scale's)")
    p.add_argument("--max-tokens", type=positive, help="batch size in tokens (default: the scale's)")
    p.add_argument("--width", type=positive, help="override the scale's common width (embeddings and hidden units)")
    p.add_argument("--lr", type=learning_rate,
                   help="override the scale's learning rate for every system (a sweep point: use its own --out)")
    p.add_argument("--tuned-on-dev", action="store_true",
                   help="each system at the point of the family's learning-rate/dropout grid where its published "
                        "seed-1 run had the lowest dev loss (the test set is never read; with --publish that run "
                        "stands in for seed 1)")
    p.add_argument("--running-text", action="store_true",
                   help="language-model families: running text streamed across sentence boundaries (the PTB and "
                        "WikiText-2 validation files under DATA_ROOT/lm, cut into contiguous train/dev/test parts)")
    p.add_argument("--dropout", type=dropout_rate,
                   help="override the scale's dropout for every system (a sweep point: use its own --out)")
    p.add_argument("--clip-norm", type=clip_threshold,
                   help="override the scale's gradient-clipping threshold for every system (fairseq's --clip-norm; "
                        "0: no clipping; a sweep point: use its own --out)")
    p.add_argument("--jobs", type=positive, default=2, help="systems trained at a time (default 2)")
    p.add_argument("--limit-train", type=positive, help="use only the first N training pairs (smoke tests)")
    p.add_argument("--limit-eval", type=positive, help="use only the first N dev and test pairs (smoke tests)")
    p.add_argument("--data-root", default=default_data_root(),
                   help="folder with the real corpora (default ../shared/data or $FAIRSEQ_LOCAL_SHARED_DATA)")
    p.add_argument("--iwslt-tgz", help="--scale paper: a local copy of IWSLT14's de-en.tgz (else downloaded)")
    p.add_argument("--dry-run", action="store_true", help="print the plan (systems, widths, commands) and stop")
    p.add_argument("--publish", action="store_true",
                   help="copy the JSON and curves to DOCS/results/reproduce/FAMILY and rewrite DOCS/results.md")
    p.add_argument("--variant", type=variant_name,
                   help="with --publish: publish to DOCS/results/reproduce/FAMILY/VARIANT, a sweep point or probe shown "
                        "under the family's comparison instead of replacing it (required with --dropout and --clip-norm)")
    p.add_argument("--queued", type=run_names, default=[],
                   help="with --publish: runs of the comparison still training (in another process) or queued "
                        "(SYSTEM-sSEED,...): not trained by this command, named on the page as such until they are "
                        "published; the runs that have finished are published now")
    p.add_argument("--page-only", action="store_true", help="only rewrite DOCS/results.md from DOCS/results/reproduce")
    p.add_argument("--recompute", action="store_true",
                   help="recompute every p-value and interval of DOCS/results/reproduce from the committed files and "
                        "check them against the published ones (python -m fairseq_local_repro.compare --recompute)")
    p.add_argument("--docs", default=os.path.join(REPO, "docs"), help="docs folder for --publish / --page-only")
    a = p.parse_args(argv)
    if len(a.test_src) != len(a.test_ref):
        p.error("--test-src and --test-ref must be given the same number of times")
    if not a.page_only and not a.recompute and not a.family:
        p.error("FAMILY is required (or --page-only, --recompute)")
    if a.queued and not a.publish:
        p.error("--queued names runs on the published page; add --publish")
    if a.variant and not a.publish:
        p.error("--variant names where --publish puts the run; add --publish")
    if a.tuned_on_dev and (a.lr is not None or a.dropout is not None):
        p.error("--tuned-on-dev picks each system's --lr and --dropout; give neither")
    if a.publish and not a.variant:
        for opt in ("lr", "dropout", "clip_norm", "tuned_on_dev", "running_text"):
            if getattr(a, opt) not in (None, False):
                p.error(f"--{opt.replace('_', '-')} changes the family's setting: publish the run with --variant NAME "
                        "so that it does not replace the family's comparison")
    return a


def canonical_command(a) -> str:
    """The command that reproduces the comparison (the options that change results only)."""
    parts = ["python", "scripts/reproduce.py", a.family, "--scale", a.scale]
    if a.seeds != 1:
        parts += ["--seeds", str(a.seeds)]
    for opt in ("systems", "max_epoch", "max_tokens", "width", "lr", "dropout", "clip_norm", "limit_train",
                "limit_eval", "tuned_on_dev", "running_text"):
        value = getattr(a, opt)
        if value is True:
            parts.append("--" + opt.replace("_", "-"))
        elif value not in (None, False):
            parts += ["--" + opt.replace("_", "-"), f"{value:g}" if opt == "lr" else str(value)]
    return " ".join(shlex.quote(x) for x in parts)


def _scale(a, family: Family) -> Scale:
    """The family's scale with this run's overrides (``--width``, ``--dropout``, ``--clip-norm``),
    named in its notes with the other options that change results."""
    if a.scale not in family.scales:
        fail(f"family '{family.name}' has no --scale {a.scale} run: "
             + family.unavailable.get(a.scale, "not registered"))
    scale = family.scales[a.scale]
    if a.width is not None and scale.width is None:
        fail("--width applies to --scale cpu (--scale paper uses the architectures' own widths)")
    changed = {k: getattr(a, k) for k in ("width", "lr", "dropout", "clip_norm") if getattr(a, k) is not None}
    overrides = [f"--{k.replace('_', '-')} " + (f"{getattr(a, k):g}" if k == "lr" else str(getattr(a, k)))
                 for k in ("width", "lr", "dropout", "clip_norm", "max_epoch", "max_tokens", "limit_train",
                           "limit_eval") if getattr(a, k) is not None]
    overrides += [f"--{k.replace('_', '-')}" for k in ("tuned_on_dev", "running_text") if getattr(a, k)]
    if overrides:
        changed["notes"] = (scale.notes + "; " if scale.notes else "") + "this run overrides " + ", ".join(overrides)
    return dataclasses.replace(scale, **changed)


def main(argv=None):
    a = parse_args(argv)
    if a.recompute:
        from fairseq_local_repro import compare

        return compare.main(["--recompute", os.path.join(a.docs, "results", "reproduce")])
    if a.page_only:
        from fairseq_local_repro import page

        try:  # a committed file that does not match its JSON (hash, length): one line naming it
            path = page.write_page(a.docs)
        except ValueError as e:
            fail(str(e))
        print(f"wrote {path}")
        return 0
    try:
        family = families.get_family(a.family)
        systems = families.select_systems(family, a.systems)
    except ValueError as e:
        fail(str(e))
    if a.test_text and family.kind != "lm":
        fail(f"--test-text is for language-model families; '{family.name}' takes --test-src/--test-ref")
    if a.test_src and family.kind == "lm":
        fail(f"--test-src/--test-ref are for translation families; '{family.name}' takes --test-text")
    for f in a.test_src + a.test_ref + a.test_text:
        if not os.path.isfile(f):
            fail(f"test file '{f}' does not exist")
    if a.running_text and (family.kind != "lm" or a.scale != "cpu"):
        fail(f"--running-text is a --scale cpu language-model corpus; '{family.name}' is "
             + ("a translation family" if family.kind != "lm" else "run at --scale paper on PTB"))
    scale = _scale(a, family)
    out = os.path.abspath(os.path.join(a.out, family.name))
    from fairseq_local_repro import extra, page, prepare, publish, run
    from fairseq_local_repro.context import RunContext
    from fairseq_local_repro.family_types import sweep_point
    from fairseq_local_repro.plan import model_options, plan_options, tuned_on_dev
    from fairseq_local_repro.processes import ReproError, cuda_available, say, stop_children
    from fairseq_local_repro.train import train_command

    try:
        tuned = tuned_on_dev(family, os.path.join(a.docs, "results", "reproduce")) if a.tuned_on_dev else {}
        if tuned:
            scale = dataclasses.replace(scale, notes=scale.notes + "; learning rate and dropout per system, chosen on "
                                        "the dev loss of the published sweep (--tuned-on-dev): " + ", ".join(
                                            f"{s.name} {tuned[s.name]['lr']:g} / {tuned[s.name]['dropout']:g}"
                                            for s in systems))
        if a.dry_run:
            data = prepare.prepared_data(out)
        else:
            data = prepare.prepare(family, a.scale, scale, out, a.data_root, a.limit_train, a.limit_eval, a.iwslt_tgz,
                                   running_text=a.running_text)
        stand_ins = {name: publish.publish_dir(a.docs, family.name, sweep_point(t["lr"], t["dropout"]))
                     for name, t in tuned.items()} if a.publish else {}
        ctx = RunContext(family=family, scale=scale, scale_name=a.scale, out=out,
                         max_epoch=a.max_epoch or scale.max_epoch, max_tokens=a.max_tokens or scale.max_tokens,
                         command=canonical_command(a), cpu=not cuda_available(), data=data,
                         plan=plan_options(family, scale, systems, data), tuned=tuned,
                         published=publish.publish_dir(a.docs, family.name, a.variant) if a.publish else None,
                         stand_ins=stand_ins)
        for s in systems:
            plan = ctx.plan[s.name]
            params = f"{plan.params:,} parameters" if plan.params else "parameters counted after data preparation"
            match = f", size-matched to {s.size_match} ({plan.target_params:,})" if plan.target_params else ""
            setting = f" (lr {tuned[s.name]['lr']:g}, dropout {tuned[s.name]['dropout']:g})" if s.name in tuned else ""
            arch, model = model_options(s, scale, plan.width_options)
            say(f"{family.name}/{s.name}: {arch} {' '.join(model)} -> {params}{match}"
                + setting)
        if a.dry_run:
            for s in systems:
                if data is not None:
                    print(" ".join(shlex.quote(x) for x in train_command(ctx, s, 1)))
            return 0
        os.makedirs(out, exist_ok=True)
        signal.signal(signal.SIGTERM, lambda *_: (stop_children(), os._exit(143)))
        results = run.run_all(ctx, systems, list(range(1, a.seeds + 1)), a.jobs, skip=a.queued)
        comparison = run.write_comparison(ctx, results)
        page.draw_curves(comparison, os.path.join(out, "curves.png"))
        for src, ref in zip(a.test_src, a.test_ref):
            extra.score_extra(ctx, results, src, ref)
        for text in a.test_text:
            extra.score_extra_lm(ctx, results, text)
        print(page.table(comparison))
        if a.publish:
            path = publish.publish(comparison, a.docs, a.variant, run_root=out,
                                   test_ref=data.test_ref, queued=a.queued,
                                   test_src=os.path.splitext(data.test_ref)[0] + "." + data.src if data.src else None,
                                   sources=ctx.published_folders())
            say(f"published to {path}")
    except ReproError as e:
        fail(str(e))
    except KeyboardInterrupt:
        stop_children()
        fail("interrupted; run the same command again to resume")
    return 0
