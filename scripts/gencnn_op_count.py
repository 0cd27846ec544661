#!/usr/bin/env python
"""ATen operators and host syncs of one training step, genCNN against a baseline (``--help``; the code:
fairseq_local_repro/tools/gencnn_op_count.py)."""
import sys

from fairseq_local_repro.tools.gencnn_op_count import main

if __name__ == "__main__":
    sys.exit(main())
