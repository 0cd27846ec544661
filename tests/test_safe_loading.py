"""Safe loading: fairseq checkpoints load with weights_only=True; anything else is refused in one
line; importing the plugin leaves logging as it was."""
import fractions
import subprocess
import sys

import pytest
import torch

import fairseq_local
from contract_lib import REPO, make_translation_data
from fairseq import checkpoint_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq_local.safe_loading import UnsafeCheckpointError, safe_load

TINY_LSTM = ["--arch", "lstm", "--encoder-embed-dim", "8", "--encoder-hidden-size", "8",
             "--decoder-embed-dim", "8", "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_translation_data(tmp_path_factory.mktemp("safe"))


def _train(data, save_dir, extra):
    from fairseq import distributed_utils
    from fairseq_cli import train

    data_dir, task_args = data
    argv = [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", "translation", "--cpu",
            *task_args, *TINY_LSTM, "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "400",
            "--max-epoch", "1", "--save-dir", str(save_dir), "--no-progress-bar", "--num-workers", "0", *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
    return save_dir / "checkpoint_last.pt"


def test_eval_bleu_checkpoint_loads_weights_only(data, tmp_path):
    """--eval-bleu logs numpy counts and a numpy best score into the checkpoint."""
    ckpt = _train(data, tmp_path, ["--eval-bleu", "--eval-bleu-args", '{"beam": 1, "max_len_b": 10}',
                                   "--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"])
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert "best" in state["extra_state"] and state["cfg"]["task"]["eval_bleu"] is True
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)])
    assert cfg.task.eval_bleu
    assert sum(p.numel() for p in models[0].parameters()) == sum(v.numel() for v in state["model"].values())


def test_unknown_global_is_refused_in_one_line(data, tmp_path):
    ckpt = _train(data, tmp_path, [])
    state = torch.load(ckpt, map_location="cpu", weights_only=True)
    state["extra_state"]["evil"] = fractions.Fraction(1, 3)  # any class not on the allow-list
    bad = tmp_path / "bad.pt"
    torch.save(state, bad)
    with pytest.raises(UnsafeCheckpointError) as err:
        checkpoint_utils.load_checkpoint_to_cpu(str(bad))
    msg = str(err.value)
    assert "\n" not in msg and str(bad) in msg and "fractions.Fraction" in msg
    with pytest.raises(UnsafeCheckpointError):
        safe_load(str(bad))
    # the good checkpoint still loads through the same path
    assert checkpoint_utils.load_checkpoint_to_cpu(str(ckpt))["model"].keys() == state["model"].keys()


def test_allow_list_is_explicit():
    names = {f"{g.__module__}.{g.__qualname__}" for g in fairseq_local.safe_loading.SAFE_GLOBALS}
    assert "argparse.Namespace" in names and "omegaconf.dictconfig.DictConfig" in names
    assert not any(n.startswith(("os.", "subprocess.", "posix.", "builtins.eval", "builtins.exec")) for n in names)


def test_import_keeps_root_logger_quiet():
    code = ("import logging; logging.getLogger().setLevel(logging.WARNING); import fairseq_local; "
            "r = logging.getLogger(); print(r.level, len(r.handlers))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    level, handlers = proc.stdout.split()
    assert int(level) == 30 and int(handlers) == 0, proc.stdout
    assert "tensorboardX" not in proc.stderr and "DEBUG" not in proc.stderr, proc.stderr


def test_random_bytes_are_not_a_complete_checkpoint(tmp_path):
    """Bytes that are no zip archive go to torch's legacy unpickler, whose stack machine fails on
    garbage with whatever it meets (EOFError, IndexError, KeyError, UnpicklingError...): each is one
    CheckpointError naming the file, never a bare exception."""
    import random

    from fairseq_local_core.errors import UserError

    rng = random.Random(0)
    for i in range(64):
        path = tmp_path / f"r{i}.pt"
        # the legacy pickle magic first, as a checkpoint of old torch starts: the unpickler reads on
        path.write_bytes((b"\x80\x02" if i % 2 else b"") + rng.randbytes(rng.choice([3, 64, 4096])))
        with pytest.raises(UserError, match=rf"{path}: |{path} is not a complete checkpoint \("):
            safe_load(str(path))
