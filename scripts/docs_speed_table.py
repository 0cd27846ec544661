#!/usr/bin/env python
"""Render the speed and results tables embedded in docs/*.md (``--help``; the code:
fairseq_local_repro/tools/docs_speed_table.py)."""
import sys

from fairseq_local_repro.tools.docs_speed_table import main

if __name__ == "__main__":
    sys.exit(main())
