#!/usr/bin/env bash
# Search sweeps that fit one device call: each group of problems is its own `bot optimize` run
# writing under $OUT/sweepN, so a call cut off at its limit still returns every finished group.
#
#   bash benchmarks/search_sweep.sh BUDGET_S "problems/softmax.py problems/gelu.py" "problems/swiglu.py" ...
#
# DEVICE (default cuda), TIMING (default graph), CAP_S (default 3) and JOBS (default: the group's size) as for the sweep.
set -u
budget=$1; shift
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv > "$OUT/machine.txt" 2>&1
g=0
for group in "$@"; do
  g=$((g + 1))
  left=$(( budget - ($(date +%s) - t0) ))
  if [ "$left" -lt 60 ]; then echo "group $g: not started, ${left} s left" | tee -a "$OUT/groups.log"; continue; fi
  n=$(wc -w <<< "$group")
  s=$(date +%s)
  timeout "$left" python3 -m bot optimize $group --strategy search --device "${DEVICE:-cuda}" --jobs "${JOBS:-$n}" \
      --time-cap-s "${CAP_S:-3}" --timing "${TIMING:-graph}" --no-cache --out "$OUT/sweep$g" \
      > "$OUT/sweep$g.txt" 2> "$OUT/sweep$g.err"
  echo "group $g ($group): rc=$? after $(( $(date +%s) - s )) s" | tee -a "$OUT/groups.log"
  rm -rf "$OUT/sweep$g/candidates" "$OUT/sweep$g/transcripts"
  grep -h "^==\|BEST\|rejected" "$OUT/sweep$g.txt"
done
