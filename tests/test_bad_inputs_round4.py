"""A new user's first hour, round 4: running the same command twice, two commands at once on one
output folder, a destination the tool did not make, the option checks of both training CLIs, and
checks that hold on any fairseq data folder (not only one ``preprocess.sh`` wrote).

The real-data cases use the first lines of Multi30k (``../shared/data``), binarized once per module
by ``scripts/preprocess.sh``; training runs are a few updates of a tiny MC-RNN.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import time
from argparse import Namespace

import pytest
from omegaconf import OmegaConf

from contract_lib import REPO
from fairseq_local_core import file_io
from fairseq_local.config_checks import check_common_options, finished_run
from fairseq_local.patches import shared_targets
from test_bad_inputs import BIN, ENV, assert_one_line, call, run

SCRIPTS = REPO / "scripts"
USER_DIR = REPO / "fairseq_local"
S2S = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
       "--decoder-hidden-size", "8", "--attention-dim", "8"]
COMMON = ["--optimizer", "adam", "--lr", "0.01", "--cpu", "--no-epoch-checkpoints", "--num-workers", "0",
          "--seed", "1", "--no-progress-bar", "--max-tokens", "500"]
HYDRA_TINY = ["model.encoder_embed_dim=8", "model.encoder_hidden_size=8", "model.decoder_embed_dim=8",
              "model.decoder_hidden_size=8", "model.attention_dim=8", "model.decoder_out_embed_dim=8",
              "dataset.num_workers=0", "common.log_interval=1"]
MC_RNN_ROW = REPO / "configs" / "mc_rnn" / "table2_mc_rnn_2.yaml"


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.pt"))}


def _num_updates(path):
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    return state["optimizer_history"][-1]["num_updates"]


def _first_lines(corpus, out, sizes, langs):
    """``out/SPLIT.LANG``: the first ``sizes[SPLIT]`` lines of each split and language of ``corpus``."""
    for split, n in sizes.items():
        for lang in langs:
            lines = (corpus / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()[:n]
            (out / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def raw(shared_data, tmp_path_factory):
    """The first 40 lines of Multi30k's train and valid splits (de-en)."""
    return _first_lines(shared_data / "multi30k-de-en", tmp_path_factory.mktemp("raw"), {"train": 40, "valid": 40},
                        ("de", "en"))


def _preprocess(raw, dest, *extra):
    return run("bash", SCRIPTS / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", raw / "train",
               "--valid", raw / "valid", "--destdir", dest, "--bpe", "none", *extra)


@pytest.fixture(scope="module")
def bin_dir(raw, tmp_path_factory):
    dest = tmp_path_factory.mktemp("bin") / "data"
    code, err = _preprocess(raw, dest)
    assert code == 0, err[-2000:]
    return dest


def _train(data, save, *extra):
    return run(BIN / "fairseq-train", data, "--user-dir", USER_DIR, "--arch", "mc_rnn_iwslt_de_en_2", *S2S,
               *COMMON, "--save-dir", save, *extra)


# ------------------------------------------------------------------------------------------------
# 1. running the same training command twice
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stop,done", [(["--max-update", "2"], "(2 updates, --max-update 2)"),
                                       (["--max-epoch", "1"], "(1 epoch, --max-epoch 1)")])
def test_fairseq_train_rerun_of_a_finished_run_leaves_it(bin_dir, tmp_path, stop, done):
    save = tmp_path / "ck"
    code, err = _train(bin_dir, save, *stop)
    assert code == 0, err[-2000:]
    before = _digests(save)
    code, err = _train(bin_dir, save, *stop)
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert last == (f"fairseq-train: {save / 'checkpoint_last.pt'} is a finished run {done}: left as it is, nothing "
                    f"trained (raise {stop[0]} to train on, or choose another --save-dir)")
    assert _digests(save) == before
    if stop[0] == "--max-update":  # a larger --max-update trains on from where the run stopped
        code, err = _train(bin_dir, save, "--max-update", "3")
        assert code == 0, err[-2000:]
        assert _num_updates(save / "checkpoint_last.pt") == 3


def test_train_sh_config_rerun_of_a_finished_run_leaves_it(bin_dir, tmp_path):
    """scripts/train.sh --config (fairseq-hydra-train, as the recipes' train_row runs it)."""
    save = tmp_path / "ck"
    cmd = ["bash", SCRIPTS / "train.sh", "--data", bin_dir, "--save-dir", save, "--config", MC_RNN_ROW, "--cpu",
           "--", *HYDRA_TINY, "optimization.max_update=1"]
    code, err = run(*cmd)
    assert code == 0, err[-2000:]
    before = _digests(save)
    code, err = run(*cmd)
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == (
        f"fairseq-hydra-train: {save / 'checkpoint_last.pt'} is a finished run (1 update, --max-update 1): left as "
        "it is, nothing trained (raise --max-update to train on, or choose another --save-dir)")
    assert _digests(save) == before and _num_updates(save / "checkpoint_last.pt") == 1


def _cfg(**groups):
    base = {"checkpoint": {"save_dir": "ck", "restore_file": "checkpoint_last.pt", "reset_optimizer": False},
            "optimization": {"max_update": 5, "max_epoch": 0}}
    for group, values in groups.items():
        base[group].update(values)
    return OmegaConf.create(base)


@pytest.mark.parametrize("cfg,updates,epoch,finished", [
    (_cfg(), 5, 2, True),
    (_cfg(), 4, 2, False),  # an interrupted run resumes
    (_cfg(), 0, 1, False),  # a new run
    (_cfg(optimization={"max_update": 0, "max_epoch": 3}), 9, 4, True),
    (_cfg(optimization={"max_update": 0, "max_epoch": 3}), 9, 3, False),
    (_cfg(checkpoint={"restore_file": "/elsewhere/model.pt"}), 5, 2, False),  # fine-tuning from another run
    (_cfg(checkpoint={"reset_optimizer": True}), 5, 2, False),
])
def test_finished_run_members(cfg, updates, epoch, finished):
    assert (finished_run(cfg, updates, epoch) is not None) == finished


# ------------------------------------------------------------------------------------------------
# 7. the option checks of fairseq-train also run under fairseq-hydra-train
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("group,key,value,needle", [
    ("optimization", "max_update", -1, "--max-update must be >= 0 (got -1)"),
    ("optimization", "update_freq", [0], "--update-freq must be >= 1 (got 0)"),
    ("checkpoint", "save_interval", 0, "--save-interval must be >= 1 (got 0)"),
    ("dataset", "validate_interval", 0, "--validate-interval must be >= 1 (got 0)"),
    ("checkpoint", "save_interval_updates", -2, "--save-interval-updates must be >= 0 (got -2)"),
])
def test_train_main_checks_options_after_importing_the_plugin(capsys, group, key, value, needle):
    """fairseq_cli.train.main imports the plugin (fairseq-hydra-train's common.user_dir), then calls
    its add_defaults: the checks of every run are there."""
    from fairseq.dataclass.configs import FairseqConfig
    from fairseq_cli import train

    shared_targets.install()  # as in the CLIs: fairseq_cli.train is imported before the plugin
    cfg = OmegaConf.structured(FairseqConfig())
    OmegaConf.update(cfg, f"{group}.{key}", value, merge=False)
    code, err = call(capsys, train.add_defaults, cfg)
    assert_one_line(code, err, needle)


def test_train_sh_config_negative_max_update_is_one_line(bin_dir, tmp_path):
    save = tmp_path / "ck"
    code, err = run("bash", SCRIPTS / "train.sh", "--data", bin_dir, "--save-dir", save, "--config", MC_RNN_ROW,
                    "--cpu", "--", *HYDRA_TINY, "optimization.max_update=-1")
    assert_one_line(code, err, "fairseq-hydra-train: error: --max-update must be >= 0 (got -1)")
    assert not (save / "checkpoint_last.pt").exists()


def test_save_interval_0_is_one_line(capsys):
    code, err = call(capsys, check_common_options, Namespace(save_interval=0))
    assert_one_line(code, err, "--save-interval must be >= 1 (got 0)")


# ------------------------------------------------------------------------------------------------
# 2. one run at a time on an output folder, claimed from start to end
# ------------------------------------------------------------------------------------------------
def test_claim_is_exclusive_reentrant_and_dies_with_its_holder(tmp_path):
    out = tmp_path / "out"
    lock = file_io.claim(str(out), "--out")
    try:
        assert file_io.claim(str(out), "--out") == lock  # re-entrant in one process
        assert open(lock).read().split()[0] == str(os.getpid())
        other = subprocess.run([sys.executable, "-c", "import sys; from fairseq_local_repro.text.output_claim import "
                                "main; sys.exit(main(['--prog', 'x', 'claim', "
                                f"{str(out)!r}, '--what=--out', '--fd', '0', '--pid', '1']))"],
                               stdin=open(lock), capture_output=True, text=True, env=ENV)
        assert other.returncode == 2
        assert other.stderr.strip() == (f"x: error: --out {out} is in use by another x run (pid {os.getpid()}, lock "
                                        f"file {lock}); wait for it to finish or choose another --out")
    finally:
        file_io.release(str(out))
    dead = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
                           "fcntl.flock(fd, fcntl.LOCK_EX)", lock], env=ENV)
    assert dead.returncode == 0
    assert file_io.claim(str(out), "--out") == lock  # a dead holder's lock never blocks
    file_io.release(str(out))


def _wait_for_holder(lock, proc, timeout=120):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if os.path.exists(lock) and open(lock).read().split()[:1] == [str(proc.pid)]:
            return True
        time.sleep(0.05)
    return False


def test_preprocess_sh_holds_its_destdir_until_it_ends(raw, tmp_path):
    dest = tmp_path / "data"
    cmd = ["bash", SCRIPTS / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", raw / "train", "--valid",
           raw / "valid", "--destdir", dest, "--bpe", "none"]
    proc = subprocess.Popen([str(c) for c in cmd], stderr=subprocess.PIPE, text=True, env=ENV)
    lock = file_io.lock_path(str(dest))
    assert _wait_for_holder(lock, proc), proc.communicate()[1][-2000:]
    seen = 0
    while proc.poll() is None:  # refused for as long as the first run lives, to its very end
        with pytest.raises(file_io.OutputInUseError, match=f"pid {proc.pid}"):
            file_io.claim(str(dest), "--destdir")
        seen += 1
        time.sleep(0.2)
    assert proc.wait() == 0 and seen > 1, proc.stderr.read()[-2000:]
    code, err = _preprocess(raw, dest, "--force")  # once it ended, the folder is free (and its own: replaced)
    assert code == 0, err[-2000:]


@pytest.mark.parametrize("door", ["preprocess.sh", "generate.sh"])
def test_second_run_on_a_claimed_output_is_one_line(raw, bin_dir, tmp_path, door):
    out = tmp_path / "out"
    lock = file_io.claim(str(out), "--destdir" if door == "preprocess.sh" else "--out")
    try:
        if door == "preprocess.sh":
            code, err = _preprocess(raw, out)
            what = "--destdir"
        else:
            fake = tmp_path / "model.pt"
            fake.write_bytes(b"x")
            code, err = run("bash", SCRIPTS / door, "--data", bin_dir, "--path", fake, "--subset", "valid",
                            "--out", out)
            what = "--out"
    finally:
        file_io.release(str(out))
    assert_one_line(code, err, f"{door}: error: {what} {out} is in use by another {door} run (pid {os.getpid()}, "
                               f"lock file {lock})")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# 3. a destination the tool did not make is never removed
# ------------------------------------------------------------------------------------------------
def _users_folder(path):
    path.mkdir()
    (path / "thesis.tex").write_text("mine\n")
    return path


def test_preprocess_sh_force_never_removes_a_folder_it_did_not_make(raw, tmp_path):
    dest = _users_folder(tmp_path / "mine")
    code, err = _preprocess(raw, dest, "--force")
    assert_one_line(code, err, f"preprocess.sh: error: --destdir {dest} is a folder that no fairseq-local tool made "
                               f"(no {file_io.OURS} in it): it is left as it is")
    assert sorted(os.listdir(dest)) == ["thesis.tex"]


def test_generate_sh_never_writes_into_a_folder_it_did_not_make(bin_dir, tmp_path):
    out = _users_folder(tmp_path / "mine")
    fake = tmp_path / "model.pt"
    fake.write_bytes(b"x")
    code, err = run("bash", SCRIPTS / "generate.sh", "--data", bin_dir, "--path", fake, "--subset", "valid",
                    "--out", out)
    assert_one_line(code, err, f"generate.sh: error: --out {out} is a folder that no fairseq-local tool made")
    assert sorted(os.listdir(out)) == ["thesis.tex"]


def test_demo_sh_never_removes_a_folder_it_did_not_make(tmp_path):
    out = _users_folder(tmp_path / "mine")
    code, err = run("bash", SCRIPTS / "demo.sh", "--out", out)
    assert_one_line(code, err, f"demo.sh: error: --out {out} is a folder that no fairseq-local tool made")
    assert sorted(os.listdir(out)) == ["thesis.tex"]


def test_check_ours_members(tmp_path):
    file_io.check_ours(str(tmp_path / "missing"), "--out")  # nothing there: nothing to lose
    (tmp_path / "empty").mkdir()
    file_io.check_ours(str(tmp_path / "empty"), "--out")
    made = _users_folder(tmp_path / "made")
    file_io.mark_ours(str(made), "test")
    file_io.check_ours(str(made), "--out")
    legacy = _users_folder(tmp_path / "legacy")
    (legacy / "corpus.json").write_text("{}")
    file_io.check_ours(str(legacy), "--destdir", markers=("corpus.json",))
    with pytest.raises(file_io.NotOursError):
        file_io.check_ours(str(legacy), "--destdir")
    shutil.rmtree(made)


# ------------------------------------------------------------------------------------------------
# 5. the text a model learns and the text it is scored against: one normal form
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tatoeba_zh(shared_data, tmp_path_factory):
    """Tatoeba en-zh (3000 training pairs, the 1000 valid pairs) through preprocess.sh's default
    sentencepiece; about a fifth of the Chinese lines hold full-width punctuation."""
    d = _first_lines(shared_data / "tatoeba-zh-en", tmp_path_factory.mktemp("tatoeba"), {"train": 3000, "valid": 1000},
                     ("en", "zh"))
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--src", "en", "--tgt", "zh", "--train", d / "train",
                    "--valid", d / "valid", "--destdir", d / "bin", "--bpe-size", "4000")
    assert code == 0, err[-2000:]
    return d


def _score(hyp, ref, *extra):
    from fairseq_local_repro.tools import score

    return score.score_files(score.parse_args(["--hyp", str(hyp), "--ref", str(ref), *extra]))


def test_a_perfect_system_scores_100_on_tatoeba_zh(tatoeba_zh, capsys):
    """The binarized targets, as a perfect system would output them (sentencepiece removed as
    generate.sh removes it), scored against the raw references: BLEU 100."""
    from fairseq.data.data_utils import post_process

    pieces = (tatoeba_zh / "bin" / "bpe" / "valid.zh").read_text(encoding="utf-8").splitlines()
    raw = (tatoeba_zh / "valid.zh").read_text(encoding="utf-8").splitlines()
    assert sum(any(0xFF01 <= ord(c) <= 0xFF5E for c in line) for line in raw) > 100  # full-width forms are there
    hyp = tatoeba_zh / "perfect.zh"
    hyp.write_text("\n".join(post_process(p, "sentencepiece") for p in pieces) + "\n", encoding="utf-8")
    assert _score(hyp, tatoeba_zh / "valid.zh", "--tokenize", "zh")["bleu"] == pytest.approx(100.0)


@pytest.mark.parametrize("hyp_form,ref_form", [("NFC", "NFD"), ("NFD", "NFC"), ("NFD", "NFD")])
def test_text_differing_only_in_normal_form_scores_100(tmp_path, capsys, hyp_form, ref_form):
    import unicodedata

    lines = ["Ça a été très différent à Zürich", "Où est la crème brûlée ?", "Ñandú in São Paulo"]
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(unicodedata.normalize(hyp_form, x) for x in lines) + "\n", encoding="utf-8")
    ref.write_text("\n".join(unicodedata.normalize(ref_form, x) for x in lines) + "\n", encoding="utf-8")
    assert _score(hyp, ref)["bleu"] == pytest.approx(100.0)
    notes = [line for line in capsys.readouterr().err.splitlines() if "Unicode NFC" in line]
    expected = [p for p, form in ((hyp, hyp_form), (ref, ref_form)) if form == "NFD"]
    assert notes == [f"score.py: note: 3 of the 3 lines of {p} are not in Unicode NFC: scored in NFC, as "
                     "preprocess.sh trains" for p in expected]


def test_preprocess_sh_learns_nfc_text(tmp_path, capsys):
    """A corpus written in NFD is binarized in NFC: its pieces are those of the NFC text."""
    import unicodedata

    words = ["café", "crème", "brûlée", "Zürich", "São", "Ñandú", "été", "à", "où", "déjà"]
    lines = [" ".join(words[(i + k) % len(words)] for k in range(5)) for i in range(60)]
    for split in ("train", "valid"):
        for lang in ("fr", "de"):
            (tmp_path / f"{split}.{lang}").write_text(
                "\n".join(unicodedata.normalize("NFD", x) for x in lines) + "\n", encoding="utf-8")
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--src", "fr", "--tgt", "de", "--train", tmp_path / "train",
                    "--valid", tmp_path / "valid", "--destdir", tmp_path / "bin", "--bpe", "none")
    assert code == 0, err[-2000:]
    words_in_dict = [line.split()[0] for line in (tmp_path / "bin" / "dict.fr.txt").read_text().splitlines()
                     if not line.startswith("madeupword")]  # fairseq's padding to a multiple of 8
    assert sorted(words_in_dict) == sorted(unicodedata.normalize("NFC", w) for w in words)


# ------------------------------------------------------------------------------------------------
# 10. checks that hold on any fairseq data folder, not only on one with preprocess.sh's corpus.json
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(bin_dir, tmp_path_factory):
    save = tmp_path_factory.mktemp("trained") / "ck"
    code, err = _train(bin_dir, save, "--max-update", "1")
    assert code == 0, err[-2000:]
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def generated(bin_dir, trained, tmp_path_factory):
    """generate.sh's output for the valid split of a data folder as fairseq-preprocess makes it (no
    corpus.json: preprocess.sh's record and BPE folder removed)."""
    d = tmp_path_factory.mktemp("plain")
    plain = d / "bin"
    shutil.copytree(bin_dir, plain, ignore=shutil.ignore_patterns("corpus.json", file_io.OURS, "bpe"))
    code, err = run("bash", SCRIPTS / "generate.sh", "--data", plain, "--path", trained, "--subset", "valid",
                    "--out", d / "gen", "--beam", "1", "--", "--max-len-b", "8")
    assert code == 0, err[-2000:]
    return d / "gen" / "hyp.txt"


@pytest.mark.parametrize("ref", ["train.en", "valid.de"])
def test_score_notes_another_texts_reference_without_corpus_json(raw, generated, capsys, ref):
    """Scored, with one note naming the reference, the split and the fix (a note, not a refusal: the
    character-pair overlap is a heuristic, and a lattice split's binarized targets can read otherwise)."""
    from fairseq_local_repro.tools import score

    code, err = call(capsys, score.main, ["--hyp", str(generated), "--ref", str(raw / ref)])
    assert code == 0 and "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if f"--ref {raw / ref} may not be the target text of valid in" in line]
    assert len(lines) == 1 and "give the raw target file of valid" in lines[0], err[-2000:]


def test_score_takes_the_splits_own_reference_without_corpus_json(raw, generated, capsys):
    from fairseq_local_repro.tools import score

    code, err = call(capsys, score.main, ["--hyp", str(generated), "--ref", str(raw / "valid.en")])
    assert code == 0 and "error" not in err, err


def test_text_overlap_members():
    from fairseq_local_core.corpus_manifest import SAME_TEXT, text_overlap

    raw = ["A man in an orange hat starring at something.", "Two dogs play in the snow."]
    tok = ["a man in an orange hat <<unk>> at something .", "two dogs play in the snow ."]
    other = ["Ein Mann mit einem orangefarbenen Hut.", "Zwei Hunde spielen im Schnee."]
    assert text_overlap(raw, raw) == 1.0
    assert text_overlap(raw, tok) > SAME_TEXT > text_overlap(raw, other)
    assert text_overlap(raw, raw[::-1]) < SAME_TEXT  # the right sentences, in another order


def test_average_checkpoints_of_runs_with_other_dictionaries_is_one_line(trained, tmp_path, capsys):
    """Two checkpoints whose dictionaries have the same size (so every parameter has the same shape)
    but other entries: runs on unrelated data, which averaging would silently mix."""
    import torch

    from fairseq_local.safe_loading import safe_load
    from fairseq_local_repro.tools import average_checkpoints

    state = safe_load(str(trained))
    prints = state["extra_state"]["dictionaries"]
    other = tmp_path / "other.pt"
    prints["target"]["sha256"] = "0" * 64  # same size, other words
    torch.save(state, other)
    out = tmp_path / "avg.pt"
    code, err = call(capsys, average_checkpoints.main, ["--inputs", str(trained), str(other), "--output", str(out)])
    assert_one_line(code, err, f"{other} was trained with another target dictionary than {trained}",
                    leftovers=[out])
    code, err = call(capsys, average_checkpoints.main, ["--inputs", str(trained), str(trained), "--output", str(out)])
    assert code == 0 and out.is_file(), err


# ------------------------------------------------------------------------------------------------
# 6. stopping halfway
# ------------------------------------------------------------------------------------------------
def _wait_for(predicate, proc, timeout=300):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_ctrl_c_during_training_is_one_line(bin_dir, tmp_path):
    import signal

    log = tmp_path / "stderr"
    with open(log, "w") as err:
        proc = subprocess.Popen([str(BIN / "fairseq-train"), str(bin_dir), "--user-dir", str(USER_DIR), "--arch",
                                 "mc_rnn_iwslt_de_en_2", *S2S, *COMMON, "--save-dir", str(tmp_path / "ck"),
                                 "--max-update", "100000", "--log-interval", "1", "--log-format", "simple"],
                                stderr=err, stdout=err, env=ENV)
        assert _wait_for(lambda: "num_updates" in log.read_text() or "| epoch 001:" in log.read_text(), proc), \
            log.read_text()[-2000:]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    text = log.read_text()
    assert code == 130 and "Traceback" not in text, text[-3000:]
    assert text.strip().splitlines()[-1] == "fairseq-train: interrupted"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_killing_generate_sh_ends_fairseq_generate_and_removes_its_work_folder(bin_dir, tmp_path, sig):
    """generate.sh killed while its fairseq-generate runs (a stand-in that records its pid and would run
    for a minute): the child is ended with it, no work folder is left, one line."""
    import signal

    stub = tmp_path / "stub"
    stub.mkdir()
    pid_file = tmp_path / "child.pid"
    (stub / "fairseq-generate").write_text(f"#!{sys.executable}\nimport os, time\n"
                                           f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n")
    (stub / "fairseq-generate").chmod(0o755)
    fake = tmp_path / "model.pt"
    fake.write_bytes(b"x")
    out = tmp_path / "out"
    proc = subprocess.Popen(["bash", str(SCRIPTS / "generate.sh"), "--data", str(bin_dir), "--path", str(fake),
                             "--subset", "valid", "--out", str(out)], stderr=subprocess.PIPE, text=True,
                            env=dict(ENV, PATH=f"{stub}:{ENV['PATH']}"))
    assert _wait_for(lambda: pid_file.exists() and pid_file.read_text(), proc), proc.communicate()[1][-2000:]
    proc.send_signal(getattr(signal, sig))
    code = proc.wait(timeout=60)
    err = proc.stderr.read()
    child = int(pid_file.read_text())
    end = time.time() + 10
    while os.path.exists(f"/proc/{child}") and time.time() < end:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{child}"), "fairseq-generate outlived generate.sh"
    assert code == 130 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1] == f"generate.sh: interrupted; {out} was left as it was"
    assert not out.exists() and not list(tmp_path.glob("out.tmp.*"))


# ------------------------------------------------------------------------------------------------
# 4 and 9. numbers that mean what their help says, and one-line errors
# ------------------------------------------------------------------------------------------------
from test_gencnn_tools import tiny_hub, tiny_lm  # noqa: E402,F401  (a tiny genCNN language model)


@pytest.mark.parametrize("n_prompt,max_len,min_len", [(1, 3, 1), (12, 3, 1), (12, 5, 3), (30, 2, 2)])
def test_sample_lengths_count_generated_words_not_the_prompt(tiny_hub, n_prompt, max_len, min_len):
    import torch

    from fairseq_local_repro.lm_hub import sample

    words = [w for w in tiny_hub.task.target_dictionary.symbols[4:] if not w.startswith("madeupword")]
    prompt = tiny_hub.encode(" ".join(words[i % len(words)] for i in range(n_prompt)))
    torch.manual_seed(0)
    eos = tiny_hub.task.target_dictionary.eos()
    for new, log_probs in sample(tiny_hub, prompt, 4, max_len=max_len, min_len=min_len):
        n_words = len(new) - int(new[-1] == eos)
        assert min_len <= n_words <= max_len, (n_words, new)
        assert len(log_probs) == len(new) and torch.isfinite(log_probs).all()


@pytest.mark.parametrize("extra,needle", [
    (["--topk", "-5"], "--topk must be positive (or -1)"),
    (["--topk", "100000"], "--topk 100000 exceeds the vocabulary of"),
    (["--topp", "1.5"], "--topp must be -1 (off) or in (0, 1] (got 1.5)"),
])
def test_sample_lm_out_of_range_sampling_options(tiny_lm, tmp_path, capsys, extra, needle):
    from fairseq_local_repro.tools import sample_lm

    ckpt, data = tiny_lm
    out = tmp_path / "samples.txt"
    code, err = call(capsys, sample_lm.main, ["--path", str(ckpt), "--data", str(data), "--from-scratch", "1",
                                             "--output", str(out), "--cpu", *extra])
    assert_one_line(code, err, needle, leftovers=[out])


def test_score_json_into_a_missing_folder_is_one_line(tmp_path, capsys):
    from fairseq_local_repro.tools import score

    (tmp_path / "hyp.txt").write_text("a b c\n")
    (tmp_path / "ref.txt").write_text("a b c\n")
    out = tmp_path / "missing" / "s.json"
    code, err = call(capsys, score.main, ["--hyp", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt"),
                                         "--json", str(out)])
    assert_one_line(code, err, f"--json {out}: cannot write it (no folder {out.parent})")


# ------------------------------------------------------------------------------------------------
# 8. paths handed on to Hydra, whatever characters they hold
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/d/a,b=c#d", "/d/it's \"q\"", "/d/${HOME}/x", "/d/ü é 中", "/d/a\\b", "/d/a\\'b",
                                  "/d/end\\", "/d/[x]{y}:z @%", "-lead"])
def test_hydra_quote_round_trips(path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from fairseq_local_repro.text.hydra_quote import quote

    value = OverridesParser.create().parse_override(f"++task.data={quote(path)}").value()
    assert OmegaConf.create({"task": {"data": value}}).task.data == path


def test_train_sh_config_takes_a_path_hydra_would_misread(bin_dir, tmp_path):
    odd = tmp_path / "dàta, a=b #1 'q' [x]"
    shutil.copytree(bin_dir, odd / "bin")
    save = odd / "ck"
    cmd = ["bash", SCRIPTS / "train.sh", "--config", MC_RNN_ROW, "--cpu", "--", *HYDRA_TINY, "optimization.max_update=1"]
    code, err = run(*cmd[:4], "--data", odd / "bin", "--save-dir", save, *cmd[4:])
    assert code == 0, err[-2000:]
    assert _num_updates(save / "checkpoint_last.pt") == 1
    shutil.copytree(bin_dir, odd / "bin ${x}")
    for data, out, option in ((odd / "bin ${x}", save, "--data"), (odd / "bin", odd / "ck ${x}", "--save-dir")):
        code, err = run(*cmd[:4], "--data", data, "--save-dir", out, *cmd[4:])  # fairseq resolves its config twice
        bad = data if option == "--data" else out
        assert_one_line(code, err, f"train.sh: error: {option} {bad} holds '${{', which fairseq-hydra-train reads as "
                                   "an interpolation: rename it")


@pytest.mark.parametrize("given,missing", [
    ([], "--distributed-backend gloo, --distributed-init-method tcp://127.0.0.1:PORT, --distributed-no-spawn"),
    (["--distributed-backend", "gloo"], "--distributed-init-method tcp://127.0.0.1:PORT, --distributed-no-spawn"),
    (["--distributed-backend", "gloo", "--distributed-init-method", "tcp://127.0.0.1:1", "--distributed-no-spawn"],
     None),
])
def test_cpu_distributed_names_the_gloo_settings(capsys, given, missing):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = ["/nonexistent", "--arch", "lstm", "--cpu", "--distributed-world-size", "2", *given]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    code, err = call(capsys, check_common_options, cfg)
    if missing is None:
        assert code == 0, err
    else:
        assert_one_line(code, err, f"--cpu --distributed-world-size 2 needs {missing}: one fairseq-train per rank")
