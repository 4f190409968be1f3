#!/usr/bin/env bash
# The CUDA runtime checks on the GPU machine, in one call (issue 8, runtime half): the gpu tests of
# the transformer ops and the runtime (logs carry the agreement figures), quick runs of the GEMM
# and statistics gpu tests (shared CUDA error checks, INT8 -128), generate/perplexity on CUDA,
# `speed` and `bench sweep` on a generated 1B Llama-shaped model, then compute-sanitizer memcheck.
# Binaries and shared libraries travel in .carry/gpurt/{bin,libs} (see docs/benchmarks.md for the
# staging commands). Usage, from the repository root on the device machine:
#   bash scripts/gpu/runtime_device.sh SOURCE_ROOT [steps…]     steps: tests other cli speed sweep memcheck
set -uo pipefail
src=$1; shift
steps=${*:-tests other cli speed sweep memcheck}
here=$(pwd)
out=${OUT:-/tmp/runtime-out}
mkdir -p "$out"
# The test binaries recorded SOURCE_ROOT/datasets at build time.
if [[ "$here" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")"; ln -s "$here" "$src"; fi
export LD_LIBRARY_PATH="$here/.carry/gpurt/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin=$here/.carry/gpurt/bin
source "$(dirname "${BASH_SOURCE[0]}")/device_log.sh"

device_header

if has tests; then
  for t in test_transformer_ops_gpu test_runtime_gpu; do
    run_test "$bin/$t" 300 "^(PASS|FAIL|Totals)|QINFO|Loc:|seed"
  done
fi
if has other; then
  step "test_gemm_gpu + test_stats_gpu (quick)"
  QS_GEMM_TEST_QUICK=1 timeout 200 "$bin/test_gemm_gpu" >"$out/test_gemm_gpu.log" 2>&1
  echo "test_gemm_gpu rc=$?" | tee -a "$summary"
  QS_TEST_QUICK=1 timeout 150 "$bin/test_stats_gpu" >"$out/test_stats_gpu.log" 2>&1
  echo "test_stats_gpu rc=$?" | tee -a "$summary"
  grep -E "^(FAIL|Totals)" "$out/test_gemm_gpu.log" "$out/test_stats_gpu.log" | tee -a "$summary"
fi
model=$src/datasets/models/stories260K/stories260K.bin
if has cli; then
  step "generate / perplexity on CUDA (stories260K)"
  "$bin/quantscope-cli" --backend cuda generate "$model" --tokens 40 2>&1 | tail -3 | tee -a "$summary"
  txt=$src/datasets/text/tinystories_validation_head.txt
  if [[ -n "$txt" ]]; then
    "$bin/quantscope-cli" --backend cuda perplexity "$model" --text "$txt" --tokens 2000 2>&1 | tail -4 | tee -a "$summary"
    "$bin/quantscope-cli" --backend cpu perplexity "$model" --text "$txt" --tokens 2000 2>&1 | tail -4 | tee -a "$summary"
  fi
fi
m1b=/tmp/s1b/model.safetensors
if has speed || has sweep; then
  step "synth llama 1b"
  t0=$SECONDS
  mkdir -p "$(dirname "$m1b")"
  [[ -e $m1b ]] || "$bin/quantscope-cli" synth --arch llama --preset 1b -o "$m1b" 2>&1 | tail -2 | tee -a "$summary"
  echo "synth: $((SECONDS - t0)) s" | tee -a "$summary"
fi
if has speed; then
  step "speed 1B"
  timeout 240 "$bin/quantscope-cli" --backend cuda speed "$m1b" --tokens 1,16,512 >"$out/speed_1b.txt" 2>&1
  echo "speed rc=$?" | tee -a "$summary"
  cat "$out/speed_1b.txt"
fi
if has sweep; then
  step "bench sweep 1B, 512 tokens, 7 formats"
  timeout 240 "$bin/quantscope-cli" --backend cuda bench sweep "$m1b" --tokens 512 >"$out/sweep_1b.txt" 2>&1
  echo "sweep rc=$?" | tee -a "$summary"
  cat "$out/sweep_1b.txt" | tee -a "$summary"
fi
if has memcheck; then
  step "compute-sanitizer memcheck"
  QS_TEST_QUICK=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_transformer_ops_gpu" \
    >"$out/memcheck_ops.log" 2>&1
  echo "memcheck test_transformer_ops_gpu rc=$?" | tee -a "$summary"
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_runtime_gpu" \
    stories260KUnquantizedMatchesCpu stories260KPlansMatchCpuReference gpt2OnGpuMatchesCpu \
    tapsAndWeightReplacementOnGpu deviceTensorApiMatchesForward int8MinusOneTwentyEightRunsOnTheKernels \
    speedJobRunsOnTheDevice >"$out/memcheck_runtime.log" 2>&1
  echo "memcheck test_runtime_gpu rc=$?" | tee -a "$summary"
  grep -E "ERROR SUMMARY|Totals" "$out"/memcheck_*.log | tee -a "$summary"
fi
step done
