#!/usr/bin/env bash
# Greedy text and token ids of quantscope-cli against llama.cpp's llama-simple / llama-tokenize
# on a real GGUF, dequantized to F32 by llama-quantize (so both run the same FP32 weights).
#   compare_llamacpp.sh QUANTSCOPE_CLI [MODEL.gguf | gemma3 | smollm2]
# MODEL defaults to Gemma 3 270M in the cache; "gemma3" and "smollm2" name the cached files
# scripts/models/fetch_model.sh puts there (Gemma 3 270M Q4_K_M, SmolLM2-135M-Instruct Q4_1).
# llama.cpp's tools: QS_LLAMACPP_BIN, else the cached build of scripts/llamacpp/build_llamacpp.sh
# (QS_CACHE/llamacpp/11434.0.0/build/bin). Exit 77 (ctest: skipped) when either is missing.
set -uo pipefail
cli=$1
cache=${QS_CACHE:-$HOME/.cache/quantscope}
model=${2:-gemma3}
case $model in
  gemma3) model=$cache/models/gemma-3-270m-q4_k_m.gguf ;;
  smollm2) model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf ;;
esac
bin=${QS_LLAMACPP_BIN:-$cache/llamacpp/11434.0.0/build/bin}
if [[ ! -x $bin/llama-simple || ! -x $bin/llama-quantize || ! -x $bin/llama-tokenize ]]; then
  echo "SKIP: no llama.cpp tools in $bin (scripts/llamacpp/build_llamacpp.sh builds them)" >&2; exit 77
fi
if [[ ! -f $model ]]; then
  echo "SKIP: no $model (scripts/models/fetch_model.sh gemma3|smollm2 fetches it)" >&2; exit 77
fi
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
f32=${model%.gguf}-f32.gguf
if [[ ! -f $f32 ]]; then
  "$bin/llama-quantize" --allow-requantize "$model" "$f32.tmp" F32 >/dev/null 2>&1 || { echo "llama-quantize failed" >&2; exit 1; }
  mv "$f32.tmp" "$f32"
fi
long=$(head -c 3500 "$(dirname "$0")/../../datasets/text/tinyshakespeare.txt" 2>/dev/null || true)
prompts=("The capital of France is" "Once upon a time" "def fibonacci(n):" "The three primary colors are")
[[ -n $long ]] && prompts+=("$long")  # longer than Gemma 3's 512-token window
fail=0
for p in "${prompts[@]}"; do
  want=$("$bin/llama-simple" -m "$f32" -n 32 "$p" 2>/dev/null | sed '1s/^<bos>//')
  have=$("$cli" generate "$f32" --prompt "$p" --tokens 32 2>/dev/null)
  wid=$("$bin/llama-tokenize" -m "$f32" -p "$p" --ids --log-disable 2>/dev/null | tail -1 | tr -d ' ')
  hid=$("$cli" generate "$f32" --prompt "$p" --tokens 1 --json 2>/dev/null |
        python3 -c 'import json,sys; print(str(json.load(sys.stdin)["prompt_tokens"]).replace(" ",""))')
  label=${p:0:40}
  if [[ $want == "$have" && $wid == "$hid" ]]; then
    echo "same text and ids: $label"
  else
    fail=1
    echo "DIFFERENT: $label"
    [[ $wid == "$hid" ]] || echo "  ids llama.cpp $wid"$'\n'"  ids ours      $hid"
    [[ $want == "$have" ]] || echo "  llama.cpp: ${want: -200}"$'\n'"  ours:      ${have: -200}"
  fi
done
exit $fail
