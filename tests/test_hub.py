"""``Model.from_pretrained`` (fairseq_local/hub.py): fairseq's hub interface for our tasks.

The stateful language models score and sample sentences as the model computes them from a zero
state; lattice checkpoints translate the lattice of their input (not its characters as one word);
translation checkpoints refuse ``score`` with one line. References are computed from the loaded
model's own forward pass, independently of fairseq's SequenceGenerator / SequenceScorer."""
import subprocess
from pathlib import Path

import pytest
import torch

from contract_lib import console_script, make_lm_data, make_translation_data
from contract_specs.lattice import make_lattice_data

TRAIN = ["--optimizer", "adam", "--lr", "0.01", "--max-update", "3", "--cpu", "--no-epoch-checkpoints",
         "--num-workers", "0", "--seed", "1", "--required-batch-size-multiple", "1"]
S2S = ["--encoder-embed-dim", "8", "--encoder-hidden-size", "8", "--decoder-embed-dim", "8",
       "--decoder-hidden-size", "8", "--attention-dim", "8"]


def _train(data: Path, save: Path, args):
    proc = subprocess.run([console_script("fairseq-train"), str(data), "--user-dir",
                           str(Path(__file__).resolve().parents[1] / "fairseq_local"), *args, *TRAIN,
                           "--save-dir", str(save)], capture_output=True, text=True, timeout=1200,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return save


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub_lm")
    data, task_args = make_lm_data(tmp)
    save = _train(data, tmp / "ck", ["--task", "stateful_language_modeling", "--arch", "mc_rnn_lm_ptb",
                                     "--decoder-embed-dim", "8", "--decoder-hidden-size", "8",
                                     "--batch-size", "4", *task_args])
    return save, data


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub_mt")
    data, task_args = make_translation_data(tmp)
    return _train(data, tmp / "ck", ["--arch", "mc_rnn_iwslt_de_en_3", *S2S, "--max-tokens", "500", *task_args]), data


@pytest.fixture(scope="module")
def lattice(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hub_lat")
    data, task_args = make_lattice_data(tmp)
    save = _train(data, tmp / "ck", ["--task", "lattice_translation", "--arch", "lattice_dwl_gating", *S2S,
                                     "--decoder-out-embed-dim", "8", "--batch-size", "8", *task_args])
    return save, data, tmp / "raw"


def _lm_log_probs(model, dictionary, words):
    """log p(w_i | </s> w_<i) from one forward pass of the model over the whole sentence (zero state)."""
    ids = torch.tensor([dictionary.eos()] + [dictionary.index(w) for w in words]).unsqueeze(0)
    with torch.no_grad():
        logits, _ = model(ids)
    lprobs = torch.log_softmax(logits.float(), dim=-1)[0]
    return lprobs[torch.arange(len(words)), ids[0, 1:]], lprobs


def test_stateful_lm_scores_and_samples_as_the_model_computes(lm):
    from fairseq_local.models.mc_rnn_lm import MCRNNLanguageModel

    save, data = lm
    hub = MCRNNLanguageModel.from_pretrained(save, data_name_or_path=str(data)).eval()
    model, dictionary = hub.models[0], hub.task.source_dictionary
    words = [dictionary[i] for i in range(dictionary.nspecial, dictionary.nspecial + 5)]
    scored = hub.score(" ".join(words))
    reference, _ = _lm_log_probs(model, dictionary, words)
    assert scored["tokens"][:len(words)].tolist() == [dictionary.index(w) for w in words]
    torch.testing.assert_close(scored["positional_scores"], reference, atol=1e-5, rtol=1e-5)

    # greedy continuation: every generated word is the argmax after the words before it
    prefix = words[:2]
    hypo = hub.generate([hub.encode(" ".join(prefix))], beam=1, max_len_b=6)[0][0]
    tokens = hypo["tokens"].tolist()
    assert tokens[:2] == [dictionary.index(w) for w in prefix]
    generated = [dictionary[t] for t in tokens if t != dictionary.eos()]
    _, lprobs = _lm_log_probs(model, dictionary, generated)
    for i in range(len(prefix), len(generated)):
        assert lprobs[i - 1].argmax().item() == dictionary.index(generated[i]), (i, generated)


def test_lattice_checkpoint_translates_the_lattice(lattice):
    from fairseq_local_core.lattice import Lattice, unpack
    from fairseq_local.models.lattice_rnnsearch import LatticeRNNSearchModel

    save, data, raw = lattice
    hub = LatticeRNNSearchModel.from_pretrained(save, data_name_or_path=str(data), lattice_segmenters="jieba").eval()
    line = (raw / "test.zh").read_text(encoding="utf-8").splitlines()[0]
    lat = Lattice.from_line(line)
    packed = hub.encode(line)
    n, starts, ends, words, path = unpack(packed.numpy())
    assert n == lat.n_chars and list(zip(starts.tolist(), ends.tolist())) == list(lat.edges)
    assert words.tolist() == [hub.src_dict.index(w) for w in lat.words()]

    hypo = hub.generate([packed], beam=1)[0][0]
    # teacher-forced log-probabilities of the hypothesis on the collated lattice batch
    dataset = hub.task.build_dataset_for_inference([packed], torch.tensor([n]))
    net = dataset.collater([dataset[0]])["net_input"]
    target = hypo["tokens"].unsqueeze(0)
    prev = torch.cat([torch.tensor([[hub.tgt_dict.eos()]]), target[:, :-1]], dim=1)
    with torch.no_grad():
        logits, _ = hub.models[0](**{k: v for k, v in net.items() if k != "prev_output_tokens"},
                                  prev_output_tokens=prev)
    reference = torch.log_softmax(logits.float(), -1)[0].gather(1, target[0].unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(hypo["positional_scores"], reference, atol=1e-4, rtol=1e-4)

    raw_sentence = "".join(lat.chars)
    assert hub.translate(raw_sentence) == hub.translate(hub.task.lattice_builder(raw_sentence).to_line())
    assert hub.translate("") == ""


def test_translation_hub_and_errors(mt, lm):
    from fairseq_local.models.mc_rnn import MCRNNModel

    save, data = mt
    hub = MCRNNModel.from_pretrained(save, data_name_or_path=str(data))
    sentence = (data.parent / "raw" / "test.src").read_text(encoding="utf-8").splitlines()[0]
    assert isinstance(hub.translate(sentence, beam=2), str)
    with pytest.raises(NotImplementedError, match="translation model; score"):
        hub.score(sentence)
    with pytest.raises(TypeError, match="holds a MCRNNLanguageModel model, not a MCRNNModel"):
        MCRNNModel.from_pretrained(lm[0], data_name_or_path=str(lm[1]))
    with pytest.raises(FileNotFoundError, match="model.pt: no such checkpoint"):
        MCRNNModel.from_pretrained(save, checkpoint_file="model.pt", data_name_or_path=str(data))
    with pytest.raises(FileNotFoundError, match="no such directory"):
        MCRNNModel.from_pretrained(save, data_name_or_path=str(data / "missing"))
