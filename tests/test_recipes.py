"""Every recipe under scripts/recipes/ end to end, in its --small mode (a couple of updates, beam 2),
on tiny inputs laid out like the real releases and built here from the shared real corpora: IWSLT14's
de-en.tgz (train.tags + XML sets) fetched from a file:// mirror, NIST SGML with four references,
Gigaword's sumdata layout with .gz files, PTB's simple-examples.tgz.  Data preparation runs once
per family (session fixtures) with a relative output path.  Each recipe's printed score goes through
its own scoring step, and that step is checked for sanity: the references fed back as hypotheses
(``--score-only``) score 100 BLEU / 1.0 ROUGE.

Every recipe runs once with relative and once with absolute output paths (``PATH_KINDS``): one kind
end to end, the other through the stages that use the paths without a second training where the
recipe can stop there: ``--score-only`` (reads the first run's decodings and writes the scores
through the other spelling of the same folders), a resumed training (``checkpoint_last.pt`` found
through the other spelling), or the data preparation again (links that must resolve).
"""
import gzip
import hashlib
import io
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from contract_lib import REPO
from fairseq_local.safe_loading import safe_load
from test_demo import _descendants, kill_and_wait

pytestmark = pytest.mark.slow

RECIPES = REPO / "scripts" / "recipes"
ENV = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1",
           MKL_NUM_THREADS="1", WORKERS="1")
ENV.pop("SMALL", None)
BLEU_DETOK = re.compile(r"^BLEU \(detokenized[^)]*\) = ([\d.]+)\s+\[(\S+)\]", re.M)
BLEU_TOK = re.compile(r"^BLEU \(tokenized[^)]*\) = ([\d.]+)", re.M)
ROUGE = re.compile(r"^ROUGE F1 \(rouge-score, stemmed\): R-1 ([\d.]+)  R-2 ([\d.]+)  R-L ([\d.]+)", re.M)
PPL = re.compile(r"Perplexity: ([\d.]+)")
# the rows' own configs, with small dimensions where the paper's (1000-2000 units) cost minutes of CPU
TINY_RNN = [f"model.{k}={v}" for k, v in (("encoder_embed_dim", 24), ("decoder_embed_dim", 24),
                                          ("encoder_hidden_size", 24), ("decoder_hidden_size", 24))]


def run(cmd, cwd, ok=True, env=None, timeout=900):
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, env=env or ENV,
                          timeout=timeout)
    if ok:
        assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def recipe(name, *args, cwd, ok=True, env=None):
    return run(["bash", RECIPES / name, *args], cwd, ok=ok, env=env)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def lines(path):
    return Path(path).read_text(encoding="utf-8").splitlines()


def write_tgz(path, files):
    with tarfile.open(path, "w:gz") as t:
        for name, text in files.items():
            b = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(b)
            t.addfile(info, io.BytesIO(b))


def fake_generate_log(path, hyps, refs=None):
    """A fairseq-generate log whose best hypotheses are `hyps`, in shuffled order with S/T/H/D/P lines."""
    refs = hyps if refs is None else refs
    ids = list(range(len(hyps)))
    random.Random(0).shuffle(ids)
    with open(path, "w", encoding="utf-8") as f:
        for i in ids:
            f.write(f"S-{i}\tsource {i}\nT-{i}\t{refs[i]}\nH-{i}\t-0.25\t{hyps[i]}\nD-{i}\t-0.25\t{hyps[i]}\n"
                    f"P-{i}\t-0.1 -0.2\nH-{i}\t-9.0\tworse second best {i}\n")
        f.write("Generate test with beam=2: BLEU4 = 1.00, 10.0/1.0/0.5/0.1 (BP=1.000)\n")


def detok_bleu(out):
    m = BLEU_DETOK.search(out)
    assert m, out
    return float(m.group(1)), m.group(2)


# ------------------------------------------------------------------------------------------------
# release-shaped inputs
# ------------------------------------------------------------------------------------------------
IWSLT_TESTSETS = ["IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
                  "IWSLT14.TED.tst2012"]


def make_iwslt_tgz(m30k, out, n_train=360, n_per_set=8):
    """de-en.tgz as fairseq's mirror has it: de-en/train.tags.de-en.{de,en} with TED metadata lines,
    de-en/IWSLT14.*.de-en.{de,en}.xml with <seg id> elements."""
    files = {}
    for lang in ("de", "en"):
        body = ['<doc docid="535" genre="lectures">', "<url>http://www.ted.com/talks/x.html</url>",
                "<keywords>talks, science</keywords>", "<speaker>A Speaker</speaker>", "<talkid>535</talkid>",
                "<title>A title</title>", "<description>TED Talk Subtitles</description>"]
        body += lines(m30k / f"train.{lang}")[:n_train] + ["</doc>"]
        files[f"de-en/train.tags.de-en.{lang}"] = "\n".join(body) + "\n"
        valid = lines(m30k / f"valid.{lang}")
        for k, name in enumerate(IWSLT_TESTSETS):
            segs = valid[k * n_per_set:(k + 1) * n_per_set]
            xml = ['<?xml version="1.0" encoding="UTF-8"?>', "<mteval>", f'<srcset setid="{name}" srclang="{lang}">',
                   '<doc docid="1" genre="lectures">']
            xml += [f'<seg id="{i + 1}"> {s} </seg>' for i, s in enumerate(segs)]
            xml += ["</doc>", "</srcset>", "</mteval>"]
            files[f"de-en/{name}.de-en.{lang}.xml"] = "\n".join(xml) + "\n"
    write_tgz(out, files)
    return [s for k in range(5) for s in lines(m30k / "valid.en")[k * n_per_set:(k + 1) * n_per_set]]


def make_nist(tatoeba, out, n_train=150, n_set=12):
    """LDC-style aligned training text (one line with full-width Latin and digits and word spaces) and
    NIST sets mt02 (valid) and mt03 (test): source SGML, reference SGML with four sysid'd references."""
    out.mkdir(parents=True, exist_ok=True)
    zh, en = lines(tatoeba / "train.zh")[:n_train], lines(tatoeba / "train.en")[:n_train]
    (out / "ldc.zh").write_text("\n".join(["Ｂｉｌｌ　Ｃｌｉｎｔｏｎ 访问 了 中国 ２００８ 年 。"] + zh) + "\n", encoding="utf-8")
    (out / "ldc.en").write_text("\n".join(["Bill Clinton visited China in 2008 ."] + en) + "\n", encoding="utf-8")
    vzh, ven = lines(tatoeba / "valid.zh"), lines(tatoeba / "valid.en")
    variants = (lambda s: s, str.lower, lambda s: s.rstrip(".!?"), lambda s: " ".join(reversed(s.split())))
    for k, name in enumerate(["mt02", "mt03"]):
        z, e = vzh[k * n_set:(k + 1) * n_set], ven[k * n_set:(k + 1) * n_set]
        docs = [("d1", range(0, n_set // 2)), ("d2", range(n_set // 2, n_set))]
        src = [f'<srcset setid="{name}" srclang="zh">']
        for d, ids in docs:
            src += [f'<doc docid="{d}" genre="nw">'] + [f'<seg id="{i - ids[0] + 1}">{z[i]}</seg>' for i in ids] + ["</doc>"]
        (out / f"{name}.src.sgm").write_text("\n".join(src + ["</srcset>"]) + "\n", encoding="utf-8")
        ref = [f'<refset setid="{name}" srclang="zh" trglang="en">']
        for r, variant in enumerate(variants):
            for d, ids in docs:
                ref += [f'<doc docid="{d}" genre="nw" sysid="ref{r}">']
                ref += [f'<seg id="{i - ids[0] + 1}"> {variant(e[i])} </seg>' for i in ids] + ["</doc>"]
        (out / f"{name}.ref.sgm").write_text("\n".join(ref + ["</refset>"]) + "\n", encoding="utf-8")
    return [f"{n}={out}/{n}.src.sgm,{out}/{n}.ref.sgm" for n in ("mt02", "mt03")]


def nist_set_args(specs):
    return [a for spec in specs for a in ("--set", spec)]


def make_sumdata(m30k, out, n_train=300, n_test=24):
    """harvardnlp sumdata layout: train/*.txt.gz (train and valid), Giga/input.txt, Giga/task1_ref0.txt;
    article = a caption, title = its first five words (tokenized, lowercased like the release)."""
    text = [" ".join(s.lower().replace(".", " .").replace(",", " ,").split()) for s in lines(m30k / "train.en")]
    pairs = [(s, " ".join(s.split()[:5])) for s in text[:n_train + 40 + n_test]]
    (out / "train").mkdir(parents=True, exist_ok=True)
    (out / "Giga").mkdir(exist_ok=True)
    for name, part in (("train", pairs[:n_train]), ("valid", pairs[n_train:n_train + 40])):
        suffix = "" if name == "train" else ".filter"
        for side, key in ((0, "article"), (1, "title")):
            with gzip.open(out / "train" / f"{name}.{key}{suffix}.txt.gz", "wt", encoding="utf-8") as f:
                f.writelines(p[side] + "\n" for p in part)
    test = pairs[n_train + 40:]
    (out / "Giga" / "input.txt").write_text("".join(p[0] + "\n" for p in test), encoding="utf-8")
    (out / "Giga" / "task1_ref0.txt").write_text("".join(p[1] + "\n" for p in test), encoding="utf-8")
    return [p[1] for p in test]


def make_ptb_tgz(ptb_valid, out):
    """simple-examples.tgz with ./simple-examples/data/ptb.{train,valid,test}.txt."""
    text = lines(ptb_valid)
    parts = {"train": text[:500], "valid": text[500:540], "test": text[540:580]}
    write_tgz(out, {f"./simple-examples/data/ptb.{s}.txt": "\n".join(t) + "\n" for s, t in parts.items()})


# ------------------------------------------------------------------------------------------------
# session fixtures: each family's data prepared once, with a relative --out
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def iwslt(shared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("iwslt")
    raw_test = make_iwslt_tgz(shared_data / "multi30k-de-en", work / "de-en.tgz")
    recipe("prepare_iwslt14.sh", "--out", "iw", "--url", (work / "de-en.tgz").as_uri(),
           "--sha256", sha256(work / "de-en.tgz"), "--bpe-size", "300", "--workers", "1", cwd=work)
    return work, work / "iw", raw_test


@pytest.fixture(scope="session")
def nist(shared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("nist")
    sets = make_nist(shared_data / "tatoeba-zh-en", work / "ldc")
    recipe("prepare_nist_zhen.sh", "--out", "nist", "--train-zh", "ldc/ldc.zh", "--train-en", "ldc/ldc.en",
           *nist_set_args(sets), "--valid", "mt02", "--mode", "both", "--bpe-size", "200", "--workers", "1", cwd=work)
    return work, work / "nist", sets


@pytest.fixture(scope="session")
def gigaword(shared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("gigaword")
    titles = make_sumdata(shared_data / "multi30k-de-en", work / "sumdata")
    recipe("prepare_gigaword.sh", "--sumdata", "sumdata", "--out", "giga", "--workers", "1", cwd=work)
    return work, work / "giga", titles


@pytest.fixture(scope="session")
def ptb(shared_data, tmp_path_factory):
    work = tmp_path_factory.mktemp("ptb")
    make_ptb_tgz(shared_data / "lm" / "ptb.valid.txt", work / "simple-examples.tgz")
    url = (work / "simple-examples.tgz").as_uri()  # no --sha256: used, with a warning that gives the hash
    proc = recipe("prepare_ptb.sh", "--out", "ptb", "--url", url, "--workers", "1", cwd=work)
    (warning,) = [l for l in proc.stderr.splitlines() if "warning" in l and "sha256" in l]
    assert f"{url}: NOT verified" in warning and f"--sha256 {sha256(work / 'simple-examples.tgz')}" in warning
    return work, work / "ptb"


# ------------------------------------------------------------------------------------------------
# every recipe is covered; no machine paths; usage
# ------------------------------------------------------------------------------------------------
COVERED = {
    "prepare_iwslt14.sh": "test_iwslt14_recipes", "mc_rnn_iwslt14.sh": "test_iwslt14_recipes",
    "dpn_s2s_iwslt14.sh": "test_iwslt14_recipes", "dpn_s2s.sh": "test_iwslt14_recipes",
    "prepare_nist_zhen.sh": "test_nist_preparation", "lattice_nist_zhen.sh": "test_lattice_nist_zhen",
    "dpn_s2s_nist_zhen.sh": "test_dpn_s2s_nist_zhen", "parallel_cells_zh_en.sh": "test_parallel_cells_zh_en",
    "prepare_gigaword.sh": "test_gigaword_recipes", "mc_rnn_gigaword.sh": "test_gigaword_recipes",
    "dpn_s2s_gigaword.sh": "test_gigaword_recipes", "prepare_ptb.sh": "test_ptb_lm_recipe",
    "mc_rnn_ptb.sh": "test_ptb_lm_recipe", "parallel_cells_ptb.sh": "test_ptb_lm_recipe",
    "gencnn_ptb.sh": "test_ptb_lm_recipe", "gencnn_fbis.sh": "test_gencnn_fbis",
    "lattice_zh_en_small.sh": "test_lattice_zh_en_small", "mc_rnn_multi30k_check.sh": "test_mc_rnn_multi30k_check",
    "gencnn_rerank_demo.sh": "test_gencnn_rerank_demo",
}


# recipe -> (the test that gives it relative output paths, the test that gives it absolute ones)
PATH_KINDS = {
    "prepare_iwslt14.sh": ("iwslt", "test_prepare_iwslt14_absolute_paths"),
    "mc_rnn_iwslt14.sh": ("test_iwslt14_recipes", "test_iwslt14_recipes"),
    "dpn_s2s_iwslt14.sh": ("test_iwslt14_recipes", "test_iwslt14_recipes"),
    "dpn_s2s.sh": ("test_iwslt14_recipes", "test_iwslt14_recipes"),
    "prepare_nist_zhen.sh": ("nist", "test_parallel_cells_zh_en"),
    "lattice_nist_zhen.sh": ("test_lattice_nist_zhen", "test_lattice_nist_zhen"),
    "dpn_s2s_nist_zhen.sh": ("test_dpn_s2s_nist_zhen", "test_dpn_s2s_nist_zhen"),
    "parallel_cells_zh_en.sh": ("test_parallel_cells_zh_en", "test_parallel_cells_zh_en"),
    "prepare_gigaword.sh": ("gigaword", "test_prepare_gigaword_absolute_paths"),
    "mc_rnn_gigaword.sh": ("test_gigaword_recipes", "test_gigaword_recipes"),
    "dpn_s2s_gigaword.sh": ("test_gigaword_recipes", "test_gigaword_recipes"),
    "prepare_ptb.sh": ("ptb", "test_prepare_ptb_absolute_paths"),
    "mc_rnn_ptb.sh": ("test_ptb_lm_recipe", "test_ptb_lm_recipe"),
    "parallel_cells_ptb.sh": ("test_ptb_lm_recipe", "test_ptb_lm_recipe"),
    "gencnn_ptb.sh": ("test_ptb_lm_recipe", "test_ptb_lm_recipe"),
    "gencnn_fbis.sh": ("test_gencnn_fbis", "test_gencnn_fbis"),
    "lattice_zh_en_small.sh": ("test_lattice_zh_en_small", "test_lattice_zh_en_small"),
    "mc_rnn_multi30k_check.sh": ("test_mc_rnn_multi30k_check", "test_mc_rnn_multi30k_check"),
    "gencnn_rerank_demo.sh": ("test_gencnn_rerank_demo", "test_gencnn_rerank_demo"),
}


def test_every_recipe_is_run_here():
    on_disk = {p.name for p in RECIPES.glob("*.sh")}
    assert on_disk == set(COVERED), f"recipes without an end-to-end test: {sorted(on_disk - set(COVERED))}"
    names = {n for n in globals() if n.startswith("test_")}
    assert set(COVERED.values()) <= names
    assert on_disk == set(PATH_KINDS), f"recipes without both kinds of paths: {sorted(on_disk - set(PATH_KINDS))}"
    assert {t for pair in PATH_KINDS.values() for t in pair} <= names | {"iwslt", "nist", "gigaword", "ptb"}


@pytest.mark.parametrize("name", sorted(COVERED))
def test_recipe_usage_and_no_machine_paths(name, tmp_path):
    text = (RECIPES / name).read_text()
    assert not re.search(r"/work/|/home/|/Users/", text), f"{name} holds a machine path"
    proc = recipe(name, "-h", cwd=tmp_path)
    assert "bash scripts/recipes/" in proc.stdout or "usage" in proc.stdout.lower(), proc.stdout


def test_download_checksum_mismatch_is_one_error_line(tmp_path):
    write_tgz(tmp_path / "se.tgz", {f"./simple-examples/data/ptb.{s}.txt": "a b c\n" for s in ("train", "valid", "test")})
    proc = recipe("prepare_ptb.sh", "--out", "p", "--url", (tmp_path / "se.tgz").as_uri(), "--sha256", "0" * 64,
                  cwd=tmp_path, ok=False)
    errors = [l for l in proc.stderr.splitlines() if "error" in l]
    assert proc.returncode != 0 and len(errors) == 1, proc.stderr
    assert "sha256 mismatch" in errors[0] and sha256(tmp_path / "se.tgz") in errors[0]
    assert not list((tmp_path / "p" / "raw").iterdir())  # nothing half-written
    proc = recipe("prepare_iwslt14.sh", "--out", "i", "--url", (tmp_path / "missing.tgz").as_uri(), cwd=tmp_path, ok=False)
    errors = [l for l in proc.stderr.splitlines() if "error" in l]
    assert proc.returncode != 0 and len(errors) == 1 and "cannot download" in errors[0], proc.stderr
    assert not list((tmp_path / "i" / "orig").iterdir())


def test_recipe_with_an_unpinned_download(tmp_path):
    """prepare_ptb.sh from a mirror with no --sha256 under --require-checksum stops at the download
    and writes nothing (without it, it runs with the warning: the ``ptb`` fixture).  A local --tgz
    copy without a hash is refused the same way and left where it is."""
    write_tgz(tmp_path / "se.tgz", {f"./simple-examples/data/ptb.{s}.txt": "a b c\nd e f\n" for s in ("train", "valid", "test")})
    url, digest = (tmp_path / "se.tgz").as_uri(), sha256(tmp_path / "se.tgz")
    proc = recipe("prepare_ptb.sh", "--out", "strict", "--url", url, "--workers", "1", "--require-checksum",
                  cwd=tmp_path, ok=False)
    errors = [l for l in proc.stderr.splitlines() if "error" in l]
    assert proc.returncode == 2 and len(errors) == 1 and f"{url}: no sha256 recorded" in errors[0], proc.stderr
    assert digest in errors[0] and not list((tmp_path / "strict" / "raw").iterdir())
    proc = recipe("prepare_iwslt14.sh", "--out", "iw", "--tgz", "se.tgz", "--require-checksum", cwd=tmp_path,
                  ok=False)
    errors = [l for l in proc.stderr.splitlines() if "error" in l]
    assert proc.returncode == 2 and len(errors) == 1 and "--tgz se.tgz: no sha256 recorded" in errors[0], proc.stderr
    assert (tmp_path / "se.tgz").is_file() and not list((tmp_path / "iw" / "orig").iterdir())


# ------------------------------------------------------------------------------------------------
# IWSLT14: prepare (file:// mirror, relative --out), MC-RNN and DPN-S2S rows
# ------------------------------------------------------------------------------------------------
def test_iwslt14_recipes(iwslt):
    work, data, raw_test = iwslt
    assert lines(data / "raw" / "test.en") == raw_test  # raw references kept, in test-set order
    assert len(lines(data / "tok" / "test.en")) == len(raw_test)
    save = work / "ck" / "mc"
    proc = recipe("mc_rnn_iwslt14.sh", "--data", data, "--row", "table2_mc_rnn_3", "--save-dir", save, "--small",
                  cwd=work)
    bleu, sig = detok_bleu(proc.stdout)
    assert 0 <= bleu <= 100 and "nrefs:1" in sig and "case:lc" in sig and "tok:13a" in sig
    assert BLEU_TOK.search(proc.stdout)  # the literature's tokenized BLEU, labelled as such
    assert len(lines(save / "test.hyp")) == len(raw_test)
    # the scoring step itself: the tokenized, lowercased references as hypotheses score 100
    fake_generate_log(save / "test.gen", lines(data / "tok" / "test.en"))
    proc = recipe("mc_rnn_iwslt14.sh", "--data", "iw", "--save-dir", "ck/mc", "--score-only", cwd=work)  # relative
    assert detok_bleu(proc.stdout)[0] == 100.0 and float(BLEU_TOK.search(proc.stdout).group(1)) == 100.0
    assert (save / "test.score").is_file()
    # DPN-S2S (dpn_s2s_iwslt14.sh -> dpn_s2s.sh), relative --save-dir
    proc = recipe("dpn_s2s_iwslt14.sh", "--out", data, "--rows", "table1_dpn_s2s", "--save-dir", "ck/dpn", "--small",
                  cwd=work)
    assert 0 <= detok_bleu(proc.stdout)[0] <= 100
    row = work / "ck" / "dpn" / "table1_dpn_s2s"
    assert (row / "test.entropy.json").is_file() and (row / "checkpoint_best.pt").is_file()
    fake_generate_log(row / "test.gen", lines(data / "tok" / "test.en"))
    proc = recipe("dpn_s2s_iwslt14.sh", "--out", "iw", "--rows", "table1_dpn_s2s", "--save-dir", work / "ck" / "dpn",
                  "--score-only", cwd=work)  # relative --out, absolute --save-dir
    assert detok_bleu(proc.stdout)[0] == 100.0
    # dpn_s2s.sh itself (the run above gave it absolute paths): relative ones
    (row / "test.score").unlink()
    proc = recipe("dpn_s2s.sh", "--row", "table1_dpn_s2s", "--data", "iw/bin", "--refs", "iw/raw/test.en",
                  "--save-dir", "ck/dpn/table1_dpn_s2s", "--score-only", cwd=work)
    assert detok_bleu(proc.stdout)[0] == 100.0 and (row / "test.score").is_file()


def test_prepare_iwslt14_absolute_paths(iwslt, tmp_path):
    """The fixture prepares from a file:// mirror into a relative --out; here a local --tgz copy into
    an absolute --out gives the same text."""
    work, data, raw_test = iwslt
    out = tmp_path / "iw"
    recipe("prepare_iwslt14.sh", "--out", out, "--tgz", work / "de-en.tgz", "--sha256", sha256(work / "de-en.tgz"),
           "--bpe-size", "300", "--workers", "1", cwd=tmp_path / "..")
    assert lines(out / "raw" / "test.en") == raw_test
    for name in ("tok/train.de", "tok/test.en", "bin/dict.de.txt", "bin/dict.en.txt"):
        assert (out / name).read_bytes() == (data / name).read_bytes(), name


# ------------------------------------------------------------------------------------------------
# NIST Zh-En: preparation (SGML, four references), lattice, DPN and parallel-cell recipes
# ------------------------------------------------------------------------------------------------
def test_nist_preparation(nist):
    work, out, _ = nist
    # full-width Latin and digits NFKC-normalised, word spaces kept, Chinese spaces dropped
    assert lines(out / "raw" / "train.zh")[0] == "Bill Clinton访问了中国2008年。"
    assert lines(out / "raw" / "seg" / "train.zh")[0].split()[:2] == ["Bill", "Clinton"]
    for k in range(4):
        assert len(lines(out / "refs" / f"mt03.ref{k}")) == 12
    assert lines(out / "refs" / "mt03.ref1") == [s.lower() for s in lines(out / "refs" / "mt03.ref0")]
    for d in ("raw/lattice", "raw/seg"):  # links made with a relative --out resolve
        for link in (out / d).glob("*.en"):
            assert link.resolve().is_file(), link
    assert lines(out / "bin-lattice" / "test_sets.txt") == ["mt03"] == lines(out / "bin-bpe" / "test_sets.txt")


def test_lattice_nist_zhen(nist):
    work, out, _ = nist
    args = ["--data", out / "bin-lattice", "--refs-dir", out / "refs", "--rows", "dwl_gating", "--save-dir",
            work / "ck" / "lat", "--small"]
    proc = recipe("lattice_nist_zhen.sh", *args, cwd=work)
    bleu, sig = detok_bleu(proc.stdout)
    assert "nrefs:4" in sig and "case:lc" in sig and 0 <= bleu <= 100
    row = work / "ck" / "lat" / "dwl_gating"
    assert (row / "train.done").is_file()
    # an interrupted training (no train.done) resumes from checkpoint_last.pt instead of being skipped,
    # found through relative paths to the same folders
    (row / "train.done").unlink()
    rel = ["--data", "nist/bin-lattice", "--refs-dir", "nist/refs", "--rows", "dwl_gating", "--save-dir", "ck/lat",
           "--small"]
    proc = recipe("lattice_nist_zhen.sh", *rel, "--", "optimization.max_update=3", "optimization.max_epoch=10",
                  cwd=work)
    assert "resuming the interrupted training" in proc.stderr
    assert re.search(r"[Ll]oaded checkpoint \S*checkpoint_last\.pt", proc.stdout + proc.stderr)
    state = safe_load(row / "checkpoint_last.pt")
    assert state["optimizer_history"][-1]["num_updates"] == 3
    # a finished training is skipped
    proc = recipe("lattice_nist_zhen.sh", *args, cwd=work)
    assert "resuming" not in proc.stderr and "train_inner" not in proc.stdout + proc.stderr
    # scoring step: tokenized lowercased reference 0 as hypotheses scores 100 against the raw references
    fake_generate_log(row / "mt03.gen", lines(out / "raw" / "mt03.tok.en"))
    proc = recipe("lattice_nist_zhen.sh", *rel, "--score-only", cwd=work)
    assert detok_bleu(proc.stdout)[0] == 100.0


def test_dpn_s2s_nist_zhen(nist):
    work, out, _ = nist
    args = ["--data", out / "bin-bpe", "--refs-dir", out / "refs", "--rows", "table2_dpn_s2s", "--subsets",
            "test:mt03", "--save-dir", work / "ck" / "dpn"]
    proc = recipe("dpn_s2s_nist_zhen.sh", *args, "--small", cwd=work)
    bleu, sig = detok_bleu(proc.stdout)
    assert "nrefs:4" in sig and "case:lc" in sig
    # the recipe once scored tokenized lowercased text against raw references (35.7 for identical text)
    fake_generate_log(work / "ck" / "dpn" / "table2_dpn_s2s" / "test.gen", lines(out / "raw" / "mt03.tok.en"))
    rel = ["--data", "nist/bin-bpe", "--refs-dir", "nist/refs", "--rows", "table2_dpn_s2s", "--subsets", "test:mt03",
           "--save-dir", "ck/dpn"]
    proc = recipe("dpn_s2s_nist_zhen.sh", *rel, "--score-only", cwd=work)
    assert detok_bleu(proc.stdout)[0] == 100.0


def test_parallel_cells_zh_en(nist):
    work, out, sets = nist
    run_dir = work / "pc"
    (run_dir / "ldc").mkdir(parents=True)
    for f in (work / "ldc").iterdir():
        shutil.copy(f, run_dir / "ldc" / f.name)
    # the shared preparation, copied: the recipe reruns prepare_nist_zhen.sh into it (segmentations reused)
    shutil.copytree(out, run_dir / "nist_word", symlinks=True)
    rel_sets = [s.replace(str(work / "ldc"), "ldc") for s in sets]
    args = ["--row", "baseline", "--out", "nist_word", "--train-zh", "ldc/ldc.zh", "--train-en", "ldc/ldc.en",
            *nist_set_args(rel_sets), "--valid", "mt02", "--beam", "2", "--save-dir", "ck"]
    proc = recipe("parallel_cells_zh_en.sh", *args, "--small", "--", *TINY_RNN, cwd=run_dir)
    bleu, sig = detok_bleu(proc.stdout)
    assert "nrefs:4" in sig
    assert (run_dir / "nist_word" / "bin-word30k" / "test.zh-en.zh.bin").is_file()
    # it ran prepare_nist_zhen.sh again, with its --out made absolute: the links it made resolve
    for link in [*(run_dir / "nist_word" / "raw" / "seg").glob("*.en"), *(run_dir / "nist_word" / "raw" / "word").glob("*")]:
        assert link.resolve().is_file(), link
    fake_generate_log(run_dir / "ck" / "mt03" / "generate-test.txt",
                      lines(run_dir / "nist_word" / "raw" / "mt03.tok.en"))
    absolute = list(args)
    absolute[absolute.index("--out") + 1] = str(run_dir / "nist_word")
    absolute[absolute.index("--save-dir") + 1] = str(run_dir / "ck")
    proc = recipe("parallel_cells_zh_en.sh", *absolute, "--score-only", cwd=run_dir)
    assert detok_bleu(proc.stdout)[0] == 100.0


# ------------------------------------------------------------------------------------------------
# Gigaword: the release's .gz layout, MC-RNN and DPN-S2S rows, ROUGE against the release's references
# ------------------------------------------------------------------------------------------------
def test_gigaword_recipes(gigaword):
    work, out, titles = gigaword
    assert lines(out / "refs" / "test.ref0") == titles
    save = work / "ck" / "mc"
    args = ["--data", out / "bin", "--row", "table3_mc_rnn_2", "--save-dir", save]
    proc = recipe("mc_rnn_gigaword.sh", *args, "--small", cwd=work)
    r1, r2, rl = map(float, ROUGE.search(proc.stdout).groups())
    assert 0 <= r2 <= r1 <= 1 and 0 <= rl <= 1
    # the scoring step: the references as hypotheses give ROUGE 1.0
    fake_generate_log(save / "test.gen", titles)
    proc = recipe("mc_rnn_gigaword.sh", "--data", "giga/bin", "--row", "table3_mc_rnn_2", "--save-dir", "ck/mc",
                  "--score-only", cwd=work)  # relative
    assert tuple(map(float, ROUGE.search(proc.stdout).groups())) == (1.0, 1.0, 1.0)
    # <unk> is never rewarded: fairseq's T- lines read <<unk>> where the release has the real word
    unk_refs = ["<<unk>> " + " ".join(t.split()[1:]) for t in titles]
    fake_generate_log(save / "test.gen", ["<unk>"] * len(titles), refs=unk_refs)
    proc = recipe("mc_rnn_gigaword.sh", *args, "--score-only", cwd=work)
    assert float(ROUGE.search(proc.stdout).group(1)) == 0.0
    proc = recipe("dpn_s2s_gigaword.sh", "--data", out / "bin", "--save-dir", "ck/dpn", "--small", cwd=work)
    r1 = float(ROUGE.search(proc.stdout).group(1))
    assert 0 <= r1 <= 1
    fake_generate_log(work / "ck" / "dpn" / "test.gen", titles)
    proc = recipe("dpn_s2s_gigaword.sh", "--data", "giga/bin", "--save-dir", work / "ck" / "dpn", "--score-only",
                  cwd=work)  # relative --data, absolute --save-dir
    assert float(ROUGE.search(proc.stdout).group(1)) == 1.0


def test_prepare_gigaword_absolute_paths(gigaword, tmp_path):
    work, out, titles = gigaword
    recipe("prepare_gigaword.sh", "--sumdata", work / "sumdata", "--out", tmp_path / "giga", "--workers", "1",
           cwd=tmp_path / "..")
    assert lines(tmp_path / "giga" / "refs" / "test.ref0") == titles
    for name in ("text/train.article", "text/test.headline", "bin/dict.article.txt"):
        assert (tmp_path / "giga" / name).read_bytes() == (out / name).read_bytes(), name


# ------------------------------------------------------------------------------------------------
# PTB language models (prepared from a file:// simple-examples.tgz)
# ------------------------------------------------------------------------------------------------
def _ppl(out):
    vals = [float(v) for v in PPL.findall(out)]
    assert vals and all(math.isfinite(v) and v > 1 for v in vals), out
    return vals


TINY_LM = ["model.decoder_embed_dim=24", "model.decoder_hidden_size=24"]


@pytest.mark.parametrize("name,extra", [("mc_rnn_ptb.sh", ["--", *TINY_LM]),
                                        ("parallel_cells_ptb.sh", ["--wide", "3", "--", *TINY_LM]),
                                        ("gencnn_ptb.sh", ["--", "dataset.batch_size=50"])])
def test_ptb_lm_recipe(ptb, name, extra):
    work, data = ptb
    assert len(lines(data / "raw" / "ptb.train.txt")) == 500
    vocab = len(lines(data / "bin" / "dict.txt")) + 4
    proc = recipe(name, "--data", data, "--save-dir", f"ck/{name}", "--small", *extra, cwd=work)
    ppl = _ppl(proc.stdout)
    assert len(ppl) == 2, (name, ppl)  # valid and test
    if not name.startswith("gencnn"):  # AdaGrad's first steps (lr 0.05) move every weight by ~lr
        assert max(ppl) < 20 * vocab, (name, ppl)  # untrained ~ |V|
    # relative --data, absolute --save-dir: the same folders, so the training resumes (one more update)
    save = work / "ck" / name
    proc = recipe(name, "--data", "ptb", "--save-dir", save, "--small", *extra, cwd=work)
    assert re.search(r"[Ll]oaded checkpoint \S*checkpoint_last\.pt", proc.stdout + proc.stderr), name
    assert len(_ppl(proc.stdout)) == 2 and (save / "test.ppl").is_file()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_killing_a_recipe_ends_every_process_it_started(ptb, tmp_path, sig):
    """mc_rnn_ptb.sh killed (or Ctrl-C) while its fairseq-train runs: every process below it ends
    with it, its last line says so, status 130, no traceback."""
    work, data = ptb
    save = tmp_path / "ck"
    proc = subprocess.Popen(["bash", str(RECIPES / "mc_rnn_ptb.sh"), "--data", str(data), "--save-dir", str(save),
                             "--", *TINY_LM, "optimization.max_update=100000"], cwd=work, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.time() + 600
    while proc.poll() is None and time.time() < end and not any(
            "-train" in Path(f"/proc/{p}/cmdline").read_text(errors="replace") for p in _descendants(proc.pid)
            if os.path.exists(f"/proc/{p}/cmdline")):
        time.sleep(0.2)
    time.sleep(1)  # fairseq-hydra-train (the row's YAML) starting up below the recipe
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    below = _descendants(proc.pid)
    assert below, "nothing runs below the recipe"
    code, err = kill_and_wait(proc, sig, below, "mc_rnn_ptb.sh")
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "mc_rnn_ptb.sh: interrupted"


def test_prepare_ptb_absolute_paths(ptb, tmp_path):
    """--raw (files on disk) into an absolute --out, from another folder: the fixture's corpus."""
    work, data = ptb
    recipe("prepare_ptb.sh", "--raw", data / "raw", "--out", tmp_path / "ptb", "--workers", "1", cwd=tmp_path / "..")
    for name in ("raw/ptb.train.txt", "bin/dict.txt"):
        assert (tmp_path / "ptb" / name).read_bytes() == (data / name).read_bytes(), name


def test_gencnn_fbis(ptb):
    work, data = ptb
    raw = data / "raw"
    proc = recipe("gencnn_fbis.sh", "--train", raw / "ptb.train.txt", "--valid", raw / "ptb.valid.txt",
                  "--test", raw / "ptb.test.txt", "--out", "fbis", "--rows", "alpha_only", "--save-dir",
                  work / "ck" / "fbis", "--small", "--", "dataset.batch_size=50",
                  "model.adaptive_softmax_cutoff='50,100'", cwd=work)  # the tiny vocabulary is < 2000
    assert len(_ppl(proc.stdout)) == 1 and (work / "fbis" / "bin" / "dict.txt").is_file()
    proc = recipe("gencnn_fbis.sh", "--train", "ptb/raw/ptb.train.txt", "--valid", "ptb/raw/ptb.valid.txt",
                  "--test", "ptb/raw/ptb.test.txt", "--out", work / "fbis", "--rows", "alpha_only", "--save-dir",
                  "ck/fbis", "--small", "--", "dataset.batch_size=50", "model.adaptive_softmax_cutoff='50,100'",
                  cwd=work)  # absolute --out (prepared: not again), relative --save-dir (resumed)
    assert re.search(r"[Ll]oaded checkpoint \S*checkpoint_last\.pt", proc.stdout + proc.stderr)
    assert len(_ppl(proc.stdout)) == 1


# ------------------------------------------------------------------------------------------------
# small real-data recipes
# ------------------------------------------------------------------------------------------------
def _tiny_corpus(src, dst, langs, n_train, n_valid):
    dst.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        (dst / f"train.{lang}").write_text("\n".join(lines(src / f"train.{lang}")[:n_train]) + "\n", encoding="utf-8")
        (dst / f"valid.{lang}").write_text("\n".join(lines(src / f"valid.{lang}")[:n_valid]) + "\n", encoding="utf-8")


EXPECT_LATTICE = ("== expect about 0-2 BLEU here: {minutes} minutes of CPU per system is far from trained. The lattice "
                  "page's ~30 BLEU comes from training each system to early stopping: python scripts/reproduce.py "
                  "lattice --scale cpu (about 20 minutes of training per system and seed on CPU, over an hour for its "
                  "four systems; docs/lattice.md, Results)")


def test_lattice_zh_en_small_says_what_to_expect(tmp_path):
    """Its usage gives the quick run's BLEU and the command (and time) that reaches the page's; a
    re-scoring run ends with the same line, with the MINUTES it was given."""
    usage = recipe("lattice_zh_en_small.sh", "--help", cwd=tmp_path).stdout
    assert "about 0-2 valid BLEU" in usage and "~30 BLEU" in usage
    assert "  python scripts/reproduce.py lattice --scale cpu\n" in usage and "about 20 minutes" in usage
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    refs = ["the dog barks .", "i am here ."]
    for split in ("train", "valid"):
        (corpus / f"{split}.zh").write_text("狗叫。\n我在这里。\n", encoding="utf-8")
        (corpus / f"{split}.en").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    work = tmp_path / "work"
    for kind in ("lattice", "char"):  # prepared data and decodings in place: SCORE_ONLY only scores them
        (work / "bin" / kind).mkdir(parents=True)
        (work / "bin" / kind / "dict.zh.txt").write_text("", encoding="utf-8")
        for name in ("lattice", "char"):
            (work / "raw" / name).mkdir(parents=True, exist_ok=True)
            for split in ("train", "valid"):
                (work / "raw" / name / f"{split}.zh").write_text("", encoding="utf-8")
        (work / f"gen.{kind}").mkdir()
        fake_generate_log(work / f"gen.{kind}" / "generate-valid.txt", refs)
    for split in ("train", "valid"):
        (work / "raw" / f"{split}.en").write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    (work / "raw" / "train.all.en").write_text("", encoding="utf-8")
    (work / "raw" / "train.zh").write_text("", encoding="utf-8")
    proc = recipe("lattice_zh_en_small.sh", corpus, work, cwd=tmp_path,
                  env=dict(ENV, SYSTEMS="lattice char", SCORE_ONLY="1", MINUTES="7"))
    assert len(BLEU_DETOK.findall(proc.stdout)) == 2
    assert proc.stdout.rstrip().splitlines()[-1] == EXPECT_LATTICE.format(minutes=7)


def test_lattice_zh_en_small(shared_data, tmp_path):
    _tiny_corpus(shared_data / "tatoeba-zh-en", tmp_path / "corpus", ("zh", "en"), 120, 10)
    for lang in ("zh", "en"):  # a pair over the paper's training limit (70 characters, 50 words)
        long = " ".join(lines(tmp_path / "corpus" / f"train.{lang}")[:60]) + "\n"
        for split in ("train", "valid"):
            path = tmp_path / "corpus" / f"{split}.{lang}"
            path.write_text(path.read_text(encoding="utf-8") + long, encoding="utf-8")
    env = dict(ENV, SMALL="1", SYSTEMS="lattice char", THRESHOLD="1",
               ARCH_ARGS="--encoder-embed-dim 16 --decoder-embed-dim 16 --encoder-hidden-size 16 --decoder-hidden-size 16")
    proc = recipe("lattice_zh_en_small.sh", "corpus", "work", cwd=tmp_path, env=env)
    assert len(BLEU_DETOK.findall(proc.stdout)) == 2
    assert proc.stdout.rstrip().splitlines()[-1] == EXPECT_LATTICE.format(minutes=4)  # after the scores
    assert len(lines(tmp_path / "work" / "raw" / "train.zh")) == 120  # the long pair left training only
    for kind in ("lattice", "char"):  # ... and validation kept it
        assert "will be skipped" not in (tmp_path / "work" / f"train.{kind}.log").read_text(encoding="utf-8")
    link = tmp_path / "work" / "raw" / "lattice" / "valid.en"
    assert link.is_symlink() and link.resolve().is_file()  # a relative WORK_DIR gives no dangling links
    valid = lines(tmp_path / "corpus" / "valid.en")
    fake_generate_log(tmp_path / "work" / "gen.char" / "generate-valid.txt", lines(tmp_path / "work" / "raw" / "valid.en"))
    proc = recipe("lattice_zh_en_small.sh", tmp_path / "corpus", tmp_path / "work", cwd=tmp_path / "..",
                  env=dict(env, SYSTEMS="char", SCORE_ONLY="1"))  # absolute paths, another folder
    assert detok_bleu(proc.stdout)[0] == 100.0 and len(lines(tmp_path / "work" / "gen.char" / "valid.hyp")) == len(valid)


def test_mc_rnn_multi30k_check(shared_data, tmp_path):
    _tiny_corpus(shared_data / "multi30k-de-en", tmp_path / "m30k", ("de", "en"), 200, 12)
    args = ["--src", "m30k", "--out", "out", "--bpe-size", "200", "--dims", "16", "--archs", "mc_rnn_iwslt_de_en_3"]
    proc = recipe("mc_rnn_multi30k_check.sh", *args, "--small", cwd=tmp_path)
    assert 0 <= detok_bleu(proc.stdout)[0] <= 100
    tok = tmp_path / "tok.en"
    subprocess.run(["sacremoses", "-q", "-l", "en", "tokenize"], stdin=open(tmp_path / "m30k" / "valid.en"),
                   stdout=open(tok, "w"), env=ENV, check=True)
    fake_generate_log(tmp_path / "out" / "mc_rnn_iwslt_de_en_3" / "valid.gen", [l.lower() for l in lines(tok)])
    absolute = [str(tmp_path / a) if a in ("m30k", "out") else a for a in args]
    proc = recipe("mc_rnn_multi30k_check.sh", *absolute, "--score-only", cwd=tmp_path / "..")
    assert detok_bleu(proc.stdout)[0] == 100.0


TINY_DPN = [f"model.{k}={v}" for k, v in (("encoder_embed_dim", 16), ("decoder_embed_dim", 16), ("encoder_conv_dim", 16),
                                          ("decoder_conv_dim", 16), ("encoder_ffn_embed_dim", 32),
                                          ("decoder_ffn_embed_dim", 32))]


def test_recipes_on_preprocess_defaults(shared_data, tmp_path):
    """Recipes given a folder made by scripts/preprocess.sh with its defaults (sentencepiece, no
    tokenization) remove that BPE before scoring: no '▁' reaches score.py."""
    _tiny_corpus(shared_data / "multi30k-de-en", tmp_path / "m30k", ("de", "en"), 200, 12)
    run(["bash", REPO / "scripts" / "preprocess.sh", "--src", "de", "--tgt", "en", "--train", "m30k/train", "--valid",
         "m30k/valid", "--test", "m30k/valid", "--destdir", "bin", "--workers", "1"], tmp_path)
    assert list((tmp_path / "bin" / "bpe").glob("spm.*.model"))
    save = tmp_path / "dpn"
    proc = recipe("dpn_s2s.sh", "--row", "table1_dpn_s2s", "--data", "bin", "--refs", "m30k/valid.en", "--save-dir",
                  save, "--small", "--cpu", "--", *TINY_DPN, cwd=tmp_path)
    assert 0 <= detok_bleu(proc.stdout)[0] <= 100
    hyps = lines(save / "test.hyp")
    assert len(hyps) == 12 and not any("\u2581" in h for h in hyps)
    # mc_rnn_multi30k_check.sh reuses an OUT/bin that preprocess.sh made with its defaults
    (tmp_path / "out").mkdir()
    shutil.copytree(tmp_path / "bin", tmp_path / "out" / "bin")
    proc = recipe("mc_rnn_multi30k_check.sh", "--src", "m30k", "--out", "out", "--dims", "16", "--archs",
                  "mc_rnn_iwslt_de_en_3", "--small", cwd=tmp_path)
    assert 0 <= detok_bleu(proc.stdout)[0] <= 100
    assert not any("\u2581" in h for h in lines(tmp_path / "out" / "mc_rnn_iwslt_de_en_3" / "valid.hyp"))


@pytest.mark.parametrize("kind", ["relative", "absolute"])
def test_gencnn_rerank_demo(kind, tmp_path):
    """The demo starts over in --out (no stage to resume or re-score): both kinds run it end to end."""
    (tmp_path / "cwd").mkdir()
    out = "demo" if kind == "relative" else tmp_path / "demo"
    proc = recipe("gencnn_rerank_demo.sh", "--out", out, "--small", cwd=tmp_path if kind == "relative" else tmp_path / "cwd")
    assert (tmp_path / "demo" / "test.reranked.txt").is_file()
    assert len(lines(tmp_path / "demo" / "test.reranked.txt")) == 30
    assert re.search(r"BLEU", proc.stdout), proc.stdout
