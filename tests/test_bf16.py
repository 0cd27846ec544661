"""bfloat16 (and fp16 autocast) on CPU for every model family: fairseq's ``--bf16`` training (model weights in bf16,
fp32 master weights in fairseq's FP16Optimizer), ``torch.autocast`` bf16 (what ``scripts/bench.py
--bf16`` measures) and incremental decoding in bf16.  GPUs run the same code paths in bf16."""
import pytest
import torch

import fairseq_local  # noqa: F401  (registers everything)
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from test_contract import _is_lm, build, data_cache, decoder_outputs, first_batch, train_argv  # noqa: F401
from test_contract import SPECS

# one representative arch (the paper's main configuration) per model family of ours
ARCHS = {
    "mc_rnn": "mc_rnn_iwslt_de_en_3",
    "rnnsearch": "rnnsearch_iwslt_de_en",
    "mc_rnn_lm": "mc_rnn_lm_ptb",
    "parallel_lstm": "parallel_lstm_zh_en_wide3",
    "parallel_lstm_lm": "parallel_lstm_lm_1950h_wide3",
    "lattice_rnnsearch": "lattice_dwl_gating",
    "gencnn": "gencnn_paper",
    "dpn_s2s": "dpn_s2s_iwslt_de_en",
}
MODELS = sorted(ARCHS)


def test_representative_archs_are_registered():
    for model_name, arch in ARCHS.items():
        assert ARCH_MODEL_NAME_REGISTRY.get(arch) == model_name, f"{arch} is not an arch of {model_name}"


def _argv(model_name, data_cache, tmp_path, extra=()):
    spec = SPECS[model_name]
    data_dir, task_args = data_cache(spec)
    return spec, data_dir, task_args, train_argv(ARCHS[model_name], spec, data_dir, task_args, tmp_path, max_update=3) + list(extra)


def test_bf16_flag_no_longer_implies_a_tpu(data_cache, tmp_path):
    """fairseq turns --bf16 into --tpu; without torch_xla the plugin clears it in every group."""
    from fairseq_local.patches.precision import clear_implied_tpu

    _, _, _, argv = _argv("rnnsearch", data_cache, tmp_path, ["--bf16"])
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    assert cfg.common.tpu and cfg.distributed_training.tpu and cfg.optimizer.tpu  # fairseq's doing
    assert clear_implied_tpu(cfg)
    assert not cfg.common.tpu and not cfg.distributed_training.tpu and not cfg.optimizer.tpu
    assert cfg.common.bf16
    assert not clear_implied_tpu(cfg)  # nothing left to clear
    _, _, _, argv = _argv("rnnsearch", data_cache, tmp_path, ["--tpu"])
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    assert not clear_implied_tpu(cfg) and cfg.common.tpu  # an explicit --tpu without bf16 is left alone


@pytest.mark.parametrize("model_name", MODELS)
def test_cli_bf16_training_on_cpu(model_name, data_cache, tmp_path, monkeypatch):
    """``fairseq-train --bf16 --cpu`` (the CLI path: parse_args_and_arch, call_main) trains in bf16."""
    from fairseq import distributed_utils
    from fairseq.trainer import Trainer
    from fairseq_cli import train as train_cli

    seen = []  # dtypes of the model's floating-point parameters at each update
    train_step = Trainer.train_step

    def recording_train_step(self, *a, **kw):
        seen.append({p.dtype for p in self.model.parameters() if p.is_floating_point()})
        return train_step(self, *a, **kw)

    monkeypatch.setattr(Trainer, "train_step", recording_train_step)
    save_dir = tmp_path / "ckpt"
    _, _, _, argv = _argv(model_name, data_cache, save_dir, ["--bf16"])
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    assert len(seen) == 3 and all(s == {torch.bfloat16} for s in seen), f"not trained in bf16: {seen}"
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert state["cfg"]["common"]["bf16"] and not state["cfg"]["common"]["tpu"]
    floats = [t for t in state["model"].values() if t.is_floating_point()]  # saved as fp32 by fairseq
    assert floats and all(torch.isfinite(t).all() for t in floats)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("model_name", MODELS)
def test_autocast_forward_backward(model_name, dtype, data_cache, tmp_path):
    """Under torch.autocast("cpu", bf16 or fp16) -- scripts/bench.py --bf16 / --fp16, fairseq's
    --amp on a GPU -- the loss is close to fp32's and every gradient is finite.  (fairseq's own
    --fp16 converts the model to fp16 and needs CUDA.)"""
    spec, data_dir, task_args, _ = _argv(model_name, data_cache, tmp_path)
    cfg, task, model, criterion = build(ARCHS[model_name], spec, data_dir, task_args, tmp_path)
    model.eval()  # no dropout: the two losses see the same network
    sample = first_batch(task)
    with torch.no_grad():
        ref, _, _ = criterion(model, sample)
    with torch.autocast("cpu", dtype=dtype):  # LSTMs without a kernel in dtype run in fp32 (test_rnn_* below)
        loss, _, _ = criterion(model, sample)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(ref.item(), rel=2e-2), f"{dtype} autocast loss far from fp32's"
    loss.backward()
    grads = [(n, p.grad) for n, p in model.named_parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 for _, g in grads)  # fp32 weights keep fp32 gradients
    bad = [n for n, g in grads if not torch.isfinite(g).all()]
    assert not bad, f"non-finite {dtype} gradients in {bad[:3]}"
    assert any(g.abs().sum() > 0 for _, g in grads)


@pytest.mark.parametrize("model_name", MODELS)
def test_incremental_equals_full_in_bf16(model_name, data_cache, tmp_path):
    """A bf16 model decodes step by step (beam search) as its full forward pass scores, within
    bf16 rounding, also after a beam reorder; the tolerance is set from the bf16 model's own
    distance to fp32, so a real mismatch (a wrong state) fails."""
    spec, data_dir, task_args, _ = _argv(model_name, data_cache, tmp_path)
    cfg, task, model, criterion = build(ARCHS[model_name], spec, data_dir, task_args, tmp_path)
    model.eval()
    sample = first_batch(task)
    with torch.no_grad():
        full32, _ = decoder_outputs(model, spec, sample)
        model.bfloat16()
        sample16 = {**sample, "net_input": {k: v.bfloat16() if torch.is_tensor(v) and v.is_floating_point() else v
                                            for k, v in sample["net_input"].items()}}
        full, inc = decoder_outputs(model, spec, sample16)
        assert full.dtype == torch.bfloat16 and inc.dtype == torch.bfloat16
        rounding = (full.float() - full32).abs().max().item()  # what bf16 alone costs this model
        scale = full32.abs().max().item()  # tiny models' logits are small: the bound scales with them
        tol = 4 * max(rounding, scale * 2 ** -8)  # bf16 keeps 8 significant bits
        diff = (full.float() - inc.float()).abs().max().item()
        assert diff <= tol, (f"incremental != full in bf16: max diff {diff:.3g} (bf16 vs fp32: {rounding:.3g}, "
                             f"logits up to {scale:.3g})")
        order = torch.tensor([1, 0, 1]) if full.size(0) >= 2 else torch.tensor([0, 0])
        full2, inc2 = decoder_outputs(model, spec, sample16, order=order)
        diff2 = (full2.index_select(0, order).float() - inc2.float()).abs().max().item()
        assert diff2 <= tol, f"after a beam reorder, incremental != full in bf16: max diff {diff2:.3g}"


def test_fp16_without_cuda_is_one_line(data_cache, tmp_path):
    """fairseq-train --fp16 --cpu: one line naming the option (fairseq: a CUDA traceback)."""
    import subprocess

    import contract_lib

    _, _, _, argv = _argv("rnnsearch", data_cache, tmp_path, ["--fp16"])
    proc = subprocess.run([contract_lib.console_script("fairseq-train"), *argv], capture_output=True, text=True,
                          env=dict(__import__("os").environ, OMP_NUM_THREADS="1"), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == "fairseq-train: error: --fp16 needs a CUDA device (--cpu): use --bf16 on CPU"
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "checkpoint_last.pt").exists()


def test_bench_bf16_runs_under_autocast_on_cpu():
    """scripts/bench.py --bf16 on CPU measures bf16, never fp32 in its place."""
    from fairseq_local_repro import bench

    args = bench.parse_args(["--arch", "lstm", "--baseline", "lstm", "--device", "cpu", "--bf16"])
    assert args.dtype == "bf16"
    assert bench.parse_args(["--arch", "lstm", "--baseline", "lstm", "--device", "cpu", "--fp16"]).dtype == "fp16"
    runner = bench.Runner.__new__(bench.Runner)
    runner.args = args
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with runner._autocast():
        assert (a @ b).dtype == torch.bfloat16
    runner.args = bench.parse_args(["--arch", "lstm", "--baseline", "lstm", "--device", "cpu"])
    with runner._autocast():
        assert (a @ b).dtype == torch.float32  # the default stays plain fp32
    with pytest.raises(SystemExit):
        bench.parse_args(["--arch", "lstm", "--baseline", "lstm", "--bf16", "--dtype", "fp16"])
