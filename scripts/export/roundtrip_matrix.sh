#!/usr/bin/env bash
# The round-trip matrix of docs/export.md (scripts/export/roundtrip_matrix.py does the work).
#   roundtrip_matrix.sh [BUILD_DIR] [WORKDIR]     Markdown table on stdout
# Needs: quantscope-cli in BUILD_DIR/bin (default build); llama.cpp's CPU tools (QS_LLAMACPP_BIN,
# else the cache of scripts/llamacpp/build_llamacpp.sh); a Python with transformers, torch and
# compressed-tensors (QS_HF_PYTHON, default /work/venv-hf/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=${2:-$(mktemp -d)}
cache=${QS_CACHE:-$HOME/.cache/quantscope}
bin=${QS_LLAMACPP_BIN:-$cache/llamacpp/11434.0.0/build/bin}
hfpy=${QS_HF_PYTHON:-/work/venv-hf/bin/python}
[[ -x $build/bin/quantscope-cli ]] || { echo "no $build/bin/quantscope-cli (build it first)" >&2; exit 2; }
[[ -x $bin/llama-perplexity ]] || { echo "no llama.cpp tools in $bin (scripts/llamacpp/build_llamacpp.sh)" >&2; exit 2; }
"$hfpy" -c 'import transformers, torch, compressed_tensors' ||
  { echo "$hfpy lacks transformers / torch / compressed-tensors (set QS_HF_PYTHON)" >&2; exit 2; }
exec "$hfpy" "$root/scripts/export/roundtrip_matrix.py" "$build/bin/quantscope-cli" "$bin" "$work"
