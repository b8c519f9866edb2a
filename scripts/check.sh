#!/usr/bin/env bash
# Set up and run every check: ruff, ruff format, mypy (strict on engines/ and app/), pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,local
export QT_QPA_PLATFORM=offscreen
echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy";        .venv/bin/mypy
echo "== pytest";      .venv/bin/python -m pytest "$@"
