#!/usr/bin/env bash
# Prepare NIST Chinese-English from user-supplied LDC data: the door of
# fairseq_local_repro/tools/prepare_nist_zhen.py (-h: its options).
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.prepare_nist_zhen "$@"
