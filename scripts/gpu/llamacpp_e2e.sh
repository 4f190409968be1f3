#!/usr/bin/env bash
# llama.cpp's whole-model tokens/s on the same synthetic 8B Llama as `bench e2e` (issue 25's
# end-to-end peer), on the device machine:
#   build   llama.cpp's CUDA tools (llama-bench, llama-quantize, test-backend-ops; sm_90a) from the
#           tree packed by scripts/gpu/pack_llamacpp_src.sh, into /tmp/llamacpp-cuda (as
#           llamacpp_peer.sh, which then reuses it)
#   models  the model made by `quantscope-cli synth --preset 8b` (/tmp/s8b, shared with
#           hopper_device.sh's e2e8b), exported as an F16 GGUF by quantscope-cli (every weight
#           F16; llama.cpp needs a vocabulary: make_synth_vocab.py writes a byte-level BPE
#           tokenizer.json of the model's 128,256 tokens), then llama.cpp's own Q4_0 of it
#           (llama-quantize: its mix, output.weight Q6_K)
#   bench   llama-bench on both files, all layers on the GPU, its defaults otherwise (flash
#           attention auto): pp512, and tg128 from an empty cache and after 512 tokens (-d 0,512;
#           bench e2e decodes its 128 tokens after a 512-token prompt)
# Logs and tables under $OUT (summary.txt, llama-bench.md).
# Usage: bash scripts/gpu/llamacpp_e2e.sh SRC.tar.xz [steps…]   (default: build models bench)
# LLAMACPP_BIN_TAR: the tools built elsewhere (scripts/gpu/pack_llamacpp_cuda.sh) instead of the
# build here.
set -uo pipefail
tarball=${1:?usage: llamacpp_e2e.sh SRC.tar.xz [steps…]}
shift
steps=${*:-build models bench}
out=${OUT:-/tmp/llamacpp-e2e}
mkdir -p "$out"
source "$(dirname "${BASH_SOURCE[0]}")/device_log.sh"
work=/tmp/llamacpp-cuda
bin=$work/build/bin
cli=/tmp/pack/bin/quantscope-cli
model=/tmp/s8b/model.safetensors
f16=/tmp/s8b/model-f16.gguf
q40=/tmp/s8b/model-q4_0.gguf
# (carried tools: their RUNPATH names the machine that built them; $bin finds their libraries)
export LD_LIBRARY_PATH=/tmp/pack/libs:$bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}

if has build && [[ -n ${LLAMACPP_BIN_TAR:-} ]]; then  # built elsewhere: scripts/gpu/pack_llamacpp_cuda.sh
  step "llama.cpp CUDA tools from $LLAMACPP_BIN_TAR"
  mkdir -p "$work/build" && tar -C "$work/build" -xJf "$LLAMACPP_BIN_TAR" || exit 1
  "$bin/llama-bench" --help >/dev/null 2>&1 || { echo "the carried llama-bench does not run here" | tee -a "$summary"; exit 1; }
elif has build; then
  step "build llama.cpp (CUDA, sm_90a)"
  if [[ ! -x $bin/llama-bench || ! -x $bin/llama-quantize || ! -x $bin/test-backend-ops ]]; then
    mkdir -p "$work/src"
    [[ -f $work/src/CMakeLists.txt ]] || tar -C "$work/src" -xJf "$tarball"
    cmake -S "$work/src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DGGML_CCACHE=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a >"$out/llamacpp_build.log" 2>&1 \
      || { tail -20 "$out/llamacpp_build.log"; exit 1; }
    t0=$SECONDS
    timeout "${BUILD_SECONDS:-420}" cmake --build "$work/build" -j "$(nproc)" \
      --target llama-bench llama-quantize test-backend-ops >>"$out/llamacpp_build.log" 2>&1 \
      || { echo "llama.cpp build failed or ran past ${BUILD_SECONDS:-420} s" | tee -a "$summary"; tail -5 "$out/llamacpp_build.log"; exit 1; }
    echo "llama.cpp CUDA build: $((SECONDS - t0)) s" | tee -a "$summary"
  fi
fi

if has models; then
  step "synth llama 8b"
  mkdir -p "$(dirname "$model")"
  [[ -e $model ]] || "$cli" synth --arch llama --preset 8b -o "$model" 2>&1 | tail -1 | tee -a "$summary"
  step "export F16 GGUF (quantscope-cli export)"
  echo '{"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"}}' >/tmp/s8b/f16-plan.json
  t0=$SECONDS
  python3 "$(dirname "${BASH_SOURCE[0]}")/make_synth_vocab.py" /tmp/s8b/tokenizer.json 128256 | tee -a "$summary"
  [[ -e $f16 ]] || "$cli" export "$model" --plan /tmp/s8b/f16-plan.json --to gguf -o "$f16" \
    --tokenizer /tmp/s8b/tokenizer.json >"$out/export.log" 2>&1
  echo "export rc=$? ($((SECONDS - t0)) s)" | tee -a "$summary"
  tail -4 "$out/export.log" | tee -a "$summary"
  step "llama-quantize Q4_0"
  t0=$SECONDS
  # (written beside, then renamed: a killed run leaves no half file for the next to reuse)
  [[ -e $q40 ]] || { "$bin/llama-quantize" "$f16" "$q40.part" Q4_0 "$(nproc)" >"$out/quantize.log" 2>&1 &&
    mv "$q40.part" "$q40"; }
  echo "llama-quantize rc=$? ($((SECONDS - t0)) s)" | tee -a "$summary"
  grep -E "model size|quant size" "$out/quantize.log" | tee -a "$summary"
  ls -l "$f16" "$q40" | tee -a "$summary"
fi

if has bench; then
  step "llama-bench F16 and Q4_0: pp512, tg128 at depth 0 and 512"
  timeout 420 "$bin/llama-bench" -m "$f16" -m "$q40" -ngl 99 -p 512 -n 128 -d 0,512 -r 3 -o md \
    >"$out/llama-bench.md" 2>"$out/llama-bench.err"
  echo "llama-bench rc=$?" | tee -a "$summary"
  cat "$out/llama-bench.md" | tee -a "$summary"
  grep -E "^build:|CUDA0|compute capability" "$out/llama-bench.err" | head -4 | tee -a "$summary"
fi
step done
