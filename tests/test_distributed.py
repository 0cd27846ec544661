"""A 2-rank gloo run on CPU of one of our architectures, then a resume across both ranks; the
checkpoints (which then hold omegaconf containers) load with weights_only=True."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contract_lib import REPO, load_specs, make_translation_data
from fairseq import checkpoint_utils
from fairseq.models import ARCH_MODEL_NAME_REGISTRY

PREFERRED = ["mc_rnn", "rnnsearch", "parallel_lstm", "dpn_s2s"]


def _pick_arch():
    specs = load_specs()
    ours = {m: s for m, s in specs.items() if s.task == "translation"}
    for model in PREFERRED + sorted(ours):
        if model in ours:
            archs = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == model and a != model)
            return (archs or [model])[0], ours[model]
    pytest.fail("no translation model of ours has a contract spec")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_ranks(argv, log_dir, tag):
    port = _free_port()
    procs = []
    for rank in range(2):
        cmd = [str(Path(sys.executable).parent / "fairseq-train"), *argv, "--cpu", "--distributed-world-size", "2",
               "--distributed-backend", "gloo", "--distributed-init-method", f"tcp://127.0.0.1:{port}",
               "--distributed-no-spawn", "--ddp-backend", "legacy_ddp", "--distributed-rank", str(rank)]
        log = open(log_dir / f"{tag}.rank{rank}.log", "w")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                       env=dict(os.environ, OMP_NUM_THREADS="1")), log))
    for p, log in procs:
        try:
            rc = p.wait(timeout=600)
        finally:
            log.close()
        assert rc == 0, (log_dir / f"{tag}.rank{procs.index((p, log))}.log").read_text()[-3000:]
    return [(log_dir / f"{tag}.rank{r}.log").read_text() for r in range(2)]


def test_two_rank_gloo_train_and_resume(tmp_path):
    arch, spec = _pick_arch()
    data_dir, task_args = make_translation_data(tmp_path / "data")
    save = tmp_path / "ckpt"
    base = [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", "translation", "--arch", arch,
            *task_args, *spec.tiny_args, "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "200",
            "--save-dir", str(save), "--no-progress-bar", "--log-format", "simple", "--log-interval", "1",
            "--num-workers", "0", "--seed", "1", *spec.train_args]
    logs = _run_two_ranks([*base, "--max-update", "3"], tmp_path, "first")
    assert "distributed init (rank 1)" in logs[1] or "rank 1" in logs[1]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    logs = _run_two_ranks([*base, "--max-update", "5"], tmp_path, "resume")
    assert "Loaded checkpoint" in logs[0]
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=True)
    assert state["optimizer_history"][-1]["num_updates"] == 5
    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task([str(save / "checkpoint_last.pt")])
    assert cfg.distributed_training.distributed_world_size == 2
    for name, p in models[0].state_dict().items():
        assert torch.equal(p, state["model"][name])
