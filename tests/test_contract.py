"""Contract suite: every architecture that fairseq_local registers passes the same checks.

An architecture is "ours" when its model class or its architecture function lives in the
``fairseq_local`` package.  Each is exercised with its model family's ``ContractSpec`` (see
``tests/contract_lib.py`` and ``tests/contract_specs/``):

1. built through fairseq's registry from command-line arguments;
2. forward + backward on a tiny real batch: finite loss, finite non-zero-size gradient on every
   parameter;
3. incremental decoding equals the full forward pass (float64), also after
   ``reorder_incremental_state`` / ``reorder_encoder_out`` with a beam-like order;
4. trainer checkpoint save, then load with ``weights_only=True``, gives identical outputs;
5. ``fairseq-train`` for a few updates and ``fairseq-generate`` (``fairseq-eval-lm`` for language
   models) through fairseq_cli's entry points.

Per model (not per arch): the console scripts themselves in a subprocess, and
``fairseq-hydra-train`` with the family's YAML from ``configs/``.
"""
import os
import re
from pathlib import Path

import pytest
import torch

import fairseq_local  # noqa: F401  (registers everything)
from contract_lib import (REPO, console_script, data_for, force_overrides, hydra_task_overrides, load_specs,
                          run_cmd, seed_all)
from fairseq import checkpoint_utils, options, tasks, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

USER_DIR = str(REPO / "fairseq_local")
SPECS = load_specs()
LM_TASKS = {"language_modeling"}


def _ours(arch):
    fn = ARCH_CONFIG_REGISTRY[arch]
    return fn.__module__.startswith("fairseq_local") or ARCH_MODEL_REGISTRY[arch].__module__.startswith(
        "fairseq_local"
    )


# FAIRSEQ_LOCAL_CONTRACT_EXTRA="lstm,..." also runs fairseq built-ins (to check the harness itself)
_EXTRA = [a for a in os.environ.get("FAIRSEQ_LOCAL_CONTRACT_EXTRA", "").split(",") if a]
OUR_ARCHS = sorted(a for a in ARCH_MODEL_REGISTRY if _ours(a) or a in _EXTRA)
OUR_MODELS = sorted({ARCH_MODEL_NAME_REGISTRY[a] for a in OUR_ARCHS})


def _spec(arch):
    model_name = ARCH_MODEL_NAME_REGISTRY[arch]
    if model_name not in SPECS:
        pytest.fail(f"arch {arch} (model {model_name}) has no contract spec: add one in tests/contract_specs/")
    return SPECS[model_name]


def _is_lm(spec):
    return spec.task in LM_TASKS or "language_model" in spec.task


@pytest.fixture(scope="module")
def data_cache(tmp_path_factory):
    """One tiny binarized dataset per task (building it is the slow part)."""
    cache = {}

    def get(spec):
        key = (spec.task, spec.make_data)
        if key not in cache:
            cache[key] = data_for(spec, tmp_path_factory.mktemp(spec.task))
        return cache[key]

    return get


def train_argv(arch, spec, data_dir, task_args, save_dir, max_update=2):
    return [
        str(data_dir), "--user-dir", USER_DIR, "--task", spec.task, "--arch", arch, "--cpu",
        *task_args, *spec.tiny_args,
        "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "400", "--max-update", str(max_update),
        "--save-dir", str(save_dir), "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
        "--num-workers", "0", "--seed", "1",
        *spec.train_args,
    ]


def build(arch, spec, data_dir, task_args, tmp_path):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, train_argv(arch, spec, data_dir, task_args, tmp_path))
    cfg = convert_namespace_to_omegaconf(args)
    utils.import_user_module(cfg.common)
    task = tasks.setup_task(cfg.task)
    seed_all(1)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    return cfg, task, model, criterion


@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_arch_builds_at_its_own_sizes(arch, data_cache, tmp_path):
    """The checks below run every arch at tiny sizes; this one builds each arch at the sizes it
    registers (the paper's), on the meta device (shapes only: no memory, no initialisation cost),
    so that a named arch whose dimensions its layers reject fails here."""
    spec = _spec(arch)
    data_dir, task_args = data_cache(spec)
    argv = [str(data_dir), "--user-dir", USER_DIR, "--task", spec.task, "--arch", arch, "--cpu", *task_args,
            *spec.train_args]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    with torch.device("meta"):
        model = task.build_model(cfg.model)
    assert sum(p.numel() for p in model.parameters()) > 0


def first_batch(task, split="train", max_sentences=4):
    task.load_dataset(split)
    dataset = task.dataset(split)
    itr = task.get_batch_iterator(
        dataset=dataset, max_tokens=400, max_sentences=max_sentences, seed=1, ignore_invalid_inputs=True
    ).next_epoch_itr(shuffle=False)
    return next(iter(itr))


def to_double(sample):
    return utils.apply_to_sample(lambda t: t.double() if t.is_floating_point() else t, sample)


def decoder_outputs(model, spec, sample, order=None):
    """Full forward, and step-by-step incremental decoding (reordered halfway when ``order``)."""
    net = dict(sample["net_input"])
    if _is_lm(spec):
        tokens, enc = net["src_tokens"], None
        call = lambda toks, **kw: model.decoder(toks, **kw)  # noqa: E731
    else:
        tokens = net.pop("prev_output_tokens")
        enc = model.encoder(**net)
        call = lambda toks, **kw: model.decoder(toks, encoder_out=enc_box[0], **kw)  # noqa: E731
    enc_box = [enc]
    full = call(tokens)[0]
    state, steps, T = {}, [], tokens.size(1)
    half = T // 2
    for t in range(T):
        if order is not None and t == half:
            model.decoder.reorder_incremental_state_scripting(state, order)
            if enc is not None:
                enc_box[0] = model.encoder.reorder_encoder_out(enc_box[0], order)
            tokens = tokens.index_select(0, order)
            steps = [s.index_select(0, order) for s in steps]
        steps.append(call(tokens[:, : t + 1], incremental_state=state)[0][:, -1])
    return full, torch.stack(steps, dim=1)


def assert_no_pad_diff(full, inc, sample, spec, tol):
    diff = (full - inc).abs()
    assert torch.isfinite(full).all()
    assert diff.max().item() < tol, f"incremental != full forward: max abs diff {diff.max().item():.3g}"


# ---------------------------------------------------------------------------------------------
# per-architecture checks
# ---------------------------------------------------------------------------------------------
def test_every_model_has_a_spec():
    missing = [m for m in OUR_MODELS if m not in SPECS]
    assert not missing, f"models without a contract spec in tests/contract_specs/: {missing}"


@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_forward_backward(arch, data_cache, tmp_path):
    spec = _spec(arch)
    data_dir, task_args = data_cache(spec)
    cfg, task, model, criterion = build(arch, spec, data_dir, task_args, tmp_path)
    model.train()
    sample = first_batch(task)
    loss, sample_size, logging_output = criterion(model, sample)
    assert torch.isfinite(loss), f"{arch}: non-finite loss {loss}"
    loss.backward()
    allowed = [re.compile(p) for p in spec.no_grad_params]
    for name, p in model.named_parameters():
        if any(r.search(name) for r in allowed):
            continue
        assert p.grad is not None, f"{arch}: parameter {name} received no gradient"
        assert torch.isfinite(p.grad).all(), f"{arch}: non-finite gradient in {name}"
    # the loss must actually depend on the parameters: one SGD step lowers it on the same batch
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_incremental_equals_full(arch, data_cache, tmp_path):
    spec = _spec(arch)
    data_dir, task_args = data_cache(spec)
    cfg, task, model, criterion = build(arch, spec, data_dir, task_args, tmp_path)
    model.double().eval()
    sample = to_double(first_batch(task))
    with torch.no_grad():
        full, inc = decoder_outputs(model, spec, sample)
        assert_no_pad_diff(full, inc, sample, spec, 1e-5)
        bsz = full.size(0)
        assert bsz >= 2, "the contract batch needs two sentences to test reordering"
        g = torch.Generator().manual_seed(0)
        # beam-like: rows repeat and one sentence finishes (the batch shrinks, as in beam search
        # when a sentence is done; fairseq's attention caches reorder only when the size changes)
        order = torch.randint(0, bsz, (bsz - 1,), generator=g)
        order[0] = bsz - 1
        full2, inc2 = decoder_outputs(model, spec, sample, order=order)
        assert_no_pad_diff(full2.index_select(0, order), inc2, sample, spec, 1e-5)


@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_checkpoint_roundtrip_weights_only(arch, data_cache, tmp_path):
    from fairseq.trainer import Trainer

    spec = _spec(arch)
    data_dir, task_args = data_cache(spec)
    cfg, task, model, criterion = build(arch, spec, data_dir, task_args, tmp_path)
    trainer = Trainer(cfg, task, model, criterion)
    path = str(tmp_path / "checkpoint_test.pt")
    trainer.consolidate_optimizer()  # as checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(path, {"train_iterator": {"epoch": 1}, "val_loss": None})
    torch.load(path, map_location="cpu", weights_only=True)  # safe loading stays on
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": str(data_dir)})
    loaded = models[0]
    model.eval(), loaded.eval()
    sample = first_batch(task, "valid")
    with torch.no_grad():
        a = model(**sample["net_input"])[0]
        b = loaded(**sample["net_input"])[0]
    assert torch.equal(a, b), f"{arch}: outputs differ after checkpoint round trip"


@pytest.mark.parametrize("arch", OUR_ARCHS)
def test_cli_train_then_generate(arch, data_cache, tmp_path):
    from fairseq import distributed_utils
    from fairseq_cli import train as train_cli

    spec = _spec(arch)
    data_dir, task_args = data_cache(spec)
    save_dir = tmp_path / "ckpt"
    args = options.parse_args_and_arch(
        options.get_training_parser(), train_argv(arch, spec, data_dir, task_args, save_dir, max_update=3)
    )
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    ckpt = save_dir / "checkpoint_last.pt"
    assert ckpt.exists(), f"{arch}: fairseq-train wrote no checkpoint"
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    if _is_lm(spec):
        run_eval_lm(spec, data_dir, task_args, ckpt)
    else:
        run_generate(spec, data_dir, task_args, ckpt, tmp_path)


def run_eval_lm(spec, data_dir, task_args, ckpt):
    from fairseq_cli import eval_lm

    argv = [str(data_dir), "--user-dir", USER_DIR, "--task", spec.task, "--path", str(ckpt), "--cpu",
            "--gen-subset", "valid", "--max-tokens", "400", "--no-progress-bar", *task_args]
    args = options.parse_args_and_arch(options.get_eval_lm_parser(), argv)
    results = eval_lm.main(convert_namespace_to_omegaconf(args))
    assert results["perplexity"] > 1.0 and torch.isfinite(torch.tensor(results["loss"]))


def run_generate(spec, data_dir, task_args, ckpt, tmp_path):
    from fairseq_cli import generate

    out = tmp_path / "gen"
    argv = [str(data_dir), "--user-dir", USER_DIR, "--task", spec.task, "--path", str(ckpt), "--cpu",
            "--gen-subset", "valid", "--beam", "3", "--max-len-b", "20", "--batch-size", "4",
            "--results-path", str(out), "--no-progress-bar", *task_args, *spec.generate_args]
    args = options.parse_args_and_arch(options.get_generation_parser(), argv)
    generate.main(args)
    text = (out / "generate-valid.txt").read_text()
    hyps = [l for l in text.splitlines() if l.startswith("H-")]
    srcs = [l for l in text.splitlines() if l.startswith("S-")]
    assert hyps and len(hyps) == len(srcs), f"expected one hypothesis per source, got {len(hyps)}/{len(srcs)}"
    assert "BLEU" in text.splitlines()[-1]


# ---------------------------------------------------------------------------------------------
# per-model checks through the console scripts (subprocesses)
# ---------------------------------------------------------------------------------------------
def _first_arch(model_name):
    archs = [a for a in OUR_ARCHS if ARCH_MODEL_NAME_REGISTRY[a] == model_name]
    named = [a for a in archs if a != model_name]
    return (named or archs)[0]


_run, _bin = run_cmd, console_script


@pytest.mark.parametrize("model_name", OUR_MODELS)
def test_console_scripts(model_name, data_cache, tmp_path):
    if model_name not in SPECS:
        pytest.fail(f"model {model_name} has no contract spec")
    spec = SPECS[model_name]
    arch = _first_arch(model_name)
    data_dir, task_args = data_cache(spec)
    save_dir = tmp_path / "ckpt"
    _run([_bin("fairseq-train"), *train_argv(arch, spec, data_dir, task_args, save_dir)])
    ckpt = save_dir / "checkpoint_last.pt"
    if _is_lm(spec):
        proc = _run([_bin("fairseq-eval-lm"), str(data_dir), "--user-dir", USER_DIR, "--task", spec.task,
                     "--path", str(ckpt), "--cpu", "--max-tokens", "400", "--gen-subset", "valid", *task_args])
        assert "Perplexity" in proc.stderr + proc.stdout
    else:
        proc = _run([_bin("fairseq-generate"), str(data_dir), "--user-dir", USER_DIR, "--task", spec.task,
                     "--path", str(ckpt), "--cpu", "--beam", "5", "--max-len-b", "20", "--batch-size", "8",
                     "--gen-subset", "valid", *task_args, *spec.generate_args])
        assert sum(l.startswith("H-") for l in proc.stdout.splitlines()) > 0
        assert "BLEU" in proc.stdout


@pytest.mark.parametrize("model_name", OUR_MODELS)
def test_hydra_train(model_name, data_cache, tmp_path):
    spec = SPECS.get(model_name)
    if spec is None:
        pytest.fail(f"model {model_name} has no contract spec")
    if spec.hydra_config is None:
        pytest.fail(f"model {model_name}: its contract spec names no Hydra config (hydra_config=...)")
    data_dir, task_args = data_cache(spec)
    config_dir, name = (REPO / "configs" / spec.hydra_config).parent, Path(spec.hydra_config).name
    assert (config_dir / f"{name}.yaml").exists(), f"configs/{spec.hydra_config}.yaml is missing"
    save_dir = tmp_path / "ckpt"
    _run([
        _bin("fairseq-hydra-train"), "--config-dir", str(config_dir), "--config-name", name,
        *_force([
            f"task.data={data_dir}", f"common.user_dir={USER_DIR}", "common.cpu=true",
            "optimization.max_update=2", "optimization.max_epoch=1", "dataset.max_tokens=400",
            "dataset.batch_size=null", "dataset.num_workers=0", f"checkpoint.save_dir={save_dir}",
            "common.log_format=simple", "common.no_progress_bar=true",
            "distributed_training.distributed_world_size=1",
            *_hydra_task_overrides(task_args), *spec.hydra_overrides,
        ]),
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ], cwd=tmp_path)
    ckpt = save_dir / "checkpoint_last.pt"
    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)])
    assert sum(p.numel() for p in models[0].parameters()) > 0


_force, _hydra_task_overrides = force_overrides, hydra_task_overrides
