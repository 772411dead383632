#!/usr/bin/env bash
# docs/benchmarks.md, "Simulator": Ranked against Arrival with the same seeds
# in every regime of docs/benchmarks.md (50 seeds per cell, virtual time).
# Extra arguments go to the binary (--seeds N, --regime SUBSTRING, --per-seed,
# --handover for the kept-lease and graceful-leave tables, --scenarios for
# the handover scenarios on the default options, whole pairs and Arrival,
# --drain-budgets for the drain budget's figures, --members for member names
# in restarts, crashes and a missed registration). The rolling deploy from
# the old defaults is `cargo run --release -p lease-bench --bin sim-upgrade`.
#
# `--big` first: the simulator's one group of 1,000-10,000 workers instead
# (binary `sim-big-group`, the scenario of `scripts/bench-redis.sh big` in
# virtual time), with the remaining arguments (--seeds N, --workers
# N[,N..], --intervals N, --networks, --threads N).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--big" ]]; then
    shift
    exec cargo run -q --release -p lease-bench --bin sim-big-group -- "$@"
fi
cargo run -q --release -p lease-bench --bin sim-figures -- "$@"
