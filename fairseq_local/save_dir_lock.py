"""One training run per ``--save-dir``, for training runs of our models and tasks.

:mod:`fairseq_local.patches.training_paths` calls :func:`lock_for` from fairseq's
``checkpoint_utils.load_checkpoint``, for a trainer of one of our models or tasks
(:mod:`fairseq_local.ownership`); fairseq's own models train as in fairseq, with no lock file.

Two runs pointed at one directory would both train and interleave their checkpoints
(``checkpoint_best.pt`` from the worse run, ``checkpoint_last.pt`` from whichever saved last).
fairseq's ``checkpoint_utils.load_checkpoint``, which every training entry point (``fairseq-train``, ``fairseq-hydra-train``, ``scripts/train.sh``) calls once before the
first update: the master process (global rank 0; other ranks write no checkpoint) first takes an
exclusive ``fcntl.flock`` on ``SAVE_DIR/.train.lock`` and writes its pid there.  A second run
stops with one line naming the directory and the first run's pid.  The lock lives as long as the
trainer that took it (it is released when that ``Trainer`` is garbage-collected, e.g. when
``fairseq_cli.train.main`` returns), and the kernel drops it when its process dies (``kill -9`` included), so a dead run's lock file never blocks; where the
file system has no ``flock``, the pid in the file is checked for liveness instead.  Runs with
``--no-save`` write nothing and take no lock; a partial ``CheckpointConfig`` (no ``no_save``, no
``save_dir``) or a ``pathlib.Path`` ``save_dir`` is read as fairseq reads it.  Taking the lock also removes the temporary files
a killed run left behind (see ``atomic_checkpoints.py``).
"""
import errno
import fcntl
import os
import socket
import weakref

from fairseq.distributed import utils as distributed_utils

from fairseq_local import ownership
from fairseq_local.errors import UserError
from fairseq_local.file_io import TMP_RE

LOCK_NAME = ".train.lock"

_HELD = {}  # realpath(save_dir) -> [fd, number of holders]


class SaveDirInUseError(UserError, RuntimeError):
    """Another live training run holds the --save-dir lock."""


def remove_stale_temp_files(directory: str):
    """Remove the temporary files a killed run left in ``directory`` (call only under its lock)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        if TMP_RE.match(name):
            try:
                os.remove(os.path.join(directory, name))
                removed.append(name)
            except OSError:
                pass
    return removed


def _owner(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return "unknown"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_use(save_dir: str, path: str, owner: str) -> SaveDirInUseError:
    return SaveDirInUseError(
        f"--save-dir {save_dir} is in use by another training run (pid {owner}, lock file {path}); "
        "wait for it to finish or choose another --save-dir")


def acquire(save_dir: str) -> str:
    """Take ``save_dir``'s lock until as many :func:`release` calls (re-entrant); returns the lock path."""
    os.makedirs(save_dir, exist_ok=True)
    key = os.path.realpath(save_dir)
    path = os.path.join(save_dir, LOCK_NAME)
    if key in _HELD:
        _HELD[key][1] += 1
        return path
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(save_dir, path, _owner(path)) from None
    except OSError as err:
        if err.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            os.close(fd)
            raise
        # no flock on this file system: a lock whose pid is alive on this host blocks
        owner = _owner(path)
        try:
            with open(path) as f:
                host = (f.read().split() + ["", ""])[1]
        except OSError:
            host = ""
        if owner.isdigit() and int(owner) != os.getpid() and host == socket.gethostname() and _pid_alive(int(owner)):
            os.close(fd)
            raise _in_use(save_dir, path, owner) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    os.fsync(fd)
    _HELD[key] = [fd, 1]
    remove_stale_temp_files(save_dir)
    return path


def release(save_dir: str):
    key = os.path.realpath(save_dir)
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] <= 0:
        del _HELD[key]
        os.close(held[0])  # closing the last descriptor drops the flock


def save_dir_of(cfg):
    """``cfg.save_dir`` as a local path string (None when there is none to lock: ``--no-save``, a
    config without ``save_dir``, a remote path)."""
    if getattr(cfg, "no_save", False):
        return None
    save_dir = getattr(cfg, "save_dir", None)
    if save_dir is None:
        return None
    save_dir = os.fsdecode(os.fspath(save_dir))
    return None if not save_dir or "://" in save_dir else save_dir


def _is_master(trainer) -> bool:
    cfg = getattr(trainer, "cfg", None)
    if cfg is None or "distributed_training" not in cfg:
        return True
    return distributed_utils.is_master(cfg.distributed_training)


def lock_for(trainer, cfg):
    """Take the lock of ``cfg``'s save directory for ``trainer``'s life when it trains a model or
    task of ours on the master process; returns the lock path or None."""
    save_dir = save_dir_of(cfg)
    if save_dir is None or not ownership.trainer_is_ours(trainer) or not _is_master(trainer):
        return None
    path = acquire(save_dir)
    try:
        weakref.finalize(trainer, release, save_dir)
    except TypeError:  # an object without weak references: held for the process
        pass
    return path
