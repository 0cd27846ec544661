"""Cell-masking analysis command (scripts/analysis/parallel_cells_masking.py)."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import fairseq_local  # noqa: F401
from contract_lib import REPO, make_lm_data
from fairseq import checkpoint_utils, distributed_utils, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_local_repro.analysis import parallel_cells_masking as masking

USER_DIR = str(REPO / "fairseq_local")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from fairseq_cli import train as train_cli

    tmp = tmp_path_factory.mktemp("mask")
    data_dir, _ = make_lm_data(tmp, n_train=60, n_valid=30)
    save = tmp / "ckpt"
    argv = [str(data_dir), "--user-dir", USER_DIR, "--task", "stateful_language_modeling",
            "--arch", "parallel_lstm_lm_420h_wide3_1layer", "--decoder-embed-dim", "8",
            "--decoder-hidden-size", "9", "--tokens-per-sample", "5", "--batch-size", "3",
            "--optimizer", "adam", "--lr", "0.01", "--max-update", "8", "--cpu", "--save-dir", str(save),
            "--no-progress-bar", "--num-workers", "0", "--seed", "1"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    return data_dir, save / "checkpoint_last.pt"


def test_masking_table_and_chart(trained, tmp_path, capsys):
    data_dir, ckpt = trained
    words = [line.split()[0] for line in (data_dir / "dict.txt").read_text().splitlines()[:5]]
    groups = tmp_path / "groups.txt"
    groups.write_text(f"# test groups\nfrequent: {' '.join(words[:3])} notaword\nsingle: {words[3]}\n")
    out_png, out_json = tmp_path / "mask.png", tmp_path / "mask.json"
    result = masking.main(["--path", str(ckpt), "--data", str(data_dir), "--gen-subset", "valid",
                           "--word-groups", str(groups), "--batch-size", "3", "--out", str(out_png),
                           "--json", str(out_json), "--cpu"])
    assert "notaword" in capsys.readouterr().err
    assert result["conditions"] == ["none", "mask1", "mask2", "mask3"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(out_json.read_text())["overall"] == result["overall"]

    # unmasked overall perplexity == the whole valid stream scored in one pass
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(ckpt)], arg_overrides={"data": str(data_dir)})
    model = models[0].eval()
    task.load_dataset("valid")
    rows = task.dataset("valid").rebatch(bsz=3).rows
    with torch.no_grad():
        lp = F.log_softmax(model(rows[:, :-1])[0].double(), -1).gather(-1, rows[:, 1:].unsqueeze(-1))
    real = rows[:, 1:].ne(task.target_dictionary.pad())  # evaluation rows may end in one padding target
    assert abs(result["overall"]["none"] - math.exp(-lp.squeeze(-1)[real].mean().item())) < 1e-4 * result["overall"]["none"]
    # masking any cell changes the perplexity; a one-word group equals that word's perplexity
    for cond in ("mask1", "mask2", "mask3"):
        assert abs(result["overall"][cond] - result["overall"]["none"]) > 1e-6
    assert result["groups"]["single"] == result["words"][words[3]]
    # the command leaves the model unmasked
    assert all(layer.masked_cells == () for layer in model.decoder.layers)


def test_bad_word_group_file(tmp_path):
    bad = tmp_path / "g.txt"
    bad.write_text("no colon here\n")
    with pytest.raises(ValueError, match=r"g.txt:1: expected 'NAME: word word \.\.\.'"):
        masking.parse_word_groups(str(bad))
