#!/usr/bin/env bash
# Set up and run every check: ruff, ruff format, mypy (strict on engines/, app/, ui/, bench/ and
# tests/), pytest.
#   --under-load   run the same checks with two CPU-burning processes beside them: the proof
#                  that no test depends on how fast or how busy the machine is.
# Every other argument goes to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

under_load=0
pytest_args=()
for arg in "$@"; do
  if [[ $arg == --under-load ]]; then under_load=1; else pytest_args+=("$arg"); fi
done

bash scripts/setup.sh dev,local
export QT_QPA_PLATFORM=offscreen

burners=()
stop_burners() {
  for pid in ${burners[@]+"${burners[@]}"}; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}
if ((under_load)); then
  trap stop_burners EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # Each burner also ends by itself once this script is gone (its parent changes), so not even
  # a kill -9 of the script leaves one spinning.
  for _ in 1 2; do
    .venv/bin/python -c '
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(1_000_000):
        pass
' &
    burners+=($!)
  done
  echo "== under load: two CPU burners beside the checks (pids ${burners[*]})"
fi

echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy";        .venv/bin/mypy
echo "== pytest";      .venv/bin/python -m pytest ${pytest_args[@]+"${pytest_args[@]}"}
