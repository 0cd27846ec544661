#!/usr/bin/env python
"""The GPU acceptance run's corpus: synthetic text with IWSLT14 De-En's sentence lengths, binarized
(``--help``; the code: fairseq_local_repro/gpu/acceptance_corpus.py)."""
import sys

from fairseq_local_repro.gpu.acceptance_corpus import main

if __name__ == "__main__":
    sys.exit(main())
