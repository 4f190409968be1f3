#!/usr/bin/env bash
# Whole-model tokens/s on the GPU machine in one call (issue 25, end to end): the gpu tests of the
# runtime and the op tables (recorded decode steps, the split decode attention), then `bench e2e`
# on generated 1B and 8B Llama-shaped models — decode steps recorded as CUDA graphs (the default)
# and, in the same call, run launch by launch (QS_DECODE_GRAPH=0) — and per-kernel GPU time of a
# few decode steps under Nsight Compute. Binaries and libraries travel as .carry/pack.tar.xz
# (bin/ + libs/, as final_device.sh takes them). Writes $OUT/summary.txt and the logs.
# Usage on the device machine, in the repository root:
#   bash scripts/gpu/e2e_device.sh SOURCE_ROOT [steps…]     steps: tests e2e8b e2e1b ncu
# Environment: QS_E2E_FORMATS (default int4-g128-sym), QS_E2E_EAGER=0 skips the launch-by-launch runs.
set -uo pipefail
src=$1; shift
steps=${*:-tests e2e1b e2e8b ncu}
out=${OUT:-/tmp/e2e-out}
mkdir -p "$out"
cli=/tmp/pack/bin/quantscope-cli
source "$(dirname "${BASH_SOURCE[0]}")/device_log.sh"
unpack_pack "$src"

device_header

if has tests; then
  for t in test_runtime_gpu test_backend_ops_gpu test_transformer_ops_gpu; do
    run_test "/tmp/pack/bin/$t" 300 "^(FAIL|Totals)|recorded vs eager|Loc:"
  done
fi

e2e() {  # model label extra-env…
  local model=$1 label=$2; shift 2
  for fmt in ${QS_E2E_FORMATS:-int4-g128-sym}; do
    step "bench e2e $label $fmt ${*:-graph}"
    env "$@" timeout 400 "$cli" --backend cuda bench e2e "$model" --format "$fmt" --prompt 512 --tokens 128 \
      >"$out/e2e-$label-$fmt-${1:+eager}.log" 2>&1
    echo "rc=$?" | tee -a "$summary"
    tail -12 "$out/e2e-$label-$fmt-${1:+eager}.log" | tee -a "$summary"
  done
}
for preset in 1b 8b; do
  has "e2e$preset" || continue
  m=/tmp/s$preset/model.safetensors
  step "synth llama $preset"
  t0=$SECONDS
  mkdir -p "$(dirname "$m")"
  [[ -e $m ]] || "$cli" synth --arch llama --preset "$preset" -o "$m" 2>&1 | tail -1 | tee -a "$summary"
  echo "synth: $((SECONDS - t0)) s" | tee -a "$summary"
  e2e "$m" "$preset"
  [[ ${QS_E2E_EAGER:-1} == 1 ]] && e2e "$m" "$preset" QS_DECODE_GRAPH=0
done

if has ncu; then
  # GPU time per kernel over a short run launch by launch (prefill of 16, 3 steps, FP16 and the
  # plan): which kernels a decode step spends its time in.
  m=/tmp/s1b/model.safetensors
  step "ncu: per-kernel GPU time, 1B"
  QS_DECODE_GRAPH=0 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$cli" --backend cuda bench e2e "$m" --format int4-g128-sym --prompt 16 --tokens 3 --repeat 1 >"$out/ncu-1b.log" 2>&1
  echo "rc=$?" | tee -a "$summary"
  grep -E "^\s+[A-Za-z_].*\(|gpu__time_duration.sum|invocations" "$out/ncu-1b.log" | head -120 >>"$out/ncu-1b-summary.txt"
fi
step done
