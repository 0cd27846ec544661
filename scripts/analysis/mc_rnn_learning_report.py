#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/mc_rnn_learning_report.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.mc_rnn_learning_report import main

if __name__ == "__main__":
    main()
