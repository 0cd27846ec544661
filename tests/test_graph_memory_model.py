"""Cost model of the bytes CUDA graphs hold (``graph_variants``' pool design) over an IWSLT-like
epoch at paper sizes, fp32, on CPU: MC-RNN-3 (``mc_rnn_iwslt_de_en_3``, its paper widths; a small
vocabulary, which no captured loop depends on), one training batch of each of the plan's K shapes.

``cuda_graphs.call`` is replaced by :class:`ByteCounter`, which runs each captured loop for one and
for two time steps under ``torch.autograd.graph.saved_tensors_hooks`` (the loop saves the same per
step, so T steps save ``S1 + (T - 1) (S2 - S1)``; tensors counted once per storage, the module's
parameters and the loop's inputs left out) and counts, per captured module and shape:

* ``act``: the forward's saved activations (what a training replay keeps in the pool until its
  backward);
* ``static``: what a variant holds between replays (``graph_variants.Variant``): its static inputs,
  outputs, output gradients and gradients (of its inputs and of every parameter of the module).

A shared pool (the design) holds the largest capture's activations plus every variant's static
tensors; private pools (one per variant) hold the sum over shapes of both.  The eager peak of a
shape is its activations plus one set of the same inputs, outputs and gradients.
"""
from collections import defaultdict

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_flatten

from fairseq_local.modules import cuda_graphs, fast_path
from fast_path_lib import _single_thread, build, dictionary_dir  # noqa: F401  (_single_thread is a fixture)
from test_shape_buckets_epoch import GRAPHS, _is_scan, _tokens, corpus  # noqa: F401  (corpus is a fixture)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


class ByteCounter:
    """Stands in for ``cuda_graphs.call``: per (module, loop) and padded shape, the bytes of the
    forward's saved activations and of a variant's static tensors (see the module docstring)."""

    def __init__(self):
        self.bytes = defaultdict(dict)  # (id(owner), name) -> {signature: (act, static)}
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
        out = T * _nbytes(outs) + _nbytes(new)
        grad_out = T * _nbytes([o for o in outs if o.requires_grad]) + _nbytes([c for c in new if c.requires_grad])
        grad_in = _nbytes([a for a in flat if a.requires_grad and a.is_floating_point()]) + _nbytes(params)
        static = _nbytes(flat) + out + grad_out + grad_in
        self.bytes[(id(owner), name)][cuda_graphs._signature(flat)] = (act, static)
        return tuple(o.expand(T, *o.shape[1:]) for o in outs), new


def design_bytes(per_shape):
    """(shared pool, private pools, eager peak of the largest shape) of one captured module."""
    acts, statics = zip(*per_shape.values())
    shared = max(acts) + sum(statics)
    private = sum(acts) + sum(statics)
    eager = max(a + s for a, s in zip(acts, statics))
    return shared, private, eager


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
    """Per captured module and summed: (shared pool, private pools, eager peak) bytes."""
    rows = {key: np.array(design_bytes(per_shape), dtype=np.float64) for key, per_shape in per_module.items()}
    return rows, sum(rows.values())


def test_byte_counts_of_mc_rnn_3_and_the_private_pools_beyond_twice_eager(counted):
    """K variants per captured module (four encoder layers, the decoder's input-feeding loop); the
    saved bytes extrapolated from one and two steps are a whole loop's (within 0.1 %); a shared pool holds less
    than private pools, and private pools (one per variant) hold more than twice the eager peak;
    the decoder's loop, whose activations grow with T * S, stays within twice its eager peak."""
    plan, counter = counted
    assert len(counter.bytes) == 5 and all(len(v) == len(plan.shapes) for v in counter.bytes.values())
    assert counter.checked and all(abs(a - b) <= 1e-3 * b for a, b in counter.checked), counter.checked
    rows, (shared, private, eager) = totals(counter.bytes)
    for key, (s, p, e) in rows.items():
        print(f"{key[1]}: shared {s / 2**20:.0f} MiB, private {p / 2**20:.0f} MiB, eager peak {e / 2**20:.0f} MiB, "
              f"ratio {s / e:.2f} (private {p / e:.2f})")
        assert s < p and p > 2 * e, key
    print(f"all: shared {shared / 2**20:.0f} MiB, private {private / 2**20:.0f} MiB, eager {eager / 2**20:.0f} MiB")
    decoder = [r for key, r in rows.items() if key[1].endswith("_feed_step")]
    assert len(decoder) == 1 and decoder[0][0] <= 2 * decoder[0][2]
    assert private > 2 * eager


@pytest.mark.xfail(strict=True, reason="each variant keeps its own static inputs, outputs and gradients: with "
                   "B * T about --max-tokens they are as large as a shape's activations, so an encoder layer's "
                   "K = 15 variants hold about 6x its eager peak (all loops 2.5x)")
def test_graph_bytes_of_mc_rnn_3_at_most_twice_the_eager_peak(counted):
    """The issue's bound: the bytes held by graphs over the epoch's shapes at most twice the eager
    peak of the largest shape, per captured module and over all of them."""
    _, counter = counted
    rows, (shared, _, eager) = totals(counter.bytes)
    assert all(s <= 2 * e for s, _, e in rows.values()) and shared <= 2 * eager
