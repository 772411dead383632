#!/usr/bin/env bash
# The random search of the simulator's properties (CONTRIBUTING.md,
# "Property tests: CI and the search"). CI runs each property on a fixed set
# of cases; this draws new ones, round after round, for MINUTES minutes
# (default 30): `cargo test --release -p lease-sim --test safety` with
# LEASE_SEARCH=random and LEASE_SEARCH_CASES cases per property and round
# (default 2000). A failing case is shrunk and appended by proptest to
# crates/lease-sim/tests/*.proptest-regressions, which CI replays before its
# own cases; the script prints each new line and the failure's verdict and
# replay flags, and exits 1 if it found any. Commit the regression file, and
# keep the case as a named test too (a persisted seed replays its case only
# while the strategy that drew it is unchanged).
#
#   scripts/search.sh [MINUTES]        # e.g. nice -n 19 scripts/search.sh 25
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:-30}"
cases="${LEASE_SEARCH_CASES:-2000}"
target="${CARGO_TARGET_DIR:-target}"
log="$target/search.log"

# Every `cc` line in the regression files, one per line, sorted.
seeds() {
  cat crates/lease-sim/tests/*.proptest-regressions 2>/dev/null | grep '^cc ' | sort || true
}

cargo test -q --release -p lease-sim --test safety --no-run
before="$(seeds)"
end=$(($(date +%s) + minutes * 60))
round=0
found=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$((round + 1))
  start=$(date +%s)
  set +e
  LEASE_SEARCH=random LEASE_SEARCH_CASES="$cases" \
    cargo test -q --release -p lease-sim --test safety -- --test-threads 1 >"$log" 2>&1
  rc=$?
  set -e
  printf 'search: round=%d cases_per_property=%d seconds=%d result=%s\n' \
    "$round" "$cases" "$(($(date +%s) - start))" "$([ $rc = 0 ] && echo ok || echo FAILED)"
  if [ $rc != 0 ]; then
    found=1
    # The property's message (the verdict, the `lease sim` flags, the drawn
    # drain budget and network) and proptest's shrunk `RunConfig`.
    awk '/^---- |^Test failed|^run:|^drain budget:/ { print }
         /^minimal failing input/ { p = 1 } p { print } p && /^}/ { p = 0 }' "$log"
    cp "$log" "$target/search-round-$round.log"
    echo "search: full output in $target/search-round-$round.log"
  fi
done
new="$(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$(seeds)") | grep . || true)"
if [ -n "$new" ]; then
  echo "search: new failing cases persisted in crates/lease-sim/tests/*.proptest-regressions:"
  printf '%s\n' "$new"
  found=1
fi
echo "search: rounds=$round new_failures=$([ $found = 1 ] && echo yes || echo none)"
exit $found
