"""Lattice analyses: Table-3 coverage and the gate-weight visualisation."""
import importlib
from pathlib import Path

import pytest
import torch
from fairseq.data import Dictionary

from fairseq_local_core.lattice import Lattice, merge_tokenizations
from fairseq_local.models.lattice_rnnsearch import LatticeGRUEncoder
from fairseq_local.modules.recurrent_seq2seq import Embedding

REPO = Path(__file__).resolve().parent.parent
FIG1 = merge_tokenizations("下雨天地面积水", [["下雨天", "地面", "积水"], ["下", "雨天", "地面", "积水"],
                                          ["下雨天", "地", "面积", "水"]])


def _script(name):
    return importlib.import_module(f"fairseq_local_repro.analysis.{name}")


def test_coverage_chain_vs_lattice():
    cov = _script("lattice_coverage").coverage
    vocab = {"下", "地面", "面积"}
    chain = Lattice.chain(["下雨天", "地面", "积水"])
    assert cov([chain], vocab) == pytest.approx(100 * 2 / 7)  # only 地面 (c4 c5) is in vocabulary
    assert cov([FIG1], vocab) == pytest.approx(100 * 4 / 7)  # 下, 地面, 面积 cover c1, c4, c5, c6
    assert cov([chain, FIG1], set()) == 0.0


def test_gate_weights_and_png(tmp_path):
    pytest.importorskip("matplotlib")
    gates = _script("lattice_gates")
    d = Dictionary()
    for w in FIG1.words():
        d.add_symbol(w)
    torch.manual_seed(0)

    class M:
        encoder = LatticeGRUEncoder(d, Embedding(len(d), 4, d.pad()), 5, "dwl", "gating").eval()

    weights = gates.edge_weights(M, FIG1, d)
    assert set(weights) == set(FIG1.edges)
    for node in range(1, 8):  # forward weights of the edges entering a node sum to 1
        ws = [fw for (i, j), (fw, _) in weights.items() if j == node]
        if ws:
            assert sum(ws) == pytest.approx(1.0)
    for node in range(0, 7):  # backward weights of the edges leaving a node sum to 1
        ws = [bw for (i, j), (_, bw) in weights.items() if i == node]
        if ws:
            assert sum(ws) == pytest.approx(1.0)
    assert weights[(0, 1)][0] == pytest.approx(1.0)  # v_1 has a single incoming edge
    out = tmp_path / "gates.png"
    gates.plot(FIG1, weights, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
