"""Building lattice files in parallel (scripts/build_lattices.py): the pool's workers and its map.

The plugin's lattice code (``fairseq_local_core/lattice.py``: the format, the segmenters and
``LatticeBuilder``) imports without torch or fairseq.
The workers live in this importable module so that a multiprocessing pool can pickle them by name.
"""
import sys

from fairseq_local_core import file_io, lattice

LatticeError = lattice.LatticeError

def write_lines(path: str, lines):
    """One line per item, written atomically (``fairseq_local_core/file_io.py``)."""
    file_io.write_lines(path, lines)


def merge_item(item):
    n, raw_where, raw, named = item
    try:
        if raw is not None and not raw.strip():
            raise LatticeError(f"{raw_where}: empty line")
        for path, toks in named:
            if not toks:
                raise LatticeError(f"{path}:{n}: empty line")
        sentence = raw if raw is not None else "".join(named[0][1])
        chars = lattice.sentence_chars(sentence)
        for path, toks in named:  # a mismatch names the tokenized file and line
            lattice.tokenization_edges(chars, toks, f"{path}:{n}")
        return True, lattice.merge_tokenizations(sentence, [t for _, t in named], raw_where).to_line()
    except LatticeError as e:
        return False, str(e)


def worker_init(initializer=None, *initargs):
    """A pool worker's initializer: Ctrl-C (SIGINT to the whole process group) is the parent's to
    answer, in one line, and the parent then ends its workers; then ``initializer(*initargs)``."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer(*initargs)


def parallel_map(fn, items, workers: int = 1, initializer=None, initargs=()):
    """Map ``fn`` (returning ``(ok, line or error)``) over ``items`` in order, in ``workers``
    processes, with a tqdm progress bar; the first error is raised as a LatticeError."""
    import multiprocessing as mp

    from tqdm import tqdm

    def results():
        if workers <= 1:
            if initializer:
                initializer(*initargs)
            yield from map(fn, items)
        else:
            with mp.get_context("fork").Pool(workers, initializer=worker_init,
                                             initargs=(initializer, *initargs)) as pool:
                yield from pool.imap(fn, items, chunksize=32)

    out = []
    for ok, line in tqdm(results(), total=len(items), desc="lattices", unit="sent", file=sys.stderr,
                         mininterval=1.0, disable=len(items) < 1000):
        if not ok:
            raise LatticeError(line)
        out.append(line)
    return out
