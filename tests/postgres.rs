//! wprof against a real PostgreSQL 15 server that each test starts and removes itself.

mod common;

use common::pg::{self, Pg};

#[test]
fn harness_starts_a_cluster_and_a_session() {
    if !pg::available() {
        return;
    }
    let pg = Pg::start();
    let mut s = pg.session();
    assert!(s.backend_pid > 0);
    s.ok("CREATE TABLE t (id int PRIMARY KEY);");
    s.ok("INSERT INTO t VALUES (1);");
    let err = s.exec("INSERT INTO t VALUES (1);");
    assert!(err.iter().any(|l| l.contains("duplicate key")), "{err:?}");
    assert_eq!(s.ok("SELECT count(*) FROM t;"), vec!["1"]);
    assert_eq!(pg.psql("SELECT 41 + 1;").trim(), "42");
}
