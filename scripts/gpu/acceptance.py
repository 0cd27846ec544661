#!/usr/bin/env python
"""The GPU acceptance run: a real fairseq-train per family with CUDA graphs in strict mode, against
eager and the fairseq baseline, time-boxed (``--help``; the code: fairseq_local_repro/gpu/acceptance.py)."""
import sys

from fairseq_local_repro.gpu.acceptance import main

if __name__ == "__main__":
    sys.exit(main())
