#!/usr/bin/env python
"""Write the synthetic parallel corpus to OUT_DIR (``--help``; the code:
fairseq_local_repro/tools/make_synthetic_corpus.py)."""
import sys

from fairseq_local_repro.tools.make_synthetic_corpus import main

if __name__ == "__main__":
    sys.exit(main())
