"""bfloat16 (and fp16 autocast) on CPU for every model family: fairseq's ``--bf16`` training (model weights in bf16,
fp32 master weights in fairseq's FP16Optimizer), ``torch.autocast`` bf16 (what ``scripts/bench.py
--bf16`` measures) and incremental decoding in bf16.  GPUs run the same code paths in bf16."""
import logging
import os
import platform
import subprocess
import sys

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


# ----------------------------------------------------------------------------------------------
# recurrent kernels a CPU lacks in low precision (oneDNN's LSTM needs AVX-512 for bf16): the
# plugin's fallback in fairseq_local/patches/precision.py
# ----------------------------------------------------------------------------------------------
LOW = [torch.bfloat16, torch.float16]
LOW_IDS = ["bf16", "fp16"]


def _call(forward, module, x, dtype, autocast, hx=None):
    """forward(module, x, hx) under autocast to dtype, or with module and x converted to dtype."""
    if autocast:
        with torch.autocast("cpu", dtype=dtype):
            return forward(module, x, hx)
    return forward(module.to(dtype), x.to(dtype), hx)


@pytest.mark.parametrize("autocast", [True, False], ids=["autocast", "weights"])
@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_rnn_kernel_detector_tells_what_the_kernel_does(cell, dtype, autocast):
    """cpu_rnn_kernel_ok's answer for this machine is what torch's own kernel (the unwrapped
    forward) does: it runs (forward and backward) exactly when the detector says so."""
    from fairseq_local.patches import precision

    ok = precision.cpu_rnn_kernel_ok(cell, dtype, autocast)
    module = getattr(torch.nn, cell)(3, 4)

    def run():
        out, _ = _call(precision._ORIGINAL_FORWARD[cell], module, torch.randn(5, 2, 3), dtype, autocast)
        out.float().sum().backward()

    if ok:
        run()
    else:
        with pytest.raises(RuntimeError):
            run()


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
def test_rnn_under_autocast_runs_on_this_cpu(dtype):
    """Under autocast an LSTM runs on every CPU: in dtype where this CPU has the kernel, in fp32
    (bit for bit the fp32 forward) where it does not; both close to fp32."""
    from fairseq_local.patches import precision

    torch.manual_seed(0)
    lstm, x = torch.nn.LSTM(3, 4), torch.randn(5, 2, 3)
    ref, _ = lstm(x)
    with torch.autocast("cpu", dtype=dtype):
        out, (h, c) = lstm(x)
    if precision.cpu_rnn_kernel_ok("LSTM", dtype, True):
        assert out.dtype == dtype  # the machine's own low-precision kernel, no fallback
    else:
        assert out.dtype == torch.float32 and torch.equal(out, ref)
    assert torch.allclose(out.float(), ref, atol=2e-2)
    out.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in lstm.parameters())


@pytest.fixture
def no_low_precision_rnn(monkeypatch, caplog):
    """This machine as an AVX2-only CPU sees it: no low-precision RNN kernel at all."""
    from fairseq_local.patches import precision

    monkeypatch.setattr(precision, "cpu_rnn_kernel_ok", lambda cell, dtype, autocast: False)
    monkeypatch.setattr(precision, "_warned", set())
    caplog.set_level(logging.WARNING, logger=precision.__name__)
    return caplog


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_rnn_fallback_under_autocast_is_the_fp32_computation(cell, dtype, no_low_precision_rnn):
    """Without the kernel, autocast's RNN call is the fp32 forward and backward, bit for bit, on a
    packed input with an initial state (TorchRNNLayer's padded path); one warning line says so."""
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.manual_seed(0)
    rnn, x = getattr(torch.nn, cell)(3, 4), torch.randn(5, 3, 3)
    h0 = torch.randn(1, 3, 4)
    hx = (h0, torch.randn(1, 3, 4)) if cell == "LSTM" else h0
    lengths = torch.tensor([5, 2, 4])

    def loss_and_grads(autocast):
        rnn.zero_grad()
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        with torch.autocast("cpu", dtype=dtype, enabled=autocast):
            out, hn = rnn(packed, hx)
        hn = hn if isinstance(hn, tuple) else (hn,)
        loss = out.data.float().pow(2).sum() + sum(h.float().sum() for h in hn)
        loss.backward()
        return out.data, [h.clone() for h in hn], [p.grad.clone() for p in rnn.parameters()]

    ref_out, ref_h, ref_g = loss_and_grads(False)
    out, h, g = loss_and_grads(True)
    assert out.dtype == torch.float32 and torch.equal(out, ref_out)
    assert all(torch.equal(a, b) for a, b in zip(h, ref_h)) and all(torch.equal(a, b) for a, b in zip(g, ref_g))
    assert all(w is p for w, p in zip(rnn._flat_weights, rnn.parameters()))  # the module is left as it was
    name = str(dtype).replace("torch.", "")
    warnings = [r.getMessage() for r in no_low_precision_rnn.records]
    assert warnings == [f"this CPU has no {name} kernel for torch.nn.{cell} under autocast: the {cell} layers "
                        f"compute in float32, everything else in {name}"]


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
def test_rnn_fallback_with_low_precision_weights(dtype, no_low_precision_rnn):
    """fairseq's --bf16 (weights and activations in bf16) without the kernel: the LSTM computes in
    fp32 from the bf16 weights and returns dtype; the gradients reach the bf16 parameters and are
    the fp32 gradients rounded to dtype."""
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4).to(dtype)
    x = torch.randn(5, 2, 3).to(dtype)
    out, (h, c) = lstm(x)
    assert out.dtype == h.dtype == c.dtype == dtype
    ref = torch.nn.LSTM(3, 4)
    ref.load_state_dict({k: v.float() for k, v in lstm.state_dict().items()})
    ref_out, _ = ref(x.float())
    assert torch.equal(out, ref_out.to(dtype))
    out.float().sum().backward()
    ref_out.sum().backward()
    for p, q in zip(lstm.parameters(), ref.parameters()):
        assert p.grad.dtype == dtype and torch.equal(p.grad, q.grad.to(dtype))
    assert len(no_low_precision_rnn.records) == 1


def test_torch_rnn_layer_trains_in_bf16_without_the_kernel(no_low_precision_rnn):
    """Our TorchRNNLayer (rnnsearch and MC-RNN's baselines) through all three of its paths (full,
    packed, masked step loop) under bf16 autocast on a CPU without the kernel."""
    from fairseq_local.modules.torch_rnn_layer import TorchRNNLayer

    torch.manual_seed(0)
    layer, x = TorchRNNLayer("lstm", 3, 4), torch.randn(6, 3, 3)
    masks = [None, torch.tensor([[False, True, True]] * 2 + [[False] * 3] * 4),  # left padding: packed
             torch.tensor([[False, True, False]] + [[False] * 3] * 5)]  # a hole: the step loop
    for mask in masks:
        ref, _ = layer(x, None, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, (h, c) = layer(x, None, mask)
        assert torch.equal(out, ref)
        out.sum().backward()


def test_an_avx2_cpu_trains_an_lstm_in_bf16():
    """oneDNN capped at AVX2 (ONEDNN_MAX_CPU_ISA, as on an AVX2-only CPU): the detector sees the missing bf16
    LSTM kernel and an LSTM under bf16 autocast trains in fp32 instead of failing."""
    code = """
import torch, fairseq_local
from fairseq_local.patches import precision
ok = precision.cpu_rnn_kernel_ok("LSTM", torch.bfloat16, True)
lstm = torch.nn.LSTM(3, 4)
with torch.autocast("cpu", dtype=torch.bfloat16):
    out, _ = lstm(torch.randn(5, 2, 3))
out.float().sum().backward()
print(ok, out.dtype)
"""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ok, dtype = proc.stdout.split()
    assert dtype == ("torch.bfloat16" if ok == "True" else "torch.float32")
    if platform.machine() in ("x86_64", "AMD64"):
        assert ok == "False" and "no bfloat16 kernel for torch.nn.LSTM under autocast" in proc.stderr


@pytest.mark.parametrize("cell", ["LSTM", "GRU", "RNN"])
def test_torchscript_compiles_torch_rnns_with_the_plugin_imported(cell):
    """The fallback wrapper leaves TorchScript working: ``torch.jit.script(nn.LSTM(4, 4))`` compiles
    torch's own overloads, and a scripted module that calls the RNN gives the eager outputs."""

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, cell)(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out, _ = self.rnn(x)
            return out

    from fairseq_local.patches import precision

    assert getattr(getattr(torch.nn, cell).forward, precision._MARK, False)  # the fallback is installed
    assert {"forward__0", "forward__1"} <= set(torch.jit.script(getattr(torch.nn, cell)(4, 4))._c._method_names())
    torch.manual_seed(0)
    encoder, x = Encoder(), torch.randn(3, 2, 4)
    assert torch.equal(torch.jit.script(encoder)(x), encoder(x))
