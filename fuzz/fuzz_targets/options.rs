//! `Options::validate` on arbitrary names, prefixes, intervals and gaps never
//! panics and agrees exactly with the documented rules (an independent
//! oracle); `Worker::new` succeeds exactly when `validate` does, with the same
//! error; and a worker built from valid options behaves as documented on its
//! first step (opening idle pair, a probe to `P{N}:1` with a single hash tag).
#![no_main]

use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use lease_core::{
    Counting, Event, Identity, MAX_INTERVAL, MAX_NAME_LEN, MAX_PREFIX_LEN, Mode, Options, Worker,
};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Text {
    /// Any UTF-8 string.
    Any(String),
    /// A string repeated, to cross the length limits (200 bytes).
    Repeated(String, u8),
    /// A valid-looking name with one character spliced in.
    Spliced { base: u8, at: u8, c: char },
}

impl Text {
    fn build(self) -> String {
        match self {
            Text::Any(s) => s,
            Text::Repeated(s, times) => s.repeat(usize::from(times)),
            Text::Spliced { base, at, c } => {
                let mut s: String = "group-name.x_1:"
                    .chars()
                    .cycle()
                    .take(usize::from(base))
                    .collect();
                let at = usize::from(at).min(s.len());
                s.insert(at, c);
                s
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Interval {
    /// `Duration::new(secs, nanos)` without its overflow panic.
    Raw {
        secs: u64,
        nanos: u32,
    },
    Millis(u64),
    Micros(u64),
    Nanos(u64),
    /// Near the bounds: 1 ms and 24 h, plus or minus a few nanoseconds.
    NearMin(i16),
    NearMax(i32),
}

impl Interval {
    fn build(self) -> Duration {
        let near = |base: Duration, d: i64| {
            if d >= 0 {
                base.saturating_add(Duration::from_nanos(d as u64))
            } else {
                base.saturating_sub(Duration::from_nanos(d.unsigned_abs()))
            }
        };
        match self {
            Interval::Raw { secs, nanos } => Duration::new(secs, nanos % 1_000_000_000),
            Interval::Millis(ms) => Duration::from_millis(ms),
            Interval::Micros(us) => Duration::from_micros(us),
            Interval::Nanos(ns) => Duration::from_nanos(ns),
            Interval::NearMin(d) => near(Duration::from_millis(1), i64::from(d) * 1000),
            Interval::NearMax(d) => near(MAX_INTERVAL, i64::from(d) * 1000),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Gap {
    /// Any bits: NaN, infinities, subnormals, -0.0.
    Bits(u64),
    /// `x / 1000` for x in 0..=u16::MAX: dense around (0, 0.5).
    Thousandths(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    name: Text,
    prefix: Option<Text>,
    interval: Interval,
    gap: Option<Gap>,
    arrival: bool,
    token: u128,
}

/// The documented rules, written out independently of `options.rs`.
fn oracle(o: &Options) -> bool {
    let bad_char = |c: char| c == '{' || c == '}' || c.is_control();
    let name_ok = !o.name.is_empty()
        && o.name.len() <= MAX_NAME_LEN
        && !o.name.chars().any(|c| bad_char(c) || c.is_whitespace());
    let prefix_ok = o.prefix.len() <= MAX_PREFIX_LEN && !o.prefix.chars().any(bad_char);
    let nanos = o.interval.as_nanos();
    let interval_ok =
        nanos.is_multiple_of(1_000_000) && (1_000_000..=MAX_INTERVAL.as_nanos()).contains(&nanos);
    let gap_ok = o.gap > 0.0 && o.gap < 0.5;
    name_ok && prefix_ok && interval_ok && gap_ok
}

fuzz_target!(|input: Input| {
    let mut o = Options::new(input.name.build(), input.interval.build());
    if let Some(p) = input.prefix {
        o = o.with_prefix(p.build());
    }
    match input.gap {
        Some(Gap::Bits(b)) => o = o.with_gap(f64::from_bits(b)),
        Some(Gap::Thousandths(x)) => o = o.with_gap(f64::from(x) / 1000.0),
        None => {}
    }
    if input.arrival {
        o = o.with_counting(Counting::Arrival);
    }

    let verdict = o.validate();
    if let Err(e) = &verdict {
        let _ = e.to_string();
    }
    assert_eq!(
        verdict.is_ok(),
        oracle(&o),
        "validate = {verdict:?} for {o:?}"
    );

    let t0 = Instant::now();
    let built = Worker::new(
        &o,
        Identity::from_bits_same_worker_if_reused(input.token),
        t0,
    );
    match (&verdict, &built) {
        (Ok(()), Ok(_)) => {}
        // Compared as text: `GapOutOfRange(NaN)` is not equal to itself.
        (Err(a), Err(b)) => assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "Worker::new and validate give different errors"
        ),
        _ => panic!(
            "validate = {verdict:?} but Worker::new = {:?}",
            built.as_ref().err()
        ),
    }
    let Ok(mut worker) = built else { return };

    // Valid options: the promised properties, spelled out.
    assert!(!o.name.is_empty() && o.name.len() <= MAX_NAME_LEN);
    assert!(
        !o.name
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
    );
    assert!(o.gap > 0.0 && o.gap < 0.5);
    assert_eq!(o.interval.subsec_nanos() % 1_000_000, 0);
    assert!(o.interval >= Duration::from_millis(1) && o.interval <= MAX_INTERVAL);

    assert_eq!(worker.name(), o.name);
    assert_eq!(worker.prefix(), o.prefix);
    assert_eq!(worker.interval(), o.interval);
    assert_eq!(worker.mode(), o.mode());
    assert_eq!(worker.gap().to_bits(), o.gap.to_bits());
    assert_eq!(
        worker.identity(),
        Identity::from_bits_same_worker_if_reused(input.token)
    );

    // First step: the opening idle pair, then a clock probe at once.
    assert!(matches!(worker.poll_event(), Some(Event::Assignment(a)) if a.is_idle()));
    assert_eq!(worker.poll_event(), None);
    assert!(worker.lease_at(t0).is_none());
    assert!(
        worker.poll_timeout().is_some_and(|t| t <= t0),
        "first registration is due at once"
    );
    worker.handle_timeout(t0);
    let interval_ms = o.interval.as_millis();
    {
        let t = worker
            .poll_transmit()
            .expect("a newcomer registers at once");
        assert_eq!(t.keys[0], format!("{}{{{}}}:1", o.prefix, o.name));
        assert_eq!(t.keys[1], format!("{}{{{}}}:0", o.prefix, o.name));
        for key in t.keys {
            // The hash tag is exactly `{name}`: one brace of each kind.
            assert_eq!(key.matches('{').count(), 1, "{key}");
            assert_eq!(key.matches('}').count(), 1, "{key}");
        }
        let (n_args, ttl_intervals) = if o.mode() == Mode::Ranked {
            (9, 5)
        } else {
            (4, 3)
        };
        assert_eq!(t.keys.len(), lease_core::KEY_COUNT);
        assert_eq!(t.args.len(), n_args);
        assert_eq!(t.args[0], interval_ms.to_string());
        // Key lifetime: Arrival's counters 3 L, Ranked's sets 5 L (rule 19
        // reads k-2).
        assert_eq!(t.args[1], (ttl_intervals * interval_ms).to_string());
        assert_eq!(t.args[2], "1");
        assert_eq!(t.args[3], lease_core::GroupRules::of(&o).encode());
        if o.mode() == Mode::Ranked {
            assert_eq!(t.args[4], format!("{:032x}", input.token));
            // A newcomer sends -1 as its last position (rule 15), no member
            // name (none is set here), and knows nothing of k-2 (rule 19).
            assert_eq!(t.args[5], "-1");
            assert_eq!(t.args[6], "");
            assert_eq!(t.args[7], "-1");
            assert_eq!(t.args[8], "-1");
        }
        assert_eq!(t.script.mode(), o.mode());
        assert!(t.expires_at > t0);
    }
    assert!(worker.poll_transmit().is_none());
    assert!(worker.poll_timeout().is_some_and(|t| t > t0));
    worker.handle_cancel(t0);
    if o.graceful_leave() {
        // A graceful leave removes the member first (rule 16): one leave
        // request and, if it fails, one retry; then the worker stops.
        for _ in 0..2 {
            assert!(worker.is_leaving());
            assert_eq!(worker.poll_event(), None);
            let (id, expires_at) = {
                let t = worker
                    .poll_transmit()
                    .expect("a leaving worker sends its leave at once");
                assert!(t.script.is_leave());
                (t.id, t.expires_at)
            };
            assert!(expires_at > t0);
            worker.handle_failure(t0, id, &"fuzz: no answer");
        }
    }
    assert_eq!(worker.poll_event(), Some(Event::Stopped));
    assert!(worker.is_stopped());
    assert!(worker.poll_timeout().is_none());
});
