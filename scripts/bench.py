#!/usr/bin/env python
"""Benchmark two fairseq architectures on identical batches (``--help``; the code:
fairseq_local_repro/bench.py)."""
from fairseq_local_repro.bench import main

if __name__ == "__main__":
    main()
