#!/usr/bin/env bash
# Builds llama.cpp's CUDA tools (llama-bench, llama-quantize; sm_90a) on this machine, which has
# nvcc but no GPU, from the tree scripts/gpu/pack_llamacpp_src.sh packed, and packs the binaries
# with their shared libraries for the device machine: llamacpp_e2e.sh then skips its build step
# (275 s of device time) when LLAMACPP_BIN_TAR names the file. On 2 cores the build takes about
# an hour; the build tree is kept in BUILD_DIR for the next run.
# Usage: scripts/gpu/pack_llamacpp_cuda.sh SRC.tar.xz OUT.tar.xz   (BUILD_DIR, default /tmp/llcuda)
set -euo pipefail
src_tar=${1:?usage: pack_llamacpp_cuda.sh SRC.tar.xz OUT.tar.xz}
out=${2:?usage: pack_llamacpp_cuda.sh SRC.tar.xz OUT.tar.xz}
work=${BUILD_DIR:-/tmp/llcuda}
mkdir -p "$work/src"
[[ -f $work/src/CMakeLists.txt ]] || tar -C "$work/src" -xJf "$src_tar"
# The device machine's CPU is x86-64 with AVX2 (llama-quantize runs there): no -march=native here.
cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DGGML_CCACHE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF \
  -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON >/dev/null
# No driver here: the linker resolves libcuda.so.1 (needed by libggml-cuda) with the toolkit's stub.
stub=$(mktemp -d)
ln -s "${CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so" "$stub/libcuda.so.1"
LD_LIBRARY_PATH=$stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} cmake --build "$work/build" -j "$(nproc)" --target llama-bench llama-quantize
rm -rf "$stub"
stage=$(mktemp -d)
mkdir -p "$stage/bin"
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-quantize" "$stage/bin/"
cp -P "$work/build/bin/"lib*.so* "$stage/bin/"
strip --strip-unneeded "$stage/bin/"* 2>/dev/null || true
tar -C "$stage" -cJf "$out" bin
rm -rf "$stage"
ls -l "$out"
