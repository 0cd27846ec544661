#!/usr/bin/env python
"""Average the parameters of several fairseq checkpoints into one (``--help``; the code:
fairseq_local_repro/tools/average_checkpoints.py)."""
import sys

from fairseq_local_repro.tools.average_checkpoints import main

if __name__ == "__main__":
    sys.exit(main())
