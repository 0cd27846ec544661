"""Our torch RNNs compute in float32 where this CPU lacks their low-precision kernel (oneDNN's LSTM
needs AVX-512 for bf16): fairseq_local/modules/rnn_precision.py."""
import logging
import os
import platform
import subprocess
import sys

import pytest
import torch

from fairseq_local.modules import rnn_precision

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
    ok = rnn_precision.cpu_rnn_kernel_ok(cell, dtype, autocast)
    module = getattr(torch.nn, cell)(3, 4)  # torch's own forward

    def run():
        out, _ = _call(getattr(torch.nn, cell).forward, module, torch.randn(5, 2, 3), dtype, autocast)
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
    torch.manual_seed(0)
    lstm, x = rnn_precision.LSTM(3, 4), torch.randn(5, 2, 3)
    ref, _ = lstm(x)
    with torch.autocast("cpu", dtype=dtype):
        out, (h, c) = lstm(x)
    if rnn_precision.cpu_rnn_kernel_ok("LSTM", dtype, True):
        assert out.dtype == dtype  # the machine's own low-precision kernel, no fallback
    else:
        assert out.dtype == torch.float32 and torch.equal(out, ref)
    assert torch.allclose(out.float(), ref, atol=2e-2)
    out.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in lstm.parameters())


@pytest.fixture
def no_low_precision_rnn(monkeypatch, caplog):
    """This machine as an AVX2-only CPU sees it: no low-precision RNN kernel at all."""
    monkeypatch.setattr(rnn_precision, "cpu_rnn_kernel_ok", lambda cell, dtype, autocast: False)
    monkeypatch.setattr(rnn_precision, "_warned", set())
    caplog.set_level(logging.WARNING, logger=rnn_precision.__name__)
    return caplog


@pytest.mark.parametrize("dtype", LOW, ids=LOW_IDS)
@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_rnn_fallback_under_autocast_is_the_fp32_computation(cell, dtype, no_low_precision_rnn):
    """Without the kernel, autocast's RNN call is the fp32 forward and backward, bit for bit, on a
    packed input with an initial state (TorchRNNLayer's padded path); one warning line says so."""
    from torch.nn.utils.rnn import pack_padded_sequence

    torch.manual_seed(0)
    rnn, x = getattr(rnn_precision, cell)(3, 4), torch.randn(5, 3, 3)
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
    lstm = rnn_precision.LSTM(3, 4).to(dtype)
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
import torch
from fairseq_local.modules import rnn_precision
ok = rnn_precision.cpu_rnn_kernel_ok("LSTM", torch.bfloat16, True)
lstm = rnn_precision.LSTM(3, 4)
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
