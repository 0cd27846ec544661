#!/usr/bin/env bash
# Score a system output with sacrebleu (and ROUGE).
#
# usage: scripts/score.sh --hyp FILE --ref FILE [--ref FILE2 ...] [--lowercase]
#                         [--tokenize 13a|intl|zh|char|none] [--rouge] [--json OUT]
# Prints one BLEU line, labelled: "detokenized" (sacrebleu's tokenizer on detokenized hypotheses
# and raw references, the recipes' convention) or, with --tokenize none, "tokenized" (whitespace
# tokens as given, as multi-bleu.perl), with sacrebleu's signature; --ref repeated = multi-reference
# (NIST: 4 refs, with --lowercase); --rouge adds ROUGE-1/2/L F1 in [0, 1] (rouge-score, stemmed,
# best reference per sentence).  Detokenized BLEU is only computed against raw references: a
# reference holding <<unk>>/<unk> or BPE marks, or named *.tok / *.tok.txt (generate.sh's
# ref.tok.txt), is refused in one line (score it with --tokenize none); so are hypotheses with BPE
# marks left in.  Recipes score through score_translation / score_summaries in
# scripts/lib/common.sh, which call this script.
set -euo pipefail
source "$(dirname "$0")/lib/common.sh"
case "${1:-}" in -h|--help|"") usage_from_header; [ -n "${1:-}" ] && exit 0 || exit 2 ;; esac
activate_env
exec python "$REPO_ROOT/scripts/score.py" "$@"
