"""Stateful truncated-BPTT LM task: windows, state carried across batches == whole stream at once,
fairseq-eval-lm perplexity == the same number, ensembles keep one state per model; the state each
training batch of the real parallel-cell LM starts from (the previous window's, detached; none after
a dummy batch or with --no-carry-state).  The task in process: tests/test_stateful_language_modeling_task.py."""
import logging
import math

import pytest
import torch
import torch.nn.functional as F

import fairseq_local  # noqa: F401
from contract_lib import REPO, make_lm_data, seed_all
from fairseq import checkpoint_utils, options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset
from fairseq_local.modules.fast_path import FastPathMixin
from fairseq_local.tasks.stateful_language_modeling import GRAPHS_RUN_EAGERLY, BPTTState, supports_bptt_state

from fairseq_local_repro.analysis import parallel_cells_ensemble as ensemble_cli

USER_DIR = str(fairseq_local.__path__[0])
TINY = ["--decoder-embed-dim", "6", "--decoder-hidden-size", "6", "--wide", "3", "--decoder-layers", "2",
        "--init-scale", "0.8"]  # large weights: the carried state matters


def test_windows_are_contiguous_rows_of_the_stream():
    stream = torch.arange(3 * 10 + 2)  # 2 tokens trimmed
    ds = StatefulBPTTDataset(stream, bsz=3, bptt=4, pad=1, name="x")
    assert len(ds) == 3 and list(ds.sizes) == [4, 4, 1]  # rows of 10 -> 9 predictions per row
    srcs, tgts = zip(*[ds[i][1:] for i in range(len(ds))])
    src, tgt = torch.cat(srcs, 1), torch.cat(tgts, 1)
    rows = stream[:30].view(3, 10)
    assert torch.equal(src, rows[:, :-1]) and torch.equal(tgt, rows[:, 1:])
    batch = ds.collater([ds[1]])
    assert batch["bptt_window"] == 1 and batch["ntokens"] == 12
    # data parallel: shard s takes rows [s*bsz, (s+1)*bsz) of the global batch
    shard = ds.rebatch(bsz=1, shard_id=2, num_shards=3)
    assert torch.equal(shard.rows, rows[2:3])
    with pytest.raises(ValueError, match="split x: 32 tokens cannot fill 20 streams"):
        StatefulBPTTDataset(stream, bsz=20, bptt=4, pad=1, name="x")


@pytest.mark.parametrize("n,bsz,bptt,shards", [(32, 3, 4, 1), (23, 3, 4, 1), (50, 4, 3, 2), (41, 1, 6, 1),
                                               (17, 4, 35, 1), (9, 2, 2, 4)])
def test_evaluation_rows_predict_every_token_once(n, bsz, bptt, shards):
    """Validation / eval-lm layout: over all windows (and shards), the real targets are tokens
    1..n-1 of the stream, each once, each predicted from the token before it; ntokens counts them."""
    stream = torch.arange(5, 5 + n)  # unique values above pad=1: a target's predecessor is value - 1
    windows, ntokens = [], 0
    for shard in range(shards):
        ds = StatefulBPTTDataset(stream, bsz=bsz, bptt=bptt, pad=1, name="valid", shard_id=shard,
                                 num_shards=shards, predict_all=True)
        assert len(ds) == len(StatefulBPTTDataset(stream, bsz, bptt, 1, "valid", 0, shards, predict_all=True))
        batches = [ds.collater([ds[i]]) for i in range(len(ds))]
        windows.append((torch.cat([b["net_input"]["src_tokens"] for b in batches], 1),
                        torch.cat([b["target"] for b in batches], 1)))
        ntokens += sum(b["ntokens"] for b in batches)
        assert [b["bptt_window"] for b in batches] == list(range(len(ds)))
    src, tgt = (torch.cat(t, 0) for t in zip(*windows))
    real = tgt.ne(1)
    assert torch.equal(tgt[real].sort().values, stream[1:]) and ntokens == n - 1
    assert torch.equal(src[real], tgt[real] - 1)  # every target (a row's first too) follows its token
    assert src.ne(1).all()  # padding only ever as a (last) target
    # rows are contiguous pieces of the stream, each window continuing the previous one
    assert torch.equal(src[:, 1:][real[:, :-1]], tgt[:, :-1][real[:, :-1]])
    with pytest.raises(ValueError, match=f"split valid: {n} tokens cannot fill {n} streams"):
        StatefulBPTTDataset(stream, bsz=n, bptt=bptt, pad=1, name="valid", predict_all=True)


def test_which_models_take_the_carried_state():
    from fairseq.models import FairseqLanguageModel
    from fairseq.models.lstm import LSTMDecoder

    from fairseq_local.modules.recurrent_lm_decoder import RecurrentLMDecoder

    def lm_with(decoder_cls, flag=None):
        model = object.__new__(FairseqLanguageModel)
        torch.nn.Module.__init__(model)
        object.__setattr__(model, "decoder", object.__new__(decoder_cls))
        if flag is not None:
            object.__setattr__(model, "supports_bptt_state", flag)
        return model

    assert supports_bptt_state(lm_with(RecurrentLMDecoder))  # its forward takes bptt_state
    assert not supports_bptt_state(lm_with(LSTMDecoder))  # fairseq's lstm_lm decoder does not
    assert not supports_bptt_state(lm_with(RecurrentLMDecoder, flag=False))


def test_bptt_state_detach_and_per_owner():
    carry, a, b = BPTTState(), object(), object()
    w = torch.ones(2, requires_grad=True)
    carry.set(a, [(w * 2, w * 3)])
    carry.set(b, [w])
    carry.detach_()
    assert not carry.get(a)[0][0].requires_grad and carry.get(b)[0] is not None
    carry.reset()
    assert carry.get(a) is None and len(carry) == 0


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("slm")
    data_dir, _ = make_lm_data(tmp, n_train=60, n_valid=30)
    return data_dir


def _setup(data_dir, save_dir, extra=()):
    argv = [str(data_dir), "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
            "--arch", "parallel_lstm_lm", *TINY, "--tokens-per-sample", "5", "--batch-size", "3",
            "--optimizer", "sgd", "--lr", "1", "--clip-norm", "5", "--max-update", "4", "--cpu",
            "--save-dir", str(save_dir), "--no-progress-bar", "--num-workers", "0", "--seed", "1", *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    seed_all(1)
    model = task.build_model(cfg.model).double()
    return cfg, task, model, task.build_criterion(cfg.criterion)


def test_cuda_graphs_run_eagerly_with_one_line(lm_data, tmp_path, caplog):
    """The task batches its own windows, outside the shape plan: ``--rnn-impl cuda-graphs`` runs the
    recurrent loops eagerly and says so in one line; another ``--rnn-impl`` is left as it is."""
    for impl, want in (("cuda-graphs", "eager"), ("compiled", "compiled")):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            _, _, model, _ = _setup(lm_data, tmp_path / impl, ["--rnn-impl", impl])
        impls = {m.rnn_impl for m in model.modules() if isinstance(m, FastPathMixin)}
        assert impls == {want}, (impl, impls)
        said = [r.getMessage() for r in caplog.records if "--rnn-impl" in r.getMessage()]
        assert said == ([GRAPHS_RUN_EAGERLY] if impl == "cuda-graphs" else []), said
    assert "\n" not in GRAPHS_RUN_EAGERLY and "stateful_language_modeling" in GRAPHS_RUN_EAGERLY


def _stream_nll(model, dataset, bsz=None):
    """Sum of -log p and count of the targets of the split's evaluation rows (``bsz`` of them; the
    whole stream as one row for 1), each row run in one pass from a zero state."""
    rows = dataset.rebatch(bsz=bsz, predict_all=True).rows
    with torch.no_grad():
        logits = model(rows[:, :-1])[0]
    lprobs = F.log_softmax(logits.double(), dim=-1)
    tgt = rows[:, 1:]
    real = tgt.ne(dataset.pad)
    nll = -lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
    return nll[real].sum().item(), int(real.sum())


def _whole_stream_nll(model, stream):
    """The per-token reference: the model over the whole split in one pass, batch size 1."""
    with torch.no_grad():
        logits = model(stream[:-1].unsqueeze(0))[0]
    lprobs = F.log_softmax(logits.double(), dim=-1)[0]
    return -lprobs.gather(-1, stream[1:].unsqueeze(-1)).sum().item(), stream.numel() - 1


def _valid_loss(task, model, criterion):
    task.load_dataset("valid")
    itr = task.get_batch_iterator(task.dataset("valid")).next_epoch_itr(shuffle=False)
    total, ntok = 0.0, 0
    model.eval()
    for sample in itr:
        sample = utils.apply_to_sample(lambda t: t, sample)
        loss, size, log = task.valid_step(sample, model, criterion)
        total, ntok = total + log["loss"], ntok + log["ntokens"]
    return total, ntok  # fairseq's cross_entropy logs the summed nll in base e


def test_carried_state_equals_whole_stream(lm_data, tmp_path):
    cfg, task, model, criterion = _setup(lm_data, tmp_path)
    total, ntok = _valid_loss(task, model, criterion)
    ref, ref_n = _stream_nll(model, task.dataset("valid"))
    n = task.dataset("valid").stream.numel()
    assert (n - 1) % 3 and (n - 1) % 15 and len(task.dataset("valid")) > 3  # a tail to lose, B=3, T=5
    assert ntok == ref_n == n - 1  # validation scores every token after the first, once
    # fairseq's log_softmax runs in float32, hence the 1e-6 relative tolerance
    assert abs(total - ref) < 1e-6 * ref, (total, ref)
    # a second pass starts again from zero state (reset at window 0) and gives the same number
    assert abs(_valid_loss(task, model, criterion)[0] - ref) < 1e-6 * ref
    # with one row, validation is the whole stream read once
    _, task1, model1, crit1 = _setup(lm_data, tmp_path, ["--batch-size-valid", "1"])
    model1.load_state_dict(model.state_dict())
    total1, ntok1 = _valid_loss(task1, model1, crit1)
    ref1, _ = _whole_stream_nll(model, task.dataset("valid").stream)
    assert ntok1 == n - 1 and abs(total1 - ref1) < 1e-6 * ref1, (total1, ref1)
    # without carrying the state the numbers differ: the test can fail
    cfg2, task2, model2, crit2 = _setup(lm_data, tmp_path, ["--no-carry-state"])
    model2.load_state_dict(model.state_dict())
    assert abs(_valid_loss(task2, model2, crit2)[0] - ref) > 1e-4 * ref  # 100x the float32 noise


def test_training_carries_state_and_eval_lm_matches(lm_data, tmp_path, caplog):
    from fairseq import distributed_utils
    from fairseq_cli import eval_lm
    from fairseq_cli import train as train_cli

    save = tmp_path / "ckpt"
    argv = [str(lm_data), "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
            "--arch", "parallel_lstm_lm", *TINY, "--tokens-per-sample", "5", "--batch-size", "3",
            "--optimizer", "sgd", "--lr", "1", "--clip-norm", "5", "--max-update", "6", "--cpu", "--save-interval-updates", "3",
            "--save-dir", str(save), "--no-progress-bar", "--num-workers", "0", "--seed", "1"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    ckpt = str(save / "checkpoint_last.pt")

    models, _, task = checkpoint_utils.load_model_ensemble_and_task([ckpt])
    model = models[0].eval()
    task.load_dataset("valid")
    ref, n = _stream_nll(model, task.dataset("valid"), bsz=3)
    expected_ppl = math.exp(ref / n)
    stream = task.dataset("valid").stream
    assert n == stream.numel() - 1 and n % 3 and n % 15  # not a multiple of B or B*T

    def run(path, *extra, ensemble=False):
        argv = [str(lm_data), "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
                "--path", path, "--cpu", "--gen-subset", "valid", "--tokens-per-sample", "5",
                "--batch-size", "3", "--no-progress-bar", "--num-workers", "0", *extra]
        if ensemble:
            return ensemble_cli.main(argv)["perplexity"]
        parsed = options.parse_args_and_arch(options.get_eval_lm_parser(), argv)
        return eval_lm.main(convert_namespace_to_omegaconf(parsed))["perplexity"]

    import logging
    import re

    def evaluated(*args):  # fairseq-eval-lm's perplexity and its "Evaluated N tokens" count
        caplog.clear()
        with caplog.at_level(logging.INFO):
            ppl = run(*args)
        counts = re.findall(r"Evaluated ([0-9,]+) tokens", caplog.text)
        assert len(counts) == 1, caplog.text[-2000:]
        return ppl, int(counts[0].replace(",", ""))

    ppl, count = evaluated(ckpt)
    assert count == n and abs(ppl - expected_ppl) < 1e-3 * expected_ppl, (ppl, expected_ppl)
    # batch size 1: the per-token perplexity of the whole stream run through the model at once
    whole, n1 = _whole_stream_nll(model, stream)
    ppl1, count1 = evaluated(ckpt, "--batch-size", "1")
    assert count1 == n1 == n and abs(ppl1 - math.exp(whole / n1)) < 1e-3 * ppl1, (ppl1, math.exp(whole / n1))
    # the training split too (its training layout drops a tail; evaluation does not)
    task.load_dataset("train")
    train_n = task.dataset("train").stream.numel() - 1
    assert evaluated(ckpt, "--gen-subset", "train")[1] == train_n and train_n % 3
    # model averaging: a two-member ensemble of the same checkpoint keeps one state per member
    # (same perplexity); of two different checkpoints, a perplexity of its own
    assert abs(run(f"{ckpt}:{ckpt}", ensemble=True) - expected_ppl) < 1e-3 * expected_ppl
    other = str(save / "checkpoint_1_3.pt")
    mixed = run(f"{ckpt}:{other}", ensemble=True)
    assert abs(mixed - expected_ppl) > 1e-3 * expected_ppl and abs(mixed - run(other)) > 1e-3 * mixed
    with pytest.raises(ValueError, match="--context-window"):
        run(ckpt, "--context-window", "2")


# ------------------------------------------------------------------------------------------------
# loss normalisation of the stateful-task YAMLs against their papers
# ------------------------------------------------------------------------------------------------
# config -> (normaliser of the loss summed over the B x T tokens of a BPTT window, tiny overrides)
PAPER_NORMALISER = {
    # Zaremba et al. (2014), followed by the parallel-cells paper: sum over the 35 steps, mean over B
    "parallel_cells/table2_ptb_wide3": ("rows", ["model.decoder_embed_dim=8", "model.decoder_hidden_size=12",
                                                 "model.dropout=0"]),
    # AWD-LSTM (Merity et al. 2018), followed by MC-RNN's Table 4: mean over all B x T tokens, plus
    # AR and TAR; the first window's length is the task's first random draw
    "mc_rnn/table4_mc_rnn_ptb": ("tokens", ["model.decoder_embed_dim=8", "model.decoder_hidden_size=8",
                                            "model.dropout=0", "model.dropout_in=0", "model.dropout_hidden=0",
                                            "model.dropout_embed=0", "model.weight_dropout=0"]),
}


@pytest.mark.parametrize("config", sorted(PAPER_NORMALISER))
def test_yaml_gradient_norm_is_the_papers(config, lm_data, tmp_path):
    """One update of the YAML through fairseq-hydra-train: the gradient norm fairseq logs (and
    clips) equals the norm of the gradient of the paper's loss, computed here by hand from the same
    initial weights (lr 0 keeps them in the checkpoint) on the same first BPTT window."""
    import re

    from contract_lib import hydra_train

    normaliser, tiny = PAPER_NORMALISER[config]
    save = tmp_path / "ckpt"
    proc = hydra_train(REPO / "configs" / f"{config}.yaml", [
        f"task.data={lm_data}", f"common.user_dir={USER_DIR}", "common.cpu=true", "common.log_interval=1",
        "common.no_progress_bar=true", "optimization.max_update=1", "optimization.lr=[0.0]",
        "optimizer.lr=[0.0]", "optimization.stop_min_lr=-1", "dataset.batch_size=4",
        "dataset.batch_size_valid=4", "dataset.disable_validation=true", "dataset.num_workers=0",
        f"checkpoint.save_dir={save}", "distributed_training.distributed_world_size=1", *tiny,
    ], tmp_path)
    logged = [float(g) for g in re.findall(r"gnorm[ =]([0-9.]+)", proc.stdout + proc.stderr)]
    assert logged, "no gnorm in the training log"

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(save / "checkpoint_last.pt")], arg_overrides={"data": str(lm_data)})
    model = models[0].train()
    task.load_dataset("train")
    ds = task.dataset("train")
    awd = config.startswith("mc_rnn/table4_")  # AWD-LSTM: variable-length windows, AR / TAR
    assert bool(task.cfg.variable_bptt) == awd
    if awd:  # the first update's window is the first of epoch 1's random lengths
        ds = ds.rebatch(window_lengths=task.window_lengths(ds.targets_per_row, 1))
    sample = ds.collater([ds[0]])
    B, T = sample["target"].shape
    assert (B, T) == (4, int(ds.sizes[0])) and (T != task.cfg.tokens_per_sample) == awd
    src = sample["net_input"]["src_tokens"]
    out = model(src)  # no carried state: window 0 starts from zeros
    lprobs = model.get_normalized_probs(out, log_probs=True)
    loss_sum = -lprobs.gather(-1, sample["target"].unsqueeze(-1)).sum()
    loss = loss_sum / (B if normaliser == "rows" else B * T)
    if awd:  # + alpha mean(h^2) + beta mean((h_t - h_{t-1})^2), h: the last layer (no dropout here)
        h = model(src, features_only=True)[0]
        loss = loss + 2.0 * h.pow(2).mean() + 1.0 * (h[:, 1:] - h[:, :-1]).pow(2).mean()
    loss.backward()
    ref = torch.norm(torch.stack([p.grad.norm() for p in model.parameters() if p.grad is not None])).item()
    assert abs(logged[0] - ref) < 1e-3 + 1e-3 * ref, (logged[0], ref, normaliser)


# ================================================================================================
# training-time state carrying with the real parallel-cell LM (fairseq's CLI configuration)
# ================================================================================================
class _Backward:
    """The one optimizer method FairseqTask.train_step calls."""

    def backward(self, loss):
        loss.backward()


def _tensors(state):
    if torch.is_tensor(state):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _tensors(v)]
    if isinstance(state, (list, tuple)):
        return [t for v in state for t in _tensors(v)]
    return []


class _Recorder:
    """The state the decoder starts each forward from, and the one it leaves in the carry."""

    def __init__(self, decoder):
        self.decoder, self.initial, self.final = decoder, [], []
        decoder.register_forward_pre_hook(self._pre, with_kwargs=True)
        decoder.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module, args, kwargs):
        carry = kwargs.get("bptt_state")
        self.initial.append(None if carry is None else carry.get(module))

    def _post(self, module, args, kwargs, out):
        carry = kwargs.get("bptt_state")
        self.final.append(None if carry is None else carry.get(module))


def _train_windows(lm_data, tmp_path, extra=(), ignore=()):
    cfg, task, model, criterion = _setup(lm_data, tmp_path, extra)
    task.load_dataset("train")
    samples = list(task.get_batch_iterator(task.dataset("train")).next_epoch_itr(shuffle=False))
    assert len(samples) >= 3 and [s["bptt_window"] for s in samples[:3]] == [0, 1, 2]
    rec = _Recorder(model.decoder)
    for i, sample in enumerate(samples[:3] + samples[:1]):  # the 4th: window 0 of the next epoch
        task.train_step(sample, model, criterion, _Backward(), update_num=i, ignore_grad=i in ignore)
    return rec


def test_training_batch_starts_from_previous_final_state_detached(lm_data, tmp_path):
    rec = _train_windows(lm_data, tmp_path)
    assert len(rec.initial) == 4
    assert rec.initial[0] is None and rec.initial[3] is None  # window 0: zero state, every epoch
    for i in (1, 2):
        init, prev_final = _tensors(rec.initial[i]), _tensors(rec.final[i - 1])
        assert init and len(init) == len(prev_final)
        for a, b in zip(init, prev_final):
            assert b.grad_fn is not None  # the final state was part of the previous graph ...
            assert a.grad_fn is None and not a.requires_grad  # ... the next batch gets it detached
            assert torch.equal(a, b.detach())
        assert max(t.abs().max().item() for t in init) > 0


def test_dummy_batch_neither_reads_nor_advances_the_state(lm_data, tmp_path):
    rec = _train_windows(lm_data, tmp_path, ignore=(1,))
    assert rec.initial[1] is None and rec.final[1] is None  # the dummy batch ran without the carry
    init2, final0 = _tensors(rec.initial[2]), _tensors(rec.final[0])
    assert init2 and all(torch.equal(a, b.detach()) for a, b in zip(init2, final0))


def test_no_carry_state_starts_every_training_batch_from_zero(lm_data, tmp_path):
    rec = _train_windows(lm_data, tmp_path, extra=["--no-carry-state"])
    assert rec.initial == [None] * 4 and rec.final == [None] * 4
