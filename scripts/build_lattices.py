#!/usr/bin/env python
"""Build word lattices from Chinese text (``--help``; the code:
fairseq_local_repro/tools/build_lattices.py)."""
import sys

from fairseq_local_repro.tools.build_lattices import main

if __name__ == "__main__":
    sys.exit(main())
