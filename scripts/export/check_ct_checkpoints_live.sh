#!/usr/bin/env bash
# compressed-tensors checkpoints written live by the installed compressed-tensors
# (make_ct_checkpoints.py), read by Quantscope: test_core_export's ctCheckpointsFromCompressedTensors
# on them instead of the committed tests/data/ct_ref.
#   check_ct_checkpoints_live.sh TEST_CORE_EXPORT HF_PYTHON
# Exit 77 (ctest: skipped) without transformers + compressed-tensors.
set -uo pipefail
test=$1 hfpy=${2:-}
root=$(cd "$(dirname "$0")/../.." && pwd)
if [[ -z $hfpy ]] || ! "$hfpy" -c 'import transformers, compressed_tensors' 2>/dev/null; then
  echo "SKIP: no transformers + compressed-tensors (configure with -DQS_HF_PYTHON=...)" >&2; exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$hfpy" "$root/scripts/export/make_ct_checkpoints.py" "$work" >/dev/null 2>"$work.log" || { cat "$work.log" >&2; exit 1; }
QS_CT_REF_DIR=$work "$test" ctCheckpointsFromCompressedTensors
