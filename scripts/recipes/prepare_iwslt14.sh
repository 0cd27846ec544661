#!/usr/bin/env bash
# Download and prepare IWSLT14 German-English: the door of
# fairseq_local_repro/tools/prepare_iwslt14.py (-h: its options).
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.prepare_iwslt14 "$@"
