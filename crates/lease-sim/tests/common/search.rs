//! How the simulator's property tests draw their cases (CONTRIBUTING.md,
//! "Property tests: CI and the search").
//!
//! By default a property draws the same cases on every run: a fixed RNG
//! seed, so `.ci/run` cannot fail at random on a rare case that another run
//! would not have drawn. Cases that failed once are persisted beside the
//! test (`tests/<file>.proptest-regressions`, committed) and proptest
//! replays them before drawing new ones, so a case found by the search stays
//! in CI.
//!
//! The search draws new cases: `LEASE_SEARCH=random` seeds each property
//! from the operating system and runs `LEASE_SEARCH_CASES` cases (default
//! ten times the property's own); a failing case is shrunk and appended to
//! the regression file. `LEASE_SEARCH=<u64>` draws from that seed (salted per property) instead,
//! to run another fixed set of cases. `scripts/search.sh` runs the search.

use proptest::test_runner::{Config, FileFailurePersistence, RngSeed};

/// The seed of the cases CI runs; changing it changes every property's
/// cases, so it changes only on purpose.
pub const CI_SEED: u64 = 0x1ea5_e5ee_d000_0017;

/// How long shrinking one failure may take in the search, in milliseconds:
/// a shrink step replays a whole run, and an unshrunk case is still a case.
const SEARCH_SHRINK_MS: u32 = 10 * 60 * 1000;

/// The configuration of the property named `property` with `cases` cases
/// in CI, or of the search when `LEASE_SEARCH` asks for it. The name salts
/// the fixed seed, so that properties sharing a strategy do not replay one
/// another's draws.
///
/// # Panics
///
/// On a `LEASE_SEARCH` or `LEASE_SEARCH_CASES` it cannot read: a search
/// that silently fell back to CI's cases would find nothing new.
pub fn config(property: &str, cases: u32) -> Config {
    let salt = fnv1a(property);
    let base = Config {
        cases,
        rng_seed: RngSeed::Fixed(CI_SEED ^ salt),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    };
    let Ok(search) = std::env::var("LEASE_SEARCH") else {
        return base;
    };
    let rng_seed = match search.as_str() {
        "" | "fixed" => return base,
        "random" => RngSeed::Random,
        seed => RngSeed::Fixed(
            salt ^ seed.parse::<u64>().unwrap_or_else(|_| {
                panic!("LEASE_SEARCH={seed:?}: use \"random\", \"fixed\" or a u64 seed")
            }),
        ),
    };
    let cases = match std::env::var("LEASE_SEARCH_CASES") {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("LEASE_SEARCH_CASES={n:?}: use a number of cases")),
        Err(_) => cases.saturating_mul(10),
    };
    Config {
        cases,
        rng_seed,
        max_shrink_time: SEARCH_SHRINK_MS,
        ..base
    }
}

/// FNV-1a, 64 bits: a fixed hash (std's hasher may change between releases,
/// which would change CI's cases).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
