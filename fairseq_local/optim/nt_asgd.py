"""``--optimizer nt_asgd``: non-monotonically triggered averaged SGD (Merity, Keskar and Socher,
"Regularizing and Optimizing LSTM Language Models", ICLR 2018, Section 3, Algorithm 1), the
optimiser of AWD-LSTM and of the MC-RNN paper's language model (Xu et al., AAAI 2019, Table 4).

Algorithm 1, with the validation checks as its logging points:

* every update is a plain SGD step, ``w <- w - lr * (g + weight_decay * w)``;
* at every validation, while averaging has not started, the metric v (lower is better; a
  maximised ``--best-checkpoint-metric`` is negated) is compared with the log of earlier checks:
  if more than n (``--nt-asgd-nonmono``, default 5) checks are logged and
  ``v > min(logs[:-n])`` -- v is worse than the best check before the last n -- averaging starts
  at this update T; v is then appended to the log.  After the trigger no more checks are made;
* from T on, the optimiser keeps the running mean of the iterates ``ax = mean(w_T, ..., w_k)``
  (Algorithm 1 returns this average; ``ax`` starts as ``w_T`` and absorbs every later iterate,
  ``ax <- ax + (w_k - ax) / (k - T + 1)``).  The released AWD-LSTM code (``torch.optim.ASGD``,
  t0 = 0, lambd = 0) starts the mean one step later, at ``w_{T+1}``;
* evaluation uses the averaged weights: a validation runs with ``ax`` in the model's parameters,
  and the checkpoint written after it holds ``ax`` as the model (what ``fairseq-eval-lm`` reads;
  AWD-LSTM saves the averaged model too).  The SGD iterate is kept in the optimiser state while
  ``ax`` is swapped in, and is put back before the next update, so training and resuming from
  the checkpoint continue the SGD iterate exactly.

fairseq's trainer only calls ``optimizer.step()``, so the swaps and the trigger are driven by the
task through :class:`NTASGDDriver` (``--task stateful_language_modeling`` does: before every
training step, when a validation begins, after the first validation subset's stats).  A task that
does not drive it is refused at the first update, in one line, rather than training plain SGD
silently.  The parameters averaged are the ones the model runs with, so ``--fp16`` / ``--bf16``
(fp32 master copies, ``FP16Optimizer``) are refused; ``--amp`` and fp32 work.

The trigger state (the log, T, the number of averaged iterates, whether ``ax`` is swapped in) is
saved with the optimiser state as plain numbers, and ``ax`` / the SGD iterate as tensors, so
checkpoints load with ``weights_only=True``.  The parameters are updated with ``torch._foreach``
operations (one call over all parameters, no Python loop over tensors).
"""
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II

from fairseq_local_core.errors import ConfigError

STATE_KEY = "nt_asgd"


class NTASGD(torch.optim.Optimizer):
    """SGD whose iterates are averaged once :meth:`check` triggers (Algorithm 1)."""

    def __init__(self, params, lr: float, weight_decay: float = 0.0, nonmono: int = 5):
        if lr < 0:
            raise ConfigError(f"--lr must be >= 0 for --optimizer nt_asgd (got {lr})")
        if weight_decay < 0:
            raise ConfigError(f"--weight-decay must be >= 0 (got {weight_decay})")
        if not isinstance(nonmono, int) or nonmono < 1:
            raise ConfigError(f"--nt-asgd-nonmono must be an integer >= 1 (got {nonmono!r})")
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay))
        self.nonmono = nonmono
        self.logs: List[float] = []  # the checked metric values (lower is better)
        self.trigger_step: Optional[int] = None  # T: the update count when averaging started
        self.num_steps = 0  # k: SGD updates taken
        self.num_averaged = 0  # iterates in ax
        self.swapped = False  # ax is in the parameters, the SGD iterate in state["live"]
        self.driven = False  # a task has announced that it drives the swaps and the trigger

    # ---------------------------------------------------------------- Algorithm 1
    @property
    def averaging(self) -> bool:
        return self.trigger_step is not None

    def _params(self) -> List[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def check(self, metric: float) -> bool:
        """One logging point of Algorithm 1 with the validation metric ``metric`` (lower is better).
        Returns True when this check starts the averaging."""
        if self.averaging:
            return False
        metric = float(metric)
        n = self.nonmono
        fired = len(self.logs) > n and metric > min(self.logs[:-n])
        if fired:
            self.trigger_step = self.num_steps
            params = self._params()
            with torch.no_grad():
                for p in params:
                    self.state[p]["ax"] = p.detach().clone()
            self.num_averaged = 1
        self.logs.append(metric)
        return fired

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        if not self.driven:
            raise ConfigError("--optimizer nt_asgd: this task does not drive NT-ASGD's trigger and "
                              "averaged evaluation; use --task stateful_language_modeling")
        if self.swapped:
            raise RuntimeError("nt_asgd: the averaged weights are in the model during an update; "
                               "the task must call NTASGDDriver.before_train_step first")
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if group["weight_decay"]:
                grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, grads, alpha=-group["lr"])
        self.num_steps += 1
        if self.averaging:
            self.num_averaged += 1
            params = self._params()
            torch._foreach_lerp_([self.state[p]["ax"] for p in params], params, 1.0 / self.num_averaged)
        return loss

    # ---------------------------------------------------------------- evaluation with ax
    @torch.no_grad()
    def swap_in_average(self) -> bool:
        """Put ``ax`` into the parameters (keeping the SGD iterate); no-op before the trigger."""
        if not self.averaging or self.swapped:
            return False
        params = self._params()
        for p in params:
            self.state[p]["live"] = p.detach().clone()
        torch._foreach_copy_(params, [self.state[p]["ax"] for p in params])
        self.swapped = True
        return True

    @torch.no_grad()
    def swap_out_average(self) -> bool:
        """Put the SGD iterate back into the parameters."""
        if not self.swapped:
            return False
        params = self._params()
        torch._foreach_copy_(params, [self.state[p].pop("live") for p in params])
        self.swapped = False
        return True

    def averaged_parameters(self) -> Optional[List[torch.Tensor]]:
        return [self.state[p]["ax"] for p in self._params()] if self.averaging else None

    # ---------------------------------------------------------------- checkpoints
    def _trigger_state(self):
        return {"logs": list(self.logs), "trigger_step": -1 if self.trigger_step is None else self.trigger_step,
                "num_steps": self.num_steps, "num_averaged": self.num_averaged, "swapped": self.swapped,
                "nonmono": self.nonmono}

    def state_dict(self):
        state = super().state_dict()
        state[STATE_KEY] = self._trigger_state()
        return state

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        trigger = state_dict.pop(STATE_KEY, None)
        super().load_state_dict(state_dict)
        if trigger is not None:
            self.logs = [float(v) for v in trigger["logs"]]
            self.trigger_step = None if trigger["trigger_step"] < 0 else int(trigger["trigger_step"])
            self.num_steps, self.num_averaged = int(trigger["num_steps"]), int(trigger["num_averaged"])
            self.swapped = bool(trigger["swapped"])


@dataclass
class FairseqNTASGDConfig(FairseqDataclass):
    nt_asgd_nonmono: int = field(
        default=5, metadata={"help": "non-monotone interval n: average once a check is worse than the best "
                                     "check before the last n (Merity et al. 2018, Algorithm 1)"})
    weight_decay: float = field(default=0.0, metadata={"help": "L2 weight decay (AWD-LSTM: 1.2e-6)"})
    lr: List[float] = II("optimization.lr")


@register_optimizer("nt_asgd", dataclass=FairseqNTASGDConfig)
class FairseqNTASGD(FairseqOptimizer):
    def __init__(self, cfg: FairseqNTASGDConfig, params):
        super().__init__(cfg)
        self._optimizer = NTASGD(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        return {"lr": self.cfg.lr[0], "weight_decay": self.cfg.weight_decay, "nonmono": self.cfg.nt_asgd_nonmono}


def find_nt_asgd(optimizer) -> Optional[NTASGD]:
    """The :class:`NTASGD` inside fairseq's optimiser wrappers (``FairseqOptimizer``, AMP), or None."""
    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        if isinstance(optimizer, NTASGD):
            return optimizer
        seen.add(id(optimizer))
        inner = None
        for name in ("fp32_optimizer", "wrapped_optimizer", "_optimizer"):
            inner = optimizer.__dict__.get(name) if hasattr(optimizer, "__dict__") else None
            if inner is not None:
                break
        optimizer = inner
    return None


class NTASGDDriver:
    """What a task calls so that fairseq-train runs Algorithm 1 (see the module doc).

    ``before_train_step(optimizer, model)``: every training step (puts the SGD iterate back);
    ``begin_validation()``: when a validation begins (puts ``ax`` in the model);
    ``after_validation(stats)``: with the stats of the first validation subset (the trigger check).
    Every method is a no-op for other optimisers.
    """

    def __init__(self, metric: str = "loss", maximize: bool = False):
        self.metric, self.maximize = metric, maximize
        self.optimizer: Optional[NTASGD] = None
        self._subsets_seen = 0

    def before_train_step(self, optimizer, model):
        nt = find_nt_asgd(optimizer)
        if nt is None:
            return
        if self.optimizer is not nt:
            model_params = {id(p) for p in model.parameters()}
            if any(id(p) not in model_params for p in nt._params()):
                raise ConfigError("--optimizer nt_asgd averages the weights the model runs with; --fp16/--bf16 "
                                  "keep separate fp32 master weights: train in fp32 or with --amp")
            self.optimizer = nt
        nt.driven = True
        nt.swap_out_average()

    def begin_validation(self):
        self._subsets_seen = 0
        if self.optimizer is not None:
            self.optimizer.swap_in_average()

    def after_validation(self, stats) -> bool:
        """Check the trigger with the first subset's ``stats``; True when averaging starts now."""
        self._subsets_seen += 1
        if self.optimizer is None or self._subsets_seen > 1:
            return False
        if self.metric not in stats:
            raise ConfigError(f"--best-checkpoint-metric {self.metric}: not among the validation stats "
                              f"({', '.join(sorted(stats))}); NT-ASGD's trigger needs it")
        value = float(stats[self.metric])
        return self.optimizer.check(-value if self.maximize else value)
