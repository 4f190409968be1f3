# Sourced by the device scripts: a summary log under $out and its step markers.
#   summary=$out/summary.txt (emptied); step "text" writes "== text (time)"; has NAME is true when
#   NAME is among $steps; device_header writes the GPU, driver, clocks and memory first.
summary=$out/summary.txt
: >"$summary"
step() { echo "== $* ($(date +%T))" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }
device_header() {
  step device
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv | tee -a "$summary"
}
