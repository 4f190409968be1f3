#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build
# directory (build-asan). Run before resolving an issue; CI runs it when time allows.
#   scripts/sanitize.sh [ctest args…]     e.g. scripts/sanitize.sh -R test_core
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${QS_ASAN_BUILD:-$root/build-asan}
python=${QS_PYTHON:-$root/.venv/bin/python}
[[ -x $python ]] || python=$(command -v python3)
# CUDA off: the sanitizers instrument host code, and CUDA's runtime is not ASan-clean on a
# machine without a GPU driver.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DQS_SANITIZE=ON -DQS_CUDA=OFF \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DQS_PYTHON="$python" >/dev/null
cmake --build "$build" -j "$(nproc)"
cd "$build"
# detect_leaks: Qt's and fontconfig's one-time allocations are suppressed in lsan.supp.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest -LE gpu --output-on-failure -j "$(nproc)" --timeout 1800 "$@"
