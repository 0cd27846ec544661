"""Bad input along the pipeline, third round (issue: "nothing silently wrong when things do not
belong together"): blank lines in the text preprocess.sh binarizes, the hub's BPE, sentences longer
than the model's positions, a full disk, degenerate option values. Each ends in one line naming the
file, line or option (or one warning where continuing is right); nothing half-written."""
import pytest

from contract_lib import REPO, console_script
from fairseq_local_core import file_io
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


NUL_LINE = "fairseq would make it a word); remove it, or convert a UTF-16 file to UTF-8 (iconv -f UTF-16 -t UTF-8)"


@pytest.mark.parametrize("data, where", [(b"a dog\nruns \0 fast\n", "2: a NUL byte (0x00) at byte 6"),
                                         (b"\0a dog\n", "1: a NUL byte (0x00) at byte 1"),
                                         (b"a dog\nlast line\0", "2: a NUL byte (0x00) at byte 10"),
                                         ("a dog\nruns\n".encode("utf-16-le"), "1: a NUL byte (0x00) at byte 2")])
def test_a_nul_byte_is_not_text(tmp_path, data, where):
    path = tmp_path / "corpus.en"
    path.write_bytes(data)
    message = f"{path}:{where} of the line: not text ({NUL_LINE}"
    for read in (text_input.scan, text_input.read_lines):
        with pytest.raises(text_input.TextInputError) as e:
            read(path)
        assert str(e.value) == message
    path.write_bytes(data.replace(b"\0", b""))  # the same text without it reads
    assert text_input.scan(path) == len(text_input.read_lines(path))


def test_preprocess_sh_nul_byte(tmp_path):
    good = _pair(tmp_path, "good", "ein satz\nzwei saetze\n", "a sentence\ntwo sentences\n")
    bad = _pair(tmp_path, "bad", "ein satz\nzwei saetze\n", "a sentence\ntwo sentences\n")
    (tmp_path / "bad.de").write_bytes(b"ein satz\nzwei \0saetze\n")
    code, err = run("bash", PREPROCESS, "--src", "de", "--tgt", "en", "--train", bad, "--valid", good,
                    "--destdir", tmp_path / "bin", "--bpe", "none", "--workers", "1")
    assert_one_line(code, err, f"preprocess.sh: error: {bad}.de:2: a NUL byte (0x00) at byte 6 of the line: not text "
                    f"({NUL_LINE}", leftovers=[tmp_path / "bin"])
    assert code == 2


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


# ------------------------------------------------------------------------------------------------
# the hub finds the data directory's BPE, as generate.sh does, and refuses one that does not belong
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spm_model(shared_data, tmp_path_factory):
    """A tiny lstm trained on 300 Multi30k pairs made by preprocess.sh's default (joint sentencepiece)."""
    import os

    from test_bad_inputs import TINY_LSTM

    tmp = tmp_path_factory.mktemp("hub_bpe")
    for split in ("train", "valid"):
        for lang in ("de", "en"):
            lines = (shared_data / "multi30k-de-en" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            write(tmp / f"{split}.{lang}", "\n".join(lines[:300]) + "\n")
    data = tmp / "bin"
    code, err = run("bash", PREPROCESS, "--src", "de", "--tgt", "en", "--train", tmp / "train", "--valid",
                    tmp / "valid", "--destdir", data, "--bpe-size", "300", "--workers", "1")
    assert code == 0, err[-2000:]
    code, err = run(console_script("fairseq-train"), data, "--user-dir", REPO / "fairseq_local", *TINY_LSTM, "--optimizer", "adam", "--lr", "0.01",
                    "--max-update", "1", "--cpu", "--max-tokens", "3000", "--save-dir", tmp / "ck",
                    "--no-epoch-checkpoints", "--num-workers", "0")
    assert code == 0, err[-2000:]
    other = tmp / "other"  # a sentencepiece model of another corpus
    other.mkdir()
    english = (shared_data / "tatoeba-zh-en" / "train.en").read_text(encoding="utf-8").splitlines()[:300]
    write(other / "text", "\n".join(english) + "\n")
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(input=str(other / "text"), model_prefix=str(other / "spm"), vocab_size=300,
                                   model_type="bpe", minloglevel=2)
    assert os.path.isfile(data / "bpe" / "spm.joint.model")
    return tmp / "ck", data, tmp / "train.de", other / "spm.model"


def test_hub_finds_the_data_directorys_bpe(spm_model):
    """Raw text is cut as preprocess.sh cut the training text: the first training sentence encodes
    to exactly its binarized tokens (before: every word <unk>)."""
    from fairseq.data import data_utils

    from fairseq_local.hub import from_pretrained

    ck, data, raw, _ = spm_model
    hub = from_pretrained(ck, data_name_or_path=str(data))
    assert type(hub.bpe).__name__ == "SentencepieceBPE"
    first = raw.read_text(encoding="utf-8").splitlines()[0]
    binarized = data_utils.load_indexed_dataset(str(data / "train.de-en.de"), hub.src_dict)[0]
    assert hub.encode(first).tolist() == binarized.tolist()
    assert hub.src_dict.unk() not in hub.encode(first).tolist()
    assert isinstance(hub.translate(first, beam=2, max_len_b=5), str)


@pytest.mark.parametrize("case", ["other_kind", "other_corpus", "copy_of_it", "none"])
def test_hub_bpe_that_does_not_belong(spm_model, tmp_path, case):
    import shutil

    from fairseq_local.hub import BPEMismatchError, from_pretrained

    ck, data, _, other = spm_model
    kwargs = {"other_kind": dict(bpe="subword_nmt", bpe_codes=str(write(tmp_path / "codes", "#version: 0.2\na b\n"))),
              "other_corpus": dict(bpe="sentencepiece", sentencepiece_model=str(other)),
              "copy_of_it": dict(bpe="sentencepiece", sentencepiece_model=str(
                  shutil.copy(data / "bpe" / "spm.joint.model", tmp_path / "copy.model"))),
              "none": dict(bpe=None)}[case]
    if case in ("copy_of_it", "none"):
        hub = from_pretrained(ck, data_name_or_path=str(data), **kwargs)
        assert (hub.bpe is None) == (case == "none")
        return
    with pytest.raises(BPEMismatchError) as e:
        from_pretrained(ck, data_name_or_path=str(data), **kwargs)
    want = {"other_kind": f"from_pretrained: bpe='subword_nmt', but {data} was made with sentencepiece "
                          f"({data}/bpe/spm.joint.model): leave out bpe= to use the data directory's",
            "other_corpus": f"from_pretrained: sentencepiece_model={other} is not the BPE model {data} was made with "
                            f"({data}/bpe/spm.joint.model): another corpus's?"}[case]
    assert str(e.value).startswith(want)


@pytest.mark.parametrize("case", ["other_corpus", "other_kind", "nothing_given"])
def test_hub_bpe_without_the_bpe_folder(spm_model, tmp_path, case):
    """A data directory without bpe/ (copied without it, or made by hand): the dictionary's pieces tell."""
    import shutil

    from fairseq_local.hub import BPEMismatchError, from_pretrained

    ck, data, _, other = spm_model
    bare = shutil.copytree(data, tmp_path / "bare", ignore=shutil.ignore_patterns("bpe"))
    if case == "nothing_given":
        with pytest.warns(UserWarning, match="holds sentencepiece pieces, but no BPE is applied"):
            assert from_pretrained(ck, data_name_or_path=str(bare)).bpe is None
        return
    kwargs = {"other_corpus": dict(bpe="sentencepiece", sentencepiece_model=str(other)),
              "other_kind": dict(bpe="subword_nmt", bpe_codes=str(write(tmp_path / "codes", "#version: 0.2\na b\n")))}[case]
    with pytest.raises(BPEMismatchError) as e:
        from_pretrained(ck, data_name_or_path=str(bare), **kwargs)
    assert str(e.value).startswith({
        "other_corpus": f"from_pretrained: sentencepiece_model={other} does not fit the dictionary of {bare}: ",
        "other_kind": f"from_pretrained: bpe='subword_nmt', but {bare} was made with sentencepiece (its dictionary's "
                      "pieces): give bpe='sentencepiece' with the model"}[case])
    # the model the text was cut with is accepted
    ok = from_pretrained(ck, data_name_or_path=str(bare), bpe="sentencepiece",
                         sentencepiece_model=str(data / "bpe" / "spm.joint.model"))
    assert type(ok.bpe).__name__ == "SentencepieceBPE"


def test_hub_separate_bpe_takes_the_source_languages(tmp_path):
    """preprocess.sh --separate-bpe: codes.de and codes.en; a de->en model cuts its input with codes.de."""
    from types import SimpleNamespace

    from fairseq.data import Dictionary

    from fairseq_local.hub import data_bpe

    (tmp_path / "bpe").mkdir()
    write(tmp_path / "bpe" / "codes.de", "#version: 0.2\nt h</w>\n")
    write(tmp_path / "bpe" / "codes.en", "#version: 0.2\na b</w>\n")
    task = SimpleNamespace(source_dictionary=Dictionary(), cfg=SimpleNamespace(source_lang="de"))
    assert data_bpe(str(tmp_path), {}, task).encode("th ab") == "th a@@ b"
    task.cfg.source_lang = "en"
    assert data_bpe(str(tmp_path), {}, task).encode("th ab") == "t@@ h ab"


# ------------------------------------------------------------------------------------------------
# test sentences longer than the model's positions: the cause and the fix, not "lost sentences"
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def short_model(tmp_path_factory):
    """A tiny lstm whose positions (7 tokens) are shorter than some test sentences (up to 10)."""
    from contract_lib import make_translation_data
    from test_bad_inputs import TINY_LSTM

    tmp = tmp_path_factory.mktemp("short")
    data, task_args = make_translation_data(tmp, n_train=24, n_valid=12)
    code, err = run(console_script("fairseq-train"), data, "--user-dir", REPO / "fairseq_local", *TINY_LSTM,
                    *task_args, "--optimizer", "adam", "--lr", "0.01", "--max-update", "1", "--cpu",
                    "--max-tokens", "500", "--save-dir", tmp / "ck", "--no-epoch-checkpoints", "--num-workers", "0",
                    "--max-source-positions", "7", "--max-target-positions", "7",
                    "--skip-invalid-size-inputs-valid-test", "--required-batch-size-multiple", "1")
    assert code == 0, err[-2000:]
    for side in ("src", "tgt"):
        lengths = [len(line.split()) + 1 for line in (tmp / "raw" / f"test.{side}").read_text().splitlines()]
        assert len(lengths) == 12 and max(lengths) > 7 >= min(lengths)  # some too long, not all
    return data, tmp / "ck" / "checkpoint_best.pt", task_args


def _generate(short_model, out, *extra):
    data, ckpt, _ = short_model
    return run("bash", REPO / "scripts" / "generate.sh", "--data", data, "--path", ckpt, "--out", out,
               "--beam", "2", "--", *extra)


def test_generate_sh_skipped_long_sentences_name_cause_and_fix(short_model, tmp_path):
    code, err = _generate(short_model, tmp_path / "out", "--skip-invalid-size-inputs-valid-test")
    line = assert_one_line(code, err, "generate.sh: error: ", "of the 12 sentences of subset 'test' (ids ",
                           "are longer than the model's positions (max_positions=(7, 7): --max-source-positions / "
                           "--max-target-positions", "skipped by --skip-invalid-size-inputs-valid-test",
                           "--model-overrides", leftovers=[tmp_path / "out"])
    assert "lost or added" not in line
    assert not list(tmp_path.glob("out.tmp*"))


def test_generate_sh_long_sentence_without_skip_is_one_line(short_model, tmp_path):
    code, err = _generate(short_model, tmp_path / "out")
    assert_one_line(code, err, "fairseq-generate: error: Size of sample #", "since max_positions=(7, 7)",
                    "--max-source-positions / --max-target-positions", "--model-overrides",
                    leftovers=[tmp_path / "out"])


def test_generate_sh_the_fix_it_names_works(short_model, tmp_path):
    """The limits raised as the error says: every sentence gets its hypothesis."""
    code, err = _generate(short_model, tmp_path / "out", "--max-source-positions", "64", "--max-target-positions",
                          "64", "--model-overrides", "{'max_source_positions': 64, 'max_target_positions': 64}")
    assert code == 0, err[-2000:]
    assert len((tmp_path / "out" / "hyp.txt").read_text(encoding="utf-8").splitlines()) == 12


# ------------------------------------------------------------------------------------------------
# a full disk while generate.sh / score.sh write their output: one line naming the file, the
# earlier file intact, no temporary file left
# ------------------------------------------------------------------------------------------------
class _FullFile:
    """A file whose writes find the disk full after the first bytes."""

    def __init__(self, f):
        self.f, self.name = f, f.name

    def write(self, data):
        import errno
        import os

        self.f.write(data[:3])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _full_disk(monkeypatch):
    """file_io's writes find the disk full after their first bytes."""
    import builtins

    monkeypatch.setattr(file_io, "open", lambda *a, **k: _FullFile(builtins.open(*a, **k)), raising=False)
    return file_io


def test_score_json_on_a_full_disk(tmp_path, monkeypatch, capsys):
    from fairseq_local_repro.tools import score

    hyp, out = write(tmp_path / "hyp.txt", "the cat sat\n"), tmp_path / "scores.json"
    ref = write(tmp_path / "ref.txt", "the cat sat\n")
    write(out, '{"bleu": 12.0}\n')
    _full_disk(monkeypatch)
    with pytest.raises(SystemExit) as e:
        score.main(["--hyp", str(hyp), "--ref", str(ref), "--json", str(out)])
    assert e.value.code == 2
    assert capsys.readouterr().err == f"score.py: error: {out}: no space left on device\n"
    assert out.read_text() == '{"bleu": 12.0}\n' and sorted(p.name for p in tmp_path.iterdir()) == [
        "hyp.txt", "ref.txt", "scores.json"]


def test_gen_text_on_a_full_disk(tmp_path, monkeypatch, capsys):
    from fairseq_local_repro.text import gen_text

    log = write(tmp_path / "generate-test.txt", "S-0\ta b\nT-0\ta b\nH-0\t-0.1\ta b\nD-0\t-0.1\ta b\n")
    out = write(tmp_path / "hyp.tok", "earlier\n")
    monkeypatch.setattr("sys.argv", ["gen_text.py", str(log), "H", str(out)])
    _full_disk(monkeypatch)
    with pytest.raises(SystemExit) as e:
        gen_text.main()
    assert e.value.code == f"gen_text.py: error: {out}: no space left on device"
    assert out.read_text() == "earlier\n" and len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("cmd, message", [
    ("to_file /dev/full DIR/hyp.txt echo hi", "DIR/hyp.txt: no space left on device"),
    (f"to_file /dev/full DIR/ref.txt cat {REPO / 'scripts' / 'lib' / 'common.sh'}", "DIR/ref.txt: no space left on device"),
])
def test_shell_writes_on_a_full_disk(cmd, message):
    """The shell scripts' own writes go through common.sh's to_file: a full disk (/dev/full) is one
    line naming the destination."""
    code, err = run("bash", "-c", f"source {REPO / 'scripts' / 'lib' / 'common.sh'}; {cmd}")
    assert code == 2 and err == f"bash: error: {message}\n"
    code, err = run("bash", "-c", f"source {REPO / 'scripts' / 'lib' / 'common.sh'}; to_file /dev/null X false")
    assert code == 1 and err == ""  # another failure keeps its status and its own message


def test_a_write_on_a_full_disk_outside_file_io_names_the_file(tmp_path):
    """fairseq-generate writes its log with open(): the ENOSPC of f.write has no file name, the
    one line takes it from the file being written."""
    import errno
    import io
    import os

    from fairseq_local_core.errors import one_line, report

    path = tmp_path / "generate-test.txt"
    try:
        with open(path, "w", encoding="utf-8") as h:
            h.write("S-0\n")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError as e:
        caught = e
    err = io.StringIO()
    assert report(caught, "fairseq-generate", err) == 2
    assert err.getvalue() == f"fairseq-generate: error: {path}: no space left on device\n"
    assert one_line(OSError(errno.ENOSPC, "x", "named.bin")) == "named.bin: no space left on device"
    assert one_line(OSError(errno.EIO, "x")) is None  # other I/O errors stay bugs with a traceback
