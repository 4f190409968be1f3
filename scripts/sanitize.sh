#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own build
# directory (build-asan): ctest -LE 'gpu|large'. Run before resolving an issue (not part of CI).
#   scripts/sanitize.sh [ctest args…]     e.g. scripts/sanitize.sh -R test_core
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${QS_ASAN_BUILD:-$root/build-asan}
python=${QS_PYTHON:-$root/.venv/bin/python}
[[ -x $python ]] || python=$(command -v python3)
# CUDA off: the sanitizers instrument host code, and CUDA's runtime is not ASan-clean on a
# machine without a GPU driver.
# QS_GUI=ON: the whole CPU suite, GUI tests included (offscreen). QS_SANITIZE_NICE (default 15)
# and QS_SANITIZE_JOBS (default nproc) for a shared machine.
# QS_CPU_AVX2=OFF: the x86-64 baseline (cmake/QsCpuIsa.cmake). The sanitizers check the code, not
# the instruction set, and the Debug objects stay valid across that option's default.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DQS_SANITIZE=ON -DQS_CUDA=OFF -DQS_GUI=ON -DQS_CPU_AVX2=OFF \
      -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g" -DQS_PYTHON="$python" >/dev/null
nice -n "${QS_SANITIZE_NICE:-15}" cmake --build "$build" -j "${QS_SANITIZE_JOBS:-$(nproc)}"
cd "$build"
# Tests that wait on work of their own (GUI jobs, child processes) give it longer under the
# sanitizers when they see this.
export QS_SANITIZED=1
# detect_leaks: Qt's and fontconfig's one-time allocations are suppressed in lsan.supp.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export LSAN_OPTIONS=suppressions=$root/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest -LE 'gpu|large' --output-on-failure -j "${QS_SANITIZE_JOBS:-$(nproc)}" --timeout 1800 "$@"
