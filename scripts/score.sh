#!/usr/bin/env bash
# Score a system output with sacrebleu (and ROUGE).
#
# usage: scripts/score.sh --hyp FILE --ref FILE [--ref FILE2 ...] [--lowercase]
#                         [--tokenize 13a|intl|zh|char|none] [--rouge] [--json OUT]
# Prints detokenized BLEU (sacrebleu, with its signature) and tokenized BLEU (tokenize=none, as
# multi-bleu.perl); --ref repeated = multi-reference (NIST: 4 refs, with --lowercase);
# --rouge adds ROUGE-1/2/L F1 (rouge-score, stemmed) for summarization.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
case "${1:-}" in -h|--help|"") usage_from_header; [ -n "${1:-}" ] && exit 0 || exit 2 ;; esac
activate_env
exec python "$REPO_ROOT/scripts/score.py" "$@"
