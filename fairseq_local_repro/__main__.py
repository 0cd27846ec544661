"""``python -m fairseq_local_repro``: the reproduction harness's command line (``scripts/reproduce.py``)."""
import sys

from fairseq_local_repro.cli import main

sys.exit(main())
