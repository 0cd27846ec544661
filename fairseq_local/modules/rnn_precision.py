"""torch's recurrent layers for our models, computing in float32 where this CPU lacks their
low-precision kernel.

On CPU, ``torch.nn.LSTM`` under ``torch.autocast`` runs oneDNN's fused RNN primitive in bfloat16 or
float16, which exists only where the processor has the instructions it needs (AVX-512 for bf16;
fp16 needs more): on an AVX2-only CPU the forward pass dies with "could not create a primitive
descriptor for the LSTM forward propagation primitive" (``--bf16`` training, ``scripts/bench.py
--bf16``, fairseq's ``--amp``).  :func:`cpu_rnn_kernel_ok` tells, once per (cell, dtype, autocast or
low-precision weights), whether this CPU's kernel runs, by running it on a 2-step, 2-unit input
(forward and backward).  :class:`LSTM`, :class:`GRU` and :class:`RNN` are torch's classes (same
parameters, same state dict) whose forward, where that kernel does not run, computes the call in
float32 (input, state and weights cast to fp32 with autocast off: the same recurrence, more precise)
and casts the outputs back to the input's dtype; every other operation keeps its precision.  One
warning line per (cell, dtype) says so.  GPUs (cuDNN) and CPUs whose kernel runs call torch's own
forward.  Our layers that hold a torch RNN (:class:`~fairseq_local.modules.torch_rnn_layer.TorchRNNLayer`)
build these classes; ``torch.nn.LSTM`` itself, and so every model of fairseq, is left as torch has it.
"""
import functools
import logging

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

logger = logging.getLogger(__name__)

_warned = set()


@functools.lru_cache(maxsize=None)
def cpu_rnn_kernel_ok(cell: str, dtype, autocast: bool) -> bool:
    """Whether this CPU runs ``torch.nn.<cell>`` (LSTM, GRU or RNN) in ``dtype``: under
    ``torch.autocast("cpu", dtype)`` on fp32 weights (``autocast=True``) or with weights and input in
    ``dtype``.  Decided by running the kernel itself once (forward and backward on a 2-step input),
    so it answers for what the kernel needs (processor instructions, oneDNN build,
    ``ONEDNN_MAX_CPU_ISA``), not for a guess from ``/proc/cpuinfo``."""
    module = getattr(nn, cell)(2, 2)
    try:
        with torch.enable_grad():
            if autocast:
                with torch.autocast("cpu", dtype=dtype):
                    out, _ = module(torch.ones(2, 1, 2))
            else:
                module = module.to(dtype)
                with torch.autocast("cpu", enabled=False):
                    out, _ = module(torch.ones(2, 1, 2, dtype=dtype))
            out.float().sum().backward()
    except RuntimeError:
        return False
    return True


def needs_fp32(module, input) -> bool:
    """The call would run a low-precision CPU kernel that this CPU lacks (see cpu_rnn_kernel_ok)."""
    data = input.data if isinstance(input, PackedSequence) else input
    if not torch.is_tensor(data) or data.device.type != "cpu" or torch.compiler.is_compiling():
        return False
    if torch.is_autocast_enabled("cpu"):
        dtype, autocast = torch.get_autocast_dtype("cpu"), True
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


def fp32_forward(original, module, input, hx=None):
    """``original(module, input, hx)`` in float32 with autocast off (weights, input and state cast
    to fp32; gradients flow back through the casts), outputs cast back to the input's dtype."""
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


class LSTM(nn.LSTM):
    """``torch.nn.LSTM`` computing in float32 where this CPU lacks its low-precision kernel."""

    def forward(self, input, hx=None):
        if needs_fp32(self, input):
            return fp32_forward(nn.LSTM.forward, self, input, hx)
        return super().forward(input, hx)


class GRU(nn.GRU):
    """``torch.nn.GRU`` computing in float32 where this CPU lacks its low-precision kernel."""

    def forward(self, input, hx=None):
        if needs_fp32(self, input):
            return fp32_forward(nn.GRU.forward, self, input, hx)
        return super().forward(input, hx)


class RNN(nn.RNN):
    """``torch.nn.RNN`` computing in float32 where this CPU lacks its low-precision kernel."""

    def forward(self, input, hx=None):
        if needs_fp32(self, input):
            return fp32_forward(nn.RNN.forward, self, input, hx)
        return super().forward(input, hx)


CLASSES = {"lstm": LSTM, "gru": GRU, "rnn": RNN}
