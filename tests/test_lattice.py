"""Lattice data path: format, validation errors, merging, builder/preprocess scripts, dataset, task."""
import re
import sys
from pathlib import Path

import pytest
import torch

from fairseq_local_core.lattice import Lattice, LatticeError, merge_tokenizations, read_lattices, unpack
from fairseq_local.data.lattice_dataset import LatticeBatch, LatticePairDataset, collate_lattices, load_lattice_dataset
from fairseq_local_repro.tools import build_lattices, preprocess_lattices

FIG1 = "下雨天地面积水"
# Figure 1 of Su et al. 2017 (c1..c7 = 下雨天地面积水): CTB, PKU and MSR tokenizations
CTB, PKU, MSR = ["下雨天", "地面", "积水"], ["下", "雨天", "地面", "积水"], ["下雨天", "地", "面积", "水"]


def test_figure1_merge():
    lat = merge_tokenizations(FIG1, [CTB, PKU, MSR])
    assert lat.edges == ((0, 1), (0, 3), (1, 3), (3, 4), (3, 5), (4, 6), (5, 7), (6, 7))
    assert lat.path == (0, 3, 5, 7)  # the first tokenization (CTB) is the primary path
    assert lat.words() == ["下", "下雨天", "雨天", "地", "地面", "面积", "积水", "水"]
    assert [e for e in lat.edges if e[1] == 3] == [(0, 3), (1, 3)]  # the two edges into v_3 (paper text)
    assert lat.nodes() == [0, 1, 3, 4, 5, 6, 7]
    assert Lattice.from_line(lat.to_line()) == lat


def test_chain_is_a_lattice_and_default_path():
    chain = Lattice.chain(["我们", "的", "被告人"])
    assert chain.edges == ((0, 2), (2, 3), (3, 6)) and chain.path_words() == ["我们", "的", "被告人"]
    lat = Lattice.from_line("下 雨 天\t0:1 0:3 1:3")  # no primary path: longest edge from each node
    assert lat.path == (0, 3)


@pytest.mark.parametrize("line,message", [
    ("下 雨 天\t0:1 1:4", "edge 1:4 out of range"),
    ("下 雨 天\t0:1 1:1 1:3", "edge 1:1 has i >= j"),
    ("下 雨 天\t0:2 2:1 0:3", "edge 2:1 has i >= j"),
    ("下 雨 天\t0:3 1:3", "node 1 is unreachable from node 0"),
    ("下 雨 天\t0:1 0:3", "node 1 does not reach the end node 3"),
    ("下 雨 天\t0:1 1:2", "node 3 is unreachable from node 0"),
    ("   ", "empty line"),
    ("下 雨 天\t0-1 1:3", "malformed edge '0-1'"),
    ("下 雨 天\t0:3 0:3", "duplicate edge 0:3"),
    ("下 雨 天\t0:1 1:3\t0 2 3", "primary path 0 2 3 is not a path"),
    ("下雨 天\t0:1", "single non-space characters"),
])
def test_malformed_lattice_lines_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.lat"
    path.write_text("下 雨 天\t0:3\n" + line + "\n", encoding="utf-8")
    with pytest.raises(LatticeError) as err:
        read_lattices(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}:2: ") and message in text and "\n" not in text


def test_tokenization_mismatch():
    with pytest.raises(LatticeError, match=r"^x:3: tokenization does not match its sentence at character 2"):
        merge_tokenizations(FIG1, [CTB, ["下", "雪天", "地面", "积水"]], where="x:3")
    with pytest.raises(LatticeError, match="covers 5 of the sentence's 7 characters"):
        merge_tokenizations(FIG1, [["下雨天", "地面"]])


def test_build_lattices_merge_mode_and_errors(tmp_path, capsys):
    files = []
    for name, toks in (("ctb", CTB), ("pku", PKU), ("msr", MSR)):
        p = tmp_path / f"t.{name}"
        p.write_text(" ".join(toks) + "\n我们 的\n", encoding="utf-8")
        files.append(str(p))
    out = tmp_path / "t.lat"
    assert build_lattices.main(["--merge", *files, "--output", str(out)]) == 0
    lats = read_lattices(str(out))
    assert lats[0] == merge_tokenizations(FIG1, [CTB, PKU, MSR]) and lats[1].edges == ((0, 2), (2, 3))

    Path(files[1]).write_text(" ".join(PKU) + "\n我 们 地\n", encoding="utf-8")  # line 2 does not match
    out2 = tmp_path / "t2.lat"
    assert build_lattices.main(["--merge", *files, "--output", str(out2)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{files[1]}:2: tokenization does not match" in err and not out2.exists()

    Path(files[2]).write_text(" ".join(MSR) + "\n", encoding="utf-8")
    assert build_lattices.main(["--merge", *files, "--output", str(out2)]) == 1
    assert "line counts differ" in capsys.readouterr().err and not out2.exists()

    raw = tmp_path / "raw.zh"
    raw.write_text(FIG1 + "\n\n", encoding="utf-8")
    assert build_lattices.main(["--input", str(raw), "--segmenters", "jieba,nosuch", "--output", str(out2)]) == 1
    assert "unknown segmenter 'nosuch'" in capsys.readouterr().err and not out2.exists()
    assert build_lattices.main(["--input", str(raw), "--segmenters", "char", "--output", str(out2)]) == 1
    assert f"{raw}:2: empty line" in capsys.readouterr().err and not out2.exists()


def test_build_lattices_with_real_segmenters(tmp_path):
    pytest.importorskip("jieba"), pytest.importorskip("thulac"), pytest.importorskip("snownlp")
    raw = tmp_path / "raw.zh"
    raw.write_text("我们的两个被告人在法庭上表示不服。\n他下雨天不出门。\n", encoding="utf-8")
    out = tmp_path / "raw.lat"
    assert build_lattices.main(["--input", str(raw), "--output", str(out), "--segmenters", "jieba,thulac,snownlp",
                       "--workers", "2"]) == 0
    lats = read_lattices(str(out))
    assert len(lats) == 2 and "".join(lats[0].chars) == "我们的两个被告人在法庭上表示不服。"
    # thulac and snownlp split 两个 / 不服 where jieba does not: the lattice holds both
    words = set(lats[0].words())
    assert {"两个", "两", "个", "被告人", "不服", "不", "服"} <= words
    assert lats[0].path_words()[:4] == ["我们", "的", "两个", "被告人"]  # jieba's is the primary path


def _write_corpus(d: Path, n_tgt_lines=None):
    lines = [merge_tokenizations(FIG1, [CTB, PKU, MSR]).to_line(), Lattice.chain(["我们", "的", "被告人"]).to_line(),
             merge_tokenizations("他说不服", [["他说", "不服"], ["他", "说", "不", "服"]]).to_line()]
    tgts = ["rainy days the ground is wet", "our defendant", "he said he did not accept"]
    for split in ("train", "valid"):
        (d / f"{split}.zh").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
        (d / f"{split}.en").write_text("".join(x + "\n" for x in tgts[:n_tgt_lines]), encoding="utf-8")
    return lines


def _preprocess(raw: Path, dest: Path):
    return preprocess_lattices.main([
        "--source-lang", "zh", "--target-lang", "en", "--trainpref", str(raw / "train"),
        "--validpref", str(raw / "valid"), "--destdir", str(dest), "--workers", "1"])


def test_preprocess_roundtrip_and_collater(tmp_path):
    from fairseq.data import Dictionary

    lines = _write_corpus(tmp_path)
    dest = tmp_path / "bin"
    assert _preprocess(tmp_path, dest) == 0
    assert [p.name for p in dest.iterdir() if p.name.startswith(".")] == [".fairseq-local"]  # its marker, no temp dir
    src_dict = Dictionary.load(str(dest / "dict.zh.txt"))
    ds = load_lattice_dataset(str(dest / "valid.zh-en.zh"))
    assert list(ds.sizes) == [7, 6, 4]
    for k, line in enumerate(lines):
        lat = Lattice.from_line(line)
        n, s, e, w, p = unpack(ds[k].numpy())
        assert n == lat.n_chars and list(zip(s, e)) == list(lat.edges)
        assert [src_dict[i] for i in w] == lat.words()  # every edge word is in the dictionary
        assert list(p) == lat.path_edge_indices()
    # the target side is what fairseq-preprocess writes
    from fairseq.data import data_utils
    tgt_dict = Dictionary.load(str(dest / "dict.en.txt"))
    tgt = data_utils.load_indexed_dataset(str(dest / "valid.zh-en.en"), tgt_dict)
    assert tgt_dict.string(tgt[1]) == "our defendant"

    batch = collate_lattices([ds[0], ds[2]], src_dict.pad(), left_pad=True)
    idx = src_dict.index
    assert batch["lattice"].in_words.shape == (2, 8, 2)
    assert batch["lattice"].in_words[0, 3].tolist() == [idx("下雨天"), idx("雨天")]
    assert batch["lattice"].in_prev[0, 3].tolist() == [0, 1]
    assert batch["lattice"].in_mask[0, 1].tolist() == [True, False]
    assert not batch["lattice"].in_mask[0, 2].any() and not batch["lattice"].in_mask[1, 5:].any()
    assert batch["lattice"].out_words[0, 0].tolist() == [idx("下"), idx("下雨天")]
    assert batch["lattice"].out_next[0, 3].tolist() == [4, 5]
    assert batch["src_tokens"][1].tolist() == [src_dict.pad()] + [idx(w) for w in ["他说", "不服"]]
    assert batch["src_lengths"].tolist() == [3, 2]
    one_best = collate_lattices([ds[0]], src_dict.pad(), one_best=True)
    assert one_best["lattice"].in_mask.sum() == 3 and one_best["lattice"].in_words[0, 5, 0] == idx("地面")
    # the pair collater pads targets to the shape plan's declared length when given one
    pairs = LatticePairDataset(ds, src_dict, tgt, tgt.sizes, tgt_dict)
    plain = pairs.collater([pairs[0], pairs[1]])
    padded = pairs.collater([pairs[0], pairs[1]], pad_to_length={"source": 9, "target": 9})
    n = plain["target"].size(1)
    assert padded["target"].shape == (2, 9) and n < 9 and padded["target"][:, n:].eq(tgt_dict.pad()).all()
    assert padded["target"][:, :n].equal(plain["target"])
    assert padded["net_input"]["prev_output_tokens"][:, :n].equal(plain["net_input"]["prev_output_tokens"])
    assert padded["ntokens"] == plain["ntokens"]
    assert padded["net_input"]["src_tokens"].equal(plain["net_input"]["src_tokens"])


def test_preprocess_line_count_mismatch_writes_nothing(tmp_path, capsys):
    _write_corpus(tmp_path, n_tgt_lines=2)
    dest = tmp_path / "bin"
    assert _preprocess(tmp_path, dest) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'train.zh'} has 3 lines, {tmp_path / 'train.en'} has 2" in err
    assert not dest.exists() or not any(dest.iterdir())


def test_preprocess_malformed_lattice_names_line(tmp_path, capsys):
    _write_corpus(tmp_path)
    with open(tmp_path / "valid.zh", "a", encoding="utf-8") as f:
        f.write("下 雨\t0:1 1:3\n")
    (tmp_path / "valid.en").write_text("a\nb\nc\nd\n")
    assert _preprocess(tmp_path, tmp_path / "bin") == 1
    assert f"{tmp_path / 'valid.zh'}:4: edge 1:3 out of range" in capsys.readouterr().err
    assert not (tmp_path / "bin").exists() or not any((tmp_path / "bin").iterdir())


def _warnings(err):
    return [l for l in err.splitlines() if l.startswith("preprocess_lattices.py: warning:")]


def test_preprocess_warns_per_split_on_a_high_unk_rate(tmp_path, capsys):
    """One warning line per split and side over 1% <unk>, with the rate of the summary line and
    what to do; none when every word is in the dictionaries."""
    _write_corpus(tmp_path)
    assert _preprocess(tmp_path, tmp_path / "bin") == 0
    assert _warnings(capsys.readouterr().err) == []  # valid = train: no <unk>
    chain = Lattice.chain(["我们", "的", "法庭"]).to_line()  # 法庭 (and 法/庭's edges) unseen in training
    (tmp_path / "valid.zh").write_text(chain + "\n", encoding="utf-8")
    (tmp_path / "valid.en").write_text("our court\n", encoding="utf-8")
    assert _preprocess(tmp_path, tmp_path / "bin2") == 0
    err = capsys.readouterr().err
    pct = float(re.search(r"valid\.zh: 1 lattices, 3 edges, (\S+)% edges replaced", err).group(1))
    assert pct == pytest.approx(100 / 3, abs=0.01)
    zh, en = _warnings(err)
    assert zh.startswith("preprocess_lattices.py: warning: valid (zh): 33.3% of its 3 lattice edges are <unk>")
    assert "a larger vocabulary" in zh and "--thresholdsrc" in zh and "--nwordssrc" in zh
    assert en.startswith("preprocess_lattices.py: warning: valid (en): 33.3% of its 3 tokens are <unk>")
    assert "--thresholdtgt" in en and "--nwordstgt" in en


def test_preprocess_unk_warning_names_the_training_split(tmp_path, capsys):
    """--thresholdsrc 2 maps every word seen once to <unk>: the training split's source side is
    named (the target side, threshold 0, is not); a rate of exactly 1% or less is no warning."""
    from fairseq_local_repro.text.unk_rate import unk_warning

    _write_corpus(tmp_path)
    assert preprocess_lattices.main([
        "--source-lang", "zh", "--target-lang", "en", "--trainpref", str(tmp_path / "train"),
        "--destdir", str(tmp_path / "bin"), "--workers", "1", "--thresholdsrc", "2"]) == 0
    lines = _warnings(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith("preprocess_lattices.py: warning: train (zh): 100.0% of its 17 lattice edges")
    assert unk_warning("p", "valid", 1.0, 100, "fix") is None and unk_warning("p", "valid", float("nan"), 0, "x") is None
    assert unk_warning("p", "test", 1.05, 2000, "fix") == ("p: warning: test: 1.1% of its 2000 tokens are <unk>, "
                                                          "words or BPE pieces not in the dictionary (more than 1%: fix)")


def test_task_interactive_builds_lattices_on_the_fly(tmp_path):
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq import options

    _write_corpus(tmp_path)
    dest = tmp_path / "bin"
    assert _preprocess(tmp_path, dest) == 0
    parser = options.get_interactive_generation_parser()
    args = options.parse_args_and_arch(parser, [str(dest), "--task", "lattice_translation", "--source-lang", "zh",
                                                "--target-lang", "en", "--lattice-segmenters", "char,jieba",
                                                "--path", "unused.pt"])
    task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
    toks, lengths = task.get_interactive_tokens_and_lengths(["下雨天地面积水", "他说不服"], lambda x: x)
    assert lengths == [7, 4]
    ds = task.build_dataset_for_inference(toks, lengths)
    batch = ds.collater([ds[0], ds[1]])
    n, s, e, w, p = unpack(toks[0].numpy())
    assert (0, 1) in zip(s, e) and len(p) == 7  # char segmenter first: primary path = characters
    assert batch["net_input"]["lattice"].in_mask.shape[:2] == (2, 8) and "target" not in batch
    # fairseq-interactive keeps only src_tokens/src_lengths: the task restores the lattice tensors
    restored = task._restore_lattices(batch["net_input"]["src_tokens"])
    assert isinstance(restored, LatticeBatch)
    for key, value in restored._asdict().items():
        assert torch.equal(value, getattr(batch["net_input"]["lattice"], key)), key
    with pytest.raises(ValueError, match="without lattice tensors"):
        task._restore_lattices(torch.tensor([[5, 6, 7, 8, 9]]))
    # an empty line is the empty lattice; errors count lines over the whole input (all buffers)
    toks, lengths = task.get_interactive_tokens_and_lengths(["  ", "他说"], lambda x: x)
    assert lengths == [0, 2] and toks[0].tolist() == [0, 0]
    ds = task.build_dataset_for_inference(toks, lengths)
    batch = ds.collater([ds[0], ds[1]])["net_input"]
    assert batch["src_lengths"].tolist() == [0, 2] and not batch["lattice"].in_mask[0].any()
    task.lattice_builder.segment[0] = lambda s: ["他"]  # a segmenter that loses characters
    with pytest.raises(LatticeError, match="^input line 5: tokenization covers 1 of the sentence's 2"):
        task.get_interactive_tokens_and_lengths(["他说"], lambda x: x)


def _h_lines(stdout):
    """{sentence id: [(score, text), ...]} of the H- lines of fairseq-interactive's output."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith("H-"):
            head, score, text = (line.split("\t") + [""])[:3]
            out.setdefault(int(head[2:]), []).append((float(score), text))
    return out


def test_interactive_gives_each_line_its_own_lattice(tmp_path):
    """fairseq-interactive, several inputs per batch: every line is translated exactly as when it is
    alone, in input order, an empty line into an empty sentence (no error ending the session)."""
    pytest.importorskip("jieba")
    from contract_lib import USER_DIR, console_script, run_cmd
    from contract_specs.lattice import TINY, make_lattice_data
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli

    data, task_args = make_lattice_data(tmp_path)
    save = tmp_path / "ckpt"
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--user-dir", USER_DIR, "--task", "lattice_translation", "--arch", "lattice_dwl_gating",
        "--cpu", *task_args, *TINY, "--optimizer", "adam", "--lr", "0.03", "--max-update", "12",
        "--max-tokens", "400", "--save-dir", str(save), "--no-progress-bar", "--num-workers", "0",
        "--seed", "1", "--disable-validation", "--no-epoch-checkpoints"])
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    # words outside the model's dictionary are all <unk>: lines 0, 1, 4 and 5 share the primary path
    # <unk> <unk> <unk> (jieba) with different lattices and lengths, the longest first
    lines = ["学生喜欢老师", "老师很好", "", "今天天气很好我们去公园散步吧", "我吃苹果", "我喜欢苹果"]
    inp = tmp_path / "input.zh"
    inp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    def interactive(n):
        proc = run_cmd([console_script("fairseq-interactive"), data, "--user-dir", USER_DIR, "--task",
                        "lattice_translation", *task_args, "--path", save / "checkpoint_last.pt", "--cpu",
                        "--lattice-segmenters", "jieba,char", "--beam", "2", "--max-len-b", "8",
                        "--buffer-size", n, "--batch-size", n, "--input", inp])
        return _h_lines(proc.stdout)

    alone, together = interactive(1), interactive(len(lines))
    assert sorted(alone) == sorted(together) == list(range(len(lines)))
    assert together[2] == alone[2] == [(0.0, "")]
    for k in range(len(lines)):
        (score_alone, text_alone), = alone[k]
        (score, text), = together[k]
        assert text == text_alone and score == pytest.approx(score_alone, rel=0, abs=1e-5), (k, lines[k])
    # the check can tell those lattices apart: alone, the lines sharing a primary path score differently
    shared = sorted(alone[k][0][0] for k in (0, 1, 4, 5))
    assert min(b - a for a, b in zip(shared, shared[1:])) > 1e-4


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_read_input_formats():
    """fairseq-interactive and the hub share one reader: a lattice line is parsed (no segmenter
    loaded), a raw sentence is segmented, a blank line is None, the rest is one LatticeError."""
    from fairseq_local_core.lattice import read_input

    calls = []

    def builder():
        calls.append(1)
        return lambda s, where: Lattice.chain(list(s.strip()), where)

    line = "下 雨 天\t0:1 0:2 1:2 2:3\t0 2 3"
    assert read_input(line + "\r\n", builder, "x") == Lattice.from_line(line) and not calls
    assert read_input("下雨天", builder, "x") == Lattice.chain(["下", "雨", "天"]) and calls == [1]
    assert read_input("  \n", builder, "x") is None
    for bad, message in (("下 雨\t0:1", "x: node 2 is unreachable from node 0"),
                         ("下 雨 0:1 1:2", "x: looks like a lattice line without its tabs"),
                         ("下\udce9", "x: not UTF-8 text (undecodable byte at character 2)")):
        with pytest.raises(LatticeError, match="^" + re.escape(message)):
            read_input(bad, builder, "x")
    assert read_input("比分 3:2", builder, "x").n_chars == 5  # a raw sentence with a colon stays raw text


def test_lattice_batch_survives_fairseq_sample_helpers():
    """fairseq's move_to_cuda / apply_to_sample turn the LatticeBatch into a plain tuple; the
    encoder and the task take it back by field name."""
    from fairseq import utils

    lat = merge_tokenizations("下雨天", [["下雨天"], ["下", "雨天"]])
    packed = [torch.from_numpy(lat.pack([4 + i for i in range(len(lat.words()))]))]
    net = collate_lattices(packed, pad_idx=1, left_pad=False)
    moved = utils.apply_to_sample(lambda t: t.clone(), net)
    assert type(moved["lattice"]) is tuple and not isinstance(moved["lattice"], LatticeBatch)
    batch = LatticeBatch.of(moved["lattice"])
    assert batch._fields == ("in_words", "in_prev", "in_mask", "out_words", "out_next", "out_mask")
    for name in batch._fields:
        assert torch.equal(getattr(batch, name), getattr(net["lattice"], name)), name
    assert LatticeBatch.of(net["lattice"]) is net["lattice"]
    # node v_3 has two incoming edges (0:3 and 1:3), from start nodes 0 and 1
    assert batch.in_prev[0, 3].tolist() == [0, 1] and batch.in_mask[0, 3].tolist() == [True, True]
