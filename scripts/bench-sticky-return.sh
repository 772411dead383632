#!/usr/bin/env bash
# docs/benchmarks.md, "Sticky return (rule 19) against revision 2": the
# simulator's scenario table (--scenarios), its member-name table
# (--members) and its join figures at rtt about 0.4 L, from this tree and
# from revision 2 (the commit before rule 19, built in a worktree of its
# own), one after the other in one run, same seeds (50 per cell, virtual
# time: the figures do not depend on the machine's load).
# Usage: scripts/bench-sticky-return.sh [OUT_DIR] [REV2_COMMIT]
#   OUT_DIR (default target/sticky-return) receives the six tables;
#   REV2_COMMIT defaults to 3ff8465, the last commit of revision 2.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/sticky-return}"
rev2="${2:-3ff8465}"
mkdir -p "$out"
tree="$(mktemp -d)/rev2"
git worktree add -q --detach "$tree" "$rev2"
trap 'git worktree remove --force "$tree"' EXIT
# A target directory of its own: cargo names the artifacts of a path
# package by its path inside the workspace, so two worktrees sharing one
# would overwrite each other's lease-* builds.
(cd "$tree" && CARGO_TARGET_DIR="${REV2_TARGET_DIR:-/var/tmp/lease-rev2-target}" \
  cargo build -q --release -p lease-bench --bin sim-figures)
cargo build -q --release -p lease-bench --bin sim-figures
rev2_bin="${REV2_TARGET_DIR:-/var/tmp/lease-rev2-target}/release/sim-figures"
rev3_bin="${CARGO_TARGET_DIR:-target}/release/sim-figures"
for rev in rev2 rev3; do
  bin="${rev}_bin"
  "${!bin}" --scenarios --seeds 50 > "$out/scenarios-$rev.md"
  "${!bin}" --members --seeds 50 > "$out/members-$rev.md"
  "${!bin}" --seeds 50 --regime "0.4" > "$out/join-rtt-0.4-$rev.md"
done
echo "tables in $out"
