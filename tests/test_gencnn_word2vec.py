"""scripts/gencnn_word2vec.py: word2vec vectors (gensim) for genCNN's embedding initialisation
(paper Section 4.1), read by ``--embed-path`` (the model's) and by fairseq's ``parse_embedding``."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fairseq_local  # noqa: F401
from fairseq import utils as fairseq_utils
from fairseq.data import Dictionary
from fairseq_local.models.gencnn import GenCNNConfig, GenCNNDecoder

pytest.importorskip("gensim")
REPO = Path(__file__).resolve().parent.parent
TEXT = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "rare words appear once"] * 5


def run(*args, cwd=REPO):
    return subprocess.run([sys.executable, "scripts/gencnn_word2vec.py", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)


def test_vectors_load_as_embeddings(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    d = Dictionary()
    for w in "the cat sat on mat dog log a and".split():  # not 'rare words appear once'
        d.add_symbol(w)
    d.save(str(tmp_path / "dict.txt"))
    vec = tmp_path / "w2v.txt"
    proc = run("--train", train, "--dict", tmp_path / "dict.txt", "--dim", 6, "--out", vec, "--seed", 3)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # fairseq's own reader (load_embedding's format): header skipped, one vector per word
    parsed = fairseq_utils.parse_embedding(str(vec))
    assert set(parsed) == set("the cat sat on mat dog log a and".split()) | {"<unk>"}  # 4 words -> <unk>
    assert all(v.shape == (6,) for v in parsed.values())
    # the same seed gives the same file
    again = tmp_path / "again.txt"
    assert run("--train", train, "--dict", tmp_path / "dict.txt", "--dim", 6, "--out", again, "--seed", 3).returncode == 0
    assert again.read_bytes() == vec.read_bytes()
    # the decoder starts from these vectors (float32 as written), the padding row stays zero
    cfg = GenCNNConfig(decoder_embed_dim=6, alpha_length=9, beta_length=6, alpha_layers="(3,4,3),(2,3,2)",
                       beta_layers="(3,4,0),(2,3,0)", fc_dim=8, embed_path=str(vec))
    dec = GenCNNDecoder(cfg, d)
    for w, v in parsed.items():
        torch.testing.assert_close(dec.embed_tokens.weight[d.index(w)], v, rtol=0, atol=1e-6)
    assert dec.embed_tokens.weight[d.pad()].abs().sum() == 0


def test_bad_inputs_one_line(tmp_path):
    bad_dict = tmp_path / "dict.txt"
    bad_dict.write_text("the 3\nbroken\n", encoding="utf-8")
    (tmp_path / "t.txt").write_text("the cat\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    cases = [(["--train", tmp_path / "missing.txt", "--out", tmp_path / "o"], "missing.txt: No such file"),
             (["--train", tmp_path / "t.txt", "--dict", bad_dict, "--out", tmp_path / "o"], "dict.txt:2: expected 'WORD COUNT'"),
             (["--train", tmp_path / "empty.txt", "--out", tmp_path / "o"], "empty.txt: no words"),
             (["--train", tmp_path / "t.txt", "--dim", 0, "--out", tmp_path / "o"], "must be positive")]
    for args, msg in cases:
        proc = run(*args)
        assert proc.returncode != 0 and msg in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)
