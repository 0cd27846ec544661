"""One training run per ``--save-dir``, for training runs of our models and tasks.

:mod:`fairseq_local.patches.training_paths` calls :func:`lock_for` from fairseq's
``checkpoint_utils.load_checkpoint``, for a trainer of one of our models or tasks
(:mod:`fairseq_local.ownership`); fairseq's own models train as in fairseq, with no lock file.

Two runs pointed at one directory would both train and interleave their checkpoints
(``checkpoint_best.pt`` from the worse run, ``checkpoint_last.pt`` from whichever saved last).
fairseq's ``checkpoint_utils.load_checkpoint``, which every training entry point (``fairseq-train``,
``fairseq-hydra-train``, ``scripts/train.sh``) calls once before the first update: the master
process (global rank 0; other ranks write no checkpoint) first claims the directory
(:func:`fairseq_local_core.file_io.claim`, the claim of every output folder: an exclusive ``fcntl.flock``
on ``SAVE_DIR/.train.lock``, which holds its pid).  A second run stops with one line naming the
directory and the first run's pid.  The lock lives as long as the trainer that took it (it is
released when that ``Trainer`` is garbage-collected, e.g. when ``fairseq_cli.train.main`` returns),
and the kernel drops it when its process dies (``kill -9`` included), so a dead run's lock file
never blocks; where the file system has no ``flock``, the pid in the file is checked for liveness
instead.  Runs with
``--no-save`` write nothing and take no lock; a partial ``CheckpointConfig`` (no ``no_save``, no
``save_dir``) or a ``pathlib.Path`` ``save_dir`` is read as fairseq reads it.  Taking the lock also removes the temporary files
a killed run left behind (see ``atomic_checkpoints.py``).
"""
import os
import weakref

from fairseq.distributed import utils as distributed_utils

from fairseq_local import ownership
from fairseq_local_core.file_io import TMP_RE, claim, release as release_claim

LOCK_NAME = ".train.lock"

_HELD = {}  # realpath(save_dir) -> number of holders in this process


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
    """Claim ``save_dir`` until as many :func:`release` calls (re-entrant); returns the lock path."""
    os.makedirs(save_dir, exist_ok=True)
    key = os.path.realpath(save_dir)
    path = os.path.join(save_dir, LOCK_NAME)
    if key in _HELD:
        _HELD[key] += 1
        return path
    claim(save_dir, "--save-dir", lock=path, run="training run")
    _HELD[key] = 1
    remove_stale_temp_files(save_dir)
    return path


def release(save_dir: str):
    key = os.path.realpath(save_dir)
    if key not in _HELD:
        return
    _HELD[key] -= 1
    if _HELD[key] <= 0:
        del _HELD[key]
        release_claim(save_dir, os.path.join(save_dir, LOCK_NAME))


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
