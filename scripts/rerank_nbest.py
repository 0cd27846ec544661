#!/usr/bin/env python
"""Re-rank n-best translation lists with a trained fairseq language model (``--help``; the code:
fairseq_local_repro/tools/rerank_nbest.py)."""
import sys

from fairseq_local_repro.tools.rerank_nbest import main

if __name__ == "__main__":
    sys.exit(main())
