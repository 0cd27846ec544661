#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/lattice_coverage.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.lattice_coverage import main

if __name__ == "__main__":
    main()
