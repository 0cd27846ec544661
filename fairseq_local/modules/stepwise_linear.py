"""A linear map applied once per step of a sequential loop, whose weight gradient is computed once.

An attentional decoder with input feeding must run its recurrent layers one target step at a time,
so each layer's input projection ``W x_t + b`` is a thin ``B x in`` product per step.  Its forward
is cheap, but autograd then computes the weight gradient per step as well: an ``out x B x in``
outer product that writes the whole ``out x in`` gradient (and accumulates it) at every step --
memory-bound, and at 1024 units the largest single cost of a training step on CPU.

``StepwiseLinear`` gives the same values and the same gradients, but routes the weight and bias
gradients through one autograd node created before the loop (a "tap" of zeros plus the bias, one
slice per step): in backward that node receives every step's output gradient ``g_t`` at once and
computes ``dW = sum_t g_t^T x_t`` as a single ``out x (T*B) x in`` matrix product.  Inside the loop
the product uses the detached weight, so the gradient with respect to ``x_t`` flows as usual and
no per-step weight gradient is formed.  The step inputs are kept (detached) for that product; the
caller must not modify them in place.  Without gradients (inference, ``torch.no_grad``) it is
plain ``F.linear``.
"""
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable


class _WeightGradTap(torch.autograd.Function):
    """Forward: ``bias`` broadcast to ``[steps, batch, out]`` (zeros without bias).  Backward: the
    weight gradient of every step at once, from the step inputs collected in ``inputs``."""

    @staticmethod
    def forward(ctx, weight: Tensor, bias: Optional[Tensor], inputs: List[Tensor], steps: int, batch: int):
        ctx.inputs, ctx.has_bias, ctx.weight_dtype = inputs, bias is not None, weight.dtype
        tap = weight.new_zeros(steps, batch, weight.size(0))
        if bias is not None:
            tap += bias
        return tap

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        xs = ctx.inputs
        grad_w = None
        if xs:
            g = grad[: len(xs)].reshape(-1, grad.size(-1))
            x = torch.stack(xs).reshape(g.size(0), -1).to(g.dtype)
            grad_w = g.t().mm(x).to(ctx.weight_dtype)
        grad_b = grad.sum((0, 1)) if ctx.has_bias else None
        return grad_w, grad_b, None, None, None


class StepwiseLinear:
    """``x_t -> W x_t + b`` for steps ``t = 0 .. steps-1``, called once per step and in order, with
    ``x_t`` of shape ``[batch, in]`` or ``[1, batch, in]``."""

    def __init__(self, weight: Tensor, bias: Optional[Tensor], steps: int, batch: int):
        self.weight, self.bias, self.step = weight, bias, 0
        self.deferred = torch.is_grad_enabled() and (
            weight.requires_grad or (bias is not None and bias.requires_grad))
        if self.deferred:
            self.inputs: List[Tensor] = []
            self.taps = _WeightGradTap.apply(weight, bias, self.inputs, steps, batch).unbind(0)

    def __call__(self, x: Tensor) -> Tensor:
        if not self.deferred:
            return F.linear(x, self.weight, self.bias)
        if self.step >= len(self.taps):
            raise IndexError(f"StepwiseLinear was built for {len(self.taps)} steps")
        tap = self.taps[self.step]
        self.step += 1
        self.inputs.append(x.detach())
        out = F.linear(x, self.weight.detach())
        return out + tap.to(out.dtype)
