"""The fast execution path (``--rnn-impl``, fairseq_local/modules/fast_path.py), on CPU.

``compiled`` runs torch.compile (inductor, default mode on CPU) of the very scan the eager path
runs, on inputs padded to time/batch buckets.  Checked here: compiled == eager for every family's
layer (fp32 outputs and gradients within 1e-5 relative, left and right padding; the lattice GRU on
random padded lattice batches, SWL and DWL, pooling and gating), the bucketing
bounds the number of compiled variants (chunks beyond the largest bucket carry the state),
incremental decoding == the full pass under the compiled path, beam search returns the same
hypotheses, the option parses and resolves, and a checkpoint gives identical outputs under either
implementation (old checkpoints without the option load as ``auto``).  Compiling is slow on two
cores: tiny dims, T <= 6, few variants.  The CUDA-graph side is checked on a GPU by
``scripts/gpu/check_install.py --fast-path``.
"""
import copy
import os
import tempfile

import pytest
import torch

import fairseq_local  # noqa: F401  (registers everything)
from fairseq import checkpoint_utils, options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_local.modules import fast_path
from fairseq_local.modules.lattice_gru import LatticeGRU, make_schedule, pad_levels
from fairseq_local.modules.multi_channel_rnn import MultiChannelRNNLayer
from fairseq_local.modules.parallel_cell_rnn import ParallelCellRNNLayer
from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder
from fairseq_local.modules.recurrent_seq2seq import RecurrentAttentionDecoder
from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer
from fairseq_local_repro.gpu import check_install

# inductor's on-disk cache, one per xdist worker: workers compiling the same kernel at once must not
# read each other's half-written files (it persists across runs, so later runs compile faster)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"torchinductor_fairseq_local_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"))

USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_local")
RECURRENT_MODELS = ["rnnsearch", "mc_rnn", "parallel_lstm", "mc_rnn_lm", "parallel_lstm_lm", "lattice_rnnsearch"]


@pytest.fixture(autouse=True)
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    fast_path.set_rnn_impl(layer, impl)
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


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_compiled_equals_eager(name):
    """Outputs, final state and every gradient (see assert_grads_close), left and right padding in
    one batch each (the
    parallel LSTM's eager path is its hand-written backward, so this also checks the scan against
    it; the torch layer's mask has a hole, the only case it does not hand to cuDNN)."""
    torch.manual_seed(0)
    layer = LAYERS[name]()
    T, B = 5, 3
    for layout in (("holes",) if name.startswith("torch") else ("left", "right")):
        x = torch.randn(T, B, 4)
        mask = padding(T, B, layout)
        eager = run_layer(layer, "eager", x, mask)
        comp = run_layer(layer, "compiled", x, mask)
        assert_close(eager[0], comp[0], f"{name} {layout}: output")
        for i, (a, b) in enumerate(zip(eager[1], comp[1])):
            assert_close(a, b, f"{name} {layout}: state {i}")
        assert_grads_close(eager[2], comp[2], f"{name} {layout}")
        assert_close(eager[3], comp[3], f"{name} {layout}: grad of the input")
        assert torch.equal(comp[0][mask], torch.zeros_like(comp[0][mask]))  # padded outputs are zero


def test_buckets_bound_the_compiled_variants():
    """Every (T, B) maps to a bucketed variant: with time buckets (1, 2, 4), T = 3 pads to 4, T = 5
    and 6 run as a 4-step chunk then a 1- or 2-step one (the state carried), B = 3 and 4 share the
    batch bucket 4.  Five calls, four variants; each call equals eager, state included."""
    assert fast_path.TIME_BUCKETS == (1, 2, 4)  # small_time_buckets
    assert [fast_path.time_bucket(t) for t in (1, 2, 3, 4)] == [1, 2, 4, 4]
    assert fast_path.time_chunks(6) == [(0, 4), (4, 6)]
    assert [fast_path.batch_bucket(b) for b in (1, 4, 5, 7, 9, 13, 100, 160)] == [4, 4, 6, 8, 12, 16, 128, 192]
    assert [fast_path.length_bucket(s) for s in (3, 4, 5, 9)] == [4, 4, 8, 12]
    torch.manual_seed(0)
    layer = ParallelCellRNNLayer(3, 4, wide=2, cell="gru")
    before = {k for k in fast_path.variants() if k[0] == "ParallelCellRNNLayer._scan"}
    with torch.no_grad():
        for T, B in ((1, 3), (3, 3), (5, 4), (6, 4), (1, 5)):
            x = torch.randn(T, B, 3)
            state = (torch.randn(B, 4),)
            mask = padding(T, B, "left") if T > 1 else None
            out_e, st_e = run_impl(layer, "eager", x, state, mask)
            out_c, st_c = run_impl(layer, "compiled", x, state, mask)
            assert_close(out_e, out_c, f"T={T} B={B}: output")
            assert_close(st_e[0], st_c[0], f"T={T} B={B}: state")
    new = {k for k in fast_path.variants() if k[0] == "ParallelCellRNNLayer._scan"} - before
    # the padded [T, B] of each variant's input xproj [T, B, cells, gates]
    shapes = sorted({next(e[0][:2] for e in k[1] if isinstance(e, tuple) and len(e[0]) == 4) for k in new})
    assert shapes == [(1, 4), (1, 6), (2, 4), (4, 4)], shapes


def random_lattices(seed, lengths):
    """The forward-direction schedule of ``check_install.random_lattices`` (the GPU kit's lattice
    batches: the merges of 1 to 3 random segmentations of random characters, so nodes have 1 to 3
    incoming edges and words span 1 to n characters), the batch size and the number of nodes."""
    lattice, _ = check_install.random_lattices(seed, lengths)
    return make_schedule(*lattice[:3]), len(lengths), lattice.in_mask.size(1)


# each combination compiles a forward and a backward graph (about a minute on a busy CPU): SWL + pooling
# and DWL + gating between them run every branch of the level step (both encoders, both compositions)
@pytest.mark.parametrize("variant,composition", [("swl", "pooling"), ("dwl", "gating")])
def test_lattice_compiled_equals_eager(variant, composition):
    """One direction of the lattice GRU over a padded batch of random lattices: the compiled level
    scan (levels and level widths padded to buckets) equals the eager level loop in every node's
    state, every parameter's gradient and the gradient of the edge inputs; positions without a node
    stay zero.  DWL + gating (the paper's best) has 6 levels: two chunks (4 + 2 levels with the time
    buckets (1, 2, 4)), the state buffer carried; SWL + pooling 4 levels, one chunk."""
    torch.manual_seed(0)
    main = (variant, composition) == ("dwl", "gating")
    sched, B, P = random_lattices(3, (7, 3, 5)) if main else random_lattices(1, (4, 2, 3))
    grid = pad_levels(sched)
    assert len(sched.steps) == (6 if main else 4) and grid.chunks == ([(0, 4), (4, 6)] if main else [(0, 4)])
    assert grid.width == (6 if main else 4)  # the batch bucket of the widest level's edges
    layer = LatticeGRU(4, 5, variant, composition, init_scale=0.5)
    x = torch.randn(sched.edge_words.numel(), 4)
    results = {}
    for impl in ("eager", "compiled"):
        fast_path.set_rnn_impl(layer, impl)
        layer.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_(True)
        out, _ = layer(xi, sched, B, P)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        results[impl] = (out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}, xi.grad)
    (out_e, grads_e, gx_e), (out_c, grads_c, gx_c) = results["eager"], results["compiled"]
    assert_close(out_e, out_c, f"{variant} {composition}: states")
    assert_grads_close(grads_e, grads_c, f"{variant} {composition}")
    assert_close(gx_e, gx_c, f"{variant} {composition}: grad of the edge inputs")
    node = torch.zeros(B, P, dtype=torch.bool)
    node[sched.node_batch, sched.node_pos] = True
    assert out_c[~node].abs().sum() == 0 and out_c[node].abs().min() > 0
    # one compiled variant per (chunk length, width) of the grids, whatever the lattices
    shapes = {k[1][1][0] for k in fast_path.variants() if k[0] == "LatticeGRU._level_scan"}
    assert {(b - a, grid.width, 15) for a, b in grid.chunks} <= shapes <= {(4, 4, 15), (4, 6, 15), (2, 6, 15)}


def test_lattice_level_grid_bounds_the_compiled_variants():
    """Batches of any depth and width map to a few (levels, width) grids: the levels padded to a
    time bucket (chunks of at most the largest), the width to a batch bucket of the widest level."""
    grids = set()
    for seed, lengths in enumerate([(2,), (3, 1), (4, 4, 2), (5, 2), (6, 6, 6, 1), (9, 3), (3, 3, 3, 3, 3)]):
        sched, _, _ = random_lattices(seed, lengths)
        grid = pad_levels(sched)
        n_levels, width = grid.pre_row.shape
        assert grid.chunks[-1][1] == n_levels and n_levels >= len(sched.steps)
        assert all(b - a == fast_path.time_bucket(b - a) for a, b in grid.chunks)
        assert all(b - a == 4 for a, b in grid.chunks[:-1]) and width in (4, 6, 8, 12, 16)
        grids.add(tuple((b - a, width) for a, b in grid.chunks))
        # every real edge slot reads a real node's row (or the zero row); padded slots read the zero row
        real = torch.zeros(n_levels * width, dtype=torch.bool)
        real[grid.edge_slot] = True
        assert grid.pre_row.view(-1)[~real].eq(0).all() and grid.local.view(-1)[~real].eq(width - 1).all()
        assert set(grid.pre_row.view(-1)[real].tolist()) <= {0} | set((1 + grid.node_slot).tolist())
    compiled_shapes = {s for g in grids for s in g}
    assert len(compiled_shapes) <= 6, compiled_shapes


def run_impl(layer, impl, x, state, mask):
    fast_path.set_rnn_impl(layer, impl)
    return layer(x, state, mask)


def test_option_parses_and_auto_resolves(tmp_path):
    """--rnn-impl is an option of every recurrent model (one shared dataclass field) and is set on
    every layer and decoder; auto is eager on CPU (the CPU path is unchanged) and compiled on CUDA;
    no parameter or buffer depends on it."""
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
    assert not fast_path.use_compiled("auto", cpu) and fast_path.use_compiled("compiled", cpu)
    assert not fast_path.use_compiled("eager", cpu)
    meta_cuda = torch.empty(1, device="meta")
    assert not fast_path.use_compiled("auto", meta_cuda)
    assert fast_path.use_compiled("auto", _FakeCuda())
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


@pytest.fixture(scope="module", autouse=True)
def small_time_buckets():
    """Time buckets (1, 2, 4) for the model tests: the compiled graphs unroll at most 4 steps (and
    sequences of 5 or 6 run as two chunks), which keeps compiling on two cores short."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fast_path, "TIME_BUCKETS", (1, 2, 4))
        yield


@pytest.fixture(scope="module")
def s2s(tmp_path_factory):
    data = dictionary_dir(tmp_path_factory.mktemp("dict"))
    cfg, model, task = build(data, "translation", "mc_rnn_iwslt_de_en_2", TINY_S2S)
    return data, cfg, model, task


def test_seq2seq_training_step_compiled_equals_eager(s2s):
    """Loss and every parameter's gradient of a padded batch (encoder layers: layer scans; decoder:
    the input-feeding scan, which replaces the StepwiseLinear of the eager loop)."""
    data, cfg, model, task = s2s
    net, tgt = translation_batch(task)
    results = {}
    for impl in ("eager", "compiled"):
        fast_path.set_rnn_impl(model, impl)
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(**net)[0]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, ignore_index=task.target_dictionary.pad())
        loss.backward()
        results[impl] = (logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert_close(results["eager"][0], results["compiled"][0], "logits")
    assert_grads_close(results["eager"][1], results["compiled"][1], "training step")


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


def test_seq2seq_incremental_equals_full_under_compiled(s2s):
    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    fast_path.set_rnn_impl(model, "compiled")
    model.eval()
    with torch.no_grad():
        full, inc = incremental(model, net)
        assert_close(full, inc, "incremental vs full (compiled)")
        order = torch.tensor([2, 0, 2])
        full2, inc2 = incremental(model, net, order)
        assert_close(full2.index_select(0, order), inc2, "incremental after reorder (compiled)")
        fast_path.set_rnn_impl(model, "eager")
        assert_close(incremental(model, net)[1], inc, "compiled vs eager incremental")


def test_beam_search_same_hypotheses(s2s):
    from fairseq.sequence_generator import SequenceGenerator

    data, cfg, model, task = s2s
    net, _ = translation_batch(task)
    sample = {"net_input": {k: v for k, v in net.items() if k != "prev_output_tokens"}}
    model.eval()
    hyps = {}
    for impl in ("eager", "compiled"):
        fast_path.set_rnn_impl(model, impl)
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=5)
        with torch.no_grad():
            out = gen.generate([model], sample)
        hyps[impl] = [[(h["tokens"].tolist(), h["score"].item()) for h in sent] for sent in out]
    for sent_e, sent_c in zip(hyps["eager"], hyps["compiled"]):
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


def test_lm_incremental_step_compiled(tmp_path):
    """The LM decoder's incremental step is one compiled graph of the whole layer stack (T = 1, the
    batch padded to its bucket): step-by-step == the full pass and == eager, also after reorder."""
    data = dictionary_dir(tmp_path)
    cfg, model, task = build(data, "language_modeling", "parallel_lstm_lm",
                             ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6", "--wide", "2",
                              "--dropout", "0", "--tokens-per-sample", "8"])
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, 20, (3, 4), generator=g)
    model.eval()
    results = {}
    with torch.no_grad():
        for impl in ("eager", "compiled"):
            fast_path.set_rnn_impl(model, impl)
            full = model.decoder(tokens)[0]
            state, steps = {}, []
            order = torch.tensor([1, 1, 0])
            toks = tokens
            for t in range(tokens.size(1)):
                if t == 2:
                    model.decoder.reorder_incremental_state_scripting(state, order)
                    toks, steps = toks.index_select(0, order), [s.index_select(0, order) for s in steps]
                steps.append(model.decoder(toks[:, : t + 1], incremental_state=state)[0][:, -1])
            results[impl] = (full, torch.stack(steps, 1))
            assert_close(full.index_select(0, order), results[impl][1], f"{impl}: incremental vs full")
    assert_close(results["eager"][1], results["compiled"][1], "compiled vs eager steps")
    assert any(k[0] == "RecurrentLMDecoder._stack_scan" for k in fast_path.variants())


def test_fast_path_classes_are_the_recurrent_modules():
    """Every layer and decoder with a time loop has the switch (the lattice encoder's loop runs
    over topological levels; its decoder is a RecurrentAttentionDecoder)."""
    for cls in (MultiChannelRNNLayer, ParallelCellRNNLayer, TorchRNNLayer, RecurrentAttentionDecoder,
                RecurrentLMDecoder, LatticeGRU):
        assert issubclass(cls, fast_path.FastPathMixin) and callable(getattr(cls, "_scan", None) or
                                                                     getattr(cls, "_feed_scan", None) or
                                                                     getattr(cls, "_level_scan", None) or
                                                                     getattr(cls, "_stack_scan"))


def test_gpu_kit_fast_path_check_on_cpu(tmp_path):
    """scripts/gpu/check_install.py --fast-path (what ``run_all.sh --part check`` runs on a GPU) at
    its tiny sizes on CPU: every check passes and reports both timings.  The lattice encoder's
    batch has several levels and sentences of different lengths, and both directions share one
    level grid (one compiled variant between them)."""
    report = check_install.fast_path_check("cpu", tiny=True)
    assert report["device"] == "cpu" and report["sizes"] == dict(T=5, B=3, I=4, H=6)
    assert set(report["checks"]) == {"mc_rnn3_lstm_gates", "parallel_lstm_wide2", "torch_gru_masked",
                                     "lattice_dwl_gating", "mc_rnn2_model_step_and_beam5"}
    for name, rec in report["checks"].items():
        assert rec["ok"], (name, rec)
        if name != "mc_rnn2_model_step_and_beam5":
            assert rec["eager_fwd_bwd_ms"] > 0 and rec["compiled_fwd_bwd_ms"] > 0
    lattice = report["checks"]["lattice_dwl_gating"]
    assert lattice["lattices"] == 3 and lattice["characters"] == [3, 6]
    assert lattice["grids"] == [{"levels": 4, "padded_levels": 4, "width": 4, "edges": 13}] * 2
    assert lattice["compiled_variants"] == 1
    assert report["compiled_variants"] >= 5
