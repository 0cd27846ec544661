"""No split loses a sentence to fairseq's batching (fairseq issues #5036/#5351).

fairseq's ``batch_by_size`` drops a last batch whose size is not a multiple of
``--required-batch-size-multiple``; ``fairseq_local.patches.complete_batches`` keeps it.  Every
entry point is checked on 61-sentence splits (61 = 7 * 8 + 5) with the multiple 8: fairseq-train's
validation and fairseq-validate count every sentence and token, fairseq-generate (fairseq's own
``translation`` task and our ``lattice_translation``) writes every id once, ``scripts/generate.sh``
writes one hypothesis per sentence and fails loudly when generation returns fewer,
fairseq-hydra-train validates every sentence, fairseq-eval-lm scores every token.
"""
import re
import subprocess
import sys
import types

import numpy as np
import pytest

import fairseq_local  # noqa: F401  (installs the patches)
from contract_lib import REPO, USER_DIR, console_script, hydra_train, make_lm_data, make_translation_data, run_cmd
from fairseq.data import data_utils
from fairseq_local.patches import complete_batches

N = 61  # sentences in every valid/test split here
MULT = ["--required-batch-size-multiple", "8"]
# one of our models on fairseq's translation task (complete batches are for our models and tasks;
# fairseq's own models batch as in fairseq, tests/test_plain_fairseq.py)
TINY_LSTM = ["--arch", "rnnsearch", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
             "--decoder-hidden-size", "8", "--attention-dim", "8"]
COMMON = ["--cpu", "--num-workers", "0", "--seed", "1", "--no-progress-bar", "--log-format", "simple"]


def _original():
    return data_utils.batch_by_size.__wrapped__


# ------------------------------------------------------------------------------------------------
# the batching itself
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,max_sentences,max_tokens,use_vec", [
    (61, 16, None, True), (61, 16, None, False), (61, 8, None, True), (60, 64, None, True),
    (5, 16, None, True), (61, None, 60, True), (61, None, 60, False), (1, None, None, True),
])
def test_batches_cover_every_index_once(n, max_sentences, max_tokens, use_vec):
    rng = np.random.RandomState(n)
    lengths = rng.randint(1, 7, size=n).astype(np.int64)
    indices = np.argsort(lengths, kind="mergesort").astype(np.int64)
    vec = lengths[indices] if use_vec else None
    args = dict(num_tokens_vec=vec, max_tokens=max_tokens, max_sentences=max_sentences,
                required_batch_size_multiple=8)
    with complete_batches.batching_for(True):  # the batches of a task of ours
        ours = data_utils.batch_by_size(indices, lambda i: int(lengths[i]), **args)
    theirs = _original()(indices, lambda i: int(lengths[i]), **args)
    plain = data_utils.batch_by_size(indices, lambda i: int(lengths[i]), **args)  # fairseq's own tasks
    assert [list(b) for b in plain] == [list(b) for b in theirs]
    assert np.array_equal(np.concatenate(ours), indices)  # every index once, in order
    assert sum(map(len, theirs)) < n  # fairseq itself drops the remainder here
    assert [list(b) for b in ours[:len(theirs)]] == [list(b) for b in theirs]  # its batches are kept as they are
    for b in ours:
        assert 0 < len(b) <= (max_sentences or n)
        assert max_tokens is None or len(b) * lengths[b].max() <= max_tokens


def test_no_indices_no_batches():
    # every sentence filtered out (--skip-invalid-size-inputs-valid-test): fairseq fails on b[-1]
    none = np.zeros(0, dtype=np.int64)
    with pytest.raises(IndexError):
        _original()(none, lambda i: 1, max_sentences=16, required_batch_size_multiple=8)
    with complete_batches.batching_for(True):
        assert data_utils.batch_by_size(none, lambda i: 1, max_sentences=16, required_batch_size_multiple=8) == []


def test_install_reaches_names_imported_before_the_plugin(monkeypatch):
    original = _original()
    early = types.ModuleType("imported_batch_by_size_early")
    early.batch_by_size = original  # like `from fairseq.data.data_utils import batch_by_size`
    monkeypatch.setitem(sys.modules, early.__name__, early)
    monkeypatch.setattr(data_utils, "batch_by_size", original)
    complete_batches.install()
    complete_batches.install()  # idempotent: wraps once
    assert early.batch_by_size is data_utils.batch_by_size is not original
    assert data_utils.batch_by_size.__wrapped__ is original
    with complete_batches.batching_for(True):
        assert len(early.batch_by_size(np.arange(5), lambda i: 1, max_sentences=16, required_batch_size_multiple=8)[0]) == 5


# ------------------------------------------------------------------------------------------------
# fairseq's own translation task through the console scripts
# ------------------------------------------------------------------------------------------------
def _valid_stat(text, name):
    """A statistic of the last "valid on 'valid' subset" line of a fairseq log."""
    lines = [line for line in text.splitlines() if "valid on 'valid' subset" in line]
    assert lines, text[-3000:]
    match = re.search(rf"\| {name} ([\d.]+)", lines[-1])
    assert match, lines[-1]
    return float(match.group(1))


def _target_tokens(prefix, dictionary):
    from fairseq.data import Dictionary

    ds = data_utils.load_indexed_dataset(str(prefix), Dictionary.load(str(dictionary)))
    assert len(ds) == N
    return int(ds.sizes.sum())  # tokens + </s>, what the criterion counts


def _ids(text, kind):
    return sorted(int(line.split("\t")[0][2:]) for line in text.splitlines() if line.startswith(kind + "-"))


@pytest.fixture(scope="module")
def translation(tmp_path_factory):
    """61-sentence valid/test splits and a tiny fairseq `lstm` trained for 2 updates, validated with
    8-sentence batches and the multiple 8 (7 batches of 8 + 5)."""
    tmp = tmp_path_factory.mktemp("translation")
    data, task_args = make_translation_data(tmp, n_train=48, n_valid=N)
    save = tmp / "ckpt"
    proc = run_cmd([console_script("fairseq-train"), data, "--user-dir", USER_DIR, "--task", "translation",
                    *task_args, *TINY_LSTM, *COMMON, *MULT, "--optimizer", "adam", "--lr", "0.01",
                    "--batch-size", "16", "--batch-size-valid", "8", "--max-update", "2",
                    "--save-dir", save, "--no-epoch-checkpoints"])
    return data, task_args, save / "checkpoint_last.pt", proc.stdout + proc.stderr


def test_train_validation_counts_every_sentence(translation):
    data, _, _, log = translation
    ntokens = _target_tokens(data / "valid.src-tgt.tgt", data / "dict.tgt.txt")
    # fairseq-train logs the mean per batch: 8 batches (7 of 8 sentences + 5), not 7 of 8
    assert _valid_stat(log, "bsz") == pytest.approx(N / 8, abs=0.051)
    assert _valid_stat(log, "wpb") == pytest.approx(ntokens / 8, abs=0.051)


def test_validate_counts_every_sentence(translation):
    data, task_args, ckpt, _ = translation
    proc = run_cmd([console_script("fairseq-validate"), data, "--user-dir", USER_DIR, "--task", "translation",
                    "--path", ckpt, *task_args,
                    *COMMON, *MULT, "--batch-size", "16", "--valid-subset", "valid"])
    log = proc.stdout + proc.stderr
    # fairseq-validate logs the totals
    assert _valid_stat(log, "bsz") == N
    assert _valid_stat(log, "wpb") == _target_tokens(data / "valid.src-tgt.tgt", data / "dict.tgt.txt")


def test_generate_sh_writes_every_sentence(translation, tmp_path):
    data, _, ckpt, _ = translation
    out = tmp_path / "gen"
    # generate.sh's default --batch-size 64: fairseq alone would make one batch of 56 and drop 5
    run_cmd(["bash", REPO / "scripts" / "generate.sh", "--data", data, "--path", ckpt, "--out", out,
             "--beam", "2", "--bpe", "none", "--", *MULT, "--max-len-b", "5"])
    log = (out / "generate-test.txt").read_text(encoding="utf-8")
    assert _ids(log, "S") == _ids(log, "H") == list(range(N))
    assert len((out / "hyp.txt").read_text(encoding="utf-8").splitlines()) == N
    from fairseq.data import Dictionary

    tgt_dict = Dictionary.load(str(data / "dict.tgt.txt"))
    refs = [" ".join(w if tgt_dict.index(w) != tgt_dict.unk() else "<<unk>>" for w in line.split())
            for line in (data.parent / "raw" / "test.tgt").read_text(encoding="utf-8").splitlines()]
    assert (out / "ref.tok.txt").read_text(encoding="utf-8").splitlines() == refs  # corpus order


def test_generate_sh_fails_when_sentences_are_missing(translation, tmp_path):
    data, _, ckpt, _ = translation
    out = tmp_path / "gen"
    out.mkdir()
    (out / "hyp.txt").write_text("earlier run\n")
    (out / "gen.json").write_text("{}\n")  # an earlier generate.sh output, which a rerun may replace
    # sentences longer than 7 tokens are skipped by fairseq-generate: fewer hypotheses than sentences
    proc = subprocess.run(["bash", str(REPO / "scripts" / "generate.sh"), "--data", str(data), "--path", str(ckpt),
                           "--out", str(out), "--beam", "1", "--bpe", "none", "--",
                           "--skip-invalid-size-inputs-valid-test", "--max-source-positions", "7"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert f"of the {N} sentences of subset 'test'" in last and "longer than the model's positions" in last \
        and "--skip-invalid-size-inputs-valid-test" in last, proc.stderr[-2000:]
    assert (out / "hyp.txt").read_text() == "earlier run\n" and sorted(p.name for p in out.iterdir()) == ["gen.json", "hyp.txt"]
    assert not list(tmp_path.glob("gen.tmp.*"))


# ------------------------------------------------------------------------------------------------
# our lattice task: fairseq-hydra-train's validation and fairseq-generate
# ------------------------------------------------------------------------------------------------
def test_lattice_hydra_validation_and_generate(tmp_path):
    from contract_specs.lattice import SPECS, make_lattice_data

    spec = SPECS["lattice_rnnsearch"]
    data, task_args = make_lattice_data(tmp_path, n_train=48, n_valid=N)
    save = tmp_path / "ckpt"
    proc = hydra_train(REPO / "configs" / "lattice" / "dwl_gating.yaml", [
        f"task.data={data}", f"common.user_dir={USER_DIR}", "common.cpu=true", "common.log_format=simple",
        "common.no_progress_bar=true", "optimization.max_update=2", "optimization.max_epoch=1",
        "dataset.batch_size=16", "dataset.batch_size_valid=8", "dataset.required_batch_size_multiple=8",
        "dataset.num_workers=0", f"checkpoint.save_dir={save}", "checkpoint.no_epoch_checkpoints=true",
        "distributed_training.distributed_world_size=1", *spec.hydra_overrides,
    ], tmp_path)
    log = proc.stdout + proc.stderr
    ntokens = _target_tokens(data / "valid.zh-en.en", data / "dict.en.txt")
    assert _valid_stat(log, "bsz") == pytest.approx(N / 8, abs=0.051)
    assert _valid_stat(log, "wpb") == pytest.approx(ntokens / 8, abs=0.051)

    proc = run_cmd([console_script("fairseq-generate"), data, "--user-dir", USER_DIR, "--task", "lattice_translation",
                    *task_args, "--path", save / "checkpoint_last.pt", "--gen-subset", "test", "--cpu", "--beam", "1",
                    "--max-len-b", "5", "--batch-size", "16", *MULT])
    assert _ids(proc.stdout, "S") == _ids(proc.stdout, "H") == list(range(N))


# ------------------------------------------------------------------------------------------------
# fairseq-eval-lm
# ------------------------------------------------------------------------------------------------
def test_eval_lm_scores_every_token(tmp_path):
    from fairseq.data import Dictionary

    data, task_args = make_lm_data(tmp_path, n_train=48, n_valid=N)
    save = tmp_path / "ckpt"
    run_cmd([console_script("fairseq-train"), data, "--user-dir", USER_DIR, "--task", "language_modeling",
             *task_args, "--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim", "8",
             "--decoder-ffn-embed-dim", "8", "--decoder-attention-heads", "1", *COMMON, "--optimizer", "adam",
             "--lr", "0.01", "--batch-size", "16", "--max-update", "1", "--save-dir", save,
             "--no-epoch-checkpoints", "--disable-validation"])
    proc = run_cmd([console_script("fairseq-eval-lm"), data, "--user-dir", USER_DIR, "--path", save / "checkpoint_last.pt",
                    *task_args, "--cpu", "--gen-subset", "valid", "--batch-size", "3", *MULT, "--num-workers", "0"])
    match = re.search(r"Evaluated ([\d,]+) tokens", proc.stdout + proc.stderr)
    assert match, proc.stderr[-2000:]
    ds = data_utils.load_indexed_dataset(str(data / "valid"), Dictionary.load(str(data / "dict.txt")))
    assert int(match.group(1).replace(",", "")) == int(ds.sizes.sum())
