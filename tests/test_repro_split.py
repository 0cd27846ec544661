"""fairseq_local_repro/prepare.py: the reproduction harness's held-out sets share no source with training,
checked on the real corpora (Tatoeba Zh-En as the lattice family splits it, Multi30k as the
translation and language-model families split it), without training anything."""
from pathlib import Path

from fairseq_local_repro import prepare

REPO = Path(__file__).resolve().parents[1]


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def norm(line):  # written out independently of prepare.normalise_source
    return " ".join(line.lower().split())


def test_normalise_source_folds_case_and_whitespace():
    assert prepare.normalise_source("  Ein  Mann\tläuft. ") == prepare.normalise_source("ein mann LÄUFT.")
    assert prepare.normalise_source("ein mann") != prepare.normalise_source("einmann")


def test_tatoeba_split_of_the_lattice_family_shares_no_source_with_training(shared_data):
    corpus = shared_data / "tatoeba-zh-en"
    train = {k: lines(corpus / f"train.{k}") for k in ("zh", "en", "attribution")}
    test = {k: lines(corpus / f"valid.{k}") for k in ("zh", "en", "attribution")}
    parts, dropped = prepare.split_tatoeba(train, test, 1000)
    # the overlap of the uncleaned split: 205 of the 1,000 dev and 198 of the 1,000 test sources
    assert dropped == {"dev": 205, "test": 198}
    assert {k: len(v["zh"]) for k, v in parts.items()} == {"train": 25655, "dev": 795, "test": 802}
    seen = {norm(x) for x in parts["train"]["zh"]}
    assert not any(norm(x) in seen for x in parts["dev"]["zh"] + parts["test"]["zh"])
    # every kept pair keeps its English side and its authors: the triples are the corpus's own, in order
    triples = list(zip(test["zh"], test["en"], test["attribution"]))
    kept = list(zip(parts["test"]["zh"], parts["test"]["en"], parts["test"]["attribution"]))
    it = iter(triples)
    assert all(t in it for t in kept)
    # nothing dropped that does not occur in training
    assert len([x for x in test["zh"] if norm(x) not in seen]) == 802


def test_multi30k_held_out_sets_share_no_source_with_training(shared_data):
    corpus = shared_data / "multi30k-de-en"
    de, en = lines(corpus / "train.de"), lines(corpus / "train.en")
    valid = {"de": lines(corpus / "valid.de"), "en": lines(corpus / "valid.en")}
    held, dropped = prepare.drop_seen_sources(de[:-1000], {
        "dev": {"de": de[-1000:], "en": en[-1000:]}, "test": valid}, "de")
    assert dropped == {"dev": 3, "test": 2}
    seen = {norm(x) for x in de[:-1000]}
    assert not any(norm(x) in seen for x in held["dev"]["de"] + held["test"]["de"])
    assert len(held["test"]["en"]) == len(held["test"]["de"]) == 1012
    # the language-model families: the English captions themselves
    held, dropped = prepare.drop_seen_sources(en[:-1000], {"dev": {"en": en[-1000:]}, "test": {"en": valid["en"]}},
                                                "en")
    assert dropped == {"dev": 1, "test": 1}
