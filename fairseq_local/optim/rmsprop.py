"""``--optimizer rmsprop`` for fairseq (which has none): torch.optim.RMSprop behind fairseq's API.

Used by the lattice encoders' recipes: Su et al. (AAAI 2017) train with RMSprop (Tieleman and
Hinton 2012), momentum 0, rho = 0.99 (``--rmsprop-alpha``), epsilon = 1e-4, lr 5e-4.  The
optimizer state is plain tensors, so checkpoints load with ``weights_only=True``.
"""
from dataclasses import dataclass, field
from typing import List

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II


@dataclass
class FairseqRMSpropConfig(FairseqDataclass):
    rmsprop_alpha: float = field(default=0.99, metadata={"help": "smoothing constant rho of the squared-gradient average"})
    rmsprop_eps: float = field(default=1e-4, metadata={"help": "epsilon added to the denominator"})
    momentum: float = field(default=0.0, metadata={"help": "momentum factor"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay"})
    rmsprop_centered: bool = field(default=False, metadata={"help": "centered RMSprop (Graves 2013)"})
    lr: List[float] = II("optimization.lr")


@register_optimizer("rmsprop", dataclass=FairseqRMSpropConfig)
class FairseqRMSprop(FairseqOptimizer):
    def __init__(self, cfg: FairseqRMSpropConfig, params):
        super().__init__(cfg)
        self._optimizer = torch.optim.RMSprop(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        return {
            "lr": self.cfg.lr[0],
            "alpha": self.cfg.rmsprop_alpha,
            "eps": self.cfg.rmsprop_eps,
            "momentum": self.cfg.momentum,
            "weight_decay": self.cfg.weight_decay,
            "centered": self.cfg.rmsprop_centered,
        }

    @property
    def supports_flat_params(self):
        return True
