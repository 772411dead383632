//! The lease file of `lease run` under task sets: what the command holds,
//! as JSON, rewritten atomically (a new file renamed over the old one) at
//! each value of the stream and each renewal.
//!
//! ```json
//! {"version": 4, "name": "mail-sender", "held": true, "mapping": "consistent",
//!  "bucket_count": 1024, "buckets": [3, 17, 20],
//!  "token": 5987241401, "valid_until_monotonic_us": 81234567890,
//!  "parts": [{"part": [1, 3, 1, 3], "token": 5987241401,
//!             "valid_until_monotonic_us": 81234567890, "buckets": [3, 17, 20]}]}
//! ```
//!
//! `buckets` is what the command may work on: task `t` when `t % bucket_count`
//! is listed, and only while `CLOCK_MONOTONIC` reads less than the
//! `valid_until_monotonic_us` of a part that lists it (Python's
//! `time.monotonic_ns()`, Node's `process.hrtime.bigint()` read the same
//! clock). Idle: `held` false, no buckets, no parts.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use lease_redis::Lease;
use serde_json::{Value, json};
use tempfile::TempDir;

/// The file, its version and the deadlines it was last written with.
pub(crate) struct LeaseFile {
    path: PathBuf,
    /// The private directory holding the file when none was given (removed
    /// on drop).
    _dir: Option<TempDir>,
    name: String,
    buckets: u32,
    version: u64,
    deadlines: Vec<Instant>,
}

impl LeaseFile {
    /// Creates the file (at `path`, or in a fresh private directory) with
    /// version 0, holding nothing.
    pub(crate) fn create(path: Option<PathBuf>, name: &str, buckets: u32) -> io::Result<Self> {
        let (path, dir) = match path {
            Some(path) => (path, None),
            None => {
                let dir = tempfile::Builder::new().prefix("lease-run-").tempdir()?;
                (dir.path().join("lease.json"), Some(dir))
            }
        };
        let file = Self {
            path,
            _dir: dir,
            name: name.to_owned(),
            buckets,
            version: 0,
            deadlines: Vec::new(),
        };
        file.store(&file.render(None))?;
        Ok(file)
    }

    /// Where the file is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The bucket count.
    pub(crate) fn buckets(&self) -> u32 {
        self.buckets
    }

    /// The version last written.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Whether a renewal moved a deadline since the last write.
    pub(crate) fn is_stale(&self, lease: &Lease) -> bool {
        self.deadlines != deadlines(lease)
    }

    /// Writes what `lease` holds (nothing for `None`) as the next version,
    /// and returns it.
    pub(crate) fn write(&mut self, lease: Option<&Lease>) -> io::Result<u64> {
        self.version += 1;
        let text = self.render(lease);
        self.store(&text)?;
        self.deadlines = lease.map(deadlines).unwrap_or_default();
        Ok(self.version)
    }

    fn render(&self, lease: Option<&Lease>) -> String {
        let count = self.buckets;
        let owned = |b: Result<lease_core::pushdown::Buckets, _>| -> Value {
            b.map_or(json!([]), |b| json!(b.owned()))
        };
        let value = match lease {
            Some(lease) => json!({
                "version": self.version,
                "name": self.name,
                "held": true,
                "mapping": lease.mapping().as_str(),
                "bucket_count": count,
                "buckets": owned(lease.buckets(count)),
                "token": lease.token(),
                "valid_until_monotonic_us": monotonic_us(lease.deadline()),
                "parts": lease.parts().iter().map(|p| json!({
                    "part": p.part().describe(),
                    "token": p.token(),
                    "valid_until_monotonic_us": monotonic_us(p.deadline()),
                    "buckets": owned(p.buckets(count)),
                })).collect::<Vec<_>>(),
            }),
            None => json!({
                "version": self.version,
                "name": self.name,
                "held": false,
                "bucket_count": count,
                "buckets": [],
                "token": 0,
                "valid_until_monotonic_us": 0,
                "parts": [],
            }),
        };
        format!("{value}\n")
    }

    /// Writes `text` beside the file and renames it over the file, so a
    /// reader sees the old version or the new one, never half of one.
    fn store(&self, text: &str) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        drop(f);
        std::fs::rename(&tmp, &self.path)
    }
}

fn deadlines(lease: &Lease) -> Vec<Instant> {
    lease.parts().iter().map(|p| p.deadline()).collect()
}

/// `at` on `CLOCK_MONOTONIC`, in microseconds: the clock `Instant` reads on
/// Linux, and the one other processes on the machine can read too.
fn monotonic_us(at: Instant) -> i64 {
    let now = Instant::now();
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let mono_now = ts.tv_sec.saturating_mul(1_000_000) + ts.tv_nsec / 1_000;
    let micros = |d: std::time::Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    if at >= now {
        mono_now.saturating_add(micros(at - now))
    } else {
        mono_now.saturating_sub(micros(now - at)).max(0)
    }
}
