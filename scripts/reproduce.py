#!/usr/bin/env python
"""Reproduce one paper's central comparison on real data, every system trained to convergence.

The command line of the reproduction harness, the package ``fairseq_local_repro`` (its options and
what it does: ``python scripts/reproduce.py --help``; the same as ``python -m fairseq_local_repro``).
"""
import sys

from fairseq_local_repro.cli import main

if __name__ == "__main__":
    sys.exit(main())
