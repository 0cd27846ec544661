"""Cost model of the shape plan (fairseq_local/data/shape_buckets.py) over an IWSLT-like epoch.

The lengths are those of the project's cost-model tool ``iwslt_like_lengths.py`` (the same formula
and seed, reproduced by :func:`iwslt_like_lengths`: 160k pairs, target - 1 ~ lognormal(log 20.5,
0.62), source from the target with a lognormal ratio, both capped at 175, EOS included).  fairseq's
``batch_by_size`` makes the default path's batches, :func:`plan_batches` the graphs path's, at
``--max-tokens 4000``.  Every distinct batch shape of the epoch runs through the real models (paper
archs: their layers, channels and cells; widths shrunk, which no padded time or batch axis depends
on) with ``cuda_graphs.call`` recording the variant each captured module would capture: the padding
is the real code (``captured_scan``, the decoders' source padding, genCNN's and DPN-S2S's whole-model
padding).  Checked: at most K training variants per captured module, and epoch 2 none new; the
lattice encoder's level grids of training, validation and beam search all declared by the plan.
"""
from collections import defaultdict

import numpy as np
import pytest
import torch
from fairseq.data import data_utils
from torch.utils._pytree import tree_flatten

from contract_lib import load_specs
from fairseq_local.data.lattice_dataset import collate_lattices
from fairseq_local.data.shape_buckets import ShapePlan, make_plan, plan_batches
from fairseq_local.modules import cuda_graphs, fast_path, lattice_gru
from fast_path_lib import _single_thread, build, dictionary_dir  # noqa: F401  (_single_thread is a fixture)

MAX_TOKENS = 4000


def iwslt_like_lengths(n: int = 160_000, seed: int = 0):
    """(source, target) token counts, EOS included, shaped like IWSLT14 De-En's training set."""
    rng = np.random.RandomState(seed)
    tgt = np.clip(np.round(rng.lognormal(np.log(20.5), 0.62, n)), 1, 175).astype(np.int64) + 1
    src = np.clip(np.round((tgt - 1) * np.exp(rng.normal(0.05, 0.18, n))), 1, 175).astype(np.int64) + 1
    return src, tgt


def ordered_indices(src, tgt, seed):
    """``LanguagePairDataset.ordered_indices`` under fairseq's ``numpy_seed(seed)``."""
    with data_utils.numpy_seed(seed):
        indices = np.random.permutation(len(tgt)).astype(np.int64)
    indices = indices[np.argsort(tgt[indices], kind="mergesort")]
    return indices[np.argsort(src[indices], kind="mergesort")]


def epoch_batches(src, tgt, plan: ShapePlan, epoch: int):
    """The plan's batches of one epoch (fairseq's order of the indices for the epoch's seed)."""
    idx = ordered_indices(src, tgt, 1 + epoch)
    batches, _ = plan_batches(idx, np.maximum(src, tgt)[idx], plan)
    return batches


@pytest.fixture(scope="module")
def corpus():
    src, tgt = iwslt_like_lengths()
    plan = make_plan(MAX_TOKENS, np.maximum(src, tgt), multiple=8)
    return src, tgt, plan


class Recorder:
    """Stands in for ``cuda_graphs.call``: records each call's variant (the padded signature, grad
    mode, train/eval) per captured module and runs the loop as a capture runs it (a loop over
    time for one step only: the variant is made before the loop runs, so the rest need not)."""

    def __init__(self):
        self.variants = defaultdict(set)

    def __call__(self, owner, fn, args, name, strict=False):
        flat, _ = tree_flatten(args)
        train = torch.is_grad_enabled()
        self.variants[(id(owner), name)].add((cuda_graphs._signature(flat), train, owner.training))
        with cuda_graphs.capturing():
            if not _is_scan(args):
                return fn(*args)
            # a loop over time (captured_scan): one step gives the outputs' and carry's shapes
            carry, seq, valid, consts = args
            T = seq[0].size(0)
            outs, carry = fn(carry, tuple(s[:1] for s in seq), None if valid is None else valid[:1], consts)
            return tuple(o.expand(T, *o.shape[1:]) for o in outs), carry

    def counts(self):
        return {key: len(v) for key, v in self.variants.items()}


def _is_scan(args) -> bool:
    return (isinstance(args, tuple) and len(args) == 4 and isinstance(args[1], tuple) and len(args[1]) > 0
            and all(isinstance(t, torch.Tensor) for t in args[1]))


def _tokens(lengths, width, vocab, eos, pad, left):
    """``[B, width]`` sentences of ``lengths`` (EOS last), padded left or right."""
    lengths = torch.as_tensor(lengths)
    pos = torch.arange(width).unsqueeze(0)
    real = pos >= width - lengths.unsqueeze(1) if left else pos < lengths.unsqueeze(1)
    words = torch.randint(4, vocab, (len(lengths), width))
    out = torch.where(real, words, torch.full_like(words, pad))
    last = (width - 1) if left else (lengths - 1)
    out[torch.arange(len(lengths)), torch.as_tensor(last).expand(len(lengths))] = eos
    return out


def distinct_batches(batches, src, tgt, plan, lm):
    """The batches that give the epoch's distinct collated shapes: for translation one per (rows,
    bucket) (the collater pads source and target to the bucket's length); for a language model,
    whose collater pads to the longest sentence, the batches of each (rows, bucket) with the
    shortest and the longest longest sentence."""
    out = {}
    for b in batches:  # a loop over batches
        longest = int(np.maximum(src, tgt)[b].max())
        k = int(plan.bucket_of([longest])[0])
        length = longest if lm else plan.shapes[k][0]
        ends = out.setdefault((len(b), k), {})
        ends.setdefault(length, b)
    picked = {}
    for (rows, _), ends in out.items():
        for length in {min(ends), max(ends)}:
            picked[(rows, length)] = ends[length]
    return picked


def run_epoch(model, task, batches_by_shape, src, tgt, lm):
    d = task.target_dictionary if not lm else task.dictionary
    model.train()
    for (rows, length), b in batches_by_shape.items():
        torch.manual_seed(rows)
        if lm:
            tokens = _tokens(tgt[b], length, len(d), d.eos(), d.pad(), left=False)
            model(tokens, src_lengths=torch.as_tensor(tgt[b]))
        else:
            s = _tokens(src[b], length, len(d), d.eos(), d.pad(), left=True)
            t = _tokens(tgt[b], length, len(d), d.eos(), d.pad(), left=False)
            prev = torch.cat([torch.full((rows, 1), d.eos()), t[:, :-1]], 1)
            model(s, torch.as_tensor(src[b]), prev)


GRAPHS = "cuda-graphs" if "cuda-graphs" in fast_path.RNN_IMPLS else "auto"

FAMILIES = [  # (model, arch, task): MC-RNN-3, the parallel-cell LM and seq2seq, genCNN, DPN-S2S
    ("mc_rnn", "mc_rnn_iwslt_de_en_3", "translation"),
    ("parallel_lstm_lm", "parallel_lstm_lm_420h_wide3_1layer", "language_modeling"),
    ("parallel_lstm", "parallel_lstm_zh_en_wide3", "translation"),
    ("gencnn", "gencnn_paper", "language_modeling"),
    ("dpn_s2s", "dpn_s2s_iwslt_de_en", "translation"),
]


@pytest.mark.parametrize("name,arch,task_name", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_training_variants_per_module_are_at_most_k_and_epoch_2_adds_none(
        name, arch, task_name, corpus, tmp_path, monkeypatch):
    src, tgt, plan = corpus
    lm = task_name == "language_modeling"
    if lm:  # a language model batches sentences of one side
        src = tgt
    extra = list(load_specs()[name].tiny_args) + ["--max-source-positions", "1024", "--max-target-positions", "1024"]
    if lm:
        extra = list(load_specs()[name].tiny_args) + ["--tokens-per-sample", "1024"]
    _, model, task = build(dictionary_dir(tmp_path, n=40), task_name, arch, extra)
    for m in model.modules():
        if isinstance(m, fast_path.FastPathMixin):
            m.rnn_impl = GRAPHS
    recorder = Recorder()
    monkeypatch.setattr(cuda_graphs, "call", recorder)
    cuda_graphs.set_shape_plan(plan)
    try:
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
            run_epoch(model, task, distinct_batches(epoch_batches(src, tgt, plan, 1), src, tgt, plan, lm), src, tgt, lm)
            first = recorder.counts()
            run_epoch(model, task, distinct_batches(epoch_batches(src, tgt, plan, 2), src, tgt, plan, lm), src, tgt, lm)
            second = recorder.counts()
    finally:
        cuda_graphs.set_shape_plan(None)
    K = len(plan.shapes)
    assert first, f"{arch}: no loop ran captured"
    assert max(first.values()) <= K, f"{arch}: variants per captured module {sorted(first.values())} > K={K}"
    assert second == first, f"{arch}: epoch 2 captured new variants ({first} -> {second})"
    # every padded (time, batch) a module saw is a declared shape (or a batch-only one-token step)
    declared = set(plan.shapes)
    for variants in recorder.variants.values():
        for sig, _, _ in variants:
            shapes = [s[0] for s in sig if isinstance(s, tuple) and isinstance(s[0], tuple)]
            assert any(len(s) >= 2 and ((s[0], s[1]) in declared or (s[1], s[0]) in declared) for s in shapes), sig


def test_the_plan_of_an_iwslt_like_epoch_against_batch_by_size(corpus):
    """K = 15 shapes, each B_k * L_k <= 4000; the plan's batches hold every sentence once; fairseq's
    batches meet far more distinct shapes than K and the plan's epoch 2 has the same shapes."""
    src, tgt, plan = corpus
    n = np.maximum(src, tgt)
    assert [length for length, _ in plan.shapes] == [8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192]
    assert all(b * length <= MAX_TOKENS and b % 8 == 0 for length, b in plan.shapes), plan.shapes
    b1, b2 = epoch_batches(src, tgt, plan, 1), epoch_batches(src, tgt, plan, 2)
    assert np.array_equal(np.sort(np.concatenate(b1)), np.arange(len(n)))
    shapes = {(len(b), int(plan.bucket_of([n[b].max()])[0])) for b in b1}
    assert shapes == {(len(b), int(plan.bucket_of([n[b].max()])[0])) for b in b2}
    idx = ordered_indices(src, tgt, 2)
    default = data_utils.batch_by_size(idx, None, num_tokens_vec=n[idx], max_tokens=MAX_TOKENS,
                                       required_batch_size_multiple=8)
    default_shapes = {(cuda_graphs.length_bucket(int(n[b].max())), cuda_graphs.batch_bucket(len(b))) for b in default}
    assert len(default) > len(b1) * 0.9 and len(default_shapes) > 1


# ------------------------------------------------------------------------------------------------
# the lattice encoder: its level grids (lattice_gru.grid_shape) under the plan
# ------------------------------------------------------------------------------------------------
def lattice_corpus(n_chars, seed=0, max_segs=3):
    """Edges (sentence, i, j) and primary-path flags of lattices over ``n_chars`` characters, each
    the merge of 1 to ``max_segs`` random segmentations (each boundary cut with probability 1/2, as
    in the GPU kit's ``random_lattices``); the first segmentation is the primary path.  Edges are
    sorted by (sentence, i, j).  Vectorised over the corpus (a loop over segmentations only)."""
    rng = np.random.RandomState(seed)
    segs = rng.randint(1, max_segs + 1, len(n_chars))
    sent = np.repeat(np.arange(len(n_chars)), n_chars + 1)  # one entry per node v_0..v_N
    pos = np.arange(sent.size) - np.repeat(np.cumsum(n_chars + 1) - (n_chars + 1), n_chars + 1)
    keys = []
    for s in range(max_segs):
        cut = ((pos == 0) | (pos == n_chars[sent]) | (rng.randint(0, 2, sent.size) == 1)) & (s < segs[sent])
        at = np.flatnonzero(cut)
        same = sent[at[1:]] == sent[at[:-1]]
        keys.append(at[:-1][same] * 256 + (at[1:] - at[:-1])[same])
    k = np.unique(np.concatenate(keys))
    first, length = k // 256, k % 256
    return sent[first], pos[first], pos[first] + length, np.isin(k, keys[0])


def node_depths(n_chars, e_s, e_i, e_j):
    """The depth (longest path from the start node, in edges) of every node, ``[offset[s] + p]``
    for node p of sentence s; a loop over positions."""
    offset = np.cumsum(n_chars + 1) - (n_chars + 1)
    depth = np.zeros(int((n_chars + 1).sum()), dtype=np.int64)
    order = np.argsort(e_j, kind="stable")
    e_s, e_i, e_j = e_s[order], e_i[order], e_j[order]
    bounds = np.searchsorted(e_j, np.arange(int(n_chars.max()) + 2))
    for p in range(1, int(n_chars.max()) + 1):
        s, i = e_s[bounds[p]:bounds[p + 1]], e_i[bounds[p]:bounds[p + 1]]
        np.maximum.at(depth, offset[s] + p, depth[offset[s] + i] + 1)
    return depth, offset


def level_grids(batches, n_chars, e_s, e_i, e_j):
    """Each batch's (levels, widest level's edges) in one direction: the levels are the batch's
    largest depth, a level's edges are those entering its nodes (``make_schedule``'s steps)."""
    depth, offset = node_depths(n_chars, e_s, e_i, e_j)
    batch_of = np.empty(len(n_chars), dtype=np.int64)
    batch_of[np.concatenate(batches)] = np.repeat(np.arange(len(batches)), [len(b) for b in batches])
    level = depth[offset[e_s] + e_j]
    keys, counts = np.unique(batch_of[e_s] * 1024 + level, return_counts=True)
    widest = np.zeros(len(batches), dtype=np.int64)
    np.maximum.at(widest, keys // 1024, counts)
    levels = np.zeros(len(batches), dtype=np.int64)
    np.maximum.at(levels, batch_of[e_s], level)
    return levels, widest


@pytest.fixture(scope="module")
def lattices(corpus):
    src, _, _ = corpus
    n_chars = src - 1  # characters: the source side without its EOS
    e_s, e_i, e_j, primary = lattice_corpus(n_chars)
    return n_chars, e_s, e_i, e_j, primary


def epoch_grids(batches, plan, lattices):
    """Each batch's padded (levels, width) forward and backward (the mirrored lattice)."""
    n_chars, e_s, e_i, e_j, _ = lattices
    out = []
    for i, j in ((e_i, e_j), (n_chars[e_s] - e_j, n_chars[e_s] - e_i)):
        levels, widest = level_grids(batches, n_chars, e_s, i, j)
        out.append([lattice_gru.grid_shape(int(n), int(w), plan) for n, w in zip(levels, widest)])
    return list(zip(*out))


def lattice_batch(b, lattices, vocab, pad, rng):
    """The collated lattices of the sentences ``b`` (``LatticePairDataset``'s collater), random words."""
    n_chars, e_s, e_i, e_j, primary = lattices
    lo, hi = np.searchsorted(e_s, b), np.searchsorted(e_s, b, side="right")
    packed = [torch.from_numpy(np.concatenate([[n_chars[s], h - a], e_i[a:h], e_j[a:h], rng.randint(4, vocab, h - a),
                                               np.flatnonzero(primary[a:h])]))
              for s, a, h in zip(b, lo, hi)]  # a loop over the sentences of a batch, as the collater's
    return collate_lattices(packed, pad)


def test_lattice_level_grids_of_an_iwslt_like_epoch_are_declared_and_bounded(corpus, lattices, tmp_path, monkeypatch):
    """Lattices over an IWSLT-like epoch of characters (the source lengths without EOS; 1 to 3
    merged random segmentations), in the plan's batches: every batch's padded level grid, forward
    and backward, is one of ``lattice_gru.declared_grids(plan)`` (at most K * len(EDGE_FACTORS),
    stated at start-up) and epoch 2 meets no grid that epoch 1 did not; the real model (the
    paper's DWL-GRU + gating arch, widths shrunk), run on a batch of each grid with its targets
    padded to the declared length as the collater pads them, pads to exactly the predicted grids,
    and its decoder keeps at most K training variants."""
    src, tgt, plan = corpus
    declared = set(lattice_gru.declared_grids(plan))
    bound = len(plan.shapes) * len(lattice_gru.EDGE_FACTORS)
    assert len(declared) <= bound
    batches = epoch_batches(src, tgt, plan, 1)
    grids = epoch_grids(batches, plan, lattices)
    forward, backward = {g for g, _ in grids}, {g for _, g in grids}
    assert forward | backward <= declared, sorted((forward | backward) - declared)
    second = epoch_grids(epoch_batches(src, tgt, plan, 2), plan, lattices)
    assert {g for g, _ in second} <= forward and {g for _, g in second} <= backward  # epoch 2: none new
    # one batch for each forward and each backward grid, through the real model
    picked, have_f, have_b = [], set(), set()
    for b, (f, g) in zip(batches, grids):  # a loop over batches
        if f not in have_f or g not in have_b:
            picked.append((f, g, b))
            have_f.add(f)
            have_b.add(g)
    extra = list(load_specs()["lattice_rnnsearch"].tiny_args) + [
        "--source-lang", "src", "--target-lang", "tgt",
        "--max-source-positions", "1024", "--max-target-positions", "1024"]
    _, model, task = build(dictionary_dir(tmp_path, n=40), "lattice_translation", "lattice_dwl_gating", extra)
    for m in model.modules():
        if isinstance(m, fast_path.FastPathMixin):
            m.rnn_impl = GRAPHS
    recorder = Recorder()
    monkeypatch.setattr(cuda_graphs, "call", recorder)
    d = task.target_dictionary
    rng = np.random.RandomState(0)
    cuda_graphs.set_shape_plan(plan)
    try:
        with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()):
            model.train()
            for f, g, b in picked:
                net = lattice_batch(b, lattices, len(task.source_dictionary), task.source_dictionary.pad(), rng)
                # the collater pads the targets to the batch's declared length (collate_to_plan)
                t = _tokens(tgt[b], plan.shapes[int(plan.bucket_of([np.maximum(src, tgt)[b].max()])[0])][0],
                            len(d), d.eos(), d.pad(), left=False)
                prev = torch.cat([torch.full((len(b), 1), d.eos()), t[:, :-1]], 1)
                model(net["src_tokens"], net["src_lengths"], prev, lattice=net["lattice"])
    finally:
        cuda_graphs.set_shape_plan(None)
    seen = {}
    directions = {id(model.encoder.lattice.forward_gru): "forward", id(model.encoder.lattice.backward_gru): "backward"}
    for (owner, _), variants in recorder.variants.items():
        if owner in directions:
            seen[directions[owner]] = {s[0] for sig, _, _ in variants for s in sig
                                       if isinstance(s, tuple) and s[1] == torch.int64 and len(s[0]) == 2}
        else:
            assert len(variants) <= len(plan.shapes), (owner, len(variants))
    want_f, want_b = {f for f, _, _ in picked}, {g for _, g, _ in picked}
    assert want_f == forward and want_b == backward
    assert seen == {"forward": want_f, "backward": want_b}, (seen, want_f, want_b)
    print(f"lattice grids over an IWSLT-like epoch: {len(forward)} forward, {len(backward)} backward, "
          f"declared {len(declared)} <= K*{len(lattice_gru.EDGE_FACTORS)} = {bound}")


def test_lattice_level_grids_of_validation_and_beam_search_are_declared_and_bounded(corpus):
    """Validation (IWSLT14's size, its own lattices) batches with the training run's plan: every
    level grid, forward and backward, is one the plan declared, and its epoch 2 meets none that its
    epoch 1 did not.  fairseq-generate declares a plan of its own from the test set: beam search
    runs the lattice encoder once per batch (the beams expand its output), so its grids are the
    batches' grids, again declared by that plan and at most K * len(EDGE_FACTORS) per direction."""
    _, _, plan = corpus
    for seed, n, how in ((1, 7_283, "valid"), (2, 6_750, "generate")):
        src, tgt = iwslt_like_lengths(n, seed)
        n_chars = src - 1
        lattices = (n_chars, *lattice_corpus(n_chars, seed))
        run_plan = plan if how == "valid" else make_plan(MAX_TOKENS, np.maximum(src, tgt), multiple=8)
        declared = set(lattice_gru.declared_grids(run_plan))
        assert len(declared) <= len(run_plan.shapes) * len(lattice_gru.EDGE_FACTORS)
        grids = epoch_grids(epoch_batches(src, tgt, run_plan, 1), run_plan, lattices)
        seen = {g for pair in grids for g in pair}
        assert seen <= declared, (how, sorted(seen - declared))
        assert len(seen) > 1, how  # the batches meet several grids, all of them declared
        again = {g for pair in epoch_grids(epoch_batches(src, tgt, run_plan, 2), run_plan, lattices) for g in pair}
        assert again <= seen, (how, sorted(again - seen))
