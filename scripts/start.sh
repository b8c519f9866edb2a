#!/usr/bin/env bash
# Set up (first run only takes a while: the bundled model's runtime is compiled) and start Conch.
# Extra arguments go to conch, e.g. `--mock` or `--data-dir DIR`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
exec .venv/bin/conch "$@"
