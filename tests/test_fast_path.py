"""The fast path (``--rnn-impl``, fairseq_local/modules/fast_path.py and cuda_graphs.py), on CPU.

Two fast executions of the same step code, each checked against the eager loop:

* ``compiled``: the step compiled once by torch.compile (inductor on CPU), batch dynamic: outputs,
  states and every gradient within 1e-5 relative for every family's layer, the lattice GRU, a
  translation model's training step, incremental decoding and beam search;
* the CUDA-graph path (``auto`` on CUDA): CI has no GPU, so ``cuda_graphs.ReplayBackend`` stands in
  for the graphs (it records each "capture" under ``NoHostSync``, which fails on any host
  synchronisation, and "replays" into the same static buffers); checked: equality with eager
  (forward, backward, training over several optimizer steps, incremental decoding, beam search),
  padding to buckets, the bounded number of live graphs, the first-call check that falls back to
  eager with one warning, captures that fail, a second forward before a backward, parameters whose
  storage is replaced.

Cost: no compiled region unrolls the loop (its traced graph is the same at T 8 and T 64), and
after two warm-up shapes the batch shapes of a real epoch (Multi30k through fairseq's
``batch_by_size``) compile nothing new (``error_on_recompile``).  ``auto`` never compiles.  The real
CUDA graphs are checked on a GPU by ``scripts/gpu/check_install.py --fast-path``.
"""
import copy
import os
import tempfile
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

import fairseq_local  # noqa: F401  (registers everything)
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_local.modules import cuda_graphs, fast_path
from fairseq_local.modules.lattice_gru import LatticeGRU, make_schedule, pad_levels
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import RecurrentAttentionDecoder
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer
from fairseq_local_repro.gpu import check_install

# inductor's on-disk cache, one per xdist worker: workers compiling the same kernel at once must not
# read each other's half-written files
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"torchinductor_fairseq_local_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"))

USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_local")
RECURRENT_MODELS = ["rnnsearch", "mc_rnn", "parallel_lstm", "mc_rnn_lm", "parallel_lstm_lm", "lattice_rnnsearch", "gencnn",
                    "dpn_s2s"]


@pytest.fixture(autouse=True)
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def graphs():
    """The CUDA-graph path on CPU: ``auto`` captures CPU loops with the stand-in backend."""
    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()) as backend:
        yield backend


def set_impl(module, impl):
    """``graphs`` is ``auto`` (with the ``graphs`` fixture installed)."""
    return fast_path.set_rnn_impl(module, "auto" if impl == "graphs" else impl)


def assert_close(a, b, what, rtol=1e-5, scale=None):
    """|a - b| <= rtol * max|a| (relative to the tensor's scale, so near-zero entries don't dominate)."""
    scale = a.abs().max().item() if scale is None else scale
    err = (a - b).abs().max().item()
    assert err <= rtol * max(scale, 1e-6), f"{what}: max abs diff {err:.3g} vs scale {scale:.3g}"


def assert_grads_close(eager, comp, what, rtol=1e-5):
    """Every parameter's gradient, relative to the largest gradient entry of the module: a
    parameter whose gradient nearly cancels (the MC-RNN channel attention at initialisation: 1e-7
    against 1e0 elsewhere) is compared at the scale of the whole gradient, not at its own."""
    assert eager.keys() == comp.keys() and eager, what
    scale = max(g.abs().max().item() for g in eager.values())
    for n in eager:
        assert_close(eager[n], comp[n], f"{what}: grad of {n}", rtol, scale)


def padding(T, B, layout):
    """``[T, B]`` bool, True at padding: column b has ``T - b`` real tokens at the start ("right")
    or the end ("left"); ``holes``: an isolated padded position as well."""
    mask = torch.zeros(T, B, dtype=torch.bool)
    for b in range(B):
        n = T - b
        if layout == "left":
            mask[: T - n, b] = True
        else:
            mask[n:, b] = True
    if layout == "holes":
        mask[1, 0] = True
    return mask


def run_layer(layer, impl, x, mask, state=None):
    set_impl(layer, impl)
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out, new_state = layer(x, state, mask)
    leaves = [s for s in torch.utils._pytree.tree_leaves(new_state) if s.is_floating_point()]
    loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + sum((s ** 2).sum() for s in leaves)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    return out.detach(), [s.detach() for s in leaves], grads, x.grad


LAYERS = {
    # one per family; MC-RNN in gate space with an LSTM (the table rows) and a GRU in hidden space
    "mc_rnn_lstm_gates": lambda: MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates"),
    "mc_rnn_gru_hidden": lambda: MultiChannelRNNLayer(4, 6, 2, cell="gru", weight_space="hidden"),
    "parallel_lstm": lambda: ParallelCellRNNLayer(4, 6, wide=2, cell="lstm", cell_input="slice"),
    "torch_gru": lambda: TorchRNNLayer("gru", 4, 6),
}


def check_layer(name, impl):
    torch.manual_seed(0)
    layer = LAYERS[name]()
    T, B = 5, 3
    for layout in (("holes",) if name.startswith("torch") else ("left", "right")):
        x = torch.randn(T, B, 4)
        mask = padding(T, B, layout)
        eager = run_layer(layer, "eager", x, mask)
        fast = run_layer(layer, impl, x, mask)
        assert_close(eager[0], fast[0], f"{name} {layout}: output")
        for i, (a, b) in enumerate(zip(eager[1], fast[1])):
            assert_close(a, b, f"{name} {layout}: state {i}")
        assert_grads_close(eager[2], fast[2], f"{name} {layout}")
        assert_close(eager[3], fast[3], f"{name} {layout}: grad of the input")
        assert torch.equal(fast[0][mask], torch.zeros_like(fast[0][mask]))  # padded outputs are zero


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_compiled_equals_eager(name):
    """Outputs, final state and every gradient (see assert_grads_close), left and right padding
    (the parallel LSTM's eager path is its hand-written backward, so this also checks the step loop
    against it; the torch layer's mask has a hole, the only case it does not hand to cuDNN)."""
    check_layer(name, "compiled")


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_graphs_equal_eager_and_never_sync(name, graphs):
    """The same on the CUDA-graph path: every loop was captured (under NoHostSync: nothing in it
    synchronises with the host), none fell back to eager, and the first call of each variant was
    checked against eager."""
    check_layer(name, "graphs")
    st = fast_path.stats()
    assert st["graphs_captured"] >= 1 and st["graph_fallbacks"] == 0, st
    assert st["graphs_verified"] == st["graphs_captured"] and st["compiles"] == 0, st


def test_buckets():
    assert [fast_path.length_bucket(t) for t in (1, 2, 8, 9, 33, 64, 65, 130)] == [1, 8, 8, 16, 64, 64, 128, 192]
    assert [fast_path.batch_bucket(b) for b in (1, 4, 5, 7, 9, 13, 100, 160)] == [4, 4, 6, 8, 12, 16, 128, 192]


def test_graph_variants_are_the_padded_shapes(graphs):
    """(T, B) pairs in the same (time, batch) buckets replay one graph: T 3, 5, 8 pad to 8 and B 3,
    4 to 4; T 1 is its own bucket and B 5 is bucket 6.  Each call equals eager (state included)."""
    torch.manual_seed(0)
    layer = ParallelCellRNNLayer(3, 4, wide=2, cell="gru")
    with torch.no_grad():
        for T, B in ((3, 3), (5, 4), (8, 3), (1, 3), (1, 5)):
            x, state = torch.randn(T, B, 3), (torch.randn(B, 4),)
            mask = padding(T, B, "left") if T > 1 else None
            set_impl(layer, "eager")
            out_e, st_e = layer(x, state, mask)
            set_impl(layer, "graphs")
            out_g, st_g = layer(x, state, mask)
            assert_close(out_e, out_g, f"T={T} B={B}: output")
            assert_close(st_e[0], st_g[0], f"T={T} B={B}: state")
    st = fast_path.stats()
    assert st["graphs_captured"] == 3 and st["graphs_live"] == 3, st


def random_lattices(seed, lengths):
    """The forward-direction schedule of ``check_install.random_lattices`` (the GPU kit's lattice
    batches: the merges of 1 to 3 random segmentations of random characters, so nodes have 1 to 3
    incoming edges and words span 1 to n characters), the batch size and the number of nodes."""
    lattice, _ = check_install.random_lattices(seed, lengths)
    return make_schedule(*lattice[:3]), len(lengths), lattice.in_mask.size(1)


@pytest.mark.parametrize("variant,composition,impl", [("swl", "pooling", "compiled"), ("dwl", "gating", "compiled"),
                                                       ("swl", "pooling", "graphs"), ("dwl", "gating", "graphs")])
def test_lattice_fast_paths_equal_eager(variant, composition, impl, request):
    """One direction of the lattice GRU over a padded batch of random lattices: the level loop over
    the padded grid (compiled, or captured with the levels padded to a time bucket) equals the eager
    level loop in every node's state, every parameter's gradient and the gradient of the edge
    inputs; positions without a node stay zero."""
    if impl == "graphs":
        request.getfixturevalue("graphs")
    torch.manual_seed(0)
    sched, B, P = random_lattices(3, (7, 3, 5))
    layer = LatticeGRU(4, 5, variant, composition, init_scale=0.5)
    x = torch.randn(sched.edge_words.numel(), 4)
    results = {}
    for name in ("eager", impl):
        set_impl(layer, name)
        layer.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_(True)
        out, _ = layer(xi, sched, B, P)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[name] = (out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}, xi.grad)
    (out_e, grads_e, gx_e), (out_c, grads_c, gx_c) = results["eager"], results[impl]
    assert_close(out_e, out_c, f"{variant} {composition}: states")
    assert_grads_close(grads_e, grads_c, f"{variant} {composition}")
    assert_close(gx_e, gx_c, f"{variant} {composition}: grad of the edge inputs")
    node = torch.zeros(B, P, dtype=torch.bool)
    node[sched.node_batch, sched.node_pos] = True
    assert out_c[~node].abs().sum() == 0 and out_c[node].abs().min() > 0
    if impl == "graphs":
        assert fast_path.stats()["graph_fallbacks"] == 0


def test_lattice_level_grid():
    """Batches of any depth and width map to a few grids: the levels padded to a time bucket (on the
    captured path), the width to a batch bucket of the widest level; every real edge slot reads a
    real node's row (or the zero row); padded slots read the zero row."""
    for seed, lengths in enumerate([(2,), (3, 1), (4, 4, 2), (5, 2), (6, 6, 6, 1), (9, 3), (3, 3, 3, 3, 3)]):
        sched, _, _ = random_lattices(seed, lengths)
        grid = pad_levels(sched)
        assert grid.levels == fast_path.length_bucket(len(sched.steps)) and grid.pre_row.shape == (grid.levels, grid.width)
        assert pad_levels(sched, bucket_levels=False).levels == len(sched.steps)
        assert grid.width in (4, 6, 8, 12, 16)
        real = torch.zeros(grid.levels * grid.width, dtype=torch.bool)
        real[grid.edge_slot] = True
        assert grid.pre_row.view(-1)[~real].eq(0).all() and grid.local.view(-1)[~real].eq(grid.width - 1).all()
        assert set(grid.pre_row.view(-1)[real].tolist()) <= {0} | set((1 + grid.node_slot).tolist())


# ------------------------------------------------------------------------------------------------
# start-up cost: no unrolling, no recompiles, no compiler under auto
# ------------------------------------------------------------------------------------------------
class GraphSizes:
    """A dynamo backend that records each compiled graph's node count and runs it as traced."""

    def __init__(self):
        self.sizes = []

    def __call__(self, gm, example_inputs):
        self.sizes.append(len(gm.graph.nodes))
        return gm.forward


@pytest.fixture
def counting(monkeypatch):
    fast_path.reset()
    sizes = GraphSizes()
    monkeypatch.setattr(fast_path, "COMPILE_BACKEND", sizes)
    yield sizes
    fast_path.reset()


def _family_runs():
    """One call per family at a given length T: layer steps, the lattice level step, the
    input-feeding decoder step and the LM stack step."""
    torch.manual_seed(0)
    mc = MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates")
    pc = ParallelCellRNNLayer(4, 6, wide=2, cell="gru")
    tr = TorchRNNLayer("lstm", 4, 6)

    def layer_run(layer, holes=False):
        def run(T):
            mask = padding(T, 3, "left")
            if holes:
                mask[T // 2, 0] = True
            return layer(torch.randn(T, 3, 4), None, mask)[0]
        return run

    def lattice_run(T):
        layer = LatticeGRU(4, 5, "dwl", "gating")
        set_impl(layer, "compiled")
        sched, B, P = random_lattices(T, (T, max(1, T // 2), 3))
        return layer(torch.randn(sched.edge_words.numel(), 4), sched, B, P)[0]
    return {"mc_rnn": (mc, layer_run(mc)), "parallel": (pc, layer_run(pc)), "torch": (tr, layer_run(tr, True)),
            "lattice": (None, lattice_run)}


@pytest.mark.parametrize("family", ["mc_rnn", "parallel", "torch", "lattice"])
def test_compiled_region_does_not_unroll(family, counting):
    """The compiled region is one step: the same graph, compiled once, runs sequences of 8 and 64
    steps (and lattices of 8 and 64 levels); an unrolled loop would grow with T."""
    module, run = _family_runs()[family]
    if module is not None:
        set_impl(module, "compiled")
    with torch.no_grad():
        run(8)
        after_first = list(counting.sizes)
        run(64)
    assert len(after_first) >= 1 and counting.sizes == after_first, (after_first, counting.sizes)


def test_compiling_says_so_and_a_failure_is_one_line(monkeypatch, caplog):
    """The first call of a compiled step logs that it compiles (a CPU run is otherwise silent for
    tens of seconds); a compiler failure (here a damaged cache's EOFError) is one line (status 2)
    naming the step, the error, ``--rnn-impl eager`` and the cache folder to remove."""
    from fairseq_local import errors

    fast_path.reset()

    def damaged(gm, example_inputs):
        raise EOFError("Ran out of input")

    monkeypatch.setattr(fast_path, "COMPILE_BACKEND", damaged)
    layer = set_impl(MultiChannelRNNLayer(4, 6, 2, cell="gru"), "compiled")
    with caplog.at_level("INFO", logger="fairseq_local.modules.fast_path"), \
            pytest.raises(fast_path.CompileError) as e:
        layer(torch.randn(3, 2, 4))
    assert "compiling MultiChannelRNNLayer._step (once per cell" in caplog.text
    line = errors.one_line(e.value)
    assert line.startswith("--rnn-impl compiled: torch.compile of MultiChannelRNNLayer._step failed: EOFError: "
                           "Ran out of input (use --rnn-impl eager; if an interrupted run damaged the compile "
                           "cache, remove ") and "\n" not in line and e.value.exit_code == 2
    fast_path.reset()


def epoch_shapes(shared_data, max_tokens=4000):
    """(B, S, T) of every batch of Multi30k's training set batched by fairseq's ``batch_by_size``
    (words + </s>; sorted by target then source length, as LanguagePairDataset does)."""
    lengths = {}
    for lang in ("de", "en"):
        with open(shared_data / "multi30k-de-en" / f"train.{lang}", encoding="utf-8") as f:
            lengths[lang] = np.array([len(line.split()) + 1 for line in f])
    src, tgt = lengths["de"], lengths["en"]
    order = np.lexsort((src, tgt))
    batches = data_utils.batch_by_size(order, lambda i: max(src[i], tgt[i]), max_tokens=max_tokens,
                                       required_batch_size_multiple=8)
    return [(len(b), int(src[b].max()), int(tgt[b].max())) for b in batches]


def test_a_real_epoch_compiles_nothing_after_two_shapes(shared_data, counting, tmp_path):
    """A tiny MC-RNN-3 translation model (the paper rows' layers, tiny sizes) trains on every batch
    shape of a Multi30k epoch under ``--rnn-impl compiled``: after two warm-up shapes (which differ
    in batch, source and target length) dynamo compiles nothing new (``error_on_recompile``), and the
    whole epoch compiled at most four graphs per step function (grad and no grad, first variants)."""
    shapes = sorted(set(epoch_shapes(shared_data)))
    assert len(shapes) >= 20, len(shapes)
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_3", TINY_S2S + ["--rnn-impl", "compiled"])
    model.train()
    g = torch.Generator().manual_seed(0)

    def step(B, S, T):
        src = torch.randint(4, 20, (B, S), generator=g)
        src[1:, :S // 3] = task.source_dictionary.pad()  # left padding, as fairseq batches sources
        prev = torch.randint(4, 20, (B, T), generator=g)
        out = model(src, (src != task.source_dictionary.pad()).sum(1), prev)[0]
        out.float().pow(2).mean().backward()

    warm = [shapes[0], next(s for s in reversed(shapes) if len({*shapes[0], *s}) == 6)]
    for shape in warm:
        step(*shape)
    compiled = len(counting.sizes)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for shape in shapes:
            step(*shape)
    assert len(counting.sizes) == compiled <= 8, counting.sizes


def test_auto_captures_and_never_compiles(graphs, monkeypatch, tmp_path):
    """``auto`` on a CUDA tensor (mocked) captures the eager loop; it never calls the compiler: a
    training step of a small model under ``auto`` (the stand-in backend) compiles nothing."""
    assert fast_path.execution("auto", _FakeCuda()) == fast_path.Execution(compiled=False, graphs=True)
    assert fast_path.execution("compiled", _FakeCuda()) == fast_path.Execution(compiled=True, graphs=True)
    assert fast_path.execution("eager", _FakeCuda()) == fast_path.EAGER
    monkeypatch.setattr(fast_path, "compiled_step", lambda *a: pytest.fail("auto called the compiler"))
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S)
    net, tgt = translation_batch(task)
    model.train()
    model(**net)[0].sum().backward()
    st = fast_path.stats()
    assert st["graphs_captured"] >= 2 and st["compiles"] == 0 and st["graph_fallbacks"] == 0, st


# ------------------------------------------------------------------------------------------------
# the graph machinery
# ------------------------------------------------------------------------------------------------
def test_no_host_sync_mode_names_every_synchronisation():
    x = torch.randn(4)
    for what, fn in (("_local_scalar_dense", lambda: x.sum().item()), ("_local_scalar_dense", lambda: bool(x.sum() > 0)),
                     ("nonzero", lambda: x.nonzero()), ("nonzero", lambda: x[x > 0])):
        with pytest.raises(cuda_graphs.HostSyncError, match=what), cuda_graphs.NoHostSync():
            fn()
    with cuda_graphs.NoHostSync():  # masked arithmetic stays on the device
        torch.where(x > 0, x, -x).masked_fill(x < 0, 0).index_select(0, torch.tensor([1, 2]))


class SyncingLayer(fast_path.FastPathMixin, nn.Module):
    """A layer whose step reads a value on the host (not capturable)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return fast_path.scan(self, "_step", (x.new_zeros(x.size(1), 3),), (x,), None)

    def _step(self, carry, x, valid, consts):
        h = carry[0] * 0.5 + x[0] * self.w
        if float(h.sum()) > 1e9:
            h = h * 0
        return (h,), (h,)


def test_a_capture_that_fails_warns_once_and_runs_eagerly(graphs):
    layer = SyncingLayer()
    x = torch.randn(5, 2, 3)
    with pytest.warns(UserWarning, match=r"SyncingLayer\._step could not be captured \(HostSyncError"):
        (out,), _ = layer(x)
    set_impl(layer, "eager")
    (ref,), _ = layer(x)
    assert torch.equal(out, ref)
    set_impl(layer, "auto")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer(x)  # no second warning
    assert fast_path.stats()["graph_fallbacks"] == 1


def test_a_replay_that_differs_from_eager_falls_back_with_one_warning():
    """A graph whose replay is wrong (the stand-in backend corrupts its outputs) is caught at its
    first call: one warning, the eager result, and eager from then on."""
    def corrupt(static):
        static[0].add_(1.0)

    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend(corrupt=corrupt)):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
        x = torch.randn(5, 3, 4)
        with pytest.warns(UserWarning, match="MultiChannelRNNLayer._step gave outputs that differ"):
            out = run_layer(layer, "graphs", x, None)
        ref = run_layer(layer, "eager", x, None)
        assert torch.equal(out[0], ref[0]) and assert_grads_close(ref[2], out[2], "fallback") is None
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = run_layer(layer, "graphs", x, None)
        assert torch.equal(again[0], ref[0]) and fast_path.stats()["graph_fallbacks"] == 1


def test_a_backward_that_differs_from_eager_falls_back():
    """The first backward of a training variant is compared with eager autograd too."""
    calls = {"n": 0}

    def corrupt_grads(static):
        calls["n"] += 1
        if calls["n"] == 2:  # the forward replay, then the backward graph's first replay
            static[-1].add_(1.0)

    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend(corrupt=corrupt_grads)):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 2, cell="gru")
        x = torch.randn(5, 3, 4)
        ref = run_layer(layer, "eager", x, None)
        with pytest.warns(UserWarning, match="gave gradients that differ"):
            got = run_layer(layer, "graphs", x, None)
        assert_grads_close(ref[2], got[2], "eager gradients after the fallback")


def test_training_over_optimizer_steps_equals_eager(graphs):
    """Five SGD steps (parameters updated in place, so the graphs read the new values), one batch
    shape with a second forward before a backward in between (it runs eagerly), and a parameter whose
    storage is replaced (captured again): the parameters end equal to eager training's."""
    def train(impl):
        torch.manual_seed(0)
        layer = MultiChannelRNNLayer(4, 6, 3, cell="lstm", weight_space="gates")
        set_impl(layer, impl)
        opt = torch.optim.SGD(layer.parameters(), lr=0.5)
        g = torch.Generator().manual_seed(1)
        for i in range(5):
            x = torch.randn(6, 3, 4, generator=g)
            mask = padding(6, 3, "left")
            opt.zero_grad()
            loss = layer(x, None, mask)[0].pow(2).sum()
            if i == 2:
                loss = loss + layer(x * 2, None, mask)[0].pow(2).sum()  # same variant, pending backward
            loss.backward()
            opt.step()
            if i == 3:
                layer.bias_hh.data = layer.bias_hh.data.clone()
        return {n: p.detach() for n, p in layer.named_parameters()}
    eager, fast = train("eager"), train("graphs")
    for n in eager:
        assert_close(eager[n], fast[n], f"parameter {n} after training", rtol=1e-5)
    st = fast_path.stats()
    assert st["graphs_captured"] == 2 and st["graph_fallbacks"] == 0, st


def test_live_graphs_are_bounded(graphs, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_LIVE_GRAPHS", 2)
    layer = TorchRNNLayer("gru", 4, 6)
    for T in (2, 9, 17, 33):
        x, mask = torch.randn(T, 3, 4), padding(T, 3, "holes")
        set_impl(layer, "eager")
        with torch.no_grad():
            ref = layer(x, None, mask)[0]
            set_impl(layer, "graphs")
            assert_close(ref, layer(x, None, mask)[0], f"T={T}")
    st = fast_path.stats()
    assert st["graphs_captured"] == 4 and st["graphs_live"] == 2, st


def test_option_parses_and_auto_resolves(tmp_path):
    """--rnn-impl is an option of every recurrent model (one shared dataclass field) and is set on
    every layer and decoder; auto is eager on CPU (the CPU path is unchanged); no parameter or buffer
    depends on it."""
    data = dictionary_dir(tmp_path)
    for model_name in RECURRENT_MODELS:
        task = "language_modeling" if model_name.endswith("_lm") else (
            "lattice_translation" if model_name.startswith("lattice") else "translation")
        args = parse(data, task, model_name, ["--rnn-impl", "compiled"])
        assert args.rnn_impl == "compiled", model_name
        assert getattr(parse(data, task, model_name, []), "rnn_impl", None) in (None, "auto"), model_name
    with pytest.raises(SystemExit):
        parse(data, "translation", "mc_rnn", ["--rnn-impl", "fast"])
    with pytest.raises(ValueError, match="--rnn-impl must be one of auto, eager, compiled"):
        fast_path.check_rnn_impl("fast")
    cpu = torch.zeros(1)
    assert fast_path.execution("auto", cpu) == fast_path.EAGER
    assert fast_path.execution("compiled", cpu) == fast_path.Execution(compiled=True, graphs=False)
    assert fast_path.execution("auto", torch.empty(1, device="meta")) == fast_path.EAGER
    models = {impl: build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S + ["--rnn-impl", impl])[1]
              for impl in ("eager", "compiled")}
    default = build(data, "language_modeling", "mc_rnn_lm", ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6"])
    assert {m.rnn_impl for m in default[1].modules() if isinstance(m, fast_path.FastPathMixin)} == {"auto"}
    assert default[0].model.rnn_impl == "auto"
    impls = {m.rnn_impl for m in models["compiled"].modules() if isinstance(m, fast_path.FastPathMixin)}
    kinds = {type(m).__name__ for m in models["compiled"].modules() if isinstance(m, fast_path.FastPathMixin)}
    assert impls == {"compiled"} and kinds == {"MultiChannelRNNLayer", "RecurrentAttentionDecoder"}
    a, b = (m.state_dict() for m in models.values())
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


class _FakeCuda:
    is_cuda = True


# ------------------------------------------------------------------------------------------------
# models: a tiny MC-RNN-2 translation model and a tiny parallel-cell LM
# ------------------------------------------------------------------------------------------------
TINY_S2S = ["--encoder-embed-dim", "6", "--encoder-hidden-size", "6", "--decoder-embed-dim", "6",
            "--decoder-hidden-size", "6", "--attention-dim", "6", "--encoder-layers", "1", "--decoder-layers", "1",
            "--dropout", "0"]


def dictionary_dir(tmp_path, n=20):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}", n=n - i)
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        d.save(str(tmp_path / name))
    return str(tmp_path)


def parse(data, task, arch, extra):
    argv = [data, "--user-dir", USER_DIR, "--task", task, "--arch", arch, "--cpu", "--optimizer", "adam",
            "--lr", "1e-3"]
    if task == "translation":
        argv += ["--source-lang", "src", "--target-lang", "tgt"]
    return options.parse_args_and_arch(options.get_training_parser(), argv + extra)


def build(data, task, arch, extra):
    cfg = convert_namespace_to_omegaconf(parse(data, task, arch, extra))
    t = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    return cfg, t.build_model(cfg.model), t


def translation_batch(task, B=3, S=5, T=4, seed=0):
    """Left-padded sources of lengths S, S-1, ... and right-padded targets, as fairseq batches."""
    g = torch.Generator().manual_seed(seed)
    d = task.target_dictionary
    src = torch.full((B, S), d.pad())
    tgt = torch.full((B, T), d.pad())
    for b in range(B):
        n, m = S - b, T - (b % 2)
        src[b, S - n:] = torch.randint(d.nspecial, len(d), (n,), generator=g)
        src[b, -1] = d.eos()
        tgt[b, :m] = torch.randint(d.nspecial, len(d), (m,), generator=g)
        tgt[b, m - 1] = d.eos()
    prev = torch.cat([torch.full((B, 1), d.eos()), tgt[:, :-1]], 1)
    return {"src_tokens": src, "src_lengths": (src != d.pad()).sum(1), "prev_output_tokens": prev}, tgt


@pytest.fixture(scope="module")
def s2s(tmp_path_factory):
    data = dictionary_dir(tmp_path_factory.mktemp("dict"))
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S)
    return data, cfg, model, task


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_seq2seq_training_step_equals_eager(s2s, impl, request):
    """Loss and every parameter's gradient of a padded batch (encoder layers: layer steps; decoder:
    the input-feeding step, which replaces the StepwiseLinear of the eager loop)."""
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, tgt = translation_batch(task)
    results = {}
    for impl in ("eager", impl):
        set_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(**net)[0]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=task.target_dictionary.pad())
        loss.backward()
        results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert_close(results["eager"][0], results[impl][0], "logits")
    assert_grads_close(results["eager"][1], results[impl][1], "training step")


def incremental(model, net, order=None):
    """Full pass and step-by-step decoding (reordered halfway when ``order``), eval, no grad."""
    tokens = net["prev_output_tokens"]
    enc = model.encoder(net["src_tokens"], net["src_lengths"])
    full = model.decoder(tokens, encoder_out=enc)[0]
    state, steps = {}, []
    for t in range(tokens.size(1)):
        if order is not None and t == tokens.size(1) // 2:
            model.decoder.reorder_incremental_state_scripting(state, order)
            enc = model.encoder.reorder_encoder_out(enc, order)
            tokens, steps = tokens.index_select(0, order), [s.index_select(0, order) for s in steps]
        steps.append(model.decoder(tokens[:, : t + 1], encoder_out=enc, incremental_state=state)[0][:, -1])
    return full, torch.stack(steps, 1)


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_seq2seq_incremental_equals_full(s2s, impl, request):
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    set_impl(model, impl)
    model.eval()
    with torch.no_grad():
        full, inc = incremental(model, net)
        assert_close(full, inc, f"incremental vs full ({impl})")
        order = torch.tensor([2, 0, 2])
        full2, inc2 = incremental(model, net, order)
        assert_close(full2.index_select(0, order), inc2, f"incremental after reorder ({impl})")
        set_impl(model, "eager")
        assert_close(incremental(model, net)[1], inc, f"{impl} vs eager incremental")


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_beam_search_same_hypotheses(s2s, impl, request):
    from fairseq.sequence_generator import SequenceGenerator

    if impl == "graphs":
        request.getfixturevalue("graphs")
    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    sample = {"net_input": {k: v for k, v in net.items() if k != "prev_output_tokens"}}
    model.eval()
    hyps = {}
    for name in ("eager", impl):
        set_impl(model, name)
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=5)
        with torch.no_grad():
            out = gen.generate([model], sample)
        hyps[name] = [[(h["tokens"].tolist(), h["score"].item()) for h in sent] for sent in out]
    for sent_e, sent_c in zip(hyps["eager"], hyps[impl]):
        assert [t for t, _ in sent_e] == [t for t, _ in sent_c]
        assert [s for _, s in sent_e] == pytest.approx([s for _, s in sent_c], rel=1e-5, abs=1e-6)


def test_checkpoint_loads_under_either_impl(s2s, tmp_path):
    """Saved under ``compiled``, loaded as saved, as ``eager`` (--model-overrides), and with the
    option deleted (a checkpoint older than it: loads as ``auto``): identical outputs."""
    from fairseq.trainer import Trainer

    data, cfg, model, task = s2s
    cfg = copy.deepcopy(cfg)
    cfg.model.rnn_impl = "compiled"
    fast_path.set_rnn_impl(model, "compiled")
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    path = str(tmp_path / "checkpoint.pt")
    trainer.consolidate_optimizer()
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    old = torch.load(path, map_location="cpu", weights_only=True)
    del old["cfg"]["model"]["rnn_impl"]
    old_path = str(tmp_path / "old.pt")
    torch.save(old, old_path)
    net, _ = translation_batch(task)
    model.eval()
    with torch.no_grad():
        ref = model(**net)[0]
    for p, overrides, impl in ((path, {}, "compiled"), (path, {"rnn_impl": "eager"}, "eager"), (old_path, {}, "auto")):
        (loaded,), _, _ = checkpoint_utils.load_model_ensemble_and_task([p], arg_overrides={"data": data, **overrides})
        assert {m.rnn_impl for m in loaded.modules() if isinstance(m, fast_path.FastPathMixin)} == {impl}
        loaded.eval()
        with torch.no_grad():
            out = loaded(**net)[0]
        assert_close(ref, out, f"{impl}: output after loading", rtol=1e-6)
        if impl != "compiled":
            assert torch.equal(out, run_eager(model, net)), impl  # eager on CPU: bit-identical


def run_eager(model, net):
    fast_path.set_rnn_impl(model, "eager")
    with torch.no_grad():
        out = model(**net)[0]
    fast_path.set_rnn_impl(model, "compiled")
    return out


@pytest.mark.parametrize("impl", ["compiled", "graphs"])
def test_lm_incremental_step(tmp_path, impl, request):
    """The LM decoder's incremental step is one step of the whole layer stack (compiled, or
    captured with the batch padded to its bucket): step-by-step == the full pass and == eager, also
    after reorder."""
    if impl == "graphs":
        request.getfixturevalue("graphs")
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "language_modeling", "parallel_lstm_lm",
                             ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6", "--wide", "2",
                              "--dropout", "0", "--tokens-per-sample", "8"])
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 20, (3, 4), generator=g)
    model.eval()
    results = {}
    with torch.no_grad():
        for name in ("eager", impl):
            set_impl(model, name)
            full = model.decoder(tokens)[0]
            state, steps = {}, []
            order = torch.tensor([1, 1, 0])
            toks = tokens
            for t in range(tokens.size(1)):
                if t == 2:
                    model.decoder.reorder_incremental_state_scripting(state, order)
                    toks, steps = toks.index_select(0, order), [s.index_select(0, order) for s in steps]
                steps.append(model.decoder(toks[:, : t + 1], incremental_state=state)[0][:, -1])
            results[name] = (full, torch.stack(steps, 1))
            assert_close(full.index_select(0, order), results[name][1], f"{name}: incremental vs full")
    assert_close(results["eager"][1], results[impl][1], f"{impl} vs eager steps")


GENCNN_TINY = ["--decoder-embed-dim", "6", "--alpha-length", "6", "--beta-length", "4", "--alpha-layers",
               "(2,3,3),(2,2,2)", "--beta-layers", "(2,3,0),(1,3,0)", "--fc-dim", "8", "--dropout", "0",
               "--tokens-per-sample", "32"]


def test_gencnn_graphs_equal_eager(graphs, tmp_path):
    """genCNN (no time loop; its body runs as one CUDA graph per (batch, length) bucket and its
    generation step as one per batch bucket): a training step's logits and every gradient, and
    step-by-step decoding (the βCNN recursion reached) == the eager full pass, with the length and
    the batch padded (T 13 -> 16, B 3 -> 4); nothing synchronises with the host."""
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "language_modeling", "gencnn", GENCNN_TINY)
    tokens = torch.randint(4, 20, (3, 13), generator=torch.Generator().manual_seed(0))
    tokens[2, :3] = task.target_dictionary.pad()
    results = {}
    for impl in ("eager", "graphs"):
        set_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(tokens)[0]
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert_close(results["eager"][0], results["graphs"][0], "genCNN logits")
    assert_grads_close(results["eager"][1], results["graphs"][1], "genCNN training step")
    model.eval()
    with torch.no_grad():
        set_impl(model, "eager")
        full = model.decoder(tokens)[0]
        set_impl(model, "graphs")
        state, steps = {}, []
        for t in range(tokens.size(1)):
            steps.append(model.decoder(tokens[:, : t + 1], incremental_state=state)[0][:, -1])
    assert_close(full, torch.stack(steps, 1), "genCNN: captured steps vs the eager full pass")
    st = fast_path.stats()
    assert st["graphs_captured"] >= 3 and st["graph_fallbacks"] == 0 and st["compiles"] == 0, st


DPN_TINY = ["--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-conv-dim", "8", "--decoder-conv-dim", "8",
            "--encoder-conv-layers", "2", "--decoder-conv-layers", "2", "--encoder-san-layers", "1",
            "--decoder-san-layers", "1", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--dropout", "0"]


def test_dpn_graphs_equal_eager(graphs, tmp_path):
    """DPN-S2S (no time loop; its training and validation forward runs as one CUDA graph per
    (batch, source, target) bucket): logits and every gradient of a left-padded batch (source 5 ->
    8, target 4 -> 8, batch 3 -> 4 with a copy of the first sentence) == eager, in training and in
    evaluation; a second batch (2 sentences of 3 words) falls in the same buckets and replays both
    graphs."""
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "translation", "dpn_s2s", DPN_TINY)
    for net, _ in (translation_batch(task), translation_batch(task, B=2, S=3, T=3, seed=1)):
        for train in (True, False):
            results = {}
            for impl in ("eager", "graphs"):
                set_impl(model, impl)
                model.train(train)
                model.zero_grad(set_to_none=True)
                with torch.set_grad_enabled(train):
                    logits = model(**net)[0]
                    if train:
                        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
                results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()
                                                   if p.grad is not None})
            assert_close(results["eager"][0], results["graphs"][0], f"DPN logits (train={train})")
            if train:
                assert_grads_close(results["eager"][1], results["graphs"][1], "DPN training step")
    st = fast_path.stats()
    assert st["graphs_captured"] == 2 and st["graph_fallbacks"] == 0 and st["compiles"] == 0, st


def test_fast_path_classes_are_the_recurrent_modules():
    """Every layer and decoder with a time loop has the switch and one step method (the lattice
    encoder's loop runs over topological levels; its decoder is a RecurrentAttentionDecoder)."""
    steps = {MultiChannelRNNLayer: "_step", ParallelCellRNNLayer: "_step", TorchRNNLayer: "_step",
             RecurrentAttentionDecoder: "_feed_step", RecurrentLMDecoder: "_stack_step", LatticeGRU: "_level_step"}
    for cls, step in steps.items():
        assert issubclass(cls, fast_path.FastPathMixin) and callable(getattr(cls, step)), cls


def test_gpu_kit_fast_path_check_on_cpu(tmp_path):
    """scripts/gpu/check_install.py --fast-path (what ``run_all.sh --part check`` runs on a GPU) at
    its tiny sizes on CPU (``compiled`` only: CPU has no CUDA graphs): every check passes and reports
    its timings and start-up costs.  The lattice encoder's batch has several levels and sentences of
    different lengths, and both directions share one level grid."""
    report = check_install.fast_path_check("cpu", tiny=True)
    assert report["device"] == "cpu" and report["sizes"] == dict(T=5, B=3, I=4, H=6)
    assert set(report["checks"]) == {"mc_rnn3_lstm_gates", "parallel_lstm_wide2", "torch_gru_masked",
                                     "lattice_dwl_gating", "mc_rnn2_model_step_and_beam5"}
    for name, rec in report["checks"].items():
        assert rec["ok"], (name, rec)
        if name != "mc_rnn2_model_step_and_beam5":
            assert rec["eager_fwd_bwd_ms"] > 0 and rec["compiled_fwd_bwd_ms"] > 0
            assert set(rec["compiled_startup"]) >= {"compiles", "compile_fwd_s", "capture_s", "kernels"}
    lattice = report["checks"]["lattice_dwl_gating"]
    assert lattice["lattices"] == 3 and lattice["characters"] == [3, 6]
    assert lattice["grids"] == [{"levels": 4, "padded_levels": 8, "width": 4, "edges": 13}] * 2
    assert report["fast_path_stats"]["compiles"] >= 4
