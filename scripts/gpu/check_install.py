#!/usr/bin/env python
"""Check a fairseq + fairseq_local installation, run by bootstrap.sh (``--help``; the code:
fairseq_local_repro/gpu/check_install.py)."""
from fairseq_local_repro.gpu.check_install import main

if __name__ == "__main__":
    main()
