"""Precision options on CPUs and GPUs: ``--bf16`` without a TPU, ``--fp16`` only with CUDA.

What it changes: ``distributed_utils.call_main`` and ``torch.nn.LSTM/GRU/RNN.forward``.  For
whom: every run with ``--bf16`` / ``--fp16``, and every recurrent torch layer in the process: the
wrapped forward is torch's own call unless this CPU lacks the low-precision kernel (where torch
fails), so fairseq's numbers are bit for bit where fairseq runs, and the log says once per cell
and dtype where the fallback computes in float32.  Why:

``fairseq.options.parse_args_and_arch`` turns every ``--bf16`` into ``--tpu`` (a leftover of the
TPU-only bf16 of fairseq 0.10), so ``fairseq-train --bf16`` on a GPU or with ``--cpu`` dies in
``Trainer.__init__`` (``utils.get_tpu_device``: ``'NoneType' object has no attribute
'xla_device'``) unless torch_xla is installed.  The same run configured through Hydra
(``common.bf16=true``) never sets ``tpu`` and trains in bfloat16 on CUDA or CPU (fairseq's
``FP16Optimizer`` keeps fp32 master weights and needs no loss scaler for bf16).

:func:`install` wraps ``fairseq.distributed.utils.call_main``, which every training and evaluation
entry point calls with the final config (``fairseq_cli.train``, ``hydra_train``, ``eval_lm``,
``validate``, looking it up on the module at call time): when ``common.bf16`` and ``common.tpu``
are both set and torch_xla is not installed (so a TPU run cannot be what was meant), ``tpu`` is
cleared (in ``common`` and in the groups argparse copied it to: ``distributed_training``, which
would skip init-method inference for multi-GPU runs, and ``optimizer``, which would pick the
unfused Adam) and the run trains in bfloat16 on the device it was given (``--cpu`` or CUDA).

``--fp16`` (fairseq's fp16 weights with a dynamic loss scaler) needs CUDA: with ``--cpu`` or on a
machine without a GPU fairseq fails after loading the data with a traceback ("Torch not compiled
with CUDA enabled"); the same wrapper refuses it first, in one line that points to ``--bf16``.

**Recurrent kernels without low-precision support.**  On CPU, ``torch.nn.LSTM`` under
``torch.autocast`` runs oneDNN's fused RNN primitive in bfloat16 or float16, which exists only where
the processor has the instructions it needs (AVX-512 for bf16; fp16 needs more): on an AVX2-only
CPU the forward pass dies with "could not create a primitive descriptor for the LSTM forward
propagation primitive" (``--bf16`` training, ``scripts/bench.py --bf16``, fairseq's ``--amp``).
:func:`cpu_rnn_kernel_ok` tells, once per (cell, dtype, autocast or low-precision weights), whether
this CPU's kernel runs, by running it on a 2-step, 2-unit input (forward and backward); where it does
not, :func:`install` makes ``torch.nn.LSTM`` / ``GRU`` / ``RNN`` compute that call in float32 (input,
state and weights cast to fp32 with autocast off: the same recurrence, more precise) and cast the
outputs back to the input's dtype; every other operation keeps its precision.  One warning line per
(cell, dtype) says so.  GPUs (cuDNN) and CPUs whose kernel runs are untouched.
"""
import functools
import importlib.util
import logging
import sys
import types

from fairseq_local_core.errors import ConfigError

logger = logging.getLogger(__name__)

_MARK = "_fairseq_local_precision"
_RNN_CLASSES = ("LSTM", "GRU", "RNN")
_warned = set()


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


@functools.lru_cache(maxsize=None)
def cpu_rnn_kernel_ok(cell: str, dtype, autocast: bool) -> bool:
    """Whether this CPU runs ``torch.nn.<cell>`` (LSTM, GRU or RNN) in ``dtype``: under
    ``torch.autocast("cpu", dtype)`` on fp32 weights (``autocast=True``) or with weights and input in
    ``dtype``.  Decided by running the kernel itself once (forward and backward on a 2-step input),
    so it answers for what the kernel needs (processor instructions, oneDNN build,
    ``ONEDNN_MAX_CPU_ISA``), not for a guess from ``/proc/cpuinfo``."""
    import torch

    module = getattr(torch.nn, cell)(2, 2)
    forward = _ORIGINAL_FORWARD.get(cell, type(module).forward)
    try:
        with torch.enable_grad():
            if autocast:
                with torch.autocast("cpu", dtype=dtype):
                    out, _ = forward(module, torch.ones(2, 1, 2))
            else:
                module = module.to(dtype)
                with torch.autocast("cpu", enabled=False):
                    out, _ = forward(module, torch.ones(2, 1, 2, dtype=dtype))
            out.float().sum().backward()
    except RuntimeError:
        return False
    return True


def _needs_fp32(module, input) -> bool:
    """The call would run a low-precision CPU kernel that this CPU lacks (see cpu_rnn_kernel_ok)."""
    import torch

    data = input.data if isinstance(input, torch.nn.utils.rnn.PackedSequence) else input
    if not torch.is_tensor(data) or data.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    if torch.is_autocast_enabled("cpu"):
        dtype, autocast = torch.get_autocast_dtype("cpu"), True
        if dtype not in (torch.bfloat16, torch.float16):
            return False
    else:
        dtype, autocast = data.dtype, False
        if dtype not in (torch.bfloat16, torch.float16):
            return False
    cell = module.mode.split("_")[0]  # LSTM, GRU, RNN_TANH / RNN_RELU
    if cpu_rnn_kernel_ok(cell, dtype, autocast):
        return False
    if (cell, dtype, autocast) not in _warned:
        _warned.add((cell, dtype, autocast))
        name = str(dtype).replace("torch.", "")
        how = "under autocast" if autocast else "with weights in that dtype"
        logger.warning(f"this CPU has no {name} kernel for torch.nn.{cell} {how}: the {cell} layers compute in "
                       f"float32, everything else in {name}")
    return True


def _fp32_forward(original, module, input, hx=None):
    """``original(module, input, hx)`` in float32 with autocast off (weights, input and state cast
    to fp32; gradients flow back through the casts), outputs cast back to the input's dtype."""
    import torch
    from torch.nn.utils.rnn import PackedSequence

    packed = isinstance(input, PackedSequence)
    dtype = (input.data if packed else input).dtype
    to32 = lambda t: t.float() if torch.is_tensor(t) and t.is_floating_point() else t  # noqa: E731
    back = lambda t: t.to(dtype) if torch.is_tensor(t) and t.is_floating_point() else t  # noqa: E731
    if packed:
        input = PackedSequence(to32(input.data), input.batch_sizes, input.sorted_indices, input.unsorted_indices)
    else:
        input = to32(input)
    if hx is not None:
        hx = tuple(to32(h) for h in hx) if isinstance(hx, tuple) else to32(hx)
    saved = module._flat_weights  # what the fused kernel reads; restored below
    module._flat_weights = [to32(w) for w in saved]
    try:
        with torch.autocast("cpu", enabled=False):
            out, hn = original(module, input, hx)
    finally:
        module._flat_weights = saved
    if packed:
        out = PackedSequence(back(out.data), out.batch_sizes, out.sorted_indices, out.unsorted_indices)
    else:
        out = back(out)
    hn = tuple(back(h) for h in hn) if isinstance(hn, tuple) else back(hn)
    return out, hn


_ORIGINAL_FORWARD = {}


def _falling_back(original, needs_fp32, fp32_forward):
    def forward(self, input, hx=None):
        if needs_fp32(self, input):
            return fp32_forward(original, self, input, hx)
        return original(self, input, hx)

    return forward


def _scriptable_wrapper(original):
    """The fallback forward as TorchScript sees it: ``torch.jit.script`` compiles a module's forward
    from its source (``inspect`` follows ``__wrapped__`` to the original, overloads included) but
    resolves the names in that source through the function's globals and closure.  The wrapper
    therefore gets the globals of the original's module (``torch.nn.modules.rnn``) and reaches its
    helpers through closure cells, so ``torch.jit.script(nn.LSTM(...))`` compiles torch's own forward
    (without the fallback, as on a CPU that has the kernel)."""
    inner = _falling_back(original, _needs_fp32, _fp32_forward)
    forward = types.FunctionType(inner.__code__, sys.modules[original.__module__].__dict__,
                                 original.__name__, inner.__defaults__, inner.__closure__)
    functools.update_wrapper(forward, original)
    setattr(forward, _MARK, True)
    return forward


def install_rnn_fallback():
    """Wrap ``torch.nn.LSTM/GRU/RNN.forward``: a CPU call whose low-precision kernel this CPU lacks
    runs in float32 (:func:`_fp32_forward`); every other call is the original forward.  Scripting
    such a module still works (:func:`_scriptable_wrapper`)."""
    import torch

    for cell in _RNN_CLASSES:
        cls = getattr(torch.nn, cell)
        if getattr(cls.forward, _MARK, False):
            continue
        cls.forward = _scriptable_wrapper(_ORIGINAL_FORWARD.setdefault(cell, cls.forward))


def install():
    install_rnn_fallback()
    from fairseq.distributed import utils as distributed_utils

    call_main = distributed_utils.call_main
    if getattr(call_main, _MARK, False):
        return

    @functools.wraps(call_main)
    def call_main_checking_precision(cfg, main, **kwargs):
        clear_implied_tpu(cfg)
        check_fp16_device(cfg)
        return call_main(cfg, main, **kwargs)

    setattr(call_main_checking_precision, _MARK, True)
    distributed_utils.call_main = call_main_checking_precision
