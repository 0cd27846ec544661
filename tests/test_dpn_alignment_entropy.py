"""Tests of scripts/analysis/dpn_alignment_entropy.py (Section 5.5 / Table 5 and Figure 2 of DPN-S2S)."""
import math
import warnings
from pathlib import Path

import pytest
import torch

from fairseq_local_repro.analysis import dpn_alignment_entropy as ent

REPO = Path(__file__).resolve().parent.parent


def test_hand_made_attention_matrix():
    # sentence 0: two target tokens, alignments (1/2, 1/2, 0) and (1, 0, 0) -> (ln 2 + 0) / 2
    # sentence 1: one real target token (1/4 x 4) and one padded row, ignored  -> ln 4
    attn = torch.tensor([
        [[0.5, 0.5, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]],
        [[0.25, 0.25, 0.25, 0.25], [0.9, 0.1, 0.0, 0.0]],
    ])
    mask = torch.tensor([[True, True], [True, False]])
    per_sentence = ent.sentence_entropies(attn, mask)
    assert torch.allclose(per_sentence, torch.tensor([math.log(2) / 2, math.log(4)], dtype=torch.double))
    table = ent.EntropyTable()
    table.add("cc", per_sentence)
    table.add("cc", torch.tensor([0.0], dtype=torch.double))  # a third sentence with a one-hot alignment
    assert table.means() == pytest.approx({"cc": (math.log(2) / 2 + math.log(4)) / 3})
    text = table.format()
    assert "over 3 sentences" in text and f"{(math.log(2) / 2 + math.log(4)) / 3:.3f}" in text
    assert text.splitlines()[-1].startswith("- : a flow this model does not have")  # only cc was added
    for flow in ent.FLOWS:
        table.add(flow, torch.tensor([1.0], dtype=torch.double))
    assert "- :" not in table.format()


def test_normalised_entropy_is_one_for_a_uniform_alignment_and_undefined_for_one_source_position():
    # sentence 0: 4 source positions, a uniform and a one-hot alignment -> (1 + 0) / 2
    # sentence 1: 2 source positions (2 padded), one real target token with (1/2, 1/2) -> 1
    # sentence 2: 1 source position: no normalised entropy
    attn = torch.tensor([
        [[0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]],
        [[0.5, 0.5, 0.0, 0.0], [0.3, 0.7, 0.0, 0.0]],
        [[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]],
    ])
    mask = torch.tensor([[True, True], [True, False], [True, True]])
    got = ent.normalised_sentence_entropies(attn, mask, torch.tensor([4, 2, 1]))
    assert got[:2].tolist() == pytest.approx([0.5, 1.0]) and math.isnan(got[2])
    table = ent.LayerHeadTable()
    table.add(("layer", "cc", 1), got)  # the NaN sentence is left out of the mean
    assert table.nested("layer") == {"cc": [None, 0.75]}


@pytest.mark.parametrize("padded", [False, True])
def test_head_weights_equal_fairseqs_own_per_head_weights(padded):
    """head_weights recomputes every head's alignment from the projections; fairseq's step path
    (incremental state, need_head_weights) returns the same heads, its full pass their mean."""
    from fairseq_local.modules.dpn_paths import CrossAttention

    torch.manual_seed(0)
    mha = CrossAttention(8, 2, 0.0).eval()
    query, key = torch.randn(3, 2, 8), torch.randn(5, 2, 8)
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2]) if padded else None
    ours = ent.head_weights(mha, query, key, kpm)
    _, per_head = mha(query=query, key=key, value=key, key_padding_mask=kpm, incremental_state={}, static_kv=True,
                      need_weights=True, need_head_weights=True)
    assert ours.shape == (2, 2, 3, 5) and torch.allclose(ours, per_head, atol=1e-6)
    _, mean = mha(query=query, key=key, value=key, key_padding_mask=kpm, need_weights=True)
    assert torch.allclose(ours.mean(0), mean, atol=1e-6)
    if padded:
        assert ours[:, 1, :, 3:].abs().max() == 0


def test_layer_selection():
    a, b = torch.full((1, 1, 2), 0.5), torch.tensor([[[1.0, 0.0]]])
    assert torch.equal(ent.select_layer([a, b], "last"), b)
    assert torch.equal(ent.select_layer([a, b], "0"), a)
    assert torch.allclose(ent.select_layer([a, b], "mean"), torch.tensor([[[0.75, 0.25]]]))
    with pytest.raises(ValueError, match="2 decoder layers"):
        ent.select_layer([a, b], "5")


def test_command_on_a_trained_tiny_model(tmp_path):
    """fairseq-train a tiny DPN-S2S for two updates, then run the command (table, JSON, heatmap PNG)."""
    from contract_lib import make_translation_data
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli

    warnings.filterwarnings("ignore", category=FutureWarning)
    data, task_args = make_translation_data(tmp_path)
    argv = [str(data), "--user-dir", str(REPO / "fairseq_local"), "--task", "translation", "--arch", "dpn_s2s_m9",
            "--cpu", *task_args, "--encoder-embed-dim", "8", "--decoder-embed-dim", "8", "--encoder-conv-dim", "8",
            "--decoder-conv-dim", "8", "--encoder-ffn-embed-dim", "16", "--decoder-ffn-embed-dim", "16",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--optimizer", "nag", "--lr", "0.25",
            "--clip-norm", "0.1", "--max-tokens", "400", "--max-update", "2", "--save-dir", str(tmp_path / "ckpt"),
            "--no-progress-bar", "--num-workers", "0", "--no-epoch-checkpoints"]
    train_cli.main(convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv)))
    out_json, out_png = tmp_path / "entropy.json", tmp_path / "fig2.png"
    table = ent.main([str(data), "--path", str(tmp_path / "ckpt/checkpoint_last.pt"), "--gen-subset", "valid",
                      *task_args, "--cpu", "--json", str(out_json), "--heatmap", str(out_png), "--sentence-id", "1",
                      "--layer", "mean"])
    means = table.means()
    assert set(means) == {"cc", "ca", "ac", "aa"}
    assert table.counts["cc"] == 8  # every valid sentence
    for v in means.values():
        assert 0.0 < v <= math.log(14) + 1e-9  # at most the entropy of a uniform alignment over the source
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import json

    saved = json.loads(out_json.read_text())
    assert saved["entropy"] == pytest.approx(means)
    last = ent.main([str(data), "--path", str(tmp_path / "ckpt/checkpoint_last.pt"), "--gen-subset", "valid",
                     *task_args, "--cpu", "--json", str(out_json), "--layer", "last"]).means()
    saved = json.loads(out_json.read_text())
    assert set(saved["per_layer"]) == set(ent.FLOWS)
    for flow in ent.FLOWS:  # the last layer's row is the table's --layer last entropy
        assert saved["per_layer"][flow][-1] == pytest.approx(last[flow], abs=1e-4)
        assert all(0.0 < v <= 1.0 for v in saved["per_layer_normalised"][flow])
    assert set(saved["per_head_normalised"]) == {"ac", "aa"}  # the SAN decoder path's heads
    for rows in saved["per_head_normalised"].values():
        assert len(rows) == len(saved["per_layer"]["ac"]) and all(len(r) == 2 for r in rows)  # 2 heads a layer
        assert all(0.0 < v <= 1.0 for r in rows for v in r)


def test_bad_layer_option_is_a_clear_error(tmp_path, capsys):
    ckpt = tmp_path / "x.pt"
    ckpt.write_bytes(b"")
    with pytest.raises(SystemExit):
        ent.parse_args([str(tmp_path), "--path", str(ckpt), "--layer", "top"])
    assert "--layer must be last, mean or an integer" in capsys.readouterr().err
