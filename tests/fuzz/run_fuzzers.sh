#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 + AddressSanitizer in their own build directory and
# runs each on its seed corpus for SECONDS seconds (default 30).
#
#   tests/fuzz/run_fuzzers.sh [SECONDS] [TARGET...]
#       targets: gguf safetensors llama2c tokenizer plan session (default: all)
#
# Environment: QS_FUZZ_BUILD (default build-fuzz), QS_FUZZ_JOBS (build jobs, default nproc),
# QS_FUZZ_NO_BUILD=1 (run what is built), QS_FUZZ_NICE (niceness of the runs, default 0).
# New inputs are kept in $QS_FUZZ_BUILD/corpus/<target> (the committed seeds stay untouched);
# crash reproducers land in $QS_FUZZ_BUILD/findings/<target>/. Exit status 1 on any finding.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-30}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(gguf safetensors llama2c tokenizer plan session)
build=${QS_FUZZ_BUILD:-$root/build-fuzz}
jobs=${QS_FUZZ_JOBS:-$(nproc)}

command -v clang++-14 >/dev/null || { echo "run_fuzzers.sh: clang++-14 is required (apt-get install clang-14)" >&2; exit 2; }
flags="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer -g -O1"
if [[ ${QS_FUZZ_NO_BUILD:-0} != 1 ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
        -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
        -DQS_FUZZ=ON -DQS_GUI=OFF -DQS_TESTS=OFF -DQS_CUDA=OFF >/dev/null
  cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"
fi

status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  echo "== fuzz_$t for ${seconds}s"
  # -rss_limit_mb: an allocation sized by a file's claim shows up as an OOM finding.
  asan=detect_leaks=1
  malloc_limit=1024
  if [[ $t == session ]]; then
    # libhdf5 (1.10) sizes a metadata-cache buffer from the file's claim (up to terabytes) and
    # only then finds the claim runs past the file's end: it frees the buffer untouched, or
    # gets NULL and fails the open (the CLI refuses such a file with exit 2 at 18 MB; the case
    # bad_corpus2.session_hdf5_metadata_size runs it under the 500 MB data limit). So here a
    # failed malloc returns NULL as it does outside ASan, and only memory actually used counts
    # (-rss_limit_mb); our own reader sizes nothing before checking it against the file.
    asan=$asan:allocator_may_return_null=1
    malloc_limit=$((1 << 20))
    export LSAN_OPTIONS=suppressions=$root/tests/fuzz/lsan_session.supp:print_suppressions=0
  fi
  # The session target runs in fork mode and goes on after a crash: libhdf5 1.10 crashes on some
  # corrupt files inside the library, which the product contains by parsing sessions in a child
  # process (core/session/session.cpp) but the fuzzer, parsing in process, cannot. Each crash is
  # replayed below; only one without libhdf5 on its stack is a finding of ours.
  mode=()
  [[ $t == session ]] && mode=(-fork=1 -ignore_crashes=1 -ignore_ooms=0 -ignore_timeouts=0)
  rm -f "$findings"/crash-*
  run() {
    QS_DATASETS="$root/datasets" ASAN_OPTIONS=$asan nice -n "${QS_FUZZ_NICE:-0}" "$build/bin/fuzz_$t" \
      -rss_limit_mb=2048 -malloc_limit_mb=$malloc_limit -max_len=65536 -timeout=10 "$@"
  }
  # In fork mode libFuzzer's own exit status follows the crashes it went on after (1 or 0 from
  # one run to the next), so there the replays below decide, not the status.
  rc=0
  run "${mode[@]}" -max_total_time="$seconds" -artifact_prefix="$findings/" -print_final_stats=1 \
      "$corpus" "$root/tests/fuzz/corpus/$t" >"$build/fuzz_$t.log" 2>&1 || rc=$?
  if ((rc != 0)) && [[ $t != session ]]; then
    echo "fuzz_$t: FINDING (see $build/fuzz_$t.log and $findings/)" >&2
    tail -40 "$build/fuzz_$t.log" >&2
    status=1
    continue
  fi
  for c in "$findings"/crash-*; do
    [[ -e $c ]] || continue
    # The replay's output first: under pipefail, `run | grep -q` would take the replay's own
    # (crash) status and call every crash ours.
    replay=$(run "$c" 2>&1 || true)
    if grep -q "libhdf5_serial" <<<"$replay"; then
      echo "fuzz_$t: $(basename "$c"): a crash inside libhdf5 (contained by the child process in the product)"
    elif ! grep -qE "ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer)|deadly signal|runtime error" <<<"$replay"; then
      # Fork mode runs many inputs per process: a libhdf5 over-read can depend on what earlier
      # inputs left on the heap, and then the input alone is clean. Kept for inspection.
      echo "fuzz_$t: $(basename "$c"): does not reproduce alone (kept in $findings for inspection)"
    else
      echo "fuzz_$t: FINDING $(basename "$c") (replay: $build/bin/fuzz_$t $c)" >&2
      status=1
    fi
  done
  # (fork mode prints no final stats: nothing to show is not a failure)
  grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/fuzz_$t.log" | tr '\n' ' ' || true
  echo
done
exit $status
