"""--task stateful_language_modeling (fairseq_local/tasks/stateful_language_modeling.py) in process:
the task's options, files, batch sizes, iterators and error messages, and the carried state through
``train_step`` / ``valid_step`` / ``eval_lm_dataloader`` with a tiny float64 recurrent LM whose loss
over the windows equals its loss over whole rows read in one pass (the rows and windows against the
references of tests/test_stateful_bptt_dataset.py; AWD-LSTM's variable windows and NT-ASGD).  Every
test takes well under a second, so tests/mutation/mutation.sh can sweep the module; the CLI end to
end: tests/test_stateful_language_modeling.py.
"""
import logging
import types

import pytest
import torch
import torch._dynamo  # noqa: F401  (torch.optim.Optimizer imports it on first use: here, at collection)
import torch.nn as nn
import torch.nn.functional as F
from fairseq.data import Dictionary, indexed_dataset

from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset
from fairseq_local_core.errors import ConfigError
from fairseq_local.optim.nt_asgd import NTASGD
from fairseq_local.tasks.stateful_language_modeling import (BPTTState, StatefulLanguageModelingTask,
                                                            supports_bptt_state)
from test_stateful_bptt_dataset import PAD, assert_long, check_layout, fixed_lengths, ref_rows, ref_variable_lengths
from test_stateful_language_modeling import _tensors

TASK_LOG = "fairseq_local.tasks.stateful_language_modeling"


# ================================================================================================
# the task: a tiny recurrent LM, data written here, a config as fairseq would pass it
# ================================================================================================
VOCAB = 16  # 4 specials + 12 words


class ToyDecoder(nn.Module):
    """h_t = tanh(E[x_t] + h_{t-1} R), logits_t = h_t O, in float64."""

    def __init__(self, seed=0, dim=3):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = nn.Parameter(torch.randn(VOCAB, dim, generator=g, dtype=torch.float64))
        self.rec = nn.Parameter(torch.randn(dim, dim, generator=g, dtype=torch.float64))
        self.out = nn.Parameter(torch.randn(dim, VOCAB, generator=g, dtype=torch.float64))
        self.initial, self.final = [], []

    def run(self, tokens, h=None):
        if h is None:
            h = torch.zeros(tokens.size(0), self.rec.size(0), dtype=torch.float64)
        outs = []
        for t in range(tokens.size(1)):
            h = torch.tanh(self.embed[tokens[:, t]] + h @ self.rec)
            outs.append(h)
        return torch.stack(outs, 1) @ self.out, h


class StatefulToyDecoder(ToyDecoder):
    """Opts in to the carried state: reads it with carry.get(self), leaves a nest of tensors."""

    def forward(self, src_tokens, src_lengths=None, bptt_state=None):
        carried = None if bptt_state is None else bptt_state.get(self)
        self.initial.append(carried)
        logits, h = self.run(src_tokens, None if carried is None else carried["h"])
        final = {"h": h, "more": [(2 * h, h.sum())]}
        if bptt_state is not None:
            bptt_state.set(self, final)
        self.final.append(final if bptt_state is not None else None)
        return logits, None


class StatelessToyDecoder(ToyDecoder):
    def forward(self, src_tokens, src_lengths=None):
        return self.run(src_tokens)[0], None


class ToyLM(nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.decoder = decoder
        self.num_updates = None

    def forward(self, src_tokens, src_lengths=None, **kwargs):
        return self.decoder(src_tokens, src_lengths, **kwargs)

    def set_num_updates(self, num_updates):
        self.num_updates = num_updates


class NLL:
    """Summed -log p of the real targets, as fairseq's cross_entropy (float64); records the samples."""

    def __init__(self):
        self.samples = []

    def __call__(self, model, sample):
        self.samples.append(sample)
        if sample is None or "net_input" not in sample:
            return torch.zeros((), dtype=torch.float64), 0, {}
        logits, _ = model(**sample["net_input"])
        real = sample["target"].ne(PAD)
        nll = -F.log_softmax(logits, -1).gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
        loss = nll[real].sum()
        return loss, int(real.sum()), {"loss": loss.item(), "ntokens": sample["ntokens"]}


def ref_nll(decoder, rows):
    """The model over whole rows (a list of lists) in one pass from a zero state."""
    rows = torch.tensor(rows)
    with torch.no_grad():
        logits, _ = decoder.run(rows[:, :-1])
    tgt = rows[:, 1:]
    nll = -F.log_softmax(logits, -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return nll[tgt.ne(PAD)].sum().item()


class FakeOptimizer:
    """What the task and FairseqTask call on fairseq's optimizer; ``_optimizer``: a wrapped NTASGD."""

    def __init__(self, lr=0.5, inner=None, fail=False):
        self.lr, self.lr_at_step, self.fail = lr, [], fail
        if inner is not None:
            self._optimizer = inner

    def backward(self, loss):
        if loss.requires_grad:
            loss.backward()

    def get_lr(self):
        return self.lr

    def set_lr(self, lr):
        self.lr = lr

    def step(self):
        self.lr_at_step.append(self.lr)
        if self.fail:
            raise RuntimeError("step failed")
        if getattr(self, "_optimizer", None) is not None:
            self._optimizer.step()


def _lines(seed, lengths):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, VOCAB, (k,), generator=g).tolist() + [2] for k in lengths]


def _write_split(prefix, lines):
    builder = indexed_dataset.make_builder(f"{prefix}.bin", impl="mmap", vocab_size=VOCAB)
    for line in lines:
        builder.add_item(torch.IntTensor(line))
    builder.finalize(f"{prefix}.idx")


def _flat(lines):
    return [t for line in lines for t in line]


TRAIN = _lines(1, [5, 3, 6, 4, 7, 2, 5, 6])  # 46 tokens: 3 rows of 15 (1 dropped), windows 4, 4, 4, 2
VALID = _lines(2, [4, 6, 3, 5, 2, 6])  # 32 tokens: 31 targets, 2 rows of 16 and 15
TRAIN1 = _lines(3, [3, 4])
TRAIN_B = _lines(4, [6, 6, 6])
TRAIN_C = _lines(5, [5, 5, 5, 5])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("slm_task")
    dirs = [root / name for name in ("a", "b", "c")]
    for d in dirs:
        d.mkdir()
    d = Dictionary()
    for i in range(12):
        d.add_symbol(f"w{i}")
    d.save(str(dirs[0] / "dict.txt"))
    _write_split(dirs[0] / "train", TRAIN)
    _write_split(dirs[0] / "train1", TRAIN1)  # read only with combine=True
    _write_split(dirs[0] / "valid", VALID)
    _write_split(dirs[1] / "train", TRAIN_B)
    _write_split(dirs[2] / "train", TRAIN_C)
    (dirs[0] / "rawvalid").write_text("w1 w2 w3\nw4 w5\nw0 w11 w7 w7\n")  # fairseq's raw text format
    return types.SimpleNamespace(a=str(dirs[0]), b=str(dirs[1]), c=str(dirs[2]), root=root)


def make_cfg(data_dir="", drop=(), **kw):
    cfg = dict(data=data_dir, tokens_per_sample=4, no_carry_state=False, variable_bptt=False, bptt_std=5.0,
               bptt_full_prob=0.95, bptt_min_len=5, bptt_max_extra=40, batch_size=3, batch_size_valid=2,
               train_subset="train", seed=1, best_checkpoint_metric="loss", maximize_best_checkpoint_metric=False)
    cfg.update(kw)
    for key in drop:
        del cfg[key]
    return types.SimpleNamespace(**cfg)


def make_task(data, **kw):
    return StatefulLanguageModelingTask.setup_task(make_cfg(data.a, **kw))


def stateful_lm(seed=0):
    return ToyLM(StatefulToyDecoder(seed))


def batches(task, split, **kw):
    if split not in task.datasets:
        task.load_dataset(split)
    return list(task.get_batch_iterator(task.dataset(split), **kw).next_epoch_itr(shuffle=False))


# ------------------------------------------------------------------------------ who takes the state
def test_which_models_take_the_carried_state():
    stateful, stateless = ToyLM(StatefulToyDecoder()), ToyLM(StatelessToyDecoder())
    assert supports_bptt_state(stateful) is True and supports_bptt_state(stateless) is False
    stateless.supports_bptt_state = True  # an explicit flag wins over the decoder's signature
    stateful.supports_bptt_state = False
    assert supports_bptt_state(stateless) is True and supports_bptt_state(stateful) is False
    stateless.supports_bptt_state = 1
    assert supports_bptt_state(stateless) is True
    assert supports_bptt_state(nn.Linear(2, 2)) is False  # no decoder, no flag
    assert supports_bptt_state(object()) is False
    assert supports_bptt_state(types.SimpleNamespace(supports_bptt_state=True)) is True


def test_bptt_state_keeps_one_detached_state_per_owner():
    carry, a, b = BPTTState(), nn.Linear(1, 1), nn.Linear(1, 1)
    assert carry.get(a) is None and len(carry) == 0
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    carry.set(a, {"h": w * 2, "more": [(w * 3, w.sum())]})
    carry.set(b, [w * 5])
    assert len(carry) == 2 and carry.get(a)["h"].grad_fn is not None
    carry.detach_()
    sa, sb = carry.get(a), carry.get(b)
    assert set(sa) == {"h", "more"} and isinstance(sa["more"], list) and isinstance(sa["more"][0], tuple)
    for got, expected in ((sa["h"], [2.0, -4.0]), (sa["more"][0][0], [3.0, -6.0]), (sa["more"][0][1], -1.0),
                          (sb[0], [5.0, -10.0])):
        assert got.grad_fn is None and not got.requires_grad and got.tolist() == expected
    carry.set(a, None)
    assert carry.get(a) is None and carry.get(b) is sb and len(carry) == 2
    carry.reset()
    assert carry.get(b) is None and len(carry) == 0


# ------------------------------------------------------------------------------ setup and options
def test_setup_task_reads_the_dictionary(data, caplog):
    cfg = make_cfg(f"{data.a}:{data.b}:{data.c}", best_checkpoint_metric="ppl", maximize_best_checkpoint_metric=1)
    with caplog.at_level(logging.INFO, logger=TASK_LOG):
        task = StatefulLanguageModelingTask.setup_task(cfg)
    assert f"dictionary: {VOCAB} types" in [r.getMessage() for r in caplog.records]
    assert task.cfg is cfg and len(task.dictionary) == VOCAB and task.dictionary[4] == "w0"
    assert task.source_dictionary is task.dictionary and task.target_dictionary is task.dictionary
    assert task.max_positions() is None and task.datasets == {}
    assert task.nt_asgd.metric == "ppl" and task.nt_asgd.maximize is True
    # a configuration without the checkpoint fields: the loss, minimised
    task = StatefulLanguageModelingTask(make_cfg(drop=("best_checkpoint_metric", "maximize_best_checkpoint_metric")),
                                        task.dictionary)
    assert task.nt_asgd.metric == "loss" and task.nt_asgd.maximize is False
    task = StatefulLanguageModelingTask(make_cfg(best_checkpoint_metric=None), task.dictionary)
    assert task.nt_asgd.metric == "loss"
    with pytest.raises(FileNotFoundError) as err:
        StatefulLanguageModelingTask.setup_task(make_cfg(f"{data.b}:{data.a}"))
    assert str(err.value) == f"{data.b}/dict.txt: no dictionary (run fairseq-preprocess --only-source)"


@pytest.mark.parametrize("option,value,message", [
    ("bptt_full_prob", -0.01, "--bptt-full-prob must be in [0, 1] (got -0.01)"),
    ("bptt_full_prob", 1.01, "--bptt-full-prob must be in [0, 1] (got 1.01)"),
    ("bptt_std", -0.5, "--bptt-std must be >= 0 (got -0.5)"),
    ("bptt_min_len", 0, "--bptt-min-len must be >= 1 and --bptt-max-extra >= 0 (got 0, 40)"),
    ("bptt_max_extra", -1, "--bptt-min-len must be >= 1 and --bptt-max-extra >= 0 (got 5, -1)"),
])
def test_variable_bptt_options_are_checked(option, value, message):
    with pytest.raises(ConfigError) as err:
        StatefulLanguageModelingTask(make_cfg(variable_bptt=True, **{option: value}), Dictionary())
    assert str(err.value) == message
    StatefulLanguageModelingTask(make_cfg(**{option: value}), Dictionary())  # unchecked without --variable-bptt


def test_variable_bptt_option_bounds_are_accepted():
    for kw in (dict(bptt_full_prob=0.0), dict(bptt_full_prob=1.0), dict(bptt_std=0.0), dict(bptt_min_len=1),
               dict(bptt_max_extra=0), dict(bptt_min_len=1, bptt_max_extra=0)):
        StatefulLanguageModelingTask(make_cfg(variable_bptt=True, **kw), Dictionary())
    # a configuration from before --variable-bptt: fixed windows, the lr untouched
    old = make_cfg(drop=("variable_bptt", "bptt_std", "bptt_full_prob", "bptt_min_len", "bptt_max_extra"))
    StatefulLanguageModelingTask(old, Dictionary())


def test_batch_size_of_each_split():
    task = StatefulLanguageModelingTask(make_cfg(batch_size=3, batch_size_valid=5), Dictionary())
    assert task._batch_size("train") == 3 and task._batch_size("valid") == 5
    task = StatefulLanguageModelingTask(make_cfg(batch_size=3, batch_size_valid=None, train_subset="tr"),
                                        Dictionary())
    assert task._batch_size("tr") == 3 and task._batch_size("train") == 3 and task._batch_size("valid") == 3
    task = StatefulLanguageModelingTask(make_cfg(batch_size=None, batch_size_valid=None), Dictionary())
    assert task._batch_size("train") == 20 and task._batch_size("valid") == 20  # Zaremba et al.
    task = StatefulLanguageModelingTask(make_cfg(batch_size=None, batch_size_valid=4), Dictionary())
    assert task._batch_size("train") == 20 and task._batch_size("valid") == 4


# ------------------------------------------------------------------------------ datasets
def test_load_dataset_layouts(data, caplog):
    task = make_task(data, batch_size=3, batch_size_valid=2, tokens_per_sample=4)
    with caplog.at_level(logging.INFO, logger=TASK_LOG):
        task.load_dataset("train")
        task.load_dataset("valid")
    train, valid = task.dataset("train"), task.dataset("valid")
    check_layout(train, torch.tensor(_flat(TRAIN)), 3, 4, name="train")
    check_layout(valid, torch.tensor(_flat(VALID)), 2, 4, predict_all=True, name="valid")
    assert_long(train.stream, _flat(TRAIN))
    messages = [r.getMessage() for r in caplog.records if r.name == TASK_LOG]
    assert "train: 46 tokens, 4 windows of 4 x 3 streams" in messages
    assert "valid: 32 tokens, 4 windows of 4 x 2 streams" in messages
    # the training subset is named by --train-subset; any other split is evaluated
    task = make_task(data, train_subset="valid")
    task.load_dataset("valid")
    task.load_dataset("train")
    check_layout(task.dataset("valid"), torch.tensor(_flat(VALID)), 3, 4, name="valid")
    check_layout(task.dataset("train"), torch.tensor(_flat(TRAIN)), 2, 4, predict_all=True, name="train")


def test_load_dataset_paths_combine_raw_and_missing(data):
    task = make_task(data)
    task.cfg.data = f"{data.a}:{data.b}:{data.c}"
    for epoch, lines in ((1, TRAIN), (2, TRAIN_B), (3, TRAIN_C), (4, TRAIN)):  # round robin over the paths
        task.load_dataset("train", epoch=epoch)
        assert_long(task.dataset("train").stream, _flat(lines))
    task.load_dataset("train")
    assert_long(task.dataset("train").stream, _flat(TRAIN))
    task.load_dataset("train", combine=True)  # train, train1, ...
    assert_long(task.dataset("train").stream, _flat(TRAIN + TRAIN1))
    task.load_dataset("rawvalid")  # fairseq's raw text format, encoded with the task's dictionary
    assert_long(task.dataset("rawvalid").stream, [5, 6, 7, 2, 8, 9, 2, 4, 15, 11, 11, 2])
    with pytest.raises(FileNotFoundError) as err:
        task.load_dataset("test")
    assert str(err.value) == f"Dataset not found: test ({data.a}/test)"


# ------------------------------------------------------------------------------ batch iterators
def test_batch_iterator(data):
    task = make_task(data)
    task.load_dataset("train")
    ds = task.dataset("train")
    with pytest.raises(TypeError) as err:
        task.get_batch_iterator([ds[0]])
    assert str(err.value) == "stateful_language_modeling batches only its own StatefulBPTTDataset"
    itr = task.get_batch_iterator(ds)
    assert (itr.epoch, itr.num_workers, itr.buffer_size) == (1, 0, 0)
    got = list(itr.next_epoch_itr(shuffle=True))  # in order whatever is asked
    assert [b["bptt_window"] for b in got] == [0, 1, 2, 3]
    for b, expected in zip(got, [ds.collater([ds[i]]) for i in range(4)]):
        assert_long(b["net_input"]["src_tokens"], expected["net_input"]["src_tokens"].tolist())
        assert_long(b["target"], expected["target"].tolist())
    itr = task.get_batch_iterator(ds, epoch=3, num_workers=2, data_buffer_size=4)
    assert (itr.epoch, itr.num_workers, itr.buffer_size) == (3, 2, 4)
    last_dropped = task.get_batch_iterator(ds, skip_remainder_batch=True).next_epoch_itr(shuffle=False)
    assert [b["bptt_window"] for b in last_dropped] == [0, 1, 2]
    # data parallel: shard s of the global batch of 2 x 3 rows
    stream = torch.tensor(_flat(TRAIN))
    for source in (ds, ds.rebatch(shard_id=1, num_shards=2), ds.rebatch(shard_id=0, num_shards=2)):
        got = list(task.get_batch_iterator(source, num_shards=2, shard_id=1).next_epoch_itr(shuffle=False))
        rows = ref_rows(stream.tolist(), 6, False)[3:]
        cols = len(rows[0]) - 1
        assert len(got) == len(fixed_lengths(cols, 4))
        assert_long(torch.cat([b["net_input"]["src_tokens"] for b in got], 1), [r[:-1] for r in rows])
        assert_long(torch.cat([b["target"] for b in got], 1), [r[1:] for r in rows])
        assert_long(got[0]["id"], [3, 4, 5])


VB = dict(variable_bptt=True, tokens_per_sample=3, bptt_full_prob=0.6, bptt_std=2.0, bptt_min_len=1,
          bptt_max_extra=1, seed=7)


def test_variable_bptt_training_windows(data):
    task = make_task(data, **VB)
    for epoch in (1, 2):
        expected = ref_variable_lengths(14, 3, [7, epoch], 0.6, 2.0, 1, 1)
        assert task.window_lengths(14, epoch).tolist() == expected
    assert task.window_lengths(14, 1).tolist() != task.window_lengths(14, 2).tolist()
    assert task.window_lengths(300, 1).tolist() == ref_variable_lengths(300, 3, [7, 1], 0.6, 2.0, 1, 1)
    task.load_dataset("train")
    task.load_dataset("valid")
    stream = torch.tensor(_flat(TRAIN))
    for epoch, shards, shard in ((1, 1, 0), (2, 1, 0), (3, 2, 1), (3, 2, 0)):
        ds = task.dataset("train")
        got = list(task.get_batch_iterator(ds, num_shards=shards, shard_id=shard, epoch=epoch)
                   .next_epoch_itr(shuffle=False))
        rows = ref_rows(stream.tolist(), 3 * shards, False)[3 * shard:3 * shard + 3]
        lengths = ref_variable_lengths(len(rows[0]) - 1, 3, [7, epoch], 0.6, 2.0, 1, 1)
        assert [b["net_input"]["src_tokens"].size(1) for b in got] == lengths
        assert shards > 1 or len(set(lengths)) > 1  # random lengths
        assert_long(torch.cat([b["net_input"]["src_tokens"] for b in got], 1), [r[:-1] for r in rows])
        assert_long(torch.cat([b["target"] for b in got], 1), [r[1:] for r in rows])
    # evaluation keeps fixed windows, and so does the training split evaluated
    assert [b["net_input"]["src_tokens"].size(1) for b in batches(task, "valid")] == [3, 3, 3, 3, 3, 1]
    ev = task.dataset("train").rebatch(predict_all=True)
    assert [b["net_input"]["src_tokens"].size(1) for b in task.get_batch_iterator(ev).next_epoch_itr()] == \
        fixed_lengths(15, 3)
    # without --variable-bptt (or with a configuration from before it): fixed windows
    for task in (make_task(data, tokens_per_sample=3),
                 make_task(data, tokens_per_sample=3, drop=("variable_bptt", "bptt_std", "bptt_full_prob",
                                                            "bptt_min_len", "bptt_max_extra"))):
        assert [b["net_input"]["src_tokens"].size(1) for b in batches(task, "train")] == [3, 3, 3, 3, 2]


# ------------------------------------------------------------------------------ carrying the state
def _train_epoch(task, model, crit, opt=None, epoch=1, **kw):
    samples = batches(task, "train", epoch=epoch)
    losses = []
    for i, sample in enumerate(samples):
        loss, size, log = task.train_step(sample, model, crit, opt or FakeOptimizer(), update_num=10 + i, **kw)
        assert model.num_updates == 10 + i and size == sample["ntokens"]
        losses.append(loss.item())
    return losses


def test_training_carries_the_state_across_windows(data):
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    dec = model.decoder
    losses = _train_epoch(task, model, crit)
    rows = ref_rows(_flat(TRAIN), 3, False)
    assert sum(losses) == pytest.approx(ref_nll(dec, rows), rel=1e-12)  # the windows = the rows read at once
    assert dec.initial[0] is None and len(dec.initial) == 4
    for i in range(1, 4):
        init, prev = _tensors(dec.initial[i]), _tensors(dec.final[i - 1])
        assert len(init) == 3 and all(p.grad_fn is not None for p in prev)
        assert all(a.grad_fn is None and not a.requires_grad and torch.equal(a, b.detach()) for a, b in zip(init, prev))
    grads = [p.grad.clone() for p in model.parameters()]
    assert all(g.abs().sum() > 0 for g in grads)
    # the next epoch starts from zeros again
    dec.initial.clear()
    assert _train_epoch(task, model, crit, epoch=2) == pytest.approx(losses, rel=1e-12)
    assert dec.initial[0] is None and dec.initial[1] is not None


def test_dummy_batch_is_ignored(data):
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    dec = model.decoder
    samples = batches(task, "train")
    task.train_step(samples[0], model, crit, FakeOptimizer(), update_num=0)
    model.zero_grad()
    loss, _, _ = task.train_step(samples[1], model, crit, FakeOptimizer(), update_num=1, ignore_grad=True)
    assert loss.item() == 0 and "bptt_state" not in samples[1]["net_input"]
    assert dec.initial[1] is None and dec.final[1] is None
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    task.train_step(samples[1], model, crit, FakeOptimizer(), update_num=2)  # continues from window 0
    assert all(torch.equal(a, b.detach()) for a, b in zip(_tensors(dec.initial[2]), _tensors(dec.final[0])))


def test_reused_batch_object_as_dummy_runs_without_the_live_state(data):
    """fairseq's trainer keeps its first batch and reuses that object as the dummy batch: the state
    attached to it as a real batch must not reach the dummy run (which would advance the carry)."""
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    dec = model.decoder
    samples = batches(task, "train")
    task.train_step(samples[0], model, crit, FakeOptimizer(), update_num=0)
    task.train_step(samples[1], model, crit, FakeOptimizer(), update_num=1)
    assert "bptt_state" in samples[1]["net_input"]
    carried = [t.clone() for t in _tensors(dec.final[1])]
    task.train_step(samples[1], model, crit, FakeOptimizer(), update_num=2, ignore_grad=True)
    assert "bptt_state" not in samples[1]["net_input"]
    assert dec.initial[2] is None and dec.final[2] is None
    task.train_step(samples[2], model, crit, FakeOptimizer(), update_num=3)  # continues from window 1
    init = _tensors(dec.initial[3])
    assert len(init) == len(carried) and all(torch.equal(a, b.detach()) for a, b in zip(init, carried))


def test_no_carry_state_drops_a_state_attached_before(data):
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    samples = batches(task, "train")
    task.train_step(samples[0], model, crit, FakeOptimizer(), update_num=0)
    assert "bptt_state" in samples[0]["net_input"]
    task.cfg.no_carry_state = True
    task.train_step(samples[0], model, crit, FakeOptimizer(), update_num=1)
    assert "bptt_state" not in samples[0]["net_input"] and model.decoder.initial[1] is None


def test_validation_and_evaluation_predict_every_token_once(data):
    task = make_task(data, batch_size_valid=2)
    model, crit = stateful_lm(), NLL()
    task.load_dataset("valid")
    for _ in range(2):  # a second pass starts from zeros again
        total = ntok = 0
        for sample in batches(task, "valid"):
            loss, size, log = task.valid_step(sample, model, crit)
            total, ntok = total + loss.item(), ntok + size
        assert ntok == len(_flat(VALID)) - 1
        assert total == pytest.approx(ref_nll(model.decoder, ref_rows(_flat(VALID), 2, True)), rel=1e-12)
    # one row: the whole split read once
    task = make_task(data, batch_size_valid=1)
    task.load_dataset("valid")
    total = sum(task.valid_step(s, model, crit)[0].item() for s in batches(task, "valid"))
    assert total == pytest.approx(ref_nll(model.decoder, [_flat(VALID)]), rel=1e-12)


def _eval_nll(task, model, loader):
    total = 0.0
    for sample in loader:
        with torch.no_grad():
            logits, _ = model(**sample["net_input"])
        real = sample["target"].ne(PAD)
        nll = -F.log_softmax(logits, -1).gather(-1, sample["target"].unsqueeze(-1)).squeeze(-1)
        total += nll[real].sum().item()
    return total


def test_eval_lm_dataloader(data, monkeypatch):
    import fairseq.models

    task = make_task(data, batch_size=3, batch_size_valid=2)
    model = stateful_lm()
    built = []

    def build_model(cfg, t, from_checkpoint=False):
        built.append((cfg, t, from_checkpoint))
        return model

    monkeypatch.setattr(fairseq.models, "build_model", build_model)
    model_cfg = types.SimpleNamespace(arch="toy")
    assert task.build_model(model_cfg) is model and task.build_model(model_cfg, from_checkpoint=True) is model
    assert built == [(model_cfg, task, False), (model_cfg, task, True)]
    task.load_dataset("valid")
    task.load_dataset("train")
    dec = model.decoder
    for split, bsz, rows in (("valid", None, 2), ("valid", 3, 3), ("valid", 2, 2), ("train", None, 3),
                             ("train", 1, 1)):
        loader = task.eval_lm_dataloader(task.dataset(split), batch_size=bsz, num_workers=0)
        stream = _flat(VALID if split == "valid" else TRAIN)
        windows = len(fixed_lengths(len(ref_rows(stream, rows, True)[0]) - 1, 4))
        assert len(loader) == windows and loader.n == 0
        dec.initial.clear()
        assert _eval_nll(task, model, loader) == pytest.approx(ref_nll(dec, ref_rows(stream, rows, True)), rel=1e-12)
        assert len(dec.initial) == windows and dec.initial[0] is None and all(s is not None for s in dec.initial[1:])
    # data parallel: shard 1 of 2 x 2 rows
    loader = task.eval_lm_dataloader(task.dataset("valid"), batch_size=2, num_shards=2, shard_id=1,
                                    num_workers=0)
    assert _eval_nll(task, model, loader) == pytest.approx(
        ref_nll(dec, ref_rows(_flat(VALID), 4, True)[2:]), rel=1e-12)
    for window in (1, 5):
        with pytest.raises(ValueError) as err:
            task.eval_lm_dataloader(task.dataset("valid"), context_window=window)
        assert str(err.value) == ("--context-window: stateful_language_modeling carries the recurrent state across "
                                  "windows already; leave --context-window at 0")
    task.eval_lm_dataloader(task.dataset("valid"), context_window=0, num_workers=0)


def test_eval_lm_dataloader_uses_an_evaluation_dataset_as_it_is(data, monkeypatch):
    """A dataset already in the evaluation layout with the rows asked for is not rebuilt (its windows
    are kept); the loader options reach the batch iterator."""
    task = make_task(data)
    stream = torch.tensor(_flat(VALID))
    ds = StatefulBPTTDataset(stream, 2, 4, PAD, "valid", shard_id=1, num_shards=2, predict_all=True,
                             window_lengths=[3, 1, 4])  # 31 targets over 4 rows: 8 each (7 + a pad)
    calls = []
    get_batch_iterator = task.get_batch_iterator

    def spy(dataset, **kw):
        calls.append(kw)
        return get_batch_iterator(dataset, **kw)

    monkeypatch.setattr(task, "get_batch_iterator", spy)
    for bsz in (None, 2):
        got = list(task.eval_lm_dataloader(ds, batch_size=bsz, num_shards=2, shard_id=1, num_workers=0,
                                           data_buffer_size=3))
        assert [b["net_input"]["src_tokens"].size(1) for b in got] == [3, 1, 4]
        rows = ref_rows(stream.tolist(), 4, True)[2:]
        assert_long(torch.cat([b["net_input"]["src_tokens"] for b in got], 1), [r[:-1] for r in rows])
    assert calls == [dict(num_shards=2, shard_id=1, num_workers=0, data_buffer_size=3)] * 2


def test_each_stream_keeps_its_own_state(data):
    """Training, validation and evaluation interleaved: each continues from its own last window; a
    new pass (another batch size) starts from zeros."""
    task = make_task(data, batch_size=3, batch_size_valid=3)
    model, crit = stateful_lm(), NLL()
    dec = model.decoder
    train, valid = batches(task, "train"), batches(task, "valid")
    task.train_step(train[0], model, crit, FakeOptimizer(), 0)
    task.train_step(train[1], model, crit, FakeOptimizer(), 1)
    train_final = dec.final[-1]
    task.valid_step(valid[0], model, crit)
    valid_final = dec.final[-1]
    loader = iter(task.eval_lm_dataloader(task.dataset("valid"), num_workers=0))
    model(**next(loader)["net_input"])
    eval_final = dec.final[-1]
    task.valid_step(valid[1], model, crit)
    assert torch.equal(dec.initial[-1]["h"], valid_final["h"].detach())
    model(**next(loader)["net_input"])
    assert torch.equal(dec.initial[-1]["h"], eval_final["h"].detach())
    task.train_step(train[2], model, crit, FakeOptimizer(), 2)
    assert torch.equal(dec.initial[-1]["h"], train_final["h"].detach())
    # a new evaluation with another batch size starts from zeros
    loader = iter(task.eval_lm_dataloader(task.dataset("valid"), batch_size=2, num_workers=0))
    model(**next(loader)["net_input"])
    assert dec.initial[-1] is None


def test_samples_without_a_stream_pass_untouched(data):
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    task.valid_step(None, model, crit)
    assert crit.samples == [None]
    sample = {"net_input": {"src_tokens": torch.tensor([[4, 5, 6]]), "src_lengths": torch.tensor([3])},
              "target": torch.tensor([[5, 6, 7]]), "ntokens": 3}
    task.valid_step(sample, model, crit)
    assert set(sample["net_input"]) == {"src_tokens", "src_lengths"} and model.decoder.initial == [None]


def test_stateless_models_and_no_carry_state(data, caplog, monkeypatch):
    import fairseq.models

    warning = "model does not support bptt_state: every batch starts from a zero state"
    task = make_task(data)
    model, crit = ToyLM(StatelessToyDecoder()), NLL()
    with caplog.at_level(logging.WARNING, logger=TASK_LOG):
        losses = _train_epoch(task, model, crit)
        for sample in batches(task, "valid"):
            task.valid_step(sample, model, crit)
    assert [r.getMessage() for r in caplog.records if r.name == TASK_LOG] == [warning]  # once
    assert all("bptt_state" not in s["net_input"] for s in crit.samples)
    rows = ref_rows(_flat(TRAIN), 3, False)  # each window from zeros
    expected = sum(ref_nll(model.decoder, [r[s:s + 5] for r in rows]) for s in range(0, 14, 4))
    assert sum(losses) == pytest.approx(expected, rel=1e-12)
    # fairseq-eval-lm with a stateless model (an ensemble member) evaluates statelessly
    monkeypatch.setattr(fairseq.models, "build_model", lambda cfg, t, from_checkpoint=False: model)
    task.build_model(types.SimpleNamespace(arch="toy"))
    loader = task.eval_lm_dataloader(task.dataset("valid"), num_workers=0)
    assert all("bptt_state" not in s["net_input"] for s in loader)
    # --no-carry-state: a stateful model starts every batch from zeros, without a warning
    caplog.clear()
    task = make_task(data, no_carry_state=True)
    model = stateful_lm()
    with caplog.at_level(logging.WARNING, logger=TASK_LOG):
        _train_epoch(task, model, NLL())
        loader = task.eval_lm_dataloader(task.dataset("train"), num_workers=0)
        assert all("bptt_state" not in s["net_input"] for s in loader)
    assert model.decoder.initial == [None] * 4 and not [r for r in caplog.records if r.name == TASK_LOG]


# ------------------------------------------------------------------------------ the learning rate
def test_variable_bptt_rescales_each_update_lr(data):
    task = make_task(data, variable_bptt=True, tokens_per_sample=5)
    task.load_dataset("train")
    ds = task.dataset("train").rebatch(window_lengths=[7, 3, 4])
    window = lambda i: ds.collater([ds[i]])  # noqa: E731  (a fresh batch, as fairseq's iterators give)
    model, crit, opt = stateful_lm(), NLL(), FakeOptimizer(lr=0.5)
    task.train_step(window(0), model, crit, opt, 0)
    task.optimizer_step(opt, model, 0)
    task.train_step(window(1), model, crit, opt, 1)  # --update-freq 2: the mean of the two windows
    task.train_step(window(2), model, crit, opt, 1)
    task.optimizer_step(opt, model, 1)
    task.optimizer_step(opt, model, 2)  # no batch since the last update: the lr as it is
    task.train_step(window(0), model, crit, opt, 3, ignore_grad=True)  # a dummy batch does not count
    task.train_step(window(1), model, crit, opt, 3)
    task.optimizer_step(opt, model, 3)
    assert opt.lr_at_step == pytest.approx([0.5 * 7 / 5, 0.5 * (3 / 5 + 4 / 5) / 2, 0.5, 0.5 * 3 / 5], rel=1e-12)
    assert opt.lr == 0.5
    failing = FakeOptimizer(lr=0.5, fail=True)
    task.train_step(window(2), model, crit, failing, 4)
    with pytest.raises(RuntimeError, match="step failed"):
        task.optimizer_step(failing, model, 4)
    assert failing.lr_at_step == [pytest.approx(0.4)] and failing.lr == 0.5  # restored
    # fixed windows (or a configuration from before --variable-bptt): the lr untouched
    for task in (make_task(data, tokens_per_sample=5),
                 make_task(data, tokens_per_sample=5, drop=("variable_bptt", "bptt_std", "bptt_full_prob",
                                                            "bptt_min_len", "bptt_max_extra"))):
        opt = FakeOptimizer(lr=0.5)
        task.train_step(window(0), model, crit, opt, 0)
        task.optimizer_step(opt, model, 0)
        assert opt.lr_at_step == [0.5] and opt.lr == 0.5


# ------------------------------------------------------------------------------ NT-ASGD
def test_the_task_drives_nt_asgd(data, caplog):
    task = make_task(data)
    model, crit = stateful_lm(), NLL()
    params = list(model.parameters())
    nt = NTASGD(params, lr=0.1, nonmono=1)
    opt = FakeOptimizer(inner=nt)
    samples = batches(task, "train")
    task.train_step(samples[0], model, crit, opt, 0)
    assert nt.driven
    task.optimizer_step(opt, model, 0)  # NTASGD refuses to step unless driven
    assert nt.num_steps == 1
    for loss in (5.0, 4.0):
        task.begin_valid_epoch(1, model)
        task.post_validate(model, {"loss": loss}, None)
    assert not nt.averaging and nt.logs == [5.0, 4.0]
    task.begin_valid_epoch(2, model)
    with caplog.at_level(logging.INFO, logger=TASK_LOG):
        task.post_validate(model, {"loss": 6.0}, None)  # worse than the best before the last check
        task.post_validate(model, {"loss": 7.0}, None)  # a second subset: not a check
    assert [r.getMessage() for r in caplog.records if r.name == TASK_LOG] == [
        "NT-ASGD: loss 6.0 is worse than the best before the last 1 checks; averaging the weights from now on"]
    assert nt.averaging and nt.logs == [5.0, 4.0, 6.0]
    model.zero_grad()
    task.train_step(samples[1], model, crit, opt, 1)
    task.optimizer_step(opt, model, 1)
    iterate = [p.detach().clone() for p in params]
    ax = [a.clone() for a in nt.averaged_parameters()]
    assert not all(torch.equal(a, w) for a, w in zip(ax, iterate))
    task.begin_valid_epoch(3, model)  # validation runs with the average
    assert all(torch.equal(p.detach(), a) for p, a in zip(params, ax))
    seen = []
    model.decoder.register_forward_pre_hook(lambda m, a: seen.append([p.detach().clone() for p in params]))
    task.train_step(samples[2], model, crit, opt, 2)  # training continues the SGD iterate
    assert all(torch.equal(s, w) for s, w in zip(seen[0], iterate))
