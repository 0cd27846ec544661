#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/dpn_alignment_entropy.py (``--help`` describes it)."""
import sys

from fairseq_local_repro.analysis.dpn_alignment_entropy import main

if __name__ == "__main__":
    sys.exit(0 if main() else 1)
