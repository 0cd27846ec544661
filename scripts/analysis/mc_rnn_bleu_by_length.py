#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/mc_rnn_bleu_by_length.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.mc_rnn_bleu_by_length import main

if __name__ == "__main__":
    main()
