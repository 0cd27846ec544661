"""AWD-LSTM's training procedures (Merity, Keskar and Socher, ICLR 2018), used by the MC-RNN
paper's Table 4 rows: NT-ASGD (``--optimizer nt_asgd``), AR/TAR (``--criterion
ar_tar_cross_entropy``) and variable-length BPTT (``--variable-bptt`` of
``stateful_language_modeling``), against hand-computed values and float64 references.
DropConnect on W_hh is tested in tests/test_multi_channel_rnn.py (one mask per forward
call, i.e. the same at every time step, and none in evaluation)."""
import io
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fairseq_local  # noqa: F401
from contract_lib import make_lm_data, seed_all
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_local.data.stateful_bptt_dataset import StatefulBPTTDataset, variable_bptt_lengths
from fairseq_local_core.errors import ConfigError
from fairseq_local.optim.nt_asgd import NTASGD

USER_DIR = str(fairseq_local.__path__[0])
TINY_MC = ["--arch", "mc_rnn_lm", "--decoder-embed-dim", "6", "--decoder-hidden-size", "8",
           "--decoder-layers", "2", "--mc-channels", "2"]


# ------------------------------------------------------------------------------------------------
# NT-ASGD (Algorithm 1)
# ------------------------------------------------------------------------------------------------
def test_nt_asgd_trigger_on_a_scripted_metric_sequence():
    opt = NTASGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, nonmono=3)
    seq = [10.0, 8.0, 7.0, 7.5, 7.4, 7.3, 7.2, 6.0]
    fired = [opt.check(v) for v in seq]
    # check 3 (7.5): only 3 logs, not more than n. Check 4: 7.4 vs min(logs[:-3]) = min(10) -> no;
    # check 5: 7.3 vs min(10, 8) -> no; check 6: 7.2 vs min(10, 8, 7) = 7 -> worse: averaging starts.
    # (Reading "worse than the best of the last n checks" instead would fire at check 3: 7.5 > 7.)
    assert fired == [False] * 6 + [True, False]
    assert opt.logs == seq[:7] and opt.trigger_step == 0 and opt.averaging  # no more checks after it


def _scripted_steps(opt, p, grads):
    for g in grads:
        p.grad = torch.tensor(g, dtype=p.dtype)
        opt.step()


def test_nt_asgd_averages_the_iterates_from_the_trigger_on():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = NTASGD([p], lr=0.5, nonmono=1)
    opt.driven = True
    _scripted_steps(opt, p, [[1.0, 0.0], [0.0, 2.0]])  # w1 = (0.5, -2), w2 = (0.5, -3)
    assert opt.averaged_parameters() is None
    opt.check(5.0), opt.check(4.0)
    assert opt.check(6.0) and opt.trigger_step == 2  # 6 > min(logs[:-1]) = 5
    _scripted_steps(opt, p, [[2.0, 2.0], [-1.0, 0.0], [0.0, -4.0]])  # w3 = (-.5, -4), w4 = (0, -4), w5 = (0, -2)
    assert torch.equal(p.detach(), torch.tensor([0.0, -2.0], dtype=torch.float64))
    ax = torch.tensor([(0.5 - 0.5 + 0 + 0) / 4, (-3 - 4 - 4 - 2) / 4], dtype=torch.float64)  # mean(w2..w5)
    assert torch.allclose(opt.averaged_parameters()[0], ax, atol=1e-15) and opt.num_averaged == 4
    # evaluation swaps the average in and the SGD iterate back out
    assert opt.swap_in_average() and torch.equal(p.detach(), opt.averaged_parameters()[0])
    with pytest.raises(RuntimeError, match="averaged weights are in the model"):
        opt.step()
    # the state (swapped, with the SGD iterate kept) survives a weights_only checkpoint round trip
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    buf.seek(0)
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = NTASGD([q], lr=0.5, nonmono=1)
    opt2.load_state_dict(torch.load(buf, weights_only=True))
    assert (opt2.logs, opt2.trigger_step, opt2.num_steps, opt2.num_averaged, opt2.swapped) == \
        ([5.0, 4.0, 6.0], 2, 5, 4, True)
    for o, param in ((opt, p), (opt2, q)):
        assert o.swap_out_average() and torch.equal(param.detach(), torch.tensor([0.0, -2.0], dtype=torch.float64))
        o.driven = True
        _scripted_steps(o, param, [[1.0, 1.0]])  # w6 = (-.5, -2.5): ax = mean(w2..w6)
    w6 = torch.tensor([-0.5, -2.5], dtype=torch.float64)
    for o in (opt, opt2):
        assert torch.allclose(o.averaged_parameters()[0], (ax * 4 + w6) / 5)


def test_nt_asgd_weight_decay_and_refusals():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=torch.float64))
    opt = NTASGD([p], lr=0.5, weight_decay=0.1)
    with pytest.raises(ConfigError, match="--optimizer nt_asgd: this task does not drive"):
        _scripted_steps(opt, p, [[1.0, 0.0]])
    opt.driven = True
    _scripted_steps(opt, p, [[1.0, 0.0]])  # w - lr (g + wd w)
    assert torch.allclose(p.detach(), torch.tensor([1 - 0.5 * 1.1, -2 - 0.5 * -0.2], dtype=torch.float64))
    with pytest.raises(ConfigError, match="--nt-asgd-nonmono must be an integer >= 1"):
        NTASGD([p], lr=1.0, nonmono=0)


@pytest.fixture(scope="module")
def lm_data(tmp_path_factory):
    data_dir, _ = make_lm_data(tmp_path_factory.mktemp("awd"), n_train=60, n_valid=30)
    return data_dir


def _train_argv(data, save, *extra):
    return [str(data), "--user-dir", USER_DIR, "--task", "stateful_language_modeling", *TINY_MC,
            "--tokens-per-sample", "5", "--batch-size", "3", "--clip-norm", "5", "--cpu",
            "--save-dir", str(save), "--no-progress-bar", "--num-workers", "0", "--seed", "1",
            "--log-format", "simple", *extra]


def test_fairseq_train_drives_nt_asgd(lm_data, tmp_path, caplog):
    """fairseq-train with --optimizer nt_asgd: the trigger fires at the first validation whose loss is
    worse than the best before the last one (n = 1), later validations and the checkpoint hold the
    average of the iterates, and the optimiser state keeps the SGD iterate."""
    save = tmp_path / "ckpt"
    args = _nt_asgd_train(lm_data, save, epochs=4, caplog=caplog)
    losses = [float(v) for v in re.findall(r"valid on 'valid' subset \| loss ([0-9.]+)", caplog.text)]
    assert len(losses) == 4
    # Algorithm 1 by hand on the logged losses: the first check t > 1 with v_t > min(v_1..v_{t-1})
    check = next(t for t in range(2, 4) if losses[t] > min(losses[:t - 1]))
    assert check == 2, losses  # these settings trigger at the third epoch: one averaged epoch follows
    assert caplog.text.count("averaging the weights from now on") == 1
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    opt = state["last_optimizer_state"]
    updates = state["optimizer_history"][-1]["num_updates"]
    per_epoch = updates // 4
    assert opt["nt_asgd"]["trigger_step"] == (check + 1) * per_epoch and opt["nt_asgd"]["swapped"]
    assert opt["nt_asgd"]["num_averaged"] == updates - (check + 1) * per_epoch + 1
    assert opt["nt_asgd"]["logs"] == pytest.approx(losses[:check + 1], abs=1e-3)  # the logged metric
    names = [n for n, _ in sorted(state["model"].items())]
    params = list(state["model"].values())
    per_param = [opt["state"][i] for i in sorted(opt["state"])]
    assert len(per_param) == len(params) == len(names)
    # the checkpoint's model is the average; the SGD iterate is kept beside it and differs
    model_params = _model_parameter_order(args, state)
    for (name, tensor), st in zip(model_params, per_param):
        assert torch.equal(tensor, st["ax"]), name
    assert any(not torch.equal(st["live"], st["ax"]) for st in per_param)


def _nt_asgd_train(data, save, epochs, caplog=None):
    import contextlib
    import logging

    from fairseq import distributed_utils
    from fairseq_cli import train as train_cli

    args = options.parse_args_and_arch(options.get_training_parser(), _train_argv(
        data, save, "--optimizer", "nt_asgd", "--nt-asgd-nonmono", "1", "--lr", "1",
        "--max-epoch", str(epochs), "--no-epoch-checkpoints"))
    with caplog.at_level(logging.INFO) if caplog is not None else contextlib.nullcontext():
        distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    return args


def test_nt_asgd_resumes_the_sgd_iterate(lm_data, tmp_path):
    """Four epochs (the last one averaged, its checkpoint holding the average) resumed for a fifth
    equal five epochs in one run: the resumed run continues from the SGD iterate, not the average."""
    _nt_asgd_train(lm_data, tmp_path / "resumed", epochs=4)
    _nt_asgd_train(lm_data, tmp_path / "resumed", epochs=5)
    _nt_asgd_train(lm_data, tmp_path / "straight", epochs=5)
    resumed, straight = (torch.load(tmp_path / d / "checkpoint_last.pt", map_location="cpu", weights_only=True)
                         for d in ("resumed", "straight"))
    assert resumed["last_optimizer_state"]["nt_asgd"] == straight["last_optimizer_state"]["nt_asgd"]
    assert resumed["last_optimizer_state"]["nt_asgd"]["trigger_step"] > 0
    for name, tensor in straight["model"].items():
        assert torch.allclose(resumed["model"][name], tensor, atol=1e-6, rtol=0), name
    for i, st in straight["last_optimizer_state"]["state"].items():
        for key in ("ax", "live"):
            assert torch.allclose(resumed["last_optimizer_state"]["state"][i][key], st[key], atol=1e-6, rtol=0)


def _model_parameter_order(args, state):
    """(name, tensor) of the checkpoint's model in ``model.parameters()`` order (the optimiser's)."""
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    return [(n, state["model"][n]) for n, _ in model.named_parameters()]


# ------------------------------------------------------------------------------------------------
# AR / TAR
# ------------------------------------------------------------------------------------------------
def _setup(data, save, *extra):
    args = options.parse_args_and_arch(options.get_training_parser(), _train_argv(data, save, *extra))
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    seed_all(1)
    model = task.build_model(cfg.model).double()
    return cfg, task, model


def test_ar_tar_against_a_float64_reference(lm_data, tmp_path):
    cfg, task, model = _setup(lm_data, tmp_path, "--criterion", "ar_tar_cross_entropy", "--ar-alpha", "2",
                              "--tar-beta", "1", "--optimizer", "sgd", "--lr", "1", "--dropout", "0.5",
                              "--dropout-in", "0", "--dropout-hidden", "0", "--dropout-embed", "0",
                              "--weight-dropout", "0")
    crit = task.build_criterion(cfg.criterion)
    pad, V = task.dictionary.pad(), len(task.dictionary)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(4, V, (3, 6), generator=g)
    tgt = torch.randint(4, V, (3, 6), generator=g)
    tgt[1, 4:] = pad  # a row ending in padding targets (the evaluation layout's)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((3,), 6)}, "target": tgt,
              "ntokens": int(tgt.ne(pad).sum()), "nsentences": 3}
    model.train()
    torch.manual_seed(11)
    loss, sample_size, log = crit(model, sample)
    # reference: the same dropout draw (the top dropout is the only random op), the undropped
    # output from evaluation mode (no other dropout is on), loops in float64
    torch.manual_seed(11)
    dropped = model(src, features_only=True)[0].detach()
    model.eval()
    raw = model(src, features_only=True)[0].detach()
    assert not torch.allclose(dropped, raw)  # the dropout acted: AR and TAR see different tensors
    logits = model.decoder.output_layer(dropped)
    real = tgt.ne(pad)
    B, T, C = dropped.shape
    ce = ar = tar = 0.0
    n_real = n_pairs = 0
    for b in range(B):
        for t in range(T):
            if real[b, t]:
                ce -= F.log_softmax(logits[b, t], -1)[tgt[b, t]].item()
                ar += sum(dropped[b, t, c].item() ** 2 for c in range(C))
                n_real += 1
                if t > 0 and real[b, t - 1]:
                    tar += sum((raw[b, t, c].item() - raw[b, t - 1, c].item()) ** 2 for c in range(C))
                    n_pairs += 1
    ar, tar = 2.0 * ar / (n_real * C), 1.0 * tar / (n_pairs * C)
    assert sample_size == n_real == sample["ntokens"]
    # the criterion adds ntokens x (AR + TAR) to the summed cross entropy, which it logs as the loss
    # (fairseq's log_softmax runs in float32: 1e-6 relative on the cross entropy)
    assert abs((loss - log["loss"]).item() - n_real * (ar + tar)) < 1e-12, (loss.item(), ce, ar, tar)
    assert abs(log["loss"].item() - ce) < 1e-6 * ce
    assert abs(log["ar"].item() - n_real * ar) < 1e-10 and abs(log["tar"].item() - n_real * tar) < 1e-10
    # evaluation: the plain cross entropy (of the undropped output)
    eval_loss, _, eval_log = crit(model, sample)
    eval_lp = F.log_softmax(model.decoder.output_layer(raw), -1)
    eval_ce = -eval_lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)[real].sum().item()
    assert abs(eval_loss.item() - eval_ce) < 1e-6 * eval_ce and "ar" not in eval_log


def test_ar_tar_refuses_a_model_without_its_outputs(lm_data, tmp_path):
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(lm_data), "--user-dir", USER_DIR, "--task", "stateful_language_modeling", "--arch", "parallel_lstm_lm",
        "--decoder-embed-dim", "6", "--decoder-hidden-size", "6", "--criterion", "ar_tar_cross_entropy",
        "--tokens-per-sample", "5", "--batch-size", "3", "--cpu", "--optimizer", "sgd", "--lr", "1"])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model, crit = task.build_model(cfg.model).train(), task.build_criterion(cfg.criterion)
    src = torch.full((2, 3), 5)
    sample = {"net_input": {"src_tokens": src, "src_lengths": torch.full((2,), 3)}, "target": src,
              "ntokens": 6, "nsentences": 2}
    with pytest.raises(ConfigError, match="ar_tar_cross_entropy: model ParallelLSTMLanguageModel does not expose"):
        crit(model, sample)


# ------------------------------------------------------------------------------------------------
# variable-length BPTT
# ------------------------------------------------------------------------------------------------
def test_variable_bptt_length_distribution():
    total = 2_000_003
    lengths = variable_bptt_lengths(total, 70, np.random.RandomState(0))
    assert lengths.sum() == total and lengths.min() >= 1
    body = lengths[:-1]  # the last window is cut to what is left
    assert body.min() >= 5 and body.max() <= 110
    # base 70 w.p. 0.95 else 35; int() of N(base, 5) truncates: E = 0.95 * 69.5 + 0.05 * 34.5 = 67.75
    assert abs(body.mean() - 67.75) < 0.2, body.mean()
    half = body < 52.5  # N(35, 5) lies below 52.5 and N(70, 5) above it, but for ~1e-4 of the draws
    assert abs(half.mean() - 0.05) < 0.005, half.mean()
    assert abs(body[~half].std() - 5.0) < 0.15 and abs(body[half].mean() - 34.5) < 0.4
    assert np.array_equal(lengths, variable_bptt_lengths(total, 70, np.random.RandomState(0)))
    # the longest window: 70 + 40 (a std large enough to reach it)
    wide = variable_bptt_lengths(100_000, 70, np.random.RandomState(1), std=40.0)
    assert wide[:-1].max() == 110 and wide[:-1].min() == 5


def test_dataset_with_window_lengths_covers_the_rows():
    stream = torch.arange(3 * 20)
    ds = StatefulBPTTDataset(stream, bsz=3, bptt=5, pad=1, name="train", window_lengths=[7, 5, 4, 3])
    assert len(ds) == 4 and list(ds.sizes) == [7, 5, 4, 3]
    src = torch.cat([ds[i][1] for i in range(4)], 1)
    tgt = torch.cat([ds[i][2] for i in range(4)], 1)
    rows = stream.view(3, 20)
    assert torch.equal(src, rows[:, :-1]) and torch.equal(tgt, rows[:, 1:])
    assert ds.collater([ds[1]])["ntokens"] == 15
    with pytest.raises(ValueError, match="window lengths must be >= 1 and sum to the 19 targets"):
        StatefulBPTTDataset(stream, bsz=3, bptt=5, pad=1, name="train", window_lengths=[7, 5, 4])


def test_variable_bptt_windows_and_lr_rescaling(lm_data, tmp_path):
    cfg, task, model = _setup(lm_data, tmp_path, "--variable-bptt", "--bptt-std", "2", "--bptt-min-len", "2",
                              "--bptt-max-extra", "3", "--optimizer", "sgd", "--lr", "0.5")
    model = model.float()
    task.load_dataset("train")
    ds = task.dataset("train")
    itr = task.get_batch_iterator(ds, epoch=1).next_epoch_itr(shuffle=False)
    batches = list(itr)
    lengths = [b["net_input"]["src_tokens"].size(1) for b in batches]
    assert lengths == list(task.window_lengths(ds.targets_per_row, 1)) and sum(lengths) == ds.targets_per_row
    assert len(set(lengths)) > 2 and max(lengths) <= 8  # random lengths, at most 5 + 3
    assert list(task.window_lengths(ds.targets_per_row, 1)) != list(task.window_lengths(ds.targets_per_row, 2))
    valid_task_ds = StatefulBPTTDataset(ds.stream, 3, 5, ds.pad, "valid", predict_all=True)
    assert set(valid_task_ds.sizes[:-1]) == {5}  # evaluation layouts keep fixed windows

    from fairseq.optim import build_optimizer

    optimizer = build_optimizer(cfg.optimizer, list(model.parameters()))
    crit = task.build_criterion(cfg.criterion)
    sample = next(b for b in batches if b["net_input"]["src_tokens"].size(1) != 5)
    ratio = sample["net_input"]["src_tokens"].size(1) / 5
    before = [p.detach().clone() for p in model.parameters()]
    model.train()
    task.train_step(sample, model, crit, optimizer, update_num=0)
    grads = [p.grad.detach().clone() for p in model.parameters()]
    task.optimizer_step(optimizer, model, update_num=0)
    assert optimizer.get_lr() == 0.5  # restored after the update
    for p, w, gr in zip(model.parameters(), before, grads):
        assert torch.allclose(p.detach(), w - 0.5 * ratio * gr, atol=1e-7)


def test_nt_asgd_refuses_fp32_master_copies():
    """--fp16/--bf16 (fairseq's FP16Optimizer) step fp32 copies of the weights, not the model's."""
    from types import SimpleNamespace

    from fairseq_local.optim.nt_asgd import FairseqNTASGD, FairseqNTASGDConfig, NTASGDDriver

    model = torch.nn.Linear(2, 2)
    masters = [p.detach().clone().requires_grad_() for p in model.parameters()]
    wrapper = SimpleNamespace(fp32_optimizer=FairseqNTASGD(FairseqNTASGDConfig(lr=[1.0]), masters))
    with pytest.raises(ConfigError, match="--optimizer nt_asgd averages the weights the model runs with"):
        NTASGDDriver().before_train_step(wrapper, model)
    same = SimpleNamespace(fp32_optimizer=FairseqNTASGD(FairseqNTASGDConfig(lr=[1.0]), list(model.parameters())))
    driver = NTASGDDriver()
    driver.before_train_step(same, model)  # --amp / fp32: the model's own parameters
    assert driver.optimizer is same.fp32_optimizer.optimizer and driver.optimizer.driven
