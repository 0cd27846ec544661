#!/usr/bin/env bash
# Prepare English Gigaword headline generation (Rush et al. 2015): the door of
# fairseq_local_repro/tools/prepare_gigaword.py (-h: its options).
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.prepare_gigaword "$@"
