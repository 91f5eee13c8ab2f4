#!/usr/bin/env bash
# The killed-worker tests of tests/test_faults.py, repeated under an induced load: a loaded
# machine restarts a sweep's workers slowly, and the sweep's no-worker verdict
# (pipeline/cluster/liveness.py) once stopped such a sweep ("no worker for 61 s") 2 s after a
# restarted worker registered. Starts PER_CORE busy processes per core (4 by default: load
# about 4 x the cores), waits for the 1-minute load average to climb, runs the tests RUNS
# times (10 by default), then ends the busy processes (on exit and on Ctrl-C too). Run from
# the repository's root, on a machine with nothing else to measure (it keeps every core busy):
#   bash scripts/load_check.sh [RUNS] [PER_CORE]
# LOAD_CHECK_TESTS: the tests' -k expression; LOAD_CHECK_OUT: where each run's log goes.
# Prints one line a run and "passed N/RUNS"; exits 0 only if every run passed.
set -uo pipefail
runs=${1:-10}
per_core=${2:-4}
tests=${LOAD_CHECK_TESTS:-"killed_by_a_signal_fails_with_its_cause or killed_for_memory"}
out=${LOAD_CHECK_OUT:-/tmp/load_check}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
cores=$(python3 -c "import os; print(os.cpu_count() or 1)")
busy=()
stop_busy() {
  for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done
  wait "${busy[@]}" 2>/dev/null
}
trap stop_busy EXIT
trap 'exit 130' INT TERM
for _ in $(seq $((cores * per_core))); do
  python3 -c "while True: pass" &
  busy+=($!)
done
echo "started ${#busy[@]} busy processes on $cores cores; waiting for the load to climb"
for _ in $(seq 60); do  # at most 2 minutes: the 1-minute average reaches ~63% in one minute
  awk -v want=$((cores * per_core * 3 / 4)) '{exit !($1 >= want)}' /proc/loadavg && break
  sleep 2
done
passed=0
for i in $(seq "$runs"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s)
  if python3 -m pytest -q -p no:xdist -p no:randomly -p no:cacheprovider tests/test_faults.py \
      -k "$tests" > "$out/run_$i.log" 2>&1; then
    verdict=passed
    passed=$((passed + 1))
  else
    verdict="FAILED (log: $out/run_$i.log)"
  fi
  lost=$(grep -o "no worker for [^:]*" "$out/run_$i.log" | head -1)
  echo "run $i/$runs: $verdict in $(( $(date +%s) - t0 )) s at load $load${lost:+; $lost}"
done
echo "passed $passed/$runs at about $per_core x $cores cores of load"
[ "$passed" -eq "$runs" ]
