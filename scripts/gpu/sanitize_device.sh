#!/usr/bin/env bash
# compute-sanitizer over every gpu-labelled test program (docs/reliability.md): memcheck,
# racecheck and initcheck, each test program with its quick sizes (QS_TEST_QUICK=1,
# QS_GEMM_TEST_QUICK=1: the same cases without the largest shapes, which the sanitizers slow
# down 10-100x). Run on the GPU machine through scripts/gpu/run.sh (cwd = build-gpu):
#   scripts/gpu/run.sh /work/wt-NAME bash /work/wt-NAME/.carry/sanitize_device.sh [TOOL…]
# Logs go to $OUT/sanitize-<tool>-<test>.log, one line per run to $OUT/sanitize-summary.txt.
# Each run has its own time limit (QS_SANITIZE_STEP_S, default 150 s) so the call ends inside the
# device tool's 10 minutes; pass fewer tools to fit.
set -uo pipefail
out=${OUT:-/tmp/sanitize-out}
mkdir -p "$out"
summary=$out/sanitize-summary.txt
tools=("$@")
((${#tools[@]})) || tools=(memcheck racecheck initcheck)
step_s=${QS_SANITIZE_STEP_S:-150}
export QS_TEST_QUICK=1 QS_GEMM_TEST_QUICK=1
tests=()
for t in bin/test_gpu_device bin/test_stats_gpu bin/test_gemm_gpu bin/test_transformer_ops_gpu bin/test_runtime_gpu; do
  [[ -x $t ]] && tests+=("$t")
done
for tool in "${tools[@]}"; do
  for t in "${tests[@]}"; do
    name=$(basename "$t")
    log=$out/sanitize-$tool-$name.log
    extra=()
    # memcheck also reports device allocations never freed.
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    start=$(date +%s)
    timeout "$step_s" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 \
      --print-limit 50 "$t" >"$log" 2>&1
    rc=$?
    errors=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$log" | tail -1)
    echo "$tool $name rc=$rc ${errors:-no summary} $(( $(date +%s) - start )) s" | tee -a "$summary"
  done
done
