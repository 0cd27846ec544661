"""One training run per ``--save-dir``.

Two runs pointed at one directory would both train and interleave their checkpoints
(``checkpoint_best.pt`` from the worse run, ``checkpoint_last.pt`` from whichever saved last).
:func:`install` wraps fairseq's ``checkpoint_utils.load_checkpoint``, which every training entry
point (``fairseq-train``, ``fairseq-hydra-train``, ``scripts/train.sh``) calls once before the
first update: the master process (global rank 0; other ranks write no checkpoint) first takes an
exclusive ``fcntl.flock`` on ``SAVE_DIR/.train.lock`` and writes its pid there.  A second run
stops with one line naming the directory and the first run's pid.  The kernel drops the lock
when its process dies (``kill -9`` included), so a dead run's lock file never blocks; where the
file system has no ``flock``, the pid in the file is checked for liveness instead.  Runs with
``--no-save`` write nothing and take no lock.  Taking the lock also removes the temporary files
a killed run left behind (see ``atomic_checkpoints.py``).
"""
import errno
import fcntl
import functools
import os
import socket

from fairseq_local.errors import UserError
from fairseq_local.file_io import TMP_RE

LOCK_NAME = ".train.lock"

_HELD = {}  # realpath(save_dir) -> fd, for the life of the process
_STATE = {}


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
    """Take ``save_dir``'s lock for the life of this process (re-entrant); returns the lock path."""
    os.makedirs(save_dir, exist_ok=True)
    key = os.path.realpath(save_dir)
    path = os.path.join(save_dir, LOCK_NAME)
    if key in _HELD:
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
    _HELD[key] = fd
    remove_stale_temp_files(save_dir)
    return path


def release(save_dir: str):
    fd = _HELD.pop(os.path.realpath(save_dir), None)
    if fd is not None:
        os.close(fd)  # closing the last descriptor drops the flock


def _is_master(trainer) -> bool:
    from fairseq import distributed_utils

    cfg = getattr(trainer, "cfg", None)
    if cfg is None or "distributed_training" not in cfg:
        return True
    return distributed_utils.is_master(cfg.distributed_training)


def install():
    if _STATE:
        return
    from fairseq import checkpoint_utils

    original = checkpoint_utils.load_checkpoint

    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        if not cfg.no_save and _is_master(trainer):
            acquire(cfg.save_dir)
        return original(cfg, trainer, **passthrough_args)

    _STATE["original"] = original
    checkpoint_utils.load_checkpoint = load_checkpoint
