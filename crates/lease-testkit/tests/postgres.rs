//! The private PostgreSQL server: starts on a free port (not 5432),
//! answers queries, and is gone with its directory after the drop.

use lease_testkit::PostgresServer;

#[test]
fn a_private_postgres_answers_and_is_removed_on_drop() {
    let server = PostgresServer::start().expect("start a private PostgreSQL");
    assert_ne!(server.port(), 5432, "never the system's server");
    let answer = server
        .psql("CREATE TABLE t (id bigint); INSERT INTO t SELECT generate_series(1, 10); SELECT sum(id) FROM t")
        .unwrap();
    assert_eq!(answer.lines().last(), Some("55"));
    let port = server.psql("SHOW port").unwrap();
    assert_eq!(port.trim(), server.port().to_string());
    assert!(server.psql("SELECT nonsense FROM nowhere").is_err());
    let dir = server.dir().to_owned();
    assert!(dir.join("data").join("PG_VERSION").exists());
    drop(server);
    assert!(!dir.exists(), "the directory is removed");
}
