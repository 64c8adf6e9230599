//! USDT phases on the real PostgreSQL 15 (Debian's build carries 71 probes): the built-in
//! `postgres-usdt` profile traced through pgbench, against the server's own counters.
//!
//! - every transaction the server counted (`pg_stat_database`: commits + rollbacks) is one
//!   `transaction` call, exactly, an aborted one included;
//! - every WAL buffer written because it was full (`pg_stat_wal.wal_buffers_full`) is one
//!   `wal_buffer_write` call, exactly;
//! - USDT phases nest with function phases in one tree: `standard_ExecutorRun` (a uprobe on a
//!   function) sits inside `execute` inside `execute` (PortalRun and the PortalRunMulti it
//!   calls both fire `query__execute__start`) inside `transaction`, 4 per pgbench transaction,
//!   and the buffer reads (USDT) inside it;
//! - statements group by their text (`group_by` on `query__parse__start`'s argument);
//! - the probes' semaphores are raised while wprof is attached and back to 0 after it exits.

mod common;

use std::path::Path;
use std::process::Command;

use common::pg::{pg_and_bpf, Pg, PG_BIN};
use common::*;

const PGBENCH_TRANSACTIONS: u64 = 2 * 150;

fn pgbench(pg: &Pg, args: &[&str]) -> String {
    let out = Command::new(Path::new(PG_BIN).join("pgbench"))
        .arg("-h")
        .arg(pg.sock())
        .args(["-p", &pg.port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("postgres")
        .output()
        .expect("run pgbench");
    let text = text(&out);
    assert!(out.status.success(), "pgbench {args:?} failed:\n{text}");
    text
}

/// (commits + rollbacks of database postgres, pg_stat_wal.wal_buffers_full), read in a new
/// session.
fn server_counts(pg: &Pg) -> (u64, u64) {
    let out = pg.psql(
        "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database \
         WHERE datname = 'postgres') || ' ' || (SELECT wal_buffers_full FROM pg_stat_wal);",
    );
    let v: Vec<u64> = out
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    (v[0], v[1])
}

/// The `u16` semaphore of USDT probe `name` in process `pid`, read through /proc/PID/mem
/// (the address from `readelf -n`, the load address from /proc/PID/maps: postgres is PIE with
/// its first segment at 0).
fn semaphore(pid: u32, name: &str) -> u16 {
    let notes = Command::new("readelf")
        .args(["-n", &format!("{PG_BIN}/postgres")])
        .output()
        .expect("readelf");
    let notes = String::from_utf8_lossy(&notes.stdout);
    let mut lines = notes
        .lines()
        .skip_while(|l| l.trim() != format!("Name: {name}"));
    lines.next().expect("probe in the notes");
    let loc = lines.next().expect("its location line");
    let hex = loc.rsplit("Semaphore: 0x").next().expect("a semaphore");
    let vaddr = u64::from_str_radix(hex.trim(), 16).expect("hex");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let base = maps
        .lines()
        .find(|l| l.ends_with("/bin/postgres"))
        .and_then(|l| l.split('-').next())
        .map(|a| u64::from_str_radix(a, 16).expect("hex"))
        .expect("postgres mapped");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).expect("open mem");
    let mut b = [0u8; 2];
    std::os::unix::fs::FileExt::read_exact_at(&mem, &mut b, base + vaddr).expect("read mem");
    u16::from_ne_bytes(b)
}

#[test]
fn usdt_phases_count_what_the_server_counted_and_nest_with_function_phases() {
    let Some(_g) = pg_and_bpf() else { return };
    let pg = Pg::start();
    // No autovacuum transactions behind the test's back; WAL buffers small enough that a bulk
    // insert fills them.
    pg.psql("ALTER SYSTEM SET autovacuum = off;");
    pg.psql("ALTER SYSTEM SET wal_buffers = '64kB';");
    pg.restart();
    pgbench(&pg, &["-i", "-s", "1", "-q"]);
    let postmaster = pg.postmaster_pid();
    assert_eq!(semaphore(postmaster, "transaction__start"), 0);
    let before = server_counts(&pg);
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let w = Attach::start(
        &[
            "--target",
            "postgres-usdt",
            "--pid",
            &postmaster.to_string(),
            "--follow-forks",
        ],
        &json,
    );
    // The kernel raised the semaphore in the postmaster, and so in every backend it forks.
    assert!(semaphore(postmaster, "transaction__start") >= 1);
    let per_client = (PGBENCH_TRANSACTIONS / 2).to_string();
    let bench = pgbench(&pg, &["-n", "-c", "2", "-t", &per_client]);
    assert!(
        bench.contains(&format!(
            "number of transactions actually processed: {PGBENCH_TRANSACTIONS}/"
        )),
        "{bench}"
    );
    // An aborted transaction: the ERROR's longjmp skips the done probes of the phases it
    // leaves; the abort closes the transaction.
    let mut s = pg.session();
    let err = s.exec("SELECT 1 / (g - g) FROM generate_series(1, 1) g;");
    assert!(
        err.iter().any(|l| l.contains("division by zero")),
        "{err:?}"
    );
    // WAL well beyond 64 kB of buffers.
    s.ok("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g;");
    drop(s);
    let (tree, stderr) = w.stop();
    // The session's backend has exited: its statistics are flushed.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = server_counts(&pg);
    assert_eq!(semaphore(postmaster, "transaction__start"), 0, "{stderr}");
    let run = read_json(&json);
    let sum = summary(&run);

    // The first server_counts session's own two transactions (its connection's catalog
    // lookup and its query) were flushed when it exited, after it read the counters, and
    // before wprof attached.
    let server_transactions = after.0 - before.0 - 2;
    assert_eq!(
        count_anywhere(&run, "transaction"),
        server_transactions,
        "{sum}\n{tree}"
    );
    assert_eq!(
        count_anywhere(&run, "wal_buffer_write"),
        after.1 - before.1,
        "{sum}"
    );
    assert!(
        after.1 > before.1,
        "no WAL buffer was written full: {after:?}"
    );

    // Nesting: the executor (a function) inside both execute levels inside the transaction.
    let dml = node(&run, &["transaction", "execute", "execute", "executor_run"]);
    assert_eq!(u(dml, "count"), 4 * PGBENCH_TRANSACTIONS, "{sum}");
    let flush = ["transaction", "xlog_flush", "fdatasync"];
    assert!(u(node(&run, &flush), "count") > 0, "{sum}");
    // And USDT phases inside a function phase: the executor's buffer reads.
    let reads = [
        "transaction",
        "execute",
        "execute",
        "executor_run",
        "buffer_read",
    ];
    assert!(u(node(&run, &reads), "count") > 0, "{sum}");
    // Grouped by statement text, literals folded: one UPDATE of pgbench_accounts a
    // transaction (pgbench's deltas are positive or negative: two texts).
    let roots = run["tree"]["roots"].as_array().expect("roots");
    let tx = roots
        .iter()
        .find(|r| r["name"] == "transaction")
        .expect("transaction root");
    let accounts: u64 = tx["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter(|c| {
            c["name"] == "parse"
                && c["key"]
                    .as_str()
                    .is_some_and(|k| k.starts_with("UPDATE pgbench_accounts SET abalance"))
        })
        .map(|c| u(c, "count"))
        .sum();
    assert_eq!(accounts, PGBENCH_TRANSACTIONS, "{sum}");
    // Every done probe found its start; the division by zero left its execute frame to the
    // abort.
    let phases = run["phases"].as_array().expect("phases");
    for p in phases {
        assert_eq!(p["unmatched_returns"], 0, "{p}");
        if !["executor_run", "xlog_flush", "fdatasync"].contains(&p["name"].as_str().unwrap_or(""))
        {
            assert_eq!(p["return_mode"], "usdt", "{p}");
        }
    }
    assert!(
        u(node(&run, &["transaction", "execute"]), "abandoned") >= 1,
        "{sum}"
    );
    // A USDT pair is corrected with a two-trap cost, not a single-stepped RET's.
    assert!(!stderr.contains("nop+ret-site"), "{stderr}");
}
