#!/usr/bin/env bash
# The whole GPU benchmark set, then one time-boxed paper-scale training run, as JSON under OUT.
#
# usage: scripts/gpu/run_all.sh OUT [--part all|bench|train|precision|fastpath|check|startup] [--budget-minutes 8.5]
#                               [--dtypes fp32,bf16] [--per-run-timeout SECONDS]
#                               [--only REGEX] [--data DIR] [--train-archs "A B"] [--train-dtype fp32|bf16]
#                               [--cpu [--tiny]] [--machine-note TEXT] [--dry-run]
# On a GPU box, after scripts/gpu/bootstrap.sh TARGET and `source TARGET/env.sh` (docs/gpu.md).
# Benchmarks: every family's scripts/bench.py comparison with its baseline (model arguments from
# docs/<family>.md "Speed", GPU-sized batches), fp32 and bf16, training and beam-5 generation, with
# --lengths scaling; training: mc_rnn_iwslt_de_en_3 and rnnsearch_iwslt_de_en on the Multi30k of
# scripts/gpu/prepare_data.sh for the minutes left, then valid BLEU (beam 5); --part precision:
# MC-RNN-3 for 1000 updates in fp32 and with --bf16; --part fastpath: every recurrent family with
# --rnn-impl compiled against eager; --part check: check_install.py --fast-path (compiled == eager on
# the GPU, CUDA graphs included; OUT/fast_path_check.json); --part startup: scripts/startup_cost.py
# (eager, auto, compiled over five batch shapes) for every family with --rnn-impl (OUT/startup.json).
# Writes OUT/bench.json, OUT/train.json,
# OUT/precision.json, OUT/summary.txt and OUT/run_all.log, rewritten after every step, and stops
# starting new work when --budget-minutes (default 8.5: one 10-minute device call, bootstrap included) runs out.
# --dry-run checks every command without running it; --cpu --tiny runs everything on CPU with tiny
# batches (what the tests do); --cpu alone is the CPU profile (the family pages' CPU tables:
# each family's main comparisons on one thread, OUT/check.json describing the machine).
# Details: python scripts/gpu/run_all.py --help.
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
case "${1:-}" in -h|--help|"") usage_from_header; [ -n "${1:-}" ] && exit 0 || exit 2 ;; esac
python -c "import fairseq, fairseq_local" 2>/dev/null \
  || die "fairseq or fairseq_local does not import: on a GPU box run scripts/gpu/bootstrap.sh TARGET and source TARGET/env.sh first"
exec python "$REPO_ROOT/scripts/gpu/run_all.py" "$@"
