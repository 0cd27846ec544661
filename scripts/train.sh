#!/usr/bin/env bash
# Train any fairseq(-local) architecture or Hydra config on binarized data.
#
# usage: scripts/train.sh --data BIN_DIR --save-dir DIR (--arch ARCH | --config configs/X/Y.yaml)
#                         [--task T] [--fp16|--bf16] [--gpus N] [--cpu] [-- EXTRA fairseq ARGS]
# (-h explains each option; the code: fairseq_local_repro/tools/train.py)
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
activate_env
exec python -m fairseq_local_repro.tools.train "$@"
