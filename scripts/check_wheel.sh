#!/usr/bin/env bash
# The wheel as a user installs it: build mnframe's wheel (and Chainer's, which
# is only an sdist on PyPI), install both non-editable into a fresh venv,
# remove setuptools from it, and from an empty directory run
# `python -m mnframe --cfg job` and a short default job under `mpiexec -n 2`,
# checking that it trained (log entries, falling loss, plots). Then, without
# the mpich wheel, the one-line "what to install" message (exit 3).
#
#   PYTHON=python3.12 BUILD_VENV=.venv-py312 bash scripts/check_wheel.sh
#
# BUILD_VENV: a venv made by scripts/setup.sh (it has setuptools<70, which
# Chainer's setup.py needs); its Python must be PYTHON's minor version only for
# tidiness (both wheels are pure Python). WORK: scratch directory (default: a
# new temporary one, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
BUILD_VENV=${BUILD_VENV:-.venv}
WORK=${WORK:-$(mktemp -d)}
KEEP_WORK=${WORK_KEEP:-0}
[ "$KEEP_WORK" = 1 ] || trap 'rm -rf "$WORK"' EXIT
fail() { echo "check_wheel: FAIL: $*" >&2; exit 1; }
step() { echo "== check_wheel: $*"; }
BPY="$BUILD_VENV/bin/python"
[ -x "$BPY" ] || fail "no $BPY: run scripts/setup.sh first (or set BUILD_VENV)"

step "building the wheels (mnframe from this checkout, chainer 7.8.1 from its sdist)"
rm -rf "$WORK/wheels" "$WORK/src" && mkdir -p "$WORK/wheels" "$WORK/src"
# From a copy of the checkout's files (tracked, or new and not ignored): no stale build/ can leak in.
git ls-files -z --cached --others --exclude-standard | tar -C "$REPO" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$WORK/src" -xf -
"$BPY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WORK/wheels" "$WORK/src"
"$BPY" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK/wheels" "chainer==7.8.1"
ls "$WORK/wheels"
MNFRAME_WHL=$(ls "$WORK/wheels"/mnframe-*.whl)
CHAINER_WHL=$(ls "$WORK/wheels"/chainer-*.whl)

step "fresh venv ($("$PY" --version)), non-editable install of the wheel with the mpich extra"
V="$WORK/venv"
"$PY" -m venv "$V"
"$V/bin/python" -m pip install -q --disable-pip-version-check "$CHAINER_WHL" "${MNFRAME_WHL}[mpich]"
"$V/bin/python" -m pip uninstall -q -y setuptools 2>/dev/null || true
"$V/bin/python" -c "import setuptools" 2>/dev/null && fail "setuptools still importable"
"$V/bin/python" -c "import pkg_resources" 2>/dev/null && fail "pkg_resources still importable"
SITE=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ -f "$SITE/mnframe-chainer-hook.pth" ] || fail "mnframe-chainer-hook.pth not in $SITE"
[ -e "$SITE/recipes" ] && fail "a top-level 'recipes' package was installed into $SITE"
# every YAML of the checkout's conf/ and recipes/ (recipe-local group options included) is in the wheel
missing=$(cd "$WORK/src" && find conf recipes -name '*.yaml' | while read -r f; do
  [ -f "$SITE/mnframe/$f" ] || echo "$f"; done)
[ -z "$missing" ] || fail "not in the installed wheel: $missing"

EMPTY="$WORK/empty"
mkdir -p "$EMPTY"
cd "$EMPTY"
step "chainer in a script that never imports mnframe (no setuptools, $("$V/bin/python" -c 'import numpy; print("numpy", numpy.__version__)'))"
"$V/bin/python" "$REPO/scripts/check_stack.py"

step "python -m mnframe --cfg job (from an empty directory)"
"$V/bin/python" -m mnframe --cfg job > cfg.txt
grep -q "^name: mnist$" cfg.txt || { cat cfg.txt; fail "--cfg job did not print the mnist job"; }
for recipe in $(cd "$WORK/src/recipes" && ls */recipe.yaml | cut -d/ -f1); do  # every shipped recipe composes
  "$V/bin/python" -m mnframe --cfg job "recipe=$recipe" > /dev/null || fail "recipe=$recipe does not compose from the wheel"
done

step "short default job under mpiexec -n 2"
start=$(date +%s)
timeout 600 "$V/bin/mpiexec" -n 2 "$V/bin/python" -m mnframe trainer.stop=[3,epoch] hydra.run.dir=run \
  > job.out 2>&1 || { tail -40 job.out; fail "the default job failed"; }
"$V/bin/python" - <<'EOF' || { tail -40 job.out; fail "the default job did not train"; }
import json, pathlib
log = json.loads(pathlib.Path("run/log").read_text())
first, last = log[0], log[-1]
assert [e["epoch"] for e in log] == [1, 2, 3], log
assert last["main/loss"] < first["main/loss"], (first, last)
assert last["validation/main/accuracy"] > 0.8, last
for png in ("loss.png", "accuracy.png"):
    assert pathlib.Path("run", png).stat().st_size > 1000, png
print(f"trained: {len(log)} log entries, main/loss {first['main/loss']:.3f} -> {last['main/loss']:.3f}, "
      f"validation accuracy {last['validation/main/accuracy']:.3f}")
EOF
echo "job time: $(( $(date +%s) - start )) s (2 ranks, 3 epochs, interpreter start-up included)"
[ -z "$(ls "$EMPTY" | grep -v -e '^run$' -e '^cfg.txt$' -e '^job.out$')" ] || { ls "$EMPTY"; fail "unexpected files in the working directory"; }

step "without an MPI library: one line saying what to install, exit 3"
"$V/bin/python" -m pip uninstall -q -y mpich
# mpi4py's wheel loads whichever libmpi it finds: pointing it nowhere makes this a machine without
# any MPI library even where a system MPI is installed (apt's libmpich/libopenmpi, docs/cluster_mpi.md)
export MPI4PY_LIBMPI=/nonexistent/libmpi.so
set +e
"$V/bin/python" -m mnframe --cfg job > nompi.out 2> nompi.err
rc=$?
set -e
cat nompi.err
[ "$rc" = 3 ] || fail "exit status $rc, expected 3"
[ "$(wc -l < nompi.err)" = 1 ] || fail "expected exactly one line"
grep -q 'pip install "mnframe\[mpich\]"' nompi.err || fail "the line does not name mnframe[mpich]"
grep -q "Traceback" nompi.err && fail "a traceback was printed"
"$V/bin/python" -m mnframe doctor > doctor.out 2>&1 || true
grep -q 'mnframe\[mpich\]' doctor.out || { cat doctor.out; fail "doctor does not suggest mnframe[mpich]"; }
step "PASS"
