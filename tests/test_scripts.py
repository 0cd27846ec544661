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
    assert proc.stdout.startswith("BLEU (detokenized: sacrebleu tokenize 13a, case-insensitive) = ")
    assert s["bleu_signature"] in proc.stdout  # the signature is printed
    # ROUGE in [0, 1], the best reference per sentence (rouge-score's score_multi)
    from rouge_score import rouge_scorer

    sc = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    for key in ("rouge1", "rouge2", "rougeL"):
        want = sum(max(sc.score(r, h)[key].fmeasure for r in (a, b)) for h, a, b in zip(hyp, ref1, ref2)) / 2
        assert s[f"{key}_f1"] == pytest.approx(want, abs=1e-12)
    assert s["rouge1_f1"] < 1.0
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", tmp_path / "hyp", "--ref", tmp_path / "s.json", ok=False)
    assert "lines but" in proc.stderr


def test_score_identical_text_is_100_and_1(tmp_path):
    text = ["The cat sat on the mat.", "\"Hello,\" she said -- twice."]
    (tmp_path / "t").write_text("\n".join(text) + "\n")
    proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "t", "--ref", tmp_path / "t", "--rouge",
               "--json", tmp_path / "s.json")
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["bleu"] == pytest.approx(100.0) and s["rouge1_f1"] == s["rouge2_f1"] == s["rougeL_f1"] == 1.0
    assert re.match(r"BLEU \(detokenized[^)]*\) = 100\.00 ", proc.stdout)
    assert "R-1 1.0000  R-2 1.0000  R-L 1.0000" in proc.stdout


def test_score_tokenize_none_is_labelled_tokenized(tmp_path):
    (tmp_path / "h").write_text("a b c d e .\n")
    proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "h", "--ref", tmp_path / "h",
               "--tokenize", "none", "--json", tmp_path / "s.json")
    first = proc.stdout.splitlines()[0]
    assert first.startswith("BLEU (tokenized") and "detokenized" not in proc.stdout and "tok:none" in first
    assert json.loads((tmp_path / "s.json").read_text())["bleu_kind"] == "tokenized"


def test_score_non_utf8_is_one_line_naming_file_and_line(tmp_path):
    (tmp_path / "h").write_bytes("ok\n".encode() + b"caf\xe9\n")
    (tmp_path / "r").write_text("ok\ncafe\n")
    proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "h", "--ref", tmp_path / "r",
               "--json", tmp_path / "s.json", ok=False)
    err = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode != 0 and len(err) == 1 and f"{tmp_path / 'h'}:2: not UTF-8" in err[0], proc.stderr
    assert not (tmp_path / "s.json").exists()


def _gen_log(path, ids, texts):
    with open(path, "w") as f:
        for i in ids:
            f.write(f"S-{i}\tsrc\nT-{i}\tref {i}\nH-{i}\t-0.5\t{texts[i]}\nD-{i}\t-0.5\t{texts[i]}\nP-{i}\t-0.1\n")
            f.write(f"H-{i}\t-3.0\tsecond best\n")


def test_gen_text_corpus_order_and_lost_sentences(tmp_path):
    texts = ["zero", "one", "", "three", "four"]
    _gen_log(tmp_path / "g", [3, 0, 4, 2, 1], texts)
    run(sys.executable, SCRIPTS / "lib" / "gen_text.py", tmp_path / "g", "H", tmp_path / "h")
    assert (tmp_path / "h").read_text().split("\n")[:-1] == texts  # best hypothesis, corpus order, empty kept
    run(sys.executable, SCRIPTS / "lib" / "gen_text.py", tmp_path / "g", "T", tmp_path / "t")
    assert (tmp_path / "t").read_text().splitlines() == [f"ref {i}" for i in range(5)]
    proc = run(sys.executable, SCRIPTS / "lib" / "gen_text.py", tmp_path / "g", "H", tmp_path / "x", "--expect", "6",
               ok=False)
    assert proc.returncode != 0 and "5 H- lines for 6 sentences (first missing id 5)" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_score_translation_detokenizes_against_raw_references(tmp_path):
    """The recipes' one scoring step: tokenized, lowercased hypotheses identical to the reference
    score 100 (scored as they were, against raw references, they score far less)."""
    raw = ["Bill Clinton's visit, in 2008, was \"short\".", "It isn't (really) over."]
    (tmp_path / "ref").write_text("\n".join(raw) + "\n")
    tok = subprocess.run(["sacremoses", "-q", "-l", "en", "tokenize"], input="\n".join(raw) + "\n", text=True,
                         capture_output=True, env=ENV, check=True).stdout.lower().splitlines()
    _gen_log(tmp_path / "g", [1, 0], tok)
    cmd = (f'source "{SCRIPTS}/lib/common.sh"; score_translation "{tmp_path}/g" "{tmp_path}/o" --lowercase '
           f'--ref "{tmp_path}/ref" --ref "{tmp_path}/ref"')
    proc = run("bash", "-c", cmd)
    assert re.search(r"^BLEU \(detokenized[^)]*\) = 100\.00 .*nrefs:2\|case:lc", proc.stdout, re.M), proc.stdout
    assert (tmp_path / "o.hyp").read_text().splitlines() == [s.lower() for s in raw]
    as_is = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "o.hyp.tok", "--ref", tmp_path / "ref",
                "--lowercase").stdout
    assert float(re.search(r"= ([\d.]+)", as_is).group(1)) < 90


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
