# Sourced by the device scripts: a summary log under $out and its step markers.
#   summary=$out/summary.txt (emptied); step "text" writes "== text (time)"; has NAME is true when
#   NAME is among $steps; device_header writes the GPU, driver, clocks and memory first;
#   unpack_pack SOURCE_ROOT unpacks the carried binaries (below); run_test BINARY SECONDS PATTERN
#   runs one test program into $out/NAME.log and copies its rc and the PATTERN lines to the summary.
summary=$out/summary.txt
: >"$summary"
step() { echo "== $* ($(date +%T))" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }
device_header() {
  step device
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee -a "$summary"
  clock_log_start
}

# The SM clock through the call, every 250 ms, into /tmp (not $out: only a few files come back);
# at exit one line in the summary says how much of the loaded time ran below the maximum. The
# H200's clock dips to ~1,400-1,490 MHz for fractions of a second under dense tensor-core load
# and differs between machines, which moves compute-bound timings and the GEMVs' fixed phases
# (docs/gemm.md, "Paired timing"; docs/benchmarks.md, session 42).
clock_log_start() {
  command -v nvidia-smi >/dev/null || return 0
  clock_csv=/tmp/qs_clocks.csv
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader,nounits \
    -lms 250 >"$clock_csv" 2>/dev/null &
  clock_pid=$!
  trap clock_log_stop EXIT
}
clock_log_stop() {
  [[ -n ${clock_pid:-} ]] || return 0
  kill "$clock_pid" 2>/dev/null
  wait "$clock_pid" 2>/dev/null
  # Loaded samples: above 500 MHz (idle reads 345).
  awk -F', *' '$2 > 500 { n++; if ($2 >= $3) top++; else { below++; if (!lo || $2 < lo) lo = $2 } }
    END { if (n) printf "SM clock: %d loaded samples of 250 ms, %.1f %% at its maximum, %d below%s\n",
                        n, 100 * top / n, below, below ? sprintf(" (lowest %d MHz)", lo) : "" }' "$clock_csv" | tee -a "$summary"
  clock_pid=
}

# The binaries and libraries carried as .carry/pack.tar.xz (bin/ + libs/) unpacked into /tmp/pack;
# the test binaries recorded SOURCE_ROOT (datasets, fixtures) at build time, so the checkout is
# linked there when it lives elsewhere.
unpack_pack() {
  local src=$1 here
  here=$(pwd)
  mkdir -p /tmp/pack
  tar -C /tmp/pack -xJf .carry/pack.tar.xz
  if [[ "$here" != "$src" && ! -e "$src" ]]; then mkdir -p "$(dirname "$src")"; ln -s "$here" "$src"; fi
  export LD_LIBRARY_PATH=/tmp/pack/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
}

run_test() {
  local binary=$1 limit=$2 pattern=$3 name t0=$SECONDS
  name=$(basename "$binary")
  step "$name"
  timeout "$limit" "$binary" >"$out/$name.log" 2>&1
  echo "$name rc=$? ($((SECONDS - t0)) s)" | tee -a "$summary"
  grep -E "$pattern" "$out/$name.log" | head -80 | tee -a "$summary"
}
