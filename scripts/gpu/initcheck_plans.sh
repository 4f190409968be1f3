#!/usr/bin/env bash
# Which runtime plan makes compute-sanitizer's initcheck report uninitialized reads: the
# accumulation job on stories260K (CUDA backend) once per format, under initcheck, with and
# without programmatic dependent launch (QS_GEMM_PDL=0). Run after final_device.sh unpacked
# .carry/pack.tar.xz (binaries in /tmp/pack/bin). Writes $OUT/initcheck_plans.txt.
set -uo pipefail
out=${OUT:-/tmp/final-out}
mkdir -p "$out" /tmp/final-logs
export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cli=/tmp/pack/bin/quantscope-cli
model=datasets/models/stories260K/stories260K.bin
res=$out/initcheck_plans.txt
: >"$res"
for f in fp16 int4-g32-sym int8-ch-sym int8-ch-sym:int8-tok fp8e4m3-ch:fp8e4m3-tok fp8e4m3-ch; do
  for pdl in 1 0; do
    log=/tmp/final-logs/initcheck-plan-${f//:/_}-pdl$pdl.log
    QS_GEMM_PDL=$pdl timeout 120 compute-sanitizer --tool initcheck --print-limit 3 \
      "$cli" --backend cuda accumulate "$model" --format "$f" --tokens 200 --ctx 100 >"$log" 2>&1
    echo "$f pdl=$pdl rc=$? $(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -1) $(grep -m1 -Eo 'at [^ ]+' "$log")" | tee -a "$res"
  done
done
