#!/usr/bin/env bash
# The llama-quantize target of `quantscope-cli plan export` run by llama.cpp: stories260K is
# exported as an F32 GGUF, quantised by the printed llama-quantize command, and llama-perplexity
# scores it against the same command without --token-embedding-type / --output-tensor-type
# (llama-quantize --pure then gives the tied embedding/output the base type) and against our own
# GGUF export of the plan. The command must keep token_embd.weight F16 (gguf-py reads the type).
#   check_llama_quantize.sh QUANTSCOPE_CLI [PYTHON] [WORKDIR]
# Exit 77 (ctest: skipped) without llama.cpp's tools (QS_LLAMACPP_BIN or the cached build).
set -uo pipefail
cli=$1 py=${2:-python3}
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${QS_CACHE:-$HOME/.cache/quantscope}
bin=${QS_LLAMACPP_BIN:-$cache/llamacpp/11434.0.0/build/bin}
for t in llama-quantize llama-perplexity; do
  [[ -x $bin/$t ]] || { echo "SKIP: no $t in $bin" >&2; exit 77; }
done
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=${3:-$(mktemp -d)}
mkdir -p "$work"
model=$root/datasets/models/stories260K/stories260K.bin
text=$root/datasets/text/tinystories_validation_head.txt
cat > "$work/f32.json" <<'J'
{"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "f32"}}
J
cat > "$work/q4.json" <<'J'
{"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "int4-sym", "group_size": 32},
 "entries": [{"layers": ["blocks.*.mlp.down"], "weight": "f32"}]}
J
"$cli" export "$model" --plan "$work/f32.json" --to gguf -o "$work/f32.gguf" --force >/dev/null 2>&1 || { echo "export failed"; exit 1; }
"$cli" export "$model" --plan "$work/q4.json" --to gguf -o "$work/ours.gguf" --force >/dev/null 2>&1 || { echo "export failed"; exit 1; }
"$cli" plan export "$work/q4.json" --to llama-quantize --model "$model" -o "$work/cmd.sh" 2>/dev/null || { echo "plan export failed"; exit 1; }
cmd=$(grep -v '^#' "$work/cmd.sh" | tr -d '\\\n')
run() {  # COMMAND-TEXT OUT
  local c=${1/llama-quantize/\"$bin/llama-quantize\"}
  c=${c/INPUT.gguf/\"$work/f32.gguf\"}
  c=${c/OUTPUT.gguf/\"$2\"}
  eval "$c" >"$2.log" 2>&1 || { echo "llama-quantize failed: $(tail -3 "$2.log")"; exit 1; }
}
run "$cmd" "$work/planned.gguf"
pure=$(echo "$cmd" | sed -E 's/--token-embedding-type [a-z0-9_]+ //; s/--output-tensor-type [a-z0-9_]+ //')
run "$pure" "$work/pure.gguf"
ppl() {
  # Again when a run ends without its final line: llama.cpp logs from a thread, and under heavy
  # machine load the last lines are sometimes lost at exit (exit status 0).
  local v= try
  for try in 1 2 3 4; do
    "$bin/llama-perplexity" -m "$1" -f "$text" -c 256 -b 256 --chunks 16 -t 2 >"$1.ppl.log" 2>&1
    echo "exit status $?" >>"$1.ppl.log"
    v=$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1.ppl.log")
    [[ -n $v ]] && break
  done
  echo "$v"
}
emb=$("$py" -c 'import sys; from gguf import GGUFReader
r = GGUFReader(sys.argv[1]); print({t.name: t.tensor_type.name for t in r.tensors}["token_embd.weight"])' "$work/planned.gguf")
p32=$(ppl "$work/f32.gguf"); pp=$(ppl "$work/planned.gguf"); pu=$(ppl "$work/pure.gguf"); po=$(ppl "$work/ours.gguf")
echo "token_embd.weight in the planned file: $emb"
echo "llama-perplexity: F32 $p32; plan via llama-quantize $pp (embedding/output F16); --pure alone $pu; our GGUF export $po"
[[ $emb == F16 && -n $pp && -n $pu && -n $po ]] || exit 1
"$py" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if a <= b else 1)' "$pp" "$pu" ||
  { echo "the planned command scores worse than --pure alone"; exit 1; }
