//! Requests: what is in flight, what is sent (keys and arguments of the
//! scripts, rule 2), and which answers match the request they answer.

use std::fmt::{Display, Write as _};
use std::time::Instant;

use crate::reply::{Reply, ReplyError};
use crate::script::{Script, write_fillers_key, write_key};

use super::config::Config;
use super::identity::{Identity, RequestId};

/// Interval number named by a newcomer's first request, which has no clock
/// estimate yet: it never matches the server, so the script only reports its
/// time (rule 2: the wrong-interval answer is the newcomer's clock probe).
pub(super) const PROBE_INTERVAL: u64 = 1;

/// One request in flight.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    pub(super) id: RequestId,
    /// Local time of the send: every lease deadline is anchored here (rule 6).
    pub(super) sent_at: i64,
    /// The interval named in the keys.
    pub(super) interval: u64,
    /// When to stop waiting and retry (adaptive, rule 9).
    pub(super) timeout_at: i64,
    /// Timed out: a retry is under way, but under Ranked counting the reply
    /// is still accepted (its deadline is anchored at its own send).
    pub(super) timed_out: bool,
    /// After this the reply is dropped.
    pub(super) give_up_at: i64,
}

/// How many keys every request declares ([`Transmit::keys`]).
pub const KEY_COUNT: usize = 8;

/// A request to send now: `EVALSHA script.sha1() 8 keys[0] .. keys[7]
/// args..` (or `EVAL script.source() ..` after `NOSCRIPT`).
#[derive(Debug)]
pub struct Transmit<'a> {
    /// Feed the outcome back under this id.
    pub id: RequestId,
    /// The script to run.
    pub script: &'static Script,
    /// `KEYS`. A registration for interval `k`: `k`, `k-1`, the group's
    /// rules record, the group's member record (rule 18; only a
    /// registration under a member name touches it), the filler cache of
    /// `k-1` (rule 15; only a filler touches it), `k+1` (the reservation,
    /// rule 19), `k-2` (read by a returnee and for inheritance, rule 19)
    /// and the filler cache of `k` (deleted by a registration that changes
    /// its entry's base score there). A leave naming `c`: `c`, `c+1`, the
    /// rules record, `c+2`, the filler caches of `c`, `c+1` and `c+2` (each
    /// set it changes loses its own) and the member record (not touched).
    /// Every request declares [`KEY_COUNT`] keys, so that the key count is
    /// fixed (`Arrival` reads only the first three).
    pub keys: [&'a str; KEY_COUNT],
    /// `ARGV`.
    pub args: &'a [String],
    /// After this instant the reply is of no use: the driver may abandon the
    /// request (and report it with [`crate::Worker::handle_failure`] or not
    /// at all).
    pub expires_at: Instant,
}

/// The keys and arguments of the next request, reused between requests so
/// that a registration allocates nothing in steady state.
#[derive(Debug)]
pub(super) struct Buffers {
    pub(super) keys: [String; KEY_COUNT],
    pub(super) args: Vec<String>,
}

impl Buffers {
    pub(super) fn new(cfg: &Config) -> Self {
        let mut keys: [String; KEY_COUNT] = std::array::from_fn(|_| String::with_capacity(64));
        crate::script::write_rules_key(&mut keys[2], &cfg.prefix, &cfg.name);
        Self {
            keys,
            args: vec![String::with_capacity(40); 9],
        }
    }

    /// A registration for interval `k` (rule 2): `KEYS = [k, k-1, rules,
    /// members, fillers of k-1, k+1, k-2, fillers of k]`, `ARGV = [L, ttl, k, rules,
    /// identity, last position, member, older position, older size]`
    /// (Arrival sends the first four). A returning worker sends its last
    /// known position (rule 15), a newcomer -1; the member name is empty
    /// for a worker without one (rule 18); `older` is the worker's pair in
    /// closed `k-2` when its previous reply (from `k-1`) told it, else -1
    /// twice, and the script then reads it (rule 19).
    pub(super) fn registration(
        &mut self,
        cfg: &Config,
        k: u64,
        identity: Identity,
        last: Option<u32>,
        older: Option<crate::Pair>,
    ) {
        write_key(&mut self.keys[0], &cfg.prefix, &cfg.name, k);
        let closed = k.saturating_sub(1);
        write_key(&mut self.keys[1], &cfg.prefix, &cfg.name, closed);
        crate::script::write_members_key(&mut self.keys[3], &cfg.prefix, &cfg.name);
        write_fillers_key(&mut self.keys[4], &cfg.prefix, &cfg.name, closed);
        write_key(
            &mut self.keys[5],
            &cfg.prefix,
            &cfg.name,
            k.saturating_add(1),
        );
        write_key(
            &mut self.keys[6],
            &cfg.prefix,
            &cfg.name,
            k.saturating_sub(2),
        );
        write_fillers_key(&mut self.keys[7], &cfg.prefix, &cfg.name, k);
        let last = last.map_or(-1, i64::from);
        let member = cfg.member.as_ref().map_or("", crate::Member::as_str);
        let (older_i, older_n) = older.map_or((-1, -1), |p| (i64::from(p.i()), i64::from(p.n())));
        let values: [&dyn Display; 9] = [
            &cfg.interval_ms,
            &cfg.ttl_ms,
            &k,
            &cfg.rules_record,
            &identity,
            &last,
            &member,
            &older_i,
            &older_n,
        ];
        let count = match cfg.mode {
            crate::Mode::Arrival => 4,
            crate::Mode::Ranked => 9,
        };
        self.fill(&values[..count]);
    }

    /// A leave request (rules 16 and 19): `KEYS = [c, c+1, rules, c+2,
    /// fillers of c, fillers of c+1, fillers of c+2, members]`, `ARGV = [L, c,
    /// rules, identity, replied]`, `replied` the interval of the newest
    /// registration reply the worker processed (-1 if none).
    pub(super) fn leave(&mut self, cfg: &Config, c: u64, identity: Identity, replied: Option<u64>) {
        write_key(&mut self.keys[0], &cfg.prefix, &cfg.name, c);
        write_key(&mut self.keys[1], &cfg.prefix, &cfg.name, c + 1);
        write_key(&mut self.keys[3], &cfg.prefix, &cfg.name, c + 2);
        write_fillers_key(&mut self.keys[4], &cfg.prefix, &cfg.name, c);
        write_fillers_key(&mut self.keys[5], &cfg.prefix, &cfg.name, c + 1);
        write_fillers_key(&mut self.keys[6], &cfg.prefix, &cfg.name, c + 2);
        crate::script::write_members_key(&mut self.keys[7], &cfg.prefix, &cfg.name);
        let replied = replied.map_or(-1, |k| i64::try_from(k).unwrap_or(i64::MAX));
        let values: [&dyn Display; 5] =
            [&cfg.interval_ms, &c, &cfg.rules_record, &identity, &replied];
        self.fill(&values);
    }

    fn fill(&mut self, values: &[&dyn Display]) {
        self.args
            .resize_with(values.len(), || String::with_capacity(40));
        for (arg, v) in self.args.iter_mut().zip(values) {
            arg.clear();
            let _ = write!(arg, "{v}");
        }
    }
}

/// A reply must be about the interval its keys named: a counted reply for
/// another interval, or a wrong-interval reply naming the same one, is
/// malformed.
pub(super) fn check_interval(reply: &Reply, expected: u64) -> Result<(), ReplyError> {
    let ok = match reply {
        Reply::Counted(c) | Reply::MemberInUse(c) => c.interval == expected,
        Reply::WrongInterval { interval, .. } => *interval != expected,
        // The rules are checked before the interval: any interval may come.
        Reply::Refused { .. } => true,
    };
    if ok {
        Ok(())
    } else {
        Err(ReplyError::UnexpectedInterval {
            expected,
            got: reply.interval(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::{Identity, Options, Worker};

    /// Every key of every request names the group's hash tag (one Redis
    /// Cluster slot; a cluster refuses a request whose keys hash apart,
    /// and an empty key is one of those), for a registration and a leave.
    #[test]
    fn every_key_of_every_request_carries_the_group_hash_tag() {
        let t0 = Instant::now();
        let o: Options = Options::new("g", Duration::from_millis(1000)).with_prefix("p:");
        let mut w = Worker::new(&o, Identity::seeded(1, 0), t0).unwrap();
        w.handle_timeout(t0);
        let probe = w.poll_transmit().expect("the probe");
        assert!(
            probe.keys.iter().all(|k| k.starts_with("p:{g}:")),
            "{:?}",
            probe.keys
        );
        let mut distinct = probe.keys.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        // k-2 of the probe's interval 1 saturates to 0, which is also k-1.
        assert_eq!(distinct.len(), crate::KEY_COUNT - 1, "{:?}", probe.keys);
        let id = probe.id;
        // Interval 100 at 100.3 s: the probe named interval 1.
        w.handle_reply(t0, id, &[0, 100, 100, 300_000]).unwrap();
        w.handle_cancel(t0 + Duration::from_millis(1));
        let leave = w.poll_transmit().expect("the leave request");
        assert!(leave.script.is_leave());
        assert!(
            leave.keys.iter().all(|k| k.starts_with("p:{g}:")),
            "{:?}",
            leave.keys
        );
    }
}
