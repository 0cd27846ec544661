"""One training run per ``--save-dir``.

Two runs pointed at one directory would both train and interleave their checkpoints
(``checkpoint_best.pt`` from the worse run, ``checkpoint_last.pt`` from whichever saved last).
:func:`install` wraps fairseq's ``checkpoint_utils.load_checkpoint``, which every training entry
point (``fairseq-train``, ``fairseq-hydra-train``, ``scripts/train.sh``) calls once before the
first update: the master process (global rank 0; other ranks write no checkpoint) first claims the
directory (:func:`fairseq_local.file_io.claim`: an exclusive ``fcntl.flock`` on
``SAVE_DIR/.train.lock``, which holds its pid).  A second run
stops with one line naming the directory and the first run's pid.  The kernel drops the lock
when its process dies (``kill -9`` included), so a dead run's lock file never blocks; where the
file system has no ``flock``, the pid in the file is checked for liveness instead.  Runs with
``--no-save`` write nothing and take no lock.  Taking the lock also removes the temporary files
a killed run left behind (see ``atomic_checkpoints.py``).
"""
import functools
import os

from fairseq_local.file_io import TMP_RE, claim, release as release_claim

LOCK_NAME = ".train.lock"

_STATE = {}


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


def acquire(save_dir: str) -> str:
    """Take ``save_dir``'s lock for the life of this process (re-entrant, the claim of every output
    folder: :func:`fairseq_local.file_io.claim`); returns the lock path."""
    os.makedirs(save_dir, exist_ok=True)
    path = claim(save_dir, "--save-dir", lock=os.path.join(save_dir, LOCK_NAME), run="training run")
    remove_stale_temp_files(save_dir)
    return path


def release(save_dir: str):
    release_claim(save_dir, os.path.join(save_dir, LOCK_NAME))


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
