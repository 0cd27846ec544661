"""A new user's first hour, the hub (``Model.from_pretrained``): a checkpoint of another model
class, other data, a data directory that is not there, and inputs the model cannot serve: one line
each; a blank source translates into nothing, an empty prompt samples from scratch.

Most cases run the code path in-process and finish it as the plugin's excepthook does (``call`` of
tests/test_bad_inputs.py); a few run the real CLIs to check the hook.  The tiny checkpoints come
from the session fixture ``tiny_checkpoints`` (tests/conftest.py).
"""
import os

import pytest

from contract_lib import make_translation_data
from fairseq_local_core.errors import one_line
from fairseq_local.models.mc_rnn import MCRNNModel
from fairseq_local.models.mc_rnn_lm import MCRNNLanguageModel


def test_hub_wrong_class_and_other_data(tmp_path, tiny_checkpoints):
    lm, lm_data, _ = tiny_checkpoints["lm"]
    with pytest.raises(TypeError) as info:
        MCRNNModel.from_pretrained(lm.parent, data_name_or_path=str(lm_data))
    assert one_line(info.value) == (f"from_pretrained: {lm} holds a MCRNNLanguageModel model, not a MCRNNModel")
    mt = tiny_checkpoints["mt"][0]
    other, _ = make_translation_data(tmp_path, n_train=6, n_valid=2, seed=3)
    with pytest.raises(ValueError) as info:
        MCRNNModel.from_pretrained(mt.parent, data_name_or_path=str(other))
    assert one_line(info.value).startswith(f"{mt} does not fit the dictionaries of {other}: ")


@pytest.fixture(scope="module")
def hubs(tiny_checkpoints):
    mt, mt_data, _ = tiny_checkpoints["mt"]
    lm, lm_data, _ = tiny_checkpoints["lm"]
    return (MCRNNModel.from_pretrained(mt.parent, data_name_or_path=str(mt_data)),
            MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path=str(lm_data)))


@pytest.mark.parametrize("which,method,arg,needle", [
    ("mt", "translate", None, "translate(): expected a sentence (str) or a list of sentences, got NoneType None"),
    ("mt", "translate", 42, "translate(): expected a sentence (str) or a list of sentences, got int 42"),
    ("mt", "translate", ["w1", 3], "translate(): expected a sentence (str) or a list of sentences, got int 3"),
    ("mt", "translate", b"w1 w2", "translate(): expected a sentence (str) or a list of sentences, got bytes b'w1 w2'"),
    ("mt", "translate", " ".join(["w1"] * 600), "sentence 1 has 601 tokens, more than max_tokens=500 (the "
                                                "checkpoint's --max-tokens): pass max_tokens=601 or more to "
                                                "from_pretrained, or split the sentence"),
    ("lm", "score", "", "score(): the sentence is empty: there is nothing to score; leave out blank lines"),
    ("lm", "score", ["w1 w2", ""], "score(): sentence 2 of 2 is empty: there is nothing to score; leave out blank "
                                   "lines"),
    ("lm", "score", None, "score(): expected a sentence (str) or a list of sentences, got NoneType None"),
    ("lm", "sample", ("w1",), None),  # a tuple of sentences is fine
])
def test_hub_inputs(hubs, which, method, arg, needle):
    hub = hubs[0] if which == "mt" else hubs[1]
    if needle is None:
        out = getattr(hub, method)(arg, max_len_b=3)
        assert isinstance(out, list) and len(out) == 1 and isinstance(out[0], str)
        return
    with pytest.raises(Exception) as info:
        getattr(hub, method)(arg)
    assert one_line(info.value) == needle


def test_hub_blank_source_translates_into_nothing(hubs):
    """fairseq would decode max_len_b tokens from an empty source; a blank source gives "" (as
    the lattice hub and a blank line of fairseq-interactive), the other sentences their translation."""
    mt = hubs[0]
    assert mt.translate("") == "" and mt.translate("  ") == "" and mt.sample("") == ""
    alone = mt.translate("w1 w2", beam=2)
    assert mt.translate(["", "w1 w2", " "], beam=2) == ["", alone, ""]
    assert mt.translate(["\t"]) == [""]


def test_hub_language_model_samples_from_an_empty_prompt(hubs):
    """An empty prompt is not an error for a language model: it samples from scratch."""
    out = hubs[1].sample("", max_len_b=3)
    assert isinstance(out, str) and len(out.split()) <= 3


def test_hub_data_name_or_path(tmp_path, monkeypatch, tiny_checkpoints):
    lm, lm_data, _ = tiny_checkpoints["lm"]
    with pytest.raises(FileNotFoundError) as info:
        MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path="../no-such-data")
    assert one_line(info.value) == (f"from_pretrained: data_name_or_path ../no-such-data: no such directory (relative "
                                    f"to the model directory: {lm.parent.parent / 'no-such-data'}); give the "
                                    "binarized data directory the model was trained with (it holds the dictionaries)")
    with pytest.raises(FileNotFoundError) as info:
        MCRNNLanguageModel.from_pretrained(lm.parent)  # "." = the model directory, which holds no dictionary
    assert one_line(info.value) == (f"from_pretrained: data_name_or_path . (relative to the model directory: "
                                    f"{lm.parent}) holds no dictionary (dict*.txt); give the binarized data directory "
                                    "the model was trained with")
    # "./data" meant relative to the working directory (fairseq reads it relative to the model directory)
    monkeypatch.chdir(lm_data.parent)
    hub = MCRNNLanguageModel.from_pretrained(lm.parent, data_name_or_path=f"./{lm_data.name}")
    assert hub.task.dictionary.symbols == MCRNNLanguageModel.from_pretrained(
        lm.parent, data_name_or_path=str(lm_data)).task.dictionary.symbols
    assert os.path.isabs(hub.cfg.task.data) and os.path.samefile(hub.cfg.task.data, lm_data)
