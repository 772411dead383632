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
use lease_core::{Counted, GroupRules, MAX_SERVER_SECONDS, Mode, Reply};
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
        /// Truncate or extend the array (0 keeps the natural length).
        resize: i8,
    },
}

/// Reference parser, from the documented rules only, in wide integers.
fn reference(mode: Mode, interval_ms: u64, v: &[i64]) -> Option<Reply> {
    let status = *v.first()?;
    let len = match status {
        0 => 4,
        1 => 6,
        2 => 8,
        // Another incarnation holds the member name (rule 18): Ranked only.
        3 if mode == Mode::Ranked => 6,
        _ => return None,
    };
    if v.len() != len {
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
            // The version is the mode's revision: Arrival 1, Ranked 2
            // (hole-filling positions, rule 15).
            (v, l, Some(mode), Some(mapping))
                if l > 0 && v == if mode == Mode::Ranked { 2 } else { 1 } =>
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
    let (position, count) = match mode {
        Mode::Arrival => {
            let p = u32_of(v[4])?;
            let c = if v[5] == -1 {
                None
            } else {
                Some(u32_of(v[5])?)
            };
            (Some(p), c)
        }
        Mode::Ranked => {
            let p = if v[4] == -1 {
                None
            } else {
                Some(u32_of(v[4])?)
            };
            let c = u32_of(v[5])?;
            if p.is_some_and(|p| p >= c) {
                return None;
            }
            (p, Some(c))
        }
    };
    let counted = Counted {
        interval,
        server_time,
        position,
        count,
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
            Reply::Counted(c) | Reply::MemberInUse(c) => {
                assert_eq!(values.len(), 6);
                match mode {
                    Mode::Ranked => {
                        let n = c.count.expect("Ranked always has a count");
                        if let Some(p) = c.position {
                            assert!(p < n, "rank {p} not below size {n}");
                        }
                    }
                    Mode::Arrival => assert!(c.position.is_some(), "Arrival always has an index"),
                }
            }
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
            let natural = if status == 0 { 4 } else { 6 };
            let len = (natural as i64 + i64::from(resize)).clamp(0, 12) as usize;
            values.resize(len, -1);
            check(mode.into(), interval_ms, &values);
        }
    }
});
