#!/usr/bin/env python
"""Command line of fairseq_local_repro/analysis/lm_loss_by_position.py (``--help`` describes it)."""
from fairseq_local_repro.analysis.lm_loss_by_position import main

if __name__ == "__main__":
    main()
