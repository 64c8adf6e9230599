//! wprof against a real PostgreSQL 15 server that each test starts and removes itself
//! (tests/common/pg.rs): the stock `postgres` profile on INSERT, multi-row INSERT, COPY and
//! an indexed table; an ERROR raised mid-insert; backends forked after the attach
//! (`--follow-forks`, `--per-pid`); argument capture and `under`; and the ways such a run
//! ends (the backend exits, the server restarts, an extension that is never loaded).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::pg::{self, pg_and_bpf, Pg, Session};
use common::*;
use serde_json::Value;

/// What a test of one traced backend works with. Bind every field when destructuring (`..`
/// would drop the cluster, or the run's directory, on the spot).
struct TracedBackend {
    pg: Pg,
    s: Session,
    json: PathBuf,
    w: Attach,
    _dir: tempfile::TempDir,
}

/// A fresh cluster, one session that ran `setup`, and `wprof attach` on its backend with the
/// built-in `postgres` profile, or with `profile` (TOML text) when given.
fn traced_backend(setup: &str, profile: Option<&str>) -> TracedBackend {
    let pg = Pg::start();
    let mut s = pg.session();
    if !setup.is_empty() {
        s.ok(setup);
    }
    let dir = tempdir();
    let target = match profile {
        Some(text) => {
            let path = dir.path().join("profile.toml");
            std::fs::write(&path, text).expect("write the profile");
            path.to_string_lossy().into_owned()
        }
        None => "postgres".to_string(),
    };
    let json = dir.path().join("run.json");
    let w = Attach::start(
        &["--target", &target, "--pid", &s.backend_pid.to_string()],
        &json,
    );
    TracedBackend {
        pg,
        s,
        json,
        w,
        _dir: dir,
    }
}

/// The node at `path` (phase names from a root), or a panic showing the tree.
fn at<'a>(run: &'a Value, path: &[&str]) -> &'a Value {
    node(run, path)
}

fn count(run: &Value, path: &[&str]) -> u64 {
    u(at(run, path), "count")
}

fn units(run: &Value, path: &[&str]) -> u64 {
    let n = at(run, path);
    n["units"]["total"]
        .as_u64()
        .unwrap_or_else(|| panic!("{path:?} has no units: {n}"))
}

fn phase<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

/// `n` COPY rows `(id, 'v<id>')` starting at `from`, then the end-of-data marker.
fn copy_rows(from: u32, n: u32) -> String {
    let mut s = String::new();
    for i in from..from + n {
        s.push_str(&format!("{i}\tv{i}\n"));
    }
    s.push_str("\\.");
    s
}

const SINGLE: u32 = 200;
const MULTI: u32 = 50;
const COPY: u32 = 3000;

#[test]
fn insert_multi_row_insert_and_copy_give_exact_counts_and_the_write_path_shape() {
    let Some(_g) = pg_and_bpf() else { return };
    // A primary key and one more index: every row costs two btinsert calls.
    let TracedBackend {
        pg: _pg,
        mut s,
        json,
        w,
        _dir,
    } = traced_backend(
        "CREATE TABLE t (id int PRIMARY KEY, v text); CREATE INDEX t_v ON t (v);",
        None,
    );
    // N single-row INSERTs in one transaction.
    s.ok("BEGIN;");
    for i in 0..SINGLE {
        s.ok(&format!("INSERT INTO t VALUES ({i}, 'v{i}');"));
    }
    s.ok("COMMIT;");
    // One multi-row INSERT (autocommit).
    let values: Vec<String> = (SINGLE..SINGLE + MULTI)
        .map(|i| format!("({i}, 'v{i}')"))
        .collect();
    s.ok(&format!("INSERT INTO t VALUES {};", values.join(", ")));
    // COPY of N rows (autocommit).
    s.ok(&format!(
        "COPY t FROM STDIN;\n{}",
        copy_rows(SINGLE + MULTI, COPY)
    ));
    let (tree, _) = w.stop();
    assert_eq!(
        s.ok("SELECT count(*) FROM t;"),
        vec![(SINGLE + MULTI + COPY).to_string()]
    );

    let run = read_json(&json);
    let sum = summary(&run);
    // INSERTs: one heap_insert per row, under the executor, each writing one WAL record
    // nested inside it; two index inserts per row.
    let rows = (SINGLE + MULTI) as u64;
    assert_eq!(count(&run, &["executor_run"]), SINGLE as u64 + 1, "{sum}");
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), rows, "{sum}");
    assert_eq!(units(&run, &["executor_run", "heap_insert"]), rows, "{sum}");
    assert_eq!(
        count(&run, &["executor_run", "heap_insert", "xlog_insert"]),
        rows,
        "{sum}"
    );
    assert_eq!(
        count(&run, &["executor_run", "index_insert"]),
        rows,
        "{sum}"
    );
    assert_eq!(
        count(&run, &["executor_run", "index_insert", "btinsert"]),
        2 * rows,
        "{sum}"
    );
    // COPY: heap_multi_insert's captured ntuples add up to the rows, in batches.
    let copy = at(&run, &["copy_from"]);
    assert_eq!(u(copy, "count"), 1, "{sum}");
    let batches = count(&run, &["copy_from", "heap_multi_insert"]);
    assert!(
        batches >= 3 && batches < COPY as u64,
        "{batches} batches: {sum}"
    );
    assert_eq!(
        units(&run, &["copy_from", "heap_multi_insert"]),
        COPY as u64,
        "{sum}"
    );
    assert_eq!(
        count(&run, &["copy_from", "index_insert", "btinsert"]),
        2 * COPY as u64,
        "{sum}"
    );
    assert_eq!(count_anywhere(&run, "btinsert"), 2 * (rows + COPY as u64));
    assert_eq!(count_anywhere(&run, "heap_multi_insert"), batches);
    // CommitTransactionCommand ends every statement (BEGIN, 200 INSERTs, COMMIT, the
    // multi-row INSERT, the COPY); only the three real commits (the transaction, the
    // multi-row INSERT, the COPY) write a commit record and flush the WAL under it, and the
    // flush syncs the file.
    assert_eq!(count(&run, &["commit"]), SINGLE as u64 + 4, "{sum}");
    assert_eq!(count(&run, &["commit", "commit_record"]), 3, "{sum}");
    assert_eq!(count(&run, &["commit", "xlog_flush"]), 3, "{sum}");
    assert_eq!(
        count(&run, &["commit", "xlog_flush", "fdatasync"]),
        3,
        "{sum}"
    );
    // Nothing lost or unmatched, and the tree shows the per-row figures.
    assert_eq!(u(&run["counters"], "lost_spans"), 0);
    assert!(
        tree.contains(&format!("{COPY} rows")) && tree.contains("/row"),
        "{tree}"
    );
}

#[test]
fn an_error_mid_insert_leaves_the_tree_consistent_and_the_backend_alive() {
    let Some(_g) = pg_and_bpf() else { return };
    let TracedBackend {
        pg: _pg,
        mut s,
        json,
        w,
        _dir,
    } = traced_backend("CREATE TABLE u (id int PRIMARY KEY);", None);
    let mut violations = 0;
    for i in 0..40 {
        // Every 4th statement repeats a key: the unique check raises an ERROR from inside
        // btinsert (ereport's longjmp skips the returns of the open frames). The last one is
        // a good statement, so no call is still open when the run ends.
        let key = if i % 4 == 2 { i - 1 } else { i };
        let out = s.exec(&format!("INSERT INTO u VALUES ({key});"));
        if out.iter().any(|l| l.contains("duplicate key")) {
            violations += 1;
        } else {
            assert!(out.is_empty(), "{out:?}");
        }
    }
    assert_eq!(violations, 10);
    let (_, stderr) = w.stop();
    // The backend lives on and the table holds exactly the good rows.
    assert_eq!(s.ok("SELECT count(*) FROM u;"), vec!["30"]);
    let run = read_json(&json);
    let sum = summary(&run);
    // 40 statements entered the executor; the 10 that failed never returned from it.
    let exec = at(&run, &["executor_run"]);
    assert_eq!(
        u(exec, "count") + u(exec, "abandoned"),
        40,
        "{sum}\n{stderr}"
    );
    assert_eq!(u(exec, "abandoned"), 10, "{sum}");
    // Every statement inserted its heap tuple before the index check failed.
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), 40, "{sum}");
    let bt = at(&run, &["executor_run", "index_insert", "btinsert"]);
    assert_eq!(u(bt, "count"), 30, "{sum}");
    assert_eq!(u(bt, "abandoned"), 10, "{sum}");
    // Only the good statements committed (the failed ones abort instead), each flushing.
    assert_eq!(count(&run, &["commit"]), 30, "{sum}");
    assert_eq!(count(&run, &["commit", "xlog_flush"]), 30, "{sum}");
    assert_eq!(u(&run["counters"], "unmatched_returns"), 0, "{sum}");
}

#[test]
fn follow_forks_traces_backends_started_after_the_attach_each_in_its_own_tree() {
    let Some(_g) = pg_and_bpf() else { return };
    let pg = Pg::start();
    pg.psql("CREATE TABLE f (id int PRIMARY KEY);");
    let postmaster = pg.postmaster_pid();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let w = Attach::start(
        &[
            "--target",
            "postgres",
            "--pid",
            &postmaster.to_string(),
            "--follow-forks",
            "--per-pid",
        ],
        &json,
    );
    // Two sessions whose backends are forked after the attach.
    let mut a = pg.session();
    let mut b = pg.session();
    for i in 0..25 {
        a.ok(&format!("INSERT INTO f VALUES ({i});"));
    }
    for i in 100..110 {
        b.ok(&format!("INSERT INTO f VALUES ({i});"));
    }
    // One more that connects, inserts and exits before the run ends.
    pg.psql("INSERT INTO f VALUES (1000);");
    let (tree, stderr) = w.stop();
    // The calibration child is not a traced process: its probes still count.
    assert!(
        !stderr.contains("recalibration at the end failed"),
        "{stderr}"
    );
    let run = read_json(&json);
    let sum = summary(&run);
    assert_eq!(run["provenance"]["follow_forks"], true);
    let forked: Vec<u64> = run["provenance"]["forked"]
        .as_array()
        .expect("forked pids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    for pid in [a.backend_pid, b.backend_pid] {
        assert!(forked.contains(&(pid as u64)), "{pid} not in {forked:?}");
    }
    // The merged tree holds every backend's rows.
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), 36, "{sum}");
    // One tree per process, labelled with the backend's title and its postmaster.
    let procs = run["processes"].as_array().expect("processes");
    let of = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no tree for {pid}: {procs:?}"))
    };
    for (pid, rows) in [(a.backend_pid, 25), (b.backend_pid, 10)] {
        let p = of(pid);
        assert_eq!(p["parent"], postmaster, "{p}");
        assert!(
            p["label"].as_str().unwrap_or("").starts_with("postgres: "),
            "{}",
            p["label"]
        );
        let one = serde_json::json!({ "tree": p["tree"] });
        assert_eq!(count(&one, &["executor_run", "heap_insert"]), rows);
    }
    assert!(
        tree.contains(&format!("── pid {}", a.backend_pid)),
        "{tree}"
    );
    assert!(
        tree.contains(&format!("(forked by {postmaster}: ")),
        "{tree}"
    );
}

#[test]
fn several_postmasters_at_once_each_backend_labelled_with_its_server() {
    let Some(_g) = pg_and_bpf() else { return };
    // Two servers on one host, as a Cloudberry host runs one postmaster per segment.
    let seg = [Pg::start(), Pg::start()];
    for pg in &seg {
        pg.psql("CREATE TABLE s (id int);");
    }
    let pms: Vec<String> = seg
        .iter()
        .map(|pg| pg.postmaster_pid().to_string())
        .collect();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let w = Attach::start(
        &[
            "--target",
            "postgres",
            "--pid",
            &pms[0],
            "--pid",
            &pms[1],
            "--follow-forks",
            "--per-pid",
        ],
        &json,
    );
    let mut sessions: Vec<_> = seg.iter().map(Pg::session).collect();
    for (k, s) in sessions.iter_mut().enumerate() {
        for i in 0..(5 + 5 * k) {
            s.ok(&format!("INSERT INTO s VALUES ({i});"));
        }
    }
    let (tree, _) = w.stop();
    let run = read_json(&json);
    let procs = run["processes"].as_array().expect("processes");
    for (k, s) in sessions.iter().enumerate() {
        let p = procs
            .iter()
            .find(|p| p["pid"] == s.backend_pid)
            .unwrap_or_else(|| panic!("no tree for backend {}: {tree}", s.backend_pid));
        assert_eq!(p["parent"].to_string(), pms[k], "{p}");
        let data_dir = seg[k].dir().display().to_string();
        assert!(
            p["parent_label"].as_str().unwrap_or("").contains(&data_dir),
            "the parent's label names its data directory {data_dir}: {}",
            p["parent_label"]
        );
        let one = serde_json::json!({ "tree": p["tree"] });
        assert_eq!(
            count(&one, &["executor_run", "heap_insert"]),
            5 + 5 * k as u64
        );
    }
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), 15);
}

#[test]
fn under_keeps_catalog_inserts_out_and_retval_capture_works() {
    let Some(_g) = pg_and_bpf() else { return };
    let TracedBackend {
        pg: _pg,
        mut s,
        json,
        w,
        _dir,
    } = traced_backend(
        "",
        Some(
            r#"name = "pg-under"
object = "exe"
[[phase]]
name = "executor_run"
symbol = "standard_ExecutorRun"
[[phase]]
name = "user_insert"
symbol = "heap_insert"
under = "executor_run"
unit = "rows"
[[phase]]
name = "xlog_insert"
symbol = "XLogInsert"
arg = "retval"
unit = "bytes"
"#,
        ),
    );
    // CREATE TABLE inserts catalog rows with heap_insert outside any executor run.
    s.ok("CREATE TABLE c (id int, pad text);");
    for i in 0..20 {
        s.ok(&format!("INSERT INTO c VALUES ({i}, repeat('x', 100));"));
    }
    w.stop();
    let run = read_json(&json);
    let sum = summary(&run);
    assert_eq!(count_anywhere(&run, "user_insert"), 20, "{sum}");
    assert_eq!(
        count(&run, &["executor_run", "user_insert"]),
        20,
        "only under the executor: {sum}"
    );
    let p = phase(&run, "user_insert");
    assert!(
        u(p, "outside_under") > 0,
        "catalog inserts were seen and left out: {p}"
    );
    assert_eq!(u(p, "unmatched_returns"), 0, "{p}");
    // XLogInsert returns the WAL position after the record: a large, growing number whose
    // sum over the calls is far above the call count.
    let x = at(&run, &["executor_run", "user_insert", "xlog_insert"]);
    assert_eq!(u(x, "count"), 20, "{sum}");
    assert!(
        x["units"]["total"].as_u64().unwrap_or(0) > 20 * 0x100_0000,
        "{x}"
    );
}

#[test]
fn a_run_ends_cleanly_when_the_backend_exits_or_the_server_restarts() {
    let Some(_g) = pg_and_bpf() else { return };
    let pg = Pg::start();
    let dir = tempdir();

    // The traced backend exits (its client disconnects): the run ends by itself.
    let json = dir.path().join("backend.json");
    let mut s = pg.session();
    s.ok("CREATE TABLE r (id int);");
    let w = Attach::start(
        &["--target", "postgres", "--pid", &s.backend_pid.to_string()],
        &json,
    );
    s.ok("INSERT INTO r VALUES (1), (2);");
    drop(s);
    let (tree, stderr) = w.wait();
    let run = read_json(&json);
    assert_eq!(run["provenance"]["end_reason"], "traced process exited");
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), 2, "{tree}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // The server restarts (immediate stop, as after a crash) under --follow-forks: the
    // postmaster is gone, so the run ends and writes what it saw.
    let json = dir.path().join("restart.json");
    let w = Attach::start(
        &[
            "--target",
            "postgres",
            "--pid",
            &pg.postmaster_pid().to_string(),
            "--follow-forks",
        ],
        &json,
    );
    pg.psql("INSERT INTO r VALUES (3);");
    pg.restart();
    let (_, stderr) = w.wait();
    let run = read_json(&json);
    assert_eq!(run["provenance"]["end_reason"], "traced process exited");
    assert_eq!(count(&run, &["executor_run", "heap_insert"]), 1, "{stderr}");
    // The restarted server works (and was not harmed by the probes wprof removed).
    assert_eq!(pg.psql("SELECT count(*) FROM r;").trim(), "3");
}

#[test]
fn an_extension_loaded_after_the_attach_is_traced_from_its_first_call() {
    let Some(_g) = pg_and_bpf() else { return };
    let TracedBackend {
        pg: _pg,
        mut s,
        json,
        w,
        _dir,
    } = traced_backend(
        "CREATE TABLE x (id int);",
        Some(
            r#"name = "pg-plpgsql"
object = "exe"
[[phase]]
name = "do_block"
symbol = "plpgsql_inline_handler"
object = "plpgsql.so"
[[phase]]
name = "executor_run"
symbol = "standard_ExecutorRun"
[[phase]]
name = "heap_insert"
symbol = "heap_insert"
"#,
        ),
    );
    let backend = s.backend_pid;
    let maps = || std::fs::read_to_string(format!("/proc/{backend}/maps")).unwrap();
    assert!(!maps().contains("plpgsql.so"), "plpgsql is loaded lazily");
    for i in 0..3 {
        s.ok(&format!("DO $$ BEGIN INSERT INTO x VALUES ({i}); END $$;"));
    }
    assert!(maps().contains("plpgsql.so"), "the DO blocks loaded it");
    w.stop();
    let run = read_json(&json);
    let sum = summary(&run);
    // Found in PostgreSQL's pkglibdir before it was mapped; the first DO block counts.
    assert!(
        phase(&run, "do_block")["object"]
            .as_str()
            .unwrap_or("")
            .ends_with("/15/lib/plpgsql.so"),
        "{}",
        phase(&run, "do_block")
    );
    assert_eq!(count(&run, &["do_block"]), 3, "{sum}");
    assert_eq!(
        count(&run, &["do_block", "executor_run", "heap_insert"]),
        3,
        "{sum}"
    );
}

#[test]
fn an_extension_that_is_never_loaded_is_a_single_warning() {
    let Some(_g) = pg_and_bpf() else { return };
    let TracedBackend {
        pg: _pg,
        mut s,
        json,
        w,
        _dir,
    } = traced_backend(
        "CREATE TABLE e (id int);",
        Some(
            r#"name = "pg-ext"
object = "exe"
[[phase]]
name = "heap_insert"
symbol = "heap_insert"
[[phase]]
name = "ext_insert"
symbol = "pax::CCPaxAccessMethod::TupleInsert"
object = "pax_never_installed.so"
optional = true
"#,
        ),
    );
    s.ok("INSERT INTO e VALUES (1);");
    let (_, stderr) = w.stop();
    // One warning; wprof watched the loader for it in case it came, and it never did.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("warning") && l.contains("ext_insert"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        stderr.contains("watching dlopen for the library of phase(s) ext_insert"),
        "{stderr}"
    );
    assert!(!stderr.contains("attached late"), "{stderr}");
    let run = read_json(&json);
    assert_eq!(count(&run, &["heap_insert"]), 1);
    assert!(phase(&run, "ext_insert")["status"]
        .as_str()
        .unwrap_or("")
        .starts_with("unresolved"));
}

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
    let _ = Command::new("true").status();
}
