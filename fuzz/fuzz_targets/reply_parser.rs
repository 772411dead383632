//! `Reply::parse` on arbitrary integers never panics, and agrees exactly with
//! an independent reference parser written from the documented rules
//! (`lease_core::reply` module docs, rules 2-4 of docs/protocol.md, and the
//! `MAX_SERVER_SECONDS` bound).
//!
//! Two input shapes: raw (mode, interval_ms, any `Vec<i64>`), and "shaped",
//! where the interval number is derived from `sec`/`usec` and then nudged,
//! so the fuzzer spends its time past the interval check (a division the
//! comparison tracing alone rarely solves).
#![no_main]

use arbitrary::Arbitrary;
use lease_core::ownership::Mapping;
use lease_core::{Counted, GroupRules, MAX_INHERITED, MAX_SERVER_SECONDS, Mode, Older, Reply};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FuzzMode {
    Ranked,
    Arrival,
}

impl From<FuzzMode> for Mode {
    fn from(m: FuzzMode) -> Mode {
        match m {
            FuzzMode::Ranked => Mode::Ranked,
            FuzzMode::Arrival => Mode::Arrival,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input {
    /// Anything at all.
    Raw {
        mode: FuzzMode,
        interval_ms: u64,
        values: Vec<i64>,
    },
    /// Close to a well-formed reply.
    Shaped {
        mode: FuzzMode,
        /// Interval length; small values are the interesting ones.
        interval_ms: u32,
        status: i8,
        sec: i64,
        usec: i64,
        /// Added to the interval number derived from `sec`/`usec`.
        nudge: i8,
        position: i64,
        count: i64,
        /// Rule 19's fields of a Ranked reply.
        registered: i8,
        older_position: i8,
        older_count: i8,
        /// Inherited positions (small, so they often fall below the size).
        inherited: Vec<u8>,
        /// Truncate or extend the array (0 keeps the natural length).
        resize: i8,
    },
}

/// Reference parser, from the documented rules only, in wide integers.
fn reference(mode: Mode, interval_ms: u64, v: &[i64]) -> Option<Reply> {
    let status = *v.first()?;
    // (shortest, longest) length of the status's reply.
    let (min, max) = match (status, mode) {
        (0, _) => (4, 4),
        (2, _) => (8, 8),
        (1, Mode::Arrival) => (6, 6),
        // Ranked: rule 19's three fields, then up to eight inherited
        // positions. Status 3 (another incarnation holds the member name,
        // rule 18) is Ranked only.
        (1 | 3, Mode::Ranked) => (9, 9 + 8),
        _ => return None,
    };
    if v.len() < min || v.len() > max {
        return None;
    }
    let (interval, sec, usec) = (v[1] as i128, v[2] as i128, v[3] as i128);
    if interval < 0 || sec < 0 || !(0..1_000_000).contains(&usec) {
        return None;
    }
    if sec > MAX_SERVER_SECONDS as i128 {
        return None;
    }
    let server_time = sec * 1_000_000 + usec;
    if server_time > u64::MAX as i128 {
        return None;
    }
    if interval_ms == 0 || (server_time / 1000) / interval_ms as i128 != interval {
        return None;
    }
    let (interval, server_time) = (interval as u64, server_time as u64);
    if status == 0 {
        return Some(Reply::WrongInterval {
            interval,
            server_time,
        });
    }
    if status == 2 {
        // The recorded rules: all four fields valid, or unreadable.
        let mode = match v[6] {
            0 => Some(Mode::Arrival),
            1 => Some(Mode::Ranked),
            _ => None,
        };
        let mapping = match v[7] {
            0 => Some(Mapping::Modulo),
            1 => Some(Mapping::Consistent),
            _ => None,
        };
        let recorded = match (v[4], v[5], mode, mapping) {
            // The version is the mode's revision: Arrival 1, Ranked 3
            // (sticky return, rule 19).
            (v, l, Some(mode), Some(mapping))
                if l > 0 && v == if mode == Mode::Ranked { 3 } else { 1 } =>
            {
                Some(GroupRules {
                    interval_ms: l as u64,
                    mode,
                    mapping,
                })
            }
            _ => None,
        };
        return Some(Reply::Refused {
            interval,
            server_time,
            recorded,
        });
    }
    let u32_of = |x: i64| u32::try_from(x).ok();
    // -1 is "absent"; anything else a u32 (None: the reply is bad).
    let maybe = |x: i64| if x == -1 { Some(None) } else { u32_of(x).map(Some) };
    let counted = match mode {
        Mode::Arrival => Counted {
            interval,
            server_time,
            position: Some(u32_of(v[4])?),
            count: maybe(v[5])?,
            registered: true,
            older: Older::default(),
        },
        Mode::Ranked => {
            let p = maybe(v[4])?;
            let c = u32_of(v[5])?;
            if p.is_some_and(|p| p >= c) {
                return None;
            }
            // Rule 19: registered is -1 exactly when the member is absent
            // from closed k-1, else 0 (only reserved there) or 1.
            let registered = match (v[6], p) {
                (-1, None) | (1, Some(_)) => true,
                (0, Some(_)) => false,
                _ => return None,
            };
            let older_p = maybe(v[7])?;
            let older_c = maybe(v[8])?;
            let inherited: Vec<u32> = v[9..].iter().map(|&x| u32_of(x)).collect::<Option<_>>()?;
            // Nothing of closed k-2 for a member absent from k-1.
            if p.is_none() && (older_p.is_some() || older_c.is_some()) {
                return None;
            }
            // A position in k-2 needs the size, and lies below it.
            if let Some(op) = older_p {
                if !older_c.is_some_and(|oc| op < oc) {
                    return None;
                }
            }
            if !inherited.is_empty() {
                let oc = older_c?;
                let ascending = inherited.windows(2).all(|w| w[0] < w[1]);
                let below = inherited.iter().all(|&q| q < oc);
                let not_own = older_p.is_none_or(|op| !inherited.contains(&op));
                if !(ascending && below && not_own) {
                    return None;
                }
            }
            assert!(inherited.len() <= MAX_INHERITED);
            Counted {
                interval,
                server_time,
                position: p,
                count: Some(c),
                registered,
                older: {
                    let mut older = Older::default();
                    older.position = older_p;
                    older.count = older_c;
                    older.with_inherited(&inherited).expect("at most eight")
                },
            }
        }
    };
    Some(if status == 3 {
        Reply::MemberInUse(counted)
    } else {
        Reply::Counted(counted)
    })
}

fn check(mode: Mode, interval_ms: u64, values: &[i64]) {
    let got = Reply::parse(mode, interval_ms, values);
    let want = reference(mode, interval_ms, values);
    match (&got, &want) {
        (Ok(g), Some(w)) => assert_eq!(g, w, "parse disagrees with the reference on {values:?}"),
        (Err(e), None) => {
            // Errors must render (adapters log them).
            let _ = e.to_string();
        }
        _ => {
            panic!("parse({mode:?}, {interval_ms}, {values:?}) = {got:?}, reference says {want:?}")
        }
    }
    // The documented invariants, checked on the result itself.
    if let Ok(reply) = got {
        assert!(interval_ms > 0);
        let st = reply.server_time();
        assert!(
            st / 1_000_000 <= MAX_SERVER_SECONDS,
            "server time beyond MAX_SERVER_SECONDS"
        );
        assert!(
            u64::try_from(values[3]).unwrap() < 1_000_000,
            "usec out of range"
        );
        assert_eq!(
            reply.interval(),
            (st / 1000) / interval_ms,
            "interval != (server_time/1000)/L"
        );
        match reply {
            Reply::WrongInterval { .. } => assert_eq!(values.len(), 4),
            Reply::Refused { .. } => assert_eq!(values.len(), 8),
            Reply::Counted(c) | Reply::MemberInUse(c) => match mode {
                Mode::Ranked => {
                    assert!((9..=9 + MAX_INHERITED).contains(&values.len()));
                    let n = c.count.expect("Ranked always has a count");
                    if let Some(p) = c.position {
                        assert!(p < n, "rank {p} not below size {n}");
                    }
                    let inherited = c.older.inherited();
                    assert_eq!(inherited.len(), values.len() - 9);
                    if let Some(oc) = c.older.count {
                        assert!(inherited.iter().all(|&q| q < oc));
                    } else {
                        assert!(inherited.is_empty() && c.older.position.is_none());
                    }
                }
                Mode::Arrival => {
                    assert_eq!(values.len(), 6);
                    assert!(c.position.is_some(), "Arrival always has an index");
                }
            },
        }
    }
}

fuzz_target!(|input: Input| {
    match input {
        Input::Raw {
            mode,
            interval_ms,
            values,
        } => check(mode.into(), interval_ms, &values),
        Input::Shaped {
            mode,
            interval_ms,
            status,
            sec,
            usec,
            nudge,
            position,
            count,
            registered,
            older_position,
            older_count,
            inherited,
            resize,
        } => {
            let interval_ms = u64::from(interval_ms);
            let derived = if interval_ms == 0 || sec < 0 || !(0..1_000_000).contains(&usec) {
                0
            } else {
                let ms = (sec as i128) * 1000 + (usec as i128) / 1000;
                (ms / interval_ms as i128) as i64
            };
            let interval = derived.wrapping_add(i64::from(nudge));
            let mut values = vec![i64::from(status), interval, sec, usec, position, count];
            let mode = Mode::from(mode);
            let natural = match (status, mode) {
                (0, _) => 4,
                (1 | 3, Mode::Ranked) => {
                    values.extend([registered, older_position, older_count].map(i64::from));
                    values.extend(inherited.iter().take(10).map(|&q| i64::from(q)));
                    values.len()
                }
                _ => 6,
            };
            let len = (natural as i64 + i64::from(resize)).clamp(0, 20) as usize;
            values.resize(len, -1);
            check(mode, interval_ms, &values);
        }
    }
});
