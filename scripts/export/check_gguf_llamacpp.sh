#!/usr/bin/env bash
# GGUF exports run in llama.cpp: each model is exported twice (an F32 plan and a quantised plan),
# llama.cpp's llama-simple must give the same greedy text as quantscope-cli on the same file,
# llama-tokenize the same prompt ids, and llama-perplexity must load and score both; its
# perplexity of the quantised file against the F32 file is printed.
#   check_gguf_llamacpp.sh QUANTSCOPE_CLI [WORKDIR]
# Models: the GPT-2 of datasets/models/shakespeare-gpt2 (tokenizer.json: byte-level BPE →
# tokenizer.ggml.model "gpt2", pre "gpt-2") and stories260K (llama2.c, SentencePiece).
# llama.cpp's tools: QS_LLAMACPP_BIN, else the cached build of scripts/llamacpp/build_llamacpp.sh.
# Exit 77 (ctest: skipped) when they are missing.
set -uo pipefail
cli=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${QS_CACHE:-$HOME/.cache/quantscope}
bin=${QS_LLAMACPP_BIN:-$cache/llamacpp/11434.0.0/build/bin}
for t in llama-simple llama-tokenize llama-perplexity; do
  [[ -x $bin/$t ]] || { echo "SKIP: no $t in $bin (scripts/llamacpp/build_llamacpp.sh builds it)" >&2; exit 77; }
done
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=${2:-$(mktemp -d)}
mkdir -p "$work"
cat > "$work/f32.json" <<'J'
{"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "f32"}}
J
# Quantised: attention INT4 (Q4_0), the MLP input INT8 (Q8_0); stories260K's down (K = 172,
# not a multiple of 32) stays F32.
cat > "$work/q.json" <<'J'
{"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "f32"},
 "entries": [{"layers": ["blocks.*.attn.*"], "weight": "int4-sym", "group_size": 32},
             {"layers": ["blocks.*.mlp.{gate,up}"], "weight": "int8-sym", "group_size": 32}]}
J
fail=0
ppl() {  # llama-perplexity's final estimate on the model's own held-out text (log beside the file)
  # Again when a run ends without its final line: llama.cpp logs from a thread, and under heavy
  # machine load the last lines are sometimes lost at exit (exit status 0).
  local v= try
  for try in 1 2 3 4; do
    "$bin/llama-perplexity" -m "$1" -f "$2" -c "$3" -b "$3" --chunks 16 -t 2 >"$1.ppl.log" 2>&1
    echo "exit status $?" >>"$1.ppl.log"
    v=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1.ppl.log")
    [[ -n $v ]] && break
  done
  echo "$v"
}
check() {  # NAME SOURCE TEXT CTX PROMPT...
  local name=$1 src=$2 text=$3 ctx=$4 ppl_f32= ppl_q=; shift 4
  for plan in f32 q; do
    local out=$work/$name-$plan.gguf
    if ! "$cli" export "$src" --plan "$work/$plan.json" --to gguf -o "$out" --force >/dev/null 2>"$work/$name-$plan.err"; then
      echo "EXPORT FAILED: $name $plan: $(cat "$work/$name-$plan.err")"; fail=1; continue
    fi
    for p in "$@"; do
      want=$("$bin/llama-simple" -m "$out" -n 24 "$p" 2>/dev/null)
      have=$("$cli" generate "$out" --prompt "$p" --tokens 24 2>/dev/null)
      wid=$("$bin/llama-tokenize" -m "$out" -p "$p" --ids --log-disable 2>/dev/null | tail -1 | tr -d ' ')
      hid=$("$cli" generate "$out" --prompt "$p" --tokens 1 --json 2>/dev/null |
            python3 -c 'import json,sys; print(str(json.load(sys.stdin)["prompt_tokens"]).replace(" ",""))')
      # llama-simple prints the prompt with its BOS text when the vocabulary adds one.
      want=${want#<s>}; want=${want# }
      if [[ $want == "$have" && $wid == "$hid" ]]; then
        echo "same text and ids: $name $plan: ${p:0:30}"
      else
        fail=1
        echo "DIFFERENT: $name $plan: ${p:0:30}"
        echo "  ids llama.cpp $wid / ours $hid"
        echo "  llama.cpp: ${want: -120}"$'\n'"  ours:      ${have: -120}"
      fi
    done
    local v; v=$(ppl "$out" "$text" "$ctx")
    [[ -n $v ]] || { echo "llama-perplexity failed on $out"; fail=1; }
    eval "ppl_$plan=\$v"
  done
  echo "llama-perplexity $name: F32 export $ppl_f32, quantised export $ppl_q"
}
check gpt2 "$root/datasets/models/shakespeare-gpt2/model.safetensors" \
  "$root/datasets/models/shakespeare-gpt2/heldout.txt" 128 "ROMEO: I will" "First Citizen:"
check stories260K "$root/datasets/models/stories260K/stories260K.bin" \
  "$root/datasets/text/tinystories_validation_head.txt" 256 "Once upon a time" "The little dog"
exit $fail
