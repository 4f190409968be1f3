#!/usr/bin/env bash
# The calibration-statistics checks on the GPU machine, in one call: the gpu-labelled tests of
# the statistics, the analysis and the device (the whole `ctest -L gpu` takes ~7 minutes on its own),
# `bench calib`, then compute-sanitizer memcheck and racecheck over test_stats_gpu (quick sizes).
# Logs and the bench table go to $OUT. Run through scripts/gpu/run.sh (cwd = build-gpu):
#   scripts/gpu/run.sh /work/wt-calib bash /work/wt-calib/.carry/calib/calib_device.sh [bench args…]
# Each step has its own time limit so the call ends inside the device tool's 10 minutes.
set -uo pipefail
out=${OUT:-/tmp/calib-out}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
step() { echo "== $*" | tee -a "$summary"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu \
  --format=csv | tee -a "$summary"

step "ctest -L gpu -R 'test_stats_gpu|test_analysis_gpu|test_gpu_device'"
timeout 200 ctest -L gpu -R 'test_stats_gpu|test_analysis_gpu|test_gpu_device' --output-on-failure >"$out/ctest_gpu.log" 2>&1
echo "ctest rc=$?" | tee -a "$summary"
grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest_gpu.log" | tail -15 | tee -a "$summary"

step "bench calib $*"
timeout 150 bin/quantscope-cli --backend cuda bench calib "$@" >"$out/bench_calib.txt" 2>&1
echo "bench rc=$?" | tee -a "$summary"
cat "$out/bench_calib.txt"

# Hardware counters of the column kernel (two runs in flight, and one) on the activation batch.
if [[ ${NCU:-1} == 1 ]] && command -v ncu >/dev/null; then
  : >"$out/ncu.txt"
  for v in 2 1; do
    step "ncu column kernel (runs in flight: $v)"
    QS_STATS_COL_RUNS=$v timeout 90 ncu --clock-control none -k regex:columnStats --launch-skip 1 \
      --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats --section LaunchStats bin/quantscope-cli --backend cuda bench calib \
      --weight 64x64 --no-extras --reps 1 --warmup 0 >>"$out/ncu.txt" 2>&1
    echo "ncu rc=$?" | tee -a "$summary"
  done
  grep -E "columnStats|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Stall|L2 Hit|Mem Busy|Max Bandwidth" "$out/ncu.txt" | head -60 | tee -a "$summary"
fi

# Tuning variants (env knobs of the kernels; rows of interest only).
if [[ ${VARIANTS:-1} == 1 ]]; then
  for v in "QS_STATS_COL_RUNS=1"; do
    step "variant $v"
    env "$v" timeout 60 bin/quantscope-cli --backend cuda bench calib --no-extras --reps 10 \
      >"$out/variant.txt" 2>/dev/null
    grep -E "copy \(|stats \(ours|histogram 2048 bins, \|x\| \(ours|headline" "$out/variant.txt" | \
      grep -E "outliers|headline" | tee -a "$summary"
  done
  step "bench calib --bins 256 --no-extras"
  timeout 60 bin/quantscope-cli --backend cuda bench calib --bins 256 --no-extras >"$out/variant.txt" 2>&1
  grep -E "histogram|headline" "$out/variant.txt" | tee -a "$summary"
fi

for tool in memcheck racecheck; do
  step "compute-sanitizer $tool"
  QS_TEST_QUICK=1 timeout 110 compute-sanitizer --tool "$tool" --error-exitcode 9 \
    bin/test_stats_gpu >"$out/sanitizer_$tool.log" 2>&1
  echo "$tool rc=$?" | tee -a "$summary"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Totals|FAIL" "$out/sanitizer_$tool.log" | tail -5 | tee -a "$summary"
done
cat "$summary"
