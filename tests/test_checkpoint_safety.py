"""The three things that must never happen, whichever entry point trains:

1. a run killed while fairseq copies ``checkpoint_last.pt`` leaves it truncated (atomic writes);
2. two runs train into one ``--save-dir`` (lock held by the master);
3. a binarized split with ``.bin`` but no ``.idx`` loads as something else (refused).

The kill is deterministic: a small wrapper around ``fairseq-train`` replaces the routine that
copies checkpoint bytes with one that writes half of them and SIGKILLs its own process.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from contract_lib import REPO, make_translation_data
from fairseq_local_core.file_io import TMP_RE
from fairseq_local import save_dir_lock
from fairseq_local.patches import atomic_checkpoints

BIN = Path(sys.executable).parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
# one of our models (the --save-dir lock is taken for our models' runs; fairseq's own train as in fairseq)
TINY_LSTM = ["--arch", "rnnsearch", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8",
             "--decoder-embed-dim", "8", "--decoder-hidden-size", "8", "--attention-dim", "8"]

KILLING_TRAIN = textwrap.dedent("""
    # fairseq-train whose checkpoint copy to KILL_DEST (from KILL_SRC) SIGKILLs the process mid-write
    import os, signal, sys
    import fairseq_local  # installs the plugin's patches
    from fairseq_local.patches import atomic_checkpoints

    real_copy = atomic_checkpoints.copy_data

    def dying_copy(src, dst):
        if (os.path.basename(src.name) == os.environ["KILL_SRC"]
                and os.environ["KILL_DEST"] in os.path.basename(dst.name)):
            data = src.read()
            dst.write(data[: len(data) // 2])
            dst.flush()
            os.fsync(dst.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        real_copy(src, dst)

    atomic_checkpoints.copy_data = dying_copy
    from fairseq_cli.train import cli_main
    sys.argv[0] = "fairseq-train"
    cli_main()
""")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_translation_data(tmp_path_factory.mktemp("data"), n_train=32, n_valid=8)


def _argv(data, save, *extra):
    data_dir, task_args = data
    return [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", "translation", "--cpu",
            *task_args, *TINY_LSTM, "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "150",
            "--save-dir", str(save), "--no-progress-bar", "--log-format", "simple", "--num-workers", "0",
            "--seed", "3", "--max-epoch", "3", "--dropout", "0.2", *extra]


def _run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=dict(ENV, **kw), timeout=600)


def _state(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def test_kill_during_checkpoint_copy_then_resume(tmp_path, data):
    save = tmp_path / "killed"
    wrapper = tmp_path / "killing_train.py"
    wrapper.write_text(KILLING_TRAIN)
    killed = _run([sys.executable, wrapper, *_argv(data, save)], KILL_SRC="checkpoint2.pt",
                  KILL_DEST="checkpoint_last.pt", PYTHONPATH=str(REPO))
    assert killed.returncode == -9, killed.stderr[-3000:]
    # the copy died half-way: checkpoint_last.pt is still epoch 1's, complete; the half-written
    # bytes are in a temporary file that never took its name
    leftovers = [n for n in os.listdir(save) if TMP_RE.match(n)]
    assert len(leftovers) == 1 and leftovers[0].startswith(".checkpoint_last.pt.")

    def updates(path):
        return _state(path)["optimizer_history"][-1]["num_updates"]

    assert 0 < updates(save / "checkpoint_last.pt") == updates(save / "checkpoint1.pt") < updates(save / "checkpoint2.pt")

    resumed = _run([BIN / "fairseq-train", *_argv(data, save)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Loaded checkpoint" in resumed.stderr + resumed.stdout
    assert not [n for n in os.listdir(save) if TMP_RE.match(n)]  # cleaned under the lock
    killed_then_resumed = _state(save / "checkpoint_last.pt")

    # the same as a run stopped cleanly after epoch 1 and resumed: the kill cost nothing
    clean = tmp_path / "clean"
    for max_epoch in ("1", "3"):
        proc = _run([BIN / "fairseq-train", *_argv(data, clean), "--max-epoch", max_epoch])
        assert proc.returncode == 0, proc.stderr[-3000:]
    stopped_then_resumed = _state(clean / "checkpoint_last.pt")
    for name, p in stopped_then_resumed["model"].items():
        assert torch.equal(killed_then_resumed["model"][name], p), name
    # and an uninterrupted run reaches the same number of updates and validation loss (fairseq's own
    # resume is not bit-exact: the loss agrees to about 1e-3)
    ref = _run([BIN / "fairseq-train", *_argv(data, tmp_path / "ref")])
    assert ref.returncode == 0, ref.stderr[-3000:]
    uninterrupted = _state(tmp_path / "ref" / "checkpoint_last.pt")
    assert updates(tmp_path / "ref" / "checkpoint_last.pt") == updates(save / "checkpoint_last.pt")
    assert killed_then_resumed["extra_state"]["val_loss"] == pytest.approx(
        uninterrupted["extra_state"]["val_loss"], rel=2e-3)


def test_atomic_write_failure_keeps_the_old_file(tmp_path):
    target = tmp_path / "checkpoint_last.pt"
    target.write_bytes(b"old complete checkpoint")

    def half_then_fail(f):
        f.write(b"new but ")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_checkpoints.atomic_write(str(target), half_then_fail)
    assert target.read_bytes() == b"old complete checkpoint"
    assert os.listdir(tmp_path) == ["checkpoint_last.pt"]
    atomic_checkpoints.atomic_write(str(target), lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["checkpoint_last.pt"]


FULL_DISK_TRAIN = textwrap.dedent("""
    # fairseq-train whose checkpoint copy to FULL_DEST finds the disk full half-way
    import errno, os, sys
    import fairseq_local  # installs the plugin's patches
    from fairseq_local.patches import atomic_checkpoints

    real_copy = atomic_checkpoints.copy_data

    def full_copy(src, dst):
        if os.environ["FULL_DEST"] in os.path.basename(dst.name):
            dst.write(src.read()[:100])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_copy(src, dst)

    atomic_checkpoints.copy_data = full_copy
    from fairseq_cli.train import cli_main
    sys.argv[0] = "fairseq-train"
    cli_main()
""")


@pytest.mark.parametrize("how", ["save", "copy", "quota"])
def test_disk_full_while_saving_is_one_line(tmp_path, monkeypatch, how):
    """A full disk while a checkpoint is written (fairseq's save, its copy to checkpoint_last.pt) or
    over quota: DiskFullError naming the checkpoint, printed as one line with status 2; the previous
    checkpoint intact, no temporary file left."""
    import errno
    import io

    from fairseq import checkpoint_utils
    from fairseq_local_core.errors import report
    from fairseq_local_core.file_io import DiskFullError

    target = tmp_path / "checkpoint_last.pt"
    target.write_bytes(b"old complete checkpoint")
    code = errno.EDQUOT if how == "quota" else errno.ENOSPC

    def full(*_):
        raise OSError(code, os.strerror(code))

    with pytest.raises(DiskFullError) as caught:
        if how == "copy":
            (tmp_path / "checkpoint3.pt").write_bytes(b"new checkpoint")
            monkeypatch.setattr(atomic_checkpoints, "copy_data", lambda src, dst: (dst.write(src.read(4)), full()))
            checkpoint_utils.PathManager.copy(str(tmp_path / "checkpoint3.pt"), str(target), overwrite=True)
        else:
            monkeypatch.setattr(checkpoint_utils, "_torch_persistent_save", lambda obj, f: (f.write(b"half"), full()))
            checkpoint_utils.torch_persistent_save({"model": {}}, str(target))
    assert target.read_bytes() == b"old complete checkpoint"
    assert not [n for n in os.listdir(tmp_path) if TMP_RE.match(n)]
    err = io.StringIO()
    assert report(caught.value, "fairseq-train", err) == 2
    what = "disk quota exceeded" if how == "quota" else "no space left on device"
    assert err.getvalue() == f"fairseq-train: error: {target}: {what}\n"


def test_disk_full_during_training_ends_in_one_line(tmp_path, data):
    """fairseq-train itself: the disk fills while checkpoint_last.pt is copied; one line, status 2,
    checkpoint1.pt (written before) complete and loadable, no temporary file."""
    save = tmp_path / "ck"
    wrapper = tmp_path / "full_train.py"
    wrapper.write_text(FULL_DISK_TRAIN)
    proc = _run([sys.executable, wrapper, *_argv(data, save, "--max-epoch", "1")], FULL_DEST="checkpoint_last.pt")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == f"fairseq-train: error: {save / 'checkpoint_last.pt'}: no space left on device"
    assert "Traceback" not in proc.stderr
    assert _state(save / "checkpoint1.pt")["extra_state"]["train_iterator"]["epoch"] == 2  # epoch 1 done
    assert not [n for n in os.listdir(save) if TMP_RE.match(n)] and not (save / "checkpoint_last.pt").exists()


def test_second_run_into_one_save_dir_is_refused(tmp_path, data):
    save = tmp_path / "ckpt"
    lock = save_dir_lock.acquire(str(save))  # this process plays the first, still running, training
    try:
        proc = _run([BIN / "fairseq-train", *_argv(data, save, "--max-update", "1")])
    finally:
        save_dir_lock.release(str(save))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1] == (f"fairseq-train: error: --save-dir {save} is in use by another training run "
                         f"(pid {os.getpid()}, lock file {lock}); wait for it to finish or choose another --save-dir")
    assert not (save / "checkpoint_last.pt").exists()


def test_dead_runs_lock_does_not_block(tmp_path, data):
    save = tmp_path / "ckpt"
    save.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (save / save_dir_lock.LOCK_NAME).write_text(f"{dead.pid} {os.uname().nodename}\n")
    proc = _run([BIN / "fairseq-train", *_argv(data, save, "--max-update", "1")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _state(save / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == 1
    assert (save / save_dir_lock.LOCK_NAME).read_text().split()[0] != str(dead.pid)


def test_incomplete_split_refused_by_fairseq_train(tmp_path, data):
    data_dir, task_args = data
    broken = tmp_path / "bin"
    shutil.copytree(data_dir, broken)
    (broken / "train.src-tgt.tgt.idx").unlink()  # what a killed fairseq-preprocess leaves
    save = tmp_path / "ckpt"
    proc = _run([BIN / "fairseq-train", *_argv((broken, task_args), save, "--max-update", "1")])
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[-1].startswith("fairseq-train: error: binarized split")
    assert f"{broken / 'train.src-tgt.tgt.idx'} is missing but {broken / 'train.src-tgt.tgt.bin'} exists" in lines[-1]
    assert not (save / "checkpoint_last.pt").exists()
