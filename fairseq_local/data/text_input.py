"""The text input of ``fairseq-interactive`` and of the hub, read as the model was trained to see it.

* **UTF-8.** :func:`buffered_read` is fairseq's ``buffered_read`` reading bytes: it stops at the
  first line that is not UTF-8 with one line naming it (``FILE:N`` or ``input line N``), before
  anything of that line is translated (fairseq reads standard input with the locale's error
  handler, so a GB18030 line would be translated as ``<unk> <unk>``, and ``--input FILE``
  strictly, a ``UnicodeDecodeError`` traceback).
* **Lowercase.** ``scripts/preprocess.sh --lowercase`` lowercases the training text; fairseq has
  no such option at inference, so a capitalised word would be ``<unk>``.  A source dictionary with
  cased words and not one uppercase letter (:func:`is_lowercased`) can only have been built from
  lowercased text, and then every input word with an uppercase letter is out of the vocabulary:
  :func:`lowercase_input` lowercases the input for such a dictionary, which can only turn
  ``<unk>`` into known words.

:mod:`fairseq_local.patches.interactive_input` installs both into fairseq-interactive for our
models and tasks (fairseq's own keep fairseq's reader); the lattice task and the hub
(:mod:`fairseq_local.hub`) call :func:`lowercase_input` themselves.  Standard input may be any text
stream (``io.StringIO``, a notebook's): text read without bytes beneath is already decoded.
"""
import io
import logging
import re
import sys

from fairseq_local_core.errors import InputFileError

logger = logging.getLogger(__name__)

_INPUT = {"name": "-"}  # the input fairseq-interactive reads (for line references)
_LOWERCASED = {}  # id(dictionary) -> (dictionary, bool)
_MADEUP = re.compile(r"madeupword\d+")  # fairseq's padding entries
MIN_CASED = 20  # cased entries a dictionary needs before its lack of capitals means anything


def input_where(n: int) -> str:
    """How an error names line ``n`` of fairseq-interactive's input."""
    name = _INPUT["name"]
    return f"input line {n}" if name in ("-", None) else f"{name}:{n}"


def _decode(raw: bytes, n: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            f"{input_where(n)}: not UTF-8 ({err.reason}: byte 0x{raw[err.start:err.start + 1].hex()} at byte "
            f"{err.start + 1} of the line); convert the input to UTF-8 (e.g. iconv -f GB18030 -t UTF-8)") from None


def _stdin_lines():
    """Standard input's lines: bytes where it is byte-backed (a terminal, a pipe, a redirected
    file), checked as UTF-8 by :func:`buffered_read`; the text itself where it is a text stream
    without bytes beneath (``io.StringIO``, a notebook's, a wrapper), already decoded."""
    stream = sys.stdin
    raw = getattr(stream, "buffer", None)
    return stream if raw is None or isinstance(stream, io.StringIO) else raw


def buffered_read(input, buffer_size):
    """fairseq's ``buffered_read`` (lists of at most ``buffer_size`` stripped lines of ``input``,
    ``-`` = standard input, any text stream there) that refuses a line that is not UTF-8, naming it."""
    _INPUT["name"] = input
    try:
        if input == "-":
            stream, close = _stdin_lines(), False
        else:
            try:
                stream, close = open(input, "rb"), True
            except FileNotFoundError:
                raise InputFileError(f"--input {input}: no such file") from None
        buffer = []
        try:
            for n, line in enumerate(stream, 1):
                buffer.append((line if isinstance(line, str) else _decode(line, n)).strip())
                if len(buffer) >= buffer_size:
                    yield buffer
                    buffer = []
        finally:
            if close:
                stream.close()
        if buffer:
            yield buffer
    finally:  # the input is read and translated: later line references are not its lines
        _INPUT["name"] = "-"


def is_lowercased(dictionary) -> bool:
    """True when ``dictionary`` has at least :data:`MIN_CASED` words with a cased letter and no
    word with an uppercase letter (its text was lowercased)."""
    if dictionary is None:
        return False
    cached = _LOWERCASED.get(id(dictionary))
    if cached is not None and cached[0] is dictionary:
        return cached[1]
    cased, result = 0, None
    for symbol in dictionary.symbols[dictionary.nspecial:]:
        if symbol != symbol.lower():
            result = False
            break
        if symbol != symbol.upper() and not _MADEUP.fullmatch(symbol):
            cased += 1
    if result is None:
        result = cased >= MIN_CASED
    _LOWERCASED[id(dictionary)] = (dictionary, result)
    if result:
        logger.info("the source dictionary has no uppercase word (its training text was lowercased): "
                    "lowercasing the input")
    return result


def lowercase_input(text: str, dictionary) -> str:
    """``text`` lowercased if ``dictionary`` :func:`is_lowercased`; each character is lowercased
    on its own and kept where its lowercase has another length (e.g. 'İ'), so character offsets
    (a lattice line's edges) still hold."""
    if not is_lowercased(dictionary):
        return text
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
