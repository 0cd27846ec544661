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
    for name in ("t", "r"):  # the reference a copy: the --hyp file itself is refused as one
        (tmp_path / name).write_text("\n".join(text) + "\n")
    proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "t", "--ref", tmp_path / "r", "--rouge",
               "--json", tmp_path / "s.json")
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["bleu"] == pytest.approx(100.0) and s["rouge1_f1"] == s["rouge2_f1"] == s["rougeL_f1"] == 1.0
    assert re.match(r"BLEU \(detokenized[^)]*\) = 100\.00 ", proc.stdout)
    assert "R-1 1.0000  R-2 1.0000  R-L 1.0000" in proc.stdout


def test_score_tokenize_none_is_labelled_tokenized(tmp_path):
    for name in ("h", "r"):
        (tmp_path / name).write_text("a b c d e .\n")
    proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "h", "--ref", tmp_path / "r",
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
    run(sys.executable, "-m", "fairseq_local_repro.text.gen_text", tmp_path / "g", "H", tmp_path / "h")
    assert (tmp_path / "h").read_text().split("\n")[:-1] == texts  # best hypothesis, corpus order, empty kept
    run(sys.executable, "-m", "fairseq_local_repro.text.gen_text", tmp_path / "g", "T", tmp_path / "t")
    assert (tmp_path / "t").read_text().splitlines() == [f"ref {i}" for i in range(5)]
    proc = run(sys.executable, "-m", "fairseq_local_repro.text.gen_text", tmp_path / "g", "H", tmp_path / "x",
               "--expect", "6", ok=False)
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


# ------------------------------------------------------------------------------------------------
# scoring cannot be mislabelled: detokenized BLEU only against raw references
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ref_lines,name,needle", [
    (["a man rides a bike .", "the <<unk>> sleeps ."], "ref", "ref:2: '<<unk>>' is fairseq's unknown-word mark"),
    (["a man <unk> a bike .", "the dog sleeps ."], "ref", "ref:1: '<unk>' is fairseq's unknown-word mark"),
    (["a man ri@@ des a bike .", "the dog sleeps ."], "ref", "ref:1: '@@' is a subword-nmt BPE mark"),
    (["\u2581a \u2581man", "the dog sleeps ."], "ref", "ref:1: '\u2581' is a sentencepiece BPE mark"),
    (["a man rides a bike .", "the dog sleeps ."], "ref.tok.txt", "is tokenized text (its name says so)"),
])
def test_score_refuses_detokenized_bleu_against_a_non_raw_reference(tmp_path, ref_lines, name, needle):
    (tmp_path / "hyp").write_text("a man rides a bike .\nthe dog sleeps .\n")
    (tmp_path / name).write_text("\n".join(ref_lines) + "\n")
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", tmp_path / "hyp", "--ref", tmp_path / name, "--json",
               tmp_path / "s.json", ok=False)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(err) == 1 and needle in err[0] and "--tokenize none" in err[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == "" and not (tmp_path / "s.json").exists()
    # the same files as tokens: tokenized BLEU, labelled so
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", tmp_path / "hyp", "--ref", tmp_path / name, "--tokenize", "none")
    assert proc.stdout.startswith("BLEU (tokenized")


def test_score_refuses_hypotheses_with_bpe_left_in(tmp_path):
    (tmp_path / "hyp").write_text("a man rides a bike .\nthe do@@ g sleeps .\n")
    (tmp_path / "ref").write_text("a man rides a bike .\nthe dog sleeps .\n")
    for tokenize in ("13a", "none"):
        proc = run(sys.executable, SCRIPTS / "score.py", "--hyp", tmp_path / "hyp", "--ref", tmp_path / "ref",
                   "--tokenize", tokenize, ok=False)
        assert proc.stderr.strip().splitlines() == [
            f"score.py: error: {tmp_path / 'hyp'}:2: '@@' is a subword-nmt BPE mark: remove the BPE first "
            "(fairseq-generate --remove-bpe, scripts/generate.sh does)"]


@pytest.fixture(scope="module")
def spm_bin(corpus, tmp_path_factory):
    dest = tmp_path_factory.mktemp("spm") / "bin"
    run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", corpus / "train", "--valid",
        corpus / "valid", "--test", corpus / "test", "--destdir", dest, "--bpe-size", "120", "--workers", "1")
    return dest


def test_train_bf16_cpu_then_generate_and_score_against_raw_references(corpus, spm_bin, tmp_path):
    """train.sh --bf16 on CPU trains in bf16; generate.sh keeps the binarized targets apart
    (ref.tok.txt, refused as a detokenized reference) and copies the raw references given with
    --ref to ref.txt, the one reference of detokenized BLEU; a --ref of the wrong length is one line."""
    import torch

    save = tmp_path / "ck"
    proc = run("bash", SCRIPTS / "train.sh", "--data", spm_bin, "--save-dir", save, "--arch", "rnnsearch_iwslt_de_en",
        "--cpu", "--bf16", "--", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
        "--decoder-hidden-size", "8", "--attention-dim", "8", "--optimizer", "adam", "--lr", "0.001",
        "--max-update", "2", "--max-tokens", "2000", "--no-epoch-checkpoints", "--num-workers", "0")
    # quiet: fairseq's Hydra / torch.cuda.amp / pin_memory deprecation notices are filtered
    assert "Warning" not in proc.stderr and "deprecated" not in proc.stderr, proc.stderr[-3000:]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["cfg"]["common"]["bf16"] and state["cfg"]["common"]["cpu"]
    assert state["optimizer_history"][-1]["num_updates"] == 2
    ckpt = save / "checkpoint_last.pt"
    gen = tmp_path / "gen"
    proc = run("bash", SCRIPTS / "generate.sh", "--data", spm_bin, "--path", ckpt, "--out", gen, "--beam", "2",
               "--", "--max-len-b", "5")
    assert sorted(p.name for p in gen.iterdir()) == ["gen.json", "generate-test.txt", "hyp.txt", "ref.tok.txt"]
    assert "no raw references (--ref)" in proc.stderr
    raw = (corpus / "test.tgt").read_text().splitlines()
    assert len((gen / "ref.tok.txt").read_text().splitlines()) == len(raw)
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", gen / "hyp.txt", "--ref", gen / "ref.tok.txt", ok=False)
    assert proc.returncode != 0 and "is tokenized text (its name says so)" in proc.stderr
    proc = run("bash", SCRIPTS / "generate.sh", "--data", spm_bin, "--path", ckpt, "--out", gen, "--beam", "2",
               "--ref", corpus / "test.tgt", "--", "--max-len-b", "5")
    assert (gen / "ref.txt").read_text().splitlines() == raw
    assert f"detokenized BLEU: scripts/score.sh --hyp {gen}/hyp.txt --ref {gen}/ref.txt" in proc.stderr
    proc = run("bash", SCRIPTS / "score.sh", "--hyp", gen / "hyp.txt", "--ref", gen / "ref.txt")
    assert proc.stdout.startswith("BLEU (detokenized")
    short = tmp_path / "short.tgt"
    short.write_text("\n".join(raw[:-1]) + "\n")
    before = {p.name: p.read_bytes() for p in gen.iterdir()}
    proc = run("bash", SCRIPTS / "generate.sh", "--data", spm_bin, "--path", ckpt, "--out", gen, "--ref", short, ok=False)
    assert proc.stderr.strip().splitlines() == [
        f"generate.sh: error: --ref {short} has {len(raw) - 1} lines but subset 'test' of {spm_bin} has {len(raw)} sentences"]
    assert {p.name: p.read_bytes() for p in gen.iterdir()} == before


# ------------------------------------------------------------------------------------------------
# preprocessing small real data with the defaults (sentencepiece 8000)
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def multi30k_small(shared_data, tmp_path_factory):
    """200 training and 100 validation pairs of Multi30k De-En."""
    d = tmp_path_factory.mktemp("m30k")
    for lang in ("de", "en"):
        for split, n in (("train", 200), ("valid", 100)):
            with open(shared_data / "multi30k-de-en" / f"{split}.{lang}", encoding="utf-8") as f:
                (d / f"{split}.{lang}").write_text("".join(next(f) for _ in range(n)), encoding="utf-8")
    return d


def _replaced(log):
    """{(split, lang): % replaced by <unk>} from fairseq-preprocess's log."""
    return {(Path(path).name.split(".")[0], lang): float(pct)
            for lang, path, pct in re.findall(r"\[(\S+)\] (\S+): \d+ sents, \d+ tokens, (\S+)% replaced", log)}


def test_preprocess_defaults_on_small_real_data(multi30k_small, tmp_path):
    """The default sentencepiece path on 200 pairs: the vocabulary size the text allows (a note, not
    sentencepiece's INTERNAL error), fairseq's dictionary = the sentencepiece vocabulary, so the
    valid split is (almost) free of <unk>; preprocess.log names the output folder."""
    import sentencepiece as spm

    dest = tmp_path / "bin"
    args = ["--src", "de", "--tgt", "en", "--train", multi30k_small / "train", "--valid", multi30k_small / "valid",
            "--workers", "1"]
    proc = run("bash", SCRIPTS / "preprocess.sh", *args, "--destdir", dest)
    assert re.search(r"preprocess.sh: note: the training text allows at most (\d+) sentencepiece pieces, fewer than "
                     r"the default --bpe-size 8000: using \1 \(--bpe-size chooses\)", proc.stderr), proc.stderr
    assert "warning" not in proc.stderr
    sp = spm.SentencePieceProcessor(model_file=str(dest / "bpe" / "spm.joint.model"))
    pieces = {sp.id_to_piece(i) for i in range(sp.get_piece_size())} - {"<unk>", "<s>", "</s>"}
    words = {line.split()[0] for line in (dest / "dict.de.txt").read_text(encoding="utf-8").splitlines()}
    assert words == pieces
    log = (dest / "preprocess.log").read_text(encoding="utf-8")
    replaced = _replaced(log)
    assert set(replaced) == {("train", "de"), ("train", "en"), ("valid", "de"), ("valid", "en")}
    assert max(replaced.values()) < 1.0, replaced  # (fairseq's own dictionary: 25 % of valid.en was <unk>)
    assert ".tmp." not in log and f"destdir='{dest}'" in log
    # the same size asked for explicitly: one line saying what to change, nothing written
    proc = run("bash", SCRIPTS / "preprocess.sh", *args, "--destdir", tmp_path / "b2", "--bpe-size", "8000", ok=False)
    most = re.search(r"at most (\d+) pieces", proc.stderr).group(1)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"preprocess.sh: error: --bpe-size 8000 is more than sentencepiece can build from the training text "
        f"({multi30k_small / 'train.de'},{multi30k_small / 'train.en'}: at most {most} pieces): "
        f"pass --bpe-size {most} or less")
    assert "Traceback" not in proc.stderr and not list(tmp_path.glob("b2*"))


def test_preprocess_warns_on_a_high_unk_rate(multi30k_small, tmp_path):
    """Whole words (--bpe none) from 200 sentences: a quarter of the valid words are <unk>; a
    warning names each split over 1% with fairseq's own figure."""
    dest = tmp_path / "bin"
    proc = run("bash", SCRIPTS / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", multi30k_small / "train",
               "--valid", multi30k_small / "valid", "--destdir", dest, "--bpe", "none", "--workers", "1")
    replaced = _replaced((dest / "preprocess.log").read_text(encoding="utf-8"))
    warnings = [l for l in proc.stderr.splitlines() if "warning" in l]
    assert len(warnings) == 2, proc.stderr
    for line, lang in zip(warnings, ("de", "en")):
        assert line.startswith(f"preprocess.sh: warning: valid ({lang}): {replaced[('valid', lang)]:.1f}% of its ")
        assert " tokens are <unk>" in line and replaced[("valid", lang)] > 10


# ------------------------------------------------------------------------------------------------
# the lattice scripts: -h at once and about our options; build_lattices without torch, one
# segmenter in memory at a time
# ------------------------------------------------------------------------------------------------
def _run_script_in(code_args, script):
    """Run SCRIPT with argv in a fresh interpreter; print which heavy modules it imported."""
    code = (f"import runpy, sys\nsys.argv = {[script.name, *code_args]!r}\ntry:\n"
            f"    runpy.run_path({str(script)!r}, run_name='__main__')\nexcept SystemExit as e:\n    rc = e.code\n"
            "print('RC', rc, 'TORCH', 'torch' in sys.modules, 'FAIRSEQ', 'fairseq' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    return proc, proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("script", ["preprocess_lattices.py", "build_lattices.py"])
def test_lattice_scripts_help_imports_neither_torch_nor_fairseq(script):
    proc, status = _run_script_in(["-h"], SCRIPTS / script)
    assert status == "RC 0 TORCH False FAIRSEQ False", proc.stderr
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", proc.stdout))
    if script == "preprocess_lattices.py":  # our options, not fairseq-preprocess's 60
        assert options == {"--help", "--source-lang", "--target-lang", "--trainpref", "--validpref", "--testpref",
                           "--destdir", "--srcdict", "--tgtdict", "--thresholdsrc", "--thresholdtgt", "--nwordssrc",
                           "--nwordstgt", "--padding-factor", "--workers", "--task"}, options
        proc = run(sys.executable, SCRIPTS / script, "--joined-dictionary", ok=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
            "preprocess_lattices.py: error: unrecognized arguments: --joined-dictionary")


@pytest.mark.parametrize("workers", [1, 2])
def test_build_lattices_one_segmenter_at_a_time_equals_the_builder(tmp_path, workers):
    """Segmenting the whole input with each segmenter in turn, then merging, gives the lattices of
    LatticeBuilder (all segmenters per sentence), without importing torch or fairseq."""
    pytest.importorskip("jieba")
    from fairseq_local_core.lattice import LatticeBuilder

    sentences = ["我们的两个被告人在法庭上表示不服。", "他下雨天不出门。", "Bill 在 2008 年来了", "下雨天"]
    raw = tmp_path / "raw.zh"
    raw.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    out = tmp_path / "out.lat"
    proc, status = _run_script_in(["--input", str(raw), "--output", str(out), "--segmenters", "jieba,char",
                                   "--workers", str(workers)], SCRIPTS / "build_lattices.py")
    assert status == "RC 0 TORCH False FAIRSEQ False", proc.stderr
    builder = LatticeBuilder(["jieba", "char"])
    want = [builder(s, f"{raw}:{n}").to_line() for n, s in enumerate(sentences, 1)]
    assert out.read_text(encoding="utf-8").splitlines() == want
    assert proc.stderr.strip().splitlines() == [f"wrote 4 lattices to {out}"]  # no bar, no warning in a log


def test_make_synthetic_corpus_sizes_its_languages(tmp_path):
    """--nouns/--verbs/--adjectives size both lexicons and --max-len bounds the source (demo.sh's
    easier default corpus); the same options give the same files; bad sizes are one line."""
    args = ["--train", "400", "--valid", "5", "--test", "5", "--nouns", "7", "--verbs", "3", "--adjectives", "2",
            "--max-len", "8"]
    run(sys.executable, SCRIPTS / "make_synthetic_corpus.py", tmp_path / "a", *args)
    run(sys.executable, SCRIPTS / "make_synthetic_corpus.py", tmp_path / "b", *args)
    src = (tmp_path / "a" / "train.src").read_text().splitlines()
    assert src == (tmp_path / "b" / "train.src").read_text().splitlines()
    assert max(len(s.split()) for s in src) <= 8
    corpus = SyntheticTranslationCorpus(n_nouns=7, n_verbs=3, n_adjs=2, max_len=8)
    nouns = {w.rstrip("s") for s in src for w in s.split()} & set(corpus.src_nouns)
    verbs = {s.split()[2 + sum(w in corpus.src_adjs or w[:-1] in corpus.src_adjs for w in s.split()[2:4])]
             for s in src}
    assert nouns == set(corpus.src_nouns) and len(corpus.src_nouns) == 7 and len(corpus.src_verbs) == 3
    assert {v[:-3] if v.endswith("ent") else v[:-1] for v in verbs} == set(corpus.src_verbs)
    for opt, value in (("--nouns", "0"), ("--max-len", "4")):
        proc = subprocess.run([sys.executable, str(SCRIPTS / "make_synthetic_corpus.py"), str(tmp_path / "c"), opt,
                               value], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
            f"error: {opt} must be >= {1 if opt == '--nouns' else 5}"), proc.stderr
        assert not (tmp_path / "c").exists()
