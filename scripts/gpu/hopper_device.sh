#!/usr/bin/env bash
# The Hopper wide path (CUTLASS wgmma mixed-input GEMM, kernels/cuda/gemm/gemm_hopper.cu) on the
# GPU machine in one call: its gpu tests (every A16 kind with each wide path forced, and picked
# by timing), `bench gemm` at m = 1 … 4096 on the issue's four shapes beside torch's peers
# (scripts/gpu/peers.py) in the same call, whole-model prefill and decode (`bench e2e`, 8B
# Llama), and compute-sanitizer memcheck over the forced Hopper paths. Binaries and libraries
# travel as .carry/pack.tar.xz (bin/ + libs/, as e2e_device.sh takes them). Logs under $OUT.
# Usage on the device machine, in the repository root:
#   bash scripts/gpu/hopper_device.sh SOURCE_ROOT [steps…]
#   steps: tests (GEMM), runtime (op tables, runtime, transformer ops), gpu-rest (the other gpu test
#   programs: tests + runtime + gpu-rest = `ctest -L gpu`), bench, peers, e2e8b, memcheck,
#   memcheck-a8 (compute-sanitizer over each forced W8A8 CUTLASS configuration),
#   memcheck-attn (memcheck and racecheck over the transformer op rows, decode attention included),
#   e2e-ab (bench e2e of a synthetic model, INT4, under each environment in QS_E2E_AB: QS_AB_PRESET
#   8b (default) or 1b, QS_AB_ARGS more bench e2e options, QS_AB_CLIS the pack's CLI binaries to
#   alternate, e.g. "quantscope-cli-head quantscope-cli")
# Environment: SHAPES, BATCH, FORMATS (bench gemm's), QS_E2E_FORMATS and QS_E2E_ARGS (bench e2e's
# formats and further options, e.g. --timeline), MEMCHECK_ROWS
# (the forced Hopper configurations memcheck runs).
set -uo pipefail
src=$1; shift
steps=${*:-tests bench peers e2e8b memcheck}
here=$(pwd)
out=${OUT:-/tmp/hopper-out}
mkdir -p "$out"
B=/tmp/pack/bin
source "$(dirname "${BASH_SOURCE[0]}")/device_log.sh"
unpack_pack "$src"
SHAPES=${SHAPES:-8192x8192,4096x4096,14336x4096,4096x14336}
BATCH=${BATCH:-1,16,128,512,4096}
FORMATS=${FORMATS:-int4-g128-sym,int8-ch-sym,fp8e4m3-ch}

device_header

tests=()
has tests && tests+=(test_gemm_dequant_gpu test_gemm_gpu)
has runtime && tests+=(test_backend_ops_gpu test_runtime_gpu test_transformer_ops_gpu)
# gpu-rest: the other programs of `ctest -L gpu` (with tests and runtime: all of them)
has gpu-rest && tests+=(test_gpu_device test_analysis_gpu test_rounding_gpu test_stats_gpu test_ggml_activations_gpu)
for t in "${tests[@]}"; do
  run_test "$B/$t" 240 "^(FAIL|Totals)|Loc:|products on the Hopper|m=512:|recorded vs eager"
done
if has runtime; then  # the decode attention's other path (split + merge), as ctest's transformerOps_splitDecode
  step "test_backend_ops_gpu transformerOps, QS_DECODE_ATTENTION=split"
  QS_DECODE_ATTENTION=split timeout 240 "$B/test_backend_ops_gpu" transformerOps >"$out/backend_ops_split.log" 2>&1
  echo "rc=$?" | tee -a "$summary"
  grep -E "^(FAIL|Totals)|Loc:" "$out/backend_ops_split.log" | head -20 | tee -a "$summary"
fi
if has bench; then
  step "bench gemm --shapes $SHAPES --batch $BATCH --formats $FORMATS"
  timeout 300 "$B/quantscope-cli" bench gemm --shapes "$SHAPES" --batch "$BATCH" --formats "$FORMATS" \
    >"$out/bench.txt" 2>"$out/bench.err"
  echo "rc=$?" | tee -a "$summary"
  cat "$out/bench.txt" >>"$summary"
fi
if has peers; then
  step "peers.py --shapes $SHAPES --batch $BATCH"
  timeout 300 python3 "$here/scripts/gpu/peers.py" --shapes "$SHAPES" --batch "$BATCH" >"$out/peers.txt" 2>"$out/peers.err"
  echo "rc=$?" | tee -a "$summary"
  cat "$out/peers.txt" >>"$summary"
fi
if has e2e8b; then
  m=/tmp/s8b/model.safetensors
  step "synth llama 8b"
  mkdir -p "$(dirname "$m")"
  [[ -e $m ]] || "$B/quantscope-cli" synth --arch llama --preset 8b -o "$m" 2>&1 | tail -1 | tee -a "$summary"
  for fmt in ${QS_E2E_FORMATS:-int4-g128-sym}; do
    step "bench e2e 8b $fmt"
    # shellcheck disable=SC2086  # QS_E2E_ARGS: more bench e2e options (e.g. --timeline), word-split
    timeout 400 "$B/quantscope-cli" --backend cuda bench e2e "$m" --format "$fmt" --prompt 512 --tokens 128 \
      ${QS_E2E_ARGS:-} >"$out/e2e-8b-$fmt.log" 2>&1
    echo "rc=$?" | tee -a "$summary"
    grep -v '^\s*\[' "$out/e2e-8b-$fmt.log" | tail -60 | tee -a "$summary"
  done
fi
if has e2e-ab; then  # the same bench e2e under each environment of QS_E2E_AB (';'-separated), e.g. a fusion off
  preset=${QS_AB_PRESET:-8b}  # the synthetic model: 8b, or 1b for quick sweeps
  m=/tmp/s$preset/model.safetensors
  mkdir -p "$(dirname "$m")"
  [[ -e $m ]] || "$B/quantscope-cli" synth --arch llama --preset "$preset" -o "$m" 2>&1 | tail -1 | tee -a "$summary"
  IFS=';' read -ra variants <<<"${QS_E2E_AB:-QS_FUSE_SWIGLU=0 QS_FUSE_ATTENTION=0 QS_DECODE_ATTENTION=split;QS_FUSE_SWIGLU=1}"
  # QS_AB_CLIS: the CLI binaries in the pack to alternate under each environment, e.g.
  # "quantscope-cli-head quantscope-cli": a kernel change measured beside the committed binary in
  # the same call. A switch inside a changed kernel is no baseline: session 19 measured an
  # experiment build ~1 % slower than HEAD with its switch unused (docs/benchmarks.md).
  read -ra clis <<<"${QS_AB_CLIS:-quantscope-cli}"
  i=0
  for v in "${variants[@]}"; do
    for cli in "${clis[@]}"; do
      i=$((i + 1))
      step "bench e2e $preset int4-g128-sym, $cli, with: $v"
      # shellcheck disable=SC2086  # v: assignments, word-split on purpose; QS_AB_ARGS: more options
      env $v timeout 300 "$B/$cli" --backend cuda bench e2e "$m" --format int4-g128-sym --prompt 512 --tokens 128 \
        ${QS_AB_ARGS:-} >"$out/e2e-ab-$preset-$i.log" 2>&1
      echo "rc=$?" | tee -a "$summary"
      # the tokens/s table, the attention part of each timeline and the ratios
      grep -E "tokens/s|^(fp16|int|fp8)[^ ]* .*[0-9]$|^attention |vs fp16" "$out/e2e-ab-$preset-$i.log" | tee -a "$summary"
    done
  done
fi
# memcheck_row PROGRAM TESTFUNCTION:ROW SECONDS: compute-sanitizer memcheck over one data row.
memcheck_row() {
  local log="$out/memcheck-${2//[:\/]/-}.log"
  step "memcheck $1 $2"
  timeout "$3" compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 "$B/$1" "$2" >"$log" 2>&1
  echo "rc=$?" | tee -a "$summary"
  grep -E "ERROR SUMMARY|Totals|FAIL|products on the Hopper" "$log" | head -8 | tee -a "$summary"
}
if has memcheck; then
  for row in ${MEMCHECK_ROWS:-wgmma-128x128 wgmma-128x64-streamk wgmma-128x128-streamk wgmma-128x128-cluster2 wgmma-128x256}; do
    memcheck_row test_gemm_dequant_gpu "forcedWidePaths:$row" 120
  done
fi
if has memcheck-a8; then  # the W8A8 CUTLASS kernel (gemm_hopper_a8.cu), each configuration forced
  for row in ${MEMCHECK_A8_ROWS:-cutlass-a8-128x128 cutlass-a8-128x256 cutlass-a8-128x128-cluster2 cutlass-a8-64x128-pingpong cutlass-a8-128x128-streamk cutlass-a8-fastacc-128x256 cutlass-a8-fastacc-128x128-pingpong cutlass-a8-fastacc-64x128-pingpong}; do
    memcheck_row test_gemm_gpu "forcedA8Paths:$row" 150
  done
fi
if has memcheck-attn; then  # the transformer op rows (decode attention included), shrunk, under two tools
  for tool in memcheck racecheck; do
    step "$tool test_backend_ops_gpu transformerOps (QS_TEST_QUICK=1)"
    QS_TEST_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/test_backend_ops_gpu" transformerOps >"$out/$tool-attn.log" 2>&1
    echo "rc=$?" | tee -a "$summary"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Totals|FAIL" "$out/$tool-attn.log" | head -8 | tee -a "$summary"
  done
fi
step done
