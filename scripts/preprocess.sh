#!/usr/bin/env bash
# Tokenize (optional), learn and apply BPE, binarize with fairseq-preprocess: the door of
# fairseq_local_repro/tools/preprocess.py (-h: its options).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.preprocess "$@"
