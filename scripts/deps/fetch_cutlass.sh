#!/usr/bin/env bash
# Fetches CUTLASS's headers (the PyPI wheel nvidia-cutlass, SHA-256 checked) into a cache —
# never into the repository — and prints the folder that holds include/ and tools/util/include/.
# The Hopper wide-path GEMM (kernels/cuda/gemm/gemm_hopper.cu) is built only when these exist
# (kernels/gemm/CMakeLists.txt looks here, or where QS_CUTLASS_DIR says).
#   scripts/deps/fetch_cutlass.sh      → ~/.cache/quantscope/cutlass/4.2.0.0
# QS_CACHE (default ~/.cache/quantscope). Exit 1 when it cannot be fetched (no network, say).
set -euo pipefail
version=4.2.0.0
want=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
root=${QS_CACHE:-$HOME/.cache/quantscope}/cutlass
out=$root/$version
if [[ ! -f $out/include/cutlass/cutlass.h ]]; then
  mkdir -p "$root/wheels"
  python3 -m pip download -q --no-deps --only-binary :all: -d "$root/wheels" "nvidia-cutlass==$version" >&2
  python3 - "$root/wheels/nvidia_cutlass-$version-py3-none-any.whl" "$out" "$want" <<'PY'
import hashlib, os, shutil, sys, zipfile
whl, out, want = sys.argv[1:4]
with open(whl, "rb") as f:
    got = hashlib.sha256(f.read()).hexdigest()
if got != want:
    sys.exit(f"nvidia-cutlass: SHA-256 {got} is not {want}")
tmp = out + ".part"
shutil.rmtree(tmp, ignore_errors=True)
prefix = "cutlass_library/source/"
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        rel = name[len(prefix):] if name.startswith(prefix) else None
        if rel and (rel.startswith("include/") or rel.startswith("tools/util/include/") or rel == "LICENSE.txt") and not name.endswith("/"):
            dst = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(name) as src, open(dst, "wb") as d:
                shutil.copyfileobj(src, d)
shutil.rmtree(out, ignore_errors=True)
os.replace(tmp, out)
PY
fi
echo "$out"
