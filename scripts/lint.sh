#!/usr/bin/env bash
# Lint and format check with the settings in pyproject.toml ([tool.ruff]): `ruff check`
# (pycodestyle, pyflakes, import order, bugbear) and `ruff format --check`. Exits non-zero
# on any finding. Fix with `ruff check --fix .` and `ruff format .`.
# ruff comes with the `test` extra (bash scripts/setup.sh installs it in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
RUFF=${RUFF:-}
if [ -z "$RUFF" ]; then
  for candidate in "${MNFRAME_VENV:-.venv}/bin/ruff" "$(command -v ruff || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then RUFF=$candidate; break; fi
  done
fi
if [ -z "$RUFF" ]; then
  echo "scripts/lint.sh: ruff not found; run bash scripts/setup.sh (it installs the test extra) or pip install ruff" >&2
  exit 2
fi
status=0
"$RUFF" check . || status=1
"$RUFF" format --check . || status=1
exit $status
