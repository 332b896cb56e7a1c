#!/usr/bin/env bash
# Regenerates the code generated from the specs under api/.
set -euo pipefail
cd "$(dirname "$0")/.."
for g in api/*/generate.sh; do [ -x "$g" ] && "$g"; done
true
