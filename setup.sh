#!/usr/bin/env bash
# Quantscope set-up: installs what is missing (Debian 12 packages; Python test packages in .venv),
# configures and builds into build/, then either opens the app or runs the whole test suite.
#
#   ./setup.sh run  [-- app arguments]   build, then open the app on the bundled stories260K
#   ./setup.sh test                      build, then run every CPU test (what CI runs)
#
# Environment: QS_BUILD_DIR (default build), QS_CMAKE_ARGS (extra configure flags),
#              QS_JOBS (parallel build jobs, default: all cores).
set -euo pipefail

mode=${1:-}
shift || true
[[ "${1:-}" == "--" ]] && shift
case "$mode" in run|test) ;; *) echo "usage: $0 run [-- app args] | test" >&2; exit 2 ;; esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${QS_BUILD_DIR:-$root/build}
jobs=${QS_JOBS:-$(nproc)}
say() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

# --- 1. Debian packages ------------------------------------------------------------------------
packages=(build-essential cmake ninja-build ccache pkg-config python3 python3-venv libsentencepiece-dev
          qt6-base-dev qt6-svg-dev libqcustomplot-dev libhdf5-dev libeigen3-dev
          nlohmann-json3-dev libcli11-dev xvfb xauth libgl-dev
          libicu-dev libxxhash-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. Python packages for the tests (independent readers/writers), in a private venv --------
python=""
if [[ $mode == test ]]; then
  venv=$root/.venv
  req=$root/tests/requirements.txt
  stamp=$venv/.requirements.sha256
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ ! -x $venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    say "installing Python test packages into .venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
  fi
  python=$venv/bin/python
fi

# --- 2b. CUTLASS's headers (PyPI wheel, into ~/.cache/quantscope) for the Hopper GEMM ----------
# Only where nvcc is; without them (no network, say) the build goes on without that kernel.
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  "$root/scripts/deps/fetch_cutlass.sh" >/dev/null || say "CUTLASS could not be fetched: no Hopper wide-path GEMM"
fi

# --- 3. Configure and build --------------------------------------------------------------------
say "configuring ($build)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      ${python:+-DQS_PYTHON="$python"} ${QS_CMAKE_ARGS:-} >/dev/null
say "building with $jobs jobs"
cmake --build "$build" -j "$jobs"
say "binaries are in $build/bin: quantscope (the app), quantscope-cli (the command line)"

# --- 4. Run or test ----------------------------------------------------------------------------
if [[ $mode == run ]]; then
  if [[ -z "${DISPLAY:-}" && -z "${WAYLAND_DISPLAY:-}" ]]; then
    say "no display: running the app under xvfb-run"
    exec xvfb-run -a -s "-screen 0 1600x1000x24" "$build/bin/quantscope" "$@"
  fi
  exec "$build/bin/quantscope" "$@"
fi
say "running the test suite (everything but the gpu and large labels)"
cd "$build"
ctest -LE 'gpu|large' --output-on-failure -j "$jobs" --timeout 900
