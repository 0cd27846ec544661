"""Bad input is one line naming the file, line or option: non-zero status, no traceback, nothing
half-written (issue: "every bad input a one-line error").

Most cases run the entry point's ``main`` in-process and finish it as Python would at top level:
an exception goes to ``fairseq_local_core.errors.report``, which is exactly what the excepthook that
importing the plugin installs does (an exception it does not know is re-raised, so the test fails
with the traceback a user would see).  A few cases run the real CLIs (``fairseq-train``,
``fairseq-generate``, ``fairseq-hydra-train``, the shell scripts) in a subprocess to check the
hook itself.  Every case shares one tiny binarized corpus and one tiny checkpoint.
"""
import importlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contract_lib import REPO, make_lm_data, make_translation_data
from fairseq_local_core import errors

SCRIPTS = REPO / "scripts"
BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
TINY_LSTM = ["--arch", "lstm", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8",
             "--decoder-embed-dim", "8", "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8"]
LATIN1 = "ceci est une phrase accentuée\n".encode("latin-1")
GB18030 = "这是一个中文句子\n".encode("gb18030")


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def assert_one_line(code, stderr, *needles, leftovers=()):
    """Non-zero status, no traceback, the last stderr line names what is wrong, no partial output."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code not in (0, None), stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-4000:]
    assert lines, "nothing on stderr"
    assert "error" in lines[-1], lines[-1]
    for needle in needles:
        assert str(needle) in lines[-1], (needle, lines[-1])
    for path in leftovers:
        assert not Path(path).exists(), f"{path} was left behind"
    return lines[-1]


def call(capsys, fn, *args):
    """Run an entry point in-process and finish it as the interpreter (with the plugin's hook) would."""
    capsys.readouterr()
    try:
        ret = fn(*args)
        code = ret if isinstance(ret, int) else 0
    except SystemExit as e:
        if isinstance(e.code, str):
            sys.stderr.write(e.code + "\n")
            code = 1
        else:
            code = e.code or 0
    except Exception as e:  # what fairseq_local/patches/one_line_errors.py's excepthook does
        code = errors.report(e, prog="prog")
        if code is None:
            raise
    return code, capsys.readouterr().err


def run(*cmd, timeout=300):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV, timeout=timeout)
    return proc.returncode, proc.stderr


def write(path, data):
    Path(path).write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_translation_data(tmp_path_factory.mktemp("mt"), n_train=24, n_valid=8)


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    return make_lm_data(tmp_path_factory.mktemp("lm"), n_train=24, n_valid=16)


@pytest.fixture(scope="module")
def ckpt(data, tmp_path_factory):
    """A tiny translation checkpoint (fairseq's lstm) and damaged copies of it."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    save = tmp_path_factory.mktemp("ckpt")
    data_dir, task_args = data
    argv = [str(data_dir), "--task", "translation", "--cpu", *task_args, *TINY_LSTM, "--optimizer", "adam",
            "--lr", "0.001", "--max-tokens", "400", "--max-update", "1", "--save-dir", str(save),
            "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    good = save / "checkpoint_last.pt"
    raw = good.read_bytes()
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0x04
    out = {"good": good}
    for name, content in (("truncated", raw[: len(raw) // 2]), ("empty", b""), ("random", random.Random(0).randbytes(4096)),
                          ("flipped", bytes(flipped))):
        out[name] = write(save / f"{name}.pt", content)
    return out


# ------------------------------------------------------------------------------------------------
# scripts/preprocess.sh: UTF-8, line counts, empty training files (all fail before fairseq runs)
# ------------------------------------------------------------------------------------------------
SENTS = [f"the sentence number {i} has words" for i in range(12)]


def _pair(d, name, src, tgt):
    write(d / f"{name}.src", src)
    write(d / f"{name}.tgt", tgt)
    return d / name


def _text(lines, newline=True):
    return "\n".join(lines) + ("\n" if newline else "")


@pytest.mark.parametrize("case,bpe,needle", [
    ("latin1_train_src", "none", "train.src:4: not UTF-8"),
    ("latin1_train_src", "subword-nmt", "train.src:4: not UTF-8"),
    ("latin1_train_src", "sentencepiece", "train.src:4: not UTF-8"),
    ("gb18030_valid_tgt", "sentencepiece", "valid.tgt:2: not UTF-8"),
    ("gb18030_valid_tgt", "subword-nmt", "valid.tgt:2: not UTF-8"),
    ("empty_train", "subword-nmt", "train.src: the file is empty"),
    ("empty_train", "sentencepiece", "train.src: the file is empty"),
    ("missing_newline_miscount", "none", "has 11 lines"),
])
def test_preprocess_sh(tmp_path, case, bpe, needle):
    train = _pair(tmp_path, "train", _text(SENTS), _text(SENTS))
    valid = _pair(tmp_path, "valid", _text(SENTS[:3]), _text(SENTS[:3]))
    if case == "latin1_train_src":
        write(train.with_suffix(".src"), _text(SENTS[:3]).encode() + LATIN1 + _text(SENTS[4:]).encode())
    elif case == "gb18030_valid_tgt":
        write(valid.with_suffix(".tgt"), _text(SENTS[:1]).encode() + GB18030 + _text(SENTS[2:3]).encode())
    elif case == "empty_train":
        train = _pair(tmp_path, "train", "", "")
    elif case == "missing_newline_miscount":
        # 11 lines + a 12th without newline vs 11 lines: `wc -l` says 11 and 11
        _pair(tmp_path, "train", _text(SENTS[:11]), _text(SENTS, newline=False))
    dest = tmp_path / "bin"
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", train,
                    "--valid", valid, "--destdir", dest, "--bpe", bpe, "--bpe-size", "30")
    assert_one_line(code, err, "preprocess.sh: error:", needle, leftovers=[dest])
    assert not list(tmp_path.glob("bin.tmp*"))


def test_preprocess_sh_lm_latin1(tmp_path):
    write(tmp_path / "train.txt", _text(SENTS[:5]).encode() + LATIN1)
    write(tmp_path / "valid.txt", _text(SENTS[:3]))
    dest = tmp_path / "bin"
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--lm", "--train", tmp_path / "train.txt", "--valid",
                    tmp_path / "valid.txt", "--destdir", dest, "--bpe", "none")
    assert_one_line(code, err, "train.txt:6: not UTF-8", leftovers=[dest])


def test_preprocess_sh_last_line_without_newline_is_kept(tmp_path):
    """Valid data whose last line lacks its newline: accepted, every line binarized."""
    train = _pair(tmp_path, "train", _text(SENTS, newline=False), _text(SENTS))
    valid = _pair(tmp_path, "valid", _text(SENTS[:3]), _text(SENTS[:3], newline=False))
    dest = tmp_path / "bin"
    code, err = run("bash", SCRIPTS / "preprocess.sh", "--src", "src", "--tgt", "tgt", "--train", train,
                    "--valid", valid, "--destdir", dest, "--bpe", "none")
    assert code == 0, err[-2000:]
    from fairseq.data import data_utils

    for split, n in (("train", 12), ("valid", 3)):
        for lang in ("src", "tgt"):
            ds = data_utils.load_indexed_dataset(str(dest / f"{split}.src-tgt.{lang}"), None, "mmap")
            assert len(ds) == n
            assert (dest / "bpe" / f"{split}.{lang}").read_text().splitlines()[-1] == SENTS[n - 1]


# ------------------------------------------------------------------------------------------------
# lattice scripts, score.py, rerank_nbest.py, sample_lm.py: the same UTF-8 reader
# ------------------------------------------------------------------------------------------------
def test_build_lattices_latin1_input(tmp_path, capsys):
    mod = importlib.import_module("fairseq_local_repro.tools.build_lattices")
    src = write(tmp_path / "in.zh", "下雨天\n".encode() + LATIN1)
    out = tmp_path / "out.lat"
    code, err = call(capsys, mod.main, ["--input", str(src), "--output", str(out), "--segmenters", "char"])
    assert_one_line(code, err, "build_lattices.py: error:", f"{src}:2: not UTF-8", leftovers=[out])


def test_build_lattices_merge_gb18030(tmp_path, capsys):
    mod = importlib.import_module("fairseq_local_repro.tools.build_lattices")
    a = write(tmp_path / "a.tok", "下雨 天\n")
    b = write(tmp_path / "b.tok", GB18030)
    out = tmp_path / "out.lat"
    code, err = call(capsys, mod.main, ["--merge", str(a), str(b), "--output", str(out)])
    assert_one_line(code, err, f"{b}:1: not UTF-8", leftovers=[out])


def _lattice_corpus(d, train_src=None, train_tgt=None):
    lat = "下 雨 天\t0:1 0:2 1:2 2:3\t0 2 3\n"
    write(d / "train.zh", train_src if train_src is not None else lat * 3)
    write(d / "train.en", train_tgt if train_tgt is not None else "rainy day\n" * 3)
    write(d / "valid.zh", lat)
    write(d / "valid.en", "rainy day\n")
    return ["--source-lang", "zh", "--target-lang", "en", "--trainpref", str(d / "train"),
            "--validpref", str(d / "valid"), "--destdir", str(d / "bin"), "--workers", "1"]


@pytest.mark.parametrize("case,needle", [
    ("latin1_source", "train.zh:2: not UTF-8"),
    ("gb18030_target", "train.en:3: not UTF-8"),
    ("empty_train", "train.zh: the training file is empty"),
])
def test_preprocess_lattices(tmp_path, capsys, case, needle):
    mod = importlib.import_module("fairseq_local_repro.tools.preprocess_lattices")
    lat = "下 雨 天\t0:1 0:2 1:2 2:3\t0 2 3\n".encode()
    if case == "latin1_source":
        argv = _lattice_corpus(tmp_path, train_src=lat + LATIN1 + lat)
    elif case == "gb18030_target":
        argv = _lattice_corpus(tmp_path, train_tgt=b"rainy\nday\n" + GB18030)
    else:
        argv = _lattice_corpus(tmp_path, train_src="", train_tgt="")
    code, err = call(capsys, mod.main, argv)
    assert_one_line(code, err, "preprocess_lattices.py: error:", needle)
    assert not (tmp_path / "bin").exists() or not os.listdir(tmp_path / "bin")


@pytest.mark.parametrize("which", ["hyp", "ref"])
def test_score_non_utf8(tmp_path, capsys, which):
    mod = importlib.import_module("fairseq_local_repro.tools.score")
    good = write(tmp_path / "good.txt", "a b c\nd e f\n")
    bad = write(tmp_path / "bad.txt", b"a b c\n" + (LATIN1 if which == "hyp" else GB18030))
    out = tmp_path / "s.json"
    argv = ["--hyp", str(bad), "--ref", str(good)] if which == "hyp" else ["--hyp", str(good), "--ref", str(bad)]
    code, err = call(capsys, mod.main, argv + ["--json", str(out)])
    assert_one_line(code, err, "score.py: error:", f"{bad}:2: not UTF-8", leftovers=[out])


def _nbest(d):
    nb = write(d / "dev.nbest", "H-0\t-0.5\tthe cat\nH-0\t-0.7\ta cat\nH-1\t-0.2\ta dog\n")
    ref = write(d / "dev.ref", "the cat\na dog\n")
    return nb, ref


@pytest.mark.parametrize("case,needle", [
    ("latin1_nbest", "dev.nbest:2: not UTF-8"),
    ("gb18030_ref", "dev.ref:2: not UTF-8"),
    ("lm_batch_0", "--lm-batch must be >= 1 (got 0)"),
    ("translation_checkpoint", "holds a 'lstm' model (model lstm, task translation)"),
    ("truncated_checkpoint", "is not a complete checkpoint (truncated zip archive"),
])
def test_rerank_nbest(tmp_path, capsys, ckpt, data, case, needle):
    mod = importlib.import_module("fairseq_local_repro.tools.rerank_nbest")
    nb, ref = _nbest(tmp_path)
    if case == "latin1_nbest":
        write(nb, b"H-0\t-0.5\tthe cat\nH-0\t-0.7\t" + LATIN1 + b"H-1\t-0.2\ta dog\n")
    elif case == "gb18030_ref":
        write(ref, b"the cat\n" + GB18030)
    lm = ckpt["truncated"] if case == "truncated_checkpoint" else ckpt["good"]
    out = tmp_path / "out.txt"
    argv = ["--lm", str(lm), "--lm-data", str(data[0]), "--dev-nbest", str(nb), "--dev-ref", str(ref),
            "--test-nbest", str(nb), "--test-ref", str(ref), "--output", str(out), "--cpu"]
    if case == "lm_batch_0":
        argv += ["--lm-batch", "0"]
    code, err = call(capsys, mod.main, argv)
    line = assert_one_line(code, err, needle, leftovers=[out])
    if case == "translation_checkpoint":
        assert "needs a language model" in line and str(lm) in line


@pytest.mark.parametrize("case,needle", [
    ("max_len_negative", "--max-len must be >= 1 (got -1)"),
    ("min_len_above_max", "--min-len must be between 0 and --max-len 5 (got 9)"),
    ("latin1_prompts", "prompts.txt:2: not UTF-8"),
    ("translation_checkpoint", "needs a language model"),
    ("empty_checkpoint", "is not a complete checkpoint (empty file)"),
    ("flipped_checkpoint", "is not a complete checkpoint (CRC-32 mismatch"),
    ("random_checkpoint", "is not a complete checkpoint ("),
])
def test_sample_lm(tmp_path, capsys, ckpt, data, case, needle):
    mod = importlib.import_module("fairseq_local_repro.tools.sample_lm")
    path = {"empty_checkpoint": "empty", "flipped_checkpoint": "flipped", "random_checkpoint": "random"}.get(case, "good")
    out = tmp_path / "samples.txt"
    argv = ["--path", str(ckpt[path]), "--data", str(data[0]), "--prompt", "the", "--output", str(out), "--cpu"]
    if case == "max_len_negative":
        argv += ["--max-len", "-1"]
    elif case == "min_len_above_max":
        argv += ["--max-len", "5", "--min-len", "9"]
    elif case == "latin1_prompts":
        argv += ["--prompts", str(write(tmp_path / "prompts.txt", b"the\n" + LATIN1))]
    code, err = call(capsys, mod.main, argv)
    line = assert_one_line(code, err, needle, leftovers=[out])
    if path != "good":
        assert str(ckpt[path]) in line


# ------------------------------------------------------------------------------------------------
# analysis scripts: a checkpoint of another family names the arch it has and the one it needs
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("script,needs", [
    ("dpn_alignment_entropy", "needs a dpn_s2s model"),
    ("lattice_gates", "needs a lattice_rnnsearch model"),
    ("mc_rnn_channel_attention", "needs an mc_rnn or mc_rnn_lm model"),
    ("parallel_cells_masking", "needs a parallel_lstm_lm model"),
])
def test_analysis_script_wrong_family(tmp_path, capsys, monkeypatch, ckpt, data, script, needs):
    mod = importlib.import_module(f"fairseq_local_repro.analysis.{script}")
    path, d, out = str(ckpt["good"]), str(data[0]), str(tmp_path / "out.png")
    argv = {
        "dpn_alignment_entropy": [d, "--path", path, "--json", str(tmp_path / "out.json")],
        "lattice_gates": ["--path", path, "--data", d, "--lattice-line", "下 雨\t0:1 1:2 0:2", "--out", out],
        "mc_rnn_channel_attention": ["--path", path, "--data", d, "--sentence", "a b", "--out", out],
        "parallel_cells_masking": ["--path", path, "--data", d, "--out", out,
                                   "--word-groups", str(write(tmp_path / "groups.txt", "nouns: the a\n"))],
    }[script]
    if script == "mc_rnn_channel_attention":  # reads sys.argv
        monkeypatch.setattr(sys, "argv", [script, *argv])
        code, err = call(capsys, mod.main)
    else:
        code, err = call(capsys, mod.main, argv)
    assert_one_line(code, err, f"{path} holds a 'lstm' model", needs, leftovers=[out, tmp_path / "out.json"])


def test_analysis_script_truncated_checkpoint(tmp_path, capsys, ckpt, data):
    mod = importlib.import_module("fairseq_local_repro.analysis.dpn_alignment_entropy")
    code, err = call(capsys, mod.main, [str(data[0]), "--path", str(ckpt["truncated"])])
    assert_one_line(code, err, f"{ckpt['truncated']} is not a complete checkpoint")


def test_unsafe_global_is_named(tmp_path, capsys):
    """The safe-loading refusal names the global, also for torch's "unsupported GLOBAL" wording."""
    from fairseq import checkpoint_utils

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo owned",))

    bad = tmp_path / "evil.pt"
    torch.save({"model": {}, "x": Evil()}, bad)
    code, err = call(capsys, checkpoint_utils.load_checkpoint_to_cpu, str(bad))
    assert_one_line(code, err, str(bad), "refused to unpickle global 'posix.system'")


# ------------------------------------------------------------------------------------------------
# impossible sizes in every family: refused at build time, naming the option
# ------------------------------------------------------------------------------------------------
MT = ["--encoder-embed-dim", "8", "--decoder-embed-dim", "8"]
RNN = MT + ["--encoder-hidden-size", "8", "--decoder-hidden-size", "8", "--attention-dim", "8"]
DPN = MT + ["--encoder-conv-dim", "8", "--decoder-conv-dim", "8", "--encoder-ffn-embed-dim", "16",
            "--decoder-ffn-embed-dim", "16", "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
LM = ["--decoder-embed-dim", "8", "--decoder-hidden-size", "8"]
GENCNN = ["--decoder-embed-dim", "6", "--alpha-length", "6", "--beta-length", "4", "--alpha-layers",
          "(2,3,3),(2,2,2)", "--beta-layers", "(2,3,0),(1,3,0)", "--fc-dim", "8"]


@pytest.mark.parametrize("task,arch,args,needle", [
    ("translation", "rnnsearch_iwslt_de_en", RNN + ["--encoder-hidden-size", "0"], "--encoder-hidden-size must be an integer >= 1 (got 0)"),
    ("translation", "rnnsearch_iwslt_de_en", RNN + ["--decoder-layers", "-1"], "--decoder-layers must be an integer >= 1 (got -1)"),
    ("translation", "mc_rnn_iwslt_de_en_2", RNN + ["--mc-channels", "0"], "--mc-channels"),
    ("translation", "parallel_lstm_zh_en_wide3", RNN + ["--wide", "0"], "--wide must be an integer >= 1 (got 0)"),
    ("translation", "parallel_lstm_zh_en_baseline", RNN + ["--encoder-embed-dim", "0"], "--encoder-embed-dim must be"),
    ("language_modeling", "parallel_lstm_lm_1950h_wide1", LM + ["--wide", "0"], "--wide must be an integer >= 1 (got 0)"),
    ("language_modeling", "parallel_lstm_lm_1950h_wide1", ["--decoder-embed-dim", "8", "--decoder-hidden-size", "10",
                                                          "--wide", "3"], "--decoder-hidden-size 10 must be divisible by --wide 3"),
    ("language_modeling", "mc_rnn_lm_ptb", LM + ["--decoder-hidden-size", "0"], "--decoder-hidden-size must be an integer >= 1 (got 0)"),
    ("language_modeling", "gencnn_paper", GENCNN + ["--decoder-embed-dim", "0"], "--decoder-embed-dim must be an integer >= 1 (got 0)"),
    ("language_modeling", "gencnn_paper", GENCNN + ["--alpha-length", "0"], "--alpha-length must be an integer >= 1 (got 0)"),
    ("translation", "dpn_s2s_iwslt_de_en", DPN + ["--encoder-conv-dim", "0"], "--encoder-conv-dim must be an integer >= 1 (got 0)"),
    ("translation", "dpn_s2s_iwslt_de_en", DPN + ["--decoder-attention-heads", "3"], "--decoder-embed-dim 8 must be divisible by --decoder-attention-heads 3"),
    ("lattice_translation", "lattice_dwl_gating", RNN + ["--encoder-hidden-size", "0"], "--encoder-hidden-size must be an integer >= 1 (got 0)"),
])
def test_impossible_sizes(capsys, data, lm_data, task, arch, args, needle):
    from fairseq import options, tasks

    data_dir, task_args = lm_data if task == "language_modeling" else data

    def build():
        argv = [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", task, "--arch", arch, "--cpu",
                *task_args, *args]
        parsed = options.parse_args_and_arch(options.get_training_parser(), argv)
        return tasks.setup_task(parsed).build_model(parsed)

    code, err = call(capsys, build)
    assert_one_line(code, err, needle)


def test_train_cli_wide_0_is_one_line(tmp_path, data):
    """Through the real fairseq-train: the plugin's excepthook prints one line, status 2."""
    data_dir, task_args = data
    save = tmp_path / "ckpt"
    code, err = run(BIN / "fairseq-train", data_dir, "--user-dir", REPO / "fairseq_local", "--task", "translation",
                    "--arch", "parallel_lstm_zh_en_wide3", *task_args, *RNN, "--wide", "0", "--cpu",
                    "--max-tokens", "200", "--save-dir", save)
    assert code == 2
    assert_one_line(code, err, "fairseq-train: error: --wide must be an integer >= 1 (got 0)",
                    leftovers=[save / "checkpoint_last.pt"])


def test_hydra_train_bad_size_is_one_line(tmp_path, data):
    """fairseq-hydra-train: Hydra's job exception becomes the same one line (status 2)."""
    data_dir, _ = data
    code, err = run(BIN / "fairseq-hydra-train", "--config-dir", REPO / "configs" / "mc_rnn",
                    "--config-name", "table2_mc_rnn_2", f"task.data={data_dir}", "task.source_lang=src",
                    "task.target_lang=tgt", f"common.user_dir={REPO / 'fairseq_local'}", "common.cpu=true",
                    "model.encoder_hidden_size=0", f"checkpoint.save_dir={tmp_path / 'ckpt'}",
                    f"hydra.run.dir={tmp_path / 'hydra'}", "distributed_training.distributed_world_size=1")
    assert code == 2
    assert_one_line(code, err, "error: --encoder-hidden-size must be an integer >= 1 (got 0)")


# ------------------------------------------------------------------------------------------------
# data directories: lattice task on plain data, incomplete splits (our task and fairseq's)
# ------------------------------------------------------------------------------------------------
def _setup_task(task, data_dir, extra):
    from fairseq import options, tasks

    argv = [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", task, *extra]
    parser = options.get_training_parser()
    parsed = options.parse_args_and_arch(parser, argv + ["--arch", "lstm" if task != "language_modeling" else "lstm_lm"])
    return tasks.setup_task(parsed)


def test_lattice_task_on_plain_data(capsys, data):
    data_dir, task_args = data
    task = _setup_task("lattice_translation", data_dir, task_args)
    code, err = call(capsys, task.load_dataset, "train")
    assert_one_line(code, err, "train.src-tgt.src.bin holds plain binarized text, not lattices",
                    "scripts/preprocess_lattices.py")


@pytest.mark.parametrize("task,remove,split", [
    ("translation", "train.src-tgt.tgt.idx", "train"),
    ("translation", "valid.src-tgt.src.bin", "valid"),
    ("language_modeling", "valid.idx", "valid"),
    ("language_modeling", "train.bin", "train"),
])
def test_incomplete_split(tmp_path, capsys, data, lm_data, task, remove, split):
    src_dir, task_args = lm_data if task == "language_modeling" else data
    d = tmp_path / "bin"
    shutil.copytree(src_dir, d)
    (d / remove).unlink()
    t = _setup_task(task, d, task_args)
    code, err = call(capsys, t.load_dataset, split)
    other = remove[:-4] + (".bin" if remove.endswith(".idx") else ".idx")
    assert_one_line(code, err, f"{d / remove} is missing but {d / other} exists")


def test_truncated_bin_is_refused(tmp_path, capsys, data):
    data_dir, task_args = data
    d = tmp_path / "bin"
    shutil.copytree(data_dir, d)
    b = d / "train.src-tgt.src.bin"
    b.write_bytes(b.read_bytes()[:-6])
    t = _setup_task("translation", d, task_args)
    code, err = call(capsys, t.load_dataset, "train")
    assert_one_line(code, err, f"{b} has", "its index")


# ------------------------------------------------------------------------------------------------
# fairseq-generate / generate.sh
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("option,value,needle", [
    ("beam", -1, "--beam must be >= 1 (got -1)"),
    ("nbest", 0, "--nbest must be >= 1 (got 0)"),
    ("nbest", 9, "--nbest 9 must not exceed --beam 5"),
    ("max_len_b", -3, "--max-len-b must be >= 0 (got -3)"),
])
def test_generation_options(capsys, ckpt, data, option, value, needle):
    """Checked in FairseqTask.build_generator: fairseq-generate, -interactive, --eval-bleu, hub."""
    from fairseq import checkpoint_utils
    from fairseq.dataclass.configs import GenerationConfig

    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(ckpt["good"])], arg_overrides={"data": str(data[0])})
    gen = GenerationConfig()
    gen.beam = 5
    setattr(gen, option, value)
    code, err = call(capsys, task.build_generator, models, gen)
    assert_one_line(code, err, needle)


@pytest.mark.parametrize("case", ["beam_0", "truncated_checkpoint"])
def test_generate_cli(tmp_path, ckpt, data, case):
    data_dir, task_args = data
    path = ckpt["truncated"] if case == "truncated_checkpoint" else ckpt["good"]
    out = tmp_path / "gen"
    code, err = run(BIN / "fairseq-generate", data_dir, "--user-dir", REPO / "fairseq_local", *task_args,
                    "--path", path, "--beam", "0" if case == "beam_0" else "2", "--cpu", "--results-path", out)
    needle = "--beam must be >= 1 (got 0)" if case == "beam_0" else f"{path} is not a complete checkpoint"
    assert code == 2
    assert_one_line(code, err, "fairseq-generate: error:", needle)


def test_generate_sh_missing_subset(tmp_path, ckpt, data):
    data_dir, task_args = data
    out = tmp_path / "gen"
    code, err = run("bash", SCRIPTS / "generate.sh", "--data", data_dir, "--path", ckpt["good"], "--out", out,
                    "--subset", "test7", "--bpe", "none", "--", *task_args)
    assert_one_line(code, err, "test7", leftovers=[out])
    assert not list(tmp_path.glob("gen.tmp*"))
