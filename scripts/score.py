#!/usr/bin/env python
"""Score hypotheses against references: sacrebleu BLEU, optionally ROUGE (``--help``; the code:
fairseq_local_repro/tools/score.py)."""
import sys

from fairseq_local_repro.tools.score import main

if __name__ == "__main__":
    sys.exit(main())
