#!/usr/bin/env bash
# Prepare the Penn Treebank language-modelling corpus: the door of
# fairseq_local_repro/tools/prepare_ptb.py (-h: its options).
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.prepare_ptb "$@"
