#!/usr/bin/env python
"""Word2Vec embeddings for genCNN's initialisation (``--help``; the code:
fairseq_local_repro/tools/gencnn_word2vec.py)."""
import sys

from fairseq_local_repro.tools.gencnn_word2vec import main

if __name__ == "__main__":
    sys.exit(main())
