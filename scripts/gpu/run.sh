#!/usr/bin/env bash
# On the GPU machine, in the repository root of the copied working tree, after the .carry/
# folders travelled: recreates the build tree at the absolute path the ctest files recorded,
# then runs the command given (default: the gpu-labelled tests).
# Usage: scripts/gpu/run.sh SOURCE_ROOT [command…]   (SOURCE_ROOT as printed by stage.sh)
set -euo pipefail
src=$1; shift
here=$(pwd)
if [[ "$here" != "$src" ]]; then
  mkdir -p "$(dirname "$src")"
  [[ -e "$src" ]] || ln -s "$here" "$src"
fi
# QS_BUILD_NAME: the build folder's name in the ctest files (build-gpu unless staged from another)
bname=${QS_BUILD_NAME:-build-gpu}
ln -sfn "$here/.carry/build-gpu" "$here/$bname"
export LD_LIBRARY_PATH="$here/.carry/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="$here/$bname/bin:$PATH"
cd "$src/$bname"
if (($#)); then "$@"; else ctest -L gpu --output-on-failure; fi
