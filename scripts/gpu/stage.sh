#!/usr/bin/env bash
# Builds the CLI and the test programs for a GPU machine without Qt Widgets (and without Qt at
# all: the Qt Core/Test shared libraries and their dependencies are staged next to the
# binaries), and stages what a run there needs into .carry/ (git-ignored):
#   .carry/build-gpu/  binaries + ctest files (no object files)
#   .carry/libs/       shared libraries the GPU machine lacks
# On the GPU machine, scripts/gpu/run.sh puts them back where ctest expects them.
# Usage: scripts/gpu/stage.sh [extra cmake args]
# QS_CARRY_DIR: where to stage (default: <this checkout>/.carry). The device tool sends only the
# main checkout, so a build from another worktree stages into /work/main/.carry and runs with
# SOURCE_ROOT = that worktree (run.sh recreates the path there).
# QS_STAGE_LIBS=0: skip the shared libraries (quantscope-cli alone needs none of them).
# QS_STAGE_PACK=1: also write .carry/pack.tar.xz (bin/ + libs/), what final_device.sh and the
# other device scripts unpack: quantscope-cli and the GPU test programs, stripped.
# QS_STAGE_FROM=DIR: stage an existing CUDA-enabled build (e.g. the everyday build/, when it
# found nvcc) instead of configuring build-gpu; only its non-GUI programs travel. The ctest
# files then name DIR, so run.sh is given that build's folder name (QS_BUILD_NAME).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [[ -n ${QS_STAGE_FROM:-} ]]; then
  build=$(cd "$QS_STAGE_FROM" && pwd)
else
  build=$root/build-gpu
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DQS_GUI=OFF -DQS_CUDA=ON \
        -DQS_PYTHON=python3 "$@" >/dev/null
  cmake --build "$build" -j "$(nproc)"
fi

stage=${QS_CARRY_DIR:-$root/.carry}
rm -rf "$stage/build-gpu" "$stage/libs"
mkdir -p "$stage/build-gpu" "$stage/libs"
# ctest files and binaries only
(cd "$build" && find . \( -name '*.cmake' -o -name 'CTestTestfile.cmake' \) -not -path '*/CMakeFiles/*' \
   -print0 | xargs -0 -I{} cp --parents {} "$stage/build-gpu/")
mkdir -p "$stage/build-gpu/bin"
for exe in "$build"/bin/*; do
  # GUI programs stay behind (no Qt Widgets there): anything linking libQt6Widgets.
  ldd "$exe" 2>/dev/null | grep -q libQt6Widgets && continue
  cp "$exe" "$stage/build-gpu/bin/"
done
strip --strip-debug "$stage"/build-gpu/bin/* 2>/dev/null || true

# (cuBLAS, cuBLASLt, cuSOLVER and what they pull in come from the CUDA toolkit there:
# /usr/local/cuda/lib64 is on run.sh's path, so nothing under /usr/local/cuda travels.)
# Shared libraries the stock Ubuntu 24.04 CUDA image lacks (Qt Core/Test and what they pull
# in: ICU 72, glib, double-conversion, libb2, pcre2; HDF5 and its compression libraries):
# everything ldd resolves except the C/C++ runtime, which the newer system there provides.
skip='^/usr/local/cuda|linux-vdso|ld-linux|/libcublas|/libc\.so|/libm\.so|/libstdc\+\+|/libgcc_s|/libpthread|/libdl\.so|/librt\.so|/libcuda\.so'
for exe in "$stage"/build-gpu/bin/*; do
  ldd "$exe" | awk '$3 ~ /^\// {print $3}' | grep -Ev "$skip" || true
done | sort -u | while read -r lib; do
  [[ ${QS_STAGE_LIBS:-1} == 1 ]] && cp -L "$lib" "$stage/libs/"
done
# The programs share most of their device code, so a dictionary larger than one program finds it:
# the CLI and all eleven GPU test programs pack into ~28 MB (the 64 MiB a device call carries),
# where xz's default dictionary gave ~25 MB for the CLI alone (session 43).
if [[ ${QS_STAGE_PACK:-0} == 1 ]]; then
  pack=$(mktemp -d)
  mkdir -p "$pack/bin"
  for exe in "$stage"/build-gpu/bin/{quantscope-cli,test_gpu_device,test_*_gpu}; do
    if [[ -e $exe ]]; then cp "$exe" "$pack/bin/"; fi
  done
  strip "$pack"/bin/* 2>/dev/null || true
  cp -r "$stage/libs" "$pack/libs"
  # (written beside, then renamed: a failed run leaves no half archive behind)
  tar -C "$pack" -cf - bin libs | xz --lzma2=preset=9,dict=384MiB -T1 >"$stage/pack.tar.xz.part" &&
    mv "$stage/pack.tar.xz.part" "$stage/pack.tar.xz"
  rm -rf "$pack"
  ls -l "$stage/pack.tar.xz"
fi
du -sh "$stage/build-gpu" "$stage/libs"
echo "source root recorded in the ctest files: $root (build folder: $(basename "$build"))"
