#!/usr/bin/env bash
# docs/benchmarks.md, "Core": heap allocations per registration in steady
# state (counting allocator), then time per handle_* call (criterion).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run -q --release -p lease-bench --bin alloc-count
cargo bench -q -p lease-bench --bench core -- --output-format bencher "$@"
