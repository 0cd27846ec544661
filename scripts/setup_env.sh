#!/usr/bin/env bash
# Create or reuse ./.venv with fairseq_local installed (sourced by demo.sh, test.sh and the recipes).
#
# Python 3.11 or 3.12 only (pyproject.toml requires-python); any other version stops here with one
# line.  Settings (environment variables):
#   PYTHON=python3.12                the interpreter the venv is made from (default python3)
#   FAIRSEQ_LOCAL_VENV=DIR           where the venv goes (default .venv in the repository)
#   FAIRSEQ_LOCAL_TORCH=system       keep the interpreter's own torch (a CUDA build, say): the venv
#                                    sees its packages (--system-site-packages) and torch is never
#                                    installed; it must be torch >= 2.1
#   FAIRSEQ_LOCAL_TORCH=cpu          install TORCH_SPEC from PyTorch's CPU wheel index
#   (unset)                          install TORCH_SPEC from pip's usual indexes: on Linux x86-64 PyPI
#                                    serves the CUDA build (several GB), unless pip finds a CPU wheel
#                                    first (a --find-links folder, a local index)
#   TORCH_SPEC=torch==2.13.0         the torch to install when none is importable
#   FAIRSEQ_LOCAL_EXTRAS=test        the extras of fairseq-local to install (e.g. test,tensorboard)
# Install order:
#   1. torch first, so nothing later pulls another build of it,
#   2. numpy and the build tools fairseq-fixed's C++/Cython extensions compile with,
#   3. fairseq-fixed with --no-deps (its torchaudio requirement has no build for current torch and
#      would break `import torchaudio`; setup.py requires the rest of what fairseq imports),
#   4. fairseq_local itself with --no-build-isolation (with build isolation pip would fetch a
#      multi-GB torch into a throwaway build environment just to compile fairseq).
# A stamp file records a hash of the metadata, this script and the settings, so a second call is a
# no-op.
set -euo pipefail

_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FAIRSEQ_LOCAL_VENV:-$_root/.venv}"
PYTHON_BIN="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_MODE="${FAIRSEQ_LOCAL_TORCH:-}"
EXTRAS="${FAIRSEQ_LOCAL_EXTRAS:-test}"
_setup_err() { echo "setup_env.sh: error: $*" >&2; }

case "$TORCH_MODE" in
  ""|system|cpu) ;;
  *) _setup_err "FAIRSEQ_LOCAL_TORCH must be 'system' or 'cpu' (or unset), not '$TORCH_MODE'"; return 2 2>/dev/null || exit 2 ;;
esac

# the interpreter the environment runs on: the venv's when it exists, else the one it is made from
if [ -x "$VENV/bin/python" ]; then _py="$VENV/bin/python"; else _py="$PYTHON_BIN"; fi
if ! _pyver=$("$_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
  _setup_err "cannot run '$_py' (set PYTHON=python3.11 or PYTHON=python3.12)"; return 2 2>/dev/null || exit 2
fi
case "$_pyver" in
  3.11|3.12) ;;
  *)
    if [ "$_py" = "$PYTHON_BIN" ]; then _fix="run with PYTHON=python3.12 (or python3.11)"
    else _fix="remove $VENV and run with PYTHON=python3.12 (or python3.11)"; fi
    _setup_err "Python $_pyver ($_py) is not supported: fairseq-local needs Python 3.11 or 3.12; $_fix"
    return 2 2>/dev/null || exit 2 ;;
esac

_stamp_key() {
  cat "$_root/pyproject.toml" "$_root/setup.py" "$_root/scripts/setup_env.sh" | sha256sum | cut -c1-16
  echo "$TORCH_SPEC $EXTRAS $TORCH_MODE"
}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV${TORCH_MODE:+ (torch: $TORCH_MODE)}" >&2
  if [ "$TORCH_MODE" = system ]; then
    "$PYTHON_BIN" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON_BIN" -m venv "$VENV"
  fi
elif [ "$TORCH_MODE" = system ] && ! grep -qi '^include-system-site-packages *= *true' "$VENV/pyvenv.cfg"; then
  _setup_err "$VENV does not see the system's packages; remove it (or set FAIRSEQ_LOCAL_VENV) to build one with FAIRSEQ_LOCAL_TORCH=system"
  return 2 2>/dev/null || exit 2
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"

_want="$(_stamp_key)"
if [ -f "$VENV/.fairseq_local_stamp" ] && [ "$(cat "$VENV/.fairseq_local_stamp")" = "$_want" ]; then
  return 0 2>/dev/null || exit 0
fi

_install() {  # each step ends the install on failure (also where errexit is off: `source ... && x`)
echo "[setup] installing into $VENV (first run compiles fairseq: a few minutes)" >&2
_log="$VENV/.install.log"
: >"$_log"
pip_q --upgrade pip || return 1

# 1. torch
_torch=$(python -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "$TORCH_MODE" = system ]; then
  [ -n "$_torch" ] || { _setup_err "FAIRSEQ_LOCAL_TORCH=system, but $PYTHON_BIN cannot import torch"; return 1; }
  python -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split("+")[0].split(".")[:2])) < (2, 1))' \
    || { _setup_err "FAIRSEQ_LOCAL_TORCH=system: torch $_torch is older than 2.1"; return 1; }
  echo "[setup] keeping the system's torch $_torch" >&2
elif [ -n "$_torch" ]; then
  echo "[setup] torch $_torch already present" >&2
elif [ "$TORCH_MODE" = cpu ]; then
  pip_q "$TORCH_SPEC" --index-url https://download.pytorch.org/whl/cpu || return 1
else
  pip_q "$TORCH_SPEC" || return 1
fi

# 2. numpy and build tools (numpy<2 on 3.11 only: see pyproject.toml; a numpy that fits is kept)
_numpy="numpy"; [ "$_pyver" = 3.11 ] && _numpy="numpy<2"
python -c "import numpy, sys; sys.exit('$_pyver' == '3.11' and int(numpy.__version__.split('.')[0]) >= 2)" 2>/dev/null \
  || pip_q "$_numpy" || return 1
pip_q cython "setuptools>=64,<81" wheel || return 1

# 3. fairseq-fixed without its dependencies, unless a distribution of the fairseq module is installed
_fairseq_spec=$(python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["tool"]["fairseq-local"]["fairseq"])' \
  "$_root/pyproject.toml") || return 1
if [ -z "${FAIRSEQ_LOCAL_SKIP_FAIRSEQ_DEP:-}" ] && ! python -m pip show -q fairseq >/dev/null 2>&1 \
    && ! python -m pip show -q "${_fairseq_spec%%==*}" >/dev/null 2>&1; then
  pip_q --no-build-isolation --no-deps "$_fairseq_spec" || return 1
fi

# 4. fairseq_local (setup.py adds what fairseq imports)
pip_q --no-build-isolation --check-build-dependencies -e "$_root[$EXTRAS]" || return 1

# an earlier install (or fairseq-fixed's own requirements) may have put an unusable torchaudio here
python - <<'PY' || return 1
import importlib.util, os, subprocess, sys
spec = importlib.util.find_spec("torchaudio")
if spec and os.path.realpath(spec.origin).startswith(os.path.realpath(sys.prefix) + os.sep):
    if subprocess.run([sys.executable, "-c", "import torchaudio"], capture_output=True).returncode:
        print("[setup] removing torchaudio: it cannot be imported with this torch (nothing here uses it)",
              file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "torchaudio"], check=True)
PY
python - <<'PY' || return 1
import sys
import fairseq_local, fairseq
print(f"[setup] fairseq {fairseq.__version__} + fairseq_local {fairseq_local.__version__} ready", file=sys.stderr)
PY
}
pip_q() {  # quiet pip; its full output is shown only when it fails
  echo "[setup] pip install $*" >&2
  if ! python -m pip install --disable-pip-version-check -q "$@" >>"$_log" 2>&1; then
    grep -v "Location 'file:" "$_log" | tail -n 30 >&2
    echo "[setup] error: 'pip install $*' failed (full log: $_log)" >&2
    return 1
  fi
}
if ! _install; then
  _setup_err "installing into $VENV failed (see above); nothing is marked as installed"
  return 1 2>/dev/null || exit 1
fi
echo "$_want" > "$VENV/.fairseq_local_stamp"
