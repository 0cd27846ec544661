"""The pipeline scripts: usage, one-line errors, atomic outputs, and a real preprocess/score run."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contract_lib import REPO
from fairseq_local.data.synthetic import SyntheticTranslationCorpus, write_corpus

SCRIPTS = REPO / "scripts"
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1")


def run(*cmd, ok=True):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV, timeout=600)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("script", ["preprocess.sh", "train.sh", "generate.sh", "score.sh", "demo.sh", "test.sh"])
def test_usage_on_h(script):
    proc = run("bash", SCRIPTS / script, "-h")
    assert "usage" in proc.stdout.lower() or "bash scripts/test.sh" in proc.stdout


@pytest.mark.parametrize("cmd,needle", [
    (["preprocess.sh", "--src", "de", "--tgt", "en", "--valid", "x", "--destdir", "d"], "--train is required"),
    (["preprocess.sh", "--bpe", "wordpiece"], "--train is required"),
    (["preprocess.sh", "--frobnicate"], "unknown option '--frobnicate'"),
    (["train.sh", "--data", "/nonexistent", "--save-dir", "s", "--arch", "lstm"], "--data '/nonexistent' does not exist"),
    (["train.sh", "--data", "/tmp"], "--save-dir is required"),
    (["generate.sh", "--data", "/tmp", "--path", "/nonexistent.pt", "--out", "o"], "checkpoint '/nonexistent.pt' does not exist"),
    (["generate.sh", "--data", "/tmp", "--path"], "option --path needs a value"),
])
def test_one_line_errors(cmd, needle):
    proc = run("bash", SCRIPTS / cmd[0], *cmd[1:], ok=False)
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    write_corpus(str(d), (("train", 300), ("valid", 20), ("test", 20)), seed=3)
    return d


@pytest.mark.parametrize("bpe", ["sentencepiece", "subword-nmt"])
def test_preprocess_end_to_end(corpus, tmp_path, bpe):
    dest = tmp_path / "bin"
    run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", corpus / "train",
        "--valid", corpus / "valid", "--test", corpus / "test", "--destdir", dest, "--bpe", bpe, "--bpe-size", "120")
    for split in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            assert (dest / f"{split}.src-tgt.{lang}.bin").exists()
            bpe_lines = (dest / "bpe" / f"{split}.{lang}").read_text().splitlines()
            raw_lines = (corpus / f"{split}.{lang}").read_text().splitlines()
            assert len(bpe_lines) == len(raw_lines)
            # BPE is lossless: undoing it gives the raw text back
            if bpe == "sentencepiece":
                undone = ["".join(l.split()).replace("\u2581", " ").strip() for l in bpe_lines]
            else:
                undone = [re.sub(r"@@( |$)", "", l) for l in bpe_lines]
            assert undone == raw_lines
    assert (dest / "dict.src.txt").read_text() == (dest / "dict.tgt.txt").read_text()  # joint dictionary
    # an existing destination is never clobbered without --force
    proc = run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", corpus / "train",
               "--valid", corpus / "valid", "--destdir", dest, ok=False)
    assert proc.returncode != 0 and "exists and is not empty" in proc.stderr


def test_preprocess_mismatched_lines_leaves_nothing(corpus, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.src").write_text((corpus / "train.src").read_text())
    (bad / "train.tgt").write_text("\n".join((corpus / "train.tgt").read_text().splitlines()[:-1]) + "\n")
    dest = tmp_path / "out"
    proc = run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", bad / "train",
               "--valid", corpus / "valid", "--destdir", dest, ok=False)
    assert "line counts differ" in proc.stderr and "train.src has 300 lines" in proc.stderr
    assert not dest.exists() and not list(tmp_path.glob("out.tmp*"))


def test_score_multi_reference_lowercase_and_rouge(tmp_path):
    import sacrebleu

    hyp = ["The cat sat on the mat .", "a dog barked loudly"]
    ref1 = ["the cat sat on a mat .", "the dog barked"]
    ref2 = ["The cat is on the mat .", "A dog barked loudly"]
    for name, lines in (("hyp", hyp), ("r1", ref1), ("r2", ref2)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    out = tmp_path / "s.json"
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", tmp_path / "hyp", "--ref", tmp_path / "r1",
               "--ref", tmp_path / "r2", "--lowercase", "--rouge", "--json", out)
    s = json.loads(out.read_text())
    expected = sacrebleu.corpus_bleu(hyp, [ref1, ref2], lowercase=True).score
    assert abs(s["bleu"] - expected) < 1e-9 and f"{expected:.2f}" in proc.stdout
    assert s["bleu"] > sacrebleu.corpus_bleu(hyp, [ref1], lowercase=True).score  # 2nd reference helps
    assert "nrefs:2" in s["bleu_signature"] and "case:lc" in s["bleu_signature"]
    assert s["rouge1_f1"] == pytest.approx(100.0, abs=1e-6) or s["rouge1_f1"] > 80  # hyp 2 matches ref2 exactly
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", tmp_path / "hyp", "--ref", tmp_path / "s.json", ok=False)
    assert "has 11 lines but" in proc.stderr or "lines but" in proc.stderr


def test_synthetic_corpus_structure():
    pairs = SyntheticTranslationCorpus(seed=5).sample(300)
    assert pairs == SyntheticTranslationCorpus(seed=5).sample(300)  # deterministic
    assert pairs != SyntheticTranslationCorpus(seed=6).sample(300)
    for src, tgt in pairs:
        s, t = src.split(), tgt.split()
        # subject-verb agreement is carried across the reordering: target verb (last word) agrees
        # with the source subject's determiner (first word)
        assert t[-1].endswith("un") == (s[0] == "les"), (src, tgt)
        assert (t[0] == "tai") == (s[0] == "les")
        assert len([w for w in t if w in ("ta", "tai")]) == len([w for w in s if w in ("le", "les")])
    assert len({p for p in pairs}) > 250  # not a handful of repeated sentences


def test_bench_last_line_and_json(tmp_path):
    out = tmp_path / "b.json"
    tiny = "--encoder-embed-dim 16 --encoder-hidden-size 16 --decoder-embed-dim 16 --decoder-hidden-size 16 --decoder-out-embed-dim 16"
    proc = run(sys.executable, SCRIPTS / "bench.py", "--arch", "lstm", "--baseline", "lstm", "--arch-args", tiny,
               "--baseline-args", tiny + " --encoder-layers 2 --decoder-layers 2", "--vocab", "200", "--max-tokens", "120",
               "--src-len", "8", "--tgt-len", "8", "--steps", "2", "--warmup", "1", "--rounds", "2",
               "--gen-sentences", "4", "--gen-batch", "2", "--gen-len", "5", "--lengths", "4,8", "--device", "cpu",
               "--json", out)
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"ratio train_tokens_per_s A/B = \d+\.\d\d", last), last
    res = json.loads(out.read_text())
    a, b = res["rows"]
    assert b["params"] > a["params"]  # the baseline has a second encoder layer
    assert a["train_tokens_per_s"] > 0 and a["gen_sent_per_s"] > 0 and a["peak_mem_mib"] > 0
    assert [e["length"] for e in res["scaling"]] == [4, 8]
    ratio = float(last.split("=")[1])
    assert ratio == pytest.approx(res["train_ratio"], abs=0.006)
    assert res["train_ratio_min"] <= res["train_ratio"] <= res["train_ratio_max"]
    proc = run(sys.executable, SCRIPTS / "bench.py", "--arch", "lstm", "--baseline", "lstm", "--steps", "0", ok=False)
    assert "--steps must be >= 1" in proc.stderr
