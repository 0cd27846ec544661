"""The paths fairseq-train is given to start from or write to: one line when they cannot be used.

What it changes: ``checkpoint_utils.verify_checkpoint_directory`` and
``checkpoint_utils.load_checkpoint`` (which also takes the save-dir lock of our runs,
:mod:`fairseq_local.save_dir_lock`: one wrapper per target).  For whom: every run, fairseq's own
models included (each check fails where fairseq would fail or silently train from scratch; a run
that fairseq trains trains the same).  Why:

* ``--restore-file PATH`` given explicitly (anything but fairseq's default ``checkpoint_last.pt``,
  which a first run does not have) that names no file: fairseq logs "No existing checkpoint found"
  and trains from scratch with exit status 0.  Here it is one line naming the file, what its
  directory holds, and, when the name exists in ``--save-dir``, that ``--restore-file`` is read
  relative to the current directory.
* ``--finetune-from-model PATH`` that names no file, where fairseq would start from it (no
  ``checkpoint_last.pt`` in ``--save-dir`` yet): one line instead of a traceback; so are fairseq's
  refusals of ``--finetune-from-model`` with ``--restore-file`` or a ``--reset-*`` option (fairseq
  prints the whole configuration in that message).
* ``--save-dir`` naming a file, or a path through a file, or a directory that cannot be written:
  one line (fairseq: ``NotADirectoryError`` with a traceback).
* A rerun of a finished run of our models or tasks (``checkpoint_last.pt`` at ``--max-update`` or
  ``--max-epoch``): fairseq would train one more update and overwrite the best and last checkpoints;
  here one line, exit status 0, every checkpoint left as it is (fairseq's own models: as in fairseq).

:func:`install` wraps ``checkpoint_utils.verify_checkpoint_directory`` and
``checkpoint_utils.load_checkpoint``, which fairseq-train and fairseq-hydra-train call before the
first update.
"""
import functools
import logging
import os
import sys

from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils

from fairseq_local import ownership
from fairseq_local.config_checks import finished_run
from fairseq_local_core.errors import ConfigError, prog_name
from fairseq_local.save_dir_lock import lock_for
from fairseq_local_core.file_io import checkpoint_listing

DEFAULT_RESTORE = "checkpoint_last.pt"
_STATE = {}


def check_restore(cfg):
    """``cfg``: fairseq's checkpoint config (``cfg.checkpoint``), or the part of it fairseq's
    ``load_checkpoint`` reads (its programmatic callers pass no more; a save_dir may be a path object)."""
    restore = getattr(cfg, "restore_file", DEFAULT_RESTORE) or DEFAULT_RESTORE
    finetune = getattr(cfg, "finetune_from_model", None)
    save_dir = getattr(cfg, "save_dir", None)
    if not isinstance(restore, str):
        restore = os.fsdecode(os.fspath(restore))
    save_dir = None if save_dir is None else os.fsdecode(os.fspath(save_dir))
    resets = [f"--reset-{name}" for name in ("optimizer", "lr-scheduler", "meters", "dataloader")
              if getattr(cfg, "reset_" + name.replace("-", "_"), False)]
    if finetune is not None and resets:
        raise ConfigError(f"--finetune-from-model {finetune} resets the optimizer, learning-rate scheduler, meters and "
                          f"data loader itself: leave out {' '.join(resets)}")
    if restore != DEFAULT_RESTORE and finetune:
        raise ConfigError(f"--finetune-from-model {finetune} and --restore-file {restore} cannot be used together: "
                          "--restore-file resumes a run, --finetune-from-model starts a new one from a model")
    if restore != DEFAULT_RESTORE and "://" not in restore and not os.path.isfile(restore):
        what = "is a directory, not a checkpoint file" if os.path.isdir(restore) else \
            f"no such checkpoint file ({checkpoint_listing(restore)})"
        hint = ""
        in_save_dir = os.path.join(save_dir or "", restore)
        if save_dir and not os.path.isabs(restore) and os.path.isfile(in_save_dir):
            hint = f"; --restore-file is read from the current directory, not --save-dir: pass {in_save_dir}"
        raise ConfigError(f"--restore-file {restore}: {what}{hint}")
    if save_dir is None:
        return
    last = os.path.join(save_dir, DEFAULT_RESTORE)
    if finetune is not None and restore == DEFAULT_RESTORE and not os.path.exists(last) and \
            "://" not in finetune and not os.path.isfile(finetune):
        what = "is a directory, not a checkpoint file" if os.path.isdir(finetune) else \
            f"no such checkpoint file ({checkpoint_listing(finetune)})"
        raise ConfigError(f"--finetune-from-model {finetune}: {what}")


def check_save_dir(save_dir: str):
    if "://" in save_dir:
        return
    path = save_dir
    while path and not os.path.exists(path):
        parent = os.path.dirname(path.rstrip(os.sep))
        if parent == path:
            break
        path = parent
    if path and os.path.exists(path) and not os.path.isdir(path):
        where = "is a file" if path == save_dir else f"goes through {path}, which is a file"
        raise ConfigError(f"--save-dir {save_dir} {where}, not a directory: give a directory for the checkpoints")
    if path and os.path.isdir(path) and not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"--save-dir {save_dir}: cannot write in {path} (permission denied): give a directory "
                          "you can write to")


def _stop_if_finished(trainer, epoch_itr):
    """A rerun of a finished training run of our models or tasks: one line, exit status 0, the
    checkpoints left as they are (:func:`fairseq_local.config_checks.finished_run`)."""
    if not ownership.trainer_is_ours(trainer):
        return  # fairseq's own models and tasks train as fairseq trains them
    message = finished_run(trainer.cfg, trainer.get_num_updates(), epoch_itr.next_epoch_idx)
    if message is None:
        return
    if distributed_utils.is_master(trainer.cfg.distributed_training):
        for handler in logging.getLogger().handlers:
            handler.flush()
        print(f"{prog_name()}: {message}", file=sys.stderr, flush=True)
    sys.exit(0)


def install():
    if _STATE:
        return
    verify = checkpoint_utils.verify_checkpoint_directory
    load = checkpoint_utils.load_checkpoint

    @functools.wraps(verify)
    def verify_checkpoint_directory(save_dir):
        check_save_dir(save_dir)
        return verify(save_dir)

    @functools.wraps(load)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        check_restore(cfg)
        lock_for(trainer, cfg)  # our runs: one run per --save-dir (fairseq_local/save_dir_lock.py)
        extra_state, epoch_itr = load(cfg, trainer, **passthrough_args)
        _stop_if_finished(trainer, epoch_itr)
        return extra_state, epoch_itr

    _STATE.update(verify=verify, load=load)
    checkpoint_utils.verify_checkpoint_directory = verify_checkpoint_directory
    checkpoint_utils.load_checkpoint = load_checkpoint
