#!/usr/bin/env python
"""Dynamic evaluation of a language model, genCNN paper Table 2 (``--help``; the code:
fairseq_local_repro/tools/gencnn_dynamic_eval.py)."""
import sys

from fairseq_local_repro.tools.gencnn_dynamic_eval import main

if __name__ == "__main__":
    sys.exit(main())
