#!/usr/bin/env bash
# End-to-end demo on an embedded default: synthetic corpus -> BPE -> fairseq-preprocess ->
# fairseq-train (one of our architectures) -> fairseq-generate --beam 5 -> sacrebleu.
#
# usage: bash scripts/demo.sh [--out DIR] [--arch ARCH] [--max-update N] [--minutes M]
#                             [--train-size N] [--test-size N] [--seed N]
# (-h explains each option and the BLEU the defaults reach; the code: fairseq_local_repro/tools/demo.py)
# Needs nothing installed: the first run builds .venv (see scripts/setup_env.sh).
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
source "$REPO_ROOT/scripts/setup_env.sh"
exec python -m fairseq_local_repro.tools.demo "$@"
