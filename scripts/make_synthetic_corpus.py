#!/usr/bin/env python
"""Write the synthetic parallel corpus (see fairseq_local/data/synthetic.py) to OUT_DIR."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fairseq_local.data.synthetic import cli_main  # noqa: E402

if __name__ == "__main__":
    cli_main()
