"""fairseq_local/patches/exact_resume.py: a run interrupted and resumed from checkpoint_last.pt
ends exactly as the same run without interruption (dev curve, learning rate of every epoch,
stopping epoch, final parameters), on a small LSTM LM of ours (``parallel_lstm_lm --wide 1``: the
patch applies to our models only) over real PTB text trained with the
harness's schedule (Adam, reduce_lr_on_plateau halving on a stale epoch, early stop after 2).
The interruptions are placed where plain fairseq loses state: right after an improving epoch
(the scheduler's new best), right after the first stale epoch (its learning-rate halving), and
right after the last epoch before the stop (the patience count)."""
import json
import os
import subprocess
import sys

import pytest
import torch

from fairseq_local.patches import exact_resume
from fairseq_local.safe_loading import safe_load
from real_data import build_lm

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_EPOCH = 30


def train(data, save_dir, max_epoch):
    """One fairseq-train process, as the harness starts it; its dev points and per-epoch learning rates."""
    cmd = [sys.executable, "-m", "fairseq_cli.train", str(data), "--user-dir", os.path.join(REPO, "fairseq_local"),
           "--task", "language_modeling", "--arch", "parallel_lstm_lm", "--wide", "1", "--decoder-embed-dim", "16",
           "--decoder-hidden-size", "32", "--decoder-layers", "1",
           "--dropout", "0.1", "--optimizer", "adam", "--lr", "0.02", "--lr-scheduler", "reduce_lr_on_plateau",
           "--lr-shrink", "0.5", "--lr-patience", "0", "--patience", "2", "--max-epoch", str(max_epoch),
           "--max-tokens", "1000", "--tokens-per-sample", "128", "--sample-break-mode", "eos", "--seed", "1",
           "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "100",
           "--num-workers", "0", "--cpu", "--criterion", "cross_entropy"]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    dev, lr = {}, {}
    for line in (p.stdout + p.stderr).splitlines():
        for tag, into, key in (("valid", dev, "valid_loss"), ("train", lr, "train_lr")):
            if f"| {tag} | {{" in line:
                stats = json.loads(line[line.index("{"):])
                into[int(stats["epoch"])] = float(stats[key])
    return dev, lr, "early stop since valid performance" in p.stdout + p.stderr


def first_stale(dev):
    best = None
    for epoch in sorted(dev):
        if best is not None and dev[epoch] >= best:
            return epoch
        best = dev[epoch] if best is None else min(best, dev[epoch])
    return None


@pytest.fixture(scope="module")
def lm_data(shared_data, tmp_path_factory):
    return build_lm(shared_data, tmp_path_factory.mktemp("lm"))


def test_interrupted_run_equals_uninterrupted_run(lm_data, tmp_path):
    dev, lr, stopped = train(lm_data, tmp_path / "whole", MAX_EPOCH)
    last = max(dev)
    stale = first_stale(dev)
    assert stopped and last < MAX_EPOCH and stale is not None  # the schedule this test is about
    assert lr[stale + 1] == lr[stale] / 2  # fairseq halved the rate after the stale epoch

    dev_parts, lr_parts, stops = {}, {}, []
    for cap in sorted({stale - 1, stale, last - 1}) + [MAX_EPOCH]:
        d, r, s = train(lm_data, tmp_path / "interrupted", cap)
        dev_parts.update(d)
        lr_parts.update(r)
        stops.append(s)
    assert dev_parts == dev and lr_parts == lr
    assert stops[-1] and not any(stops[:-1])  # stopped by patience in the last process, at the same epoch
    whole = safe_load(tmp_path / "whole" / "checkpoint_last.pt")
    resumed = safe_load(tmp_path / "interrupted" / "checkpoint_last.pt")
    for name, value in whole["model"].items():
        assert torch.equal(value, resumed["model"][name]), name  # the same batches, rates and updates
    assert resumed["extra_state"][exact_resume.STALE_KEY] == 2
    assert resumed["extra_state"][exact_resume.BATCHES_KEY] == whole["extra_state"][exact_resume.BATCHES_KEY] == 1


def test_stale_count_of_a_checkpoint_without_one():
    """Checkpoints written by plain fairseq-train: the last validation set the best, or it did not."""
    assert exact_resume.stale_count({"val_loss": 3.2, "best": 3.2}) == 0
    assert exact_resume.stale_count({"val_loss": 3.3, "best": 3.2}) == 1
    assert exact_resume.stale_count({"val_loss": None, "best": 3.2}) == 0
    assert exact_resume.stale_count({"val_loss": 3.3, "best": 3.2, exact_resume.STALE_KEY: 3}) == 3
