#!/usr/bin/env bash
# Download (where PyPI is reachable) every wheel a GPU box needs on top of its own torch.
#
# usage: scripts/gpu/wheelhouse.sh [--dest DIR] [--python-version 3.12] [--max-mib N]
#   --dest DIR            output folder (default: gpu_kit/wheels, ignored by git; carried to the box)
#   --python-version V    the box's CPython (default 3.12); wheels are for manylinux x86-64
#   --max-mib N           fail when the wheels take more than N MiB (default 40: the device tool
#                         carries 64 MiB in all, with the repository and gpu_kit/data)
#
# The box (see docs/gpu.md) has Python 3.12, a CUDA torch, numpy 2.x, scipy, scikit-learn and
# matplotlib, and no network.  We ship the rest: fairseq-fixed 0.12.3.1 (PyPI's own cp312 manylinux
# wheel: its Cython/C++ extensions libbleu, data_utils_fast and token_block_utils_fast do not link
# torch and are built against numpy 2's C API, so nothing is compiled on the box and numpy 2 stays;
# its torch extensions libnat/libbase/alignment_train_cpu_binding serve only fairseq's NAT,
# BASE-layer and alignment-training code, which we never import), hydra-core, omegaconf, the antlr4
# runtime, bitarray, sacrebleu, sacremoses, subword-nmt, rouge-score, sentencepiece, tensorboardX and
# their dependencies.  Never shipped: torch, torchaudio, numpy, scipy, scikit-learn, matplotlib
# (the box has them; fairseq's torchaudio requirement is never imported by us).  Left out for size:
# the Chinese segmenters (jieba, thulac, snownlp, ~70 MiB of dictionaries): lattices are built here
# by scripts/gpu/prepare_data.sh.  Pure-Python packages with no wheel on PyPI (antlr4 4.9.3,
# rouge-score) are built into py3-none-any wheels here.  The folder is written as DEST.tmp and
# moved into place when complete; MANIFEST.txt lists its files.
set -euo pipefail
source "$(dirname "$0")/../lib/common.sh"
opt --dest dest "$REPO_ROOT/gpu_kit/wheels"; opt --python-version pyver 3.12; opt --max-mib max_mib 40
parse_options "$@"
[[ "$pyver" =~ ^3\.[0-9]+$ ]] || die "--python-version must look like 3.12, not '$pyver'"
[[ "$max_mib" =~ ^[1-9][0-9]*$ ]] || die "--max-mib must be a positive integer, not '$max_mib'"
abi="cp${pyver/./}"
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "no '$PY' to run pip with (set PYTHON=...)"

# the box's Python and every wheel that travels: binary wheels for cp3XX manylinux x86-64 only
PLATFORM=(--only-binary=:all: --python-version "$pyver" --implementation cp --abi "$abi" --abi abi3 --abi none
          --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_28_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
# pure-Python packages PyPI has only as sdists, built into py3-none-any wheels here
PURE_SDISTS=(antlr4-python3-runtime==4.9.3 rouge-score==0.1.2)
# what fairseq and fairseq_local import (fairseq itself comes with --no-deps: see above)
FAIRSEQ=fairseq-fixed==0.12.3.1
REQUIREMENTS=(hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 bitarray regex tqdm packaging
              PyYAML "sacrebleu>=2.0" sacremoses "subword-nmt>=0.3.8" "rouge-score>=0.1.2" absl-py nltk six
              "sentencepiece>=0.1.99" tensorboardX)
# distributions the box already has (or that we never import): removed after resolution
NOT_SHIPPED='^(torch|torchaudio|torchvision|triton|numpy|scipy|scikit_learn|matplotlib|pillow|contourpy|fonttools|kiwisolver|nvidia_.*|cuda_.*|sympy|networkx|mpmath|jinja2|markupsafe|filelock|fsspec|setuptools)$'

tmp="$dest.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
pipq() { "$PY" -m pip --disable-pip-version-check "$@" >>"$tmp/.log" 2>&1 || { tail -n 25 "$tmp/.log" >&2; die "pip $* failed (log: $tmp/.log)"; }; }
say "building pure-Python wheels: ${PURE_SDISTS[*]}"
pipq wheel --no-deps -q -w "$tmp" "${PURE_SDISTS[@]}"
say "downloading $FAIRSEQ (cp$pyver manylinux wheel, no dependencies)"
pipq download -q --no-deps "${PLATFORM[@]}" -d "$tmp" "$FAIRSEQ"
say "downloading the rest and its dependencies"
pipq download -q "${PLATFORM[@]}" --find-links "$tmp" -d "$tmp" "${REQUIREMENTS[@]}"

# drop what the box has; keep one version of each distribution
for f in "$tmp"/*; do
  case "$f" in *.whl) ;; *) continue ;; esac
  name=$(basename "$f" | cut -d- -f1 | tr 'A-Z.-' 'a-z__')
  if [[ "$name" =~ $NOT_SHIPPED ]]; then rm -f "$f"; fi
done
dups=$(ls "$tmp"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z.-' 'a-z__' | sort | uniq -d)
[ -z "$dups" ] || die "two versions of: $dups"
bad=$(ls "$tmp" | grep -v -e '\.whl$' -e '^\.log$' || true)
[ -z "$bad" ] || die "not a wheel: $bad (every package must travel as a wheel)"
(cd "$tmp" && ls *.whl) >"$tmp/MANIFEST.txt"
rm -f "$tmp/.log"
mib=$(du -sm "$tmp" | cut -f1)
[ "$mib" -le "$max_mib" ] || die "the wheels take $mib MiB, more than --max-mib $max_mib"
rm -rf "$dest"
mv "$tmp" "$dest"
say "$(wc -l <"$dest/MANIFEST.txt") wheels, $mib MiB in $dest"
