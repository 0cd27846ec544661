"""Shared pytest setup: every test must leave torch's global defaults as it found them."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _torch_defaults_unchanged(request):
    dtype = torch.get_default_dtype()
    yield
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)
        pytest.fail(f"{request.node.nodeid} changed torch's default dtype and did not restore it")


def shared_data_dir():
    """The small real corpora (`../shared/data` from the project root, or $FAIRSEQ_LOCAL_SHARED_DATA).

    Returns a Path or None when the corpora are not on this machine."""
    import os
    from pathlib import Path

    env = os.environ.get("FAIRSEQ_LOCAL_SHARED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    return path if (path / "multi30k-de-en" / "train.de").is_file() else None


@pytest.fixture(scope="session")
def shared_data():
    """Path of the real corpora; tests that need them are skipped (with the reason) where absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("real corpora not found: set FAIRSEQ_LOCAL_SHARED_DATA to the shared/data folder")
    return path


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """Tiny trained checkpoints shared by the tests of one session (a few seconds each):
    ``{"mt": (ckpt, data, task args), "lm": ..., "lattice": ...}``: an MC-RNN translation model, an
    MC-RNN language model trained with ``--task stateful_language_modeling`` and a DWL-GRU lattice
    model, each on the tiny synthetic corpus its family's contract spec uses."""
    import os
    import subprocess
    from pathlib import Path

    from contract_lib import console_script, make_lm_data, make_translation_data
    from contract_specs.lattice import make_lattice_data

    here = Path(__file__).resolve().parent

    s2s = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
           "--decoder-hidden-size", "8", "--attention-dim", "8"]
    common = ["--optimizer", "adam", "--lr", "0.01", "--max-update", "2", "--cpu", "--no-epoch-checkpoints",
              "--num-workers", "0", "--seed", "1", "--no-progress-bar", "--required-batch-size-multiple", "1"]
    recipes = {
        "mt": (make_translation_data, ["--arch", "mc_rnn_iwslt_de_en_2", *s2s, "--max-tokens", "500"]),
        "lm": (make_lm_data, ["--task", "stateful_language_modeling", "--arch", "mc_rnn_lm_ptb",
                              "--decoder-embed-dim", "8", "--decoder-hidden-size", "8", "--batch-size", "4"]),
        "lattice": (make_lattice_data, ["--task", "lattice_translation", "--arch", "lattice_dwl_gating", *s2s,
                                        "--decoder-out-embed-dim", "8", "--batch-size", "8"]),
    }
    out = {}
    for name, (make_data, args) in recipes.items():
        tmp = tmp_path_factory.mktemp(f"tiny_{name}")
        data, task_args = make_data(tmp, n_train=24, n_valid=8)
        save = tmp / "ckpt"
        proc = subprocess.run([console_script("fairseq-train"), str(data), "--user-dir",
                               str(here.parent / "fairseq_local"), *args, *task_args, *common, "--save-dir", str(save)],
                              capture_output=True, text=True, timeout=1200,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = (save / "checkpoint_best.pt", data, task_args)
    return out
