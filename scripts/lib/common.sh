# Shared helpers for the fairseq-local shell scripts (sourced, not run).
die() { echo "$(basename "$0"): error: $*" >&2; exit 2; }
need_file() { [ -f "$1" ] || die "${2:-file} '$1' does not exist"; }
need_dir() { [ -d "$1" ] || die "${2:-directory} '$1' does not exist"; }
need_val() { [ $# -ge 2 ] && [ -n "$2" ] || die "option $1 needs a value"; }
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
count_lines() {  # count_lines FILE: lines, counting a last line without newline (wc -l does not)
  local n; n=$(wc -l <"$1"); if [ -s "$1" ] && [ -n "$(tail -c1 "$1")" ]; then n=$((n + 1)); fi; echo "$n"
}
same_lines() {  # same_lines FILE_A FILE_B: error unless both have the same number of lines
  local a b; a=$(count_lines "$1"); b=$(count_lines "$2")
  [ "$a" -eq "$b" ] || die "line counts differ: $1 has $a lines, $2 has $b"
}
usage_from_header() { sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
# shellcheck source=options.sh
source "$(dirname "${BASH_SOURCE[0]}")/options.sh"  # opt, flag, ..., parse_options
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
USER_DIR="$REPO_ROOT/fairseq_local"
activate_env() {  # use .venv when the caller has no fairseq on PATH
  if ! command -v fairseq-train >/dev/null 2>&1; then
    # shellcheck disable=SC1091
    source "$REPO_ROOT/scripts/setup_env.sh"
  fi
}
# A recipe (a script under scripts/recipes/) runs under a supervisor: the script starts itself again
# as a background child and waits.  Ctrl-C or kill (SIGTERM) of the recipe then reaches the
# supervisor at once (bash runs no trap while a foreground step runs), which ends the child's whole
# process tree with SIGTERM (trainings, decodings, nested recipes: their own clean-up runs), prints
# "RECIPE: interrupted" once they have ended and exits 130.  The child ignores SIGINT (a background job does), and so do
# the programs it starts: Ctrl-C, which signals the whole process group, reaches the supervisor only.
_process_tree() { echo "$1"; local c; for c in $(pgrep -P "$1" 2>/dev/null); do _process_tree "$c"; done; }
if [ "$(basename "$(dirname "$0")")" = recipes ] && [ -z "${_FAIRSEQ_LOCAL_RECIPE:-}" ]; then
  export _FAIRSEQ_LOCAL_RECIPE=$$
  _recipe_body=
  _end_recipe() {  # SIGTERM to the body's tree; the line once every process of it has ended (<= 60 s)
    local tree p n=600
    if [ -n "$_recipe_body" ]; then
      tree=$(_process_tree "$_recipe_body"); kill -TERM $tree 2>/dev/null || true
      wait "$_recipe_body" 2>/dev/null || true
      for p in $tree; do while [ $n -gt 0 ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; n=$((n - 1)); done; done
    fi
    echo "$(basename "$0"): interrupted" >&2; exit 130
  }
  trap _end_recipe INT TERM
  bash "$0" "$@" <&0 &
  _recipe_body=$!
  wait "$_recipe_body" && exit 0 || exit $?
fi
nsuffix() { if [ "$1" -gt 0 ]; then echo "$1"; fi; }  # 0 -> "", 1 -> "1" (fairseq test split names)
abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }  # abs_dir DIR: create DIR, print its absolute path
abs_path() { local d; d=$(cd "$(dirname "$1")" && pwd) || die "'$1': no such directory"; echo "$d/$(basename "$1")"; }

# ---- text processing shared by the recipes ----
lowercase() { python -c "import sys; sys.stdout.writelines(l.lower() for l in sys.stdin)"; }
moses_tok() {  # moses_tok LANG IN OUT [--lowercase]: Moses tokenization (sacremoses, escaped like tokenizer.perl)
  local tmp="$3.tmp.$$"
  sacremoses -q -l "$1" -j "${WORKERS:-1}" tokenize <"$2" >"$tmp" || { rm -f "$tmp"; die "Moses tokenization of $2 failed"; }
  if [ "${4:-}" = --lowercase ]; then lowercase <"$tmp" >"$tmp.lc" && mv "$tmp.lc" "$tmp"; fi
  same_lines "$2" "$tmp"; mv "$tmp" "$3"
}
moses_detok() {  # moses_detok LANG IN OUT: undo moses_tok (sacremoses detokenize, XML unescaped)
  local tmp="$3.tmp.$$"
  sacremoses -q -l "$1" -j "${WORKERS:-1}" detokenize <"$2" >"$tmp" || { rm -f "$tmp"; die "Moses detokenization of $2 failed"; }
  same_lines "$2" "$tmp"; mv "$tmp" "$3"
}
to_file() {  # to_file FILE NAME CMD...: CMD's output into FILE; a full disk is one line naming NAME (its destination)
  local file=$1 name=$2 err; shift 2
  if err=$("$@" 2>&1 >"$file"); then [ -z "$err" ] || printf '%s\n' "$err" >&2; return 0; fi
  case "$err" in *"No space left on device"*) die "$name: no space left on device" ;;
                 *"Disk quota exceeded"*) die "$name: disk quota exceeded" ;; esac
  [ -z "$err" ] || printf '%s\n' "$err" >&2; exit 1
}
make_dir() {  # make_dir DIR NAME: mkdir -p DIR; a full disk, a read-only file system, no permission or a file
  #   in the way is one line naming NAME (the option or the destination DIR is for)
  local err; err=$(mkdir -p "$1" 2>&1) && return 0
  case "$err" in *"No space left on device"*) die "$2: no space left on device (cannot create $1)" ;;
                 *"Disk quota exceeded"*) die "$2: disk quota exceeded (cannot create $1)" ;;
                 *"Read-only file system"*) die "$2: read-only file system (cannot create $1)" ;;
                 *"Permission denied"*) die "$2: permission denied (cannot create $1)" ;;
                 *"Not a directory"*|*"File exists"*) die "$2: cannot create $1: a file stands in its path" ;; esac
  die "$2: cannot create $1 (${err##*: })"
}
full_disk() {  # full_disk PATH: true when the file system of PATH (or of its nearest existing parent) is full
  local p=$1 avail
  while [ ! -e "$p" ] && [ "$p" != "$(dirname "$p")" ]; do p=$(dirname "$p"); done
  avail=$(df -Pk "$p" 2>/dev/null | awk 'NR == 2 { print $4 }'); [ "${avail:-1}" = 0 ]
}
claim_output() {  # claim_output DIR WHAT [--check-ours [--marker NAME]...]: DIR (the option WHAT names) is this
  #   script's until it ends (fairseq_local_core/file_io.py's claim: a lock file named by DIR's real path, held
  #   through an open descriptor, naming the script's pid); a second run on DIR is one line naming DIR and the
  #   holder.  --check-ours: an existing non-empty DIR that no tool made (no .fairseq-local, no NAME in it) is
  #   one line, DIR left as it is
  local lock
  lock=$(python -m fairseq_local_repro.text.output_claim lock-path "$1") || exit 2
  exec {_CLAIM_FD}<>"$lock" || die "$2 $1: cannot create its lock file $lock"
  python -m fairseq_local_repro.text.output_claim --prog "$(basename "$0")" claim "$1" --what="$2" \
    --fd "$_CLAIM_FD" --pid $$ "${@:3}" || exit 2
}
mark_output() {  # mark_output DIR: DIR was made by this script (a later run may replace it: claim_output --check-ours)
  python -m fairseq_local_repro.text.output_claim mark "$1" --tool "$(basename "$0")" || exit 2
}
claim_save_dir() {  # claim_save_dir SAVE ROW DATA: SAVE/run.json records that SAVE trains ROW on DATA; a run of
  #   another row or data directory there is one line naming both (the same run resumes)
  python -m fairseq_local_repro.text.corpus_manifest --prog "$(basename "$0")" claim "$1" --row "$2" --data "$3" \
    || exit 2
}
gen_text() {  # gen_text GEN_LOG H|T|S OUT [--expect N]: one field of a fairseq-generate log in corpus order
  python -m fairseq_local_repro.text.gen_text "$@" || exit 2
}

# ---- BPE: what scripts/preprocess.sh left in a data directory ----
bpe_kind() {  # bpe_kind BIN_DIR: sentencepiece, subword-nmt or none, from BIN_DIR/bpe (spm.*.model / codes.*)
  if ls "$1"/bpe/spm.*.model >/dev/null 2>&1; then echo sentencepiece
  elif ls "$1"/bpe/codes.* >/dev/null 2>&1; then echo subword-nmt; else echo none; fi
}
remove_bpe_args() {  # remove_bpe_args BIN_DIR|KIND: fairseq-generate's option that undoes that BPE, one word a line
  local kind=$1
  case "$kind" in sentencepiece|subword-nmt|none) ;; *) kind=$(bpe_kind "$1") ;; esac
  case "$kind" in sentencepiece) printf '%s\n' --remove-bpe sentencepiece ;; subword-nmt) echo --remove-bpe ;; esac
}

# ---- the one scoring path of every recipe ----
# score_translation GEN_LOG OUT_PREFIX [--lang L] [--lowercase] [--tokenized] [--ref RAW_REF]...
#   OUT_PREFIX.hyp.tok: fairseq's best hypotheses in corpus order (BPE removed, still tokenized);
#   OUT_PREFIX.hyp: those Moses-detokenized.  With raw references (one --ref each; NIST: four):
#   detokenized BLEU against them (scripts/score.py: sacrebleu 13a, signature printed).  With
#   --tokenized, or when no raw reference is given: also tokenized BLEU of OUT_PREFIX.hyp.tok against
#   the binarized references (T- lines), labelled "tokenized".  Scores: OUT_PREFIX.score (+ .json).
score_translation() {
  local gen=$1 out=$2 lang=en lc=() tokd=0 refs=() expect=()
  shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --lang) lang=$2; shift 2 ;;
      --lowercase) lc=(--lowercase); shift ;;
      --tokenized) tokd=1; shift ;;
      --ref) need_file "$2" "reference"; refs+=(--ref "$2"); shift 2 ;;
      *) die "score_translation: unknown option $1" ;;
    esac
  done
  if [ ${#refs[@]} -gt 0 ]; then expect=(--expect "$(wc -l <"${refs[1]}")"); fi
  gen_text "$gen" H "$out.hyp.tok" "${expect[@]}"
  : >"$out.score.tmp"
  if [ ${#refs[@]} -gt 0 ]; then
    moses_detok "$lang" "$out.hyp.tok" "$out.hyp"
    python "$REPO_ROOT/scripts/score.py" --hyp "$out.hyp" "${refs[@]}" "${lc[@]}" --json "$out.json" \
      >>"$out.score.tmp" || exit 2
  fi
  if [ "$tokd" = 1 ] || [ ${#refs[@]} -eq 0 ]; then
    gen_text "$gen" T "$out.ref.tok"
    python "$REPO_ROOT/scripts/score.py" --hyp "$out.hyp.tok" --ref "$out.ref.tok" --tokenize none "${lc[@]}" \
      --json "$out.tok.json" >>"$out.score.tmp" || exit 2
  fi
  mv "$out.score.tmp" "$out.score"; cat "$out.score"
}
# score_summaries GEN_LOG OUT_PREFIX --ref REF [--ref REF2...]: ROUGE-1/2/L F1 of the best hypotheses
#   (OUT_PREFIX.hyp) against the release's reference files (never fairseq's T- lines, where words
#   outside the vocabulary read <<unk>>), best reference per sentence; OUT_PREFIX.score (+ .json).
score_summaries() {
  local gen=$1 out=$2 refs=(); shift 2
  while [ $# -gt 0 ]; do
    case "$1" in --ref) need_file "$2" "reference"; refs+=(--ref "$2"); shift 2 ;; *) die "score_summaries: unknown option $1" ;; esac
  done
  [ ${#refs[@]} -gt 0 ] || die "score_summaries: at least one --ref is required"
  gen_text "$gen" H "$out.hyp" --expect "$(wc -l <"${refs[1]}")"
  python "$REPO_ROOT/scripts/score.py" --hyp "$out.hyp" "${refs[@]}" --lowercase --rouge --json "$out.json" \
    >"$out.score.tmp" || exit 2
  mv "$out.score.tmp" "$out.score"; cat "$out.score"
}

# ---- --small: a smoke run of a recipe (what CI runs): the paper's model and schedule, but a couple
# of updates, one validation, beam 2 and short outputs ----
SMALL_HYDRA=() SMALL_CLI=() SMALL_GEN=()
set_small() {
  SMALL=1
  SMALL_HYDRA=(optimization.max_update=2 optimization.max_epoch=1 checkpoint.no_epoch_checkpoints=true
               common.log_interval=1 dataset.num_workers=0)
  SMALL_CLI=(--max-update 2 --max-epoch 1 --no-epoch-checkpoints --log-interval 1 --num-workers 0)
  SMALL_GEN=(--beam 2 --max-len-a 0 --max-len-b 16)
}
if [ "${SMALL:-0}" = 1 ]; then set_small; fi
# shellcheck source=recipe.sh
source "$(dirname "${BASH_SOURCE[0]}")/recipe.sh"  # run_options, start_row, train_and_translate, ...
