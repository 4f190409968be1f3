#!/usr/bin/env bash
# Our `perplexity --protocol llama.cpp --base` against llama.cpp's `llama-perplexity
# --kl-divergence` on the same files and text: a quantized GGUF (llama-quantize Q4_0 and Q4_K_M
# of SmolLM2-135M's F16 base) against that base. Same chunks, same scored positions, activations
# rounded as llama.cpp's CPU products round them; the two tools must agree on perplexity and
# mean KL within the bounds below.
#   check_protocol.sh QUANTSCOPE_CLI [WORK_DIR]
# Exit 77 (ctest: skipped) when llama.cpp's tools or the model are not in the cache.
# Environment: QS_CHUNKS (default 4), QS_THREADS (default nproc).
set -uo pipefail
cli=$1
cache=${QS_CACHE:-$HOME/.cache/quantscope}
work=${2:-$cache/quality/protocol}
bin=${QS_LLAMACPP_BIN:-$cache/llamacpp/11434.0.0/build/bin}
model=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
chunks=${QS_CHUNKS:-4}
threads=${QS_THREADS:-$(nproc)}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for t in llama-quantize llama-perplexity; do
  [[ -x $bin/$t ]] || { echo "SKIP: no $bin/$t (scripts/llamacpp/build_llamacpp.sh builds it)" >&2; exit 77; }
done
[[ -f $model ]] || { echo "SKIP: no $model (scripts/models/fetch_model.sh smollm2)" >&2; exit 77; }
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$work"
text=$root/datasets/text/wikitext2_raw_test.txt
head -n 2000 "$text" >"$work/eval.txt"
base=$work/base-f16.gguf
[[ -f $base ]] || "$bin/llama-quantize" --allow-requantize "$model" "$base" F16 >"$work/base.log" 2>&1 || { echo "llama-quantize F16 failed" >&2; exit 1; }
"$bin/llama-perplexity" -m "$base" -f "$work/eval.txt" -c 512 --chunks "$chunks" -t "$threads" \
  --kl-divergence-base "$work/base.kld" >"$work/base-ppl.log" 2>&1 || { echo "llama-perplexity (base) failed" >&2; exit 1; }
fail=0
for type in Q4_0 Q4_K_M; do
  f=$work/$type.gguf
  [[ -f $f ]] || "$bin/llama-quantize" "$base" "$f" "$type" >"$f.log" 2>&1 || { echo "llama-quantize $type failed" >&2; exit 1; }
  "$bin/llama-perplexity" -m "$f" -f "$work/eval.txt" -c 512 --chunks "$chunks" -t "$threads" \
    --kl-divergence-base "$work/base.kld" --kl-divergence >"$f.kld.log" 2>&1 || { echo "llama-perplexity $type failed" >&2; exit 1; }
  "$cli" perplexity "$f" --base "$base" --text "$work/eval.txt" --tokens $((chunks * 512)) --ctx 512 \
    --protocol llama.cpp --json >"$f.ours.json" 2>"$f.ours.err" || { cat "$f.ours.err" >&2; exit 1; }
  python3 - "$f.kld.log" "$f.ours.json" "$type" <<'PY' || fail=1
import json, re, sys
log = open(sys.argv[1]).read()
ours = json.load(open(sys.argv[2]))
ppl = float(re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", log).group(1))
base = float(re.search(r"Mean PPL\(base\)\s*:\s*([0-9.]+)", log).group(1))
kl = float(re.search(r"Mean\s+KLD:\s*([0-9.]+)", log).group(1))
top = float(re.search(r"Same top p:\s*([0-9.]+)", log).group(1)) / 100
# Bounds: the two tools run the same arithmetic up to summation order and llama.cpp's FP16 base
# activations, so perplexities agree to 0.5 % and mean KL to 10 % (its standard error on 4 chunks
# is about 2 %).
checks = [("perplexity", ours["perplexity"], ppl, 0.005), ("base perplexity", ours["base_perplexity"], base, 0.005),
          ("mean KL", ours["mean_kl"], kl, 0.10)]
bad = False
for name, a, b, tol in checks:
    rel = abs(a - b) / b
    ok = rel <= tol
    bad |= not ok
    print(f"{sys.argv[3]} {name}: ours {a:.6g} llama.cpp {b:.6g} ({100*rel:.2f} %, bound {100*tol:g} %) {'ok' if ok else 'DIFFERENT'}")
print(f"{sys.argv[3]} top-1 agreement: ours {100*ours['top1_agreement']:.2f} % llama.cpp {100*top:.2f} %")
sys.exit(1 if bad else 0)
PY
done
exit $fail
