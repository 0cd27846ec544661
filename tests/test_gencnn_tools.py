"""scripts/rerank_nbest.py and scripts/sample_lm.py (genCNN paper, Sections 5.1 and 6.2)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fairseq_local_repro.tools import rerank_nbest as rerank
from fairseq_local_repro.tools import sample_lm

REPO = Path(__file__).resolve().parent.parent


FAIRSEQ_NBEST = (
    "S-1\tquelle b\nT-1\tthe cat sat on the mat\n"
    "H-1\t-0.40\tthe cat on sat the mat\nD-1\t-0.40\tthe cat on sat the mat\n"
    "H-1\t-0.45\tthe cat sat on the mat\nD-1\t-0.45\tthe cat sat on the mat\n"
    "S-0\tquelle a\nT-0\ta dog runs in the park\n"
    "H-0\t-0.50\ta dog in runs the park\nD-0\t-0.50\ta dog in runs the park\n"
    "H-0\t-0.70\ta dog runs in the park\nD-0\t-0.70\ta dog runs in the park\n"
    "Generate test with beam=2: BLEU4 = 10.00\n"
)
MOSES_NBEST = (
    "0 ||| a dog in runs the park ||| lm: -3 tm: -2 ||| -5.0\n"
    "0 ||| a dog runs in the park ||| lm: -3 tm: -2.1 ||| -5.1\n"
    "1 ||| the cat on sat the mat ||| lm: -3 ||| -4.0\n"
    "1 ||| the cat sat on the mat ||| lm: -3 ||| -4.1\n"
    "1 ||| the the the ||| lm: -9 ||| -9.0\n"
)
REFS = "a dog runs in the park\nthe cat sat on the mat\n"


def fake_lm(sentences):
    """An 'LM' that likes 'runs in' and 'sat on': (sum log-prob, tokens)."""
    return [(-5.0 + 4.0 * (("runs in" in s) + ("sat on" in s)), len(s.split()) + 1) for s in sentences]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "dev.txt").write_text(FAIRSEQ_NBEST, encoding="utf-8")
    (tmp_path / "test.nbest").write_text(MOSES_NBEST, encoding="utf-8")
    (tmp_path / "test.ref").write_text(REFS, encoding="utf-8")
    return tmp_path


def test_read_both_formats(files):
    dev = rerank.read_nbest(str(files / "dev.txt"))
    assert dev.fmt == "fairseq" and dev.ids() == [0, 1]
    assert dev.hyps[1] == [("the cat on sat the mat", -0.40), ("the cat sat on the mat", -0.45)]
    assert dev.refs[0] == "a dog runs in the park"
    test = rerank.read_nbest(str(files / "test.nbest"))
    assert test.fmt == "moses" and len(test.hyps[1]) == 3 and test.hyps[0][1] == ("a dog runs in the park", -5.1)


def test_rerank_tunes_on_dev_and_improves_test(files, capsys):
    out = files / "reranked.txt"
    args = rerank.build_parser().parse_args([
        "--lm", "unused.pt", "--dev-nbest", str(files / "dev.txt"), "--test-nbest", str(files / "test.nbest"),
        "--test-ref", str(files / "test.ref"), "--output", str(out), "--lm-weights", "0,0.5,1,2"])
    res = rerank.run(args, scorer=fake_lm)
    assert res["lm_weight"] > 0 and res["dev_after"] == pytest.approx(100.0)
    assert res["dev_before"] < 100 and res["test_before"] < res["test_after"] == pytest.approx(100.0)
    assert out.read_text(encoding="utf-8") == REFS
    printed = capsys.readouterr().out
    assert "BLEU before" in printed and "test" in printed


@pytest.mark.parametrize("content,message", [
    ("0 ||| only two ||| fields\n", r"bad\.nbest:1: expected 'id \|\|\| hypothesis"),
    ("0 ||| ok ||| f ||| -1\nx ||| hyp ||| f ||| -1\n", r"bad\.nbest:2: sentence id and total score must be numbers"),
    ("H-0\t-0.1\tfine\nH-1\tnotanumber\thyp\n", r"bad\.nbest:2: H- line needs a numeric score"),
    ("H-0\t-0.1\tfine\nrandom garbage\n", r"bad\.nbest:2: not a fairseq-generate line"),
    ("\n\n", r"bad\.nbest: no hypothesis line found"),
])
def test_bad_nbest_gives_file_and_line(tmp_path, content, message):
    bad = tmp_path / "bad.nbest"
    bad.write_text(content, encoding="utf-8")
    with pytest.raises(rerank.NbestError, match=message):
        rerank.read_nbest(str(bad))


def test_reference_mismatch_and_cli_error_is_one_line(files):
    nb = rerank.read_nbest(str(files / "test.nbest"))
    short = files / "short.ref"
    short.write_text("one line\n", encoding="utf-8")
    with pytest.raises(rerank.NbestError, match=r"short\.ref: has 1 lines but .*test\.nbest has sentence id 1"):
        rerank.read_refs(str(short), nb)
    with pytest.raises(rerank.NbestError, match=r"test\.nbest: no T- reference lines"):
        rerank.read_refs(None, nb)
    with pytest.raises(rerank.NbestError, match="--lm-weights"):
        rerank.parse_grid("1:0:x", "--lm-weights")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "rerank_nbest.py"), "--lm", "x.pt",
                           "--dev-nbest", str(short), "--dev-ref", str(short)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rerank_nbest.py: error: {short}: no hypothesis line found (expected fairseq-generate H-/D- lines "
        "or Moses 'id ||| hyp ||| feats ||| score')"]


# ------------------------------------------------------------------------------------------
# with a real (tiny) genCNN checkpoint trained through fairseq-train
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    from contract_lib import make_lm_data
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train as train_cli

    tmp = tmp_path_factory.mktemp("gencnn_tools")
    data_dir, task_args = make_lm_data(tmp)
    argv = [str(data_dir), "--user-dir", str(REPO / "fairseq_local"), "--task", "language_modeling",
            *task_args, "--arch", "gencnn", "--decoder-embed-dim", "6", "--alpha-length", "6",
            "--beta-length", "4", "--alpha-layers", "(2,3,3),(2,2,2)", "--beta-layers", "(2,3,0),(1,3,0)",
            "--fc-dim", "8", "--optimizer", "adam", "--lr", "0.01", "--max-tokens", "400", "--max-update", "3",
            "--save-dir", str(tmp / "ckpt"), "--cpu", "--no-progress-bar", "--num-workers", "0",
            "--required-batch-size-multiple", "1", "--disable-validation", "--no-epoch-checkpoints"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train_cli.main)
    return tmp / "ckpt" / "checkpoint_last.pt", data_dir


def test_sample_lm_is_seeded_and_completes_prompts(tiny_lm, tmp_path):
    ckpt, data = tiny_lm
    words = (Path(data) / "dict.txt").read_text(encoding="utf-8").split()[0:4:2]
    prompt = " ".join(words)

    def run(seed, out):
        sample_lm.main(["--path", str(ckpt), "--data", str(data), "--prompt", prompt, "--from-scratch", "1",
                        "--num-samples", "3", "--topk", "10", "--temperature", "1.5", "--seed", str(seed),
                        "--max-len", "10", "--cpu", "--output", str(out)])
        return out.read_text(encoding="utf-8").splitlines()

    a, b, c = run(7, tmp_path / "a"), run(7, tmp_path / "b"), run(8, tmp_path / "c")
    assert a == b and a != c
    assert a[0] == f"P-0\t{prompt}" and sum(line.startswith("S-0-") for line in a) == 3
    assert all(line.split("\t")[2].startswith(prompt) for line in a if line.startswith("S-0-"))
    assert a[4] == "P-1\t" and sum(line.startswith("S-1-") for line in a) == 3


def test_rerank_with_a_real_lm(tiny_lm, files):
    ckpt, data = tiny_lm
    vocab = [line.split()[0] for line in (Path(data) / "dict.txt").read_text(encoding="utf-8").splitlines()]
    args = rerank.build_parser().parse_args(["--lm", str(ckpt), "--lm-data", str(data), "--cpu",
                                             "--dev-nbest", str(files / "dev.txt"), "--lm-weights", "0,1"])
    scorer = rerank.lm_scorer(args)
    sentences = [" ".join(vocab[:5]), " ".join(vocab[3:5])]
    scored = scorer(sentences)
    assert [n for _, n in scored] == [6, 3]  # words + end of sentence
    assert all(s < 0 for s, _ in scored)
    res = rerank.run(args, scorer=scorer)
    assert res["lm_weight"] in (0.0, 1.0) and res["dev_after"] >= res["dev_before"]


# ------------------------------------------------------------------------------------------
# sample_lm.py's score is the model's log-probability; any temperature > 0 samples
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_hub(tiny_lm):
    from fairseq_local_repro.lm_hub import load_hub

    ckpt, data = tiny_lm
    return load_hub(str(ckpt), str(data), cpu=True)


def _fairseq_scores(hub, texts):
    """Reference: fairseq's own SequenceScorer (as fairseq-eval-lm scores), per text."""
    from fairseq.sequence_scorer import SequenceScorer

    out = []
    for text in texts:
        tokens = hub.encode(text)  # w1 .. wn </s>; the LM reads </s> w1 .. wn
        sample = {"net_input": {"src_tokens": torch.cat([tokens[-1:], tokens[:-1]]).unsqueeze(0),
                                "src_lengths": torch.tensor([len(tokens)])},
                  "target": tokens.unsqueeze(0)}
        out.append(SequenceScorer(hub.task.target_dictionary).generate(hub.models, sample)[0][0]["positional_scores"])
    return out


@pytest.mark.parametrize("temperature,topk,topp", [(1.0, -1, -1.0), (0.5, 3, -1.0), (2.5, -1, 0.6)])
def test_sample_lm_score_is_the_models_log_prob(tiny_hub, tiny_lm, temperature, topk, topp):
    """Whatever --temperature / --topk / --topp sharpen, the score is the model's own mean
    log-probability of the sampled words and end of sentence (fairseq's SequenceScorer), the prompt
    not counted; the same sentence gets the same score at any temperature."""
    words = (Path(tiny_lm[1]) / "dict.txt").read_text(encoding="utf-8").split()[0:4:2]
    args = sample_lm.build_parser().parse_args(["--path", "x", "--temperature", str(temperature),
                                               "--topk", str(topk), "--topp", str(topp), "--max-len", "8"])
    for prompt in ("", " ".join(words)):
        drawn = sample_lm.sample(tiny_hub, prompt, 4, args, seed=3)
        assert len(drawn) == 4
        reference = _fairseq_scores(tiny_hub, [text for text, _ in drawn])
        n_prompt = len(prompt.split())
        for (text, score), ref in zip(drawn, reference):
            assert text.split()[:n_prompt] == prompt.split()
            assert score == pytest.approx(float(ref[n_prompt:].mean()), abs=1e-5)
            assert score < 0


@pytest.mark.parametrize("temperature", [1e-8, 1e-30, 1e-300])
def test_sample_lm_tiny_temperature_is_greedy(tiny_hub, temperature):
    """fairseq's sampling ends in 'invalid multinomial distribution' once the tempered mass sits on a
    token the generator masks; a tiny temperature here is greedy search (beam 1)."""
    args = sample_lm.build_parser().parse_args(["--path", "x", "--temperature", str(temperature),
                                               "--max-len", "6", "--min-len", "2"])
    drawn = sample_lm.sample(tiny_hub, "", 3, args, seed=1)
    greedy = tiny_hub.generate([torch.LongTensor([tiny_hub.task.source_dictionary.eos()])], beam=1,
                               max_len_b=6, min_len=2)[0][0]
    assert {text for text, _ in drawn} == {tiny_hub.decode(greedy["tokens"])}
    assert len(drawn[0][0].split()) >= 2


def test_tempered_sampling_renormalises_over_allowed_tokens():
    """The search step: a masked token (-inf) never drawn, draws follow softmax(lprobs / T) over the
    others, and a tiny T picks the best allowed token."""
    from fairseq.data import Dictionary

    from fairseq_local_repro.lm_hub import tempered_sampling

    d = Dictionary()
    lprobs = torch.log_softmax(torch.tensor([9.0, 1.0, 0.0, -1.0]), -1)
    lprobs[0] = float("-inf")  # the likeliest token is forbidden, as eos before --min-len
    torch.manual_seed(0)
    search = tempered_sampling(d, 0.5)
    counts = torch.zeros(4)
    for _ in range(4):
        _, idx, _ = search.step(0, lprobs.expand(1, 1000, 4).clone(), torch.zeros(1, 1000, 1))
        counts += torch.bincount(idx.flatten(), minlength=4)
    expected = torch.softmax(torch.tensor([1.0, 0.0, -1.0]) / 0.5, -1)
    assert counts[0] == 0
    assert torch.allclose(counts[1:] / counts.sum(), expected, atol=0.03)
    _, idx, _ = tempered_sampling(d, 1e-12).step(0, lprobs.expand(1, 5, 4).clone(), torch.zeros(1, 5, 1))
    assert idx.flatten().tolist() == [1] * 5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_sample_lm_temperature_not_positive(tiny_lm, value, capsys):
    ckpt, data = tiny_lm
    with pytest.raises(SystemExit) as e:
        sample_lm.main(["--path", str(ckpt), "--data", str(data), "--from-scratch", "1", "--temperature", value])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--temperature must be a number > 0" in err and f"got {value}" in err


def test_sample_lm_data_without_dictionary(tiny_lm, tmp_path, capsys):
    with pytest.raises(SystemExit):
        sample_lm.main(["--path", str(tiny_lm[0]), "--data", str(tmp_path), "--from-scratch", "1", "--cpu"])
    assert f"error: {tmp_path}: no dict.txt (give --data, the LM's binarized data folder)" in \
        capsys.readouterr().err.strip().splitlines()[-1]
