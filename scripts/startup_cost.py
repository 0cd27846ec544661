#!/usr/bin/env python
"""The start-up cost of ``--rnn-impl`` over a run's batch shapes (``--help``; the code:
fairseq_local_repro/startup.py)."""
from fairseq_local_repro.startup import main

if __name__ == "__main__":
    main()
