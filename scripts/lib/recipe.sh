# What the recipes under scripts/recipes/ share (sourced by common.sh, not run): their common
# options, the preamble of a paper-table row, training, translation and perplexity.
CPU=() HYDRA=() SCORE_ONLY=${SCORE_ONLY:-0}  # lattice_zh_en_small.sh reads SCORE_ONLY=1 from the environment

run_options() {  # run_options [--score-only]: declare the options of a recipe that trains
  #   --save-dir DIR (SAVE), --cpu (the array CPU: --cpu or nothing), --small (set_small),
  #   with --score-only also --score-only (SCORE_ONLY=1, else 0), and -- OVERRIDES... (the array HYDRA,
  #   Hydra overrides for every training run)
  opt --save-dir SAVE; flag_args --cpu CPU; flag_call --small set_small
  if [ "${1:-}" = --score-only ]; then flag --score-only SCORE_ONLY; else SCORE_ONLY=0; fi
  rest_args HYDRA "Hydra overrides go after --"
}
forward_options() {  # forward_options: --cpu, --small and --score-only, handed on to another recipe in
  #   the array PASS, and -- OVERRIDES... (the array HYDRA): for the recipes that run one recipe per row
  flag_args --cpu PASS; flag_args --small PASS; flag_args --score-only PASS
  rest_args HYDRA "Hydra overrides go after --"
}

row_config() {  # row_config FAMILY ROW [WHAT]: CFG=configs/FAMILY/ROW.yaml, which must exist (the error
  #   names it "config of WHAT", by default "config of --row ROW")
  CFG="$REPO_ROOT/configs/$1/$2.yaml"
  need_file "$CFG" "config of ${3:---row $2}"
}
start_row() {  # start_row FAMILY ROW [WHAT]: the preamble of a recipe that trains one row: its config
  #   (row_config), the environment (activate_env), and SAVE (--save-dir, by default
  #   checkpoints/FAMILY/ROW) created and made absolute
  row_config "$@"
  activate_env
  SAVE=$(abs_dir "${SAVE:-$REPO_ROOT/checkpoints/$1/$2}")
}
require_checksum() { export REQUIRE_CHECKSUM=1; }  # --require-checksum of the recipes that download
prepare_once() {  # prepare_once FILE RECIPE [ARG...]: run scripts/recipes/RECIPE.sh ARG... unless FILE,
  #   which it makes, exists
  [ -f "$1" ] || bash "$REPO_ROOT/scripts/recipes/$2.sh" "${@:3}"
}

train_row() {  # train_row DATA SAVE CONFIG [OVERRIDE...]: scripts/train.sh with the Hydra CONFIG on DATA
  #   into SAVE; --cpu, --small's schedule, then OVERRIDE... and the recipe's -- overrides (HYDRA).  SAVE
  #   records the row and DATA (claim_save_dir): another row or data directory there is one line
  claim_save_dir "$2" "$(basename "$3" .yaml)" "$1"
  bash "$REPO_ROOT/scripts/train.sh" --data "$1" --save-dir "$2" --config "$3" "${CPU[@]}" \
    -- "${@:4}" "${SMALL_HYDRA[@]}" "${HYDRA[@]}"
}
translate() {  # translate DATA CHECKPOINT GEN [OPTION...]: fairseq-generate's log of CHECKPOINT on DATA
  #   (OPTION...: subset, beam, ...; then batches of 64, --cpu and --small's beam and lengths) into GEN,
  #   written as GEN.tmp and moved into place when complete
  local data=$1 ckpt=$2 gen=$3; shift 3
  fairseq-generate "$data" --user-dir "$USER_DIR" --path "$ckpt" "$@" --batch-size 64 "${CPU[@]}" \
    "${SMALL_GEN[@]}" >"$gen.tmp" || { rm -f "$gen.tmp"; exit 1; }
  mv "$gen.tmp" "$gen"
}
train_and_translate() {  # train_and_translate DATA GEN [OPTION...]: unless --score-only, train_row with
  #   the row's CFG into SAVE, then translate its checkpoint_best.pt into GEN
  [ "$SCORE_ONLY" = 0 ] || return 0
  train_row "$1" "$SAVE" "$CFG"
  translate "$1" "$SAVE/checkpoint_best.pt" "$2" "${@:3}"
}

perplexity() {  # perplexity LABEL OUT DATA CHECKPOINT [OPTION...]: fairseq-eval-lm's loss and perplexity
  #   lines for CHECKPOINT on DATA (OPTION...: task, subset, batches; then --cpu), each prefixed with
  #   "LABEL: ", shown and written to OUT
  local label=$1 out=$2 data=$3 ckpt=$4; shift 4
  fairseq-eval-lm "$data" --user-dir "$USER_DIR" --path "$ckpt" "$@" "${CPU[@]}" 2>&1 \
    | grep -E "Loss|Perplexity" | sed "s/^/$label: /" | tee "$out"
}
valid_test_perplexities() {  # valid_test_perplexities NAME DATA SAVE [OPTION...]: perplexity of
  #   SAVE/checkpoint_best.pt on DATA's valid and test splits, labelled "NAME SPLIT", into SAVE/SPLIT.ppl
  local name=$1 data=$2 save=$3 split; shift 3
  for split in valid test; do
    perplexity "$name $split" "$save/$split.ppl" "$data" "$save/checkpoint_best.pt" --gen-subset "$split" "$@"
  done
}
word2vec_embeddings() {  # word2vec_embeddings TEXT DICT DIR: EMBED, the Hydra override that starts a
  #   genCNN's embeddings from word2vec vectors of TEXT (scripts/gencnn_word2vec.py), trained once
  #   into DIR/word2vec.DIMd.txt (DIM: the YAMLs' 100, or model.decoder_embed_dim=DIM after --)
  local dim=100 a vec
  for a in "${HYDRA[@]}"; do case "$a" in model.decoder_embed_dim=*) dim=${a#*=} ;; esac; done
  vec="$3/word2vec.${dim}d.txt"
  if [ ! -f "$vec" ]; then
    need_file "$1" "training text for word2vec (or --no-word2vec)"
    python "$REPO_ROOT/scripts/gencnn_word2vec.py" --train "$1" --dict "$2" --dim "$dim" --out "$vec"
  fi
  EMBED=("model.embed_path=$vec")
}
reference_args() {  # reference_args PREFIX: REF_ARGS=(--ref FILE ...) for every file PREFIX* (a test
  #   set's references: DIR/NAME.ref0 ...); an error when there is none
  local r; REF_ARGS=()
  for r in "$1"*; do if [ -f "$r" ]; then REF_ARGS+=(--ref "$r"); fi; done
  [ ${#REF_ARGS[@]} -gt 0 ] || die "no references $1*"
}
