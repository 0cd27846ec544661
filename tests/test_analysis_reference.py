"""The analysis scripts' aggregation against hand computations: the parallel-cells masking table
(per-condition, per-group and per-word perplexities; which cells are masked when) and the MC-RNN
BLEU-by-length buckets (Figure 5)."""
import math

import pytest
import torch

# imported under their path in the repository (fairseq_local_repro.analysis.*), the name
# tests/mutation/mutation.sh gives their mutants
from fairseq_local_repro.analysis import mc_rnn_bleu_by_length as bbl
from fairseq_local_repro.analysis import parallel_cells_masking as masking


def test_perplexity_of_a_word_subset_by_hand():
    nll = torch.tensor([0.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    count = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    assert masking.perplexity(nll, count) == pytest.approx(math.exp(11.0 / 6.0), rel=1e-12)
    assert masking.perplexity(nll, count, torch.tensor([1, 3])) == pytest.approx(math.exp(8.0 / 4.0), rel=1e-12)
    assert math.isnan(masking.perplexity(nll, count, torch.tensor([0])))


class _Dict:
    def __init__(self, words):
        self.words = ["<s>", "<pad>", "</s>", "<unk>"] + words

    def index(self, w):
        return self.words.index(w) if w in self.words else 3

    def unk(self):
        return 3

    def pad(self):
        return 1

    def __len__(self):
        return len(self.words)


class _Model:
    """Each condition (cells masked) gives every target word a fixed probability, so the
    perplexities can be written by hand: word id w gets log p = -(w + masked cell + 1) / 4."""

    def __init__(self, wide):
        self.masked = []
        self.decoder = type("D", (), {})()
        self.decoder.layers = [type("L", (), {"wide": wide})()]
        self.decoder.mask_cells = lambda layer, cells: self.masked.append((layer, list(cells)))

    def __call__(self, src_tokens, **kwargs):
        return (src_tokens,)

    def get_normalized_probs(self, net_out, log_probs, sample):
        cells = self.masked[-1][1]
        shift = (cells[0] + 1) if cells else 0
        V = 8
        lp = -(torch.arange(V, dtype=torch.float64) + shift + 1) / 4
        return lp.expand(*sample["target"].shape, V)


class _Task:
    def __init__(self, d, batches):
        self.target_dictionary, self.batches = d, batches

    def eval_lm_dataloader(self, dataset, **kwargs):
        return iter(self.batches)


def test_masking_table_by_hand():
    d = _Dict(["a", "b", "c", "e"])  # ids 4..7
    target = torch.tensor([[4, 5, 5, 1], [6, 7, 4, 1]])  # 1 = pad, not counted
    batches = [{"net_input": {"src_tokens": target}, "target": target}]
    model, task = _Model(wide=2), _Task(d, batches)
    table = masking.masking_table(model, task, None, [("ab", ["a", "b", "zz"]), ("e", ["e"])], 0, 2, False)
    assert table["conditions"] == ["none", "mask1", "mask2"]
    # the cells masked for each condition, then unmasked again
    assert model.masked == [(0, []), (0, [0]), (0, [1]), (0, [])]
    ids = [4, 5, 5, 6, 7, 4]
    for c, shift in (("none", 0), ("mask1", 1), ("mask2", 2)):
        nll = {w: (w + shift + 1) / 4 for w in range(4, 8)}
        assert table["overall"][c] == pytest.approx(math.exp(sum(nll[w] for w in ids) / 6), rel=1e-12)
        assert table["groups"]["ab"][c] == pytest.approx(math.exp((2 * nll[4] + 2 * nll[5]) / 4), rel=1e-12)
        assert table["groups"]["e"][c] == pytest.approx(math.exp(nll[7]), rel=1e-12)
        assert table["words"]["b"][c] == pytest.approx(math.exp(nll[5]), rel=1e-12)
    assert table["group_words"] == {"ab": ["a", "b"], "e": ["e"]}
    assert set(table["words"]) == {"a", "b", "e"}


def test_bleu_by_length_buckets_by_hand():
    assert [bbl.bucket_of(n, [10, 20]) for n in (1, 10, 11, 20, 21)] == [10, 10, 20, 20, None]
    words = "the cat sat on the mat with a hat".split()
    a, b = {}, {}
    for i, n in enumerate((3, 5, 9, 12)):
        src = " ".join(f"s@@ {k}" for k in range(n))  # BPE'd: n words once "@@ " is removed
        ref = " ".join(words[:4])
        a[i] = (src, ref, ref)  # system A: perfect
        b[i] = (src, ref, "nothing matches here" if n == 5 else ref)
    rows = bbl.bleu_by_length(a, b, [4, 10])
    # buckets: 1-4 words (n = 3), 5-10 (n = 5, 9), >10 (n = 12); labels, sizes, BLEU of A and B
    assert [(r[0], r[1]) for r in rows] == [("1-4", 1), ("5-10", 2), (">10", 1)]
    assert all(r[2] == pytest.approx(100.0) for r in rows)
    assert rows[0][3] == pytest.approx(100.0) and rows[2][3] == pytest.approx(100.0)
    assert 0 < rows[1][3] < 100.0


class _Loader(_Task):
    """Records what the masking table asks the data loader for."""

    def __init__(self, d, batches):
        super().__init__(d, batches)
        self.calls = []

    def eval_lm_dataloader(self, dataset, **kwargs):
        self.calls.append((dataset, kwargs))
        return iter(self.batches)


def _batches():
    target = torch.tensor([[4, 5, 6, 1]])
    return [{"net_input": {"src_tokens": target}, "target": target}]


def test_masking_table_refuses_a_model_without_parallel_cells():
    class NoCells:
        decoder = type("D", (), {"layers": []})()

    with pytest.raises(ValueError) as e:
        masking.masking_table(NoCells(), _Task(_Dict(["a"]), []), None, [("g", ["a"])], None, 2, False)
    assert str(e.value) == "NoCells has no parallel cells to mask (use a parallel_lstm_lm checkpoint)"


def test_masking_table_every_layer_or_one_layer():
    d = _Dict(["a", "b", "c", "e"])
    model = _Model(wide=2)
    model.decoder.layers = [type("L", (), {"wide": 2})(), type("L", (), {"wide": 2})()]
    table = masking.masking_table(model, _Task(d, _batches()), None, [("g", ["a"])], None, 2, False)
    # layer None: mask_cells gets None (every layer), one condition per cell of the common wide
    assert table["conditions"] == ["none", "mask1", "mask2"]
    assert model.masked == [(None, []), (None, [0]), (None, [1]), (None, [])]
    # different wides: every layer cannot be masked together; one chosen layer can
    model = _Model(wide=2)
    model.decoder.layers = [type("L", (), {"wide": 3})(), type("L", (), {"wide": 2})()]
    with pytest.raises(ValueError) as e:
        masking.masking_table(model, _Task(d, _batches()), None, [("g", ["a"])], None, 2, False)
    assert str(e.value) == "--layer all needs the same wide in every layer (got [2, 3]); pick one --layer"
    table = masking.masking_table(model, _Task(d, _batches()), None, [("g", ["a"])], 0, 2, False)
    assert table["conditions"] == ["none", "mask1", "mask2", "mask3"]
    assert model.masked == [(0, []), (0, [0]), (0, [1]), (0, [2]), (0, [])]


def test_masking_table_warns_once_per_unknown_word_on_stderr(capsys):
    d = _Dict(["a", "b", "c", "e"])
    masking.masking_table(_Model(wide=1), _Task(d, _batches()), None, [("ab", ["a", "zz", "b"])], 0, 2, False)
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "warning: word group 'ab': 'zz' is not in the dictionary, skipped\n"


def test_masking_table_group_of_unknown_words_has_no_perplexity():
    d = _Dict(["a", "b", "c", "e"])
    table = masking.masking_table(_Model(wide=1), _Task(d, _batches()), None, [("none", ["zz", "yy"])], 0, 2,
                                  False)
    assert table["group_words"] == {"none": []} and table["words"] == {}
    assert all(math.isnan(table["groups"]["none"][c]) for c in ("none", "mask1"))
    # the overall perplexity still covers the targets a, b, c (ids 4, 5, 6; pad left out)
    assert table["overall"]["none"] == pytest.approx(math.exp((5 + 6 + 7) / 4 / 3), rel=1e-12)


def test_masking_table_scores_the_given_split_with_the_given_batch_size(monkeypatch):
    import fairseq.utils

    moved = []
    monkeypatch.setattr(fairseq.utils, "move_to_cuda", lambda sample: moved.append(sample) or sample)
    d = _Dict(["a", "b", "c", "e"])
    split = object()
    task = _Loader(d, _batches())
    masking.masking_table(_Model(wide=2), task, split, [("g", ["a"])], 0, 7, True)
    assert len(task.calls) == 3  # one pass over the split per condition
    assert all(ds is split and kw["batch_size"] == 7 for ds, kw in task.calls)
    assert len(moved) == 3  # with use_cuda every batch is moved to the GPU
    masking.masking_table(_Model(wide=2), task, split, [("g", ["a"])], 0, 7, False)
    assert len(moved) == 3


def test_bleu_by_length_rejects_different_test_sets():
    a = {0: ("a b", "x", "x"), 1: ("c", "y", "y")}
    with pytest.raises(SystemExit) as e:
        bbl.bleu_by_length(a, {0: a[0]}, [10])
    assert e.value.code == "--gen-a and --gen-b cover different sentence ids (not the same test set?)"
    with pytest.raises(SystemExit) as e:
        bbl.bleu_by_length(a, {0: a[0], 1: ("c d", "y", "y")}, [10])
    assert e.value.code == "sentence 1: the two files have different sources"


def test_bleu_by_length_against_sacrebleu_on_joined_text():
    """BPE is removed from sources, references and hypotheses before scoring; an empty bucket is
    skipped (later buckets still reported); the tokenizer is passed through."""
    import sacrebleu

    ref = "the ca@@ t sat on the mat ."
    good = "the ca@@ t sat on the mat."  # equal to the reference only once tokenized (13a)
    bad = "a ca@@ t sat on a mat ."
    a, b = {}, {}
    lengths = (2, 3, 25, 30)  # buckets: 1-4, (5-10 empty), 11-20 empty, >20
    for i, n in enumerate(lengths):
        src = " ".join(f"w{k}@@ x" for k in range(n))  # n words once "@@ " is removed
        a[i] = (src, ref, good if i % 2 == 0 else bad)
        b[i] = (src, ref, bad if i % 2 == 0 else good)
    joined = lambda s: s.replace("@@ ", "")  # noqa: E731
    for tok in ("13a", "none"):
        rows = bbl.bleu_by_length(a, b, [4, 10, 20], tokenize=tok)
        assert [(r[0], r[1]) for r in rows] == [("1-4", 2), (">20", 2)]
        for row, ids in zip(rows, ((0, 1), (2, 3))):
            refs = [[joined(ref)] * 2]
            for sys_, score in ((a, row[2]), (b, row[3])):
                want = sacrebleu.corpus_bleu([joined(sys_[i][2]) for i in ids], refs, tokenize=tok).score
                assert score == pytest.approx(want, abs=1e-9)
    assert rows[0][2] != bbl.bleu_by_length(a, b, [4, 10, 20])[0][2]  # the tokenizer matters here


def test_bleu_by_length_counts_words_after_removing_the_bpe_symbol():
    # with --bpe-symbol "@@" a lone "@@" token disappears: "a @@ b" has 2 words
    a = {0: ("a @@ b", "x y", "x y"), 1: ("a b c", "x y", "x y")}
    rows = bbl.bleu_by_length(a, dict(a), [2, 5], bpe="@@")
    assert [(r[0], r[1]) for r in rows] == [("1-2", 1), ("3-5", 1)]
