"""Command line of :mod:`fairseq_local.data.corpus_manifest` for the shell scripts (without torch)::

    python -m fairseq_local_repro.text.corpus_manifest [--prog PROG] write|gen-record|get|check-ref|claim ...
"""
import sys

from fairseq_local_repro.text.plugin import plugin_module

if __name__ == "__main__":
    sys.exit(plugin_module("data.corpus_manifest").main())
