# Declarative option parsing for the fairseq-local shell scripts (sourced by common.sh, not run).
#
# A script declares each option once, then parses its command line:
#   opt NAME VAR [DEFAULT]            --name VALUE sets VAR (DEFAULT, or empty, until then)
#   flag NAME VAR [VALUE [DEFAULT]]   --name sets VAR to VALUE (1); VAR is DEFAULT (0) until then
#   opt_list NAME VAR                 --name VALUE, repeatable: each VALUE appended to the array VAR
#   opt_args NAME VAR [WORD]          --name VALUE, repeatable: (WORD VALUE) appended to the array VAR
#                                     (WORD defaults to NAME: options handed on to another command)
#   flag_args NAME VAR [WORD...]      --name appends WORD... (default: NAME) to the array VAR
#   opt_call NAME FUNC                --name VALUE runs FUNC VALUE (options with side effects)
#   flag_call NAME FUNC               --name runs FUNC (e.g. flag_call --small set_small)
#   positional VAR LABEL              one argument that is not an option, into VAR (LABEL names it)
#   rest_args VAR [HINT]              what follows -- goes into the array VAR (HINT: what belongs
#                                     there, added to the unknown-option message)
#   parse_options "$@"
# NAME may also be given as --name=VALUE.  -h/--help prints the script's header (usage_from_header)
# and exits 0.  Each mistake is one line and exit status 2: a value option at the end of the line,
# or followed by an empty word or by another of the script's options ("option --row needs a
# value"); an option given twice that is not repeatable; an unknown option (naming the closest
# known one when there is one); an argument where none is expected.  given NAME tells whether
# NAME was on the command line.
declare -gA _OPT_KIND=() _OPT_VAR=() _OPT_VALUE=() _OPT_SEEN=()
declare -ga _OPT_NAMES=()
_OPT_POS_VAR="" _OPT_POS_LABEL="" _OPT_REST_VAR="" _OPT_REST_HINT=""

_opt_declare() {  # _opt_declare KIND NAME VAR [VALUE]
  case "$2" in --?*) ;; *) die "option name '$2' must start with --" ;; esac
  [ -z "${_OPT_KIND[$2]:-}" ] || die "option $2 is declared twice"
  _OPT_KIND[$2]=$1 _OPT_VAR[$2]=$3 _OPT_VALUE[$2]=${4:-}
  _OPT_NAMES+=("$2")
}
opt() { _opt_declare opt "$1" "$2"; printf -v "$2" '%s' "${3:-}"; }
flag() { _opt_declare flag "$1" "$2" "${3-1}"; printf -v "$2" '%s' "${4-0}"; }
opt_list() { _opt_declare list "$1" "$2"; eval "$2=()"; }
opt_args() { _opt_declare args "$1" "$2" "${3:-$1}"; eval "$2=()"; }
flag_args() {
  local name=$1 var=$2; shift 2; [ $# -gt 0 ] || set -- "$name"
  _opt_declare flag_args "$name" "$var" "$(printf '%q ' "$@")"; eval "$var=()"
}
opt_call() { _opt_declare call "$1" "$2"; }
flag_call() { _opt_declare flag_call "$1" "$2"; }
positional() { _OPT_POS_VAR=$1 _OPT_POS_LABEL=$2; printf -v "$1" '%s'; }
rest_args() { _OPT_REST_VAR=$1 _OPT_REST_HINT=${2:-}; eval "$1=()"; }
given() { [ -n "${_OPT_SEEN[$1]:-}" ]; }

_opt_distance() {  # _opt_distance A B: the edit distance (insertions, deletions, substitutions)
  local a=$1 b=$2 i j d cost; local -a prev cur
  for ((j = 0; j <= ${#b}; j++)); do prev[j]=$j; done
  for ((i = 1; i <= ${#a}; i++)); do
    cur=("$i")
    for ((j = 1; j <= ${#b}; j++)); do
      cost=1; if [ "${a:i-1:1}" = "${b:j-1:1}" ]; then cost=0; fi
      d=$((prev[j] + 1))
      if ((cur[j - 1] + 1 < d)); then d=$((cur[j - 1] + 1)); fi
      if ((prev[j - 1] + cost < d)); then d=$((prev[j - 1] + cost)); fi
      cur[j]=$d
    done
    prev=("${cur[@]}")
  done
  echo "${prev[${#b}]}"
}
closest_option() {  # closest_option WORD: the declared option nearest to WORD (empty when none is near)
  local best="" best_d=999 name d
  for name in "${_OPT_NAMES[@]}" --help; do
    d=$(_opt_distance "$1" "$name")
    if ((d < best_d)); then best=$name best_d=$d; fi
  done
  # near: a typo or two, or up to a third of the name (--src-lang for --source-lang is not near)
  if ((best_d <= 2 || best_d * 3 <= ${#best})); then echo "$best"; fi
}
_opt_unknown() {
  local near hint="see -h"; near=$(closest_option "$1")
  [ -z "$_OPT_REST_HINT" ] || hint="$hint; $_OPT_REST_HINT"
  die "unknown option '$1' (${near:+did you mean $near? }$hint)"
}

parse_options() {
  local _po_arg _po_name _po_val _po_has _po_kind _po_var
  while [ $# -gt 0 ]; do
    _po_arg=$1; shift
    case "$_po_arg" in
      -h|--help) usage_from_header; exit 0 ;;
      --)
        [ -n "$_OPT_REST_VAR" ] || die "'--' is not accepted here: this script passes nothing on (see -h)"
        eval "$_OPT_REST_VAR=(\"\$@\")"; return 0 ;;
      --*=*) _po_name=${_po_arg%%=*} _po_val=${_po_arg#*=} _po_has=1 ;;
      -?*) _po_name=$_po_arg _po_val="" _po_has=0 ;;
      *)
        [ -n "$_OPT_POS_VAR" ] || die "unexpected argument '$_po_arg' (options start with --; see -h)"
        [ -z "${!_OPT_POS_VAR}" ] || die "one $_OPT_POS_LABEL only (got '${!_OPT_POS_VAR}' and '$_po_arg')"
        printf -v "$_OPT_POS_VAR" '%s' "$_po_arg"; continue ;;
    esac
    _po_kind=${_OPT_KIND[$_po_name]:-}
    [ -n "$_po_kind" ] || _opt_unknown "$_po_name"
    _po_var=${_OPT_VAR[$_po_name]}
    case "$_po_kind" in
      list|args) ;;
      *) [ -z "${_OPT_SEEN[$_po_name]:-}" ] || die "option $_po_name is given twice" ;;
    esac
    _OPT_SEEN[$_po_name]=1
    case "$_po_kind" in
      flag|flag_args|flag_call)
        [ "$_po_has" = 0 ] || die "option $_po_name takes no value (got '$_po_arg')" ;;
      *)
        if [ "$_po_has" = 0 ]; then
          if [ $# -gt 0 ] && { [ -z "$1" ] || [ -z "${_OPT_KIND[$1]:-}" ]; }; then _po_val=$1; shift; fi
        fi
        [ -n "$_po_val" ] || die "option $_po_name needs a value" ;;
    esac
    case "$_po_kind" in
      opt) printf -v "$_po_var" '%s' "$_po_val" ;;
      flag) printf -v "$_po_var" '%s' "${_OPT_VALUE[$_po_name]}" ;;
      list) eval "$_po_var+=(\"\$_po_val\")" ;;
      args) eval "$_po_var+=(\"\${_OPT_VALUE[\$_po_name]}\" \"\$_po_val\")" ;;
      flag_args) eval "$_po_var+=(${_OPT_VALUE[$_po_name]})" ;;
      call) "$_po_var" "$_po_val" ;;
      flag_call) "$_po_var" ;;
    esac
  done
}
