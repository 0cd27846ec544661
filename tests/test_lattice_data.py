"""The lattice data model of fairseq_local_core/lattice.py (Su et al. 2017, section "Word Lattice"),
checked value by value: edges e_{i:j} cover c_{i+1..j}, validation errors (exact one-line messages),
the primary path, packing, merging of tokenizations and the segmenters.  Fast: stand-in segmenters
everywhere except one small test per real segmenter (jieba, thulac, snownlp: a few seconds each to
load)."""
import numpy as np
import pytest

from fairseq_local_core import lattice as L
from fairseq_local_core.lattice import Lattice, LatticeError

FIG1 = "下雨天地面积水"
CTB, PKU, MSR = ["下雨天", "地面", "积水"], ["下", "雨天", "地面", "积水"], ["下雨天", "地", "面积", "水"]


def _err(fn, *args, **kwargs):
    with pytest.raises(LatticeError) as e:
        fn(*args, **kwargs)
    return str(e.value)


# ---------------------------------------------------------------------------------- small helpers
def test_where_prefix_and_sentence_chars():
    assert L._where("", "msg") == "msg"
    assert L._where("f.lat:3", "msg") == "f.lat:3: msg"
    assert L.sentence_chars(" 下 雨\t天\u3000地\n") == ["下", "雨", "天", "地"]


# ---------------------------------------------------------------------------------- create
def test_create_sorts_edges_and_converts_to_int():
    lat = Lattice.create("abc", [(np.int64(1), "3"), ("0", 1), (0, 3)])
    assert lat.edges == ((0, 1), (0, 3), (1, 3))
    assert all(type(x) is int for e in lat.edges for x in e)
    assert lat.chars == ("a", "b", "c") and lat.path == (0, 3)


def test_create_error_messages():
    assert _err(Lattice.create, "", [(0, 1)], where="w:1") == "w:1: empty sentence"
    assert _err(Lattice.create, "abc", [(0, 3), (2, 2)]) == "edge 2:2 has i >= j"
    assert _err(Lattice.create, "abc", [(0, 3), (-1, 2)]) == "edge -1:2 out of range (sentence has 3 characters)"
    assert _err(Lattice.create, "abc", [(0, 4)], where="w") == "w: edge 0:4 out of range (sentence has 3 characters)"
    assert _err(Lattice.create, "abc", [(0, 3), (0, 3)]) == "duplicate edge 0:3"
    # boundaries are valid: an edge from v_0 and one into v_N
    assert Lattice.create("abc", [(0, 3)]).edges == ((0, 3),)


def test_create_primary_path_checks():
    edges = [(0, 1), (1, 3), (0, 3)]
    assert Lattice.create("abc", edges, [0, 1, 3]).path == (0, 1, 3)
    assert Lattice.create("abc", edges, ["0", "3"]).path == (0, 3)
    assert Lattice.create("a", [(0, 1)], (0, 1)).path == (0, 1)  # a one-edge path of length 2
    msg = "primary path {} is not a path 0..3 of the lattice"
    for path in ([0, 3, 3], [0], [1, 3], [0, 1], [0, 1, 2, 3], [0, 2, 3], [3, 0, 3]):
        assert _err(Lattice.create, "abc", edges, path, "x:2") == "x:2: " + msg.format(
            " ".join(map(str, path)))
    # one pair of the path is an edge, the next one is not
    assert _err(Lattice.create, "abcd", [(0, 1), (1, 4), (1, 2), (2, 4)], [0, 1, 3, 4]) == \
        "primary path 0 1 3 4 is not a path 0..4 of the lattice"


def test_default_path_takes_the_longest_edge_from_each_node():
    lat = Lattice.create("abcde", [(0, 1), (0, 2), (1, 5), (2, 3), (2, 4), (3, 5), (4, 5)])
    assert lat.path == (0, 2, 4, 5)
    assert L._longest_edge_path(5, [(0, 1), (0, 2), (1, 5), (2, 3), (2, 4), (3, 5), (4, 5)]) == (0, 2, 4, 5)
    assert L._longest_edge_path(2, [(0, 2), (0, 1), (1, 2)]) == (0, 2)


def test_connectivity_messages_name_the_smallest_bad_node():
    # nodes 2 and 4 both unreachable from v_0; 2 is reported
    assert _err(L._check_connected, 6, [(0, 1), (1, 6), (2, 3), (3, 6), (4, 5), (5, 6)], "w") == \
        "w: node 2 is unreachable from node 0"
    # nodes 2 and 4 both do not reach v_N; 2 is reported
    assert _err(L._check_connected, 6, [(0, 1), (1, 6), (0, 2), (0, 4), (4, 5)], "") == \
        "node 2 does not reach the end node 6"
    # a chain is fine in both directions (the backward scan goes right to left)
    L._check_connected(4, [(0, 1), (1, 2), (2, 3), (3, 4)], "")
    L._check_connected(1, [(0, 1)], "")
    assert _err(L._check_connected, 3, [(0, 1), (1, 2)], "") == "node 3 is unreachable from node 0"
    assert _err(L._check_connected, 3, [(1, 3)], "") == "node 1 is unreachable from node 0"


# ---------------------------------------------------------------------------------- text format
def test_from_line_parses_fields_and_line_endings():
    lat = Lattice.from_line("下 雨 天\t0:1 0:3 1:3\t0 1 3\r\n")
    assert lat.chars == ("下", "雨", "天") and lat.edges == ((0, 1), (0, 3), (1, 3)) and lat.path == (0, 1, 3)
    assert Lattice.from_line("下 雨 天\t1:3  0:1\n").path == (0, 1, 3)
    assert Lattice.from_line(lat.to_line()) == lat
    assert lat.to_line() == "下 雨 天\t0:1 0:3 1:3\t0 1 3"


@pytest.mark.parametrize("line,message", [
    ("", "empty line"),
    (" \t \r\n", "empty line"),
    ("下 雨 天", "expected 2 or 3 tab-separated fields (characters, edges[, path]), got 1"),
    ("下 雨 天\t0:3\t0 3\tx", "expected 2 or 3 tab-separated fields (characters, edges[, path]), got 4"),
    ("下  雨\t0:2", "characters must be single non-space characters separated by single spaces"),
    ("下 \u3000 雨\t0:3", "characters must be single non-space characters separated by single spaces"),
    ("下 雨\t0:1 1-2", "malformed edge '1-2' (expected i:j)"),
    ("下 雨\t0:1 a:2", "malformed edge 'a:2' (expected i:j)"),
    ("下 雨\t0:1 1:2x", "malformed edge '1:2x' (expected i:j)"),
    ("下 雨\t0:2 -1:2", "edge -1:2 out of range (sentence has 2 characters)"),
    ("下 雨\t0:2 1:-2", "edge 1:-2 has i >= j"),
    ("下 雨\t  ", "lattice has no edges"),
    ("下 雨\t0:2\t0 x\n", "malformed primary path '0 x'"),
    ("下 雨\t0:2\t0 x \r\n", "malformed primary path '0 x '"),
    ("下 雨\t0:1 1:2\t0 2", "primary path 0 2 is not a path 0..2 of the lattice"),
    ("下 雨\t0:2\t0 X", "malformed primary path '0 X'"),  # only the line end is stripped
    ("下 雨\t0:2\t", "primary path  is not a path 0..2 of the lattice"),  # an empty third field
    ("下 雨\t0:2 0:2", "duplicate edge 0:2"),
    ("下 雨 天\t0:3 1:3", "node 1 is unreachable from node 0"),
    ("下 雨 天\t0:1 0:3", "node 1 does not reach the end node 3"),
])
def test_from_line_errors_are_exact(line, message):
    assert _err(Lattice.from_line, line, "in.lat:7") == "in.lat:7: " + message
    assert _err(Lattice.from_line, line) == message


def test_read_lattices_numbers_lines_from_one(tmp_path):
    p = tmp_path / "a.lat"
    p.write_text("下 雨\t0:2\n下 雨\t0:1 1:2\t0 1 2\n下\t0:2\n", encoding="utf-8")
    assert _err(L.read_lattices, str(p)) == f"{p}:3: edge 0:2 out of range (sentence has 1 characters)"
    p.write_text("下 雨\t0:2\n雨\t0:1\n", encoding="utf-8")
    lats = L.read_lattices(str(p))
    assert [x.edges for x in lats] == [((0, 2),), ((0, 1),)]


def _latin1_locale_open(file, mode="r", *args, encoding=None, **kwargs):
    """open() as on a machine whose locale encoding is Latin-1: text files without an explicit
    encoding are read and written as Latin-1."""
    if "b" not in mode and encoding is None:
        encoding = "latin-1"
    return open(file, mode, *args, encoding=encoding, **kwargs)


def test_lattice_files_are_utf8_whatever_the_locale(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "open", _latin1_locale_open, raising=False)  # the module's open()
    p = tmp_path / "a.lat"
    p.write_bytes("下 雨\t0:1 0:2 1:2\t0 2\n".encode("utf-8"))
    assert p.read_bytes() == "下 雨\t0:1 0:2 1:2\t0 2\n".encode("utf-8")
    [lat] = L.read_lattices(str(p))
    assert lat.chars == ("下", "雨") and lat.edges == ((0, 1), (0, 2), (1, 2)) and lat.path == (0, 2)


# ---------------------------------------------------------------------------------- views, packing
def test_views_of_the_figure1_lattice():
    lat = L.merge_tokenizations(FIG1, [PKU, CTB, MSR])
    assert lat.n_chars == 7
    assert lat.word(1, 3) == "雨天" and lat.word(0, 7) == FIG1
    assert lat.words() == ["下", "下雨天", "雨天", "地", "地面", "面积", "积水", "水"]
    assert lat.path == (0, 1, 3, 5, 7) and lat.path_words() == PKU
    assert lat.path_edge_indices() == [0, 2, 4, 6]
    assert lat.nodes() == [0, 1, 3, 4, 5, 6, 7]
    chain = lat.primary_chain()
    assert chain.chars == lat.chars and chain.edges == ((0, 1), (1, 3), (3, 5), (5, 7)) and chain.path == lat.path
    # nodes(): v_0 is a boundary even though no edge enters it; start nodes alone are not
    assert Lattice.create("abc", [(0, 2), (1, 3), (0, 1), (2, 3)]).nodes() == [0, 1, 2, 3]
    assert Lattice.create("abc", [(0, 3)]).nodes() == [0, 3]


def test_pack_and_unpack_are_inverse():
    lat = L.merge_tokenizations(FIG1, [CTB, PKU])
    ids = [10, 11, 12, 13, 14, 15]
    assert lat.edges == ((0, 1), (0, 3), (1, 3), (3, 5), (5, 7))
    packed = lat.pack(ids[:len(lat.edges)])
    assert packed.dtype == np.int64
    e = len(lat.edges)
    starts, ends = zip(*lat.edges)
    assert packed.tolist() == [7, e, *starts, *ends, *ids[:e], *lat.path_edge_indices()]
    n, s, t, w, p = L.unpack(packed.tolist())
    assert n == 7 and s.tolist() == list(starts) and t.tolist() == list(ends)
    assert w.tolist() == ids[:e] and p.tolist() == lat.path_edge_indices()
    assert s.dtype == np.int64 and type(n) is int


def test_pack_and_unpack_a_chain_from_other_integer_dtypes():
    # a chain: E = 3 edges and a 3-edge primary path (the field boundaries differ from Figure 1's)
    lat = Lattice.chain(["我们", "的", "被告人"])
    packed = lat.pack(np.array([7, 8, 2 ** 60 + 1], dtype=np.uint64))  # ids of any integer dtype
    assert packed.dtype == np.int64
    assert packed.tolist() == [6, 3, 0, 2, 3, 2, 3, 6, 7, 8, 2 ** 60 + 1, 0, 1, 2]
    small = lat.pack([7, 8, 9]).astype(np.uint16)  # e.g. a compactly stored dataset
    n, s, t, w, p = L.unpack(small)
    assert (n, s.tolist(), t.tolist(), w.tolist(), p.tolist()) == (6, [0, 2, 3], [2, 3, 6], [7, 8, 9], [0, 1, 2])
    assert type(n) is int and all(a.dtype == np.int64 for a in (s, t, w, p))
    # one edge, one-edge path
    n, s, t, w, p = L.unpack(Lattice.chain(["下雨"]).pack([5]))
    assert (n, s.tolist(), t.tolist(), w.tolist(), p.tolist()) == (2, [0], [2], [5], [0])


# ---------------------------------------------------------------------------------- merging
def test_tokenization_edges_skip_blank_tokens_and_name_the_mismatch():
    chars = list("下雨天")
    assert L.tokenization_edges(chars, ["下", " ", "雨 天"]) == [(0, 1), (1, 3)]
    assert L.tokenization_edges(chars, ["", "下雨天"]) == [(0, 3)]
    assert _err(L.tokenization_edges, chars, ["下", "雪天"], "t:4") == \
        "t:4: tokenization does not match its sentence at character 2: token '雪天' vs sentence '雨天'"
    assert _err(L.tokenization_edges, chars, ["下雨"]) == "tokenization covers 2 of the sentence's 3 characters"
    assert _err(L.tokenization_edges, chars, ["下雨天", "地"]) == \
        "tokenization does not match its sentence at character 4: token '地' vs sentence ''"


def test_merge_tokenizations_keeps_shared_edges_once_and_first_path():
    lat = L.merge_tokenizations(" 下雨天 地面积水 ", [MSR, CTB, PKU], where="m:1")
    assert lat.edges == ((0, 1), (0, 3), (1, 3), (3, 4), (3, 5), (4, 6), (5, 7), (6, 7))
    assert lat.path == (0, 3, 4, 6, 7)
    assert L.merge_tokenizations("ab", [["ab"], ["ab"]]).edges == ((0, 2),)
    assert _err(L.merge_tokenizations, "  ", [["a"]], "m:2") == "m:2: empty line"
    assert _err(L.merge_tokenizations, "ab", [], "m:3") == "m:3: no tokenization to merge"
    assert _err(L.merge_tokenizations, "ab", [["ab"], ["a"]], "m:4") == \
        "m:4: tokenization covers 1 of the sentence's 2 characters"
    chain = Lattice.chain(["我们", "的"], where="c:1")
    assert chain.edges == ((0, 2), (2, 3)) and chain.path == (0, 2, 3)
    assert _err(Lattice.chain, [], "c:2") == "c:2: empty line"
    # without a location the messages have no prefix
    assert _err(Lattice.chain, []) == "empty line"
    assert _err(L.merge_tokenizations, "ab", []) == "no tokenization to merge"


# ---------------------------------------------------------------------------------- segmenters
def test_segmenter_registry_and_builder_validation():
    assert sorted(L.SEGMENTERS) == ["char", "jieba", "snownlp", "thulac"]
    assert L.load_segmenter("char")(" 下 雨 ") == ["下", "雨"]
    assert _err(L.load_segmenter, "nosuch") == \
        "unknown segmenter 'nosuch' (choose from char, jieba, snownlp, thulac)"
    assert _err(L.LatticeBuilder, []) == "no segmenter given"
    # an unknown name fails before any (slow) model is loaded
    assert _err(L.LatticeBuilder, ["jieba", "nosuch"]) == \
        "unknown segmenter 'nosuch' (choose from char, jieba, snownlp, thulac)"


# the real segmenters (a few seconds each: their models load once per test)
def test_jieba_segmenter_uses_its_hmm_for_unknown_words():
    pytest.importorskip("jieba")
    # jieba's README example: the HMM joins 杭研, which is not in its dictionary
    assert L.load_segmenter("jieba")("他来到了网易杭研大厦") == ["他", "来到", "了", "网易", "杭研", "大厦"]


def test_thulac_segmenter_is_the_segmentation_only_model(capsys):
    pytest.importorskip("thulac")
    seg = L.load_segmenter("thulac")
    # the joint POS model (seg_only=False) splits 累死 into 累 / 死
    assert seg("我累死了。") == ["我", "累死", "了", "。"]
    assert capsys.readouterr().out == ""  # its "Model loaded succeed" is swallowed


def test_snownlp_segmenter_and_blank_input():
    pytest.importorskip("snownlp")
    seg = L.load_segmenter("snownlp")
    assert seg("他来到了网易杭研大厦") == ["他", "来到", "了", "网易", "杭", "研", "大厦"]
    assert seg("") == [] and seg(" \t") == []


def test_builder_with_custom_segmenters(monkeypatch):
    monkeypatch.setitem(L.SEGMENTERS, "halves", lambda: (lambda s: [s[:2], s[2:]]))
    b = L.LatticeBuilder(["halves", "char"])
    assert b.names == ["halves", "char"]
    assert b.tokenize("下雨天\r\n") == [["下雨", "天"], ["下", "雨", "天"]]
    lat = b("下雨天\n", "s:1")
    assert lat.edges == ((0, 1), (0, 2), (1, 2), (2, 3)) and lat.path == (0, 2, 3)
    assert _err(b.tokenize, " \r\n", "s:2") == "s:2: empty line"
    assert _err(b, "  ", "s:3") == "s:3: empty line"


def test_builder_checks_every_name_before_loading_any_segmenter(monkeypatch):
    loaded = []
    monkeypatch.setitem(L.SEGMENTERS, "counted", lambda: loaded.append("counted") or (lambda s: [s]))
    assert _err(L.LatticeBuilder, ["counted", "nosuch"]) == \
        "unknown segmenter 'nosuch' (choose from char, counted, jieba, snownlp, thulac)"
    assert loaded == []
    L.LatticeBuilder(["counted", "char"])
    assert loaded == ["counted"]  # each segmenter is loaded once


def test_builder_passes_the_sentence_without_its_line_end_and_names_errors(monkeypatch):
    seen = []
    monkeypatch.setitem(L.SEGMENTERS, "spy", lambda: (lambda s: seen.append(s) or [s]))
    monkeypatch.setitem(L.SEGMENTERS, "short", lambda: (lambda s: [s[:2]]))
    spy = L.LatticeBuilder(["spy"])
    assert spy.tokenize("下雨 \r\n") == [["下雨 "]] and spy.tokenize("下雨X\n") == [["下雨X"]]
    assert seen == ["下雨 ", "下雨X"]
    assert _err(spy.tokenize, " \n") == "empty line"
    b = L.LatticeBuilder(["char", "short"])
    assert _err(b, "下雨天", "s:4") == "s:4: tokenization covers 2 of the sentence's 3 characters"
    assert _err(b, "下雨天") == "tokenization covers 2 of the sentence's 3 characters"
