#!/usr/bin/env bash
# Tiny random models written by the installed transformers (make_tiny_hf_models.py: Llama,
# Mistral, Qwen2, Qwen3, Gemma, Gemma 2, Phi-3, GPT-2, BERT with an int64 position_ids buffer and
# a WordPiece tokenizer) exported to every format; check_export_tensor_lists.py compares the
# tensor lists source → export.
#   check_tensor_lists_live.sh QUANTSCOPE_CLI HF_PYTHON PYTHON
# Exit 77 (ctest: skipped) when HF_PYTHON is empty or has no transformers.
set -uo pipefail
cli=$1 hfpy=${2:-} py=${3:-python3}
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -z $hfpy ]] || ! "$hfpy" -c 'import transformers, torch' 2>/dev/null; then
  echo "SKIP: no transformers (configure with -DQS_HF_PYTHON=...)" >&2; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$hfpy" "$root/scripts/export/make_tiny_hf_models.py" "$work/models" >/dev/null 2>"$work/make.log" ||
  { cat "$work/make.log" >&2; exit 1; }
"$py" "$root/tests/python/check_export_tensor_lists.py" "$cli" "$work/out" "$work"/models/*
