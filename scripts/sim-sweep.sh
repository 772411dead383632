#!/usr/bin/env bash
# docs/reliability.md, "Every option over its range": `lease sim --faults`
# (every fault the guarantee covers, churn) over SEEDS seeds per cell
# (default 1000, seeds 0..SEEDS, 200 intervals, L = 1 s), release build:
#
# - Ranked, task sets and whole pairs, at gaps 0.05, 0.15, 0.3, 0.4 and
#   0.49, with 5, 9 and 26 workers at the start;
# - Arrival at the same gaps, 9 workers;
# - Ranked, both handovers, 9 workers, at gaps 0.05, 0.3 and 0.49: drain
#   budgets 0, G, L/2 and L (the largest valid), spreads 0 and the widest
#   (the default is in the first set; at g >= 0.3 the widest is the
#   default), and a cancel without graceful leave.
#
# One tally line per cell (its flags, runs, violating runs, violations,
# anomalies, per-task violations, mean coverage); a run is violating if its
# verdict is not `ok`: any violation, per pair or per task, any fencing
# violation, or any anomaly. Exits 1 if any cell has a violating run.
# Extra arguments go to every `lease sim` (e.g. --intervals 100).
#
#   nice -n 19 scripts/sim-sweep.sh | tee sweep.txt
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p lease-cli
lease="${CARGO_TARGET_DIR:-target}/release/lease"
seeds="${SEEDS:-1000}"
status=0
failed=()

cell() {
  if ! "$lease" sim --seed 0 --seeds "$seeds" --faults "$@"; then
    status=1
    failed+=("$*")
  fi
}

echo "sweep: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (crates modified)') seeds=0..$seeds $(date -u +%Y-%m-%dT%H:%MZ)"
for handover in task-sets whole-pairs; do
  for gap in 0.05 0.15 0.3 0.4 0.49; do
    for workers in 5 9 26; do
      cell --handover "$handover" --gap "$gap" --workers "$workers" "$@"
    done
  done
done
for gap in 0.05 0.15 0.3 0.4 0.49; do
  cell --mode arrival --gap "$gap" --workers 9 "$@"
done
for handover in task-sets whole-pairs; do
  for gap in 0.05 0.3 0.49; do
    g_ms=$(awk -v g="$gap" 'BEGIN { printf "%d", g * 1000 }')
    for budget in 0 "$g_ms" 500 1000; do
      cell --handover "$handover" --gap "$gap" --workers 9 --drain-budget-ms "$budget" "$@"
    done
    for spread in 0 max; do
      cell --handover "$handover" --gap "$gap" --workers 9 --spread "$spread" "$@"
    done
    cell --handover "$handover" --gap "$gap" --workers 9 --no-graceful-leave "$@"
  done
done
if [ $status != 0 ]; then
  echo "sweep: cells with a violating run:"
  printf '  %s\n' "${failed[@]}"
fi
exit $status
