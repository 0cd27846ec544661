"""One Chinese segmenter per process for scripts/build_lattices.py.

The functions live in an importable module so that a
multiprocessing pool can pickle them by name; the segmenter itself is made by the pool's
initializer in each process (fork start: the factory is inherited, never pickled).
"""
_SEGMENT = None


def load(factory):
    """Make this process's segmenter: ``factory()`` returns ``str -> list of words``."""
    global _SEGMENT
    _SEGMENT = factory()


def unload():
    global _SEGMENT
    _SEGMENT = None


def segment(sentence):
    return _SEGMENT(sentence)
