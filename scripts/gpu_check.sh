#!/usr/bin/env bash
# The GPU check: one command for a GPU machine that reaches no package registry.
#
#     bash scripts/gpu_check.sh [--logs DIR] [--no-install]
#
# Made for: Python 3.12, CuPy 14 for CUDA 13, NumPy 2, pytest, one H100 (any NVIDIA GPU
# works), mpi4py without an MPI library. Bring the wheels along in .whl/ (fill it on a
# machine with the registry: bash scripts/fetch_gpu_wheels.sh, about 20 MiB). Steps, each
# under a time limit so the whole check ends within 9 minutes:
#
#   1 install   the wheels of .whl/ into a private venv that also sees the machine's packages
#               (pip --prefix keeps the mpich wheel's lib/libmpi.so and bin/mpiexec; --target
#               would drop them)
#   2 gpu       versions, and whether CUDA works; without a GPU it stops here, exit 3
#   3 doctor    python -m mnframe doctor, 1 rank and 2 ranks
#   4 resnet50  synthetic ImageNet ResNet-50 training: pure_nccl on 1 rank, then
#               two_dimensional on 2 ranks with MNFRAME_FAKE_NODE_SIZE=1 (NCCL in each
#               one-rank node, MPI between them, both ranks on GPU 0); loss and images/s
#   5 bench     bench/bench_gpu.py on 2 ranks, fake nodes (correctness checks are real)
#   6 tests     tests/gpu/test_gpu_single.py, then the one-GPU cases of tests/gpu/test_gpu_mpi.py
#               (fake-node NCCL cases with 2-3 ranks, shared-GPU cases, host-staged training, PowerSGD,
#               overlap)
#   7 overlap, powersgd  step 4's 2-rank run with optimizer.overlap=true, then with
#               communicator.compression=powersgd, if time is left
#
# Logs: one folder (--logs, default gpu-check-logs/<UTC time>), at most 8 files:
# summary.txt (one line per step, then the exit status) and NN-step.log.
# Exit: 0 all steps passed, 1 a step failed or timed out, 2 bad usage or wheels, 3 no GPU.
# --no-install uses the Python environment as it is (e.g. a venv of scripts/setup.sh).
# PYTHON picks the interpreter (default python3), MNFRAME_WHEEL_DIR the wheel folder.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
LOGS=""
INSTALL=1
while [ $# -gt 0 ]; do
  case "$1" in
    --logs) LOGS=${2:?--logs needs a folder}; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
LOGS=${LOGS:-gpu-check-logs/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$LOGS" || exit 2
LOGS=$(cd "$LOGS" && pwd)
SUMMARY="$LOGS/summary.txt"
: > "$SUMMARY"
START=$(date +%s)
DEADLINE=$((START + ${MNFRAME_GPU_CHECK_SECONDS:-530}))  # 9 minutes, less a margin for the summary
WORK=${TMPDIR:-/tmp}/mnframe-gpu-check
rm -rf "$WORK" && mkdir -p "$WORK"
FAILED=0

say() { echo "gpu_check: $*" | tee -a "$SUMMARY"; }
record() {  # step status seconds [detail]
  printf '%-22s %-8s %4ss  %s\n' "$1" "$2" "$3" "${4:-}" | tee -a "$SUMMARY"
  case "$2" in PASS|INFO) ;; *) FAILED=1 ;; esac
}

# run_step NAME LOG SECONDS CMD...: runs CMD in its own process group (so a timeout also ends
# mpiexec and its ranks), appends to LOG, records PASS / FAIL rc / TIMEOUT / SKIPPED.
run_step() {
  local name=$1 log="$LOGS/$2" secs=$3; shift 3
  local left=$((DEADLINE - $(date +%s)))
  if [ "$left" -lt 15 ]; then record "$name" SKIPPED 0 "no time left of the 9 minutes"; return 1; fi
  [ "$secs" -gt "$left" ] && secs=$left
  echo "== $name ($(date -u +%T) UTC, limit ${secs}s): $*" >> "$log"
  local t0 pid rc status
  t0=$(date +%s)
  setsid "$@" >> "$log" 2>&1 < /dev/null &
  pid=$!
  status=""
  while kill -0 "$pid" 2>/dev/null; do
    if [ $(( $(date +%s) - t0 )) -ge "$secs" ]; then
      kill -TERM -- "-$pid" 2>/dev/null; sleep 3; kill -KILL -- "-$pid" 2>/dev/null
      status=TIMEOUT
      break
    fi
    sleep 1
  done
  wait "$pid" 2>/dev/null; rc=$?
  local took=$(( $(date +%s) - t0 ))
  if [ -n "$status" ]; then
    echo "== $name: TIMEOUT after ${secs}s" >> "$log"; record "$name" TIMEOUT "$took" "see $(basename "$log")"; return 1
  fi
  echo "== $name: exit $rc" >> "$log"
  if [ "$rc" -eq 0 ]; then record "$name" PASS "$took"; return 0; fi
  if [ "$rc" -eq 3 ] && [ "$name" = gpu ]; then record "$name" NO-GPU "$took" "CUDA is not usable here"; return 3; fi
  record "$name" FAIL "$took" "exit $rc, see $(basename "$log")"; return 1
}

finish() {
  local code=$1
  echo "exit $code ($(( $(date +%s) - START ))s in all; logs in $LOGS)" | tee -a "$SUMMARY"
  rm -rf "$WORK"
  exit "$code"
}

# ---------------------------------------------------------------- 1 install
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
if [ "$INSTALL" = 1 ]; then
  WHL=${MNFRAME_WHEEL_DIR:-.whl}
  ls "$WHL"/*.whl > /dev/null 2>&1 || { say "no wheels in $WHL/: run bash scripts/fetch_gpu_wheels.sh on a machine with the registry and bring .whl/ along"; finish 2; }
  pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
  if ls "$WHL"/*-cp3*-*.whl > /dev/null 2>&1 && ! ls "$WHL"/*-cp"$pyver"-*.whl > /dev/null 2>&1; then
    say "the binary wheels in $WHL/ are not for this Python ($("$PY" -V 2>&1)); fetch them for it, or use --no-install"
    finish 2
  fi
  # A venv of our own that also sees the machine's packages (CuPy, NumPy, pytest) through a .pth
  # file, so that .pth files of the wheels (mnframe's import fix) are processed; the wheels go in
  # with --prefix (the mpich wheel's bin/mpiexec and lib/libmpi.so land in the venv, where mpi4py
  # looks). Our mpi4py and setuptools<70 come first on sys.path.
  VENV="$WORK/venv"
  run_step venv 01-install.log 60 "$PY" -m venv --without-pip "$VENV" || finish 2
  "$PY" -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))' \
    > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/zz_gpu_machine.pth"
  run_step install 01-install.log 90 "$PY" -m pip install --no-index --no-deps --no-compile \
    --no-cache-dir --disable-pip-version-check -q --prefix "$VENV" "$WHL"/*.whl || finish 2
  PY="$VENV/bin/python"
  export PATH="$VENV/bin:$PATH"
fi
MPIEXEC=$(command -v mpiexec || true)
[ -x "$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/mpiexec" ] && \
  MPIEXEC="$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")/mpiexec"

# ---------------------------------------------------------------- 2 versions and the GPU
cat > "$WORK/probe.py" <<'EOF'
import sys
import mnframe  # before chainer: the NumPy 2 shim
import chainer, numpy, mpi4py
from mpi4py import MPI
from mnframe import cuda_env
info = cuda_env.probe()
print(f"python {sys.version.split()[0]}, numpy {numpy.__version__}, chainer {chainer.__version__}, "
      f"mpi4py {mpi4py.__version__} ({MPI.Get_library_version().splitlines()[0].strip()})")
print(f"cupy {info.cupy_version} ({info.cupy_package}, CUDA {info.cuda_major}), {info.device_count} GPU(s), "
      f"NCCL {info.nccl_problem or cuda_env.nccl_version_text(info.nccl_version)}")
note = cuda_env.cudnn_note(info)
if note:
    print("note:", note)
if not info.usable:
    print(f"NO GPU: {info.problem}")
    sys.exit(3)
EOF
run_step gpu 02-gpu-and-doctor.log 60 "$PY" "$WORK/probe.py"
gpu_rc=$?
grep -E '^(python|cupy|note|NO GPU)' "$LOGS/02-gpu-and-doctor.log" | sed 's/^/    /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------- 3 doctor (also without a GPU: it says what is missing)
run_step "doctor (1 rank)" 02-gpu-and-doctor.log 40 "$PY" -m mnframe doctor
if [ -n "$MPIEXEC" ]; then
  run_step "doctor (2 ranks)" 02-gpu-and-doctor.log 40 "$MPIEXEC" -n 2 "$PY" -m mnframe doctor
fi
if [ "$gpu_rc" -ne 0 ]; then
  if grep -q "^NO GPU" "$LOGS/02-gpu-and-doctor.log"; then
    say "no usable GPU here ($(grep '^NO GPU' "$LOGS/02-gpu-and-doctor.log" | head -1 | cut -c9-)): the GPU steps need one; nothing else to check"
    finish 3
  fi
  say "the environment does not import (see 02-gpu-and-doctor.log)"
  finish 1
fi
[ -n "$MPIEXEC" ] || { say "no mpiexec (the mpich wheel brings one): multi-rank steps cannot run"; finish 1; }

# ---------------------------------------------------------------- 4 ResNet-50 on synthetic ImageNet
# the runner's overrides for every ResNet-50 run (tests/unit/test_gpu_ready.py validates them)
RESNET_ARGS="recipe=imagenet dataset.source.synthetic=true dataset.loader=serial trainer.device=gpu extensions=minimal extensions.log_report.unit=iteration extensions.log_report.interval=1"
resnet() {  # name ranks communicator batch iterations [env...]; RESNET_EXTRA: more overrides
  local name=$1 n=$2 comm=$3 batch=$4 iters=$5; shift 5
  local dir="$WORK/run-$name"
  local images=$((n * batch * iters))
  # shellcheck disable=SC2086  # RESNET_ARGS is a list of words
  run_step "resnet50 $name" 03-resnet50.log 75 env "$@" "$MPIEXEC" -n "$n" "$PY" -m mnframe $RESNET_ARGS \
    dataset.source.n_synthetic="$images" dataset.batch_size="$batch" communicator="$comm" \
    "trainer.stop=[$iters,iteration]" hydra.run.dir="$dir" ${RESNET_EXTRA:-}
  "$PY" - "$dir/log" "$n" "$batch" <<'EOF' 2>&1 | tee -a "$LOGS/03-resnet50.log" "$SUMMARY"
import json, sys
try:
    log = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"    no training log ({e})"); sys.exit(0)
n, batch = int(sys.argv[2]), int(sys.argv[3])
losses = [e["main/loss"] for e in log]
rate = "-"
if len(log) > 2:  # from the second logged iteration on (the first compiles kernels)
    rate = f"{n * batch * (len(log) - 2) / (log[-1]['elapsed_time'] - log[1]['elapsed_time']):.1f}"
print(f"    {len(log)} iterations, loss {losses[0]:.3f} -> {losses[-1]:.3f} (min {min(losses):.3f}), "
      f"{rate} images/s on {n} rank(s) after the first two iterations")
EOF
}
resnet pure_nccl-1rank 1 pure_nccl 32 12
resnet two_dimensional-2ranks-fake-nodes 2 two_dimensional 16 12 MNFRAME_FAKE_NODE_SIZE=1

# ---------------------------------------------------------------- 5 bench_gpu.py (2 ranks, fake nodes: real checks)
run_step "bench_gpu (2 ranks)" 04-bench.log 75 env MNFRAME_FAKE_NODE_SIZE=1 "$MPIEXEC" -n 2 "$PY" bench/bench_gpu.py \
  --repeat 10 --iterations 10 --communicators \
  hierarchical,two_dimensional,two_dimensional+fp16,two_dimensional+batched_copy,non_cuda_aware,flat,naive,pure_nccl
grep -E '^\| (hier|two|non|flat|naive|pure|grad|dummy|none)' "$LOGS/04-bench.log" | sed 's/^/    /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------- 6 GPU tests
run_step "tests/gpu single" 05-tests-single.log 110 "$PY" -m pytest -q -rs -p no:cacheprovider \
  tests/gpu/test_gpu_single.py
tail -1 "$LOGS/05-tests-single.log" | sed 's/^/    /' | tee -a "$SUMMARY"
# the one-GPU cases: NCCL in fake one-rank nodes (2-3 ranks), ranks sharing the GPU, host-staged training
run_step "tests/gpu mpi" 06-tests-mpi.log 190 env MNFRAME_GPU_MPI_TIMEOUT=100 "$PY" -m pytest -q -rs -p no:cacheprovider tests/gpu/test_gpu_mpi.py \
  -k "fake1 or shared or host or powersgd"
tail -1 "$LOGS/06-tests-mpi.log" | sed 's/^/    /' | tee -a "$SUMMARY"

# ---------------------------------------------------------------- 7 overlap and PowerSGD training (if time is left)
# the same 2-rank fake-node run with optimizer.overlap=true (buckets averaged during backward)
RESNET_EXTRA="optimizer.overlap=true" resnet two_dimensional+overlap-2ranks 2 two_dimensional 16 12 MNFRAME_FAKE_NODE_SIZE=1

# the same 2-rank fake-node run with compression=powersgd (rank 4, compressed from iteration 3)
RESNET_EXTRA="communicator.compression=powersgd communicator.powersgd_start_iter=2" \
  resnet two_dimensional+powersgd-2ranks 2 two_dimensional 16 12 MNFRAME_FAKE_NODE_SIZE=1

finish "$FAILED"
