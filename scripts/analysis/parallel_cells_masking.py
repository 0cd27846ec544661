#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/parallel_cells_masking.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.parallel_cells_masking import main

if __name__ == "__main__":
    main()
