"""scripts/average_checkpoints.py: the mean of every model parameter (fairseq's semantics: first
input's other state, newest-first selection from a directory), safe loading, one-line refusals,
and an output that fairseq loads and that never appears half-written."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contract_lib import REPO, USER_DIR, console_script, make_translation_data

SCRIPT = REPO / "scripts" / "average_checkpoints.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def average(*args, ok=True):
    proc = subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=300)
    if ok:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def fake_checkpoint(path, seed, shape=(3, 4)):
    g = torch.Generator().manual_seed(seed)
    state = {"model": {"w": torch.randn(shape, generator=g),
                       "h": torch.randn(5, generator=g).half(),
                       "n": torch.tensor([seed * 3 + 1])},
             "extra_state": {"epoch": seed}, "optimizer_history": [{"num_updates": 10 * seed}]}
    torch.save(state, path)
    return state


def test_mean_of_each_parameter_and_newest_first_selection(tmp_path):
    states = {e: fake_checkpoint(tmp_path / f"checkpoint{e}.pt", e) for e in (1, 2, 3, 10)}
    fake_checkpoint(tmp_path / "checkpoint_best.pt", 99)  # never picked by --num-epoch-checkpoints
    proc = average("--inputs", tmp_path, "--num-epoch-checkpoints", 3, "--output", tmp_path / "avg.pt")
    assert f"{tmp_path}/checkpoint10.pt {tmp_path}/checkpoint3.pt {tmp_path}/checkpoint2.pt" in proc.stderr
    avg = torch.load(tmp_path / "avg.pt", weights_only=True)
    picked = [states[e]["model"] for e in (10, 3, 2)]
    want_w = torch.stack([m["w"].double() for m in picked]).mean(0).float()
    assert torch.equal(avg["model"]["w"], want_w)
    assert avg["model"]["h"].dtype == torch.float16
    assert torch.equal(avg["model"]["h"], torch.stack([m["h"].double() for m in picked]).mean(0).half())
    assert avg["model"]["n"].tolist() == [(31 + 10 + 7) // 3]  # integer buffers: floor of the mean
    assert avg["extra_state"] == {"epoch": 10}  # everything else from the newest input
    # an upper bound skips later epochs; explicit files keep their order (the first gives the rest)
    average("--inputs", tmp_path, "--num-epoch-checkpoints", 2, "--checkpoint-upper-bound", 2,
            "--output", tmp_path / "upto2.pt")
    upto2 = torch.load(tmp_path / "upto2.pt", weights_only=True)
    assert torch.equal(upto2["model"]["w"], (states[1]["model"]["w"].double() + states[2]["model"]["w"].double()).div(2).float())
    assert upto2["extra_state"] == {"epoch": 2}
    average("--inputs", tmp_path / "checkpoint1.pt", tmp_path / "checkpoint3.pt", "--output", tmp_path / "two.pt")
    assert torch.load(tmp_path / "two.pt", weights_only=True)["extra_state"] == {"epoch": 1}


class NotAllowed:  # a global that is on no allow-list
    pass


@pytest.mark.parametrize("case,needle", [
    ("shape", "checkpoint2.pt: 'w' has shape (4, 4), {d}/checkpoint1.pt has (3, 4)"),
    ("keys", "checkpoint2.pt has other parameters than {d}/checkpoint1.pt (e.g. 'extra')"),
    ("unsafe", "checkpoint2.pt"),
    ("truncated", "checkpoint2.pt is not a complete checkpoint"),
    ("missing", "checkpoint 'nope.pt' does not exist"),
    ("too_few", "found 2 epoch checkpoints in {d}, fewer than the 5 requested"),
])
def test_bad_inputs_one_line_and_nothing_written(tmp_path, case, needle):
    fake_checkpoint(tmp_path / "checkpoint1.pt", 1)
    second = tmp_path / "checkpoint2.pt"
    if case == "shape":
        fake_checkpoint(second, 2, shape=(4, 4))
    elif case == "keys":
        state = fake_checkpoint(second, 2)
        state["model"]["extra"] = torch.zeros(1)
        torch.save(state, second)
    elif case == "unsafe":
        state = fake_checkpoint(second, 2)
        state["extra_state"]["obj"] = NotAllowed()
        torch.save(state, second)
    else:
        fake_checkpoint(second, 2)
        if case == "truncated":
            second.write_bytes(second.read_bytes()[:200])
    out = tmp_path / "out" / "avg.pt"
    out.parent.mkdir()
    inputs = {"missing": ["--inputs", tmp_path / "checkpoint1.pt", "nope.pt"],
              "too_few": ["--inputs", tmp_path, "--num-epoch-checkpoints", 5]}.get(
        case, ["--inputs", tmp_path / "checkpoint1.pt", second])
    proc = average(*inputs, "--output", out, ok=False)
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("averaging")]
    assert proc.returncode != 0 and len(err) == 1, proc.stderr
    assert err[0].startswith("average_checkpoints.py: error: ") and needle.format(d=tmp_path) in err[0], err[0]
    assert os.listdir(out.parent) == []  # no output, no temporary file


def test_average_of_real_fairseq_checkpoints_loads_in_fairseq(tmp_path):
    """Two epochs of a tiny fairseq-train; the averaged checkpoint loads through fairseq's own loader
    with our model's parameters equal to the mean of the two epochs' parameters."""
    data, _ = make_translation_data(tmp_path, n_train=24, n_valid=8)
    save = tmp_path / "ckpt"
    subprocess.run([console_script("fairseq-train"), str(data), "--user-dir", USER_DIR, "--arch", "mc_rnn_demo",
                    "--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-hidden-size", "8",
                    "--decoder-hidden-size", "8", "--attention-dim", "8",
                    "--optimizer", "adam", "--lr", "0.01", "--max-tokens", "200", "--max-epoch", "2", "--cpu",
                    "--save-dir", str(save), "--no-progress-bar", "--num-workers", "0", "--seed", "1",
                    "--disable-validation"], check=True, capture_output=True, env=ENV, timeout=600)
    average("--inputs", save, "--num-epoch-checkpoints", 2, "--output", tmp_path / "avg.pt")
    import fairseq_local  # noqa: F401
    from fairseq import checkpoint_utils

    models, _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "avg.pt")])
    e1, e2 = (torch.load(save / f"checkpoint{e}.pt", weights_only=True)["model"] for e in (1, 2))
    assert any(not torch.equal(e1[k], e2[k]) for k in e1)
    for name, p in models[0].state_dict().items():
        assert torch.equal(p, ((e1[name].double() + e2[name].double()) / 2).to(p.dtype)), name
    from fairseq.models import ARCH_MODEL_REGISTRY

    assert isinstance(models[0], ARCH_MODEL_REGISTRY["mc_rnn_demo"])
