"""Cost model of the bytes CUDA graphs hold (``graph_variants``' pool and arena design) over an
IWSLT-like epoch at paper sizes, fp32, on CPU: MC-RNN-3 (``mc_rnn_iwslt_de_en_3``, its paper widths;
a small vocabulary, which no captured loop depends on), one training batch of each of the plan's K
shapes.

``cuda_graphs.call`` is replaced by :class:`ByteCounter`, which runs each captured loop for one and
for two time steps under ``torch.autograd.graph.saved_tensors_hooks`` (the loop saves the same per
step, so T steps save ``S1 + (T - 1) (S2 - S1)``; tensors counted once per storage, the module's
parameters and the loop's inputs left out) and counts, per captured module and shape:

* ``act``: the forward's saved activations (what a training replay keeps in the pool until its
  backward);
* ``static``: the arena bytes a variant's static tensors take (``graph_variants.slot_bytes`` of its
  inputs, outputs, output gradients and gradients of its inputs and of every parameter of the
  module, laid out as ``Variant`` lays them out; checked against a real capture).

The design holds, per captured module, one pool (the largest capture's activations) and one arena
(the largest variant's static tensors).  Two designs it replaces are counted for comparison: static
tensors per variant in the shared pool (the largest activations plus the sum of the statics) and a
private pool per variant (the sum of both).  The eager peak of a shape is its activations plus one
set of the same inputs, outputs and gradients.
"""
from collections import defaultdict

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_flatten

from fairseq_local.modules import cuda_graphs, fast_path, graph_variants
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fast_path_lib import _single_thread, build, dictionary_dir, graphs, padding, run_layer  # noqa: F401  (fixtures)
from test_shape_buckets_epoch import GRAPHS, _is_scan, _tokens, corpus  # noqa: F401  (corpus is a fixture)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class ByteCounter:
    """Stands in for ``cuda_graphs.call``: per (module, loop) and padded shape, the bytes of the
    forward's saved activations and of a variant's arena slots (see the module docstring)."""

    def __init__(self):
        self.bytes = defaultdict(dict)  # (id(owner), name) -> {signature: (act, static, eager static)}
        self.checked = []  # (extrapolated, measured) saved bytes of whole short loops

    def _saved(self, fn, carry, seq, valid, consts, n, skip):
        seen = {}

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), cuda_graphs.capturing():
            outs, new = fn(carry, tuple(s[:n] for s in seq), None if valid is None else valid[:n], consts)
        return sum(seen.values()), outs, new

    def __call__(self, owner, fn, args, name, strict=False):
        assert _is_scan(args), name  # MC-RNN-3's captured code is loops over time
        carry, seq, valid, consts = args
        flat = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
        params = [p for p in owner.parameters() if p.requires_grad]
        skip = {t.untyped_storage().data_ptr() for t in flat + params}
        T = seq[0].size(0)
        s1, outs, new = self._saved(fn, carry, seq, valid, consts, 1, skip)
        s2, _, _ = self._saved(fn, carry, seq, valid, consts, 2, skip)
        act = s1 + (T - 1) * (s2 - s1)
        if T <= 8:  # the per-step extrapolation against the whole loop
            self.checked.append((act, self._saved(fn, carry, seq, valid, consts, T, skip)[0]))
        # the variant's static tensors, in Variant's order: inputs, outputs, output gradients, gradients
        out = [((T, *o.shape[1:]), o.dtype, o.requires_grad) for o in outs] + \
              [(c.shape, c.dtype, c.requires_grad) for c in new if c is not None]
        like = ([(a.shape, a.dtype) for a in flat] + [(shape, dtype) for shape, dtype, _ in out]
                + [(shape, dtype) for shape, dtype, g in out if g]
                + [(a.shape, a.dtype) for a in flat if a.requires_grad and a.is_floating_point()]
                + [(p.shape, p.dtype) for p in params])
        eager = sum(torch.Size(shape).numel() * dtype.itemsize for shape, dtype in like)
        self.bytes[(id(owner), name)][cuda_graphs._signature(flat)] = (act, graph_variants.slot_bytes(like), eager)
        return tuple(o.expand(T, *o.shape[1:]) for o in outs), new


def design_bytes(per_shape):
    """(the design: one pool and one arena; static tensors per variant; private pools; the eager peak
    of the largest shape) of one captured module, in bytes."""
    acts, statics, eager_statics = zip(*per_shape.values())
    arena = max(acts) + max(statics)
    per_variant = max(acts) + sum(statics)
    private = sum(acts) + sum(statics)
    eager = max(a + s for a, s in zip(acts, eager_statics))
    return arena, per_variant, private, eager


def test_the_counted_arena_bytes_are_a_real_capture_s(graphs):
    """The cost model's static bytes of a variant equal the arena a real (stand-in) capture of the
    same training call lays out."""
    torch.manual_seed(0)
    layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
    x, mask = torch.randn(7, 3, 4, requires_grad=True), padding(7, 3, "left")
    run_layer(layer, "graphs", x, mask)
    (variant,) = cuda_graphs._LIVE.values()
    counter = ByteCounter()
    saved_call = cuda_graphs.call
    cuda_graphs.call = counter
    try:
        layer(x, None, mask)
    finally:
        cuda_graphs.call = saved_call
    ((act, static, eager),) = next(iter(counter.bytes.values())).values()
    assert static == variant.arena.bytes == graph_variants.slot_bytes([(t.shape, t.dtype) for t in variant.slots()])
    assert 0 < eager <= static < eager + graph_variants.ALIGN * len(variant.slots())


@pytest.fixture(scope="module")
def counted(corpus, tmp_path_factory):
    src, tgt, plan = corpus
    _, model, task = build(dictionary_dir(tmp_path_factory.mktemp("d"), n=40), "translation", "mc_rnn_iwslt_de_en_3",
                           ["--dropout", "0", "--max-source-positions", "1024", "--max-target-positions", "1024"])
    for m in model.modules():
        if isinstance(m, fast_path.FastPathMixin):
            m.rnn_impl = GRAPHS
    counter = ByteCounter()
    d = task.target_dictionary
    model.train()
    saved_call = cuda_graphs.call
    cuda_graphs.call = counter
    cuda_graphs.set_shape_plan(plan)
    try:
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
            for length, rows in plan.shapes:  # one full batch of each declared shape
                torch.manual_seed(length)
                lengths = np.full(rows, length)
                s = _tokens(lengths, length, len(d), d.eos(), d.pad(), left=True)
                t = _tokens(lengths, length, len(d), d.eos(), d.pad(), left=False)
                prev = torch.cat([torch.full((rows, 1), d.eos()), t[:, :-1]], 1)
                model(s, torch.as_tensor(lengths), prev)
    finally:
        cuda_graphs.call = saved_call
        cuda_graphs.set_shape_plan(None)
    return plan, counter


def totals(per_module):
    """Per captured module and summed: (design, static tensors per variant, private pools, eager
    peak) bytes."""
    rows = {key: np.array(design_bytes(per_shape), dtype=np.float64) for key, per_shape in per_module.items()}
    return rows, sum(rows.values())


def test_byte_counts_of_mc_rnn_3_and_the_designs_beyond_twice_eager(counted):
    """K variants per captured module (four encoder layers, the decoder's input-feeding loop); the
    saved bytes extrapolated from one and two steps are a whole loop's (within 0.1 %).  The bound of
    the next test can fail: static tensors per variant (as large as a shape's activations when batch
    x length is about --max-tokens) hold more than twice the eager peak per encoder layer and over
    all loops, private pools more still; one arena per loop holds less than either."""
    plan, counter = counted
    assert len(counter.bytes) == 5 and all(len(v) == len(plan.shapes) for v in counter.bytes.values())
    assert counter.checked and all(abs(a - b) <= 1e-3 * b for a, b in counter.checked), counter.checked
    rows, (arena, per_variant, private, eager) = totals(counter.bytes)
    for key, (a, v, p, e) in rows.items():
        print(f"{key[1]}: arena design {a / 2**20:.0f} MiB, per-variant statics {v / 2**20:.0f} MiB, "
              f"private {p / 2**20:.0f} MiB, eager peak {e / 2**20:.0f} MiB: "
              f"ratios {a / e:.2f} {v / e:.2f} {p / e:.2f}")
        assert a < v < p, key
        if not key[1].endswith("_feed_step"):  # an encoder layer
            assert v > 2 * e, key
    print(f"all: arena design {arena / 2**20:.0f} MiB ({arena / eager:.2f}x), per-variant statics "
          f"{per_variant / 2**20:.0f} MiB ({per_variant / eager:.2f}x), private {private / 2**20:.0f} MiB "
          f"({private / eager:.2f}x), eager {eager / 2**20:.0f} MiB")
    assert per_variant > 2 * eager and private > 2 * eager


def test_graph_bytes_of_mc_rnn_3_at_most_twice_the_eager_peak(counted):
    """The issue's bound: the bytes held by graphs (one pool and one arena per captured loop) over the
    epoch's shapes at most twice the eager peak of the largest shape, per captured module and over
    all of them."""
    _, counter = counted
    rows, (arena, _, _, eager) = totals(counter.bytes)
    assert all(a <= 2 * e for a, _, _, e in rows.values()) and arena <= 2 * eager, rows
