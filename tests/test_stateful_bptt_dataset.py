"""StatefulBPTTDataset (fairseq_local/data/stateful_bptt_dataset.py; Zaremba et al.; parallel-cells
paper Section 3.1; AWD-LSTM's variable windows) against references written here: the rows and
windows of both layouts (training: equal disjoint rows, the tail dropped; evaluation: every token
after the first a target once, rows overlapping by one token, shorter rows ending in a pad target),
for every shard; the batches' fields; and the window lengths AWD-LSTM draws.  The references are
used by tests/test_stateful_language_modeling_task.py too.  Every test takes well under a second.
"""
import numpy as np
import pytest
import torch

from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset, concatenate_lines, variable_bptt_lengths

PAD = 1


# ================================================================================================
# references
# ================================================================================================
def ref_rows(stream, rows, predict_all, pad=PAD):
    """The ``rows`` rows of ``stream`` (a list), as the module doc describes them."""
    n = len(stream)
    if not predict_all:  # Zaremba's reader: equal disjoint rows, the n % rows tail dropped
        length = n // rows
        return [stream[r * length:(r + 1) * length] for r in range(rows)]
    per_row, extra = divmod(n - 1, rows)  # the n - 1 targets dealt out, the first rows one more
    out, pos = [], 0
    for r in range(rows):
        k = per_row + (1 if r < extra else 0)
        out.append(stream[pos:pos + k + 1])  # the token before the first target, then k targets
        pos += k
    width = max(len(row) for row in out)
    return [row + [pad] * (width - len(row)) for row in out]


def fixed_lengths(n_targets, bptt):
    return [bptt] * (n_targets // bptt) + ([n_targets % bptt] if n_targets % bptt else [])


def ref_variable_lengths(total, bptt, seed, full_prob=0.95, std=5.0, min_len=5, max_extra=40):
    """AWD-LSTM's window lengths one by one: base bptt w.p. full_prob else bptt / 2, int() of
    N(base, std), at least min_len, at most bptt + max_extra, the last one cut to what is left.
    The draws: total // min_len + 1 uniforms, then as many standard normals."""
    rng = np.random.RandomState(seed)
    n = total // min_len + 1
    u, z = rng.random_sample(n), rng.standard_normal(n)
    out, covered = [], 0
    for i in range(n):
        base = bptt if u[i] < full_prob else bptt / 2
        length = min(max(min_len, int(base + std * z[i])), bptt + max_extra)
        if covered + length >= total:
            out.append(total - covered)
            return out
        out.append(length)
        covered += length
    raise AssertionError("not enough draws")


def assert_long(got, expected):
    """``got`` is a LongTensor equal to ``expected`` (nested lists)."""
    assert torch.is_tensor(got) and got.dtype == torch.long, got
    assert got.tolist() == expected, (got.tolist(), expected)


def check_layout(ds, stream, bsz, bptt, shard=0, shards=1, predict_all=False, lengths=None, name="x", pad=PAD):
    """Every field, row, window and batch of ``ds`` against the references."""
    rows_all = ref_rows(stream.tolist(), bsz * shards, predict_all, pad)
    rows = rows_all[shard * bsz:(shard + 1) * bsz]
    n_targets = len(rows_all[0]) - 1
    lengths = fixed_lengths(n_targets, bptt) if lengths is None else list(lengths)
    assert (ds.bsz, ds.bptt, ds.pad, ds.name, ds.shard_id, ds.num_shards, ds.predict_all) == \
        (bsz, bptt, pad, name, shard, shards, predict_all)
    assert_long(ds.rows, rows)
    assert len(ds) == len(lengths) and ds.num_windows == len(lengths)
    assert ds.sizes.dtype == np.int64 and ds.sizes.tolist() == lengths and ds.targets_per_row == n_targets
    start = 0
    for i, length in enumerate(lengths):
        src = [row[start:start + length] for row in rows]
        tgt = [row[start + 1:start + length + 1] for row in rows]
        item = ds[i]
        assert item[0] == i
        assert_long(item[1], src)
        assert_long(item[2], tgt)
        assert ds.size(i) == length and type(ds.num_tokens(i)) is int and ds.num_tokens(i) == length * bsz
        batch = ds.collater([ds[i]])
        assert set(batch) == {"id", "net_input", "target", "nsentences", "ntokens", "bptt_stream", "bptt_window"}
        assert_long(batch["id"], list(range(shard * bsz, (shard + 1) * bsz)))
        assert set(batch["net_input"]) == {"src_tokens", "src_lengths"}
        assert_long(batch["net_input"]["src_tokens"], src)
        assert_long(batch["net_input"]["src_lengths"], [length] * bsz)
        assert_long(batch["target"], tgt)
        assert batch["nsentences"] == bsz
        assert batch["ntokens"] == sum(tok != pad for row in tgt for tok in row)
        assert batch["bptt_stream"] == name and batch["bptt_window"] == i
        start += length
    assert start == n_targets


# ================================================================================================
# StatefulBPTTDataset
# ================================================================================================
LAYOUTS = [  # n, bsz, bptt, shards, predict_all
    (32, 3, 4, 1, False),  # rows of 10 (2 tail tokens dropped): 9 targets -> windows 4, 4, 1
    (30, 3, 3, 1, False),  # 9 targets, a multiple of bptt: 3, 3, 3
    (27, 2, 4, 1, False),  # 12 targets (1 tail token dropped): 4, 4, 4
    (26, 2, 5, 1, False),  # 12 targets: 5, 5, 2
    (6, 3, 5, 1, False),  # the smallest training split: 2 tokens a row, 1 target
    (43, 2, 5, 2, False),  # 4 global rows of 10, shard s = rows [2s, 2s + 2)
    (31, 1, 7, 3, False),  # 3 shards of one row
    (23, 3, 4, 1, True),  # 22 targets: 8, 7, 7 (longer = 1)
    (32, 3, 4, 1, True),  # 31 targets: 11, 10, 10
    (35, 4, 3, 1, True),  # 34 targets: 9, 9, 8, 8 (longer = 2)
    (31, 3, 4, 1, True),  # 30 targets: 10 each (no padded row)
    (30, 4, 3, 1, True),  # 29 targets: 8, 7, 7, 7; windows 3, 3, 2
    (4, 3, 2, 1, True),  # the smallest evaluation split: 1 target a row
    (50, 2, 3, 2, True),  # 49 targets over 4 global rows: 13, 12, 12, 12
    (41, 1, 6, 1, True),  # one row: the whole stream read once
    (22, 1, 7, 3, True),  # 21 targets over 3 shards of one row
    (9, 2, 2, 4, True),  # 8 targets over 8 rows: 1 each
]


@pytest.mark.parametrize("n,bsz,bptt,shards,predict_all", LAYOUTS)
def test_rows_windows_and_batches_equal_the_reference(n, bsz, bptt, shards, predict_all):
    stream = torch.arange(5, 5 + n)  # distinct values above pad: a target's predecessor is value - 1
    real_targets, real_sources = [], []
    for shard in range(shards):
        ds = StatefulBPTTDataset(stream, bsz, bptt, PAD, "x", shard_id=shard, num_shards=shards,
                                 predict_all=predict_all)
        check_layout(ds, stream, bsz, bptt, shard, shards, predict_all)
        for i in range(len(ds)):
            _, src, tgt = ds[i]
            real = tgt.ne(PAD)
            real_targets += tgt[real].tolist()
            real_sources += src[real].tolist()
    assert real_sources == [t - 1 for t in real_targets]  # each target follows its own token
    if predict_all:  # every token after the first, once
        assert sorted(real_targets) == stream[1:].tolist()
    else:  # every token of a row but its first; the tail never
        row_len = n // (bsz * shards)
        expected = [v for r in range(bsz * shards) for v in stream[r * row_len + 1:(r + 1) * row_len].tolist()]
        assert sorted(real_targets) == expected


def test_the_defaults_are_one_unsharded_training_split():
    stream = torch.arange(5, 29)
    ds = StatefulBPTTDataset(stream, 3, 4, PAD)
    check_layout(ds, stream, 3, 4, name="train")
    assert ds.supports_prefetch is False


@pytest.mark.parametrize("n,bsz,shards,predict_all,ok", [
    (6, 3, 1, False, True), (5, 3, 1, False, False),  # training: at least 2 tokens a row
    (8, 2, 2, False, True), (7, 2, 2, False, False),  # ... of the global batch
    (4, 3, 1, True, True), (3, 3, 1, True, False),  # evaluation: at least 1 target a row
    (5, 2, 2, True, True), (4, 2, 2, True, False),
    (2, 1, 1, False, True), (1, 1, 1, False, False), (2, 1, 1, True, True), (1, 1, 1, True, False),
])
def test_a_split_too_short_for_the_rows_is_refused(n, bsz, shards, predict_all, ok):
    stream = torch.arange(5, 5 + n)
    make = lambda: StatefulBPTTDataset(stream, bsz, 1, PAD, "valid", 0, shards, predict_all)  # noqa: E731
    if ok:
        check_layout(make(), stream, bsz, 1, 0, shards, predict_all, name="valid")
        return
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == (f"split valid: {n} tokens cannot fill {bsz * shards} streams of at least "
                              f"2 tokens; lower --batch-size")


@pytest.mark.parametrize("bsz,bptt", [(0, 3), (3, 0), (0, 0), (-1, 2)])
def test_batch_size_and_window_must_be_positive(bsz, bptt):
    with pytest.raises(ValueError) as err:
        StatefulBPTTDataset(torch.arange(5, 50), bsz, bptt, PAD, "train")
    assert str(err.value) == (f"stateful BPTT: batch size ({bsz}) and --tokens-per-sample ({bptt}) "
                              f"must be >= 1")


def test_window_lengths_replace_the_fixed_windows():
    stream = torch.arange(5, 65)  # 3 rows of 20: 19 targets each
    for lengths in ([7, 5, 1, 6], np.array([7, 5, 1, 6], dtype=np.int32), [19], [1] * 19):
        ds = StatefulBPTTDataset(stream, 3, 5, PAD, "train", window_lengths=lengths)
        check_layout(ds, stream, 3, 5, lengths=[int(v) for v in lengths], name="train")
        assert ds.window_lengths is lengths
    # the evaluation layout: 59 targets over 3 rows (20, 20, 19), windows over the 20 columns
    ds = StatefulBPTTDataset(stream, 3, 5, PAD, "valid", predict_all=True, window_lengths=[12, 8])
    check_layout(ds, stream, 3, 5, predict_all=True, lengths=[12, 8], name="valid")


@pytest.mark.parametrize("lengths,count,total", [
    ([7, 5, 4], 3, 16), ([7, 5, 4, 4], 4, 20), ([7, 0, 5, 4, 3], 5, 19), ([20, -1], 2, 19),
    ([[7, 5], [4, 3]], 4, 19),
])
def test_window_lengths_must_cover_the_row(lengths, count, total):
    with pytest.raises(ValueError) as err:
        StatefulBPTTDataset(torch.arange(5, 65), 3, 5, PAD, "train", window_lengths=lengths)
    assert str(err.value) == (f"split train: window lengths must be >= 1 and sum to the 19 targets of a row "
                              f"(got {count} summing to {total})")


def test_rebatch_keeps_the_window_lengths_only_for_the_same_rows():
    stream = torch.arange(5, 85)  # 4 rows of 20: 19 targets
    wl = [7, 5, 4, 3]
    ds = StatefulBPTTDataset(stream, 4, 5, 0, "train", window_lengths=wl)
    check_layout(ds.rebatch(), stream, 4, 5, lengths=wl, name="train", pad=0)
    # the same 4 global rows over 2 shards: the same windows
    check_layout(ds.rebatch(bsz=2, shard_id=1, num_shards=2), stream, 2, 5, 1, 2, lengths=wl, name="train", pad=0)
    shard0 = ds.rebatch(bsz=2, num_shards=2)
    check_layout(shard0, stream, 2, 5, 0, 2, lengths=wl, name="train", pad=0)
    check_layout(shard0.rebatch(bsz=2, shard_id=1, num_shards=2), stream, 2, 5, 1, 2, lengths=wl, name="train",
                 pad=0)
    check_layout(shard0.rebatch(bsz=4), stream, 4, 5, lengths=wl, name="train", pad=0)
    # other rows, another window or other lengths given: those
    check_layout(ds.rebatch(bsz=2), stream, 2, 5, name="train", pad=0)  # 2 rows of 40: 39 targets
    check_layout(ds.rebatch(bptt=7), stream, 4, 7, name="train", pad=0)
    check_layout(ds.rebatch(predict_all=True), stream, 4, 5, predict_all=True, name="train", pad=0)
    check_layout(ds.rebatch(window_lengths=[10, 9]), stream, 4, 5, lengths=[10, 9], name="train", pad=0)
    # the layout is kept unless given
    ev = StatefulBPTTDataset(stream, 3, 4, PAD, "valid", predict_all=True)
    check_layout(ev.rebatch(bsz=2), stream, 2, 4, predict_all=True, name="valid")
    check_layout(ev.rebatch(bsz=2, predict_all=False), stream, 2, 4, name="valid")
    check_layout(ev.rebatch(bptt=6, shard_id=2, num_shards=3), stream, 3, 6, 2, 3, predict_all=True, name="valid")


def test_collater_takes_one_item():
    ds = StatefulBPTTDataset(torch.arange(5, 35), 3, 4, PAD, "train")
    with pytest.raises(AssertionError) as err:
        ds.collater([ds[0], ds[1]])
    assert str(err.value) == "every item of a StatefulBPTTDataset is a whole batch"


def test_concatenate_lines():
    for lines, expected in (([], []), ([torch.IntTensor([4, 5, 2])], [4, 5, 2]),
                            ([torch.IntTensor([4, 2]), torch.IntTensor([7, 8, 9, 2]), torch.IntTensor([2])],
                             [4, 2, 7, 8, 9, 2, 2])):
        assert_long(concatenate_lines(lines), expected)


# ================================================================================================
# AWD-LSTM's window lengths
# ================================================================================================
@pytest.mark.parametrize("total,bptt,seed,kwargs", [
    (500, 10, 3, dict(full_prob=0.6, std=4.0, min_len=3, max_extra=3)),  # every clamp and both bases
    (500, 10, 4, dict(full_prob=0.0, std=1.0, min_len=2, max_extra=9)),  # always half
    (3, 10, 5, dict(full_prob=1.0, std=1.0, min_len=2, max_extra=9)),  # one window, cut to the total
    (2000, 70, 0, {}),  # the paper's defaults
    (1500, 70, 1, dict(std=40.0)),  # the default cap, 70 + 40
    (800, 20, 2, dict(std=2.0)),
    (900, 20, 6, dict(full_prob=0.5, min_len=9)),
    (900, 20, 7, dict(full_prob=0.5, max_extra=1)),
    (900, 20, 8, dict(full_prob=0.5, std=9.0, min_len=7, max_extra=4)),
])
def test_variable_lengths_equal_the_reference(total, bptt, seed, kwargs):
    got = variable_bptt_lengths(total, bptt, np.random.RandomState(seed), **kwargs)
    expected = ref_variable_lengths(total, bptt, seed, **kwargs)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.tolist() == expected
    assert got.sum() == total and got.min() >= 1


def test_variable_lengths_use_every_clamp():
    """The first case above reaches the minimum, the cap, both bases and cuts its last window."""
    lengths = ref_variable_lengths(500, 10, 3, full_prob=0.6, std=4.0, min_len=3, max_extra=3)
    assert min(lengths[:-1]) == 3 and max(lengths[:-1]) == 13 and lengths.count(13) < len(lengths) - 1
    u = np.random.RandomState(3).random_sample(500 // 3 + 1)[:len(lengths)]
    assert (u >= 0.6).any() and (u < 0.6).any()
