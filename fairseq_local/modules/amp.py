"""Mixed precision for our custom autograd Functions (``torch.autocast``, bf16 or fp16).

Autocast casts the inputs of the operations it knows (``bmm``, ``linear``...), not those of a
``torch.autograd.Function``: inside its forward, a product of an autocast bf16 activation with an
fp32 parameter comes out bf16, but its backward runs outside autocast and fails on the same
product (``expected scalar type Float but found BFloat16``).  :func:`autocast_inputs` casts the
floating inputs of such a Function to the dtype autocast computes products in (as
``torch.amp.custom_fwd(cast_inputs=...)`` does, on any device type), so forward and backward agree
on one dtype; the gradients of fp32 parameters come back fp32 through the cast.  Without autocast
it returns the tensors unchanged.
"""
from typing import Optional

import torch


def autocast_dtype(t: torch.Tensor) -> Optional[torch.dtype]:
    """The dtype autocast computes products in on ``t``'s device, or None when it is off."""
    device = t.device.type
    if not torch.is_autocast_enabled(device):
        return None
    return torch.get_autocast_dtype(device)


def autocast_inputs(*tensors):
    """``tensors`` with every floating-point one cast to the autocast dtype (None entries kept)."""
    ref = next(t for t in tensors if t is not None)
    dtype = autocast_dtype(ref)
    if dtype is None:
        return tensors
    return tuple(t.to(dtype) if t is not None and t.is_floating_point() else t for t in tensors)
