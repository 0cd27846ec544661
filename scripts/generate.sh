#!/usr/bin/env bash
# Beam-search translation of a binarized split, with BPE removed and hypotheses in corpus order.
#
# usage: scripts/generate.sh --data BIN_DIR --path CHECKPOINT --out DIR [options] [-- fairseq-generate ARGS]
# (-h lists every option; the code: fairseq_local_repro/tools/generate.py)
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.generate "$@"
