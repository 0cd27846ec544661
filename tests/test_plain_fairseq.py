"""Loading the plugin leaves fairseq's own models as they were (fairseq_local/ownership.py).

fairseq's own ``lstm``, ``transformer`` and ``fconv_lm`` go through fairseq-preprocess, -train, a
resumed -train, -validate, -generate, -interactive (``--input FILE`` and a pipe) and -eval-lm once
without the plugin and once with ``--user-dir fairseq_local``; the binarized data, the checkpoints'
weights, optimizer state and extra state, the logged losses, the hypotheses and their scores are
compared bit for bit (CPU, one thread, fixed seed).  In-process callers fairseq's API allows work
with the plugin loaded: ``fairseq_cli.interactive.main`` with a replaced ``sys.stdin`` (an
``io.StringIO``), fairseq's ``checkpoint_utils.load_checkpoint`` with a partial checkpoint config,
which takes no ``SAVE_DIR/.train.lock`` for a model that is not ours.
"""
import argparse
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
import torch

import fairseq_local  # noqa: F401  (the plugin, as --user-dir loads it)
from contract_lib import USER_DIR, console_script
from fairseq import checkpoint_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.modules import LearnedPositionalEmbedding
from fairseq.tasks import FairseqTask
from fairseq_cli import interactive
from fairseq_local import ownership
from fairseq_local.data.synthetic import SyntheticTranslationCorpus
from fairseq_local.data.text_input import buffered_read
from fairseq_local_core.errors import ConfigError
from fairseq_local import save_dir_lock
from fairseq_local.safe_loading import safe_load

# fairseq 0.12 loads its checkpoints with torch.load's default, which torch >= 2.6 made weights_only:
# both sides load as fairseq expects (the plugin passes weights_only=True with its allow-list itself)
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1",
           TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
COMMON = ["--cpu", "--num-workers", "0", "--seed", "1", "--no-progress-bar", "--log-format", "json",
          "--log-interval", "1"]
OPTIM = ["--optimizer", "adam", "--lr", "0.01", "--batch-size", "5"]
TRAIN = OPTIM + ["--no-epoch-checkpoints"]
TRANSLATION = ["--task", "translation", "--source-lang", "src", "--target-lang", "tgt"]
ARCHS = {
    "lstm": ["--arch", "lstm", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
             "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8"],
    "transformer": ["--arch", "transformer", "--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "16",
                    "--encoder-layers", "1", "--encoder-attention-heads", "2", "--decoder-embed-dim", "8",
                    "--decoder-ffn-embed-dim", "16", "--decoder-layers", "1", "--decoder-attention-heads", "2"],
    "fconv_lm": ["--arch", "fconv_lm", "--decoder-embed-dim", "8", "--decoder-layers", "[(8, 3)] * 2",
                 "--decoder-out-embed-dim", "8"],
}
MODES = ("plain", "plugin")
_TIMING = ("wps", "ups", "wall", "train_wall", "gb_free", "cuda_gb_allocated", "cuda_gb_reserved", "cuda_gb_free")


def run(name, *args, mode, stdin=None):
    """A fairseq console script, without the plugin (``plain``) or with ``--user-dir`` (``plugin``)."""
    cmd = [console_script(name), *map(str, args)] + (["--user-dir", USER_DIR] if mode == "plugin" else [])
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def stats(log):
    """The logged statistics of a run, timing fields left out (they differ from run to run)."""
    out = []
    for line in log.splitlines():
        if "{" in line and line.rstrip().endswith("}"):
            try:
                record = json.loads(line[line.index("{"):])
            except ValueError:
                continue
            out.append({k: v for k, v in record.items() if not any(k.endswith(t) for t in _TIMING)})
    assert out, log[-2000:]
    return out


def outputs(log):
    """fairseq-generate / -interactive's result lines (S-, H-, D-, P-), in id order."""
    lines = [line for line in log.splitlines() if line[:2] in ("S-", "H-", "D-", "P-", "T-")]
    assert lines, log[-2000:]
    return sorted(lines)


def assert_same_state(a, b):
    """Two checkpoints with the same weights, optimizer state and extra state (bit for bit)."""
    sa, sb = safe_load(a), safe_load(b)
    assert sa["model"].keys() == sb["model"].keys()
    for key in sa["model"]:
        assert torch.equal(sa["model"][key], sb["model"][key]), key
    oa, ob = sa["last_optimizer_state"]["state"], sb["last_optimizer_state"]["state"]
    assert oa.keys() == ob.keys()
    for key in oa:
        for name, value in oa[key].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(ob[key][name])), (key, name)
    ea, eb = sa["extra_state"], sb["extra_state"]
    # the one key of ours in a checkpoint of fairseq's own model: its dictionaries' fingerprints (a
    # safety check on loading, said once in the log); no resume state (exact_resume.py is for our runs)
    assert set(eb) - set(ea) == {"dictionaries"} and set(ea) <= set(eb)
    for key in ("train_iterator", "best", "val_loss", "previous_stop_point"):
        assert ea.get(key) == eb.get(key), key


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Raw text, binarized by fairseq-preprocess without and with the plugin (compared in a test)."""
    tmp = tmp_path_factory.mktemp("plain_fairseq")
    raw = tmp / "raw"
    raw.mkdir()
    corpus = SyntheticTranslationCorpus(seed=0, max_len=9)
    for split, n in (("train", 23), ("valid", 13), ("test", 13)):  # 13 = 8 + 5: fairseq's multiple 8 drops 5
        pairs = corpus.sample(n)
        _write(raw / f"{split}.src", [s for s, _ in pairs])
        _write(raw / f"{split}.tgt", [t for _, t in pairs])
        _write(raw / f"{split}.txt", [t for _, t in pairs])
    out = {}
    for mode in MODES:
        mt, lm = tmp / mode / "mt", tmp / mode / "lm"
        run("fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt", "--trainpref", raw / "train",
            "--validpref", raw / "valid", "--testpref", raw / "test", "--destdir", mt, "--workers", "1", mode=mode)
        run("fairseq-preprocess", "--only-source", "--trainpref", raw / "train.txt", "--validpref",
            raw / "valid.txt", "--testpref", raw / "test.txt", "--destdir", lm, "--workers", "1", mode=mode)
        out[mode] = {"mt": mt, "lm": lm}
    return tmp, raw, out


def test_preprocess_writes_the_same_files(corpora):
    _, _, out = corpora
    for kind in ("mt", "lm"):
        plain, plugin = out["plain"][kind], out["plugin"][kind]
        names = sorted(p.name for p in plain.iterdir() if p.name != "preprocess.log")
        assert names == sorted(p.name for p in plugin.iterdir() if p.name != "preprocess.log")
        for name in names:
            assert (plain / name).read_bytes() == (plugin / name).read_bytes(), name


def _train(data, save, arch, mode, max_update, task_args):
    return run("fairseq-train", data, *task_args, *ARCHS[arch], *COMMON, *TRAIN, "--max-update", max_update,
               "--save-dir", save, mode=mode)


@pytest.fixture(scope="module")
def translation_runs(corpora):
    """``lstm`` and ``transformer``: trained for 3 updates, then resumed to 6, each mode in its own
    --save-dir (from the plain mode's binarized data, so that both read the same files)."""
    tmp, _, out = corpora
    data = out["plain"]["mt"]
    runs = {}
    for arch in ("lstm", "transformer"):
        for mode in MODES:
            save = tmp / "runs" / arch / mode
            first = _train(data, save, arch, mode, 3, TRANSLATION)
            resumed = _train(data, save, arch, mode, 6, TRANSLATION)
            runs[arch, mode] = SimpleNamespace(save=save, first=first, resumed=resumed)
    return data, runs


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_train_and_resume_are_fairseqs(translation_runs, arch):
    _, runs = translation_runs
    plain, plugin = runs[arch, "plain"], runs[arch, "plugin"]
    assert stats(plain.first) == stats(plugin.first)
    assert stats(plain.resumed) == stats(plugin.resumed)
    assert "Loaded checkpoint" in plugin.resumed  # the second run did resume
    assert_same_state(plain.save / "checkpoint_last.pt", plugin.save / "checkpoint_last.pt")
    assert_same_state(plain.save / "checkpoint_best.pt", plugin.save / "checkpoint_best.pt")
    assert not (plugin.save / save_dir_lock.LOCK_NAME).exists()  # the lock is for our models' runs


@pytest.fixture(scope="module")
def epoch_resumes(corpora):
    """``lstm`` trained for 2 epochs in one run, and again from the end of epoch 1 (that run's
    ``checkpoint1.pt`` as ``checkpoint_last.pt`` of a new --save-dir), each mode writing and resuming
    its own checkpoints: the case of fairseq's ``tests/test_reproducibility.py``."""
    tmp, _, out = corpora
    args = [out["plain"]["mt"], *TRANSLATION, *ARCHS["lstm"], *COMMON, *OPTIM, "--max-epoch", "2"]
    logs = {}
    for mode in MODES:
        whole, resumed = tmp / "epochs" / mode / "whole", tmp / "epochs" / mode / "resumed"
        logs[mode, "whole"] = run("fairseq-train", *args, "--save-dir", whole, mode=mode)
        resumed.mkdir(parents=True)
        shutil.copyfile(whole / "checkpoint1.pt", resumed / "checkpoint_last.pt")
        logs[mode, "resumed"] = run("fairseq-train", *args, "--save-dir", resumed, mode=mode)
    return {key: stats(log) for key, log in logs.items()}


def test_resume_from_an_epoch_end_is_fairseqs(epoch_resumes):
    """fairseq makes a resumed run's batches at the resumed epoch (sentences of equal length ordered by
    a permutation seeded with ``--seed`` plus that epoch), where the uninterrupted run keeps those of
    epoch 1: where equal lengths meet at a batch boundary, its epoch 2 trains on other batches.  With
    the plugin loaded, fairseq's own model resumes as fairseq resumes (``patches/exact_resume.py``
    makes our runs alone continue with the stored batches)."""
    assert epoch_resumes["plugin", "whole"] == epoch_resumes["plain", "whole"]
    assert epoch_resumes["plugin", "resumed"] == epoch_resumes["plain", "resumed"]
    # the case compared: fairseq's own resumed epoch 2 is not that of its uninterrupted run
    whole, resumed = ([r for r in epoch_resumes["plain", kind] if r.get("epoch") == 2 and "loss" in r]
                      for kind in ("whole", "resumed"))
    assert resumed and resumed != whole


@pytest.mark.parametrize("arch", ["lstm", "transformer"])
def test_generate_is_fairseqs(translation_runs, arch):
    data, runs = translation_runs
    logs = {mode: run("fairseq-generate", data, "--path", runs[arch, mode].save / "checkpoint_last.pt",
                      "--beam", "2", "--nbest", "2", "--batch-size", "8", "--cpu", mode=mode) for mode in MODES}
    assert outputs(logs["plain"]) == outputs(logs["plugin"])
    # fairseq's own batching: its multiple 8 leaves 5 of the 13 test sentences out, with and without
    assert len([line for line in outputs(logs["plugin"]) if line.startswith("S-")]) == 8


def test_validate_is_fairseqs(translation_runs):
    data, runs = translation_runs
    logs = {mode: run("fairseq-validate", data, "--path", runs["lstm", mode].save / "checkpoint_last.pt",
                      "--task", "translation", "--batch-size", "8", "--cpu", "--log-format", "json", mode=mode)
            for mode in MODES}
    assert stats(logs["plain"]) == stats(logs["plugin"])


def test_interactive_is_fairseqs_from_a_file_and_a_pipe(corpora, translation_runs):
    _, raw, _ = corpora
    data, runs = translation_runs
    text = (raw / "test.src").read_text()
    logs = {}
    for mode in MODES:
        path = runs["lstm", mode].save / "checkpoint_last.pt"
        args = [data, "--path", path, "--beam", "2", "--buffer-size", "4", "--batch-size", "4", "--cpu"]
        logs[mode, "file"] = run("fairseq-interactive", *args, "--input", raw / "test.src", mode=mode)
        logs[mode, "pipe"] = run("fairseq-interactive", *args, mode=mode, stdin=text)
    assert outputs(logs["plain", "file"]) == outputs(logs["plugin", "file"]) == outputs(logs["plugin", "pipe"])
    assert outputs(logs["plain", "pipe"]) == outputs(logs["plugin", "pipe"])
    assert len([line for line in outputs(logs["plugin", "pipe"]) if line.startswith("H-")]) == 13


def test_interactive_main_in_process_reads_a_replaced_stdin(corpora, translation_runs, capsys, monkeypatch):
    """fairseq's own API: ``fairseq_cli.interactive.main`` with ``sys.stdin`` an ``io.StringIO``, the
    plugin loaded in this process; the hypotheses are those of plain fairseq-interactive."""
    _, raw, _ = corpora
    data, runs = translation_runs
    path = runs["lstm", "plain"].save / "checkpoint_last.pt"
    args = [str(data), "--path", str(path), "--beam", "2", "--buffer-size", "4", "--batch-size", "4", "--cpu"]
    reference = outputs(run("fairseq-interactive", *args, "--input", raw / "test.src", mode="plain"))
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.setattr(sys, "stdin", io.StringIO((raw / "test.src").read_text()))
    parsed = options.parse_args_and_arch(options.get_interactive_generation_parser(), args + ["--user-dir", USER_DIR])
    capsys.readouterr()
    interactive.main(convert_namespace_to_omegaconf(parsed))
    assert outputs(capsys.readouterr().out) == reference
    assert not ownership.last_model_is_ours()


def test_our_reader_takes_any_text_stream(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("下雨天\n  a b \n\nc\n"))
    assert [line for chunk in buffered_read("-", 3) for line in chunk] == ["下雨天", "a b", "", "c"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("x\ny\n".encode()), encoding="utf-8"))
    assert list(buffered_read("-", 1)) == [["x"], ["y"]]


@pytest.fixture(scope="module")
def lm_runs(corpora):
    tmp, _, out = corpora
    data = out["plain"]["lm"]
    task = ["--task", "language_modeling", "--tokens-per-sample", "16"]
    runs = {mode: _train(data, tmp / "runs" / "fconv_lm" / mode, "fconv_lm", mode, 4, task) for mode in MODES}
    return data, tmp / "runs" / "fconv_lm", runs


def test_language_model_trains_and_scores_as_fairseqs(lm_runs):
    data, saves, runs = lm_runs
    assert stats(runs["plain"]) == stats(runs["plugin"])
    assert_same_state(saves / "plain" / "checkpoint_last.pt", saves / "plugin" / "checkpoint_last.pt")
    logs = {mode: run("fairseq-eval-lm", data, "--path", saves / mode / "checkpoint_last.pt", "--tokens-per-sample",
                      "16", "--batch-size", "8", "--cpu", "--gen-subset", "test", mode=mode) for mode in MODES}
    lines = {mode: [line.split("|")[-1] for line in logs[mode].splitlines() if "Loss (base 2)" in line]
             for mode in MODES}
    assert lines["plain"] and lines["plain"] == lines["plugin"]


def test_load_checkpoint_with_a_partial_config_takes_no_lock_for_fairseqs_models(tmp_path):
    """fairseq's programmatic callers pass what fairseq reads (its own tests: a mock trainer and a
    config without ``no_save``; a ``pathlib.Path`` save_dir): fairseq's code runs, with no lock file."""
    cfg = SimpleNamespace(save_dir=tmp_path / "save", restore_file="checkpoint_last.pt", finetune_from_model=None,
                          reset_optimizer=False, reset_lr_scheduler=False, reset_meters=False,
                          reset_dataloader=False, optimizer_overrides="{}")
    trainer = mock.MagicMock()
    trainer.load_checkpoint.return_value = None  # no checkpoint to resume from
    trainer.get_train_iterator.return_value = mock.MagicMock(epoch=1)
    checkpoint_utils.load_checkpoint(cfg, trainer)
    trainer.load_checkpoint.assert_called_once()
    assert not (tmp_path / "save" / save_dir_lock.LOCK_NAME).exists()
    assert save_dir_lock.save_dir_of(SimpleNamespace(save_dir=Path("x"))) == "x"
    assert save_dir_lock.save_dir_of(SimpleNamespace(save_dir="x", no_save=True)) is None
    assert save_dir_lock.save_dir_of(SimpleNamespace()) is None


def test_asynchronous_checkpoint_writes_stay_asynchronous(caplog, tmp_path):
    """``--write-checkpoints-asynchronously``: fairseq's asynchronous writer (iopath's ``opena``), said
    once in the log; a synchronous write is atomic (no temporary file left, the bytes fairseq writes)."""
    with mock.patch.object(checkpoint_utils.PathManager, "opena") as opena, \
            mock.patch.object(checkpoint_utils, "_torch_persistent_save") as save, caplog.at_level("INFO"):
        checkpoint_utils.torch_persistent_save({}, "async_checkpoint.pt", async_write=True)
        checkpoint_utils.torch_persistent_save({}, "async_checkpoint.pt", async_write=True)
    opena.assert_called_with("async_checkpoint.pt", "wb")
    assert save.call_count == 2
    assert [r.getMessage() for r in caplog.records].count(
        "--write-checkpoints-asynchronously: checkpoints are written by fairseq's asynchronous writer, not "
        "atomically (fairseq_local/patches/atomic_checkpoints.py)") <= 1
    path = tmp_path / "sync.pt"
    checkpoint_utils.torch_persistent_save({"w": torch.arange(3)}, str(path))
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.arange(3)) and os.listdir(tmp_path) == ["sync.pt"]


def test_parser_errors_change_fairseqs_parsers_only(capsys):
    """``argparse.ArgumentParser.error`` is one line for fairseq's CLI parsers, argparse's own for any
    other parser in the process (a notebook's, a library's)."""
    choices = [f"arch{i}" for i in range(12)]
    other = argparse.ArgumentParser(prog="other")
    other.add_argument("--arch", choices=choices)
    with pytest.raises(SystemExit):
        other.parse_args(["--arch", "arch1x"])
    err = capsys.readouterr().err
    assert err.startswith("usage: other") and "invalid choice: 'arch1x' (choose from" in err
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(options.get_training_parser(), ["data", "--arch", "transfromer"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--arch: unknown choice 'transfromer'; did you mean transformer" in err[0], err


class _Dataset:
    """What FairseqTask.filter_indices_by_size asks of a dataset: sentence 1 is longer than allowed."""

    def filter_indices_by_size(self, indices, max_sizes):
        return indices[:1], [1]

    def size(self, index):
        return (9, 9)


@pytest.mark.parametrize("learned", [False, True])
def test_long_sentence_message_fits_the_model_that_hit_it(learned):
    """Without learned position embeddings (fairseq's ``lstm``, our RNNs) the fix is raising the
    limits, which the one line names; with them (``fconv``) fairseq's own advice stands."""
    task = FairseqTask(None)
    model = torch.nn.Sequential(LearnedPositionalEmbedding(16, 4, padding_idx=1) if learned else torch.nn.Embedding(16, 4))
    ownership.note_model(task, model)
    with pytest.raises(Exception) as e:
        task.filter_indices_by_size(np.arange(2), _Dataset(), (7, 7), ignore_invalid_inputs=False)
    if learned:
        assert type(e.value) is Exception and "skip this example with --skip-invalid-size-inputs-valid-test" in str(e.value)
    else:
        assert isinstance(e.value, ConfigError) and str(e.value).startswith(
            "Size of sample #1 is invalid (=(9, 9)) since max_positions=(7, 7) (source and target tokens; "
            "--max-source-positions / --max-target-positions): Sequential has no learned position embeddings, so raise them")


def _our_frames(fn):
    """The functions of fairseq_local that ``fn()`` calls (by their file and name)."""
    root = str(Path(fairseq_local.__file__).parent)
    seen = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            seen.add(f"{frame.f_code.co_filename[len(root) + 1:]}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_fairseqs_lstm_runs_no_code_of_ours():
    """fairseq's ``lstm`` model (forward and backward) and torch's RNNs run no function of the plugin;
    our own layer does (the check sees it)."""
    from fairseq.data import Dictionary
    from fairseq.models.lstm import LSTMDecoder, LSTMEncoder, LSTMModel
    from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

    dictionary = Dictionary()
    for word in "abcd":
        dictionary.add_symbol(word)
    torch.manual_seed(0)
    model = LSTMModel(LSTMEncoder(dictionary, embed_dim=8, hidden_size=8),
                      LSTMDecoder(dictionary, embed_dim=8, hidden_size=8, out_embed_dim=8, encoder_output_units=8))
    tokens = torch.tensor([[4, 5, 6, 2], [1, 7, 5, 2]])

    def fairseq_step():
        out, _ = model(tokens, torch.tensor([4, 3]), tokens)
        out.sum().backward()
        for cell in ("LSTM", "GRU", "RNN"):
            rnn_out, _ = getattr(torch.nn, cell)(3, 4)(torch.randn(5, 2, 3))
            rnn_out.sum().backward()

    assert _our_frames(fairseq_step) == set()
    ours = TorchRNNLayer("lstm", 3, 4)
    assert "modules/rnn_precision.py:forward" in _our_frames(lambda: ours(torch.randn(5, 2, 3), None, None))


def test_loading_the_plugin_leaves_torchs_rnns_as_they_are():
    """``torch.nn.LSTM/GRU/RNN.forward`` are torch's own after ``--user-dir fairseq_local`` loads the plugin."""
    code = ("import sys, torch\nfrom argparse import Namespace\nfrom fairseq import utils\n"
            "before = {c: getattr(torch.nn, c).forward for c in ('LSTM', 'GRU', 'RNN')}\n"
            "utils.import_user_module(Namespace(user_dir=sys.argv[1]))\n"
            "assert 'fairseq_local.patches' in sys.modules\n"
            "print([c for c, f in before.items() if getattr(torch.nn, c).forward is not f])\n")
    proc = subprocess.run([sys.executable, "-c", code, str(USER_DIR)], capture_output=True, text=True, env=ENV,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
