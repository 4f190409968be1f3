#!/usr/bin/env bash
# GEMM work on the device machine, phase by phase, logs under $OUT. Binaries as
# .carry/pack.tar.xz (bin/ + libs/, see docs/reliability.md). Usage, in the repository root there:
#   bash scripts/gpu/gemm_device.sh "tests bench tune ncu sass full sanitize"
# tests: test_gemm_gpu (both skinny weight paths), and the A16 sweeps with 2 ring slots;
# bench: `bench gemm` at m = 1, 16 for each skinny variant (the environment switches of
# kernels/cuda/gemm/gemm_ops_cuda.cpp and gemm_skinny.cu); tune: blocks per SM and ring slots;
# ncu: profiles (NCU_BATCH, default "1 16"; 128 profiles the wide kernel); sass: the skinny SASS;
# full: the docs/benchmarks.md table (`bench gemm` defaults, and without PDL);
# sanitize: memcheck, racecheck, synccheck over test_gemm_gpu's A16 sweeps on the rings.
set -uo pipefail
out=${OUT:-/tmp/tune-out}
mkdir -p "$out" /tmp/pack
rm -rf /tmp/pack/bin /tmp/pack/libs; tar -C /tmp/pack -xJf .carry/pack.tar.xz
export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/pack/bin

bench() {  # name, env…
  local name=$1; shift
  env "$@" timeout 120 $B/quantscope-cli bench gemm --batch ${BATCH:-1,16} --formats "${FMTS:-int4-g128-sym,int8-ch-sym,fp8e4m3-ch}" --no-cublaslt \
    > "$out/bench_$name.txt" 2>&1
  echo "== $name ($*)"; grep -E "int4-|int8-|fp8e4m3-|headline" "$out/bench_$name.txt" | awk '{print $1, $2, $3, $4, $5, $8, $9}'
}
for phase in ${1:-tests full}; do case $phase in
tests)
  s=$(date +%s); timeout 330 $B/test_gemm_gpu > "$out/test_default.log" 2>&1; echo "test default rc=$? $(grep Totals "$out/test_default.log") $(( $(date +%s) - s )) s"
  grep -E "^FAIL|Loc:" -A3 "$out/test_default.log" | head -20
  QS_GEMM_BULK=1 QS_GEMM_BULK_STAGES=2 timeout 120 $B/test_gemm_gpu w4a16Symmetric w4a16Asymmetric w8a16Int8 w8a16Fp8 splitKIsDeterministic > "$out/test_stages2.log" 2>&1; echo "test bulk stages=2 rc=$? $(grep Totals "$out/test_stages2.log")"
  grep -E "^FAIL" -A3 "$out/test_stages2.log" | head -10 ;;
bench)
  bench default
  bench register QS_GEMM_BULK=0
  bench bulk QS_GEMM_BULK=1
  bench trigger QS_GEMM_PDL_TRIGGER=1
  bench nopdl QS_GEMM_PDL=0 ;;
full)
  timeout 200 $B/quantscope-cli bench gemm > "$out/bench_full.txt" 2> "$out/bench_full.err"; echo "full bench rc=$?"; tail -1 "$out/bench_full.txt"
  QS_GEMM_PDL=0 timeout 100 $B/quantscope-cli bench gemm --batch 1,16 --no-cublaslt > "$out/bench_full_nopdl.txt" 2>&1; echo "nopdl rc=$?"; tail -1 "$out/bench_full_nopdl.txt" ;;
tune)
  for b in 1 3 4; do FMTS=int4-g128-sym bench bps$b QS_GEMM_SKINNY_BLOCKS_PER_SM=$b; done
  for st in 2 3 6; do FMTS=int4-g128-sym bench stages$st QS_GEMM_BULK_STAGES=$st; done ;;
ncu)
  for b in ${NCU_BATCH:-1 16}; do
  kernel=skinny; [[ $b -gt 16 ]] && kernel=wide
  timeout 90 ncu --clock-control none -k regex:$kernel --launch-skip 4 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    $B/quantscope-cli bench gemm --shapes ${NCU_SHAPE:-8192x8192} --batch $b --formats ${NCU_FMT:-int4-g128-sym} --no-cublaslt --repeats 3 > "$out/ncu_m$b.txt" 2>&1
  echo "ncu m=$b rc=$?"; grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Dynamic Shared|Issued Warp Per Scheduler|No Eligible|Warp Cycles Per Issued|Theoretical Occupancy)" "$out/ncu_m$b.txt" | head -14
  grep -E "issue_stalled" "$out/ncu_m$b.txt" | awk '$NF+0 > 0.2 {print $1, $NF}'
  done ;;
sass)
  cuobjdump -sass $B/quantscope-cli 2>/dev/null | awk '/Function : .*skinnyKernel/{p=1} /Function : .*wideKernel/{p=0} p' > "$out/skinny.sass"
  echo "sass lines $(wc -l < "$out/skinny.sass")" ;;
sanitize)
  for tool in memcheck racecheck synccheck; do
  QS_GEMM_BULK=1 QS_GEMM_TEST_QUICK=1 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_gemm_gpu w4a16Symmetric w4a16Asymmetric w8a16Int8 w8a16Fp8 > "$out/san_$tool.log" 2>&1
  echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Totals" "$out/san_$tool.log" | head -3
  done ;;
esac; done
