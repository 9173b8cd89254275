#!/usr/bin/env bash
# Does the fast test tier catch real breakage? In a scratch clone of HEAD, plant each fault below in
# turn, run the fast tier (`pytest -q`), check that it turns red, and revert the fault.
#
#   bash scripts/plant_faults.sh              # needs a venv made by scripts/setup.sh (VENV, default .venv)
#   bash scripts/plant_faults.sh scatter      # only the named fault(s): mean, scatter, optimizer
#
# Prints, per fault, the exit status and the failing tests; exits non-zero if a fault stays green.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
VPY=${VENV:-$REPO/.venv}/bin/python
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$REPO" "$WORK/clone"
cd "$WORK/clone" || exit 1
export PYTHONPATH=$WORK/clone  # the clone's mnframe, also in the ranks and jobs the tests start

# fault name -> file and the (python) replacement that plants it
plant() {
  case $1 in
    mean)  # every CPU communicator's mean divides by one rank too many
      "$VPY" - <<'EOF'
import pathlib
for name in ("naive", "flat", "hierarchical", "two_dimensional"):
    p = pathlib.Path(f"mnframe/communicators/{name}.py")
    s = p.read_text()
    assert "scale = 1.0 / self.comm.size" in s, p
    p.write_text(s.replace("scale = 1.0 / self.comm.size", "scale = 1.0 / (self.comm.size + 1)"))
EOF
      ;;
    scatter)  # scatter_dataset's shards start one example late
      "$VPY" - <<'EOF'
import pathlib
p = pathlib.Path("mnframe/datasets/partition.py")
s = p.read_text()
old = "        return slice(begin, end)\n    return order[begin:end]"
assert old in s
p.write_text(s.replace(old, "        return slice(begin + 1, end + 1)\n    return order[begin + 1 : end + 1]"))
EOF
      ;;
    optimizer)  # resume loads everything but the optimizer's state
      "$VPY" - <<'EOF'
import pathlib
p = pathlib.Path("mnframe/checkpoint/trainer_io.py")
s = p.read_text()
old = "ignore_names=is_per_rank if resharded else None"
assert old in s
p.write_text(s.replace(old, 'ignore_names=lambda k: "optimizer:" in k'))
EOF
      ;;
    *) echo "unknown fault $1 (mean, scatter, optimizer)"; return 2 ;;
  esac
}

faults=("$@")
[ ${#faults[@]} -gt 0 ] || faults=(mean scatter optimizer)
status=0
for fault in "${faults[@]}"; do
  git checkout -q -- . && plant "$fault" || exit 2
  start=$SECONDS
  "$VPY" -m pytest -q -p no:cacheprovider >"$WORK/$fault.log" 2>&1
  rc=$?
  echo "plant_faults: $fault: fast tier exit $rc after $((SECONDS - start)) s: $(grep -E '^[0-9]+ (failed|passed)' "$WORK/$fault.log" | tail -1)"
  grep -E '^FAILED' "$WORK/$fault.log" | head -8 | sed 's/^/    /'
  [ "$rc" -ne 0 ] || { echo "plant_faults: $fault: the fast tier stayed GREEN"; status=1; }
  git checkout -q -- .
done
exit $status
