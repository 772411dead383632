//! The scenario over TLS (`rediss://`), for the adapters' `tls` features:
//! the test connects through the adapter's TLS knob to a
//! [`TlsRedis`](lease_testkit::TlsRedis) and hands the connection in.

use lease_core::{Mode, Options};
use lease_testkit::unique_name;

use crate::{Adapter, Group, intervals};

/// Four workers on `conn` (a TLS connection) settle on `0..4` of `n = 4`,
/// stay settled for three intervals, and hold their pairs exclusively.
pub async fn group_settles_over_tls<A: Adapter>(conn: &A::Conn) {
    let mut group = Group::<A>::default();
    let options = Options {
        interval: intervals(1.0),
        ..crate::options(&unique_name("tls"), Mode::Ranked)
    };
    group.add_many(conn, 0, &options, 4);
    group
        .wait("settled over TLS", intervals(10.0), |g| g.settled(0))
        .await;
    let before = group.indices(0);
    group.run_for(intervals(3.0)).await;
    assert!(group.settled(0), "unsettled over TLS:\n{}", group.render());
    assert_eq!(group.indices(0), before, "pairs moved:\n{}", group.render());
    assert!((0..4).all(|w| {
        group
            .held(w)
            .and_then(crate::pair)
            .is_some_and(|(_, n)| n == 4)
    }));
    group.check();
}
