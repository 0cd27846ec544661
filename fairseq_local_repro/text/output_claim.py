"""Command line of the output-folder claims of :mod:`fairseq_local.file_io` for the shell scripts
(without torch)::

    python -m fairseq_local_repro.text.output_claim [--prog PROG] lock-path|claim|mark ...
"""
import sys

from fairseq_local_repro.text.plugin import plugin_module

if __name__ == "__main__":
    sys.exit(plugin_module("file_io").main())
