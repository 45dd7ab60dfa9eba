#!/usr/bin/env bash
# The whole GPU evidence plan (docs/verifier.md, docs/benchmark.md, docs/results-h200.md) as
# one detached job on the H200. A device call returns after at most 10 minutes, so the plan
# runs in its own session (setsid) and each call waits on it and packs what exists so far:
#
#   run(command="bash ci/evidence/h200_session.sh start 560", carry=[".whl"])
#   run(command="bash ci/evidence/h200_session.sh wait 580")      (again until it says ALLDONE)
#
# .whl holds PyGithub, junit-xml and their missing needs (cp312 wheels) and git.deb (a
# fallback for a machine without git); docs/results-h200.md has the download commands.
# Stages, by default in this order, each alone on the GPU: A/A repeats, the labeled-PR-to-follow-up-PR run,
# the GPU tests (each bundled problem's own check is left to the sweep, which verifies them
# all), a worker start-up profile, candidates per GPU-minute on rmsnorm's decode shape, the
# catalogue's newer paths on the problems they may win (STAGES=paths), the searches the
# replacement kernels may win and their probe (STAGES=replacements), then the search sweep
# over every problem, which gets what is left of BUDGET_S (counted from the plan's start).
set -u
EV=/tmp/ev
DEVICE=${DEVICE:-cuda}
export TIMING=${TIMING:-latency}  # latency | throughput | graph (bot.timing.TimingOptions.mode)
# AA_TIMING: the A/A stage's modes, a comma list (default latency,throughput).
# TPUT_TIMING: the candidates-per-GPU-minute stage's own mode (default: TIMING).
# Which stages, run in the order named (a session's 30 minutes do not hold them all at once).
STAGES=${STAGES:-aa event_to_pr gpu_tests profile throughput paths replacements sweep}
BUDGET_S=${BUDGET_S:-1420}  # from the plan's start; the session's device time is 1800 s

pack() {
  tar czf "$OUT/ev.tgz" -C /tmp --exclude='ev/e2p/github' --exclude='ev/e2p/workspace' \
      --exclude='ev/e2p/main' --exclude='*/candidates' --exclude='*/transcripts' ev 2>/dev/null
  cat $EV/stages.log 2>/dev/null
}

case "${1:-}" in
start)
  mkdir -p $EV
  date +%s > $EV/t0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl > $EV/pip.log 2>&1 || echo "wheels did not install" >> $EV/pip.log
  if ! command -v git > /dev/null; then mkdir -p /tmp/gitroot && dpkg -x .whl/git.deb /tmp/gitroot; fi
  setsid nohup bash ci/evidence/h200_session.sh plan > $EV/plan.log 2>&1 < /dev/null &
  sleep 2
  exec bash ci/evidence/h200_session.sh wait "${2:-560}"
  ;;
plan)
  # /tmp/site: the carried wheels; only the PR-flow stage needs them (the rest must run without).
  export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
  if [ -x /tmp/gitroot/usr/bin/git ]; then
    export PATH=/tmp/gitroot/usr/bin:$PATH GIT_EXEC_PATH=/tmp/gitroot/usr/lib/git-core
  fi
  t0=$(cat $EV/t0)
  stage() {  # stage NAME TIMEOUT_S COMMAND...: run it, log its exit code and duration
    local name=$1 limit=${SMOKE_LIMIT_S:-$2}; shift 2  # SMOKE_LIMIT_S: a quick check of this script on CPU
    local t=$(date +%s)
    echo "$(date -u +%T) $name: started (limit ${limit} s)" >> $EV/stages.log
    timeout "$limit" "$@"
    local rc=$?  # before any other expansion resets it (124: stopped at the limit)
    echo "$(date -u +%T) $name: rc=$rc after $(( $(date +%s) - t )) s" >> $EV/stages.log
  }
  { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw \
        --format=csv; nproc; git --version; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  } > $EV/machine.txt 2>&1
  # One function per stage; they run in the order STAGES names them.
  run_aa() {  # several timing modes (docs/benchmark.md: what each holds)
    stage aa ${AA_LIMIT_S:-330} python3 ci/evidence/verifier_benchmark.py --device $DEVICE --out $EV \
        --aa-repeats 2 --copies 2 --cap-s 3 --timing ${AA_TIMING:-latency,throughput} --problems ${AA_PROBLEMS:-rmsnorm,softmax} \
        > $EV/aa.log 2>&1
  }
  run_event_to_pr() {
    PYTHONPATH=$PWD:/tmp/site stage event_to_pr 420 python3 ci/evidence/event_to_pr.py --device $DEVICE \
        --out $EV/e2p > $EV/e2p.log 2>&1
  }
  run_gpu_tests() {  # alone on the GPU: beside the sweep a test once failed for want of memory
    stage gpu_tests ${GPU_TESTS_LIMIT_S:-240} python3 -m pytest tests/test_gpu.py -q -p no:cacheprovider \
        -k "${GPU_TESTS_K:-not every_bundled_problem}" > $EV/gpu_tests.log 2>&1
  }
  run_profile() {  # where a worker's start-up goes (docs/benchmark.md)
    stage profile 150 python3 ci/evidence/worker_start_profile.py --counts ${PROFILE_COUNTS:-1,8,29} \
        --device $DEVICE > $EV/profile.txt 2>&1
  }
  run_throughput() {
    # Candidates per GPU-minute on a small problem: rmsnorm's launch-bound decode shape, every candidate.
    stage throughput 150 python3 -m bot optimize problems/rmsnorm.py --shapes decode --strategy search \
        --device $DEVICE --time-cap-s 1 --timing ${TPUT_TIMING:-$TIMING} --no-cache --out $EV/tput > $EV/tput.txt 2> $EV/tput.err
  }
  run_paths() {  # the catalogue's per-shape compiles and SDPA backends, where they may win
    stage path_probe 90 python3 ci/evidence/path_probe.py > $EV/path_probe.txt 2>&1
    stage paths ${PATHS_LIMIT_S:-420} python3 -m bot optimize problems/causal_attention.py problems/transpose.py \
        problems/layernorm.py --strategy search --device $DEVICE --jobs 3 --time-cap-s 2 --timing $TIMING \
        --no-cache --out $EV/paths > $EV/paths.txt 2> $EV/paths.err
  }
  run_replacements() {  # the catalogue's replacement kernels: the searches they may win, then their configurations
    stage replacements ${REPLACEMENTS_LIMIT_S:-420} python3 -m bot optimize problems/causal_attention.py problems/gelu.py \
        --strategy search --device $DEVICE --jobs 2 --time-cap-s 3 --timing $TIMING --no-cache --out $EV/replacements \
        > $EV/replacements.txt 2> $EV/replacements.err
    stage replacement_probe 240 python3 ci/evidence/probe_replacement_kernels.py --out $EV/replacement-kernels.json \
        > $EV/replacement_probe.txt 2>&1
  }
  run_sweep() {  # what is left of BUDGET_S, at least 120 s
    local left=$(( BUDGET_S - ($(date +%s) - t0) ))
    [ "$left" -lt 120 ] && left=120
    stage sweep $left python3 -m bot optimize ${SWEEP_PROBLEMS:-problems/*.py} --strategy search --device $DEVICE --jobs 4 \
        --time-cap-s ${SWEEP_CAP_S:-3} --timing $TIMING --no-cache --out $EV/search > $EV/search.txt 2> $EV/search.err
  }
  for name in $STAGES; do
    if declare -F "run_$name" > /dev/null; then "run_$name"; else echo "$(date -u +%T) $name: no such stage" >> $EV/stages.log; fi
  done
  wait
  nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >> $EV/machine.txt 2>&1
  echo "ALLDONE" >> $EV/stages.log
  ;;
wait)
  end=$(( $(date +%s) + ${2:-580} ))
  while [ "$(date +%s)" -lt "$end" ] && ! grep -q ALLDONE $EV/stages.log 2>/dev/null; do sleep 5; done
  tail -n 4 $EV/aa.log $EV/e2p.log $EV/gpu_tests.log 2>/dev/null
  cat $EV/path_probe.txt $EV/replacement_probe.txt 2>/dev/null
  grep -v -E "trial|reference [0-9]" $EV/paths.err $EV/replacements.err $EV/search.err 2>/dev/null | tail -n 8
  pack
  ;;
*)
  echo "usage: $0 start [WAIT_S] | wait [WAIT_S]" >&2; exit 2
  ;;
esac
