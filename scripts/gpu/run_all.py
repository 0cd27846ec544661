#!/usr/bin/env python
"""The GPU benchmark set and one time-boxed paper-scale training run, driven by run_all.sh
(``--help``; the code: fairseq_local_repro/gpu/run_all.py)."""
from fairseq_local_repro.gpu.run_all import main

if __name__ == "__main__":
    main()
