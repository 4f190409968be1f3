#!/usr/bin/env bash
# Issue 25's kernel tables in one device call: our kernels (`bench gemm`), torch's built-in peers
# (scripts/gpu/peers.py) and llama.cpp's CUDA MUL_MAT kernels (`test-backend-ops perf`, built here
# first from the tree packed by scripts/gpu/pack_llamacpp_src.sh), one after the other on the same
# machine with nothing else running; then ours on llama.cpp's protocol (one weight, no rotation:
# `bench gemm --copies 1`) on the shape its perf list holds, 4096 outputs x 14336 inputs.
# Binaries as .carry/pack.tar.xz (bin/ + libs/, docs/reliability.md). Logs under $OUT.
# Usage on the device machine, in the repository root:
#   bash scripts/gpu/peers_device.sh LLAMACPP_SRC.tar.xz [BATCHES]
# BATCHES: bench gemm's and peers.py's m values (default 1,16,128,512,4096).
set -uo pipefail
src=${1:?usage: peers_device.sh LLAMACPP_SRC.tar.xz [BATCHES]}
batches=${2:-1,16,128,512,4096}
out=${OUT:-/tmp/peers-out}
mkdir -p "$out" /tmp/pack
[[ -x /tmp/pack/bin/quantscope-cli ]] || tar -C /tmp/pack -xJf .carry/pack.tar.xz
export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cli=/tmp/pack/bin/quantscope-cli
summary=$out/peers_summary.txt
log() { echo "$*" | tee -a "$summary"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit --format=csv,noheader | tee -a "$summary"

step() {  # name, command…: runs it with its output in $out/name.txt, logs rc and seconds
  local name=$1 start=$SECONDS; shift
  "$@" >"$out/$name.txt" 2>&1
  log "$name rc=$? $((SECONDS - start)) s"
}
# 1. llama.cpp's test-backend-ops (before any timing: the build loads every core)
step llamacpp_build env LLAMACPP_BUILD_ONLY=1 LLAMACPP_TARGETS=test-backend-ops \
  LLAMACPP_CMAKE_ARGS=-DGGML_CUDA_FA=OFF bash scripts/gpu/llamacpp_peer.sh "$src" "${LLAMACPP_BUILD_S:-420}"
# 2. ours, then torch's, then llama.cpp's
step bench_gemm timeout 240 "$cli" --backend cuda bench gemm --batch "$batches"
step peers timeout 200 python3 scripts/gpu/peers.py --batch "$batches"
step llamacpp_perf env LLAMACPP_TYPES="f16|q4_0|q8_0|q4_K|q6_K" LLAMACPP_TOKENS="1|8|512" \
  bash scripts/gpu/llamacpp_peer.sh "$src"
# 3. ours on llama.cpp's protocol
step bench_gemm_copies1 timeout 120 "$cli" --backend cuda bench gemm --copies 1 --shapes 4096x14336 --batch 1,8,512 \
  --formats int4-g128-sym,int8-ch-sym,fp8e4m3-ch --no-cublaslt
grep -E "headline" "$out/bench_gemm.txt" | tee -a "$summary"
