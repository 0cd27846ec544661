#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/lattice_gates.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.lattice_gates import main

if __name__ == "__main__":
    main()
