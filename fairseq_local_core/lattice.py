"""Word lattices of Chinese sentences: text format, validation, merging and segmenters.

Su et al. (AAAI 2017), section "Word Lattice": a word lattice of a character sequence c_1..c_N is
a DAG whose node v_i is the position between c_i and c_{i+1} (v_0 before c_1, v_N after c_N) and
whose edge e_{i:j} covers the characters c_{i+1..j}, a candidate word.  A lattice is built by
merging the tokenizations of several segmenters; an edge produced by several of them is kept once.
One tokenization on its own (a chain) is a lattice too.

Lattice text format (``.lat``; UTF-8, one sentence per line, line n <-> target line n)::

    下 雨 天 地 面 积 水<TAB>0:1 0:3 1:3 3:4 3:5 4:6 5:7 6:7<TAB>0 3 5 7

* field 1: the N characters, separated by single spaces (a "character" is any non-whitespace
  code point; whitespace of the raw sentence is not part of the lattice);
* field 2: the edges ``i:j`` (0 <= i < j <= N), separated by spaces, each edge once;
* field 3 (optional): the *primary path*, the node sequence ``0 ... N`` of one tokenization (the
  first segmenter's); it is what word-level baselines and the 1-best analyses read.  When it is
  absent the path taking the longest edge out of every node is used.

Validation (``Lattice.from_line``) rejects an empty line, a malformed field, an edge out of range,
an edge with i >= j, a duplicate edge, a node unreachable from v_0 or not reaching v_N, and a
primary path that is not a path of the lattice.  Every error is a one-line ``LatticeError``
naming the file and line (``path:line: message``).
"""
import re
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_local_core.errors import InputFileError


class LatticeError(InputFileError):
    """A malformed lattice, tokenization or lattice file; the message names file and line."""


def _where(where: str, msg: str) -> str:
    return f"{where}: {msg}" if where else msg


def sentence_chars(sentence: str) -> List[str]:
    """The characters c_1..c_N of a raw sentence (whitespace dropped)."""
    return [c for c in sentence if not c.isspace()]


@dataclass(frozen=True)
class Lattice:
    chars: Tuple[str, ...]
    edges: Tuple[Tuple[int, int], ...]  # sorted by (i, j): the paper's "left to right" order
    path: Tuple[int, ...]  # primary path: nodes 0 = p_0 < ... < p_L = N, each (p_k, p_k+1) an edge

    # ---------------------------------------------------------------- construction
    @classmethod
    def create(cls, chars: Sequence[str], edges: Iterable[Tuple[int, int]],
               path: Optional[Sequence[int]] = None, where: str = "") -> "Lattice":
        """Validate and build a lattice (duplicate edges are an error here)."""
        chars = tuple(chars)
        n = len(chars)
        if n == 0:
            raise LatticeError(_where(where, "empty sentence"))
        edge_list = [(int(i), int(j)) for i, j in edges]
        seen = set()
        for i, j in edge_list:
            if i >= j:
                raise LatticeError(_where(where, f"edge {i}:{j} has i >= j"))
            if i < 0 or j > n:
                raise LatticeError(_where(where, f"edge {i}:{j} out of range (sentence has {n} characters)"))
            if (i, j) in seen:
                raise LatticeError(_where(where, f"duplicate edge {i}:{j}"))
            seen.add((i, j))
        edge_list.sort()
        _check_connected(n, edge_list, where)
        if path is None:
            path = _longest_edge_path(n, edge_list)
        else:
            path = tuple(int(p) for p in path)
            if len(path) < 2 or path[0] != 0 or path[-1] != n or any(
                (a, b) not in seen for a, b in zip(path[:-1], path[1:])
            ):
                raise LatticeError(_where(where, f"primary path {' '.join(map(str, path))} is not a path 0..{n} of the lattice"))
        return cls(chars, tuple(edge_list), tuple(path))

    @classmethod
    def chain(cls, tokens: Sequence[str], where: str = "") -> "Lattice":
        """One tokenization as a lattice (a chain)."""
        return merge_tokenizations("".join(tokens), [tokens], where=where)

    @classmethod
    def from_line(cls, line: str, where: str = "") -> "Lattice":
        line = line.rstrip("\r\n")
        if not line.strip():
            raise LatticeError(_where(where, "empty line"))
        fields = line.split("\t")
        if len(fields) not in (2, 3):
            raise LatticeError(_where(where, f"expected 2 or 3 tab-separated fields (characters, edges[, path]), got {len(fields)}"))
        chars = fields[0].split(" ")
        if any(len(c) != 1 or c.isspace() for c in chars):
            raise LatticeError(_where(where, "characters must be single non-space characters separated by single spaces"))
        edges = []
        for tok in fields[1].split():
            m = re.fullmatch(r"(-?\d+):(-?\d+)", tok)
            if m is None:
                raise LatticeError(_where(where, f"malformed edge '{tok}' (expected i:j)"))
            edges.append((int(m.group(1)), int(m.group(2))))
        if not edges:
            raise LatticeError(_where(where, "lattice has no edges"))
        path = None
        if len(fields) == 3:
            try:
                path = [int(p) for p in fields[2].split()]
            except ValueError:
                raise LatticeError(_where(where, f"malformed primary path '{fields[2]}'")) from None
        return cls.create(chars, edges, path, where)

    # ---------------------------------------------------------------- views
    @property
    def n_chars(self) -> int:
        return len(self.chars)

    def word(self, i: int, j: int) -> str:
        return "".join(self.chars[i:j])

    def words(self) -> List[str]:
        """Edge words in edge order."""
        return [self.word(i, j) for i, j in self.edges]

    def path_words(self) -> List[str]:
        return [self.word(a, b) for a, b in zip(self.path[:-1], self.path[1:])]

    def path_edge_indices(self) -> List[int]:
        index = {e: k for k, e in enumerate(self.edges)}
        return [index[e] for e in zip(self.path[:-1], self.path[1:])]

    def nodes(self) -> List[int]:
        """Word-boundary nodes 0 = b_0 < b_1 < ... < b_m = N (the encoder's annotation boundaries)."""
        return sorted({0} | {j for _, j in self.edges})

    def primary_chain(self) -> "Lattice":
        """The primary path as a chain lattice (1-best decoding, Table 2)."""
        edges = list(zip(self.path[:-1], self.path[1:]))
        return Lattice(self.chars, tuple(edges), self.path)

    def to_line(self) -> str:
        return "\t".join([
            " ".join(self.chars),
            " ".join(f"{i}:{j}" for i, j in self.edges),
            " ".join(map(str, self.path)),
        ])

    # ---------------------------------------------------------------- binary packing
    def pack(self, word_ids: Sequence[int]) -> np.ndarray:
        """``[N, E, i_1..i_E, j_1..j_E, w_1..w_E, path edge indices...]`` (see LatticeDataset)."""
        i, j = zip(*self.edges)
        return np.asarray([self.n_chars, len(self.edges), *i, *j, *word_ids, *self.path_edge_indices()],
                          dtype=np.int64)


def unpack(packed) -> Tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of :meth:`Lattice.pack`: (N, starts, ends, word ids, primary-path edge indices)."""
    packed = np.asarray(packed, dtype=np.int64)
    n, e = int(packed[0]), int(packed[1])
    return n, packed[2:2 + e], packed[2 + e:2 + 2 * e], packed[2 + 2 * e:2 + 3 * e], packed[2 + 3 * e:]


def _check_connected(n: int, edges: List[Tuple[int, int]], where: str):
    """Every node touched by an edge is reachable from v_0 and reaches v_N (edges sorted by i)."""
    nodes = {0, n} | {i for i, _ in edges} | {j for _, j in edges}
    fwd = {0}
    for i, j in edges:  # sorted by start: a DAG in topological order
        if i in fwd:
            fwd.add(j)
    bwd = {n}
    for i, j in sorted(edges, key=lambda e: -e[1]):
        if j in bwd:
            bwd.add(i)
    for v in sorted(nodes - fwd)[:1]:
        raise LatticeError(_where(where, f"node {v} is unreachable from node 0"))
    for v in sorted(nodes - bwd)[:1]:
        raise LatticeError(_where(where, f"node {v} does not reach the end node {n}"))


def _longest_edge_path(n: int, edges: List[Tuple[int, int]]) -> Tuple[int, ...]:
    longest: Dict[int, int] = {}
    for i, j in edges:
        longest[i] = max(longest.get(i, 0), j)
    path, v = [0], 0
    while v != n:
        v = longest[v]
        path.append(v)
    return tuple(path)


def tokenization_edges(chars: Sequence[str], tokens: Sequence[str], where: str = "") -> List[Tuple[int, int]]:
    """Edges of one tokenization; its characters must concatenate back to the sentence."""
    edges, pos = [], 0
    for tok in tokens:
        tok_chars = sentence_chars(tok)
        if not tok_chars:
            continue
        end = pos + len(tok_chars)
        if list(chars[pos:end]) != tok_chars:
            raise LatticeError(_where(
                where, f"tokenization does not match its sentence at character {pos + 1}: "
                       f"token '{tok}' vs sentence '{''.join(chars[pos:end])}'"))
        edges.append((pos, end))
        pos = end
    if pos != len(chars):
        raise LatticeError(_where(where, f"tokenization covers {pos} of the sentence's {len(chars)} characters"))
    return edges


def merge_tokenizations(sentence: str, tokenizations: Sequence[Sequence[str]], where: str = "") -> Lattice:
    """Merge tokenizations of ``sentence`` into one lattice; shared edges are kept once.

    The first tokenization is the lattice's primary path.
    """
    chars = sentence_chars(sentence)
    if not chars:
        raise LatticeError(_where(where, "empty line"))
    if not tokenizations:
        raise LatticeError(_where(where, "no tokenization to merge"))
    edge_sets = [tokenization_edges(chars, toks, where) for toks in tokenizations]
    edges = sorted(set(e for es in edge_sets for e in es))
    path = [0] + [j for _, j in edge_sets[0]]
    return Lattice.create(chars, edges, path, where)


# a lattice line whose tabs became spaces (copied from a terminal, say): characters, then edges i:j
_LATTICE_WITHOUT_TABS = re.compile(r"(?:\S )+\S\s+\d+:\d+(?:\s+\d+:\d+)*(?:\s+\d+)*")


def read_input(line: str, builder: Callable[[], Callable[[str, str], "Lattice"]], where: str = "") -> Optional[Lattice]:
    """One sentence to translate, as ``fairseq-interactive`` and the hub read it.

    A line holding a tab is a lattice in the text format above (``Lattice.from_line``); any other
    line is a raw sentence, segmented into a lattice by ``builder()`` (called only then, so that the
    segmenters load only when needed).  A blank line is ``None`` (an empty translation).  Refused,
    naming ``where``: text that is not valid Unicode (undecodable bytes kept as surrogates), a
    malformed lattice line, and a lattice line whose tabs were replaced by spaces (which as raw
    text would be segmented into words such as ``0:1``)."""
    line = line.rstrip("\r\n")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as err:
        raise LatticeError(_where(where, f"not UTF-8 text (undecodable byte at character {err.start + 1}); "
                                         "convert the input to UTF-8")) from None
    if not line.strip():
        return None
    if "\t" in line:
        return Lattice.from_line(line, where)
    if _LATTICE_WITHOUT_TABS.fullmatch(line.strip()):
        raise LatticeError(_where(where, "looks like a lattice line without its tabs (edges i:j after the "
                                         "characters): separate characters, edges and path with tabs, or give "
                                         "the raw sentence"))
    return builder()(line, where)


def read_lattices(path: str) -> List[Lattice]:
    """Parse and validate a ``.lat`` file (errors name ``path:line``)."""
    with open(path, encoding="utf-8") as f:
        return [Lattice.from_line(line, f"{path}:{n}") for n, line in enumerate(f, 1)]


# ------------------------------------------------------------------------------------------------
# segmenters (all work offline from their pip packages)
# ------------------------------------------------------------------------------------------------
def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    tok = jieba.Tokenizer()
    return lambda s: list(tok.cut(s, HMM=True))


def _thulac():
    import contextlib
    import io

    import thulac

    with contextlib.redirect_stdout(io.StringIO()):  # it prints "Model loaded succeed"
        model = thulac.thulac(seg_only=True)
    return lambda s: [w for w, _ in model.cut(s)]


def _snownlp():
    from snownlp import SnowNLP

    return lambda s: list(SnowNLP(s).words) if s.strip() else []


def _char():
    return lambda s: sentence_chars(s)


SEGMENTERS: Dict[str, Callable[[], Callable[[str], List[str]]]] = {
    "jieba": _jieba,  # jieba's dictionary + HMM (PKU-like People's Daily standard)
    "thulac": _thulac,  # THULAC (Tsinghua standard, finer-grained)
    "snownlp": _snownlp,  # SnowNLP character-based generative model (trained on PKU-style data)
    "char": _char,  # one character per word (character-level baseline)
}


def load_segmenter(name: str) -> Callable[[str], List[str]]:
    if name not in SEGMENTERS:
        raise LatticeError(f"unknown segmenter '{name}' (choose from {', '.join(sorted(SEGMENTERS))})")
    return SEGMENTERS[name]()


class LatticeBuilder:
    """Builds lattices from raw sentences with the named segmenters (first = primary path)."""

    def __init__(self, segmenters: Sequence[str]):
        if not segmenters:
            raise LatticeError("no segmenter given")
        for name in segmenters:  # unknown names fail before any model is loaded
            if name not in SEGMENTERS:
                load_segmenter(name)
        self.names = list(segmenters)
        self.segment = [load_segmenter(n) for n in self.names]

    def tokenize(self, sentence: str, where: str = "") -> List[List[str]]:
        sentence = sentence.rstrip("\r\n")
        if not sentence.strip():
            raise LatticeError(_where(where, "empty line"))
        return [seg(sentence) for seg in self.segment]

    def __call__(self, sentence: str, where: str = "") -> Lattice:
        return merge_tokenizations(sentence, self.tokenize(sentence, where), where)
