"""The analysis scripts' aggregation against hand computations: the parallel-cells masking table
(per-condition, per-group and per-word perplexities; which cells are masked when) and the MC-RNN
BLEU-by-length buckets (Figure 5)."""
import importlib
import math
import sys

import pytest
import torch

from contract_lib import REPO

# imported under their path in the repository (scripts.analysis.*), the name scripts/mutation.sh
# gives their mutants
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
bbl = importlib.import_module("scripts.analysis.mc_rnn_bleu_by_length")
masking = importlib.import_module("scripts.analysis.parallel_cells_masking")


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
