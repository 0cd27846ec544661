#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/mc_rnn_param_counts.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.mc_rnn_param_counts import main

if __name__ == "__main__":
    main()
