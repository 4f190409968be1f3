#!/usr/bin/env bash
# On the device machine: builds llama.cpp's CUDA backend (test-backend-ops, llama-bench) from the
# tree packed by scripts/gpu/pack_llamacpp_src.sh (about 5 minutes on 16 cores, sm_90a only), then
# times its MUL_MAT kernels with `test-backend-ops perf` — the peer beside `bench gemm` and
# scripts/gpu/peers.py in the same call. Writes $OUT/llamacpp_build.log and
# $OUT/llamacpp_mul_mat.txt; prints its MUL_MAT rows.
# Usage: bash scripts/gpu/llamacpp_peer.sh SRC.tar.xz [BUILD_SECONDS]
# LLAMACPP_TARGETS (default "test-backend-ops llama-bench") and LLAMACPP_CMAKE_ARGS (added to the
# configure line; e.g. -DGGML_CUDA_FA=OFF, which empties the ~80 flash-attention template
# instances: MUL_MAT alone does not need them) make the build shorter; LLAMACPP_BUILD_ONLY=1 stops
# after the build (a later call times it).
set -uo pipefail
tarball=${1:?usage: llamacpp_peer.sh SRC.tar.xz [BUILD_SECONDS]}
limit=${2:-360}
out=${OUT:-/tmp/llamacpp-out}
work=/tmp/llamacpp-cuda
mkdir -p "$out" "$work/src"
if [[ ! -x $work/build/bin/test-backend-ops ]]; then
  tar -C "$work/src" -xJf "$tarball"
  cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DGGML_CCACHE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a ${LLAMACPP_CMAKE_ARGS:-} >"$out/llamacpp_build.log" 2>&1 \
    || { tail -20 "$out/llamacpp_build.log"; exit 1; }
  start=$(date +%s)
  # shellcheck disable=SC2086 # a list of targets
  timeout "$limit" cmake --build "$work/build" -j "$(nproc)" --target ${LLAMACPP_TARGETS:-test-backend-ops llama-bench} \
    >>"$out/llamacpp_build.log" 2>&1 || { echo "llama.cpp build failed or ran past $limit s"; tail -5 "$out/llamacpp_build.log"; exit 1; }
  echo "llama.cpp CUDA build: $(( $(date +%s) - start )) s"
fi
[[ ${LLAMACPP_BUILD_ONLY:-0} == 1 ]] && exit 0
# Its perf table for our shapes (n outputs × k inputs; ggml calls the outputs m and the tokens n)
# and tokens (LLAMACPP_SHAPES "NxK …", LLAMACPP_TOKENS as a regex alternation), for F16 (the
# baseline) and the weight types in LLAMACPP_TYPES (default: our formats' nearest kin, and the
# K-quants our ggml-gemv kernel runs).
types=${LLAMACPP_TYPES:-f16|q4_0|q8_0|q4_K|q6_K}
tokens=${LLAMACPP_TOKENS:-1|8|512}
: >"$out/llamacpp_mul_mat.txt"
for shape in ${LLAMACPP_SHAPES:-4096x14336}; do
  "$work/build/bin/test-backend-ops" perf -o MUL_MAT -b CUDA0 \
    -p "type_a=($types),type_b=f32,m=${shape%x*},n=($tokens),k=${shape#*x}," >>"$out/llamacpp_mul_mat.txt" 2>&1
  echo "test-backend-ops perf $shape rc=$?"
done
grep -E 'MUL_MAT' "$out/llamacpp_mul_mat.txt" | head -80
