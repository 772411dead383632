#!/usr/bin/env python3
"""A worker of a `lease run` group that claims the rows of a PostgreSQL table
with the push-down predicate, and keeps running through the group's changes.

    lease run --name jobs --interval 5000 -- python3 claim_rows.py

`lease run` (task sets, its default) gives this process:

- LEASE_FILE: a JSON file with what it holds (docs/operations.md, "lease run
  under task sets"): the bucket count, the held buckets, and each part with
  its buckets and its deadline on CLOCK_MONOTONIC. It is replaced atomically
  at every change and renewal.
- one line on stdin (the file's new version) after each replacement. End of
  file on stdin means `lease run` is gone: stop at once.

Task t belongs to bucket t % bucket_count. Every worker of the group must use
the same bucket count and decide by bucket (this predicate), never by t
itself. A bucket may be worked on only while the deadline of a part that
lists it is ahead; the loop checks it before each claim.

The table needs `id bigint` (not negative) and `holder int`. Connection:
the standard libpq variables PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD.
CLAIM_LOG, if set, names a file that gets one JSON line per change.
"""

import json
import os
import select
import sys
import time

import pg8000.native

# Run the claim only with this much of the lease left (microseconds): a
# claim that starts later could still be running at the deadline.
MARGIN_US = 20_000


def now_us():
    return time.monotonic_ns() // 1000


def read_lease(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def held_buckets(lease):
    """The buckets of the parts whose deadline is still ahead (with the margin)."""
    now = now_us()
    held = set()
    for part in lease["parts"]:
        if now + MARGIN_US < part["valid_until_monotonic_us"]:
            held.update(part["buckets"])
    return held


def main():
    path = os.environ["LEASE_FILE"]
    con = pg8000.native.Connection(
        user=os.environ.get("PGUSER", "postgres"),
        host=os.environ.get("PGHOST", "127.0.0.1"),
        port=int(os.environ.get("PGPORT", "5432")),
        database=os.environ.get("PGDATABASE", "postgres"),
        password=os.environ.get("PGPASSWORD"),
    )
    log = open(os.environ["CLAIM_LOG"], "a", encoding="utf-8") if os.environ.get("CLAIM_LOG") else None
    me = os.getpid()
    serving = set()
    stdin = sys.stdin.fileno()
    while True:
        lease = read_lease(path)
        count = lease["bucket_count"]
        held = held_buckets(lease) if lease["held"] else set()
        gone = serving - held
        if gone:
            con.run(
                "UPDATE jobs SET holder = NULL WHERE holder = :me"
                " AND (id::bigint % CAST(:b AS bigint)) = ANY(CAST(:gone AS bigint[]))",
                me=me, b=count, gone=sorted(gone),
            )
        claimed = 0
        if held and held_buckets(lease) >= held:
            rows = con.run(
                "UPDATE jobs SET holder = :me"
                " WHERE (id::bigint % CAST(:b AS bigint)) = ANY(CAST(:held AS bigint[]))"
                " AND holder IS DISTINCT FROM :me RETURNING id",
                me=me, b=count, held=sorted(held),
            )
            claimed = len(rows)
        if log and (held != serving or claimed):
            log.write(json.dumps({"pid": me, "version": lease["version"], "buckets": len(held), "claimed": claimed}) + "\n")
            log.flush()
        serving = held
        # Sleep until the next version (a line on stdin) or a tenth of a
        # second, whichever comes first: the deadlines are re-checked even
        # when nothing is written.
        ready, _, _ = select.select([stdin], [], [], 0.1)
        if ready and not os.read(stdin, 4096):
            break  # end of file: `lease run` is gone
    con.close()


if __name__ == "__main__":
    main()
