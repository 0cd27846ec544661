"""A run resumed from ``checkpoint_last.pt`` continues as the uninterrupted run would have.

What it changes (as layers of :mod:`fairseq_local.hook_points`, outside the other patches' layers
there): ``Trainer.save_checkpoint``, ``Trainer.load_checkpoint`` and ``Trainer.get_train_iterator``.  For whom: trainers of our models and tasks
(:mod:`fairseq_local.ownership`); a trainer of fairseq's own models resumes as fairseq resumes, and
its checkpoints hold exactly fairseq's extra state.  Why:

fairseq-train keeps three parts of a run's state outside its checkpoints:

* ``--patience``: ``fairseq_cli.train.should_stop_early`` holds the best validation loss and the
  number of validations since it as attributes of the function, lost with the process.  A resumed
  run counts its first validation as an improvement whatever its loss and waits ``--patience``
  stale validations afresh: a run interrupted after one stale validation (patience 2) trains on
  past the epoch at which it would have stopped.
* the epoch-end scheduler step: the checkpoint at the end of epoch ``N`` is written inside
  ``validate_and_save``, before the training loop calls ``trainer.lr_step(N, valid_loss)``.  With
  ``reduce_lr_on_plateau`` the halving that a stale epoch ``N`` triggers (and the scheduler's new
  best after an improving one) never reaches the checkpoint, so a resumed run trains epoch ``N+1``
  at the old learning rate.
* the batches: a training iterator fixes which sentences form each batch when it is made (the
  length-sorted order, ties broken by a permutation seeded with ``--seed`` plus that epoch) and is
  reused for every later epoch, which only shuffles the order of the batches.  An uninterrupted run
  makes it at epoch 1; a run resumed at epoch ``N`` makes it at ``N``, so from then on it trains on
  differently composed batches.

:func:`install` layers ``Trainer.save_checkpoint`` to store the stale count in every checkpoint's
extra state (``stale_validations``), with the epoch whose batches the training iterator uses
(``train_batches_epoch``); ``Trainer.get_train_iterator`` to record that epoch and to make a
resumed run's iterator with the batches of the stored one; and ``Trainer.load_checkpoint`` to
restore the rest, unless ``--reset-optimizer`` or ``--reset-meters`` asked for a fresh start (fairseq's
own condition for restoring the best loss): ``should_stop_early``'s best loss (the checkpoint's
``best``) and stale count, and, for a checkpoint written at the end of an epoch (its iterator
points at the start of the next one) that holds that epoch's validation loss, the scheduler step
the interrupted process took next (not with ``--reset-lr-scheduler``).  fairseq's own
``lr_step(N + 1)`` on resume then follows, in the order of an uninterrupted run.  A checkpoint
written before this patch has no stale count: its last validation either set the best (count 0)
or did not (count at least 1; exactly 1 for ``--patience`` 2, since the run had not stopped); its
batches are made at the resumed epoch, as fairseq does.

Which ``should_stop_early`` is the running one: ``python -m fairseq_cli.train`` runs it in
``__main__`` (while ``fairseq_cli.train`` may be imported again as a module); ``fairseq-train``
and ``fairseq-hydra-train`` use the module.  tests/test_exact_resume.py trains a small LM through
interruptions and checks that its curve, learning rates, stopping epoch and parameters equal those
of one uninterrupted run.
"""
import logging
import sys

from fairseq_local import hook_points, ownership

logger = logging.getLogger(__name__)

STALE_KEY = "stale_validations"
BATCHES_KEY = "train_batches_epoch"
_BATCHES = "_fairseq_local_batches_epoch"    # trainer attribute: the epoch of its iterator's batches
_ITERATOR = "_fairseq_local_train_iterator"  # trainer attribute: that iterator
_PENDING = "_fairseq_local_resumed_batches_epoch"  # set by a load, used by the next new iterator
_STATE = {}


def running_train_module():
    """The module whose ``validate_and_save`` this process runs (None outside fairseq-train)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "fairseq_cli.train":
        return main
    return sys.modules.get("fairseq_cli.train")


def stale_count(extra_state: dict) -> int:
    """Validations since the best one, as stored; for an older checkpoint, 0 when its last
    validation set the best and 1 when it did not (see the module docstring)."""
    if STALE_KEY in extra_state:
        return int(extra_state[STALE_KEY])
    val_loss = extra_state.get("val_loss")
    return 0 if val_loss is None or val_loss == extra_state.get("best") else 1


def restore(trainer, extra_state: dict, reset_lr_scheduler: bool):
    """Restore the stopping state of the run that wrote ``extra_state`` (see the module docstring)."""
    train_cli = running_train_module()
    if train_cli is not None and extra_state.get("best") is not None:
        train_cli.should_stop_early.best = extra_state["best"]
        train_cli.should_stop_early.num_runs = stale_count(extra_state)
    if extra_state.get(BATCHES_KEY) is not None and not trainer.cfg.checkpoint.reset_dataloader:
        setattr(trainer, _PENDING, int(extra_state[BATCHES_KEY]))
    itr = extra_state.get("train_iterator") or {}
    val_loss = extra_state.get("val_loss")
    if reset_lr_scheduler or val_loss is None or itr.get("iterations_in_epoch") != 0 or itr.get("epoch", 1) < 2:
        return
    epoch = itr["epoch"] - 1
    lr = trainer.lr_step(epoch, val_loss)
    logger.info(f"resumed after epoch {epoch}: took its learning-rate step on validation loss {val_loss:.4f} "
                f"(learning rate now {lr:g})")


def install():
    if _STATE:
        return
    def save_checkpoint(save, self, filename, extra_state):
        if not ownership.trainer_is_ours(self):
            return save(self, filename, extra_state)
        train_cli = running_train_module()
        if train_cli is not None and extra_state is not None:
            extra_state[STALE_KEY] = int(getattr(train_cli.should_stop_early, "num_runs", 0))
        if extra_state is not None and getattr(self, _BATCHES, None) is not None:
            extra_state[BATCHES_KEY] = getattr(self, _BATCHES)
        return save(self, filename, extra_state)

    def load_checkpoint(load, self, filename, reset_optimizer=False, reset_lr_scheduler=False, optimizer_overrides=None,
                        reset_meters=False):
        extra_state = load(self, filename, reset_optimizer, reset_lr_scheduler, optimizer_overrides,
                           reset_meters=reset_meters)
        if extra_state is not None and not reset_optimizer and not reset_meters and ownership.trainer_is_ours(self):
            restore(self, extra_state, reset_lr_scheduler)
        return extra_state

    def get_train_iterator(get_iterator, self, epoch, **kwargs):
        if not ownership.trainer_is_ours(self):
            return get_iterator(self, epoch, **kwargs)
        batches_epoch = getattr(self, _PENDING, None) or epoch
        setattr(self, _PENDING, None)
        iterator = get_iterator(self, batches_epoch, **kwargs)
        if iterator is not getattr(self, _ITERATOR, None):  # a new iterator, with the batches of batches_epoch
            setattr(self, _ITERATOR, iterator)
            setattr(self, _BATCHES, batches_epoch)
        return iterator

    hook_points.add(hook_points.TRAINER_SAVE_CHECKPOINT, save_checkpoint)
    hook_points.add(hook_points.TRAINER_LOAD_CHECKPOINT, load_checkpoint)
    hook_points.add(hook_points.TRAINER_GET_TRAIN_ITERATOR, get_train_iterator)
    _STATE["installed"] = True
