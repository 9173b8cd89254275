#!/usr/bin/env bash
# Reproduce the README's test figures: in a fresh clone of this checkout's HEAD and a fresh venv,
# time the README's test command (the fast tier) and, with --full, the whole suite.
#
#   bash scripts/test_times.sh                 # Python 3 on PATH (PYTHON=python3.13 for another)
#   bash scripts/test_times.sh --full          # also `pytest -q --full` (long: the whole suite)
#   MAX_FAST=180 bash scripts/test_times.sh    # fail when the fast tier's pytest time exceeds it (default 240)
#   MAX_FULL=1800                              # the same for --full (default 1800 s)
#   PYTHON=python3.13 bash scripts/test_times.sh   # another interpreter (scripts/setup.sh reads PYTHON)
#
# Prints one line per figure: set-up seconds, pytest seconds, passed/failed counts. Exits non-zero
# when a command fails, the fast tier is over MAX_FAST seconds or under MIN_PASSED (default 500)
# passes, or the full tier is over MAX_FULL seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
MAX_FAST=${MAX_FAST:-240}
MIN_PASSED=${MIN_PASSED:-500}
MAX_FULL=${MAX_FULL:-1800}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/clone"
cd "$WORK/clone"

start=$SECONDS
bash scripts/setup.sh >"$WORK/setup.log" 2>&1 || { tail -20 "$WORK/setup.log"; exit 1; }
setup_s=$((SECONDS - start))

timed() {  # timed NAME ARGS...: run pytest, print its figures
  local name=$1 rc=0 line
  shift
  start=$SECONDS
  .venv/bin/python -m pytest -q "$@" >"$WORK/$name.log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  line=$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* in ' "$WORK/$name.log" | tail -1)
  echo "test_times: $name: $took s, exit $rc: $line ($(.venv/bin/python -c 'import sys; print(sys.version.split()[0])'))"
  [ "$rc" -eq 0 ] || { tail -40 "$WORK/$name.log"; return 1; }
  if [ "$name" = fast ]; then
    local passed
    passed=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
    [ "$took" -le "$MAX_FAST" ] || { echo "test_times: the fast tier took $took s > $MAX_FAST s"; return 1; }
    [ "$passed" -ge "$MIN_PASSED" ] || { echo "test_times: the fast tier passed $passed < $MIN_PASSED"; return 1; }
  fi
  if [ "$name" = full ]; then
    [ "$took" -le "$MAX_FULL" ] || { echo "test_times: the full tier took $took s > $MAX_FULL s"; return 1; }
  fi
}

echo "test_times: setup: $setup_s s (bash scripts/setup.sh, fresh clone and venv)"
timed fast
if [ "${1:-}" = --full ]; then timed full --full; fi
