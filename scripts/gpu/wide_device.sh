#!/usr/bin/env bash
# The wide path's fallback (A16, m > 16: wide-mma or dequant+cublas, picked by timing) on the
# device machine, in one call: the gpu-labelled GEMM tests, `bench gemm` with m = 512 added, and
# the torch peers (scripts/gpu/peers.py) on the same shapes and m values. Logs under $OUT.
#
# Binaries: a CUDA build (e.g. build-gpu, -DCMAKE_CUDA_ARCHITECTURES=90a) staged by
#   QS_STAGE_FROM=build-gpu QS_CARRY_DIR=<main checkout>/.carry-kern scripts/gpu/stage.sh
# (then packed: tar -cf - build-gpu libs | xz > .carry-kern/pack.tar.xz), plus this script and
# peers.py copied to .carry-kern/scripts/ (the device tool sends the main checkout and the
# carried folder only).
# Usage, in the repository root there:
#   bash .carry-kern/scripts/wide_device.sh SOURCE_ROOT ["tests bench slices peers sanitize repeat"]
# SOURCE_ROOT: the source folder recorded in the ctest files (stage.sh prints it).
set -uo pipefail
src=$1
phases=${2:-tests bench peers}
here=$(pwd)
carry=$here/${QS_CARRY:-.carry-kern}
out=${OUT:-/tmp/wide-out}
mkdir -p "$out"
# The staged folders may travel packed (build-gpu/ + libs/ as pack.tar.xz, to stay under the
# device tool's size limit).
if [[ -f $carry/pack.tar.xz && ! -d $carry/build-gpu ]]; then tar -C "$carry" -xJf "$carry/pack.tar.xz"; fi
if [[ "$here" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")"; ln -s "$here" "$src"; fi
ln -sfn "$carry/build-gpu" "$src/build-gpu"
export LD_LIBRARY_PATH="$carry/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
B=$carry/build-gpu/bin
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
SHAPES=${SHAPES:-8192x8192,4096x4096,14336x4096,4096x14336}
BATCH=${BATCH:-1,16,128,512,4096}
for phase in $phases; do
  start=$(date +%s)
  case $phase in
  tests)
    (cd "$src/build-gpu" && timeout "${TESTS_S:-170}" ctest -L gpu -R '^test_gemm' --output-on-failure) > "$out/ctest.log" 2>&1
    echo "ctest gemm (gpu) rc=$? $(( $(date +%s) - start )) s"
    grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)|dequantizations compared|m=512:" "$out/ctest.log" | head -30 ;;
  bench)
    timeout "${BENCH_S:-170}" "$B/quantscope-cli" bench gemm --shapes "$SHAPES" --batch "$BATCH" > "$out/bench.txt" 2> "$out/bench.err"
    echo "bench gemm rc=$? $(( $(date +%s) - start )) s"
    grep -E "cublas-fp16|int4-|int8-|fp8e4m3-" "$out/bench.txt" | awk '$2 >= 128' | cut -c1-200 ;;
  slices)  # the sliced path's slice size, W4A16 g128 alone (the main bench uses a third of the L2)
    for kb in ${SLICES_KB:-8192 32768}; do
      QS_GEMM_DEQUANT_SLICE_KB=$kb timeout 60 "$B/quantscope-cli" bench gemm --shapes "$SHAPES" --batch 128,512,4096 \
        --formats int4-g128-sym --no-cublaslt > "$out/bench_slice$kb.txt" 2>&1
      echo "slice ${kb} KB rc=$?"; grep -E "int4-g128-sym" "$out/bench_slice$kb.txt" | cut -c1-200
    done ;;
  sanitize)  # the dequant kernel and both wide paths under memcheck and racecheck
    for tool in memcheck racecheck; do
      timeout "${SAN_S:-90}" compute-sanitizer --tool $tool --error-exitcode 9 "$B/test_gemm_dequant_gpu" \
        dequantIsBitExact forcedWidePaths > "$out/san_$tool.log" 2>&1
      echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Totals" "$out/san_$tool.log" | head -3
    done ;;
  repeat)  # the same binary again on W4A16 g128, m >= 128: run-to-run spread
    timeout 90 "$B/quantscope-cli" bench gemm --shapes "$SHAPES" --batch 128,512,4096 --formats int4-g128-sym --no-cublaslt \
      > "$out/bench_repeat.txt" 2>&1
    echo "repeat rc=$?"; grep -E "int4-g128-sym|cublas-fp16" "$out/bench_repeat.txt" | cut -c1-120 ;;
  peers)
    PYTHONUNBUFFERED=1 timeout "${PEERS_S:-90}" python3 "$carry/scripts/peers.py" --shapes "$SHAPES" --batch "$BATCH" \
      --json "$out/peers.json" > "$out/peers.txt" 2>&1
    echo "peers rc=$? $(( $(date +%s) - start )) s"
    grep -vE "^Method" "$out/peers.txt" | head -120 ;;
  esac
done
