#!/usr/bin/env bash
# Run ChainerMN's MNIST example scripts (examples/chainermn_scripts, unchanged) again and again under
# `srun -N2` on a simulated Slurm cluster, keeping every run's output, and catch hangs: a run past
# DUMP_AT seconds gets its ranks' stacks dumped (py-spy if installed in .venv, gdb, /proc/PID/stack)
# into OUT/<tag>/hang-dump, and is cancelled at KILL_AT. One line per run goes to OUT/summary.tsv:
# tag, script, ranks, seconds, srun's status (or "killed"), whether the log has epochs 1-3, load.
# BENCHMARKS.md section 14 was measured with it.
#
#   scripts/simcluster.sh up --slurm --nodes 2 --name NAME
#   flock -s /tmp/mnframe-quiet.lock scripts/soak_chainermn_srun.sh NAME OUT ROUNDS [LOAD]
#   scripts/simcluster.sh down --name NAME
#
# A round runs train_mnist.py (-n2), the same with --communicator flat (-n2),
# train_mnist_model_parallel.py (-n2) and train_mnist_dual_parallel.py twice (-n4: 3 ranks on node1,
# 1 on node2), each through `python -m mnframe.compat`. LOAD busy loops (`yes`) run meanwhile.
# Environment: ONLY=dual (only the dual-parallel script), MPI_FIRST=1 (the dual-parallel script with
# `from mpi4py import MPI` put before `import mnframe as chainermn`, run by plain python: MPI starts
# before mnframe, with MPICH's default netmod), SRUN_ARGS (extra srun arguments), DUMP_AT (100),
# KILL_AT (200).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=$1; OUT=$2; ROUNDS=$3; LOAD=${4:-0}
DUMP_AT=${DUMP_AT:-100}; KILL_AT=${KILL_AT:-200}
PY=$ROOT/.venv/bin/python
SCRIPTS=$ROOT/examples/chainermn_scripts
mkdir -p "$OUT"
export SLURM_CONF=/tmp/simcluster-$NAME/slurm.conf PYTHONPATH=$ROOT PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
unset MPIR_CVAR_CH4_NETMOD FI_PROVIDER
[ -f "$SLURM_CONF" ] || { echo "soak: cluster $NAME is not up with Slurm (scripts/simcluster.sh up --slurm --name $NAME)" >&2; exit 2; }

if [ "${MPI_FIRST:-0}" = 1 ]; then  # MPI first, mnframe second: the case docs/multi_node.md describes
  sed 's/^import chainermn$/from mpi4py import MPI  # noqa: F401 - MPI starts before mnframe\nimport mnframe as chainermn/; s/^import chainermn\.\(datasets\|functions\)$/import mnframe.\1/' \
    "$SCRIPTS/train_mnist_dual_parallel.py" >"$OUT/mpi_first_dual_parallel.py"
fi

dump() {  # the stacks of every process of the run (its --out directory is in their command line)
  local d=$1 srun_pid=$2 p
  echo "== dump at $(date -u +%T); load $(cat /proc/loadavg)"
  for p in $(pgrep -f -- "--out $d/result"); do
    [ "$p" = "$srun_pid" ] || [ "$(cat /proc/"$p"/comm 2>/dev/null)" = srun ] && continue
    echo "=== pid $p $(tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep '^SLURM_PROCID=')"
    cat /proc/"$p"/stack 2>/dev/null | head -20
    [ -x "$ROOT/.venv/bin/py-spy" ] && timeout 30 "$ROOT/.venv/bin/py-spy" dump --native --pid "$p" 2>&1 | head -150
    command -v gdb >/dev/null && timeout 30 gdb -p "$p" -batch -ex "thread apply all bt 25" 2>/dev/null | grep -v '^\[' | head -200
  done
}

one() {  # one <tag> <ranks> <script path> [args...]
  local tag=$1 n=$2 script=$3; shift 3
  local d=$OUT/$tag launch=("$PY" -m mnframe.compat "$script")
  [ "${MPI_FIRST:-0}" = 1 ] && launch=("$PY" "$script")
  rm -rf "$d"; mkdir -p "$d"
  local start; start=$(date +%s.%N)
  # shellcheck disable=SC2086
  (cd "$d" && exec srun ${SRUN_ARGS:-} -N2 -n"$n" -J "soak-$tag" "${launch[@]}" --out "$d/result" --epoch 3 "$@" >"$d/stdout" 2>"$d/stderr") &
  local pid=$! dumped=0 status el
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; status=$?; break; fi
    el=$(echo "$(date +%s.%N) - $start" | bc)
    if [ $dumped = 0 ] && [ "$(echo "$el > $DUMP_AT" | bc)" = 1 ]; then dumped=1; dump "$d" "$pid" >"$d/hang-dump" 2>&1; fi
    if [ "$(echo "$el > $KILL_AT" | bc)" = 1 ]; then
      scancel -n "soak-$tag"; sleep 2; kill -9 "$pid" 2>/dev/null; wait "$pid"; status=killed; break
    fi
    sleep 0.2
  done
  el=$(echo "$(date +%s.%N) - $start" | bc)
  local ok=no
  [ -f "$d/result/log" ] && ok=$("$PY" -c "import json,sys; l=json.load(open(sys.argv[1])); print('yes' if [e['epoch'] for e in l]==[1,2,3] else 'partial')" "$d/result/log")
  printf "%s\t%s\t-n%s\t%.1f\t%s\t%s\tdumped=%s\tload=%s\n" "$tag" "$(basename "$script") $*" "$n" "$el" "$status" "$ok" "$dumped" "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$OUT/summary.tsv"
}

busy=()
for _ in $(seq 1 "$LOAD"); do (exec yes >/dev/null) & busy+=($!); done
trap 'for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done' EXIT
for r in $(seq 1 "$ROUNDS"); do
  if [ "${MPI_FIRST:-0}" = 1 ]; then
    one "r$r-mpi-first" 4 "$OUT/mpi_first_dual_parallel.py"
    continue
  fi
  if [ "${ONLY:-}" != dual ]; then
    one "r$r-mnist" 2 "$SCRIPTS/train_mnist.py"
    one "r$r-flat" 2 "$SCRIPTS/train_mnist.py" --communicator flat
    one "r$r-model" 2 "$SCRIPTS/train_mnist_model_parallel.py"
  fi
  one "r$r-dual-a" 4 "$SCRIPTS/train_mnist_dual_parallel.py"
  one "r$r-dual-b" 4 "$SCRIPTS/train_mnist_dual_parallel.py"
done
