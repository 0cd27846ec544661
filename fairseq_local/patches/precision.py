"""Precision options on CPUs and GPUs: ``--bf16`` without a TPU, ``--fp16`` only with CUDA.

What it changes: ``distributed_utils.call_main`` (a layer, :mod:`fairseq_local.hook_points`).  For
whom: every run with ``--bf16`` / ``--fp16``; a run that fairseq completes completes the same, and
the log says once where ``--bf16`` trains without a TPU.  Why:

``fairseq.options.parse_args_and_arch`` turns every ``--bf16`` into ``--tpu`` (a leftover of the
TPU-only bf16 of fairseq 0.10), so ``fairseq-train --bf16`` on a GPU or with ``--cpu`` dies in
``Trainer.__init__`` (``utils.get_tpu_device``: ``'NoneType' object has no attribute
'xla_device'``) unless torch_xla is installed.  The same run configured through Hydra
(``common.bf16=true``) never sets ``tpu`` and trains in bfloat16 on CUDA or CPU (fairseq's
``FP16Optimizer`` keeps fp32 master weights and needs no loss scaler for bf16).

:func:`install` layers ``fairseq.distributed.utils.call_main`` (outside ``option_checks``' layer,
:mod:`fairseq_local.hook_points`), which every training and evaluation
entry point calls with the final config (``fairseq_cli.train``, ``hydra_train``, ``eval_lm``,
``validate``, looking it up on the module at call time): when ``common.bf16`` and ``common.tpu``
are both set and torch_xla is not installed (so a TPU run cannot be what was meant), ``tpu`` is
cleared (in ``common`` and in the groups argparse copied it to: ``distributed_training``, which
would skip init-method inference for multi-GPU runs, and ``optimizer``, which would pick the
unfused Adam) and the run trains in bfloat16 on the device it was given (``--cpu`` or CUDA).

``--fp16`` (fairseq's fp16 weights with a dynamic loss scaler) needs CUDA: with ``--cpu`` or on a
machine without a GPU fairseq fails after loading the data with a traceback ("Torch not compiled
with CUDA enabled"); the same wrapper refuses it first, in one line that points to ``--bf16``.

The recurrent layers of our models compute in float32 where the CPU lacks their bf16/fp16 kernel
(:mod:`fairseq_local.modules.rnn_precision`); ``torch.nn.LSTM`` itself is left as torch has it.
"""
import importlib.util
import logging

from fairseq_local import hook_points
from fairseq_local_core.errors import ConfigError

logger = logging.getLogger(__name__)


def clear_implied_tpu(cfg):
    """Clear ``common.tpu`` when it was only implied by ``common.bf16`` (no torch_xla). Returns
    True when it changed ``cfg``."""
    from omegaconf import open_dict

    common = getattr(cfg, "common", None)
    if common is None or not getattr(common, "bf16", False) or not getattr(common, "tpu", False):
        return False
    if importlib.util.find_spec("torch_xla") is not None:
        return False
    with open_dict(cfg):  # argparse copied the flag into every group that has one
        for group in cfg.values():
            if hasattr(group, "get") and group.get("tpu", None) is True:
                group.tpu = False
    logger.info("--bf16 without torch_xla: training in bfloat16 on %s, not on a TPU",
                "cpu" if common.cpu else "the GPU")
    return True


def check_fp16_device(cfg):
    """``--fp16`` / ``--memory-efficient-fp16`` without CUDA: a ConfigError naming the option."""
    import torch

    common = getattr(cfg, "common", None)
    if common is None or getattr(common, "tpu", False):
        return
    for flag in ("fp16", "memory_efficient_fp16"):
        if getattr(common, flag, False) and (common.cpu or not torch.cuda.is_available()):
            where = "--cpu" if common.cpu else "this machine has no CUDA device"
            raise ConfigError(f"--{flag.replace('_', '-')} needs a CUDA device ({where}): use --bf16 on CPU")


def call_main_checking_precision(call_main, cfg, main, **kwargs):
    clear_implied_tpu(cfg)
    check_fp16_device(cfg)
    return call_main(cfg, main, **kwargs)


def install():
    hook_points.add(hook_points.CALL_MAIN, call_main_checking_precision)
