"""``--lr-scheduler reduce_lr_on_plateau_updates``: the learning rate of the parallel-cells paper's
Chinese-English experiment (Zhu et al., "Going Wider: Recurrent Neural Network With Parallel Cells",
Section 3.2, *Model and Training Details*): "initial learning rate 0.5, and apply weight decay by
0.93 in every 3000 batches if the cost of validation set does not decrease".

Every ``--lr-check-interval`` updates (3000) the validation cost is measured; when it is not lower
than the reference cost, the learning rate is multiplied by ``--lr-shrink`` (0.93), otherwise it is
kept.  The rule applies once per check, so after k checks without a decrease the rate is
``lr * 0.93 ** k``.  The reference is, by default, the cost at the previous check (the paper's
words: the cost "does not decrease"); ``--lr-plateau-reference best`` compares with the lowest cost
seen so far instead (torch's ``ReduceLROnPlateau`` with patience 0 and no threshold).  The first
check has no reference and never shrinks.  No threshold: a cost equal to the reference is "not
decreased".  With ``--maximize-best-checkpoint-metric`` "decrease" reads "increase".

None of fairseq's schedulers is this rule: ``step`` multiplies every 3000 updates whatever the
validation cost, and ``reduce_lr_on_plateau`` looks at the validation loss only at the end of an
epoch (``Trainer.lr_step``), never after a validation inside one (``--validate-interval-updates``):
on the paper's 1.25M pairs (39k batches of 32 per epoch) it would check 13 times less often.

fairseq hands a scheduler the validation loss only at epoch ends, so :func:`install` wraps
``fairseq_cli.train.validate`` (looked up by ``validate_and_save`` at call time; the path of
``fairseq-train``, ``fairseq-hydra-train`` and our scripts): after every validation it passes the
first validation subset's ``--best-checkpoint-metric`` and the update count to a scheduler of this
kind.  Validations at other update counts (an epoch end, ``--save-interval-updates`` saves) and the
epoch-end ``step`` calls change nothing.  The scheduler refuses (one line) a configuration that
does not validate at every check: ``--disable-validation``, or ``--validate-interval-updates`` not
a divisor of ``--lr-check-interval``.  Its state (rate, reference costs, last check) is saved in
checkpoints, so a resumed run continues the same schedule.
"""
import functools
import logging
import math
from dataclasses import dataclass, field
from typing import List, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

from fairseq_local_core.errors import ConfigError

logger = logging.getLogger(__name__)

PLATEAU_REFERENCES = ChoiceEnum(["previous", "best"])
_MARK = "_fairseq_local_lr_checks"


@dataclass
class ReduceLROnPlateauUpdatesConfig(FairseqDataclass):
    lr_shrink: float = field(
        default=0.93, metadata={"help": "factor the learning rate is multiplied by after a check without improvement"}
    )
    lr_check_interval: int = field(
        default=3000, metadata={"help": "check the validation cost every N updates (a multiple of "
                                        "--validate-interval-updates)"}
    )
    lr_plateau_reference: PLATEAU_REFERENCES = field(
        default="previous", metadata={"help": "compare each check's cost with the previous check's or the best so far"}
    )
    lr: List[float] = II("optimization.lr")
    validate_interval_updates: int = II("dataset.validate_interval_updates")
    disable_validation: bool = II("dataset.disable_validation")
    maximize_best_checkpoint_metric: bool = II("checkpoint.maximize_best_checkpoint_metric")


@register_lr_scheduler("reduce_lr_on_plateau_updates", dataclass=ReduceLROnPlateauUpdatesConfig)
class ReduceLROnPlateauUpdates(FairseqLRScheduler):
    """lr_0 = --lr; at update n = k * interval (k >= 1) with validation cost c_k:
    lr <- lr * shrink if k > 1 and c_k >= ref_k (<= when maximizing), where ref_k = c_{k-1}
    (``previous``) or min(c_1 .. c_{k-1}) (``best``); unchanged otherwise and between checks."""

    def __init__(self, cfg: ReduceLROnPlateauUpdatesConfig, optimizer):
        super().__init__(cfg, optimizer)
        if len(cfg.lr) > 1:
            raise ConfigError(f"--lr takes one value with --lr-scheduler reduce_lr_on_plateau_updates (got {list(cfg.lr)})")
        if not 0 < cfg.lr_shrink <= 1:
            raise ConfigError(f"--lr-shrink must be in (0, 1] (got {cfg.lr_shrink})")
        if cfg.lr_check_interval < 1:
            raise ConfigError(f"--lr-check-interval must be >= 1 (got {cfg.lr_check_interval})")
        if cfg.disable_validation:
            raise ConfigError("--lr-scheduler reduce_lr_on_plateau_updates needs validation: drop --disable-validation")
        every = cfg.validate_interval_updates
        if every is None or every < 1 or cfg.lr_check_interval % every:
            raise ConfigError(
                f"--validate-interval-updates must divide --lr-check-interval {cfg.lr_check_interval} "
                f"(got {every}): the learning rate is checked after a validation every {cfg.lr_check_interval} updates")
        self.lr = float(cfg.lr[0])
        self.previous: Optional[float] = None  # cost at the last check
        self.best = None  # best cost over the checks (FairseqLRScheduler's field)
        self.last_check = 0  # update count of the last check
        self.optimizer.set_lr(self.lr)
        install()

    def _better(self, a, b):
        return a > b if self.cfg.maximize_best_checkpoint_metric else a < b

    def step_validation(self, num_updates: int, val_loss) -> float:
        """Called after every validation (see :func:`install`); acts only at the checks."""
        if val_loss is None or num_updates <= 0 or num_updates % self.cfg.lr_check_interval:
            return self.lr
        if num_updates <= self.last_check:  # the same check again (a resumed run)
            return self.lr
        val_loss = float(val_loss)
        ref = self.previous if self.cfg.lr_plateau_reference == "previous" else self.best
        nan = math.isnan(val_loss)  # a NaN cost is no decrease, and no reference for later checks
        if nan or (ref is not None and not self._better(val_loss, ref)):
            new = self.lr * self.cfg.lr_shrink
            logger.info(f"update {num_updates}: validation cost {val_loss:.4f} did not improve on "
                        f"{ref} ({self.cfg.lr_plateau_reference}): lr {self.lr:.6g} -> {new:.6g}")
            self.lr = new
        if not nan:
            self.previous = val_loss
            if self.best is None or self._better(val_loss, self.best):
                self.best = val_loss
        self.last_check = num_updates
        self.optimizer.set_lr(self.lr)
        return self.lr

    def step(self, epoch, val_loss=None):
        """End of an epoch: the schedule is tied to updates, not epochs (nothing changes)."""
        return self.optimizer.get_lr()

    def step_update(self, num_updates):
        self.optimizer.set_lr(self.lr)
        return self.lr

    def state_dict(self):
        return {"best": self.best, "lr": self.lr, "previous": self.previous, "last_check": self.last_check}

    def load_state_dict(self, state_dict):
        self.best = state_dict["best"]
        if "lr" in state_dict:
            self.lr = state_dict["lr"]
            self.previous = state_dict["previous"]
            self.last_check = state_dict["last_check"]
        self.optimizer.set_lr(self.lr)


def install():
    """Wrap ``fairseq_cli.train.validate`` so that every validation's cost reaches the scheduler."""
    # fairseq-train's module, imported when a run builds this scheduler (fairseq-train and
    # fairseq-hydra-train have imported it by then): importing it with the plugin would run its
    # import-time logging.basicConfig in every program that loads the plugin (the hub, fairseq-generate)
    from fairseq_cli import train as train_cli

    validate = train_cli.validate
    if getattr(validate, _MARK, False):
        return

    @functools.wraps(validate)
    def validate_then_check_lr(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs):
        losses = validate(cfg, trainer, task, epoch_itr, subsets, *args, **kwargs)
        scheduler = trainer.lr_scheduler
        if isinstance(scheduler, ReduceLROnPlateauUpdates) and losses:
            scheduler.step_validation(trainer.get_num_updates(), losses[0])
        return losses

    setattr(validate_then_check_lr, _MARK, True)
    train_cli.validate = validate_then_check_lr
