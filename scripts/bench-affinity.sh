#!/usr/bin/env bash
# docs/benchmarks.md, "Affinity": keys moved by n -> n+1 and n -> n-1 under
# modulo and under the consistent mapping.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q --release -p lease-bench --bin affinity
