#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/parallel_cells_ensemble.py (``--help`` describes it)."""
import sys

from fairseq_local_repro.analysis.parallel_cells_ensemble import main

if __name__ == "__main__":
    main(sys.argv[1:])
