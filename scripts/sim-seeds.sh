#!/usr/bin/env bash
# docs/reliability.md, "Incremental handover in the simulator": 5,000 seeds
# per mode (ranked task sets, ranked whole pairs, arrival), every fault
# the guarantee covers, churn; one tally line per mode. Fails on any
# violation. Extra arguments go to every `lease sim` (e.g. --workers 8).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p lease-cli
lease="${CARGO_TARGET_DIR:-target}/release/lease"
status=0
for run in ranked:task-sets ranked:whole-pairs arrival:whole-pairs; do
  "$lease" sim --seed 0 --seeds 5000 --workers 5 --intervals 200 --faults \
    --mode "${run%%:*}" --handover "${run##*:}" "$@" || status=1
done
exit $status
