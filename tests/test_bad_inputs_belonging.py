"""Artifacts that do not belong together (issue: "nothing silently wrong when things do not belong
together"): scripts/preprocess.sh's corpus manifest (corpus.json) and what is checked against it:
a reference of another split or side, a checkpoint of another corpus with the same dictionaries,
a recipe's --save-dir reused for another row or data directory, text given to the hub without the
corpus's Moses tokenization; blank lines given to fairseq-preprocess directly; a full disk or a
read-only folder under generate.sh's output."""
import hashlib
import json
import logging
import os
import shutil
import subprocess
import warnings

import pytest
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from sacremoses import MosesDetokenizer

from contract_lib import REPO, console_script, make_translation_data
from fairseq_local.config_checks import check_data_fits_task
from fairseq_local_core import corpus_manifest as cm
from fairseq_local.hub import from_pretrained
from fairseq_local_core.errors import CheckpointError, ConfigError
from fairseq_local.data import checkpoint_dictionaries
from fairseq_local.safe_loading import safe_load
from fairseq_local_repro.tools import generate, score
from fairseq_local_repro.doors import DoorError
from test_bad_inputs import ENV, TINY_LSTM, assert_one_line, run, write
from test_bad_inputs_pipeline import _full_disk

SCRIPTS = REPO / "scripts"
MANIFEST_CLI = ["python", "-m", "fairseq_local_repro.text.corpus_manifest"]

DE = ["ein hund läuft", "zwei katzen schlafen", "ein mann liest", "die frau singt"]
EN = ["a dog runs", "two cats sleep", "a man reads", "the woman sings"]


def _raw(d, name, src, tgt):
    write(d / f"{name}.de", "".join(s + "\n" for s in src))
    write(d / f"{name}.en", "".join(t + "\n" for t in tgt))
    return d / name


def _manifest(tmp_path, splits=("train", "valid", "test")):
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    files = {}
    for i, split in enumerate(splits):
        prefix = _raw(raw, split, [f"{s} {i}" for s in DE], [f"{t} {i}" for t in EN])
        files[split] = {"de": f"{prefix}.de", "en": f"{prefix}.en"}
    return cm.build(files, ["de", "en"], {"tokenize": "moses", "lowercase": True, "bpe": "none"}), raw


# ------------------------------------------------------------------------------------------------
# the manifest itself
# ------------------------------------------------------------------------------------------------
def test_file_entry_counts_lines_and_hashes_bytes(tmp_path):
    a = write(tmp_path / "a", "x y\nz\n")
    b = write(tmp_path / "b", "x y\nz")  # a last line without newline counts
    assert cm.file_entry(a) == {"path": str(a), "lines": 2, "sha256": hashlib.sha256(b"x y\nz\n").hexdigest()}
    assert cm.file_entry(b)["lines"] == 2 and cm.file_entry(b)["sha256"] != cm.file_entry(a)["sha256"]
    assert cm.file_entry(write(tmp_path / "e", ""))["lines"] == 0


def test_manifest_round_trip_and_corpus_fingerprint(tmp_path):
    manifest, raw = _manifest(tmp_path)
    d = tmp_path / "bin"
    d.mkdir()
    cm.write(d, manifest)
    assert cm.read(str(d)) == manifest and cm.read(f"{d}:{tmp_path}") == manifest  # a:b reads a
    assert cm.read(str(tmp_path)) is None
    assert cm.transforms(str(d)) == {"tokenize": "moses", "lowercase": True, "bpe": "none"}
    assert manifest["splits"]["valid"]["en"]["lines"] == 4
    # the fingerprint is the training text's, whatever the paths or the other splits
    moved = tmp_path / "moved"
    shutil.copytree(raw, moved)
    other = cm.build({"train": {"de": str(moved / "train.de"), "en": str(moved / "train.en")}}, ["de", "en"], {})
    assert other["corpus"] == manifest["corpus"]
    write(moved / "train.en", "a dog runs 0\n")
    assert cm.build({"train": {"de": str(moved / "train.de"), "en": str(moved / "train.en")}}, ["de", "en"],
                    {})["corpus"] != manifest["corpus"]
    assert cm.matches(manifest, manifest["splits"]["valid"]["en"]["sha256"]) == [("valid", "en")]


def test_a_damaged_manifest_is_one_line(tmp_path):
    write(tmp_path / "corpus.json", "{not json")
    with pytest.raises(cm.CorpusManifestError, match=r"corpus.json: not a readable corpus manifest"):
        cm.read(str(tmp_path))
    write(tmp_path / "corpus.json", "[1, 2]")
    with pytest.raises(cm.CorpusManifestError, match=r"corpus.json: not a corpus manifest"):
        cm.read(str(tmp_path))


# ------------------------------------------------------------------------------------------------
# a reference for generate.sh's hypotheses: check_reference
# ------------------------------------------------------------------------------------------------
def _generated(tmp_path, subset="test"):
    manifest, raw = _manifest(tmp_path)
    data = tmp_path / "bin"
    data.mkdir()
    cm.write(data, manifest)
    out = tmp_path / "out"
    out.mkdir()
    hyp = write(out / "hyp.txt", "".join(f"{t}\n" for t in EN))
    record = cm.gen_record(str(data), subset, {"hyp.txt": str(hyp)})
    write(out / "gen.json", json.dumps(record))
    return hyp, raw, data


@pytest.mark.parametrize("ref, side", [("valid.en", "the valid split's English side"),
                                       ("train.en", "the train split's English side"),
                                       ("test.de", "the test split's German side")])
def test_a_reference_of_another_split_or_side_is_an_error(tmp_path, ref, side):
    hyp, raw, data = _generated(tmp_path)
    with pytest.raises(cm.CorpusManifestError) as e:
        cm.check_reference(str(hyp), str(raw / ref), lowercase=True)
    assert str(e.value) == (f"--ref {raw / ref} is {side} of {data}, but --hyp {hyp} translates test into English "
                            f"(generate.sh --subset test): give {raw / 'test.en'}")


def test_the_right_reference_passes_and_an_unknown_one_gets_a_note(tmp_path):
    hyp, raw, data = _generated(tmp_path)
    assert cm.check_reference(str(hyp), str(raw / "test.en"), lowercase=True) == []
    copy = tmp_path / "out" / "ref.txt"  # generate.sh --ref copies the reference: the same content
    shutil.copy(raw / "test.en", copy)
    assert cm.check_reference(str(hyp), str(copy), lowercase=True) == []
    own = write(tmp_path / "detok.en", "".join(f"{t.capitalize()}.\n" for t in EN))
    assert cm.check_reference(str(hyp), str(own), lowercase=True) == [
        f"--ref {own} is none of the raw files {data} was made from (corpus.json): scored as given (the reference "
        f"of test is {raw / 'test.en'})"]
    # the corpus was lowercased: cased BLEU gets a note
    assert cm.check_reference(str(hyp), str(raw / "test.en")) == [
        f"{hyp} was generated from lowercased text (preprocess.sh --lowercase): BLEU against a cased reference is "
        "low; add --lowercase for case-insensitive BLEU"]


def test_hypotheses_without_a_record_are_not_checked(tmp_path):
    hyp, raw, _ = _generated(tmp_path)
    edited = write(tmp_path / "out" / "hyp.txt", "edited\n" * 4)  # no longer the file gen.json lists
    assert cm.check_reference(str(edited), str(raw / "valid.en")) == []
    elsewhere = write(tmp_path / "hyp2.txt", "x\n" * 4)
    assert cm.check_reference(str(elsewhere), str(raw / "valid.en")) == []


def test_check_ref_command_line(tmp_path):
    hyp, raw, data = _generated(tmp_path)
    code, err = run(*MANIFEST_CLI, "--prog", "score.py", "check-ref", "--hyp", hyp, "--ref", raw / "valid.en",
                    "--lowercase")
    assert code == 2 and err == (f"score.py: error: --ref {raw / 'valid.en'} is the valid split's English side of "
                                 f"{data}, but --hyp {hyp} translates test into English (generate.sh --subset test): "
                                 f"give {raw / 'test.en'}\n")
    code, err = run(*MANIFEST_CLI, "--prog", "score.py", "check-ref", "--hyp", hyp, "--ref", raw / "test.en",
                    "--lowercase")
    assert (code, err) == (0, "")


# ------------------------------------------------------------------------------------------------
# a recipe's --save-dir: run.json
# ------------------------------------------------------------------------------------------------
def test_save_dir_records_its_row_and_data(tmp_path):
    save, data, other = tmp_path / "ck", tmp_path / "bin", tmp_path / "bin2"
    assert cm.claim_run(str(save), "table1_a", str(data)) is True
    assert json.loads((save / "run.json").read_text())["row"] == "table1_a"
    assert cm.claim_run(str(save), "table1_a", str(data)) is False  # resuming the same run
    with pytest.raises(cm.CorpusManifestError) as e:
        cm.claim_run(str(save), "table1_b", str(data))
    assert str(e.value) == (f"--save-dir {save} holds a run of row table1_a, not table1_b (its run.json): resuming "
                            "there would mix them; give another --save-dir, or the row and --data it was started with")
    with pytest.raises(cm.CorpusManifestError, match=f"holds a run of --data {data}, not {other}"):
        cm.claim_run(str(save), "table1_a", str(other))
    code, err = run(*MANIFEST_CLI, "--prog", "dpn_s2s.sh", "claim", save, "--row", "table1_b", "--data", data)
    assert code == 2 and err.startswith(f"dpn_s2s.sh: error: --save-dir {save} holds a run of row table1_a, not "
                                        "table1_b") and err.count("\n") == 1


# ------------------------------------------------------------------------------------------------
# fairseq-preprocess run directly: blank lines
# ------------------------------------------------------------------------------------------------
def _fairseq_preprocess(tmp_path, *args):
    return run(console_script("fairseq-preprocess"), "--user-dir", REPO / "fairseq_local", "--workers", "1",
               "--destdir", tmp_path / "bin", *args)


def test_fairseq_preprocess_one_blank_side_is_an_error(tmp_path):
    train = _raw(tmp_path, "train", ["ein hund", "", "zwei", ""], ["a dog", "a cat", "two", "x"])
    code, err = _fairseq_preprocess(tmp_path, "-s", "de", "-t", "en", "--trainpref", train, "--validpref", train)
    assert_one_line(code, err, f"fairseq-preprocess: error: {train}.de:2: blank line, but line 2 of {train}.en has "
                               "text (and 1 more such pairs, lines 4)", leftovers=[tmp_path / "bin" / "dict.de.txt"])
    assert code == 2


def _warnings(err):
    return [line.split("preprocess_input:", 1)[-1] for line in err.splitlines() if "without a word" in line]


def test_fairseq_preprocess_blank_pairs_and_lm_lines_warn_once_per_file(tmp_path):
    train = _raw(tmp_path, "train", ["ein hund", "", "zwei"], ["a dog", " ", "two"])
    valid = _raw(tmp_path, "valid", ["ein hund"], ["a dog"])
    code, err = _fairseq_preprocess(tmp_path, "-s", "de", "-t", "en", "--trainpref", train, "--validpref", valid)
    assert code == 0, err[-2000:]
    assert _warnings(err) == [
        f"{train}.de, {train}.en: 1 pairs blank on both sides (lines 2) are binarized as sentences without a word "
        "(only </s>); remove them from both files if they are not meant"]
    lm = write(tmp_path / "lm.txt", "one\n\ntwo\n\nthree\n")
    code, err = _fairseq_preprocess(tmp_path / "lm", "--only-source", "--trainpref", lm, "--validpref", lm)
    assert code == 0, err[-2000:]
    assert _warnings(err) == [
        f"{lm}: 2 blank lines (lines 2, 4) are binarized as sentences without a word (only </s>), as fairseq's LM "
        "recipes keep paragraph breaks; remove them if they are not meant"]


def test_fairseq_preprocess_clean_text_says_nothing(tmp_path):
    train = _raw(tmp_path, "train", DE, EN)
    code, err = _fairseq_preprocess(tmp_path, "-s", "de", "-t", "en", "--trainpref", train, "--validpref", train)
    assert code == 0 and _warnings(err) == [] and (tmp_path / "bin" / "train.de-en.de.bin").is_file()


# ------------------------------------------------------------------------------------------------
# a checkpoint of another corpus whose dictionaries match: a warning naming both
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """One binarized corpus, copied: the copy's corpus.json says it was made from other text (its
    dictionaries are the same).  A tiny lstm trained 1 update on the first."""
    tmp = tmp_path_factory.mktemp("two_corpora")
    data, _ = make_translation_data(tmp, n_train=24, n_valid=8)
    raw = tmp / "raw"
    files = {s: {lang: str(raw / f"{s}.{lang}") for lang in ("src", "tgt")} for s in ("train", "valid", "test")}
    cm.write(data, cm.build(files, ["src", "tgt"], {"tokenize": "none", "bpe": "none"}))
    other = tmp / "other"
    shutil.copytree(data, other)
    files["train"] = {"src": str(raw / "valid.src"), "tgt": str(raw / "valid.tgt")}
    cm.write(other, cm.build(files, ["src", "tgt"], {"tokenize": "none", "bpe": "none"}))
    code, err = run(console_script("fairseq-train"), data, "--user-dir", REPO / "fairseq_local", *TINY_LSTM,
                    "--optimizer", "adam", "--lr", "0.01", "--max-update", "1", "--cpu", "--max-tokens", "500",
                    "--save-dir", tmp / "ck", "--no-epoch-checkpoints", "--num-workers", "0")
    assert code == 0, err[-2000:]
    return tmp / "ck" / "checkpoint_last.pt", data, other


def _load(path, data, caplog):
    parser = options.get_generation_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--path", str(path), "--user-dir",
                                                str(REPO / "fairseq_local"), "--cpu"])
    task = tasks.setup_task(args)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        checkpoint_utils.load_model_ensemble_and_task([str(path)], task=task)
    return [r.getMessage() for r in caplog.records if "corpus" in r.getMessage()]


def test_checkpoint_stores_its_corpus(two_corpora):
    path, data, _ = two_corpora
    state = safe_load(str(path))
    assert state["extra_state"]["corpus"] == {"data": str(data), "fingerprint": cm.read(str(data))["corpus"]}


def test_decoding_with_another_corpus_warns_naming_both(two_corpora, caplog):
    path, data, other = two_corpora
    checkpoint_dictionaries.forget_warnings()
    assert _load(path, data, caplog) == []  # its own corpus: nothing
    here, there = cm.read(str(data))["corpus"], cm.read(str(other))["corpus"]
    assert _load(path, other, caplog) == [
        f"{path} was trained on another corpus ({data}, corpus {here[:12]}) than {other} was made from (corpus "
        f"{there[:12]}): their dictionaries match, so it runs, but check that this is the data directory you mean"]
    assert _load(path, other, caplog) == []  # once per checkpoint and data directory


def test_resuming_with_another_corpus_warns(two_corpora, tmp_path):
    path, data, other = two_corpora
    cmd = [console_script("fairseq-train"), other, "--user-dir", REPO / "fairseq_local", *TINY_LSTM,
           "--optimizer", "adam", "--lr", "0.01", "--max-update", "2", "--cpu", "--max-tokens", "500",
           "--save-dir", tmp_path / "ck", "--restore-file", path, "--no-epoch-checkpoints", "--num-workers", "0"]
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV, timeout=300)
    err = proc.stdout + proc.stderr  # fairseq-train logs to stdout
    assert proc.returncode == 0, err[-2000:]
    assert f"{path} was trained on another corpus ({data}" in err and f"than {other} was made from" in err


def test_decoding_the_other_way_round_is_one_line(two_corpora):
    """A src -> tgt checkpoint asked to translate tgt -> src: with a joint BPE both sides have one
    dictionary, so only the languages the checkpoint was trained on can tell."""
    path, data, _ = two_corpora
    args = options.parse_args_and_arch(options.get_generation_parser(), [
        str(data), "--path", str(path), "--user-dir", str(REPO / "fairseq_local"), "--cpu", "-s", "tgt", "-t", "src"])
    with pytest.raises(CheckpointError) as err:
        checkpoint_utils.load_model_ensemble_and_task([str(path)], task=tasks.setup_task(args))
    assert str(err.value) == (f"{path} translates src -> tgt, but this task translates tgt -> src (--source-lang/-s, "
                              "--target-lang/-t): give -s src -t tgt, or a checkpoint trained tgt -> src")
    code, out = run(console_script("fairseq-generate"), data, "--user-dir", REPO / "fairseq_local", "--path", path,
                    "--cpu", "-s", "tgt", "-t", "src", "--max-len-b", "3")
    assert_one_line(code, out, f"{path} translates src -> tgt", "give -s src -t tgt")
    code, out = run(console_script("fairseq-generate"), data, "--user-dir", REPO / "fairseq_local", "--path", path,
                    "--cpu", "-s", "src", "-t", "tgt", "--max-len-b", "3")
    assert code == 0, out[-2000:]  # the trained direction decodes


# ------------------------------------------------------------------------------------------------
# the hub reads the corpus's tokenization
# ------------------------------------------------------------------------------------------------
def _hub_data(two_corpora, tmp_path, **tf):
    _, data, _ = two_corpora
    copy = tmp_path / "data"
    shutil.copytree(data, copy)
    manifest = cm.read(str(data))
    cm.write(copy, dict(manifest, transforms=dict(manifest["transforms"], **tf)))
    return copy


def _hub(two_corpora, data, **kwargs):
    path = two_corpora[0]
    return from_pretrained(path.parent, path.name, data_name_or_path=str(data), **kwargs)


def test_hub_moses_tokenizes_and_lowercases_as_the_corpus(two_corpora, tmp_path):
    hub = _hub(two_corpora, _hub_data(two_corpora, tmp_path, tokenize="moses", lowercase=True))
    assert hub.tokenize("Hello, World & friends.") == "hello , world &amp; friends ."
    assert hub.detokenize("hello , world &amp; friends .") == "hello, world & friends."
    plain = _hub(two_corpora, _hub_data(two_corpora, tmp_path / "plain", tokenize="none"))
    assert plain.tokenizer is None and plain.tokenize("a, b & c.") == "a, b & c."


@pytest.mark.parametrize("corpus, given", [("moses", "space"), ("none", "moses")])
def test_hub_tokenizer_other_than_the_corpus_warns(two_corpora, tmp_path, corpus, given):
    data = _hub_data(two_corpora, tmp_path, tokenize=corpus)
    with pytest.warns(UserWarning) as record:
        _hub(two_corpora, data, tokenizer=given)
    assert [str(w.message) for w in record if "tokenizer=" in str(w.message)] == [
        f"from_pretrained: tokenizer={given!r}, but the training text of {data} was tokenized with --tokenize "
        f"{corpus} (its corpus.json): input is cut otherwise than the text the model learnt from; leave out "
        "tokenizer= to tokenize as the corpus was"]


def test_hub_tokenizer_none_is_the_callers_choice(two_corpora, tmp_path):
    data = _hub_data(two_corpora, tmp_path, tokenize="moses")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hub = _hub(two_corpora, data, tokenizer=None)
    assert hub.tokenizer is None and hub.tokenize("a, b.") == "a, b."


# ------------------------------------------------------------------------------------------------
# the pipeline: preprocess.sh writes corpus.json, generate.sh gen.json, score.sh checks its --ref
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pipeline(shared_data, tmp_path_factory):
    """40/12/12 Multi30k pairs through preprocess.sh --tokenize moses --lowercase --bpe none, a tiny
    lstm trained 1 update, and generate.sh's output for the test split."""
    tmp = tmp_path_factory.mktemp("pipeline")
    raw = tmp / "raw"
    raw.mkdir()
    for lang in ("de", "en"):
        lines = (shared_data / "multi30k-de-en" / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        for split, (a, b) in {"train": (0, 40), "valid": (40, 52), "test": (52, 64)}.items():
            write(raw / f"{split}.{lang}", "".join(line + "\n" for line in lines[a:b]))
    data = tmp / "bin"
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", raw / "train",
                    "--valid", raw / "valid", "--test", raw / "test", "--destdir", data, "--bpe", "none",
                    "--tokenize", "moses", "--lowercase", "--workers", "1")
    assert code == 0, err[-2000:]
    code, err = run(console_script("fairseq-train"), data, "--user-dir", REPO / "fairseq_local", *TINY_LSTM,
                    "--optimizer", "adam", "--lr", "0.01", "--max-update", "1", "--cpu", "--max-tokens", "2000",
                    "--save-dir", tmp / "ck", "--no-epoch-checkpoints", "--num-workers", "0")
    assert code == 0, err[-2000:]
    out = tmp / "out"
    code, err = run("bash", SCRIPTS / "generate.sh", "--data", data, "--path", tmp / "ck" / "checkpoint_last.pt",
                    "--out", out, "--beam", "1", "--", "--max-len-b", "5")
    assert code == 0, err[-2000:]
    return raw, data, out


def test_preprocess_sh_writes_the_corpus_manifest(pipeline):
    raw, data, _ = pipeline
    manifest = json.loads((data / "corpus.json").read_text(encoding="utf-8"))
    assert manifest["languages"] == ["de", "en"]
    assert manifest["transforms"] == {"tokenize": "moses", "lowercase": True, "bpe": "none", "bpe_size": None,
                                      "joint_bpe": False}
    assert sorted(manifest["splits"]) == ["test", "train", "valid"]
    entry = manifest["splits"]["valid"]["en"]
    text = (raw / "valid.en").read_bytes()
    assert entry == {"path": str(raw / "valid.en"), "lines": 12, "sha256": hashlib.sha256(text).hexdigest()}
    assert manifest["corpus"] == cm.corpus_fingerprint(manifest)
    assert not list(data.parent.glob("bin.tmp.*"))


def test_generate_sh_records_its_split_and_detokenizes_as_the_corpus(pipeline):
    raw, data, out = pipeline
    record = json.loads((out / "gen.json").read_text(encoding="utf-8"))
    assert (record["data"], record["subset"], record["source_lang"], record["target_lang"]) == (
        str(data), "test", "de", "en")
    assert record["target"]["path"] == str(raw / "test.en")
    assert record["outputs"]["hyp.txt"] == hashlib.sha256((out / "hyp.txt").read_bytes()).hexdigest()
    # the corpus was Moses-tokenized: the hypotheses are Moses-detokenized (--detok moses by default)
    log = [line.split("\t") for line in (out / "generate-test.txt").read_text(encoding="utf-8").splitlines()]
    best = dict((int(f[0][2:]), f[2]) for f in log if f[0].startswith("H-"))
    detok = MosesDetokenizer(lang="en")
    want = [detok.detokenize(best[i].split()) for i in range(12)]
    assert (out / "hyp.txt").read_text(encoding="utf-8").splitlines() == want
    got = subprocess.run([*MANIFEST_CLI, "get", str(data), "tokenize"], capture_output=True, text=True, env=ENV)
    assert got.stdout == "moses\n"  # what generate.sh's --detok defaults to


@pytest.mark.parametrize("ref, side", [("valid.en", "the valid split's English side"),
                                       ("test.de", "the test split's German side")])
def test_score_sh_refuses_a_reference_of_another_split(pipeline, ref, side):
    raw, data, out = pipeline
    code, err = run("bash", SCRIPTS / "score.sh", "--hyp", out / "hyp.txt", "--ref", raw / ref, "--lowercase")
    line = assert_one_line(code, err, f"--ref {raw / ref} is {side} of {data}, but --hyp {out / 'hyp.txt'} "
                                      f"translates test into English")
    assert code == 2 and line.endswith(f"give {raw / 'test.en'}")


def test_score_sh_accepts_the_right_reference_and_notes_an_unknown_one(pipeline, tmp_path):
    raw, _, out = pipeline
    code, err = run("bash", SCRIPTS / "score.sh", "--hyp", out / "hyp.txt", "--ref", raw / "test.en", "--lowercase")
    assert code == 0 and "note" not in err, err
    own = write(tmp_path / "mine.en", (raw / "test.en").read_text(encoding="utf-8").replace("A ", "One "))
    code, err = run("bash", SCRIPTS / "score.sh", "--hyp", out / "hyp.txt", "--ref", own, "--lowercase")
    assert code == 0 and f"note: --ref {own} is none of the raw files" in err, err
    code, err = run("bash", SCRIPTS / "score.sh", "--hyp", out / "hyp.txt", "--ref", raw / "test.en")
    assert code == 0 and "add --lowercase for case-insensitive BLEU" in err, err


def test_score_sh_line_count_still_checked(pipeline, tmp_path):
    raw, _, out = pipeline
    short = write(tmp_path / "short.en", "a dog\n")
    code, err = run("bash", SCRIPTS / "score.sh", "--hyp", out / "hyp.txt", "--ref", short)
    assert_one_line(code, err, f"{short} has 1 lines but {out / 'hyp.txt'} has 12")


# ------------------------------------------------------------------------------------------------
# generate.sh's folders: a full disk, a read-only folder, a file in the way
# ------------------------------------------------------------------------------------------------
COMMON = REPO / "scripts" / "lib" / "common.sh"


def _shim(tmp_path, name, body):
    """A command ``name`` on PATH that runs ``body`` (sh) instead of the real one."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    path = write(shim / name, "#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return shim


@pytest.mark.parametrize("failure, line", [
    ("No space left on device", "--out OUT: no space left on device (cannot create DIR)"),
    ("Disk quota exceeded", "--out OUT: disk quota exceeded (cannot create DIR)"),
    ("Read-only file system", "--out OUT: read-only file system (cannot create DIR)"),
    ("Permission denied", "--out OUT: permission denied (cannot create DIR)"),
])
def test_make_dir_is_one_line_naming_the_destination(tmp_path, failure, line):
    shim = _shim(tmp_path, "mkdir", f"echo \"mkdir: cannot create directory 'DIR': {failure}\" >&2; exit 1")
    code, err = run("bash", "-c", f"PATH={shim}:$PATH; source {COMMON}; make_dir DIR '--out OUT'; echo reached")
    assert (code, err) == (2, f"bash: error: {line}\n")


def test_make_dir_under_a_file_and_full_disk(tmp_path):
    afile = write(tmp_path / "afile", "x")
    code, err = run("bash", "-c", f"source {COMMON}; make_dir {afile}/out '--out {afile}/out'")
    assert (code, err) == (2, f"bash: error: --out {afile}/out: cannot create {afile}/out: a file stands in its path\n")
    code, err = run("bash", "-c", f"source {COMMON}; make_dir {tmp_path}/a/b X && test -d {tmp_path}/a/b")
    assert (code, err) == (0, "")
    full = _shim(tmp_path, "df", "printf 'Filesystem 1024-blocks Used Available Capacity Mounted\\nfs 100 100 0 100%% /\\n'")
    code, _ = run("bash", "-c", f"PATH={full}:$PATH; source {COMMON}; full_disk {tmp_path}/not/yet")
    assert code == 0
    code, _ = run("bash", "-c", f"source {COMMON}; full_disk {tmp_path}")
    assert code == 1


def test_generate_sh_out_that_cannot_be_created(pipeline, tmp_path):
    _, data, out = pipeline
    afile = write(tmp_path / "afile", "x")
    code, err = run("bash", SCRIPTS / "generate.sh", "--data", data, "--path", out.parent / "ck" / "checkpoint_last.pt",
                    "--out", afile / "out", "--beam", "1", "--", "--max-len-b", "5")
    assert_one_line(code, err, f"generate.sh: error: --out {afile}/out: cannot create {afile}/out.tmp.")
    assert afile.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    # --out naming a file (or a link to one) is refused before anything is decoded
    os.symlink(afile, tmp_path / "link")
    for bad in (afile, tmp_path / "link"):
        code, err = run("bash", SCRIPTS / "generate.sh", "--data", data, "--path",
                        out.parent / "ck" / "checkpoint_last.pt", "--out", bad, "--beam", "1")
        assert_one_line(code, err, f"generate.sh: error: --out {bad}: cannot create {bad}: a file stands in its path")
        assert "generating" not in err and afile.read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "link"]


def test_generate_full_disk_while_generating(pipeline, tmp_path, monkeypatch, capsys):
    """fairseq-generate fails because the disk filled up (a stand-in that exits 1; the file system
    reports no free space): one line naming --out, the earlier output left as it was, no temporary
    folder."""
    _, data, out = pipeline
    shim = _shim(tmp_path, "fairseq-generate", "echo 'OSError: [Errno 28] No space left on device' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 0))
    dest = tmp_path / "out"
    dest.mkdir()
    write(dest / "hyp.txt", "earlier\n")
    write(dest / "gen.json", "{}\n")  # an earlier output of generate.sh's (only those are written into)
    argv = ["--data", str(data), "--path", str(out.parent / "ck" / "checkpoint_last.pt"), "--out", str(dest),
            "--beam", "1", "--", "--max-len-b", "5"]
    assert generate.main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"generate.sh: error: {dest}: no space left on device (writing {dest}.tmp."), last
    assert (dest / "hyp.txt").read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "shim"]


def test_generate_writes_on_a_full_disk_name_their_destination(tmp_path, monkeypatch):
    """generate's own writes (the hypotheses, the references) into its work folder: a full disk is
    one line naming where they were going."""
    _full_disk(monkeypatch)
    with pytest.raises(DoorError) as e:
        generate.write_lines(str(tmp_path / "hyp.txt"), ["a b"] * 100000, "DIR/hyp.txt")
    assert str(e.value) == "DIR/hyp.txt: no space left on device"
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------
# a recipe's --save-dir: claim_save_dir (train_row)
# ------------------------------------------------------------------------------------------------
def test_claim_save_dir_in_the_shell(tmp_path):
    save, data = tmp_path / "ck", tmp_path / "bin"
    cmd = f"source {COMMON}; claim_save_dir {save} table1_x {data} && claim_save_dir {save} table1_x {data}"
    assert run("bash", "-c", cmd) == (0, "")
    code, err = run("bash", "-c", f"source {COMMON}; claim_save_dir {save} table1_y {tmp_path}/other; echo reached")
    assert code == 2 and err == (f"bash: error: --save-dir {save} holds a run of row table1_x, not table1_y and --data "
                                 f"{data}, not {tmp_path}/other (its run.json): resuming there would mix them; give "
                                 "another --save-dir, or the row and --data it was started with\n")


def test_a_recipe_training_another_row_into_a_save_dir_stops_before_training(tmp_path):
    """train_row (every recipe's training) claims its --save-dir first: a save dir of another row
    or data directory is one line, and training never starts (nothing is written there)."""
    save, data = tmp_path / "ck", tmp_path / "bin"
    cm.claim_run(str(save), "table2_mc_rnn_3", str(data))
    before = sorted(p.name for p in save.iterdir())
    code, err = run("bash", "-c", f"source {COMMON}; train_row {tmp_path}/bin {save} {REPO}/configs/mc_rnn/"
                                  "table2_mc_rnn_2.yaml; echo reached")
    assert code == 2 and err == (f"bash: error: --save-dir {save} holds a run of row table2_mc_rnn_3, not "
                                 "table2_mc_rnn_2 (its run.json): resuming there would mix them; give another "
                                 "--save-dir, or the row and --data it was started with\n")
    assert sorted(p.name for p in save.iterdir()) == before == ["run.json"]


# ------------------------------------------------------------------------------------------------
# score.sh: the hypotheses given as their own reference
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["same path", "symlink", "relative path", "second reference"])
def test_score_refuses_the_hypothesis_file_as_its_reference(tmp_path, monkeypatch, capsys, how):
    hyp = write(tmp_path / "hyp.txt", "".join(t + "\n" for t in EN))
    other = write(tmp_path / "ref.txt", "".join(t.upper() + "\n" for t in EN))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "link.txt").symlink_to(hyp)
    ref = {"same path": hyp, "symlink": tmp_path / "link.txt", "relative path": "hyp.txt", "second reference": hyp}[how]
    refs = ["--ref", str(other), "--ref", str(ref)] if how == "second reference" else ["--ref", str(ref)]
    with pytest.raises(SystemExit) as e:
        score.main(["--hyp", str(hyp), *refs])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"score.py: error: --ref {ref} is the --hyp file itself: give the reference translations "
                   "(the split's raw target text)\n")


def test_score_accepts_a_copy_of_the_hypotheses_as_reference(tmp_path, capsys):
    hyp = write(tmp_path / "hyp.txt", "".join(f"{t} in the park today\n" for t in EN))
    copy = tmp_path / "ref.txt"
    shutil.copy(hyp, copy)  # another file with the same text: a perfect system, scored as such
    assert score.main(["--hyp", str(hyp), "--ref", str(copy)]) == 0
    assert "= 100.00" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------
# a data directory of the other kind: a language-model corpus for a translation task and back
# ------------------------------------------------------------------------------------------------
def _data_dir(tmp_path, *dicts):
    d = tmp_path / "data"
    d.mkdir()
    for name in dicts:
        write(d / name, "word 1\n")
    return d


LM_CORPUS = ("holds a language-model corpus (dict.txt, no dict.LANG.txt): --task {task} needs parallel data "
             "(scripts/preprocess.sh --src L1 --tgt L2); train a language model on it with --task language_modeling")
MT_CORPUS = ("holds a parallel corpus (dict.de.txt, dict.en.txt, no dict.txt): --task {task} needs a language-model "
             "corpus (scripts/preprocess.sh --lm); translate with --task translation")


def _cfg(data, task, *extra):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(data), "--task", task, "--arch",
                                                "lstm_lm" if "language" in task else "lstm", *extra])
    return convert_namespace_to_omegaconf(args)


@pytest.mark.parametrize("task, dicts, message", [
    ("translation", ["dict.txt"], LM_CORPUS),
    ("lattice_translation", ["dict.txt"], LM_CORPUS),
    ("language_modeling", ["dict.de.txt", "dict.en.txt"], MT_CORPUS),
    ("stateful_language_modeling", ["dict.de.txt", "dict.en.txt"], MT_CORPUS)])
def test_a_data_directory_of_the_other_kind_is_one_line(tmp_path, task, dicts, message):
    data = _data_dir(tmp_path, *dicts)
    with pytest.raises(ConfigError) as e:
        check_data_fits_task(_cfg(f"{data}:{tmp_path}", task))  # the first of several shards is read
    assert str(e.value) == f"{data} " + message.format(task=task)


@pytest.mark.parametrize("task, dicts, extra", [
    ("translation", ["dict.de.txt", "dict.en.txt"], []),
    ("translation", ["dict.txt"], ["-s", "de", "-t", "en"]),  # languages given: fairseq names the missing file
    ("translation", [], []),  # no dictionary at all: fairseq's own error names it
    ("language_modeling", ["dict.txt"], []),
    ("language_modeling", ["dict.txt", "dict.de.txt"], [])])
def test_a_data_directory_that_fits_passes(tmp_path, task, dicts, extra):
    check_data_fits_task(_cfg(_data_dir(tmp_path, *dicts), task, *extra))


def test_fairseq_train_on_a_language_model_corpus(tmp_path):
    data = _data_dir(tmp_path, "dict.txt")
    code, err = run(console_script("fairseq-train"), data, "--user-dir", REPO / "fairseq_local", "--cpu", *TINY_LSTM,
                    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "100", "--save-dir", tmp_path / "ck")
    assert_one_line(code, err, f"fairseq-train: error: {data} " + LM_CORPUS.format(task="translation"))
    assert code == 2 and not (tmp_path / "ck").exists()
