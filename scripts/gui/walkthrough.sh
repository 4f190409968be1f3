#!/usr/bin/env bash
# The app as a new user would take it, scripted: open -> layer -> calibrate -> sensitivity ->
# auto plan -> run -> speed -> export -> autoquant -> report -> reopen, one screenshot per step (PNG) and the
# HTML report, under Xvfb (or the display you have with QS_DISPLAY=1).
#
#   scripts/gui/walkthrough.sh MODEL [OUTDIR] [-- extra quantscope options]
#   scripts/gui/walkthrough.sh MODEL OUTDIR -- --walkthrough-steps 01,08b,08c,08d   # the autoquant dialog alone
#
# Environment: QS_BIN (default build/bin/quantscope), QS_WT_FORMATS (sweep formats, default
# "int4-g32-sym,int4-ch-sym,int8-ch-sym": three, because a CPU sweep of SmolLM2-135M takes minutes per format),
# QS_WT_TOKENS (evaluation tokens, default 256). Settings and sessions go to a fresh temporary
# home, so the run starts as a first start would and leaves the user's own alone.
# Exit: 0 when every step finished; 2 naming the step that failed (its screenshot *-FAILED.png).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
model=${1:?usage: walkthrough.sh MODEL [OUTDIR] [-- quantscope options]}
shift
out=${1:-walkthrough-$(basename "$model")}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == -- ]] && shift
bin=${QS_BIN:-$here/build/bin/quantscope}
[[ -x $bin ]] || { echo "walkthrough.sh: $bin not built (cmake --build build --target quantscope)" >&2; exit 2; }
[[ -e $model ]] || { echo "walkthrough.sh: $model: no such model file" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
export HOME=$home XDG_CONFIG_HOME=$home/.config XDG_DATA_HOME=$home/.local/share
args=("$model" --walkthrough "$out" --walkthrough-formats "${QS_WT_FORMATS:-int4-g32-sym,int4-ch-sym,int8-ch-sym}"
      --walkthrough-tokens "${QS_WT_TOKENS:-256}" "$@")
start=$(date +%s)
if [[ -n ${QS_DISPLAY:-} ]]; then
  "$bin" "${args[@]}"
else
  xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" "${args[@]}"
fi
rc=$?
echo "walkthrough.sh: $(( $(date +%s) - start )) s, screenshots in $out:" >&2
ls -1 "$out" >&2
exit $rc
