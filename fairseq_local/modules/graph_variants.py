"""One captured loop at one set of shapes (:mod:`.cuda_graphs`): its memory pool, its static
buffers, its forward and backward graphs, and the first-call comparison with eager.

* :class:`Pool`: the memory pool of one loop (module, loop name), shared by all its variants; a
  pending training replay (its backward not yet replayed) keeps its activations there.
* :class:`Variant`: captures the forward and, in training, the backward as
  ``torch.cuda.make_graphed_callables`` does (the backward without ``retain_graph``, so the
  forward's saved activations go back into the pool after the capture and only the static inputs,
  outputs and gradients stay held).  Its captured code is built by :func:`forward_fn` and
  :func:`backward_fn` from plain data (static buffers, parameters): nothing refers back to the
  variant, so it has no reference cycle and is freed the moment the last reference goes.
* :func:`is_capturing`: True while a loop is captured (or run exactly as under a capture).
"""
import contextlib
import threading
import weakref
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten


_STATE = threading.local()


def is_capturing() -> bool:
    return getattr(_STATE, "depth", 0) > 0


@contextlib.contextmanager
def capturing():
    """Marks code that runs under (or exactly as under) a capture: layers take their step paths."""
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1


class Pool:
    """The memory pool of one captured loop (module, loop), shared by all its variants.  ``pending``:
    the token of a training replay whose backward has not run (its saved activations live in the
    pool, so no other variant of the pool may replay until it has)."""

    def __init__(self, owner: nn.Module, handle, peak: bool):
        self.owner, self.handle, self.peak, self.bytes = weakref.ref(owner), handle, peak, 0
        self.pending: Optional[weakref.ref] = None

    def busy(self) -> bool:
        return self.pending is not None and self.pending() is not None

    def grow(self, nbytes: int):
        self.bytes = max(self.bytes, nbytes) if self.peak else self.bytes + nbytes


def tolerance(dtype, low_precision: bool = False) -> float:
    return 3e-2 if low_precision or dtype in (torch.float16, torch.bfloat16) else 1e-3


def mismatch(ref: Sequence, got: Sequence, low_precision: bool = False) -> Optional[str]:
    """None if every tensor of ``got`` is within the dtype's tolerance of ``ref`` (relative to the
    largest entry of the tensor; half precision's under autocast, whatever the tensor's dtype), else
    a description of the worst one."""
    for i, (a, b) in enumerate(zip(ref, got)):
        if not isinstance(a, Tensor) or not a.is_floating_point():
            if isinstance(a, Tensor) and not torch.equal(a, b):
                return f"tensor {i} differs"
            continue
        if a.numel() == 0:
            continue
        a, b = a.detach().double(), b.detach().double()
        err = (a - b).abs().max()
        scale = a.abs().max().clamp(min=1e-6)
        if not bool(torch.isfinite(err)) or bool(err > tolerance(ref[i].dtype, low_precision) * scale):
            return f"tensor {i}: max difference {float(err):.3g} at scale {float(scale):.3g}"
    return None


def forward_fn(run: Callable, static_in: List, spec, device_type: str, autocast_dtype) -> Callable:
    """The captured forward; holds the static inputs, never the variant (no reference cycle)."""
    def forward():
        # under autocast, without its cache of cast weights: a cached cast would be recorded into
        # the graph and replayed after the optimizer has changed the weights
        cast = (torch.autocast(device_type, dtype=autocast_dtype, cache_enabled=False) if autocast_dtype
                else contextlib.nullcontext())
        with capturing(), cast:
            return run(*tree_unflatten(static_in, spec))
    return forward


def backward_fn(diff_out: List[int], diff_in: List[Tensor], grad_out: List[Tensor]) -> Callable:
    """The captured backward of the forward's flat outputs: the gradients of ``diff_in``; the
    forward's saved activations are freed by it (no ``retain_graph``), back into the pool."""
    def backward(flat_out):
        outs = [flat_out[i] for i in diff_out]
        if not outs:
            return tuple(torch.zeros_like(x) for x in diff_in)
        with capturing():
            grads = torch.autograd.grad(outs, diff_in, grad_out, allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, diff_in))
    return backward


class Variant:
    """One captured loop at one set of shapes and one mode: static inputs, the forward graph and
    (training) the backward graph, in the pool of its loop."""

    def __init__(self, owner: nn.Module, label: str, run: Callable, args: List, spec, train: bool, impl, pool: Pool):
        self.label, self.train, self.backend, self.pool = label, train, impl, pool
        self.owner = weakref.ref(owner)
        self.params = [p for p in owner.parameters() if p.requires_grad] if train else []
        # a graph reads every parameter and buffer at the address it had at capture
        self.watched_ptrs = [t.data_ptr() for t in list(owner.parameters()) + list(owner.buffers())]
        self.static_in = [a.detach().clone().requires_grad_(train and a.requires_grad and a.is_floating_point())
                          if isinstance(a, Tensor) else a for a in args]
        self.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.pending: Optional[weakref.ref] = None
        self.generation = 0
        self.check: Optional[Tuple] = None  # the first backward's eager reference
        device = next(a.device for a in args if isinstance(a, Tensor))
        self.autocast = torch.is_autocast_enabled(device.type)
        forward = forward_fn(run, self.static_in, spec, device.type,
                              torch.get_autocast_dtype(device.type) if self.autocast else None)
        diff_in = [self.static_in[i] for i in self.tensor_idx if self.static_in[i].requires_grad] + self.params
        impl.warmup(warmup_fn(forward, diff_in, train))
        self.fwd_graph, out, grown = impl.capture(forward, pool.handle, label)
        flat, self.out_spec = tree_flatten(out)
        self.static_grad_out: List[Tensor] = []
        self.static_grads: List[Tensor] = []
        if train:
            self.diff_out = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
            self.static_grad_out = [torch.zeros_like(flat[i]) for i in self.diff_out]
            backward = backward_fn(self.diff_out, diff_in, self.static_grad_out)
            self.bwd_graph, grads, more = impl.capture(backward, pool.handle, label, forward=self.fwd_graph, outputs=flat)
            self.static_grads = list(grads)
            grown += more
        # only the static outputs stay: detached, so the forward's autograd graph (and on CUDA its
        # saved activations, back in the pool for the next capture) is gone
        self.out_grad = [isinstance(o, Tensor) and o.requires_grad for o in flat]
        self.static_out = [o.detach() if isinstance(o, Tensor) else o for o in flat]
        pool.grow(grown)
        self.own_bytes = sum(t.untyped_storage().nbytes() for t in self.static_in + self.static_grad_out
                             if isinstance(t, Tensor))

    def stale(self) -> bool:
        """Whether a parameter or buffer of the module has new storage (``model.to``, ``p.data = ...``,
        a buffer reassigned): the graph would read the old address."""
        watched = list(self.owner().parameters()) + list(self.owner().buffers())
        return len(watched) != len(self.watched_ptrs) or any(
            t.data_ptr() != q for t, q in zip(watched, self.watched_ptrs))

    def owned(self) -> List[Tensor]:
        """What a replay may read besides what it makes: static inputs, parameters and buffers."""
        owner = self.owner()
        return ([t for t in self.static_in + self.static_grad_out if isinstance(t, Tensor)]
                + list(owner.parameters()) + list(owner.buffers()))

    def replay(self, tensors: Sequence[Tensor]) -> List[Tensor]:
        with torch.no_grad():
            for i, t in zip(self.tensor_idx, tensors):
                s = self.static_in[i]
                if s.data_ptr() != t.data_ptr() or s.stride() != t.stride():
                    s.copy_(t)
        self.backend.replay(self.fwd_graph, self.static_out, self.owned() if self.backend.CHECKS_OWNERSHIP else (),
                            self.label)
        self.generation += 1
        return [o.detach().clone() if isinstance(o, Tensor) else o for o in self.static_out]

    def replay_backward(self, grads: Sequence[Optional[Tensor]]) -> List[Tensor]:
        with torch.no_grad():
            for k, i in enumerate(self.diff_out):
                g = grads[i]
                if g is None:
                    self.static_grad_out[k].zero_()
                else:
                    self.static_grad_out[k].copy_(g)
        self.backend.replay(self.bwd_graph, self.static_grads, self.owned() if self.backend.CHECKS_OWNERSHIP else (),
                            self.label)
        return [g.clone() for g in self.static_grads]


def warmup_fn(forward: Callable, diff_in: List[Tensor], train: bool) -> Callable:
    """The eager runs before a capture: the forward, and in training its backward (gradients one)."""
    def warmup():
        flat = tree_flatten(forward())[0]
        if train:
            idx = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
            backward_fn(idx, diff_in, [torch.ones_like(flat[i]) for i in idx])(flat)
    return warmup


__all__ = ["is_capturing", "capturing", "Pool", "Variant", "forward_fn", "backward_fn", "warmup_fn", "mismatch",
           "tolerance"]
