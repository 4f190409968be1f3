#!/usr/bin/env bash
# Predicted vs measured plan error on stories260K (docs/plan.md, "Predicted vs measured").
# A single-layer sensitivity sweep on TOKENS tokens; twelve plans (eight points along the
# size/error Pareto front, two threshold plans, two uniform plans); each plan's predicted error
# (sum of single-layer KL) against its measured KL with every layer fake-quantised at once, on
# the same tokens; Spearman and Pearson over the twelve.
#   usage: scripts/plan/predicted_vs_measured.sh [BUILD_DIR] [OUT_DIR] [TOKENS]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
out="${2:-$(mktemp -d)}"
tokens="${3:-512}"
cli="$build/bin/quantscope-cli"
model="$here/datasets/models/stories260K/stories260K.bin"
mkdir -p "$out"

"$cli" plan measure "$model" --sweep default --tokens "$tokens" -o "$out/sens.json"
"$cli" plan pareto "$model" --sensitivity "$out/sens.json" --points 8 --emit "$out/front" > "$out/front.txt"
"$cli" plan auto "$model" --thresholds --sensitivity "$out/sens.json" --name thresholds-0.1-0.3 -o "$out/thr-a.json" > /dev/null
"$cli" plan auto "$model" --thresholds --int4-below 0.3 --int8-below 0.6 --sensitivity "$out/sens.json" \
  --name thresholds-0.3-0.6 -o "$out/thr-b.json" > /dev/null
cat > "$out/uniform-int8.json" <<'JSON'
{"schema": "quantscope-plan", "version": 2, "name": "uniform-int8",
 "defaults": {"weight": "int8-sym", "group_size": "channel"}}
JSON
cat > "$out/uniform-int4.json" <<'JSON'
{"schema": "quantscope-plan", "version": 2, "name": "uniform-int4",
 "defaults": {"weight": "int4-sym", "group_size": 64},
 "entries": [{"layers": "blocks.*.mlp.down", "group_size": "channel"}]}
JSON
"$cli" plan measure "$model" --sensitivity "$out/sens.json" --tokens "$tokens" \
  "$out"/front/pareto-*.json "$out/thr-a.json" "$out/thr-b.json" "$out/uniform-int8.json" "$out/uniform-int4.json" \
  | tee "$out/agreement.txt"
echo "files in $out"
