"""Things that do not belong together, and requests that cannot be honoured, are one line, never a
silently wrong run (issue: "first hour, round 3").

Classes (several cases each): a ``--restore-file`` / ``--finetune-from-model`` that names no file
(fairseq trains from scratch, or fails with a traceback); a ``--save-dir`` that is a file; a
``--max-tokens`` smaller than the sentences; a checkpoint meeting a dictionary of the same size
but other entries (generate, eval-lm, interactive, the hub, resuming), while a checkpoint without
a fingerprint keeps working; resuming a checkpoint whose weights do not fit the model the run
builds.  Training runs in-process (``call`` of tests/test_bad_inputs.py finishes it as the
plugin's excepthook does) on a tiny corpus; one case runs the real CLI for the hook.
"""
import shutil
import sys

import pytest
import torch

from contract_lib import REPO, make_translation_data
from test_bad_inputs import BIN, TINY_LSTM, assert_one_line, call, run

USER_DIR = REPO / "fairseq_local"
TRAIN = ["--task", "translation", "--cpu", *TINY_LSTM, "--optimizer", "adam", "--lr", "0.001", "--max-update", "1",
         "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints", "--seed", "1"]


def _train(data_dir, task_args, save, *extra):
    from fairseq import checkpoint_utils, distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    # fairseq keeps the best validation loss of the process on save_checkpoint: an earlier training
    # in this process would decide whether this one writes checkpoint_best.pt
    if hasattr(checkpoint_utils.save_checkpoint, "best"):
        del checkpoint_utils.save_checkpoint.best

    argv = [str(data_dir), *task_args, *TRAIN, "--max-tokens", "400", "--save-dir", str(save),
            *[str(e) for e in extra]]  # a later --max-tokens in extra wins
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    return distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)


def _task(data, task_args, name="translation", parser="generation"):
    from fairseq import options, tasks

    get_parser = {"generation": options.get_generation_parser, "eval_lm": options.get_eval_lm_parser}[parser]
    argv = [str(data), "--user-dir", str(USER_DIR), "--task", name, "--cpu", *task_args]
    return tasks.setup_task(options.parse_args_and_arch(get_parser(), argv))


def _load(path, task):
    from fairseq import checkpoint_utils

    return checkpoint_utils.load_model_ensemble_and_task([str(path)], task=task)


def _other_dictionary(src_dir, dst_dir, sides):
    """``src_dir`` with the dictionaries of ``sides`` (file names) in another order: same sizes,
    other entries at each index, as another corpus's dictionary of the same size."""
    shutil.copytree(src_dir, dst_dir)
    for name in sides:
        lines = (dst_dir / name).read_text(encoding="utf-8").splitlines(keepends=True)
        (dst_dir / name).write_text("".join(reversed(lines)), encoding="utf-8")
    return dst_dir


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    """A tiny corpus and a checkpoint trained on it (with this plugin: it carries a fingerprint)."""
    tmp = tmp_path_factory.mktemp("mt")
    data_dir, task_args = make_translation_data(tmp, n_train=24, n_valid=8)
    save = tmp / "ckpt"
    _train(data_dir, task_args, save)
    return data_dir, task_args, save / "checkpoint_last.pt"


# ------------------------------------------------------------------------------------------------
# --restore-file / --finetune-from-model / --save-dir
# ------------------------------------------------------------------------------------------------
def test_restore_file_missing_is_one_line_not_a_fresh_run(capsys, tmp_path, mt):
    data_dir, task_args, ckpt = mt
    save = tmp_path / "run"
    missing = tmp_path / "chekpoint_best.pt"
    code, err = call(capsys, _train, data_dir, task_args, save, "--restore-file", missing)
    assert_one_line(code, err, f"prog: error: --restore-file {missing}: no such checkpoint file ({tmp_path} holds no "
                               ".pt file)", leftovers=[save / "checkpoint_last.pt"])
    code, err = call(capsys, _train, data_dir, task_args, save, "--restore-file", ckpt.parent / "checkpoint_bset.pt")
    assert_one_line(code, err, f"({ckpt.parent} holds checkpoint_best.pt, checkpoint_last.pt)",
                    leftovers=[save / "checkpoint_last.pt"])
    code, err = call(capsys, _train, data_dir, task_args, save, "--restore-file", tmp_path)
    assert_one_line(code, err, f"--restore-file {tmp_path}: is a directory, not a checkpoint file")


def test_restore_file_relative_to_save_dir_names_the_path_to_pass(capsys, tmp_path, monkeypatch, mt):
    """fairseq reads an explicit --restore-file from the current directory: a name that exists only
    in --save-dir would train from scratch; the line says which path to pass."""
    data_dir, task_args, ckpt = mt
    monkeypatch.chdir(tmp_path)
    code, err = call(capsys, _train, data_dir, task_args, ckpt.parent, "--restore-file", "checkpoint_best.pt")
    assert_one_line(code, err, "--restore-file checkpoint_best.pt: no such checkpoint file",
                    "--restore-file is read from the current directory, not --save-dir: pass "
                    f"{ckpt.parent / 'checkpoint_best.pt'}")


def test_restore_file_default_and_existing_still_train(capsys, tmp_path, mt):
    """fairseq's default --restore-file (checkpoint_last.pt, absent in a new --save-dir) starts a
    fresh run; an existing --restore-file resumes from it."""
    data_dir, task_args, ckpt = mt
    code, err = call(capsys, _train, data_dir, task_args, tmp_path / "fresh")
    assert code == 0, err[-2000:]
    assert (tmp_path / "fresh" / "checkpoint_last.pt").is_file()
    code, err = call(capsys, _train, data_dir, task_args, tmp_path / "resumed", "--restore-file", ckpt,
                     "--max-update", "2")
    assert code == 0, err[-2000:]
    state = torch.load(tmp_path / "resumed" / "checkpoint_last.pt", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 2  # continued from update 1


def test_finetune_from_missing_model(capsys, tmp_path, mt):
    data_dir, task_args, ckpt = mt
    save = tmp_path / "ft"
    missing = ckpt.parent / "pretrained.pt"
    code, err = call(capsys, _train, data_dir, task_args, save, "--finetune-from-model", missing)
    assert_one_line(code, err, f"prog: error: --finetune-from-model {missing}: no such checkpoint file "
                               f"({ckpt.parent} holds checkpoint_best.pt, checkpoint_last.pt)",
                    leftovers=[save / "checkpoint_last.pt"])
    code, err = call(capsys, _train, data_dir, task_args, save, "--finetune-from-model", ckpt, "--reset-optimizer")
    assert_one_line(code, err, f"--finetune-from-model {ckpt} resets the optimizer, learning-rate scheduler, meters "
                               "and data loader itself: leave out --reset-optimizer")
    code, err = call(capsys, _train, data_dir, task_args, save, "--finetune-from-model", ckpt, "--restore-file", ckpt)
    assert_one_line(code, err, "cannot be used together")
    assert len(err.splitlines()[-1]) < 300  # not fairseq's message with the whole configuration
    code, err = call(capsys, _train, data_dir, task_args, save, "--finetune-from-model", ckpt)
    assert code == 0, err[-2000:]


def test_save_dir_that_is_a_file(capsys, tmp_path, mt):
    data_dir, task_args, _ = mt
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory\n")
    code, err = call(capsys, _train, data_dir, task_args, a_file)
    assert_one_line(code, err, f"--save-dir {a_file} is a file, not a directory: give a directory for the checkpoints")
    assert a_file.read_text() == "not a directory\n"
    code, err = call(capsys, _train, data_dir, task_args, a_file / "run1")
    assert_one_line(code, err, f"--save-dir {a_file / 'run1'} goes through {a_file}, which is a file")


def test_save_dir_file_through_the_cli(tmp_path, mt):
    data_dir, task_args, _ = mt
    a_file = tmp_path / "ckpt"
    a_file.write_text("")
    code, err = run(BIN / "fairseq-train", data_dir, "--user-dir", USER_DIR, *task_args, *TRAIN, "--max-tokens", "400",
                    "--save-dir", a_file)
    assert code == 2
    assert_one_line(code, err, f"fairseq-train: error: --save-dir {a_file} is a file, not a directory")


# ------------------------------------------------------------------------------------------------
# --max-tokens smaller than the sentences
# ------------------------------------------------------------------------------------------------
def _longest(data_dir, split="train"):
    from fairseq.data import data_utils

    longest = 0
    for side in ("src", "tgt"):
        ds = data_utils.load_indexed_dataset(str(data_dir / f"{split}.src-tgt.{side}"), None)
        longest = max(longest, int(max(ds.sizes)))
    return longest


def test_max_tokens_smaller_than_every_training_sentence(capsys, tmp_path, mt):
    data_dir, task_args, _ = mt
    longest = _longest(data_dir)
    code, err = call(capsys, _train, data_dir, task_args, tmp_path / "a", "--max-tokens", "2")
    assert_one_line(code, err, "--max-tokens 2 is smaller than 24 of the 24 sentences of this split (the longest has "
                               f"{longest} tokens): raise --max-tokens", f"to at least {longest}")


def test_max_tokens_valid_smaller_than_a_sentence(capsys, tmp_path, mt):
    data_dir, task_args, _ = mt
    longest = _longest(data_dir, "valid")
    code, err = call(capsys, _train, data_dir, task_args, tmp_path / "b", "--max-tokens-valid", "2")
    assert_one_line(code, err, "--max-tokens 2 is smaller than 8 of the 8 sentences", f"to at least {longest}")


def test_generate_max_tokens_smaller_than_a_sentence(capsys, mt):
    from fairseq import options
    from fairseq_cli import generate

    data_dir, task_args, ckpt = mt
    longest = _longest(data_dir, "test")
    argv = [str(data_dir), "--user-dir", str(USER_DIR), "--task", "translation", *task_args, "--cpu", "--path",
            str(ckpt), "--beam", "2", "--max-tokens", str(longest - 1), "--quiet"]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    code, err = call(capsys, generate.main, args)
    assert_one_line(code, err, f"--max-tokens {longest - 1} is smaller than", f"to at least {longest}")


# ------------------------------------------------------------------------------------------------
# a dictionary of the same size with other entries; checkpoints without a fingerprint
# ------------------------------------------------------------------------------------------------
def test_checkpoint_stores_its_dictionaries(mt):
    from fairseq.data import Dictionary

    from fairseq_local.data.checkpoint_dictionaries import fingerprint

    data_dir, _, ckpt = mt
    stored = torch.load(ckpt, weights_only=True)["extra_state"]["dictionaries"]
    for side, lang in (("source", "src"), ("target", "tgt")):
        d = Dictionary.load(str(data_dir / f"dict.{lang}.txt"))
        assert stored[side] == dict(fingerprint(d), lang=lang)  # with the language it is of
        assert stored[side]["size"] == len(d)
    other = _other_dictionary(data_dir, data_dir.parent / "fp_other", ["dict.src.txt"])
    assert fingerprint(Dictionary.load(str(other / "dict.src.txt")))["sha256"] != stored["source"]["sha256"]


@pytest.mark.parametrize("sides,side,lang", [(["dict.src.txt"], "source", "src"), (["dict.tgt.txt"], "target", "tgt"),
                                             (["dict.src.txt", "dict.tgt.txt"], "source", "src")])
def test_generate_with_another_dictionary_of_the_same_size(capsys, tmp_path, mt, sides, side, lang):
    data_dir, task_args, ckpt = mt
    other = _other_dictionary(data_dir, tmp_path / "other", sides)
    code, err = call(capsys, _load, ckpt, _task(other, task_args))
    assert_one_line(code, err, f"{ckpt} was trained with another {side} dictionary than {other}/dict.{lang}.txt: both "
                               "have", "entries, but not the same ones (another corpus or BPE model?); give the data "
                               "directory the checkpoint was trained with")
    _load(ckpt, _task(data_dir, task_args))  # its own data still loads


def test_generate_cli_with_another_dictionary(tmp_path, mt):
    data_dir, task_args, ckpt = mt
    other = _other_dictionary(data_dir, tmp_path / "other", ["dict.tgt.txt"])
    code, err = run(BIN / "fairseq-generate", other, "--user-dir", USER_DIR, *task_args, "--cpu", "--path", ckpt,
                    "--beam", "2")
    assert code == 2
    assert_one_line(code, err, f"fairseq-generate: error: {ckpt} was trained with another target dictionary")


def test_language_model_with_another_dictionary(capsys, tmp_path, tiny_checkpoints):
    ckpt, data, args = tiny_checkpoints["lm"]
    other = _other_dictionary(data, tmp_path / "other", ["dict.txt"])
    code, err = call(capsys, _load, ckpt, _task(other, args, "stateful_language_modeling", "eval_lm"))
    assert_one_line(code, err, f"{ckpt} was trained with another source dictionary than {other}/dict.txt")


def test_lattice_checkpoint_with_another_dictionary(capsys, tmp_path, tiny_checkpoints):
    ckpt, data, args = tiny_checkpoints["lattice"]
    names = sorted(p.name for p in data.glob("dict.*.txt"))
    other = _other_dictionary(data, tmp_path / "other", names)
    code, err = call(capsys, _load, ckpt, _task(other, args, "lattice_translation"))
    assert_one_line(code, err, f"{ckpt} was trained with another", "dictionary than")


def test_hub_with_another_dictionary(tmp_path, tiny_checkpoints):
    from fairseq_local_core.errors import one_line
    from fairseq_local.models.mc_rnn import MCRNNModel

    ckpt, data, _ = tiny_checkpoints["mt"]
    other = _other_dictionary(data, tmp_path / "other", ["dict.src.txt"])
    with pytest.raises(ValueError) as info:
        MCRNNModel.from_pretrained(ckpt.parent, data_name_or_path=str(other))
    assert one_line(info.value).startswith(f"{ckpt} was trained with another source dictionary than {other}/dict.src.txt")
    MCRNNModel.from_pretrained(ckpt.parent, data_name_or_path=str(data))


def test_checkpoint_without_a_fingerprint_keeps_working(tmp_path, mt):
    """A checkpoint written before fingerprints existed loads as before (nothing to compare)."""
    data_dir, task_args, ckpt = mt
    state = torch.load(ckpt, weights_only=True)
    del state["extra_state"]["dictionaries"]
    old = tmp_path / "old.pt"
    torch.save(state, old)
    other = _other_dictionary(data_dir, tmp_path / "other", ["dict.src.txt"])
    models, _, _ = _load(old, _task(other, task_args))
    assert len(models) == 1


def test_resume_with_another_dictionary(capsys, tmp_path, mt):
    data_dir, task_args, ckpt = mt
    save = tmp_path / "run"
    shutil.copytree(ckpt.parent, save)
    other = _other_dictionary(data_dir, tmp_path / "other", ["dict.tgt.txt"])
    before = (save / "checkpoint_last.pt").read_bytes()
    code, err = call(capsys, _train, other, task_args, save, "--max-update", "2")
    assert_one_line(code, err, f"{save / 'checkpoint_last.pt'} was trained with another target dictionary than "
                               f"{other}/dict.tgt.txt")
    assert (save / "checkpoint_last.pt").read_bytes() == before
    code, err = call(capsys, _train, other, task_args, tmp_path / "ft", "--finetune-from-model", ckpt)
    assert_one_line(code, err, f"{ckpt} was trained with another target dictionary")


def test_resume_with_another_model(capsys, tmp_path, mt):
    """Another --arch or other sizes in the same --save-dir: one line saying what the checkpoint holds."""
    data_dir, task_args, ckpt = mt
    save = tmp_path / "run"
    shutil.copytree(ckpt.parent, save)
    code, err = call(capsys, _train, data_dir, task_args, save, "--encoder-hidden-size", "16")
    assert_one_line(code, err, f"{save / 'checkpoint_last.pt'} holds a 'lstm' model (trained with --task translation) "
                               "that does not fit the 'lstm' model this run builds (", "in the checkpoint but",
                    "resume with the options and data it was trained with, or train the new model in another --save-dir")
    code, err = call(capsys, _train, data_dir, task_args, save, "--arch", "mc_rnn_iwslt_de_en_2")
    assert_one_line(code, err, "holds a 'lstm' model", "does not fit the 'mc_rnn_iwslt_de_en_2' model this run builds")


# ------------------------------------------------------------------------------------------------
# invisible characters: byte-order marks on every path; a lone carriage return keeps the pairs aligned
# ------------------------------------------------------------------------------------------------
BOM = "\ufeff"
SENTS_SRC = [f"das ist satz nummer {w} mit worten" for w in ("eins", "zwei", "drei", "vier", "fuenf", "sechs")]
SENTS_TGT = [f"this is sentence number {w} with words" for w in ("one", "two", "three", "four", "five", "six")]


def _corpus(d, src_lines, tgt_lines, bom=True):
    d.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid"):
        for lang, sents in (("de", src_lines), ("en", tgt_lines)):
            text = "\n".join(sents) + "\n"
            (d / f"{split}.{lang}").write_bytes(((BOM if bom else "") + text).encode("utf-8"))
    return d / "train", d / "valid"


def _preprocess_sh(tmp_path, *extra, src=SENTS_SRC, tgt=SENTS_TGT):
    train, valid = _corpus(tmp_path / "raw", src, tgt)
    dest = tmp_path / "bin"
    code, err = run("bash", REPO / "scripts" / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", train,
                    "--valid", valid, "--destdir", dest, "--workers", "1", *extra)
    assert code == 0, err[-3000:]
    return dest


@pytest.mark.parametrize("bpe", ["none", "subword-nmt", "sentencepiece"])
def test_preprocess_strips_byte_order_marks(tmp_path, bpe):
    size = {"none": [], "subword-nmt": ["--bpe-size", "20"], "sentencepiece": ["--bpe-size", "60"]}[bpe]
    dest = _preprocess_sh(tmp_path, "--bpe", bpe, *size)
    written = [p for p in dest.rglob("*") if p.is_file() and p.suffix in (".txt", ".de", ".en", ".vocab")
               or p.name.startswith("codes.")]
    assert any(p.name == "dict.de.txt" for p in written)
    for path in written:
        assert BOM not in path.read_text(encoding="utf-8"), path
    first = (dest / "bpe" / "train.de").read_text(encoding="utf-8").splitlines()[0]
    if bpe == "none":
        assert first == SENTS_SRC[0]  # "das", not "\ufeffdas": the same word as everywhere else


def test_preprocess_lone_carriage_return_keeps_pairs_aligned(tmp_path):
    """One lone CR on each side: the line counts of the raw files match, but the Moses tokenizer
    (and Python's line reader) would split both sentences, shifting every pair in between."""
    src, tgt = list(SENTS_SRC), list(SENTS_TGT)
    src[1] = src[1].replace(" mit ", " mit\r")
    tgt[4] = tgt[4].replace(" with ", " with\r")
    dest = _preprocess_sh(tmp_path, "--bpe", "none", "--tokenize", "moses", src=src, tgt=tgt)
    de = (dest / "bpe" / "train.de").read_text(encoding="utf-8").splitlines()
    en = (dest / "bpe" / "train.en").read_text(encoding="utf-8").splitlines()
    assert len(de) == len(en) == 6
    assert de[1] == SENTS_SRC[1] and en[4] == SENTS_TGT[4] and de[5] == SENTS_SRC[5] and en[5] == SENTS_TGT[5]


def test_preprocess_step_that_changes_line_counts_is_one_line(tmp_path):
    """Alignment is checked after every rewriting step: a tokenizer that splits a line fails, naming it."""
    train, valid = _corpus(tmp_path / "raw", SENTS_SRC, SENTS_TGT, bom=False)
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "sacremoses").write_text("#!/bin/sh\nsed 's/ nummer /\\n/'\n")  # splits every line in two
    (fake / "sacremoses").chmod(0o755)
    import os
    import subprocess

    from test_bad_inputs import ENV

    env = dict(ENV, PATH=f"{fake}:{ENV['PATH']}")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "preprocess.sh"), "--src", "de", "--tgt", "en", "--train",
                           str(train), "--valid", str(valid), "--destdir", str(tmp_path / "bin"), "--bpe", "none",
                           "--tokenize", "moses"], capture_output=True, text=True, env=env, timeout=300)
    assert_one_line(proc.returncode, proc.stderr, f"preprocess.sh: error: --tokenize moses turned the 6 lines of {train}.de "
                                                  "into 12: the sentence pairs would no longer be aligned",
                    leftovers=[tmp_path / "bin"])
    assert not [p for p in os.listdir(tmp_path) if p.startswith("bin.tmp")]


def test_score_ignores_byte_order_marks(tmp_path):
    text = ["the cat sat on the mat", "a second sentence here"]
    for name in ("ref.txt", "ref2.txt"):  # a file with a byte-order mark against a copy of itself too
        (tmp_path / name).write_bytes((BOM + "\n".join(text) + "\n").encode("utf-8"))
    (tmp_path / "hyp.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    for hyp, ref in (("hyp.txt", "ref.txt"), ("ref.txt", "hyp.txt"), ("ref.txt", "ref2.txt")):
        proc = subprocess_run(["bash", REPO / "scripts" / "score.sh", "--hyp", tmp_path / hyp, "--ref", tmp_path / ref])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("BLEU (detokenized") and " = 100.00 " in proc.stdout, proc.stdout


def test_build_lattices_ignores_byte_order_marks(tmp_path):
    from fairseq_local_core.lattice import read_lattices

    (tmp_path / "a.zh").write_bytes((BOM + "我们 喜欢 猫\n他 走 了\n").encode("utf-8"))
    out = tmp_path / "a.lat"
    proc = subprocess_run([sys.executable, REPO / "scripts" / "build_lattices.py", "--merge", tmp_path / "a.zh",
                           "--output", out])
    assert proc.returncode == 0, proc.stderr
    assert BOM not in out.read_text(encoding="utf-8")
    first = read_lattices(str(out))[0]
    assert first.chars == tuple("我们喜欢猫")  # no U+FEFF character node


def subprocess_run(cmd):
    import subprocess

    from test_bad_inputs import ENV

    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV, timeout=300)


# ------------------------------------------------------------------------------------------------
# score.sh: exit status 2 for its errors (as the README says); process substitution
# ------------------------------------------------------------------------------------------------
def test_score_errors_exit_2(tmp_path):
    (tmp_path / "hyp").write_text("a b c\nd e f\n")
    (tmp_path / "short").write_text("a b c\n")
    (tmp_path / "bpe").write_text("a b@@ c\nd e f\n")
    for args, needle in ((["--hyp", tmp_path / "hyp", "--ref", tmp_path / "short"], "has 1 lines but"),
                         (["--hyp", tmp_path / "nope", "--ref", tmp_path / "hyp"], "does not exist"),
                         (["--hyp", tmp_path, "--ref", tmp_path / "hyp"], "is a directory, not a file"),
                         (["--hyp", tmp_path / "bpe", "--ref", tmp_path / "hyp"], "subword-nmt BPE mark")):
        proc = subprocess_run(["bash", REPO / "scripts" / "score.sh", *args])
        assert proc.returncode == 2, (args, proc.returncode, proc.stderr)
        assert_one_line(proc.returncode, proc.stderr, "score.py: error:", needle)


def test_score_reads_process_substitution(tmp_path):
    (tmp_path / "ref").write_text("The Cat sat on the mat .\nA second sentence here .\n")
    script = (f"bash {REPO / 'scripts' / 'score.sh'} --hyp <(tr 'A-Z' 'a-z' < {tmp_path / 'ref'}) "
              f"--ref <(cat {tmp_path / 'ref'}) --lowercase")
    proc = subprocess_run(["bash", "-c", script])
    assert proc.returncode == 0, proc.stderr
    assert " = 100.00 " in proc.stdout and "case:lc" in proc.stdout


# ------------------------------------------------------------------------------------------------
# fairseq-hydra-train: an option the YAML does not list points to ++key=
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("override,needle", [
    ("task.left_pad_source=false", "task.left_pad_source: not in the config file, so Hydra cannot override it; add it "
                                   "with ++task.left_pad_source=VALUE (or write it into the YAML)"),
    ("optimizer.weight_decay=0.1", "optimizer.weight_decay: not in the config file, so Hydra cannot override it; add "
                                   "it with ++optimizer.weight_decay=VALUE"),
    ("optimizer.weight_decai=0.1", "optimizer.weight_decai: no such config key; did you mean optimizer.weight_decay?"),
])
def test_hydra_key_missing_from_the_yaml(tmp_path, mt, override, needle):
    data_dir = mt[0]
    code, err = run(BIN / "fairseq-hydra-train", "--config-dir", REPO / "configs" / "mc_rnn", "--config-name",
                    "table2_mc_rnn_2", f"task.data={data_dir}", "task.source_lang=src", "task.target_lang=tgt",
                    f"common.user_dir={USER_DIR}", "common.cpu=true", override, f"checkpoint.save_dir={tmp_path / 'ck'}",
                    f"hydra.run.dir={tmp_path / 'hydra'}", "distributed_training.distributed_world_size=1")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert_one_line(code, err, f"fairseq-hydra-train: error: {needle}")
