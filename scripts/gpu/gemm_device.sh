#!/usr/bin/env bash
# GEMM work on the device machine, phase by phase (PHASES="tests bench ncu sass tune nopdl
# sanitize"), logs under $OUT. Run from the repository root there after scripts/gpu/stage.sh:
#   QS_SOURCE_ROOT=/work/wt-gemm PHASES="tests bench sanitize" scripts/gpu/gemm_device.sh
cd "$(dirname "$0")/../.." || exit 1
lib=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 /usr/local/cuda*/lib64/libcublasLt.so.13 \
      /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib/libcublasLt.so.13 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "${lib:-/usr/local/cuda/lib64/x}"):${LD_LIBRARY_PATH:-}
# QS_SOURCE_ROOT: the source root stage.sh printed (default: this checkout).
R="scripts/gpu/run.sh ${QS_SOURCE_ROOT:-$(pwd)}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$OUT/smi.txt" 2>&1; cat "$OUT/smi.txt"
for phase in ${PHASES:-tests bench ncu}; do case $phase in
tests)
  timeout ${TEST_T:-240} $R ctest -L gpu --output-on-failure > "$OUT/gpu_tests.log" 2>&1
  echo "tests rc=$?"; grep -E "tests passed|\*\*\*Failed|FAIL!" "$OUT/gpu_tests.log" | head -20; grep -A6 "FAIL!" "$OUT/gpu_tests.log" | head -40 ;;
bench)
  timeout ${BENCH_T:-300} $R quantscope-cli bench gemm ${BENCH_ARGS:-} > "$OUT/bench.txt" 2> "$OUT/bench.err"
  echo "bench rc=$?"; cat "$OUT/bench.txt"; tail -3 "$OUT/bench.err" ;;
ncu)
  for b in ${NCU_BATCH:-1 16}; do
  [[ $b == 128 ]] && NCU_K=wide
  timeout ${NCU_T:-60} $R ncu --clock-control none -k regex:${NCU_K:-skinny} --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    quantscope-cli bench gemm --shapes ${NCU_SHAPE:-8192x8192} --batch $b --formats ${NCU_FMT:-w4a16-g128} --no-cublaslt --repeats 3 > "$OUT/ncu_m$b.txt" 2>&1
  echo "ncu m=$b rc=$?"; grep -E "Block Limit Registers|Theoretical Occupancy" "$OUT/ncu_m$b.txt" | head -2; grep -E "^\s+(Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Grid Size|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued)" "$OUT/ncu_m$b.txt" | head -12
  done ;;
sass)
  cuobjdump -sass build-gpu/bin/quantscope-cli 2>/dev/null | awk '/Function : .*skinnyKernel/{p=1} /Function : .*wideKernel/{p=0} p' > "$OUT/skinny.sass"
  echo "sass lines $(wc -l < $OUT/skinny.sass)" ;;
tune)
  for b in ${TUNE_B:-1 2 3}; do
  QS_GEMM_SKINNY_BLOCKS_PER_SM=$b timeout 60 $R quantscope-cli bench gemm --formats ${TUNE_FMT:-w4a16-g128,w8a16-int8} --batch 1,16 --no-cublaslt > "$OUT/tune_$b.txt" 2>&1
  echo "== blocks/SM target $b"; grep -E "w4a16|w8a16|headline" "$OUT/tune_$b.txt"
  done ;;
nopdl)
  QS_GEMM_PDL=0 timeout 90 $R quantscope-cli bench gemm --formats w4a16-g128,w8a16-int8,w8a16-fp8,w8a8-int8,w8a8-fp8 --batch 1,16 --no-cublaslt > "$OUT/bench_nopdl.txt" 2>&1
  echo "== without PDL"; grep -E "skinny|headline" "$OUT/bench_nopdl.txt" ;;
sanitize)
  for tool in memcheck racecheck; do
  QS_GEMM_TEST_QUICK=1 timeout ${SAN_T:-200} $R compute-sanitizer --tool $tool --error-exitcode 9 bin/test_gemm_gpu > "$OUT/san_$tool.log" 2>&1
  echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|Totals|FAIL" "$OUT/san_$tool.log" | head -5
  done ;;
esac; done
