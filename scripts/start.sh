#!/usr/bin/env bash
# Set up (the first run downloads Conch's packages and the bundled model) and start Conch.
# Extra arguments go to conch, e.g. `--mock` or `--data-dir DIR`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
exec .venv/bin/conch "$@"
