"""The execution of the recurrent loops: ``--rnn-impl auto|eager|compiled|cuda-graphs``.

**Why.**  A recurrent layer advances one time step at a time, and each step is a handful of small
operations (a matrix product, a few element-wise gates, a masked state update).  Run eagerly on a
GPU every one of them is its own kernel launch, so a step costs the launch latency of dozens of
kernels, not their arithmetic, and the GPU mostly waits.  Two remedies, each with a start-up cost
that does not grow with the number of batch shapes a run meets:

* **CUDA graphs of the eager loop** (:mod:`.cuda_graphs`, opt-in): the loop over time runs once
  under stream capture, and every later call with the same padded shapes replays the recorded
  kernels with one launch.  Capturing costs a few eager runs of the loop, no compiler.
* **The step compiled once** (``torch.compile`` of one time step, the batch marked dynamic): the
  element-wise work of a step fuses into a few kernels; the compiled step does not depend on the
  sequence length, so it compiles once per cell, dtype and grad mode, never per shape.  (Compiling
  the loop unrolled instead would cost one compilation per time and batch bucket, each as long as
  the bucket: hundreds of seconds per shape for a paper-size model.)

**One definition of each recurrence.**  A layer's time step is one method, its *step*, with the
signature ``step(self, carry, x, valid, consts) -> (outputs, carry)``:

* ``carry``: the recurrent state, a tuple of tensors (``None`` entries allowed);
* ``x``: this step's inputs, a tuple of tensors (each a ``seq`` entry at one time step);
* ``valid``: ``[B]`` bool, False where this position is padding (the step must leave the state
  unchanged there; its outputs are ignored: the layer contract of
  :mod:`fairseq_local.modules.recurrent_seq2seq`), or None (every position is real);
* ``consts``: everything else (weights, encoder outputs), passed unchanged;
* ``outputs``: a tuple of tensors, stacked over time by the loop.

:func:`scan` runs ``step`` over every position of ``seq`` (``[T, ...]`` tensors) with
:func:`step_loop`, the only loop over time, in the way ``--rnn-impl`` and the device select; the
eager, compiled and captured paths all call the same step, so they cannot drift apart.

**The switch.**  Every layer and decoder with a step mixes in :class:`FastPathMixin`, whose
``rnn_impl`` attribute (a plain attribute: no parameter or buffer, so checkpoints are the same under
every implementation) is set for a whole model by :func:`set_rnn_impl` from the model option
``--rnn-impl`` (:class:`RecurrentImplConfig`, shared by every recurrent model's config):

* ``auto`` (default): the eager loop, on CPU and on CUDA.  It is the safe default: the captured
  path is exact on CPU (under a stand-in for CUDA graphs) but has not yet finished a real
  ``fairseq-train`` run on a GPU, so it is opt-in;
* ``eager``: the Python loop over the eager step, always;
* ``compiled``: the loop over the step compiled once (:func:`compiled_step`), not captured.  A
  compilation failure is an error;
* ``cuda-graphs``: on CUDA the eager loop captured as CUDA graphs (no compiler); on CPU the eager
  loop (unless a test installed the stand-in backend, :func:`cuda_graphs.use_backend`).  With
  ``--graph-fallback error`` (strict mode) a variant that cannot be captured, or whose first call
  differs from eager, is an error instead of a warning and the eager loop.

**Shapes.**  A CUDA graph is specialised to its shapes, so on the captured path the time and batch
axes are padded to a few bucket sizes and the padded positions are marked invalid, which the
contract already makes exact (the state is left unchanged; the padded outputs are sliced away):

* time: :func:`length_bucket` (1, 8, 16, 32, 64, then multiples of 64); T = 1, the incremental
  decoding step, is its own bucket (no padding);
* batch: the smallest ``m * 2^e >= B`` with m in (4, 6) (:func:`batch_bucket`): two buckets per
  octave, at most 50 % padding;
* other lengths a loop depends on (the source length seen by a decoder's attention, the levels and
  width of a lattice's grid) are padded by the caller (:func:`length_bucket`, :func:`batch_bucket`;
  the lattice grid under a shape plan: ``lattice_gru.grid_shape``).

The compiled step needs no padding: its batch axis is dynamic (:data:`Layout` says where it is),
and other lengths become dynamic after the second size dynamo sees.

**Inside a trace.**  While a loop is being compiled or captured (:func:`in_trace`), layers run their
step code and nothing may synchronise with the host (no ``.item()``, no data-dependent branch or
shape): a decoder's captured step contains its layers' steps.  With dropout in training, compiled
code draws its random masks from inductor's generator, not eager's: the same distribution, not the
same masks (captured code draws eager's).  Never ``max-autotune``: its benchmarking multiplies the
compile time for kernels this small.
"""
import dataclasses
import logging
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from torch import Tensor

from fairseq_local_core.errors import UserError
from fairseq_local.modules import cuda_graphs
from fairseq_local.modules.cuda_graphs import Layout, batch_bucket, length_bucket, pad_dim

logger = logging.getLogger(__name__)

RNN_IMPLS = ("auto", "eager", "compiled", "cuda-graphs")
RNN_IMPL_CHOICES = ChoiceEnum(list(RNN_IMPLS))
GRAPH_FALLBACKS = ("warn", "error")
GRAPH_FALLBACK_CHOICES = ChoiceEnum(list(GRAPH_FALLBACKS))
RECOMPILE_LIMIT = 64

RNN_IMPL_HELP = ("execution of the recurrent loops: 'auto' (the default: the eager loop on CPU and on GPU, "
                 "the safe choice while the CUDA-graph path has not finished a real GPU training run), "
                 "'eager' (a Python loop over time), 'compiled' (the same loop over one time step compiled "
                 "once with torch.compile, batch dynamic, no CUDA graphs) or 'cuda-graphs' (opt-in: the "
                 "eager loop captured as CUDA graphs on GPU, no compiler; eager on CPU); checkpoints and "
                 "outputs are the same under each")
GRAPH_FALLBACK_HELP = ("what a CUDA-graph variant that cannot be captured or differs from eager at its first call "
                       "does under --rnn-impl cuda-graphs: 'warn' (one warning naming it, then that variant runs "
                       "eagerly) or 'error' (strict: stop with the error; tests and the GPU kit)")


@dataclasses.dataclass
class RecurrentImplConfig(FairseqDataclass):
    """The options every recurrent model's config inherits (``--rnn-impl``, ``--graph-fallback``)."""

    rnn_impl: RNN_IMPL_CHOICES = dataclasses.field(default="auto", metadata={"help": RNN_IMPL_HELP})
    graph_fallback: GRAPH_FALLBACK_CHOICES = dataclasses.field(default="warn", metadata={"help": GRAPH_FALLBACK_HELP})


def check_rnn_impl(impl) -> str:
    impl = "auto" if impl is None else str(impl)
    if impl not in RNN_IMPLS:
        raise ValueError(f"--rnn-impl must be one of {', '.join(RNN_IMPLS)} (got {impl!r})")
    return impl


class Execution(NamedTuple):
    """How one call runs its loop: the step compiled or not, the loop captured or not."""

    compiled: bool
    graphs: bool

    @property
    def fast(self) -> bool:
        return self.compiled or self.graphs


EAGER = Execution(False, False)


def check_graph_fallback(mode) -> str:
    mode = "warn" if mode is None else str(mode)
    if mode not in GRAPH_FALLBACKS:
        raise ValueError(f"--graph-fallback must be one of {', '.join(GRAPH_FALLBACKS)} (got {mode!r})")
    return mode


def execution(impl: str, like) -> Execution:
    """``--rnn-impl`` on the device of ``like`` (a tensor of the call): ``auto`` and ``eager`` run
    the eager loop, ``compiled`` compiles the step (never captures), ``cuda-graphs`` captures where
    graphs are available (CUDA, or a test's stand-in); inside a trace, eager."""
    if impl in ("eager", "auto") or in_trace():
        return EAGER
    if impl == "compiled":
        return Execution(True, False)
    return Execution(False, cuda_graphs.available(like))


class FastPathMixin:
    """Mixed into modules with a step: ``rnn_impl`` selects the implementation (see module doc)."""

    rnn_impl: str = "auto"
    graph_fallback: str = "warn"

    def execution(self, like) -> Execution:
        """How this call runs (``like``: a tensor on the call's device)."""
        return execution(self.rnn_impl, like)

    @property
    def strict_graphs(self) -> bool:
        """``--graph-fallback error``: a variant that cannot run as a CUDA graph is an error."""
        return self.graph_fallback == "error"


def set_rnn_impl(module: nn.Module, impl, graph_fallback=None) -> nn.Module:
    """Set ``--rnn-impl`` (and ``--graph-fallback``, when given) on every :class:`FastPathMixin`
    module inside ``module``; returns it."""
    impl = check_rnn_impl(impl)
    fallback = None if graph_fallback is None else check_graph_fallback(graph_fallback)
    for m in module.modules():
        if isinstance(m, FastPathMixin):
            m.rnn_impl = impl
            if fallback is not None:
                m.graph_fallback = fallback
    return module


def apply_impl_config(module: nn.Module, cfg) -> nn.Module:
    """``set_rnn_impl`` from a model config's ``rnn_impl`` and ``graph_fallback`` (``auto`` and
    ``warn`` where a config, say an older checkpoint's, lacks them); returns ``module``."""
    return set_rnn_impl(module, getattr(cfg, "rnn_impl", None), getattr(cfg, "graph_fallback", None) or "warn")


def in_trace() -> bool:
    """True while a loop is being compiled by dynamo or captured as a CUDA graph: code must not
    synchronise with the host, and layers run their step code."""
    return torch.compiler.is_compiling() or cuda_graphs.is_capturing()


def active_mask(mask: Optional[Tensor]) -> Optional[Tensor]:
    """``mask`` unless it is None or (eagerly) has no True entry.  In a trace the mask is kept as it
    is: testing its content would synchronise with the host, and applying an all-False mask is
    exact."""
    if mask is None:
        return None
    if in_trace():
        return mask
    return mask if bool(mask.any()) else None


# ------------------------------------------------------------------------------------------------
# the loop, and the step compiled once
# ------------------------------------------------------------------------------------------------
def step_loop(step: Callable, owner: nn.Module, carry: Sequence, seq: Sequence[Tensor],
              valid: Optional[Tensor], consts: Sequence = ()) -> Tuple[Tuple[Tensor, ...], tuple]:
    """The loop over time: ``step(owner, carry, x_t, valid_t, consts)`` for t = 0 .. T-1 (``x_t``
    the t-th entry of every ``seq`` tensor); returns the stacked outputs and the final carry.  The
    sequences are unbound once (indexing ``seq[t]`` would make every step's backward zero-fill a
    full-size gradient)."""
    steps = [s.unbind(0) for s in seq]
    valids = None if valid is None else valid.unbind(0)
    carry, outs = tuple(carry), []
    for t in range(seq[0].size(0)):
        out, carry = step(owner, carry, tuple(s[t] for s in steps), None if valids is None else valids[t], consts)
        outs.append(out)
    return tuple(torch.stack(parts) for parts in zip(*outs)), tuple(carry)


_COMPILED: Dict[Callable, Callable] = {}
_STATS = {"compiles": 0, "compile_fwd_s": 0.0, "compile_bwd_s": 0.0, "capture_ahead_s": 0.0}


def _inductor(gm, example_inputs):
    """Inductor (default mode), counting its compilations and timing the backward's, which AOT
    autograd compiles at the first backward call (the forward's is timed by the call that compiles
    it, :func:`compiled_step`)."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner  # noqa: PLC0415  (heavy, only when compiling)

    def timed_inner(*args, **kwargs):
        start = time.perf_counter()
        try:
            return compile_fx_inner(*args, **kwargs)
        finally:
            if kwargs.get("is_backward"):
                _STATS["compile_bwd_s"] += time.perf_counter() - start

    return compile_fx(gm, example_inputs, inner_compile=timed_inner)


def _counted(backend):
    def compile_graph(gm, example_inputs):
        _STATS["compiles"] += 1
        return backend(gm, example_inputs)
    return compile_graph


COMPILE_BACKEND: Any = _inductor  # tests substitute a counting backend


def _raise_recompile_limit():
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < RECOMPILE_LIMIT:
            setattr(cfg, name, RECOMPILE_LIMIT)
            break


class CompileError(UserError, RuntimeError):
    """torch.compile failed on a step: one line with what to do (the CLIs print it, status 2)."""


# allow_rnn: dynamo refuses to read the weights of an nn.LSTM/GRU/RNN otherwise; no automatic dynamic
# shapes: only the axes _mark names vary (a second model with other hidden sizes compiles its own
# static variant instead of making the hidden size symbolic)
DYNAMO_CONFIG = {k: v for k, v in (("allow_rnn", True), ("automatic_dynamic_shapes", False))
                 if hasattr(torch._dynamo.config, k)}


def compiled_step(step: Callable) -> Callable:
    """``torch.compile(step)`` made once per step function (dynamo adds a variant per cell
    configuration, dtype, grad mode and train/eval, never per time or batch size: :func:`_mark`)."""
    fn = _COMPILED.get(step)
    if fn is None:
        _raise_recompile_limit()
        compiled = torch.compile(step, fullgraph=True, dynamic=None, backend=_counted(COMPILE_BACKEND))

        def fn(owner, carry, x, valid, consts, _compiled=compiled, _name=step.__qualname__):
            before, start = _STATS["compiles"], time.perf_counter()
            if not fn.started:  # compiling is silent and takes a while: say so once per step function
                fn.started = True
                logger.info(f"--rnn-impl compiled: compiling {_name} (once per cell, dtype and grad mode; "
                            "tens of seconds on a CPU)")
            try:
                with torch._dynamo.config.patch(**DYNAMO_CONFIG):
                    out = _compiled(owner, carry, x, valid, consts)
                if _STATS["compiles"] != before:  # this call traced and compiled the forward
                    _STATS["compile_fwd_s"] += time.perf_counter() - start
                return out
            except torch._dynamo.exc.RecompileError:
                raise
            except Exception as e:  # noqa: BLE001  (a compiler failure: one line naming the step)
                cause = getattr(e, "inner_exception", None) or e  # the backend's own error
                first = str(cause).splitlines()[0] if str(cause) else ""
                raise CompileError(f"--rnn-impl compiled: torch.compile of {_name} failed: {type(cause).__name__}: "
                                   f"{first} (use --rnn-impl eager; if an interrupted run damaged the compile "
                                   f"cache, remove {compile_cache_dir()})") from e

        fn.started = False
        _COMPILED[step] = fn
    return fn


def compile_cache_dir() -> str:
    """Where inductor keeps compiled kernels (``TORCHINDUCTOR_CACHE_DIR``, else its default)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # noqa: PLC0415  (heavy, only on failure)
        return cache_dir()
    except Exception:  # noqa: BLE001  (a torch without it)
        return "the TORCHINDUCTOR_CACHE_DIR folder"


def _mark(batch_dims, tensors):
    for t, d in zip(tensors, batch_dims):
        if isinstance(t, Tensor) and d is not None:
            torch._dynamo.maybe_mark_dynamic(t, d)


def _marked(step: Callable, layout: Layout) -> Callable:
    """``step`` with the batch axis of its carry, inputs and batched consts, and the other lengths of
    its consts, marked dynamic before every call, so that dynamo compiles it once for every shape."""
    def call(owner, carry, x, valid, consts):
        if torch.is_grad_enabled() and any(isinstance(c, Tensor) and c.requires_grad for c in carry + x + tuple(consts)):
            # a constant initial state as a leaf that requires grad: the first step then is the same
            # compiled variant as every later one (its gradient stops there, as before)
            carry = tuple(c.detach().requires_grad_() if isinstance(c, Tensor) and c.is_floating_point()
                          and not c.requires_grad else c for c in carry)
        _mark(layout.carry or [0] * len(carry), carry)
        _mark([d - 1 for d in layout.seq] if layout.seq else [0] * len(x), x)
        _mark([None if c is None else c[0] for c in layout.consts or ()], consts)
        for t, dims in zip(consts, layout.lengths or ()):
            _mark(dims, [t] * len(dims))
        if valid is not None:
            torch._dynamo.maybe_mark_dynamic(valid, 0)
        return step(owner, carry, x, valid, consts)
    return call


def stats() -> Dict[str, Any]:
    """Start-up costs so far: compilations of steps (count, forward and backward seconds, inductor's
    generated kernels), CUDA graphs (captured, live, capture seconds, fallbacks to eager) and the
    warm-up that captures the training shapes before the first update (``capture_ahead_s``)."""
    try:
        from torch._inductor import metrics  # noqa: PLC0415
        kernels = int(metrics.generated_kernel_count)
    except Exception:  # noqa: BLE001  (no inductor: nothing generated)
        kernels = 0
    return {**_STATS, "kernels": kernels, **cuda_graphs.stats()}


def add_capture_ahead(seconds: float):
    """Count the seconds of a warm-up that captured the training shapes before the first update."""
    _STATS["capture_ahead_s"] += seconds


def reset():
    """Forget every compiled step and captured graph (tests; also resets dynamo's caches)."""
    _COMPILED.clear()
    _STATS.update(compiles=0, compile_fwd_s=0.0, compile_bwd_s=0.0, capture_ahead_s=0.0)
    cuda_graphs.reset()
    torch._dynamo.reset()


# ------------------------------------------------------------------------------------------------
# the entry point of every layer and decoder
# ------------------------------------------------------------------------------------------------
def scan(owner: nn.Module, step: str, carry: Sequence, seq: Sequence[Tensor], valid: Optional[Tensor],
         consts: Sequence = (), layout: Layout = Layout(), how: Optional[Execution] = None):
    """Run ``owner.step`` over time (:func:`step_loop`) as ``owner.rnn_impl`` and the device select:
    eager, with the step compiled once, and/or captured as CUDA graphs (inputs padded to buckets).
    Returns exactly what the eager loop returns: the outputs ``[T, ...]`` and the final carry."""
    fn = getattr(type(owner), step)
    how = how or execution(getattr(owner, "rnn_impl", "auto"), seq[0])
    if how.compiled:
        fn = _marked(compiled_step(fn), layout)
    if how.graphs:
        return cuda_graphs.captured_scan(owner, fn, step_loop, carry, seq, valid, consts, layout,
                                         f"{type(owner).__name__}.{step}")
    return step_loop(fn, owner, carry, seq, valid, consts)


def flatten_states(states) -> Tuple[List[Optional[Tensor]], List[int]]:
    """Layer states (tensor or tuple of tensors each) -> one flat list and the tuple sizes (0: a
    bare tensor), for a loop's carry."""
    flat, kinds = [], []
    for s in states:
        if isinstance(s, tuple):
            kinds.append(len(s))
            flat.extend(s)
        else:
            kinds.append(0)
            flat.append(s)
    return flat, kinds


def unflatten_states(flat: Sequence, kinds: Sequence[int]) -> List:
    out, i = [], 0
    for k in kinds:
        if k == 0:
            out.append(flat[i])
            i += 1
        else:
            out.append(tuple(flat[i:i + k]))
            i += k
    return out


__all__ = ["RNN_IMPLS", "GRAPH_FALLBACKS", "RecurrentImplConfig", "FastPathMixin", "Execution", "Layout", "set_rnn_impl",
           "apply_impl_config", "check_graph_fallback",
           "execution", "in_trace", "active_mask", "length_bucket", "batch_bucket", "pad_dim", "scan", "step_loop",
           "compiled_step", "stats", "reset", "add_capture_ahead", "flatten_states", "unflatten_states", "check_rnn_impl"]
