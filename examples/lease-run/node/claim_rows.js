// A worker of a `lease run` group that claims the rows of a PostgreSQL table
// with the push-down predicate, and keeps running through the group's
// changes: the Node twin of ../claim_rows.py (the same protocol, the same
// table).
//
//     npm ci && lease run --name jobs --interval 5000 -- node claim_rows.js
//
// `lease run` (task sets, its default) gives this process LEASE_FILE, a JSON
// file of what it holds (docs/operations.md, "lease run under a supervisor"),
// replaced atomically at every change and renewal, and one line on stdin
// (the new version) after each replacement; end of file on stdin means
// `lease run` is gone. Task t belongs to bucket t % bucket_count; every
// worker of the group decides by bucket. A bucket may be worked on only
// while the deadline (CLOCK_MONOTONIC, which process.hrtime reads) of a part
// that lists it is ahead.
//
// The table needs `id bigint` (not negative) and `holder int`. Connection:
// PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD (node-postgres reads them).
// CLAIM_LOG, if set, names a file that gets one JSON line per change.
'use strict';

const fs = require('fs');
const readline = require('readline');
const { Client } = require('pg');

// Claim only with this much of the lease left (microseconds).
const MARGIN_US = 20000n;

const nowUs = () => process.hrtime.bigint() / 1000n;

function heldBuckets(lease) {
  const now = nowUs();
  const held = new Set();
  if (!lease.held) return held;
  for (const part of lease.parts) {
    if (now + MARGIN_US < BigInt(part.valid_until_monotonic_us)) {
      for (const b of part.buckets) held.add(b);
    }
  }
  return held;
}

async function main() {
  const path = process.env.LEASE_FILE;
  const db = new Client();
  await db.connect();
  const log = process.env.CLAIM_LOG;
  const me = process.pid;
  let serving = new Set();
  let wake = null;
  let gone = false;
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', () => wake && wake());
  lines.on('close', () => { gone = true; if (wake) wake(); });

  while (!gone) {
    const lease = JSON.parse(fs.readFileSync(path, 'utf8'));
    const count = lease.bucket_count;
    const held = heldBuckets(lease);
    const lost = [...serving].filter((b) => !held.has(b));
    if (lost.length) {
      await db.query(
        'UPDATE jobs SET holder = NULL WHERE holder = $1' +
          ' AND ((id)::bigint % $2::bigint) = ANY($3::bigint[])',
        [me, count, lost],
      );
    }
    let claimed = 0;
    if (held.size) {
      const res = await db.query(
        'UPDATE jobs SET holder = $1' +
          ' WHERE ((id)::bigint % $2::bigint) = ANY($3::bigint[])' +
          ' AND holder IS DISTINCT FROM $1 RETURNING id',
        [me, count, [...held]],
      );
      claimed = res.rowCount;
    }
    const changed = held.size !== serving.size || lost.length > 0;
    if (log && (changed || claimed)) {
      fs.appendFileSync(log, JSON.stringify({ pid: me, version: lease.version, buckets: held.size, claimed }) + '\n');
    }
    serving = held;
    // Until the next version (a line on stdin) or a tenth of a second: the
    // deadlines are re-checked even when nothing is written.
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, 100);
      wake = () => { clearTimeout(timer); wake = null; resolve(); };
    });
  }
  await db.end();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
