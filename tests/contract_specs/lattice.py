"""Contract spec of the lattice family: a tiny synthetic Chinese lattice corpus, binarized by
fairseq_local_repro.tools.preprocess_lattices, and every lattice_rnnsearch arch shrunk to a few thousand params."""
import hashlib
import random
from pathlib import Path
from typing import List, Tuple

from contract_lib import ContractSpec
from fairseq_local_repro.tools import preprocess_lattices

CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]


def _zh(word: str, rng_seed: str) -> str:
    """A deterministic 1-3 character Chinese rendering of a synthetic source word."""
    h = int(hashlib.md5((rng_seed + word).encode()).hexdigest(), 16)
    n = 1 + h % 3
    return "".join(CJK[(h >> (8 * k)) % len(CJK)] for k in range(n))


def synthetic_lattice_lines(n: int, seed: int = 0) -> Tuple[List[str], List[str]]:
    """(lattice lines, target lines): each source sentence merges three tokenizations (words;
    first characters split off; adjacent short words joined), like three segmentation standards."""
    from fairseq_local_core.lattice import merge_tokenizations
    from fairseq_local.data.synthetic import SyntheticTranslationCorpus

    corpus = SyntheticTranslationCorpus(seed=seed, max_len=9)
    rng = random.Random(seed)
    lats, tgts = [], []
    for src, tgt in corpus.sample(n):
        words = [_zh(w, "s") for w in src.split()]
        split = [piece for w in words for piece in ([w[0], w[1:]] if len(w) > 1 and rng.random() < 0.5 else [w])]
        joined, k = [], 0
        while k < len(words):
            if k + 1 < len(words) and len(words[k]) + len(words[k + 1]) <= 3 and rng.random() < 0.5:
                joined.append(words[k] + words[k + 1])
                k += 2
            else:
                joined.append(words[k])
                k += 1
        lats.append(merge_tokenizations("".join(words), [words, split, joined]).to_line())
        tgts.append(tgt)
    return lats, tgts


def make_lattice_data(tmp: Path, n_train=48, n_valid=8, seed=0):
    raw = tmp / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for k, (split, n) in enumerate((("train", n_train), ("valid", n_valid), ("test", n_valid))):
        lats, tgts = synthetic_lattice_lines(n, seed + k)
        (raw / f"{split}.zh").write_text("".join(x + "\n" for x in lats), encoding="utf-8")
        (raw / f"{split}.en").write_text("".join(x + "\n" for x in tgts), encoding="utf-8")
    out = tmp / "bin"
    rc = preprocess_lattices.main([
        "--source-lang", "zh", "--target-lang", "en", "--trainpref", str(raw / "train"),
        "--validpref", str(raw / "valid"), "--testpref", str(raw / "test"), "--destdir", str(out),
        "--workers", "1"])
    assert rc == 0
    return out, ["--source-lang", "zh", "--target-lang", "en"]


TINY = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
        "--decoder-hidden-size", "8", "--decoder-out-embed-dim", "8", "--attention-dim", "8"]

SPECS = {
    "lattice_rnnsearch": ContractSpec(
        task="lattice_translation",
        tiny_args=TINY,
        make_data=make_lattice_data,
        hydra_config="lattice/dwl_gating",
        hydra_overrides=["model.encoder_embed_dim=8", "model.encoder_hidden_size=8", "model.decoder_embed_dim=8",
                         "model.decoder_hidden_size=8", "model.decoder_out_embed_dim=8", "model.attention_dim=8"],
    ),
}
