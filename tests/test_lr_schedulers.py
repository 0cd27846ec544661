"""``--lr-scheduler reduce_lr_on_plateau_updates`` (the parallel-cells paper's Zh-En schedule: lr 0.5,
x 0.93 after each 3000-batch check whose validation cost did not decrease): the learning rate at
chosen update counts against hand-computed values, its checkpoint state, its one-line refusals, and
the Table 3 YAMLs trained through fairseq's own loop with the checks every 2 updates."""
import functools
import math
import re

import pytest
import torch

import fairseq_local  # noqa: F401
from contract_lib import REPO
from fairseq import optim, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim import lr_scheduler
from omegaconf import OmegaConf

from fairseq_local_core.errors import ConfigError

USER_DIR = str(fairseq_local.__path__[0])


def build(*flags, lr="0.5"):
    """The scheduler fairseq-train builds for these flags, on an SGD optimizer over one weight."""
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "data", "--user-dir", USER_DIR, "--arch", "lstm", "--optimizer", "sgd", "--lr", lr,
        "--lr-scheduler", "reduce_lr_on_plateau_updates", *flags])
    cfg = convert_namespace_to_omegaconf(args)
    opt = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(2))])
    return lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, opt), opt


# validation costs at the checks (updates 3000 k) and the rate after each check, by hand:
# 0.5 * 0.93 = 0.465, 0.465 * 0.93 = 0.43245, 0.43245 * 0.93 = 0.4021785, * 0.93 = 0.374026005
COSTS = [(3000, 5.0), (6000, 4.0), (9000, 4.0), (12000, 4.2), (15000, 4.1), (18000, 3.9), (21000, 3.95)]
EXPECTED = {
    # previous check's cost: 5.0 first (no reference) | 4.0 < 5.0 | 4.0 = 4.0 shrink | 4.2 > 4.0 shrink
    # | 4.1 < 4.2 keep | 3.9 < 4.1 keep | 3.95 > 3.9 shrink
    "previous": [0.5, 0.5, 0.465, 0.43245, 0.43245, 0.43245, 0.4021785],
    # best so far: ... | 4.1 > 4.0 shrink | 3.9 < 4.0 keep | 3.95 > 3.9 shrink
    "best": [0.5, 0.5, 0.465, 0.43245, 0.4021785, 0.4021785, 0.374026005],
}


@pytest.mark.parametrize("reference", ["previous", "best"])
def test_rate_at_chosen_updates_is_the_hand_computed_one(reference):
    sched, opt = build("--validate-interval-updates", "1000", "--lr-check-interval", "3000",
                       "--lr-shrink", "0.93", "--lr-plateau-reference", reference)
    assert sched.step_update(0) == opt.get_lr() == 0.5
    for (n, cost), want in zip(COSTS, EXPECTED[reference]):
        for u in range(n - 2999, n, 499):  # updates between the checks change nothing
            assert sched.step_update(u) == pytest.approx(opt.get_lr())
        # a validation between the checks (every 1000 updates) is no check, however bad its cost
        sched.step_validation(n - 1000, 99.0)
        sched.step(1, 99.0)  # nor is fairseq's end-of-epoch call
        sched.step_validation(n, cost)
        assert opt.get_lr() == pytest.approx(want, rel=1e-12), (reference, n)
        assert sched.step_update(n + 1) == pytest.approx(want, rel=1e-12)
    # a check repeated at the same update count (a resumed run validating again) counts once
    sched.step_validation(21000, 50.0)
    assert opt.get_lr() == pytest.approx(EXPECTED[reference][-1], rel=1e-12)


def test_maximized_metric_and_nan_cost():
    sched, opt = build("--validate-interval-updates", "10", "--lr-check-interval", "10",
                       "--maximize-best-checkpoint-metric", "--best-checkpoint-metric", "bleu")
    for n, bleu, want in [(10, 20.0, 0.5), (20, 21.0, 0.5), (30, 20.5, 0.465), (40, float("nan"), 0.43245),
                          (50, 20.6, 0.43245)]:  # NaN: shrink, and 20.5 stays the reference
        sched.step_validation(n, bleu)
        assert opt.get_lr() == pytest.approx(want, rel=1e-12), n


def test_state_survives_a_checkpoint():
    sched, opt = build("--validate-interval-updates", "3000")
    for n, cost in COSTS[:4]:
        sched.step_validation(n, cost)
    state = sched.state_dict()
    resumed, opt2 = build("--validate-interval-updates", "3000")
    resumed.load_state_dict(state)
    assert resumed.step_update(12001) == pytest.approx(0.43245, rel=1e-12) == opt2.get_lr()
    resumed.step_validation(12000, 1.0)  # already checked before the checkpoint
    assert opt2.get_lr() == pytest.approx(0.43245, rel=1e-12)
    resumed.step_validation(15000, 4.1)  # 4.1 < 4.2 (the last check's cost, from the checkpoint)
    assert opt2.get_lr() == pytest.approx(0.43245, rel=1e-12)
    resumed.step_validation(18000, 4.1)
    assert opt2.get_lr() == pytest.approx(0.4021785, rel=1e-12)


@pytest.mark.parametrize("flags,message", [
    ([], "--validate-interval-updates must divide --lr-check-interval 3000 (got 0)"),
    (["--validate-interval-updates", "2000"], "--validate-interval-updates must divide --lr-check-interval 3000"),
    (["--validate-interval-updates", "3000", "--disable-validation"], "drop --disable-validation"),
    (["--validate-interval-updates", "3000", "--lr-shrink", "1.5"], "--lr-shrink must be in (0, 1] (got 1.5)"),
    (["--validate-interval-updates", "3000", "--lr-check-interval", "0"], "--lr-check-interval must be >= 1"),
])
def test_refusals_name_the_option(flags, message):
    with pytest.raises(ConfigError) as e:
        build(*flags)
    assert message in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------------
# the Table 3 YAMLs, through fairseq's training loop
# ------------------------------------------------------------------------------------------------
TABLE3 = ["parallel_cells/table3_zh_en_baseline", "parallel_cells/table3_zh_en_wide3"]


@pytest.mark.parametrize("config", TABLE3)
def test_table3_yaml_has_the_papers_schedule(config):
    cfg = OmegaConf.load(REPO / "configs" / f"{config}.yaml")
    assert list(cfg.optimization.lr) == [0.5] and cfg.optimization.clip_norm == 5.0
    assert dict(cfg.lr_scheduler) == {"_name": "reduce_lr_on_plateau_updates", "lr_shrink": 0.93,
                                      "lr_check_interval": 3000}
    assert 3000 % cfg.dataset.validate_interval_updates == 0


TRAIN_LR = re.compile(r"train_inner.* num_updates=(\d+), lr=([\d.e-]+),")


@pytest.mark.slow
@pytest.mark.parametrize("config", TABLE3)
def test_table3_yaml_shrinks_after_checks_inside_an_epoch(config, shared_data, tmp_path, caplog, monkeypatch):
    """The YAML trained by fairseq-hydra-train's own entry with a validation every update and a check
    every 2: every
    update's lr (fairseq's train_inner log) is 0.5 * 0.93^(checks before it whose cost did not
    improve), from the exact validation costs; the metric is maximized (a loss that falls shrinks at
    every check) so that a rate never shrunk cannot pass."""
    from fairseq_cli import train as train_cli
    from real_data import RealData
    from test_configs import batch_overrides, hydra_train_in_process, width_overrides

    costs = {}
    inner = train_cli.validate

    @functools.wraps(inner)
    def recording(cfg, trainer, *args, **kwargs):
        losses = inner(cfg, trainer, *args, **kwargs)
        costs.setdefault(trainer.get_num_updates(), losses[0])
        return losses

    monkeypatch.setattr(train_cli, "validate", recording)
    cfg = OmegaConf.load(REPO / "configs" / f"{config}.yaml")
    log = hydra_train_in_process(REPO / "configs" / f"{config}.yaml", [
        f"task.data={RealData(shared_data, tmp_path / 'data')('zh_en')}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={tmp_path / 'ck'}",
        "common.cpu=true", "common.log_format=simple", "common.log_interval=1", "common.no_progress_bar=true",
        "distributed_training.distributed_world_size=1", "dataset.num_workers=0",
        "optimization.max_update=12", "dataset.validate_interval_updates=1",
        "lr_scheduler.lr_check_interval=2", "checkpoint.maximize_best_checkpoint_metric=true",
        "checkpoint.no_save=true", *batch_overrides(cfg), *width_overrides(cfg),
    ], caplog)
    lrs = {int(n): float(lr) for n, lr in TRAIN_LR.findall(log)}
    assert sorted(lrs) == list(range(1, 13)), log[-3000:]
    assert sorted(costs) == list(range(1, 13)), sorted(costs)
    checks = [n for n in sorted(costs) if n % 2 == 0]
    lr, ref, expected = 0.5, None, {}
    for n in range(1, 13):
        expected[n] = lr
        if n in checks:
            if ref is not None and not costs[n] > ref:
                lr *= 0.93
            ref = costs[n]
    assert expected[12] < 0.5, costs  # the check shrank the rate at least once
    for n in range(1, 13):
        assert lrs[n] == pytest.approx(expected[n], rel=1e-6), (n, lrs, costs)
