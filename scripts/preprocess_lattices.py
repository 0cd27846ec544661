#!/usr/bin/env python
"""Binarize lattice-to-text data for --task lattice_translation (``--help``; the code:
fairseq_local_repro/tools/preprocess_lattices.py)."""
import sys

from fairseq_local_repro.tools.preprocess_lattices import main

if __name__ == "__main__":
    sys.exit(main())
