#!/usr/bin/env python
"""Sample sentences from a trained fairseq language model (``--help``; the code:
fairseq_local_repro/tools/sample_lm.py)."""
import sys

from fairseq_local_repro.tools.sample_lm import main

if __name__ == "__main__":
    sys.exit(main())
