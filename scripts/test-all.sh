#!/usr/bin/env bash
# Runs every test of the project. Installs what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
