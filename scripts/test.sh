#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
ctest --test-dir "${WDS_BUILD_DIR:-build}" --output-on-failure -j2 --timeout 300
