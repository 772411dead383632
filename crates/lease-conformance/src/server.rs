//! The start's server check (`INFO`, judged by `lease_core::check_server`)
//! against the real server the suite runs on.

use lease_core::{Mode, Options, diag};
use lease_testkit::{TestRedis, unique_name};

use crate::{Adapter, Group, capture, intervals};

/// Scenario: the workers started on one connection read `INFO` once between
/// them (the adapter shares the answer among a connection's clones), and
/// the server the suite runs on (Redis or Valkey) passes: `server checked`
/// once for the three workers (not per worker, not per interval) with the
/// server's kind and version, nothing refused or left unchecked, and the
/// group settles as usual.
pub async fn the_server_is_checked_once_per_connection<A: Adapter>() {
    let conn = A::connect(TestRedis::shared().url()).await;
    let mut group = Group::<A>::default();
    let name = unique_name("checked");
    let options = Options {
        interval: intervals(1.0),
        ..crate::options(&name, Mode::Ranked)
    };
    group.add_many(&conn, 0, &options, 3);
    group
        .wait("settled", intervals(10.0), |g| g.settled(0))
        .await;
    group.run_for(intervals(2.0)).await;
    let checked: Vec<capture::Captured> = capture::events(&name)
        .into_iter()
        .filter(|e| e.message == diag::SERVER_CHECKED)
        .collect();
    assert_eq!(checked.len(), 1, "once per connection: {checked:?}");
    for event in &checked {
        let server = event.fields.get("server").map(String::as_str);
        assert!(matches!(server, Some("redis" | "valkey")), "{event:?}");
        let version = event.fields.get("version").map(String::as_str);
        assert!(version.is_some_and(|v| v.contains('.')), "{event:?}");
    }
    assert_eq!(capture::count(&name, diag::SERVER_REFUSED), 0);
    assert_eq!(capture::count(&name, diag::SERVER_NOT_CHECKED), 0);
    group.check();
}
