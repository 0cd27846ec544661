"""One captured loop at one set of shapes (:mod:`.cuda_graphs`): its memory pool, its static
buffers, its forward and backward graphs, and the first-call comparison with eager.

* :class:`Pool`: the memory pool of one loop (module, loop name), shared by all its variants; a
  pending training replay (its backward not yet replayed) keeps its activations there.
* :class:`Arena`: the static tensors of one loop, shared by all its variants: one flat buffer sized
  for the variant that needs most, in which each variant's static inputs, outputs, output
  gradients and gradients (of its inputs and of every parameter) are views.  Its *holder* is the
  variant that last wrote it; a variant that takes it over writes every slot it reads before
  reading it (inputs copied in, outputs and gradients written by its graphs), so variants of a loop
  that are never live at the same time hold one set of static tensors, not one each.
* :class:`Variant`: captures the forward and, in training, the backward as
  ``torch.cuda.make_graphed_callables`` does (the backward without ``retain_graph``, so the
  forward's saved activations go back into the pool after the capture), each graph ending in
  copies of its results into the variant's arena slots.  Its captured code is built by
  :func:`forward_fn` and :func:`backward_fn` from plain data (arena views, parameters): nothing
  refers back to the variant, so it has no reference cycle and is freed the moment the last
  reference goes.
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


ALIGN = 256  # bytes: where each arena slot starts


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class Arena:
    """One flat byte buffer holding the static tensors of the variants of one loop (see the module
    doc).  ``holder``: the variant whose slots it holds now (a weak reference)."""

    def __init__(self, nbytes: int, device: torch.device):
        self.buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
        self.bytes = nbytes
        self.holder: Optional[weakref.ref] = None

    def views(self, like: Sequence[Tuple[torch.Size, torch.dtype]], start: int) -> Tuple[List[Tensor], int]:
        """Contiguous tensors of the shapes and dtypes ``like`` in the buffer from byte ``start``
        (each slot aligned), and the byte where the next slot may start.  Not autograd views: each is
        a leaf that may require grad."""
        out, storage = [], self.buf.untyped_storage()
        for shape, dtype in like:
            size = torch.Size(shape).numel() * dtype.itemsize
            t = torch.empty(0, dtype=dtype, device=self.buf.device)
            out.append(t.set_(storage, start // dtype.itemsize, shape, _contiguous(shape)))
            start += _aligned(size)
        return out, start

    def take(self, variant, backend):
        """``variant`` writes the buffer next: if another variant held it, the buffer is released to
        the backend first (the stand-in poisons it, so a stale read of the old holder's slots shows)."""
        if self.holder is None or self.holder() is not variant:
            backend.release([self.buf])
            self.holder = weakref.ref(variant)

    def let_go(self, variant, backend):
        """``variant`` is released: if it held the buffer, the buffer is released (poisoned) too."""
        if self.holder is not None and self.holder() in (variant, None):
            backend.release([self.buf])
            self.holder = None


def _contiguous(shape) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(tuple(shape)):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def slot_bytes(like: Sequence[Tuple[torch.Size, torch.dtype]]) -> int:
    """The arena bytes of static tensors of the shapes and dtypes ``like``."""
    return sum(_aligned(torch.Size(shape).numel() * dtype.itemsize) for shape, dtype in like)


class Pool:
    """The memory pool of one captured loop (module, loop), shared by all its variants, and its
    :class:`Arena` (sized for the largest variant).  ``pending``: the token of a training replay
    whose backward has not run (its saved activations live in the pool and its static inputs in the
    arena, so no other variant of the pool may replay until it has)."""

    def __init__(self, owner: nn.Module, handle, peak: bool):
        self.owner, self.handle, self.peak, self.bytes = weakref.ref(owner), handle, peak, 0
        self.pending: Optional[weakref.ref] = None
        self.arena: Optional[Arena] = None

    def fitting(self, nbytes: int, device: torch.device) -> Arena:
        """The arena if it holds ``nbytes``, else a new one of ``nbytes``: it becomes the pool's
        arena when the capture that asked succeeds (the variants laid out in the old one are stale
        from then on: :meth:`Variant.stale`)."""
        return self.arena if self.arena is not None and self.arena.bytes >= nbytes else Arena(nbytes, device)

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


def _publish(slots: List, results: Sequence):
    """Copies ``results`` into their arena ``slots`` (inside the graph: a replay leaves them there);
    nothing while the slots are not laid out yet (the warm-up)."""
    with torch.no_grad():
        for s, r in zip(slots, results):
            if isinstance(s, Tensor):
                s.copy_(r.detach())


def forward_fn(run: Callable, static_in: List, spec, device_type: str, autocast_dtype,
               out_slots: List) -> Callable:
    """The captured forward, ending in the copies of its flat outputs into ``out_slots``; returns the
    outputs themselves (the backward's roots).  Holds the static inputs and slots (lists the variant
    fills in), never the variant (no reference cycle)."""
    def forward():
        # under autocast, without its cache of cast weights: a cached cast would be recorded into
        # the graph and replayed after the optimizer has changed the weights
        cast = (torch.autocast(device_type, dtype=autocast_dtype, cache_enabled=False) if autocast_dtype
                else contextlib.nullcontext())
        with capturing(), cast:
            out = run(*tree_unflatten(static_in, spec))
        _publish(out_slots, tree_flatten(out)[0])
        return out
    return forward


def backward_fn(diff_out: List[int], diff_in: List[Tensor], grad_out: List[Tensor],
                grad_slots: Optional[List] = None) -> Callable:
    """The captured backward of the forward's flat outputs: the gradients of ``diff_in``, copied into
    ``grad_slots``; the forward's saved activations are freed by it (no ``retain_graph``), back into
    the pool."""
    def backward(flat_out):
        outs = [flat_out[i] for i in diff_out]
        if not outs:
            grads = tuple(torch.zeros_like(x) for x in diff_in)
        else:
            with capturing():
                grads = torch.autograd.grad(outs, diff_in, grad_out, allow_unused=True)
            grads = tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, diff_in))
        _publish(grad_slots or [], grads)
        return grads
    return backward


class Variant:
    """One captured loop at one set of shapes and one mode: the forward graph and (training) the
    backward graph in the pool of its loop, its static tensors views into the loop's arena."""

    def __init__(self, owner: nn.Module, label: str, run: Callable, args: List, spec, train: bool, impl, pool: Pool):
        self.label, self.train, self.backend, self.pool = label, train, impl, pool
        self.owner = weakref.ref(owner)
        self.params = [p for p in owner.parameters() if p.requires_grad] if train else []
        # a graph reads every parameter and buffer at the address it had at capture
        self.watched_ptrs = [t.data_ptr() for t in list(owner.parameters()) + list(owner.buffers())]
        # the warm-up runs on copies of the inputs; the arena is laid out once the outputs are known
        self.static_in = [a.detach().clone().requires_grad_(train and a.requires_grad and a.is_floating_point())
                          if isinstance(a, Tensor) else a for a in args]
        self.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        self.pending: Optional[weakref.ref] = None
        self.generation = 0
        self.check: Optional[Tuple] = None  # the first backward's eager reference
        device = next(a.device for a in args if isinstance(a, Tensor))
        self.autocast = torch.is_autocast_enabled(device.type)
        self.static_out: List = []
        self.static_grads: List = []
        forward = forward_fn(run, self.static_in, spec, device.type,
                             torch.get_autocast_dtype(device.type) if self.autocast else None, self.static_out)
        diff_in = self._diff_in()
        flat = impl.warmup(warmup_fn(forward, diff_in, train))
        self.diff_out = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad] if train else []
        self.out_grad = [isinstance(o, Tensor) and o.requires_grad for o in flat]
        self._lay_out(args, flat, diff_in, device)
        diff_in = self._diff_in()
        self.fwd_graph, out, grown = impl.capture(forward, pool.handle, label)
        flat, self.out_spec = tree_flatten(out)
        if train:
            backward = backward_fn(self.diff_out, diff_in, self.static_grad_out, self.static_grads)
            self.bwd_graph, _, more = impl.capture(backward, pool.handle, label, forward=self.fwd_graph, outputs=flat)
            grown += more
        # only the arena's slots stay: the forward's outputs and autograd graph (and on CUDA its
        # saved activations, back in the pool for the next capture) are gone with ``flat``
        pool.grow(grown)
        pool.arena = self.arena

    def _diff_in(self) -> List[Tensor]:
        return [self.static_in[i] for i in self.tensor_idx if self.static_in[i].requires_grad] + self.params

    def _lay_out(self, args: List, flat: List, diff_in: List[Tensor], device):
        """Views into the loop's arena (grown if it is too small) for the static inputs (their values
        copied in), outputs, output gradients and gradients; the variant takes the arena over."""
        ins = [(a.shape, a.dtype) for a in args if isinstance(a, Tensor)]
        outs = [(o.shape, o.dtype) for o in flat if isinstance(o, Tensor)]
        grad_out = [(flat[i].shape, flat[i].dtype) for i in self.diff_out]
        grads = [(x.shape, x.dtype) for x in diff_in] if self.train else []
        self.arena = self.pool.fitting(slot_bytes(ins + outs + grad_out + grads), device)
        self.arena.take(self, self.backend)
        views, at = self.arena.views(ins, 0)
        with torch.no_grad():
            for i, v in zip(self.tensor_idx, views):
                v.copy_(self.static_in[i])
                self.static_in[i] = v.requires_grad_(self.static_in[i].requires_grad)
        out_views, at = self.arena.views(outs, at)
        it = iter(out_views)
        self.static_out[:] = [next(it) if isinstance(o, Tensor) else o for o in flat]
        self.static_grad_out, at = self.arena.views(grad_out, at)
        grad_views, _ = self.arena.views(grads, at)
        self.static_grads[:] = grad_views

    def slots(self) -> List[Tensor]:
        return [t for t in self.static_in + self.static_out + self.static_grad_out + self.static_grads
                if isinstance(t, Tensor)]

    def stale(self) -> bool:
        """Whether a parameter or buffer of the module has new storage (``model.to``, ``p.data = ...``,
        a buffer reassigned): the graph would read the old address; or the loop's arena was replaced
        by a larger one."""
        watched = list(self.owner().parameters()) + list(self.owner().buffers())
        return self.arena is not self.pool.arena or len(watched) != len(self.watched_ptrs) or any(
            t.data_ptr() != q for t, q in zip(watched, self.watched_ptrs))

    def owned(self) -> Tuple[List[Tensor], List[Tensor]]:
        """What a replay may read besides what it makes: its arena slots (only their bytes of the
        shared arena), and the parameters and buffers of its module (their whole storage)."""
        owner = self.owner()
        return self.slots(), list(owner.parameters()) + list(owner.buffers())

    def release(self):
        """The variant leaves: the arena is released (the stand-in poisons it) if this variant held it."""
        self.arena.let_go(self, self.backend)

    def replay(self, tensors: Sequence[Tensor]) -> List[Tensor]:
        self.arena.take(self, self.backend)
        with torch.no_grad():
            for i, t in zip(self.tensor_idx, tensors):
                self.static_in[i].copy_(t)
        self.backend.replay(self.fwd_graph, self.static_out, self.owned() if self.backend.CHECKS_OWNERSHIP else (),
                            self.label)
        self.generation += 1
        return [o.detach().clone() if isinstance(o, Tensor) else o for o in self.static_out]

    def replay_backward(self, grads: Sequence[Optional[Tensor]]) -> List[Tensor]:
        """The backward graph after this variant's forward replay (the pool's ``pending`` kept every
        other variant off the arena meanwhile); the gradients of the parameters are handed to autograd,
        which accumulates them into ``.grad``."""
        self.arena.take(self, self.backend)
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
    """The eager runs before a capture: the forward, and in training its backward (gradients one);
    returns the forward's flat outputs (their shapes, dtypes and which need gradients lay out the
    arena)."""
    def warmup():
        flat = tree_flatten(forward())[0]
        if train:
            idx = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
            backward_fn(idx, diff_in, [torch.ones_like(flat[i]) for i in idx])(flat)
        return flat
    return warmup


__all__ = ["is_capturing", "capturing", "Arena", "Pool", "Variant", "slot_bytes", "forward_fn", "backward_fn",
           "warmup_fn", "mismatch",
           "tolerance"]
