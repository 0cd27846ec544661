"""scripts/reproduce.py end to end on a tiny slice of real Multi30k (300 training pairs, 16-unit
systems, one epoch): the results.json of each system against independent recomputations (the
checkpoint's parameters and updates, sacrebleu on the written hypotheses), the resume skip, the
one-line errors, and docs/results.md generated from the published JSON."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairseq_local.safe_loading import safe_load
from fairseq_local_repro import significance

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "reproduce.py"
SMOKE = ["--limit-train", "300", "--limit-eval", "24", "--width", "16", "--max-epoch", "1", "--systems", "mc_rnn_3"]


def run(*args, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"reproduce.py failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("repro")
    docs = tmp_path_factory.mktemp("docs")
    p = run("mc_rnn", "--out", out, "--data-root", shared_data, "--docs", docs, "--publish", *SMOKE)
    return out / "mc_rnn", docs, p, shared_data


def test_unknown_family_is_one_line(tmp_path):
    p = run("mc_rnnn", "--out", tmp_path, check=False)
    assert p.returncode != 0
    assert p.stderr.strip() == ("reproduce.py: error: unknown family 'mc_rnnn'; implemented: dpn_s2s, gencnn, lattice, "
                                "mc_rnn, parallel_cells")
    assert "Traceback" not in p.stderr and not (tmp_path / "mc_rnnn").exists()


def test_unavailable_scale_and_bad_system_are_one_line(tmp_path):
    p = run("lattice", "--out", tmp_path, "--scale", "paper", check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("reproduce.py: error: family 'lattice' has no --scale paper run: the paper's NIST")
    assert "LDC" in p.stderr and "prepare_nist_zhen.sh" in p.stderr and not (tmp_path / "lattice").exists()
    p = run("mc_rnn", "--out", tmp_path, "--systems", "mc_rnn_9", check=False)
    assert p.stderr.strip() == ("reproduce.py: error: --systems: family 'mc_rnn' has no system 'mc_rnn_9' "
                                "(it has mc_rnn_3, baseline, baseline_large, baseline_deep)")


def built_params(line: str):
    """The model fairseq-train's own parser and task build from a printed training command, and
    its parameter count (tied parameters once): the independent count of the harness's plan."""
    import shlex

    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_local  # noqa: F401

    argv = shlex.split(line)
    args = options.parse_args_and_arch(options.get_training_parser(), argv[argv.index("fairseq_cli.train") + 1:])
    cfg = convert_namespace_to_omegaconf(args)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    return model, sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())


def planned(lines, family, name):
    """A dry run's plan line of one system (its parameter count and size match) and its training command."""
    plan = next(x for x in lines if f"{family}/{name}: " in x)
    count = int(plan.split("-> ")[1].split(" parameters")[0].replace(",", ""))
    cmd = next(x for x in lines if "fairseq_cli.train" in x and f"{name}-s1{os.sep}checkpoints" in x)
    return plan, count, cmd


def normalised(line):
    return " ".join(line.casefold().split())


def clean_held_out(train_src, src, tgt):
    """The pairs of (src, tgt) whose normalised source is not among the training sources."""
    seen = {normalised(x) for x in train_src}
    return [(a, b) for a, b in zip(src, tgt) if normalised(a) not in seen]


def multi30k(shared, name):
    return (shared / "multi30k-de-en" / name).read_text(encoding="utf-8").splitlines()


def test_results_json_matches_independent_recomputation(smoke):
    import sacrebleu

    out, _, _, shared = smoke
    # the family's test set is the official Multi30k validation set less the pairs whose source occurs in the
    # training part (every training pair but the last 1,000, the dev set), first 24 pairs here
    train_de = multi30k(shared, "train.de")
    test = clean_held_out(train_de[:-1000], multi30k(shared, "valid.de"), multi30k(shared, "valid.en"))
    refs = [e for _, e in test][:24]
    dev = clean_held_out(train_de[:-1000], train_de[-1000:], multi30k(shared, "train.en")[-1000:])
    assert (out / "data" / "raw" / "test.en").read_text(encoding="utf-8").splitlines() == refs
    assert (out / "data" / "raw" / "dev.de").read_text(encoding="utf-8").splitlines() == [d for d, _ in dev][:24]
    assert len(test) == 1014 - 2 and len(dev) == 1000 - 3  # the Multi30k overlaps: 2 test, 3 dev sources
    for name, arch, baseline in (("mc_rnn_3", "mc_rnn_iwslt_de_en_3", False), ("baseline", "rnnsearch_iwslt_de_en", True)):
        sdir = out / f"{name}-s1"
        r = json.loads((sdir / "results.json").read_text())
        assert (r["system"], r["arch"], r["seed"], r["scale"]) == (name, arch, 1, "cpu")
        state = safe_load(sdir / "checkpoints" / "checkpoint_best.pt")
        assert r["params"] == sum(v.numel() for v in state["model"].values())
        assert r["updates"] == state["optimizer_history"][-1]["num_updates"] > 0
        assert r["epochs"] == 1 and r["hit_max_epoch"] is True and r["stopped"] == "max_epoch"
        assert r["options"][:2] == ["--encoder-embed-dim", "16"]
        assert [p["epoch"] for p in r["curve"]] == [1] and r["curve"][0]["updates"] == r["updates"]
        assert r["dev_loss_bits"] == r["curve"][0]["dev_loss"] and r["wall_s"] >= 0
        assert abs(r["dev_ppl"] - 2 ** r["dev_loss_bits"]) < 0.01 * r["dev_ppl"]
        hyps = (sdir / "test" / "hyp.txt").read_text(encoding="utf-8").splitlines()
        assert len(hyps) == 24
        bleu = sacrebleu.metrics.BLEU(lowercase=True)
        assert r["test"]["bleu"] == pytest.approx(bleu.corpus_score(hyps, [refs]).score, abs=0.006)
        assert r["test"]["signature"] == str(bleu.get_signature())
        assert r["split"] == {"train": 300, "dev": 24, "test": 24, "dev_dropped": 3, "test_dropped": 2}
        assert "paired_bs_p_vs_baseline" not in r["test"]
        # the BPE codes and dictionaries are kept beside the checkpoint
        assert {"codes.joint", "dict.de.txt", "dict.en.txt"} <= set(os.listdir(sdir / "checkpoints"))
    assert not (out / "baseline_large-s1").exists()  # not selected by --systems
    comparison = json.loads((out / "comparison.json").read_text())
    assert [s["system"] for s in comparison["systems"]] == ["mc_rnn_3", "baseline"]
    assert "official validation set = test" in comparison["data"] and "2 test pairs dropped" in comparison["data"]
    # the per-sentence randomization test of the two runs, recomputed from the hypotheses and references
    stats = {n: significance.bleu_statistics((out / f"{n}-s1" / "test" / "hyp.txt").read_text(encoding="utf-8")
                                        .splitlines(), refs) for n in ("mc_rnn_3", "baseline")}
    expected = significance.sentence_test(stats["mc_rnn_3"], stats["baseline"], significance.corpus_bleu, rng_seed=12346)
    (c,) = comparison["statistics"]["comparisons"]
    assert (c["system"], c["reference"], c["seed_level"], c["two_level"]) == ("mc_rnn_3", "baseline", None, None)
    assert c["per_sentence"]["1"]["p"] == pytest.approx(expected["p"], abs=1e-4)
    assert c["per_sentence"]["1"]["p_holm"] == c["per_sentence"]["1"]["p"]  # one comparison


def test_finished_systems_are_skipped(smoke):
    out, docs, _, shared = smoke
    before = {p: p.stat().st_mtime_ns for p in out.glob("*-s1/*") if p.is_file()}
    p = run("mc_rnn", "--out", out.parent, "--data-root", shared, *SMOKE)
    assert p.stdout.count("finished earlier") == 2
    assert "training" not in p.stdout and "preparing data" not in p.stdout
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before  # nothing retrained or rewritten: logs, curves, results.json


def test_a_fresh_clone_trains_only_the_runs_not_yet_published(smoke, tmp_path):
    """With --publish and an empty --out (a fresh clone), the runs published with this command's
    settings are read from the published folder (statistics from the committed outputs), not
    trained again; only the missing seed trains.  A published run of another setting is one line."""
    import shutil

    from fairseq_local_repro import compare

    _, docs, _, shared = smoke
    mine = tmp_path / "docs"
    shutil.copytree(docs, mine)
    fam = mine / "results" / "reproduce" / "mc_rnn"
    published = {n: json.loads((fam / f"{n}-s1.json").read_text()) for n in ("mc_rnn_3", "baseline")}
    statistics = compare.analyse_folder(str(fam))
    fresh = tmp_path / "fresh"
    p = run("mc_rnn", "--out", fresh, "--data-root", shared, "--docs", mine, "--publish", *SMOKE, "--seeds", "2")
    assert p.stdout.count("published earlier") == 2 and p.stdout.count(": training") == 2
    assert "mc_rnn/mc_rnn_3-s1: published earlier" in p.stdout and "mc_rnn/mc_rnn_3-s2: training" in p.stdout
    assert sorted(d.name for d in (fresh / "mc_rnn").iterdir() if d.name.endswith(("-s1", "-s2"))) == [
        "baseline-s2", "mc_rnn_3-s2"]
    assert {n: json.loads((fam / f"{n}-s1.json").read_text()) for n in published} == published
    assert (fam / "baseline-s2.hyp.gz").is_file()
    local = json.loads((fresh / "mc_rnn" / "comparison.json").read_text())
    assert {(r["system"], r["seed"]) for r in local["systems"]} == {(n, k) for n in published for k in (1, 2)}
    assert local["statistics"] == compare.analyse_folder(str(fam))  # seed 1 read from the committed outputs
    assert local["statistics"] != statistics  # and seed 2 is in it
    # a published run of another setting is neither trained over nor overwritten
    before = {q: q.stat().st_mtime_ns for q in fam.iterdir()}
    other = [a if i == 0 or SMOKE[i - 1] != "--width" else "20" for i, a in enumerate(SMOKE)]
    p = run("mc_rnn", "--out", tmp_path / "other", "--data-root", shared, "--docs", mine, "--publish", *other,
            check=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    was = " ".join(published["mc_rnn_3"]["options"])
    assert " 16 " in was and "20" not in was
    assert p.stderr.strip().endswith(
        f"error: mc_rnn/mc_rnn_3-s1: {fam / 'mc_rnn_3-s1.json'} was published with options '{was}', this command "
        f"trains with '{was.replace(' 16', ' 20')}'; publish this setting with another --variant")
    assert not any(d.name.endswith("-s1") for d in (tmp_path / "other" / "mc_rnn").iterdir())  # nothing trained
    assert {q: q.stat().st_mtime_ns for q in fam.iterdir()} == before


def test_tuned_seed_1_is_read_from_its_sweep_point_not_trained_again(tmp_path, shared_data):
    """--tuned-on-dev --publish: a system's seed-1 run published at its chosen sweep point is the same
    command, so it stands in (JSON and committed outputs copied, statistics from them) and nothing
    trains; a sweep run with other settings does not stand in (and is no error: it is another folder)."""
    import shutil
    import types

    from fairseq_local_repro import compare, families, family_types, run as repro_run
    from fairseq_local_repro.processes import ReproError

    docs = tmp_path / "docs"
    tiny = ["--data-root", shared_data, "--docs", docs, "--limit-train", "300", "--limit-eval", "24", "--width", "16",
            "--max-epoch", "1", "--systems", "gencnn"]
    run("gencnn", "--out", tmp_path / "sweep", *tiny, "--lr", "0.003", "--dropout", "0.3", "--publish",
        "--variant", "sweep_lr0.003_dropout0.3")
    root = docs / "results" / "reproduce" / "gencnn"
    chosen = root / "sweep_lr0.003_dropout0.3"
    sweep = {n: json.loads((chosen / f"{n}-s1.json").read_text()) for n in ("gencnn", "lstm_lm")}
    fam = families.FAMILIES["gencnn"]
    for lr in fam.sweep["lr"]:  # every other point of the grid has a higher dev loss
        for d in fam.sweep["dropout"]:
            (root / family_types.sweep_point(lr, d)).mkdir(exist_ok=True)
            for name in ("gencnn", "lstm_lm", "fconv_lm"):  # fconv_lm (not selected) everywhere
                path = root / family_types.sweep_point(lr, d) / f"{name}-s1.json"
                if not path.exists():
                    path.write_text(json.dumps({"dev_loss_bits": 99.0, "split": sweep["gencnn"]["split"]}))
    p = run("gencnn", "--out", tmp_path / "tuned", *tiny, "--tuned-on-dev", "--publish", "--variant", "tuned")
    for name in sweep:
        assert f"gencnn/{name}-s1: published earlier ({chosen / f'{name}-s1.json'}), not trained again" in p.stdout
    assert ": training" not in p.stdout
    assert not [d for d in (tmp_path / "tuned" / "gencnn").iterdir() if d.name.endswith("-s1")]
    tuned = root / "tuned"
    for name, r in sweep.items():
        assert json.loads((tuned / f"{name}-s1.json").read_text()) == r  # the sweep run, its command included
        assert (tuned / r["outputs"]["file"]).read_bytes() == (chosen / r["outputs"]["file"]).read_bytes()
    (chosen / "fconv_lm-s1.json").unlink()
    assert compare.analyse_folder(str(tuned)) == compare.analyse_folder(str(chosen))
    local = json.loads((tmp_path / "tuned" / "gencnn" / "comparison.json").read_text())
    assert local["statistics"] == compare.analyse_folder(str(tuned))

    # a sweep run published with another setting is not this command's run: None, not an error
    other = tmp_path / "other"
    shutil.copytree(chosen, other)
    r = dict(sweep["gencnn"], max_tokens=sweep["gencnn"]["max_tokens"] + 1)
    (other / "gencnn-s1.json").write_text(json.dumps(r))
    data = types.SimpleNamespace(sizes=r["split"], test_ref=str(tmp_path / "tuned" / "gencnn" / "data" / "raw" /
                                                                "test.txt"))
    system = next(s for s in fam.systems if s.name == "gencnn")
    ctx = types.SimpleNamespace(
        published=str(tuned), plan={"gencnn": types.SimpleNamespace(width_options=sweep["gencnn"]["options"])},
        scale_name=r["scale"], max_tokens=sweep["gencnn"]["max_tokens"], max_epoch=1, out=str(tmp_path / "x"),
        scale=types.SimpleNamespace(patience=r["patience"], clip_norm=r["clip_norm"], paper=False), data=data,
        setting=lambda name: {"lr": r["lr"], "dropout": r["dropout"]})
    assert repro_run.published_run(ctx, system, 1, "t", str(chosen)) == sweep["gencnn"]
    assert repro_run.published_run(ctx, system, 1, "t", str(other)) is None
    shutil.copy(other / "gencnn-s1.json", tuned / "gencnn-s1.json")  # in the folder --publish writes: one line
    with pytest.raises(ReproError, match="was published with max_tokens"):
        repro_run.published_run(ctx, system, 1, "t")


def test_a_capped_run_trains_on_when_the_cap_is_raised(smoke):
    out, _, _, shared = smoke
    first = json.loads((out / "baseline-s1" / "results.json").read_text())
    args = [a if a != "1" or i == 0 or SMOKE[i - 1] != "--max-epoch" else "2" for i, a in enumerate(SMOKE)]
    p = run("mc_rnn", "--out", out.parent, "--data-root", shared, *args)
    assert p.stdout.count("stopped by --max-epoch 1 earlier; continuing to 2") == 2
    r = json.loads((out / "baseline-s1" / "results.json").read_text())
    assert [c["epoch"] for c in r["curve"]] == [1, 2] and r["curve"][0] == first["curve"][0]
    assert r["updates"] == 2 * first["updates"] and r["max_epoch"] == 2 and r["hit_max_epoch"]
    last = safe_load(out / "baseline-s1" / "checkpoints" / "checkpoint_last.pt")
    assert last["optimizer_history"][-1]["num_updates"] == r["updates"]
    log = (out / "baseline-s1" / "train.log").read_text()
    assert f"checkpoint_last.pt (epoch 2 @ {first['updates']} updates)" in log  # resumed, not restarted
    assert first["resumes"] == [] and r["resumes"] == [{"after_epoch": 1, "stopping_state_restored": True}]
    assert "--max-epoch 2" in r["command"]


def test_a_sweep_point_needs_its_own_out_folder(smoke, tmp_path):
    out, _, _, shared = smoke
    first = json.loads((out / "baseline-s1" / "results.json").read_text())
    assert (first["lr"], first["dropout"], first["clip_norm"]) == (0.001, 0.2, 1.0)  # the family's cpu scale
    before = {p: p.stat().st_mtime_ns for p in out.glob("*-s1/*") if p.is_file()}
    for opt, was, now in (("--dropout", "0.2", "0.4"), ("--clip-norm", "1.0", "0.1")):
        p = run("mc_rnn", "--out", out.parent, "--data-root", shared, *SMOKE, opt, now, check=False)
        assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
        assert p.stderr.startswith("reproduce.py: error: mc_rnn/")
        assert f"was trained with {opt} {was}, this run asks for {now}; give this setting its own --out" in p.stderr
    assert {p: p.stat().st_mtime_ns for p in before} == before
    p = run("mc_rnn", "--out", out.parent, "--data-root", shared, *SMOKE, "--dropout", "2", check=False)
    assert p.stderr.strip().endswith("argument --dropout: must be a number in [0, 1), not '2'")
    for bad in ("-1", "inf", "nan", "x"):
        p = run("mc_rnn", "--out", out.parent, "--data-root", shared, *SMOKE, "--clip-norm", bad, check=False)
        assert p.stderr.strip().endswith(f"argument --clip-norm: must be a number >= 0 (0: no clipping), not '{bad}'")
    # in a folder of its own the sweep point trains every system with the new settings and says so
    run("mc_rnn", "--out", tmp_path, "--data-root", shared, *SMOKE, "--dropout", "0.4", "--clip-norm", "0.5")
    comparison = json.loads((tmp_path / "mc_rnn" / "comparison.json").read_text())
    assert comparison["scale_notes"].endswith("this run overrides --width 16, --dropout 0.4, --clip-norm 0.5, "
                                              "--max-epoch 1, --limit-train 300, --limit-eval 24")
    assert "--dropout 0.4 --clip-norm 0.5" in comparison["command"]
    for name in ("mc_rnn_3", "baseline"):
        sdir = tmp_path / "mc_rnn" / f"{name}-s1"
        r = json.loads((sdir / "results.json").read_text())
        assert (r["dropout"], r["clip_norm"], r["lr"]) == (0.4, 0.5, 0.001)
        state = safe_load(sdir / "checkpoints" / "checkpoint_best.pt")
        assert state["cfg"]["model"]["dropout"] == 0.4
        assert state["cfg"]["optimization"]["clip_norm"] == 0.5


def test_baseline_deep_is_size_matched_to_mc_rnn_3(smoke):
    """Table 5's Baseline-RNN-deep: 3 layers, its hidden width the one whose parameter count is closest
    to MC-RNN-3's (the neighbouring widths are farther), as fairseq-train builds it; planned at 16 units."""
    out, _, _, _ = smoke
    p = run("mc_rnn", "--out", out.parent, "--width", "16", "--dry-run", "--systems", "mc_rnn_3,baseline_deep")
    lines = p.stdout.splitlines()
    _, target, cmd3 = planned(lines, "mc_rnn", "mc_rnn_3")
    assert built_params(cmd3)[1] == target
    plan, count, cmd = planned(lines, "mc_rnn", "baseline_deep")
    assert f"size-matched to mc_rnn_3 ({target:,})" in plan and "--arch rnnsearch_iwslt_de_en_deep " in cmd
    model, built = built_params(cmd)
    assert built == count
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (3, 3)
    hidden = int(cmd.split("--encoder-hidden-size ")[1].split()[0])
    assert f"--decoder-hidden-size {hidden} " in cmd and hidden > 16  # wider than the 2-layer baseline's 16 units
    for other in (hidden - 1, hidden + 1):
        narrower = cmd.replace(f"-hidden-size {hidden} ", f"-hidden-size {other} ")
        assert abs(built_params(narrower)[1] - target) >= abs(count - target)


def test_mc_rnn_3_is_registered_at_every_dropout_the_baseline_was_swept_at():
    """The baseline's dropout grid (the family's setting and every published dropout_* folder) has
    MC-RNN-3 at each point: published there or registered to run (family_types.RunSet)."""
    from fairseq_local_repro.families import FAMILIES

    fam = FAMILIES["mc_rnn"]
    root = REPO / "docs" / "results" / "reproduce" / "mc_rnn"
    swept = {json.loads(p.read_text())["dropout"] for p in root.glob("dropout_*/baseline-s1.json")}
    swept.add(fam.scales["cpu"].dropout)
    # (the first runs, at the family's setting, predate the JSON's dropout field)
    published = {json.loads(p.read_text()).get("dropout", fam.scales["cpu"].dropout)
                 for p in root.glob("**/mc_rnn_3-s*.json")}
    registered = {float(r.options[r.options.index("--dropout") + 1]) if "--dropout" in r.options
                  else fam.scales["cpu"].dropout for r in fam.planned if not r.systems or "mc_rnn_3" in r.systems}
    assert swept == {0.2, 0.4, 0.5} and swept <= published | registered
    assert next(r for r in fam.planned if r.variant == "dropout_0.5").command("mc_rnn") == (
        "python scripts/reproduce.py mc_rnn --scale cpu --seeds 3 --systems mc_rnn_3 --max-epoch 60 --dropout 0.5 "
        "--out checkpoints/dropout_0.5 --publish --variant dropout_0.5")


def test_page_is_generated_from_the_published_json(smoke):
    _, docs, _, _ = smoke
    fam = docs / "results" / "reproduce" / "mc_rnn"
    assert {"comparison.json", "mc_rnn_3-s1.json", "baseline-s1.json", "curves.png"} <= set(os.listdir(fam))
    page = (docs / "results.md").read_text() + (docs / "results" / "mc_rnn.md").read_text()  # and its appendix
    r = json.loads((fam / "mc_rnn_3-s1.json").read_text())
    assert f"| MC-RNN-3 | `mc_rnn_iwslt_de_en_3` | {r['params'] / 1e6:.2f}M | 1 | 1 | {r['updates']} |" in page
    assert "python scripts/reproduce.py mc_rnn --scale cpu --systems mc_rnn_3 --max-epoch 1" in page
    assert "**max-epoch cap**" in page and "Max-epoch cap hit by: MC-RNN-3, Baseline-RNN" in page
    assert "2 test pairs were dropped because their source" in page
    # the runs' hypotheses and the references are published beside the JSON (as the runs were when published:
    # a later test of this module trains them on): the published BLEU is sacrebleu's on the published files
    import sacrebleu

    from fairseq_local_repro import compare

    ref = (smoke[0] / "data" / "raw" / "test.en").read_text(encoding="utf-8")
    assert compare.read_gz(str(fam / "test.ref.gz")) == ref and r["test_ref_sha256"] == compare.sha256_text(ref)
    for name in ("mc_rnn_3", "baseline"):
        pub = json.loads((fam / f"{name}-s1.json").read_text())
        hyp = compare.read_gz(str(fam / pub["outputs"]["file"]))
        assert pub["outputs"]["sha256"] == compare.sha256_text(hyp) and len(hyp.splitlines()) == 24
        bleu = sacrebleu.corpus_bleu(hyp.splitlines(), [ref.splitlines()], lowercase=True).score
        assert pub["test"]["bleu"] == pytest.approx(bleu, abs=0.006)
    assert (fam / "mc_rnn_3-s1.hyp.gz").stat().st_size < 100_000
    # the source lengths (words of each test source line) go with them, and the appendix shows BLEU by length
    src = (smoke[0] / "data" / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    assert compare.read_gz(str(fam / "test.src_len.gz")).split() == [str(len(x.split())) for x in src]
    assert any(line.startswith("| source words | sentences | MC-RNN-3 (1 seed) |")
               for line in (docs / "results" / "mc_rnn.md").read_text().splitlines())
    # every p-value and interval on the page is recomputed from the published files alone
    p = run("--recompute", "--docs", docs)
    assert "every p-value and interval equals the committed one" in p.stdout
    assert "mc_rnn: 2 of 2 runs with committed outputs" in p.stdout
    # change a figure in the JSON: --page-only rewrites the page from it
    r["test"]["bleu"] = 42.42
    (fam / "mc_rnn_3-s1.json").write_text(json.dumps(r))
    run("--page-only", "--docs", docs)
    appendix = (docs / "results" / "mc_rnn.md").read_text().splitlines()
    row = next(line for line in appendix if line.startswith("| MC-RNN-3 | `mc_rnn_iwslt_de_en_3` |"))
    assert "| 42.42 |" in row  # the appendix's run table reads the run's JSON


def test_language_model_family_perplexity_and_bootstrap(tmp_path, shared_data):
    """parallel_cells (wide 1 vs wide 3 at the same total hidden size) on 300 English captions: the
    test perplexity is fairseq-eval-lm's, and equals the one recomputed from the per-sentence
    log-probabilities that the paired bootstrap resamples; wide 3 carries Section 4.1's cell-masking
    table, whose unmasked perplexity is eval-lm's."""
    import math

    run("parallel_cells", "--out", tmp_path, "--data-root", shared_data, "--limit-train", "300", "--limit-eval", "24",
        "--width", "30", "--max-epoch", "1", "--systems", "wide3")
    fam = tmp_path / "parallel_cells"
    for name, wide in (("wide1", "1"), ("wide3", "3")):
        r = json.loads((fam / f"{name}-s1" / "results.json").read_text())
        assert r["metric"] == "ppl" and r["options"] == ["--decoder-embed-dim", "30", "--decoder-hidden-size", "30",
                                                         "--wide", wide, "--cell-input", "slice", "--init-scale", "0.1"]
        cfg = safe_load(fam / f"{name}-s1" / "checkpoints" / "checkpoint_best.pt")["cfg"]["model"]
        assert (cfg["wide"], cfg["cell_input"], cfg["init_scale"]) == (int(wide), "slice", 0.1)
        assert ("cell_masking" in r) == (name == "wide3")
        nll = json.loads((fam / f"{name}-s1" / "test" / "sentence_nll.json").read_text())
        assert len(nll) == 24  # one entry per test caption
        ppl = math.exp(sum(n for n, _ in nll) / sum(t for _, t in nll))
        assert r["test"]["ppl"] == pytest.approx(ppl, rel=1e-3)
        assert r["test"]["ppl"] == pytest.approx(2 ** r["test"]["loss_bits"], rel=1e-3)
        assert r["split"]["test"] == 24 and r["split"]["test_dropped"] == 1  # 1 test caption occurs in training
    assert not (fam / "wide5-s1").exists()

    nll = {n: json.loads((fam / f"{n}-s1" / "test" / "sentence_nll.json").read_text()) for n in ("wide1", "wide3")}
    expected = significance.sentence_test(nll["wide3"], nll["wide1"], significance.corpus_ppl, rng_seed=12346)
    comparison = json.loads((fam / "comparison.json").read_text())
    (c,) = comparison["statistics"]["comparisons"]
    assert c["per_sentence"]["1"]["p"] == pytest.approx(expected["p"], abs=1e-4)
    assert c["per_sentence"]["1"]["delta"] == pytest.approx(expected["delta"], abs=1e-4)

    res_path = fam / "wide3-s1" / "results.json"
    r = json.loads(res_path.read_text())
    m = r["cell_masking"]
    assert (m["conditions"], m["subset"], m["layer"]) == (["none", "mask1", "mask2", "mask3"], "test", "all")
    assert m["overall"]["none"] == pytest.approx(r["test"]["ppl"], rel=1e-3)  # the same model and words as eval-lm
    assert all(m["overall"][c] != pytest.approx(m["overall"]["none"], rel=1e-4) for c in ("mask1", "mask2", "mask3"))
    assert list(m["groups"]) == ["copular verbs", "prepositions", "determiners and numerals", "colours", "people",
                                 "-ing verbs"]
    assert m["group_words"]["copular verbs"] == ["is", "are"]


def _teacher_forced_entropies(ckpt, bin_dir):
    """Table 5 recomputed from the model's alignments: per target token -sum_i a_i ln a_i over the
    source, mean over the sentence's target tokens, mean over sentences; last decoder layer."""
    import torch
    from fairseq import checkpoint_utils, utils

    import fairseq_local  # noqa: F401

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)], arg_overrides={"data": str(bin_dir)})
    model = models[0].eval()
    task.load_dataset("test")
    pad = task.target_dictionary.pad()
    per_flow = {}
    with torch.no_grad():
        for i in range(len(task.dataset("test"))):  # one sentence at a time: no padding anywhere
            sample = task.dataset("test").collater([task.dataset("test")[i]])
            _, extra = model(**sample["net_input"], return_all_attn=True)
            assert sample["net_input"]["prev_output_tokens"].ne(pad).all()
            for flow, layers in extra["flows"].items():
                a = layers[-1][0].double()  # T x S
                ent = [-sum(float(x) * math.log(float(x)) for x in row if x > 0) for row in a]
                per_flow.setdefault(flow, []).append(sum(ent) / len(ent))
    return {f: sum(v) / len(v) for f, v in per_flow.items()}


def test_dpn_s2s_m9_run_with_alignment_entropy_and_dry_run(tmp_path, shared_data):
    """dpn_s2s: M9 alone (the reference row, so --systems m9 trains nothing else) for one epoch; its
    results.json carries Table 5's four alignment entropies, equal to a recomputation from the
    checkpoint, and every layer's and head's; the dry run then lists M9, M1 and M5 with parameter
    counts (M9's = the checkpoint's)."""
    from fairseq_local_repro.tables import layer_head_table

    run("dpn_s2s", "--out", tmp_path, "--data-root", shared_data, "--limit-train", "300", "--limit-eval", "24",
        "--width", "16", "--max-epoch", "1", "--systems", "m9")
    fam = tmp_path / "dpn_s2s"
    assert sorted(p.name for p in fam.glob("*-s1")) == ["m9-s1"]
    r = json.loads((fam / "m9-s1" / "results.json").read_text())
    assert (r["arch"], r["label"]) == ("dpn_s2s_m9", "M9 (DPN-S2S)")
    assert r["options"] == ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-conv-dim", "16",
                            "--decoder-conv-dim", "16", "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]
    ckpt = fam / "m9-s1" / "checkpoints" / "checkpoint_best.pt"
    state = safe_load(ckpt)
    cfg_model = state["cfg"]["model"]
    assert (cfg_model["encoder_paths"], cfg_model["decoder_paths"]) == ("cnn,san", "cnn,san")
    assert cfg_model["dropout"] == 0.1  # the paper's IWSLT14 dropout
    unique = {v.data_ptr(): v.numel() for v in state["model"].values()}  # tied embeddings, shared attention: once
    assert r["params"] == sum(unique.values()) < sum(v.numel() for v in state["model"].values())
    e = r["alignment_entropy"]
    assert (e["layer"], e["subset"], e["sentences"]) == ("last", "test", 24)
    assert set(e["entropy"]) == {"cc", "ca", "ac", "aa"}
    ref = _teacher_forced_entropies(ckpt, fam / "data" / "bin")
    for flow, value in ref.items():
        assert e["entropy"][flow] == pytest.approx(value, rel=1e-6), flow
    # every layer's and head's entropies beside Table 5's (the last layer's row is the table's)
    assert {f: rows[-1] for f, rows in e["per_layer"].items()} == pytest.approx(e["entropy"], abs=1e-4)
    assert set(e["per_head_normalised"]) == {"ac", "aa"}
    assert any(line.startswith("| SAN -> SAN | ") for line in layer_head_table(e))
    comparison = json.loads((fam / "comparison.json").read_text())
    assert comparison["paper_reference"]["alignment_entropy"] == {"cc": 2.208, "ac": 1.406, "ca": 1.886, "aa": 1.377}

    p = run("dpn_s2s", "--out", tmp_path, "--width", "16", "--dry-run")
    lines = p.stdout.splitlines()
    for name, arch in (("m9", "dpn_s2s_m9"), ("m1", "dpn_s2s_m1"), ("m5", "dpn_s2s_m5")):
        line = next(x for x in lines if f"dpn_s2s/{name}: {arch} " in x)
        count = int(line.split("-> ")[1].split(" parameters")[0].replace(",", ""))
        if name == "m9":
            assert count == r["params"]
        else:
            assert 0 < count < r["params"]  # one path per side: fewer parameters than M9 at the same widths
        assert any(f"--arch {arch} " in x and "--optimizer adam" in x for x in lines)
    # Table 1's controls at the common width 16: the wider ones twice as wide (32, SAN filter 128), the deeper
    # ones twice as deep; each counted as fairseq-train builds it, each larger than M9 (as in Table 1)
    controls = {"wider_cnn": ("dpn_baseline_wider_cnn_iwslt", "--encoder-layers '[(32, 3)] * 4'"),
                "deeper_cnn": ("dpn_baseline_deeper_cnn_iwslt", "--decoder-layers '[(16, 3)] * 8'"),
                "wider_san": ("dpn_baseline_wider_san_iwslt", "--encoder-embed-dim 32 --decoder-embed-dim 32 "
                                                               "--encoder-ffn-embed-dim 128"),
                "deeper_san": ("dpn_baseline_deeper_san_iwslt", "--encoder-embed-dim 16 --decoder-embed-dim 16 "
                                                                 "--encoder-ffn-embed-dim 64")}
    for name, (arch, widths) in controls.items():
        _, count, cmd = planned(lines, "dpn_s2s", name)
        assert f"--arch {arch} " in cmd and widths in cmd
        model, built = built_params(cmd)
        assert built == count > r["params"], name
        if name.endswith("san"):
            assert len(model.encoder.layers) == (4 if name == "deeper_san" else 2)
    assert not (fam / "m1-s1").exists() and not (fam / "m5-s1").exists()  # a dry run trains nothing


LATTICE_SYSTEMS = (("dwl_gating", "lattice_dwl_gating", "lattice"), ("swl_gating", "lattice_swl_gating", "lattice"),
                   ("word", "rnnsearch_zh_word", "word"), ("char", "rnnsearch_zh_char", "char"))


def test_lattice_family_systems_on_their_own_sources(tmp_path, shared_data):
    """lattice: DWL-GRU + Gating on jieba+thulac+snownlp lattices, the word-level baseline on jieba
    chains and the character-level RNNSearch on character chains, one epoch on 300 Tatoeba pairs:
    each system trains on its own binarized source under --task lattice_translation (the same
    batches: the same updates), params = the checkpoint's, the stored BLEU = case-insensitive
    sacrebleu of the written hypotheses against the raw references (also in the paired bootstrap);
    the dry run lists all four systems (SWL too) with their parameter counts and data dirs."""
    import sacrebleu

    run("lattice", "--out", tmp_path, "--data-root", shared_data, "--limit-train", "300", "--limit-eval", "24",
        "--width", "16", "--max-epoch", "1", "--jobs", "2", "--systems", "dwl_gating,char")
    fam = tmp_path / "lattice"
    corpus = shared_data / "tatoeba-zh-en"
    bleu = sacrebleu.metrics.BLEU(lowercase=True)
    # dev: every 26th pair of the length-ordered training file (26,655 // 1,000), train: the others in order
    authors = (corpus / "train.attribution").read_text(encoding="utf-8").splitlines()
    stride = len(authors) // 1000
    assert stride == 26
    train_authors = [a for i, a in enumerate(authors) if i % stride != stride - 1 or i >= 1000 * stride][:300]
    zh = (corpus / "train.zh").read_text(encoding="utf-8").splitlines()
    en = (corpus / "train.en").read_text(encoding="utf-8").splitlines()
    dev_idx = set(range(stride - 1, 1000 * stride, stride))
    rest = [x for i, x in enumerate(zh) if i not in dev_idx]
    dev = clean_held_out(rest, [zh[i] for i in sorted(dev_idx)], [en[i] for i in sorted(dev_idx)])
    assert (fam / "data" / "split" / "valid.zh").read_text(encoding="utf-8").splitlines() == [z for z, _ in dev][:24]
    test = clean_held_out(rest, (corpus / "valid.zh").read_text(encoding="utf-8").splitlines(),
                          (corpus / "valid.en").read_text(encoding="utf-8").splitlines())
    refs = [e for _, e in test][:24]
    results, hyps = {}, {}
    trained = [x for x in LATTICE_SYSTEMS if x[0] != "swl_gating"]
    assert not (fam / "swl_gating-s1").exists()  # not selected by --systems
    for name, arch, kind in trained:
        sdir = fam / f"{name}-s1"
        r = results[name] = json.loads((sdir / "results.json").read_text())
        assert (r["system"], r["arch"], r["seed"], r["scale"], r["metric"]) == (name, arch, 1, "cpu", "bleu")
        assert r["options"] == ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-hidden-size", "16",
                                "--decoder-hidden-size", "16"]
        state = safe_load(sdir / "checkpoints" / "checkpoint_best.pt")
        assert r["params"] == sum({v.data_ptr(): v.numel() for v in state["model"].values()}.values())
        assert r["updates"] == state["optimizer_history"][-1]["num_updates"] > 0
        assert r["epochs"] == 1 and r["stopped"] == "max_epoch"
        task = state["cfg"]["task"]
        assert (task["_name"], task["data"]) == ("lattice_translation", str(fam / "data" / "bin" / kind))
        # the source dictionary of the system's own kind is kept beside the checkpoint, with the authors
        for f in ("dict.zh.txt", "dict.en.txt"):
            assert (sdir / "checkpoints" / f).read_bytes() == (fam / "data" / "bin" / kind / f).read_bytes()
        assert (sdir / "checkpoints" / "train.attribution").read_text(encoding="utf-8").splitlines() == train_authors
        hyps[name] = (sdir / "test" / "hyp.txt").read_text(encoding="utf-8").splitlines()
        assert len(hyps[name]) == 24
        assert r["test"]["bleu"] == pytest.approx(bleu.corpus_score(hyps[name], [refs]).score, abs=0.006)
        assert r["test"]["signature"] == str(bleu.get_signature()) and "case:lc" in r["test"]["signature"]
        assert r["split"]["dev_dropped"] == 205 and r["split"]["test_dropped"] == 198
    # characters batch every kind: one seed, the same batches, the same number of updates
    assert len({r["updates"] for r in results.values()}) == 1
    # one English side: the same target dictionary for every kind; the lattice's words include jieba's
    data = fam / "data" / "bin"
    assert (data / "word" / "dict.en.txt").read_bytes() == (data / "lattice" / "dict.en.txt").read_bytes() \
        == (data / "char" / "dict.en.txt").read_bytes()
    words = {k: {w for w, _ in map(str.split, (data / k / "dict.zh.txt").read_text(encoding="utf-8").splitlines())
                 if not w.startswith("madeupword")} for k in ("lattice", "word", "char")}  # not the padding symbols
    assert words["word"] < words["lattice"] and all(len(w) == 1 for w in words["char"])
    # the statistics score with the same case-insensitive BLEU, also on upper-cased hypotheses

    for name in ("word", "dwl_gating"):
        upper = significance.bleu_statistics([h.upper() for h in hyps[name]], refs)
        assert significance.corpus_bleu(upper.sum(0))[0] == pytest.approx(results[name]["test"]["bleu"], abs=0.006)
    comparison = json.loads((fam / "comparison.json").read_text())
    assert [(c["system"], c["reference"]) for c in comparison["statistics"]["comparisons"]] == [
        ("dwl_gating", "word"), ("dwl_gating", "char")]  # the family's comparisons among the systems run
    assert comparison["baseline"] == "word" and [s["system"] for s in comparison["systems"]] == \
        [n for n, _, _ in trained]
    assert "300 kept by the paper's length filter" in comparison["data"]

    p = run("lattice", "--out", tmp_path, "--width", "16", "--dry-run")
    lines = p.stdout.splitlines()
    for name, arch, kind in LATTICE_SYSTEMS:
        line = next(x for x in lines if f"lattice/{name}: {arch} " in x)
        count = int(line.split("-> ")[1].split(" parameters")[0].replace(",", ""))
        # SWL has two scalar gates (inputs, preceding states) per direction where DWL has one (edge states)
        assert count == (results[name]["params"] if name in results else results["dwl_gating"]["params"] + 2 * 17)
        cmd = next(x for x in lines if f"--arch {arch} " in x)
        assert f"{fam / 'data' / 'bin' / kind} " in cmd and "--task lattice_translation" in cmd
    # the word-level baselines of the lattice's other two segmenters read their own word chains
    for name in ("word_thulac", "word_snownlp"):
        cmd = next(x for x in lines if f"{fam / (name + '-s1')}" in x)
        assert f"{fam / 'data' / 'bin' / name} " in cmd and "--arch rnnsearch_zh_word " in cmd
        chains = (fam / "data" / "raw" / name / "train.zh").read_text(encoding="utf-8").splitlines()
        jieba = (fam / "data" / "raw" / "word" / "train.zh").read_text(encoding="utf-8").splitlines()
        assert len(chains) == len(jieba) == 300 and chains != jieba  # the same sentences, segmented otherwise


def test_running_text_split_is_contiguous_and_shares_no_line_with_train():
    from fairseq_local_repro.prepare import split_running_text

    a = [f"a{i}" for i in range(20)]
    a[18] = "  A3 "  # a test line that repeats a training line (case and spaces aside)
    b = [f"b{i}" for i in range(10)]
    b[8] = "a1"  # a dev line of the second text that repeats a training line of the first
    parts, dropped = split_running_text([a[:5] + ["", "   "] + a[5:], b + [""]])
    assert parts == {"train": a[:16] + b[:8], "dev": ["a16", "a17"], "test": ["a19", "b9"]}
    assert dropped == {"dev": 1, "test": 1}
    with pytest.raises(ValueError, match="text 2: 2 non-blank lines, too few for a train, dev and test part"):
        split_running_text([a, ["x", "", "y"]])


def _running_text_reference(shared):
    """The --running-text corpus recomputed: each file's non-blank lines, 80 / 10 / 10 % in order,
    dev and test without the lines (case-folded, whitespace collapsed) of the whole train part."""
    train, dev, test = [], [], []
    for name in ("ptb.valid.txt", "wikitext2.valid.txt"):
        lines = [x.strip() for x in (shared / "lm" / name).read_text(encoding="utf-8").splitlines() if x.strip()]
        k = len(lines) // 10 + (len(lines) % 10 >= 5)  # round(10 %) of the lines
        train += lines[:len(lines) - 2 * k]
        dev += lines[len(lines) - 2 * k:len(lines) - k]
        test += lines[len(lines) - k:]
    seen = {normalised(x) for x in train}
    return train, [x for x in dev if normalised(x) not in seen], [x for x in test if normalised(x) not in seen]


def test_running_text_corpus_and_settings_tuned_on_dev(tmp_path, shared_data):
    """gencnn's streamed setting: the running-text corpus prepared (300 train, 24 dev/test lines) equals
    its recomputation, no dev or test line occurs in train, and the systems are planned on 256-token
    blocks that cross sentence boundaries; --tuned-on-dev plans each system at the grid point of its
    lowest published dev loss, and refuses with one line while a point is missing or from the old split."""
    from fairseq_local_repro import families, family_types, prepare
    from fairseq_local_repro.plan import tuned_on_dev
    from fairseq_local_repro.processes import ReproError

    fam = families.FAMILIES["gencnn"]
    data = prepare.prepare_running_text(fam, str(tmp_path / "gencnn"), str(shared_data), 300, 24)
    train, dev, test = _running_text_reference(shared_data)
    raw = tmp_path / "gencnn" / "data" / "raw"
    assert [(raw / f"{k}.txt").read_text(encoding="utf-8").splitlines() for k in ("train", "dev", "test")] == [
        train[:300], dev[:24], test[:24]]
    assert not {normalised(x) for x in dev + test} & {normalised(x) for x in train}
    assert data.lm_block == 256 and data.sizes["unit"] == "lines"
    assert (data.sizes["dev_dropped"], data.sizes["test_dropped"]) == (17, 33)
    assert "first 80 % of lines = train" in data.description

    docs = tmp_path / "docs"
    root = docs / "results" / "reproduce" / "gencnn"
    grid = [(lr, d) for lr in fam.sweep["lr"] for d in fam.sweep["dropout"]]
    best = {"gencnn": (3e-3, 0.3), "lstm_lm": (3e-4, 0.0), "fconv_lm": (1e-3, 0.3)}

    def publish_point(lr, d, split):
        for i, s in enumerate(("gencnn", "lstm_lm", "fconv_lm")):
            (root / family_types.sweep_point(lr, d)).mkdir(parents=True, exist_ok=True)
            loss = 5.0 + i - (0.5 if best[s] == (lr, d) else 0.01 * grid.index((lr, d)))
            (root / family_types.sweep_point(lr, d) / f"{s}-s1.json").write_text(
                json.dumps({"dev_loss_bits": loss, "split": split}))

    clean = {"train": 300, "dev": 24, "test": 24, "dev_dropped": 1, "test_dropped": 1}
    for lr, d in grid[:-1]:
        publish_point(lr, d, clean)
    p = run("gencnn", "--out", tmp_path, "--tuned-on-dev", "--docs", docs, "--dry-run", check=False)
    assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1
    assert "sweep_lr0.003_dropout0.3/gencnn-s1.json is not published (on the clean split) yet: python " \
           "scripts/reproduce.py gencnn --scale cpu --seeds 1 --lr 0.003 --dropout 0.3 " in p.stderr
    publish_point(*grid[-1], {"train": 300, "dev": 24, "test": 24})  # split before the overlap check
    with pytest.raises(ReproError, match="sweep_lr0.003_dropout0.3/gencnn-s1.json is not published \\(on the clean"):
        tuned_on_dev(fam, str(docs / "results" / "reproduce"))
    publish_point(*grid[-1], clean)
    assert tuned_on_dev(fam, str(docs / "results" / "reproduce")) == {
        name: {"lr": lr, "dropout": d} for name, (lr, d) in best.items()}
    # both settings planned at once: each system's tuned point, on blocks of running text
    lines = run("gencnn", "--out", tmp_path, "--running-text", "--tuned-on-dev", "--docs", docs,
                "--dry-run").stdout.splitlines()
    for name, (lr, d) in best.items():
        plan, _, cmd = planned(lines, "gencnn", name)
        assert plan.endswith(f"(lr {lr:g}, dropout {d:g})")
        assert f" --lr {lr} " in cmd and f" --dropout {d} " in cmd
        assert "--task language_modeling --sample-break-mode none --tokens-per-sample 256 " in cmd


def test_publishing_a_changed_setting_needs_a_variant(tmp_path):
    p = run("mc_rnn", "--out", tmp_path, "--dropout", "0.4", "--publish", check=False)
    assert p.returncode != 0 and p.stderr.strip().splitlines()[-1] == (
        "reproduce.py: error: --dropout changes the family's setting: publish the run with --variant NAME so that it "
        "does not replace the family's comparison")
    p = run("mc_rnn", "--out", tmp_path, "--clip-norm", "0.1", "--publish", check=False)
    assert p.returncode != 0 and p.stderr.strip().splitlines()[-1] == (
        "reproduce.py: error: --clip-norm changes the family's setting: publish the run with --variant NAME so "
        "that it does not replace the family's comparison")
    for opt in (["--lr", "0.01"], ["--running-text"], ["--tuned-on-dev"]):
        p = run("gencnn", "--out", tmp_path, *opt, "--publish", check=False)
        assert p.returncode != 0 and p.stderr.strip().splitlines()[-1] == (
            f"reproduce.py: error: {opt[0]} changes the family's setting: publish the run with --variant NAME so that "
            "it does not replace the family's comparison")
    p = run("gencnn", "--out", tmp_path, "--tuned-on-dev", "--lr", "0.01", check=False)
    assert p.stderr.strip().endswith("error: --tuned-on-dev picks each system's --lr and --dropout; give neither")
    p = run("mc_rnn", "--out", tmp_path, "--running-text", check=False)
    assert p.stderr.strip() == ("reproduce.py: error: --running-text is a --scale cpu language-model corpus; 'mc_rnn' "
                                "is a translation family")
    p = run("gencnn", "--out", tmp_path, "--lr", "0", check=False)
    assert p.stderr.strip().endswith("argument --lr: must be a positive number, not '0'")
    p = run("mc_rnn", "--out", tmp_path, "--variant", "dropout_0.4", check=False)
    assert p.stderr.strip().endswith("error: --variant names where --publish puts the run; add --publish")
    p = run("mc_rnn", "--out", tmp_path, "--variant", "../x", "--publish", check=False)
    assert p.stderr.strip().endswith("must be lower-case letters, digits, '_' and '.', not '../x'")
    assert not any(tmp_path.iterdir())


def test_queued_runs_are_neither_trained_nor_waited_for(monkeypatch):
    """``--publish --queued SYSTEM-sSEED,...`` publishes the finished runs while the named ones train
    elsewhere: run_all trains every other (system, seed), in registry order, and none of the named."""
    import types

    from fairseq_local_repro import families, run

    family = families.FAMILIES["lattice"]
    calls = []
    monkeypatch.setattr(run, "run_system", lambda ctx, s, seed: calls.append(f"{s.name}-s{seed}") or {"seed": seed})
    names = [s.name for s in family.systems]
    ctx = types.SimpleNamespace(published=None)
    results = run.run_all(ctx, family.systems, [1, 2], jobs=1, skip=[f"{names[0]}-s2", f"{names[-1]}-s2"])
    assert calls == [f"{n}-s1" for n in names] + [f"{n}-s2" for n in names[1:-1]]
    assert [r["seed"] for r in results] == [1] * len(names) + [2] * (len(names) - 2)


def test_a_run_is_worked_on_by_one_process_at_a_time(monkeypatch, tmp_path):
    """Two commands reaching the same run (the same --out, or a run also left to another process):
    the second stops with one line naming the holder; the lock goes when its holder ends, even
    killed; a finished run is read without taking it."""
    import signal
    import types

    from fairseq_local_repro import families, run
    from fairseq_local_repro.processes import ReproError

    system = families.FAMILIES["lattice"].systems[0]
    ctx = types.SimpleNamespace(family=families.FAMILIES["lattice"], max_epoch=3, published=None,
                                published_folders=lambda name=None: [],
                                run_dir=lambda name, seed: str(tmp_path / f"{name}-s{seed}"))
    sdir, tag = tmp_path / f"{system.name}-s1", f"lattice/{system.name}-s1"
    lock = sdir / "run.lock"
    monkeypatch.setattr(run, "train_command", lambda *a: [])
    take = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); "
            "f.seek(0); f.truncate(); f.write('4242\\n'); f.flush(); print('locked', flush=True); time.sleep(600)")
    seen = []

    def inside(ctx_, system_, seed, tag_):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(ReproError) as e:  # a second worker of this process
            run.run_system(ctx, system, 1)
        seen.append(str(e.value))
        other = subprocess.run([sys.executable, "-c", take, str(lock)], capture_output=True, text=True, timeout=60)
        seen.append(other.returncode != 0 and "BlockingIOError" in other.stderr)  # another process
        return {"seed": seed}

    monkeypatch.setattr(run, "_run_system", inside)
    assert run.run_system(ctx, system, 1) == {"seed": 1}
    assert seen == [f"{tag}: another process (pid {os.getpid()}) is training or evaluating this run ({lock}); "
                    f"wait for it to end, or leave the run to it: --publish --queued {system.name}-s1", True]
    # released when the body returns; a holder killed with SIGKILL leaves no stale lock
    holder = subprocess.Popen([sys.executable, "-c", take, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(ReproError, match=r"another process \(pid 4242\)"):
            run.run_system(ctx, system, 1)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    seen.clear()
    assert run.run_system(ctx, system, 1) == {"seed": 1} and len(seen) == 2
    # a finished run: returned as it is, its folder untouched
    done = tmp_path / f"{system.name}-s2"
    done.mkdir()
    (done / "results.json").write_text(json.dumps({"hit_max_epoch": False, "max_epoch": 3, "seed": 2}))
    assert run.run_system(ctx, system, 2)["seed"] == 2 and sorted(os.listdir(done)) == ["results.json"]
