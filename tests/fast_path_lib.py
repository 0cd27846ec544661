"""Helpers of the fast-path tests (tests/test_fast_path.py, tests/test_cuda_graphs.py): the
CUDA-graph path on CPU (the ``graphs`` fixture: ``cuda_graphs.ReplayBackend`` stands in for CUDA
graphs), comparisons with the eager loop at a tensor's scale, padding layouts and tiny models built
through fairseq's registry."""
import os

import pytest
import torch
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_local  # noqa: F401  (registers everything)
from fairseq_local.modules import cuda_graphs, fast_path

@pytest.fixture(autouse=True)
def _single_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def graphs():
    """The CUDA-graph path on CPU, strict: ``cuda-graphs`` captures CPU loops with the stand-in
    backend, and any capture failure or mismatch with eager is an error, so a test passes only when
    its graphs really ran (the counters of ``fast_path.stats`` start from zero)."""
    fast_path.reset()
    with cuda_graphs.use_backend("cpu", cuda_graphs.ReplayBackend()) as backend, cuda_graphs.strict_mode():
        yield backend


def set_impl(module, impl):
    """``graphs`` is ``cuda-graphs`` (with the ``graphs`` fixture installed)."""
    return fast_path.set_rnn_impl(module, "cuda-graphs" if impl == "graphs" else impl)


def assert_close(a, b, what, rtol=1e-5, scale=None):
    """|a - b| <= rtol * max|a| (relative to the tensor's scale, so near-zero entries don't dominate)."""
    scale = a.abs().max().item() if scale is None else scale
    err = (a - b).abs().max().item()
    assert err <= rtol * max(scale, 1e-6), f"{what}: max abs diff {err:.3g} vs scale {scale:.3g}"


def assert_grads_close(eager, comp, what, rtol=1e-5):
    """Every parameter's gradient, relative to the largest gradient entry of the module: a
    parameter whose gradient nearly cancels (the MC-RNN channel attention at initialisation: 1e-7
    against 1e0 elsewhere) is compared at the scale of the whole gradient, not at its own."""
    assert eager.keys() == comp.keys() and eager, what
    scale = max(g.abs().max().item() for g in eager.values())
    for n in eager:
        assert_close(eager[n], comp[n], f"{what}: grad of {n}", rtol, scale)


def padding(T, B, layout):
    """``[T, B]`` bool, True at padding: column b has ``T - b`` real tokens at the start ("right")
    or the end ("left"); ``holes``: an isolated padded position as well."""
    mask = torch.zeros(T, B, dtype=torch.bool)
    for b in range(B):
        n = T - b
        if layout == "left":
            mask[: T - n, b] = True
        else:
            mask[n:, b] = True
    if layout == "holes":
        mask[1, 0] = True
    return mask


def run_layer(layer, impl, x, mask, state=None):
    set_impl(layer, impl)
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out, new_state = layer(x, state, mask)
    leaves = [s for s in torch.utils._pytree.tree_leaves(new_state) if s.is_floating_point()]
    loss = (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() + sum((s ** 2).sum() for s in leaves)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters() if p.grad is not None}
    return out.detach(), [s.detach() for s in leaves], grads, x.grad


class _FakeCuda:
    is_cuda = True


# tiny models
TINY_S2S = ["--encoder-embed-dim", "6", "--encoder-hidden-size", "6", "--decoder-embed-dim", "6",
            "--decoder-hidden-size", "6", "--attention-dim", "6", "--encoder-layers", "1", "--decoder-layers", "1",
            "--dropout", "0"]


def dictionary_dir(tmp_path, n=20):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}", n=n - i)
    for name in ("dict.src.txt", "dict.tgt.txt", "dict.txt"):
        d.save(str(tmp_path / name))
    return str(tmp_path)


def parse(data, task, arch, extra):
    argv = [data, "--user-dir", USER_DIR, "--task", task, "--arch", arch, "--cpu", "--optimizer", "adam",
            "--lr", "1e-3"]
    if task == "translation":
        argv += ["--source-lang", "src", "--target-lang", "tgt"]
    return options.parse_args_and_arch(options.get_training_parser(), argv + extra)


def build(data, task, arch, extra):
    cfg = convert_namespace_to_omegaconf(parse(data, task, arch, extra))
    t = tasks.setup_task(cfg.task)
    torch.manual_seed(1)
    return cfg, t.build_model(cfg.model), t


def translation_batch(task, B=3, S=5, T=4, seed=0):
    """Left-padded sources of lengths S, S-1, ... and right-padded targets, as fairseq batches."""
    g = torch.Generator().manual_seed(seed)
    d = task.target_dictionary
    src = torch.full((B, S), d.pad())
    tgt = torch.full((B, T), d.pad())
    for b in range(B):
        n, m = S - b, T - (b % 2)
        src[b, S - n:] = torch.randint(d.nspecial, len(d), (n,), generator=g)
        src[b, -1] = d.eos()
        tgt[b, :m] = torch.randint(d.nspecial, len(d), (m,), generator=g)
        tgt[b, m - 1] = d.eos()
    prev = torch.cat([torch.full((B, 1), d.eos()), tgt[:, :-1]], 1)
    return {"src_tokens": src, "src_lengths": (src != d.pad()).sum(1), "prev_output_tokens": prev}, tgt


USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_local")
