#!/usr/bin/env bash
# Create or reuse ./.venv with fairseq_local installed (sourced by demo.sh, test.sh and the recipes).
#
# Install order matters on Python >= 3.11:
#   1. torch (pinned; installing it first stops pip from pulling a CUDA build later),
#   2. numpy<2 and the build tools that fairseq-fixed's C++/Cython extensions need,
#   3. fairseq_local itself with --no-build-isolation (otherwise pip would fetch a
#      multi-GB torch into an isolated build environment just to compile fairseq).
# A stamp file records a hash of setup.py and this script, so a second call is a no-op.
set -euo pipefail

_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FAIRSEQ_LOCAL_VENV:-$_root/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
EXTRAS="${FAIRSEQ_LOCAL_EXTRAS:-test}"

_stamp_key() {
  cat "$_root/setup.py" "$_root/scripts/setup_env.sh" | sha256sum | cut -c1-16
  echo "$TORCH_SPEC $EXTRAS"
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV" >&2
  "$PYTHON_BIN" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

_want="$(_stamp_key)"
if [ -f "$VENV/.fairseq_local_stamp" ] && [ "$(cat "$VENV/.fairseq_local_stamp")" = "$_want" ]; then
  return 0 2>/dev/null || exit 0
fi

echo "[setup] installing into $VENV (first run compiles fairseq: a few minutes)" >&2
_log="$VENV/.install.log"
pip_q() {  # quiet pip; its full output is shown only when it fails
  echo "[setup] pip install $*" >&2
  if ! python -m pip install --disable-pip-version-check -q "$@" >>"$_log" 2>&1; then
    grep -v "Location 'file:" "$_log" | tail -n 30 >&2
    echo "[setup] error: 'pip install $*' failed (full log: $_log)" >&2
    return 1
  fi
}
: >"$_log"
pip_q --upgrade pip
if python -c "import torch" 2>/dev/null; then
  echo "[setup] torch $(python -c 'import torch; print(torch.__version__)') already present" >&2
else
  pip_q "$TORCH_SPEC"
fi
pip_q "numpy<2" cython "setuptools<81" wheel
pip_q --no-build-isolation -e "$_root[$EXTRAS]"
python - <<'PY'
import fairseq_local, fairseq
print(f"[setup] fairseq {fairseq.__version__} + fairseq_local {fairseq_local.__version__} ready", flush=True)
PY
echo "$_want" > "$VENV/.fairseq_local_stamp"
