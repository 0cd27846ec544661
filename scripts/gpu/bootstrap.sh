#!/usr/bin/env bash
# Install fairseq + fairseq_local offline on a box that has its own torch (a GPU box), in minutes.
#
# usage: scripts/gpu/bootstrap.sh TARGET [--wheels DIR] [--python PY] [--no-check]
#   TARGET        folder to install into (e.g. /tmp/fl); then: source TARGET/env.sh
#   --wheels DIR  the wheelhouse from scripts/gpu/wheelhouse.sh (default: gpu_kit/wheels)
#   --python PY   the interpreter that has torch (default: $PYTHON or python3)
#   --no-check    skip the import and model-build check
#
# Nothing is downloaded and nothing is compiled: pip runs with --no-index from the wheelhouse
# (configuration files and PIP_* index/link variables are ignored), each wheel whose distribution
# the interpreter already has is skipped (the box's own sacrebleu, sentencepiece... stay), and the
# rest is installed with --no-deps into TARGET/site (a --target folder, not a venv: a venv made from
# the box's python, itself a venv, would not see the box's torch).  fairseq comes as a prebuilt
# wheel whose extensions do not link torch (see wheelhouse.sh), so no extension is built, CPU or
# CUDA: fairseq falls back to Python for --no-repeat-ngram-size without ngram_repeat_block_cuda,
# and libnat/libbase serve only models we never use.  The plugin is put on PYTHONPATH (the
# checkout itself, as an editable install would).  TARGET/env.sh sets PYTHONPATH and PATH (the
# fairseq-* commands); the check (scripts/gpu/check_install.py) imports fairseq and fairseq_local,
# reports which fairseq extensions load, and builds and trains one step of one registered
# architecture on cuda when there is one (cpu otherwise).  TARGET/site is written as
# TARGET/site.tmp and moved into place when complete; a second run with the same wheels reuses it.
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
positional target TARGET; opt --wheels wheels "$REPO_ROOT/gpu_kit/wheels"; opt --python PY "${PYTHON:-python3}"
flag --no-check check 0 1
parse_options "$@"
[ -n "$target" ] || die "usage: bootstrap.sh TARGET [--wheels DIR] [--python PY] (see --help)"
need_dir "$wheels" "--wheels"
need_file "$wheels/MANIFEST.txt" "wheelhouse manifest (run scripts/gpu/wheelhouse.sh)"
command -v "$PY" >/dev/null || die "--python $PY: not found"
"$PY" -c "import torch" 2>/dev/null || die "--python $PY: cannot import torch (bootstrap installs on top of the box's own torch)"
while read -r w; do need_file "$wheels/$w" "wheel listed in $wheels/MANIFEST.txt"; done <"$wheels/MANIFEST.txt"
mkdir -p "$target"
target="$(cd "$target" && pwd)"
wheels="$(cd "$wheels" && pwd)"
site="$target/site"

# pip, offline, blind to this machine's configuration (extra indexes, find-links, constraints)
offline_pip() {
  env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL -u PIP_FIND_LINKS -u PIP_CONSTRAINT -u PIP_REQUIRE_VIRTUALENV \
    PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
    "$PY" -m pip "$@"
}

stamp_key="$(cd "$wheels" && sha256sum MANIFEST.txt | cut -c1-16) $("$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__)')"
if [ -f "$site/.stamp" ] && [ "$(cat "$site/.stamp")" = "$stamp_key" ]; then
  say "reusing $site"
else
  # which wheels the interpreter lacks (distribution names compared as PEP 503 normalises them)
  mapfile -t todo < <("$PY" - "$wheels" <<'EOF'
import os, re, sys
from importlib import metadata

have = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in metadata.distributions() if d.metadata["Name"]}
folder = sys.argv[1]
for line in open(os.path.join(folder, "MANIFEST.txt")):
    whl = line.strip()
    name = re.sub(r"[-_.]+", "-", whl.split("-")[0]).lower()
    if name not in have:
        print(os.path.join(folder, whl))
EOF
)
  say "installing ${#todo[@]} of $(wc -l <"$wheels/MANIFEST.txt") wheels into $site (the others are installed already)"
  rm -rf "$site.tmp"
  mkdir -p "$site.tmp"
  log="$target/pip.log"
  if [ ${#todo[@]} -gt 0 ] && ! offline_pip install --no-index --no-deps --no-compile --no-cache-dir \
      --target "$site.tmp" "${todo[@]}" >"$log" 2>&1; then
    tail -n 25 "$log" >&2
    die "offline pip install failed (log: $log)"
  fi
  echo "$stamp_key" >"$site.tmp/.stamp"
  rm -rf "$site"
  mv "$site.tmp" "$site"
fi
# `python` and `python3` mean the box's interpreter for our shell scripts (generate.sh, score.sh...)
mkdir -p "$site/bin"
# (wrappers, not links: a link to a venv's python loses the venv, and with it the box's torch)
pyreal="$(cd "$(dirname "$(command -v "$PY")")" && pwd)/$(basename "$(command -v "$PY")")"
for name in python python3; do
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$pyreal" >"$site/bin/$name"
  chmod +x "$site/bin/$name"
done
cat >"$target/env.sh.tmp" <<EOF
# source this file: fairseq + fairseq_local on top of $PY
export PYTHONPATH="$site:$REPO_ROOT\${PYTHONPATH:+:\$PYTHONPATH}"
export PATH="$site/bin:\$PATH"
export FAIRSEQ_LOCAL_PYTHON="$PY"
EOF
mv "$target/env.sh.tmp" "$target/env.sh"
if [ "$check" = 1 ]; then
  # shellcheck disable=SC1091
  source "$target/env.sh"
  "$PY" "$REPO_ROOT/scripts/gpu/check_install.py" --json "$target/check.json"
fi
say "ready: source $target/env.sh"
