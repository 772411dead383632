//! Estimates of the server clock and of the round trip, from the worker's own
//! registrations (DESIGN section 3, rules 8, 9 and 10).

/// Offset between the server clock and the local clock, in microseconds:
/// `server = local + offset`. Estimated from the midpoint of send and receive,
/// preferring samples with a short round trip (their midpoint is tighter).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SkewEstimate {
    sample: Option<Sample>,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    offset: i64,
    rtt: i64,
    taken_at: i64,
}

/// What a new reply says about the server clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkewCheck {
    /// Consistent with the estimate (or the first sample).
    Consistent,
    /// The server time lies outside `[send, receive]` widened by the gap:
    /// the server clock jumped (rule 10).
    Jumped {
        /// How far outside, in microseconds (signed: positive = ahead).
        by: i64,
    },
}

impl SkewEstimate {
    /// The current offset, if any reply has been seen.
    pub(crate) fn offset(&self) -> Option<i64> {
        self.sample.map(|s| s.offset)
    }

    /// Checks a reply executed at server time `server` for a request sent at
    /// local `sent` and received at local `received`, then takes it into the
    /// estimate. A jump is judged against the interval the execution must
    /// have fallen in, so a slow round trip is not mistaken for a jump.
    pub(crate) fn observe(
        &mut self,
        sent: i64,
        received: i64,
        server: i64,
        tolerance: i64,
        max_age: i64,
    ) -> SkewCheck {
        let rtt = (received - sent).max(0);
        let offset = server - (sent + rtt / 2);
        let check = match self.sample {
            None => SkewCheck::Consistent,
            Some(old) => {
                // The stored offset is itself uncertain by half its round
                // trip: a slow sample that executed late reads high.
                let slack = tolerance + old.rtt / 2;
                let earliest = sent + old.offset - slack;
                let latest = received + old.offset + slack;
                if server < earliest {
                    SkewCheck::Jumped {
                        by: server - earliest,
                    }
                } else if server > latest {
                    SkewCheck::Jumped {
                        by: server - latest,
                    }
                } else {
                    SkewCheck::Consistent
                }
            }
        };
        let replace = match (self.sample, check) {
            (None, _) | (_, SkewCheck::Jumped { .. }) => true,
            // A tighter sample, or the old one has gone stale (drift).
            (Some(old), _) => rtt <= old.rtt.saturating_mul(2) || received - old.taken_at > max_age,
        };
        if replace {
            self.sample = Some(Sample {
                offset,
                rtt,
                taken_at: received,
            });
        }
        check
    }
}

/// Smoothed round-trip time and its variation (RFC 6298), giving an adaptive
/// per-request timeout of `srtt + 4 * rttvar`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RttEstimate {
    srtt: Option<i64>,
    rttvar: i64,
}

impl RttEstimate {
    pub(crate) fn observe(&mut self, rtt: i64) {
        let rtt = rtt.max(0);
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                self.rttvar = (3 * self.rttvar + (srtt - rtt).abs()) / 4;
                self.srtt = Some((7 * srtt + rtt) / 8);
            }
        }
    }

    /// `srtt + 4 * rttvar`, or `initial` before the first sample.
    pub(crate) fn timeout(&self, initial: i64) -> i64 {
        match self.srtt {
            None => initial,
            Some(srtt) => srtt + 4 * self.rttvar,
        }
    }

    /// The smoothed round trip, if measured.
    #[cfg(test)]
    pub(crate) fn srtt(&self) -> Option<i64> {
        self.srtt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_sets_the_midpoint_offset() {
        let mut s = SkewEstimate::default();
        assert_eq!(
            s.observe(100, 300, 10_200, 50, 1_000_000),
            SkewCheck::Consistent
        );
        assert_eq!(s.offset(), Some(10_000));
    }

    #[test]
    fn slow_round_trip_is_not_a_jump_but_a_step_is() {
        let mut s = SkewEstimate::default();
        s.observe(0, 10, 1_005, 50, 1_000_000);
        // Executed late in a 5 ms round trip: still within [send, receive].
        assert_eq!(
            s.observe(1_000, 6_000, 6_900, 50, 1_000_000),
            SkewCheck::Consistent
        );
        // Server time far ahead of anything the round trip allows.
        assert!(matches!(
            s.observe(10_000, 10_010, 12_000, 50, 1_000_000),
            SkewCheck::Jumped { by } if by > 0
        ));
        // Backwards.
        assert!(matches!(
            s.observe(20_000, 20_010, 15_000, 50, 1_000_000),
            SkewCheck::Jumped { by } if by < 0
        ));
    }

    #[test]
    fn a_slow_first_sample_does_not_make_the_next_fast_reply_a_jump() {
        let mut s = SkewEstimate::default();
        // True offset 10_000. A 100 ms round trip that executed 99.5 ms after
        // the send: the midpoint estimate reads 49.5 ms high.
        s.observe(0, 100_000, 10_000 + 99_500, 45_000, 10_000_000);
        // A fast reply now must not look like a 4.5 ms backwards jump.
        assert_eq!(
            s.observe(200_000, 201_000, 10_000 + 200_500, 45_000, 10_000_000),
            SkewCheck::Consistent
        );
        assert_eq!(s.offset(), Some(10_000));
    }

    #[test]
    fn rto_follows_rfc6298() {
        let mut r = RttEstimate::default();
        assert_eq!(r.timeout(500), 500);
        r.observe(100);
        assert_eq!(r.timeout(500), 100 + 4 * 50);
        r.observe(100);
        assert_eq!(r.srtt(), Some(100));
        assert_eq!(r.timeout(500), 100 + 4 * 37);
    }
}
