#!/usr/bin/env bash
# Issue 24's fidelity table on the GPU: the exact sweep of every default format (seconds there,
# hours on a 2-core CPU), then the estimate sweeps to compare with it, each a run of
# scripts/sensitivity/fidelity.py sharing one calibration and one exact table (--reuse).
# The model travels in parts (the device tool carries 64 MiB a call): earlier calls copy parts to
# /tmp/model-parts/, this one joins them and checks the SHA-256.
# Usage on the device machine, in the repository root:
#   bash scripts/gpu/fidelity_device.sh NAME SHA256 [VARIANT ...]
# NAME: the joined file's name (its parts are /tmp/model-parts/NAME.*). VARIANT: a label and the
# estimate's options, "label:--probes family --probe-tokens 45" (default: one per layer and
# one per family, both refined). Binaries: .carry/pack.tar.xz (bin/ + libs/, as final_device.sh).
# Writes $OUT/NAME-LABEL.md (the script's table) and $OUT/NAME-LABEL.err.
set -uo pipefail
name=$1 sha=$2
shift 2
variants=("$@")
((${#variants[@]})) || variants=("one:--probes one" "family:--probes family")
out=${OUT:-/tmp/fidelity-out}
mkdir -p "$out" /tmp/pack /tmp/fid
tar -C /tmp/pack -xJf .carry/pack.tar.xz
export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
model=/tmp/fid/$name
cat /tmp/model-parts/"$name".* >"$model"
echo "$sha  $model" | sha256sum -c - || exit 2
mkdir -p /tmp/fid/build/bin && ln -sf /tmp/pack/bin/quantscope-cli /tmp/fid/build/bin/quantscope-cli
text=datasets/text/wikitext2_raw_test.txt
tail -c 60000 "$text" >/tmp/fid/heldout.txt
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/device.txt"
first=""
for v in "${variants[@]}"; do
  label=${v%%:*}
  read -r -a opts <<<"${v#*:}"
  dir=/tmp/fid/$name-$label
  mkdir -p "$dir"
  reuse=()
  if [[ -n $first ]]; then  # the calibration and the exact sweep of the first variant
    cp "$first"/{s.qsession,calibrate.json,exact.json,exact.out.json} "$dir"/
    reuse=(--reuse)
  fi
  python3 scripts/sensitivity/fidelity.py "$model" --text "$text" --heldout /tmp/fid/heldout.txt --tokens 511 \
      --ctx 512 --budgets 4.5,5.5 --jobs 1 --backend cuda --build /tmp/fid/build --refine --out "$dir" \
      "${reuse[@]}" "${opts[@]}" >"$out/$name-$label.md" 2>"$out/$name-$label.err"
  echo "$label rc=$?"
  [[ -z $first ]] && first=$dir
done
