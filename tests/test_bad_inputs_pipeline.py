"""Bad input along the pipeline, third round (issue: "nothing silently wrong when things do not
belong together"): blank lines in the text preprocess.sh binarizes, the hub's BPE, sentences longer
than the model's positions, a full disk, degenerate option values. Each ends in one line naming the
file, line or option (or one warning where continuing is right); nothing half-written."""
import pytest

from contract_lib import REPO
from fairseq_local_repro.text import text_input
from test_bad_inputs import assert_one_line, run, write

PREPROCESS = REPO / "scripts" / "preprocess.sh"


# ------------------------------------------------------------------------------------------------
# blank lines: fairseq binarizes them as sentences without a word
# ------------------------------------------------------------------------------------------------
def test_blank_pairs_and_lines_found(tmp_path):
    """Spaces, a CRLF line end and a byte-order mark alone make a line blank; line numbers from 1."""
    a = write(tmp_path / "a", "eins\n\n  \ndrei\n\ufeff\nvier\n\n")
    b = write(tmp_path / "b", "one\n\r\n\t\nthree\n\nfour\nfive\n")
    assert text_input.blank_pairs(a, b) == ([2, 3, 5], [(7, a, b)])
    assert text_input.blank_lines(a) == [2, 3, 5, 7]
    assert text_input.blank_lines(write(tmp_path / "c", "x\ny")) == []


def test_blank_on_one_side_is_an_error_naming_both_lines(tmp_path):
    a = write(tmp_path / "train.de", "eins\nzwei\n\nvier\n\nsechs\n")
    b = write(tmp_path / "train.en", "one\n\nthree\nfour\n\nsix\n")
    with pytest.raises(text_input.TextInputError) as e:
        text_input.check_blank([(a, b)])
    msg = str(e.value)
    assert msg.startswith(f"{b}:2: blank line, but line 2 of {a} has text (and 1 more such pairs, lines 3)")
    assert "remove the pair from both files" in msg


def test_blank_pairs_and_lm_lines_are_one_warning_each(tmp_path):
    a = write(tmp_path / "x.de", "".join(f"s{i}\n" if i % 2 else "\n" for i in range(14)))
    b = write(tmp_path / "x.en", "".join(f"t{i}\n" if i % 2 else "\n" for i in range(14)))
    lm = write(tmp_path / "lm.txt", "a b\n\nc\n")
    warnings = text_input.check_blank([(a, b), (a, b)], [lm, lm])  # a file named for two splits: once
    assert warnings == [
        f"{a}, {b}: 7 pairs blank on both sides (lines 1, 3, 5, 7, 9, ...) are binarized as sentences without a "
        "word (only </s>); remove them from both files if they are not meant",
        f"{lm}: 1 blank lines (lines 2) are binarized as sentences without a word (only </s>), as fairseq's LM "
        "recipes keep paragraph breaks; remove them if they are not meant"]
    assert text_input.check_blank([], [write(tmp_path / "ok", "a\nb\n")]) == []


def _pair(d, name, src, tgt):
    write(d / f"{name}.de", src)
    write(d / f"{name}.en", tgt)
    return d / name


@pytest.mark.parametrize("split", ["train", "valid"])
def test_preprocess_sh_one_blank_side(tmp_path, split):
    good = _pair(tmp_path, "good", "ein satz\nzwei saetze\n", "a sentence\ntwo sentences\n")
    bad = _pair(tmp_path, "bad", "ein satz\nzwei\nsaetze\n", "a sentence\n\ntwo sentences\n")
    train, valid = (bad, good) if split == "train" else (good, bad)
    code, err = run("bash", PREPROCESS, "--src", "de", "--tgt", "en", "--train", train, "--valid", valid,
                    "--destdir", tmp_path / "bin", "--bpe", "none", "--workers", "1")
    assert_one_line(code, err, f"preprocess.sh: error: {bad}.en:2: blank line, but line 2 of {bad}.de has text",
                    leftovers=[tmp_path / "bin"])
    assert code == 2


def test_preprocess_sh_blank_pairs_warn_and_binarize(tmp_path):
    train = _pair(tmp_path, "train", "ein satz\n\nzwei saetze\n", "a sentence\n \ntwo sentences\n")
    code, err = run("bash", PREPROCESS, "--src", "de", "--tgt", "en", "--train", train, "--valid", train,
                    "--destdir", tmp_path / "bin", "--bpe", "none", "--workers", "1")
    assert code == 0, err[-2000:]
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [f"preprocess.sh: warning: {train}.de, {train}.en: 1 pairs blank on both sides (lines 2) are "
                        "binarized as sentences without a word (only </s>); remove them from both files if they "
                        "are not meant"]
    assert (tmp_path / "bin" / "train.de-en.de.bin").is_file()


def test_preprocess_sh_lm_blank_lines_warn(tmp_path):
    text = write(tmp_path / "lm.txt", "the first paragraph\n\nthe second one\n\n")
    code, err = run("bash", PREPROCESS, "--lm", "--train", text, "--valid", text, "--destdir", tmp_path / "bin",
                    "--bpe", "none", "--workers", "1")
    assert code == 0, err[-2000:]
    assert [line for line in err.splitlines() if "warning" in line] == [
        f"preprocess.sh: warning: {text}: 2 blank lines (lines 2, 4) are binarized as sentences without a word "
        "(only </s>), as fairseq's LM recipes keep paragraph breaks; remove them if they are not meant"]
