#!/usr/bin/env bash
# One device call for a resolve: every gpu-labelled test program at its full sizes, then
# compute-sanitizer (the tools given, default memcheck) over each at its quick sizes. Binaries
# and libraries travel as .carry/pack.tar.xz (bin/ + libs/; see docs/reliability.md). Writes
# $OUT/summary.txt and $OUT/logs.tar.xz (every log).
# Usage on the device machine, in the repository root: bash scripts/gpu/final_device.sh SOURCE_ROOT [TOOL…]
# Environment: QS_SKIP_FULL=1 skips the full-size runs; QS_SANITIZE_ONLY="test_a test_b" limits
# the sanitizer runs to those programs; QS_SANITIZE_STEP_S the time limit of each (default 120);
# QS_FULL_STEP_S the time limit of each full-size run (default 330: test_gemm_gpu alone takes
# ~250 s on an H200, session 35).
set -uo pipefail
src=$1; shift
tools=("$@")
((${#tools[@]})) || tools=(memcheck)
here=$(pwd)
out=${OUT:-/tmp/final-out}
logs=/tmp/final-logs
mkdir -p "$out" "$logs" /tmp/pack
tar -C /tmp/pack -xJf .carry/pack.tar.xz
if [[ "$here" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")"; ln -s "$here" "$src"; fi
export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=/tmp/pack/bin:$PATH
summary=$out/summary.txt
: >"$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
cd /tmp/pack/bin
for t in test_*; do
  [[ ${QS_SKIP_FULL:-0} == 1 ]] && break
  start=$(date +%s)
  timeout "${QS_FULL_STEP_S:-330}" "./$t" >"$logs/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(grep -E '^Totals' "$logs/$t.log" | tail -1) $(( $(date +%s) - start )) s" | tee -a "$summary"
  grep -E "^FAIL|Loc:" "$logs/$t.log" | head -10 | tee -a "$summary"
done
export QS_TEST_QUICK=1 QS_GEMM_TEST_QUICK=1
for tool in "${tools[@]}"; do
  [[ $tool == none ]] && continue
  for t in ${QS_SANITIZE_ONLY:-test_*}; do
    start=$(date +%s)
    extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    timeout "${QS_SANITIZE_STEP_S:-120}" compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 99 \
      --print-limit 30 "./$t" >"$logs/$tool-$t.log" 2>&1
    rc=$?
    echo "$tool $t rc=$rc $(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$logs/$tool-$t.log" | tail -1) $(grep -E '^Totals' "$logs/$tool-$t.log" | tail -1) $(( $(date +%s) - start )) s" | tee -a "$summary"
  done
done
tar -C "$logs" -cJf "$out/logs.tar.xz" .
