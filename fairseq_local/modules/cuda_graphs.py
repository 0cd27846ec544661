"""CUDA graphs of the recurrent loops: the capture side of ``--rnn-impl cuda-graphs`` (:mod:`.fast_path`).

Opt-in: ``--rnn-impl auto`` (the default) runs the eager loop on CUDA too, because the captured path
has not yet finished a real ``fairseq-train`` run on a GPU; ``cuda-graphs`` selects it.

A loop over time launches dozens of small kernels per step.  :func:`captured_scan` records the loop
once per padded shape as a CUDA graph (stream capture of the very code the eager path runs, so no
compiler is involved) and replays it with one launch per call:

* **Variants.**  The time and batch axes are padded to buckets (:func:`length_bucket`,
  :func:`batch_bucket`; padded positions are invalid, which the layer contract makes exact).  Each
  (module, loop, padded shapes, dtypes, grad mode, train/eval, autocast) is one *variant*: a forward
  graph, and in training a backward graph that computes the gradients of the loop's inputs and of
  the module's parameters.  At most :data:`MAX_LIVE_GRAPHS` variants (or what a capture ahead
  captured, :func:`keep_live`), holding at most the byte budget
  (:func:`byte_budget`), stay alive; the least recently used is released at once (a variant holds
  no reference cycle, so it needs no garbage collection).
* **Memory.**  All variants of one loop (module, loop name) share one memory pool.  The backward is
  captured as ``torch.cuda.make_graphed_callables`` does: without ``retain_graph``, so the forward's
  saved activations go back into the pool after the capture and only the static inputs, outputs and
  gradients stay held, in the loop's arena (:class:`~.graph_variants.Arena`: one buffer sized for
  its largest variant, shared by all its variants); the next variant's capture reuses the pool's
  memory.  Pool and arena therefore hold about the eager peak of the loop's largest shape, not the
  sum over its shapes.  A training replay leaves its activations in the pool and its inputs in the
  arena until its backward replays: until then every call of the loop (another variant, or the
  same one again) runs eagerly.
* **Inputs and outputs.**  A replay copies the call's tensors into the graph's static inputs and
  returns copies of the static outputs (the next replay of the loop overwrites them).  Module
  parameters and buffers are read in place (an optimizer's in-place update is seen); one whose storage was replaced (``model.to``, ``p.data = ...``) makes the variant
  capture again.  Code inside a loop reads nothing else that lives across calls (a cached tensor
  may be freed or replaced while a graph still reads its address): under :func:`is_capturing` it
  computes such tensors.
* **Nothing silently wrong.**  The first call of every variant replays the new graph and compares it
  with the eager loop on the same inputs (outputs, and in training the gradients of its first
  backward) within the dtype's tolerance.  A mismatch, or a capture or replay that fails, warns once
  naming the variant and runs that variant eagerly on its unpadded inputs from then on (other
  variants of the loop keep their graphs); in strict mode (``--graph-fallback error``,
  :func:`strict_mode`, :func:`set_strict`) it raises :class:`GraphFallbackError` instead.
* **No host synchronisation inside a loop.**  While capturing, :func:`is_capturing` is True: layers
  run their step code and skip the checks that read a tensor on the host.  Captures use CUDA's
  ``thread_local`` capture mode (fairseq's loader thread may allocate meanwhile) and leave the
  pinned-memory cache alone (:mod:`.graph_backends`).  On CPU, :class:`ReplayBackend` stands in for
  CUDA graphs in the tests: it fails on any host synchronisation, on a replay that reads a tensor the
  graph does not own (of a shared arena, only its own slots), and on a backward whose pool another
  variant overwrote, and poisons an arena released or taken over by another variant.
"""
import collections
import contextlib
import math
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_flatten, tree_unflatten

from fairseq_local.modules.graph_variants import Pool, Variant, capturing, is_capturing, mismatch
from fairseq_local.modules.graph_backends import (CudaBackend, HostSyncError, NoHostSync, OwnershipError, PoolError,
                                                  ReplayBackend)

TIME_BUCKETS = (1, 8, 16, 32, 64)
BATCH_BUCKET_MANTISSAS = (4, 6)
MAX_LIVE_GRAPHS = 64
MAX_GRAPH_BYTES: Optional[int] = None  # bytes the live variants may hold (None: GRAPH_MEMORY_FRACTION on CUDA)
GRAPH_MEMORY_FRACTION = 0.5  # of the device's memory


# --- buckets ---
def length_bucket(length: int) -> int:
    """The padded length of a time axis: the smallest of :data:`TIME_BUCKETS` that holds it, or a
    multiple of the largest."""
    for b in TIME_BUCKETS:
        if length <= b:
            return b
    return -(-length // TIME_BUCKETS[-1]) * TIME_BUCKETS[-1]


def batch_bucket(size: int) -> int:
    """The smallest ``m * 2^e >= size`` with m in ``BATCH_BUCKET_MANTISSAS``, e >= 0."""
    if size <= BATCH_BUCKET_MANTISSAS[0]:
        return BATCH_BUCKET_MANTISSAS[0]
    e = max(0, int(math.floor(math.log2(size))) - 2)
    while True:
        for m in BATCH_BUCKET_MANTISSAS:
            if m << e >= size:
                return m << e
        e += 1


_PLAN: List[Any] = [None]  # the declared shapes of the run (fairseq_local.data.shape_buckets.ShapePlan) or None


def set_shape_plan(plan) -> None:
    """Declare the run's batch shapes (a ``ShapePlan``: ``shapes`` of (length, batch), lengths
    increasing, and ``beam``), or None: :func:`padded_shape` then pads to them."""
    _PLAN[0] = plan


def shape_plan():
    return _PLAN[0]


def padded_shape(T: int, B: int) -> Tuple[int, int]:
    """The (time, batch) a call of ``T`` steps and ``B`` rows is padded to.  With a plan: the first
    declared shape (lengths increasing) that holds it; ``T = 1`` (a one-token decoding step) pads
    the batch only, to the smallest declared batch size or batch size times the beam that holds it.
    Calls that no declared shape holds, and every call without a plan: :func:`length_bucket` and
    :func:`batch_bucket`."""
    plan = _PLAN[0]
    if plan is not None:
        if T == 1:
            rows = sorted({b * m for _, b in plan.shapes for m in (1, plan.beam)})
            fit = [r for r in rows if r >= B]
            return 1, (fit[0] if fit else batch_bucket(B))
        for length, rows in plan.shapes:
            if length >= T and rows >= B:
                return length, rows
        longer = [length for length, _ in plan.shapes if length >= T]
        return (longer[0] if longer else length_bucket(T)), batch_bucket(B)
    return length_bucket(T), batch_bucket(B)


def pad_dim(t: Optional[Tensor], dim: int, size: int, value=0) -> Optional[Tensor]:
    """``t`` padded with ``value`` at the end of ``dim`` up to ``size`` (unchanged if already)."""
    if t is None or t.size(dim) == size:
        return t
    shape = list(t.shape)
    shape[dim] = size - t.size(dim)
    return torch.cat([t, t.new_full(shape, value)], dim)


def pad_rows(t: Tensor, size: int) -> Tensor:
    """``t`` with copies of its first row appended along dim 0 up to ``size`` rows: padding for a batch
    whose rows attend over their own positions (a row of padding only would attend to nothing)."""
    if t.size(0) == size:
        return t
    return torch.cat([t, t[:1].expand(size - t.size(0), *t.shape[1:])], 0)


class Layout(NamedTuple):
    """Where the batch axis of a loop's inputs is: for each carry and seq entry its dim (``seq``
    entries are ``[T, ...]``, so a dim >= 1; the outputs share the first seq entry's), for each const
    None (not batched) or ``(dim, fill)`` (the value padded rows get).  ``lengths``: for each const,
    the dims of another length that varies from call to call (the source seen by attention), which
    the compiled step treats as dynamic from its first call.  ``pad=False``: the caller already
    padded every axis (a lattice grid)."""

    carry: Optional[Sequence[int]] = None  # default: 0 for every entry
    seq: Optional[Sequence[int]] = None  # default: 1 for every entry
    consts: Optional[Sequence[Optional[Tuple[int, Any]]]] = None  # default: none batched
    pad: bool = True
    lengths: Optional[Sequence[Sequence[int]]] = None  # default: none


# --- capture state, strict mode, backends ---
_STRICT = {"on": False}


class GraphFallbackError(RuntimeError):
    """Strict mode (``--graph-fallback error``): a variant could not run as a CUDA graph."""


def set_strict(on: bool):
    """Strict mode for every loop: a capture failure or a mismatch with eager raises
    :class:`GraphFallbackError` instead of falling back to the eager loop."""
    _STRICT["on"] = bool(on)


def is_strict() -> bool:
    return _STRICT["on"]


@contextlib.contextmanager
def strict_mode(on: bool = True):
    old = _STRICT["on"]
    set_strict(on)
    try:
        yield
    finally:
        set_strict(old)


_BACKENDS: Dict[str, Any] = {}


def available(like) -> bool:
    """Whether a call with tensors like ``like`` can run captured: on CUDA, or where a test installed
    a stand-in backend (:func:`use_backend`)."""
    device = getattr(like, "device", None)
    kind = "cuda" if getattr(like, "is_cuda", False) else getattr(device, "type", None)
    return kind == "cuda" or kind in _BACKENDS


def backend(device_type: str):
    if device_type not in _BACKENDS and device_type == "cuda":
        _BACKENDS["cuda"] = CudaBackend()
    return _BACKENDS[device_type]


@contextlib.contextmanager
def use_backend(device_type: str, impl):
    """Capture the loops of ``device_type`` tensors with ``impl`` (tests: :class:`ReplayBackend` on
    CPU)."""
    old = _BACKENDS.get(device_type)
    _BACKENDS[device_type] = impl
    try:
        yield impl
    finally:
        if old is None:
            _BACKENDS.pop(device_type, None)
        else:
            _BACKENDS[device_type] = old
        reset()


# --- pools and variants ---
_LIVE: "collections.OrderedDict[tuple, Variant]" = collections.OrderedDict()
_POOLS: "weakref.WeakValueDictionary[tuple, Pool]" = weakref.WeakValueDictionary()
_FAILED: "weakref.WeakKeyDictionary[nn.Module, Dict[tuple, str]]" = weakref.WeakKeyDictionary()
_SEEN: Dict[str, set] = collections.defaultdict(set)
_ZERO = {"graphs_captured": 0, "capture_s": 0.0, "graph_fallbacks": 0, "graphs_verified": 0, "graph_evictions": 0,
         "arenas_outgrown": 0}
_STATS = dict(_ZERO)


def graph_bytes() -> int:
    """Bytes held by the live variants: their pools and the arenas of their static tensors, each once."""
    held = {id(x): x.bytes for v in _LIVE.values() for x in (v.pool, v.arena)}
    return sum(held.values())


def stats() -> Dict[str, Any]:
    return {**_STATS, "graphs_live": len(_LIVE), "graph_bytes": graph_bytes(),
            "variants": {name: len(keys) for name, keys in _SEEN.items()}}


def reset():
    while _LIVE:
        _LIVE.popitem()[1].release()
    _POOLS.clear()
    _FAILED.clear()
    _SEEN.clear()
    _STATS.update(_ZERO)
    _KEEP[0] = 0


def byte_budget(device: torch.device) -> Optional[int]:
    """:data:`MAX_GRAPH_BYTES`, else on CUDA :data:`GRAPH_MEMORY_FRACTION` of the device's memory."""
    if MAX_GRAPH_BYTES is not None:
        return MAX_GRAPH_BYTES
    if device.type == "cuda":
        return int(GRAPH_MEMORY_FRACTION * torch.cuda.get_device_properties(device).total_memory)
    return None


def _describe(name: str, flat: Sequence, train: bool, training: bool, autocast) -> str:
    """A variant in words: the loop, the shapes of its tensors and its mode."""
    shapes = ", ".join("x".join(map(str, a.shape)) or "scalar" for a in flat if isinstance(a, Tensor))
    mode = ("training" if train else "no grad") + ("" if training else ", eval")
    return f"{name} [{shapes}; {mode}{f', autocast {autocast}' if autocast else ''}]"


def _fail(owner: nn.Module, sig: tuple, label: str, why: str, strict: bool, cause: Optional[BaseException] = None):
    """A variant that cannot run as a graph: an error in strict mode, else one warning naming it and
    the eager loop on its unpadded inputs from then on (this variant only)."""
    _STATS["graph_fallbacks"] += 1
    if strict:
        raise GraphFallbackError(f"--graph-fallback error: the CUDA graph of {label} {why}") from cause
    _FAILED.setdefault(owner, {})[sig] = why
    warnings.warn(f"--rnn-impl cuda-graphs: the CUDA graph of {label} {why}; this variant runs eagerly",
                  stacklevel=4)


_KEEP = [0]  # variants a capture ahead declared: the count cap is at least this


def keep_live(n: int):
    """Count cap at least ``n`` variants (those a capture ahead declared); the byte budget still applies."""
    _KEEP[0] = n


def _evict(device: torch.device):
    """Releases least recently used variants (never one whose backward is pending, never the newest)
    while more than :data:`MAX_LIVE_GRAPHS` (or :func:`keep_live`'s count) live or their bytes exceed
    the budget."""
    budget, cap = byte_budget(device), max(MAX_LIVE_GRAPHS, _KEEP[0])
    while len(_LIVE) > 1 and (len(_LIVE) > cap or (budget is not None and graph_bytes() > budget)):
        newest = next(reversed(_LIVE))
        key = next((k for k, v in _LIVE.items() if k != newest and not (v.pending and v.pending())), None)
        if key is None:
            break
        _LIVE.pop(key).release()
        _STATS["graph_evictions"] += 1


class _Token:
    """Lives as long as the autograd node of one training replay (pending backward)."""


class _Replay(torch.autograd.Function):
    """A training variant's forward replay, whose backward replays its backward graph."""

    @staticmethod
    def forward(ctx, variant: "Variant", n_inputs: int, *tensors):
        outs = variant.replay(tensors[:n_inputs])
        ctx.variant, ctx.generation = variant, variant.generation
        ctx.token = _Token()
        variant.pending = variant.pool.pending = weakref.ref(ctx.token)
        ctx.mark_non_differentiable(*[o for o, g in zip(outs, variant.out_grad) if isinstance(o, Tensor) and not g])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        v: Variant = ctx.variant
        if v.generation != ctx.generation:
            raise RuntimeError(f"--rnn-impl: backward through the CUDA graph of {v.label} after it was replayed "
                               "again (a second backward of an old step); use --rnn-impl eager")
        got = v.replay_backward(grads)
        v.pending = v.pool.pending = None
        if v.check is not None:  # the first backward: compare with eager autograd
            got = _check_backward(v, grads, got)
        it = iter(got)
        diff = {i for i in v.tensor_idx if v.static_in[i].requires_grad}
        per_input = [next(it) if i in diff else None for i in v.tensor_idx]
        return (None, None, *per_input, *it)


def _check_backward(v: Variant, grads, got):
    eager_out, eager_in, sig, strict = v.check
    v.check = None
    outs = [o for o in eager_out if isinstance(o, Tensor) and o.requires_grad]
    grad_out = [torch.zeros_like(v.static_out[i]) if grads[i] is None else grads[i] for i in v.diff_out]
    ref = torch.autograd.grad(outs, eager_in + v.params, grad_out, allow_unused=True)
    ref = [torch.zeros_like(x) if g is None else g for g, x in zip(ref, eager_in + v.params)]
    bad = mismatch(ref, got, v.autocast)
    if bad is None:
        return got
    _discard(v)
    _fail(v.owner(), sig, v.label, f"gave gradients that differ from the eager loop's ({bad})", strict)
    return ref  # exact: the padded positions of the eager loop are masked


def _discard(v: Variant):
    for key, live in list(_LIVE.items()):
        if live is v:
            _LIVE.pop(key).release()


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype, a.requires_grad, a.device.type) if isinstance(a, Tensor) else a
                 for a in args)


def _pool(owner: nn.Module, name: str, impl) -> Pool:
    pool = _POOLS.get((id(owner), name))
    if pool is None or pool.owner() is not owner:
        pool = _POOLS[(id(owner), name)] = Pool(owner, impl.new_pool(), getattr(impl, "PEAK_BYTES", False))
    return pool


def call(owner: nn.Module, fn: Callable, args: tuple, name: str, strict: bool = False):
    """``fn(*args)`` (a loop over time, or a module's body; ``args`` a pytree of tensors, None and
    ints, padded to the variant's shapes) run as a CUDA graph of its shapes: captured on the first
    call of a variant, replayed after.  Returns None where the caller must run its eager path on the
    unpadded inputs: a variant that failed (``strict`` or :func:`strict_mode`: an error instead), or
    another variant of the loop whose backward is pending."""
    strict = strict or is_strict()
    flat, spec = tree_flatten(args)
    tensors = [a for a in flat if isinstance(a, Tensor)]
    device = tensors[0].device
    params = [p for p in owner.parameters() if p.requires_grad]
    train = torch.is_grad_enabled() and (any(t.requires_grad for t in tensors) or bool(params))
    autocast = torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type)
    sig = (name, spec, _signature(flat), train, owner.training, autocast)
    if sig in _FAILED.get(owner, ()):
        return None
    impl = backend(device.type)
    pool = _pool(owner, name, impl)
    if pool.busy():
        return None  # a forward of this loop waits for its backward: its activations fill the pool
    key = (id(owner), *sig)
    variant = _LIVE.get(key)
    if variant is not None and (variant.owner() is not owner or variant.stale()):
        _discard(variant)
        variant = None
    label = _describe(name, flat, train, owner.training, autocast)
    first = variant is None
    start = time.perf_counter()
    if first:
        try:
            variant = Variant(owner, label, fn, flat, spec, train, impl, pool)
        except Exception as e:  # noqa: BLE001  (any capture failure: the eager loop is always there)
            _fail(owner, sig, label, f"could not be captured ({_first_line(e)})", strict, e)
            return None
        for stale in [v for v in _LIVE.values() if v.pool is pool and v.arena is not pool.arena]:
            _discard(stale)  # laid out in the arena this capture outgrew: freed with it
            _STATS["arenas_outgrown"] += 1
        _LIVE[key] = variant
        _SEEN[name].add(key)
        _STATS["graphs_captured"] += 1
        _evict(device)
    else:
        _LIVE.move_to_end(key)
    rng = _rng_state(device)
    try:
        outs = _Replay.apply(variant, len(tensors), *tensors, *variant.params) if train else variant.replay(tensors)
    except (OwnershipError, PoolError, HostSyncError) as e:
        _discard(variant)
        _fail(owner, sig, label, f"failed to replay ({_first_line(e)})", strict, e)
        return None
    if first:
        outs = _check_forward(variant, fn, flat, spec, outs, rng, device, train, sig, strict)
        _STATS["capture_s"] += time.perf_counter() - start
        if outs is None:
            return None
    return tree_unflatten(list(outs), variant.out_spec)


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _rng_state(device):
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _check_forward(v: Variant, fn, flat, spec, outs, rng, device, train, sig, strict):
    """The first replay against the eager loop from the same inputs and random state; None (after
    :func:`_fail`) when they differ."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            torch.cuda.set_rng_state(rng, device)
        else:
            torch.set_rng_state(rng)
        if train:
            clones = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in flat]
            with capturing():
                ref = tree_flatten(fn(*tree_unflatten(clones, spec)))[0]
            eager_in = [c for c in clones if isinstance(c, Tensor) and c.requires_grad]
        else:
            with torch.no_grad(), capturing():
                ref = tree_flatten(fn(*tree_unflatten(list(flat), spec)))[0]
    bad = mismatch(ref, outs, v.autocast)
    if bad is None:
        _STATS["graphs_verified"] += 1
        if train:
            v.check = (ref, eager_in, sig, strict)
        return outs
    v.pending = v.pool.pending = None
    _discard(v)
    _fail(v.owner(), sig, v.label, f"gave outputs that differ from the eager loop's ({bad})", strict)
    return None


# --- the entry point of fast_path.scan ---
def captured_scan(owner: nn.Module, step: Callable, loop: Callable, carry: Sequence, seq: Sequence[Tensor],
                  valid: Optional[Tensor], consts: Sequence, layout: Layout, name: str):
    """``loop(step, owner, carry, seq, valid, consts)`` captured, on inputs padded to the time and
    batch buckets (see the module doc); returns exactly what the unpadded call returns.  A variant
    that cannot run as a graph runs the eager loop on the unpadded inputs."""
    unpadded = (carry, seq, valid, consts)
    carry_dims = list(layout.carry or [0] * len(carry))
    seq_dims = list(layout.seq or [1] * len(seq))
    T, B = seq[0].size(0), seq[0].size(seq_dims[0])
    Tp, Bp = padded_shape(T, B) if layout.pad else (T, B)
    if layout.pad and valid is None:  # one variant whether or not this call needed padding
        valid = torch.ones(T, B, dtype=torch.bool, device=seq[0].device)
    if (Tp, Bp) != (T, B):
        valid = pad_dim(pad_dim(valid, 0, Tp, False), 1, Bp, False)
        carry = tuple(pad_dim(c, d, Bp) for c, d in zip(carry, carry_dims))
        seq = tuple(pad_dim(pad_dim(s, 0, Tp), d, Bp) for s, d in zip(seq, seq_dims))
        consts = tuple(c if bd is None else pad_dim(c, bd[0], Bp, bd[1])
                       for c, bd in zip(consts, layout.consts or [None] * len(consts)))
    def run(carry, seq, valid, consts):
        return loop(step, owner, carry, seq, valid, consts)

    got = call(owner, run, (tuple(carry), tuple(seq), valid, tuple(consts)), name,
               strict=getattr(owner, "graph_fallback", "warn") == "error")
    if got is None:
        return loop(step, owner, *unpadded)
    outs, carry = got
    if (Tp, Bp) == (T, B):
        return outs, carry
    outs = tuple(o[:T].narrow(seq_dims[0], 0, B) for o in outs)
    return outs, tuple(None if c is None else c.narrow(d, 0, B) for c, d in zip(carry, carry_dims))


__all__ = ["TIME_BUCKETS", "MAX_LIVE_GRAPHS", "MAX_GRAPH_BYTES", "Layout", "length_bucket", "batch_bucket", "pad_dim",
           "pad_rows", "is_capturing", "capturing", "NoHostSync", "HostSyncError", "OwnershipError", "PoolError",
           "GraphFallbackError", "CudaBackend", "ReplayBackend", "available", "use_backend", "captured_scan", "call",
           "stats", "reset", "graph_bytes", "byte_budget", "set_strict", "is_strict", "strict_mode",
           "set_shape_plan", "shape_plan", "padded_shape", "keep_live"]
