//! The built-in `pgrx-merge` profile against a real pgrx extension in a real PostgreSQL 15
//! backend: tests/fixtures/pgrx_refresh, built by its build.sh with cargo-pgrx 0.18.1 and
//! stable Rust (legacy mangling) and again with v0 mangling. Its `refresh()` runs a
//! pg_trickle-style cycle (decision, generate + build, a real MERGE through SPI, cleanup) and
//! reports its own per-phase times in pg_trickle's `[PGS_PROFILE]` line: the ground truth.
//!
//! - the tree of N refresh cycles: the four phases under the `_wrapper` entry point, N of each,
//!   SPI statements under the phases that ran them and planning apart from execution under
//!   them, with exact counts; each phase's corrected time within 5% of the extension's;
//! - the per-cycle CSV (`--events`): one row per refresh;
//! - an ERROR inside Rust (raised by PostgreSQL under SPI, or by Rust itself), which pgrx turns
//!   into a panic unwinding through probed frames: the backend lives on, the tree counts the
//!   abandoned calls and nothing else is off;
//! - the v0-mangled build: the same profile resolves every phase, and traces it the same way.
//!
//! Needs root (BPF), PostgreSQL 15 and what .ci/install.sh installs for pgrx; without them the
//! tests are skipped, unless WPROF_REQUIRE_BPF=1 (CI), where that is a failure.

mod common;
mod pgrx_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::pg::{self, Session};
use common::*;
use pgrx_support::*;
use serde_json::Value;

const CYCLES: u64 = 40;

#[test]
fn a_refresh_cycle_is_four_phases_matching_the_extensions_own_timers() {
    let Some((_g, dir)) = ready() else { return };
    let (pg, mut s) = server_with_extension(&dir.join("legacy"));
    let out = tempdir();
    let json = out.path().join("run.json");
    let csv = out.path().join("cycles.csv");
    let w = attach_pgrx(
        s.backend_pid,
        &["--events", csv.to_str().expect("utf-8")],
        &json,
    );
    let mut truth: Vec<BTreeMap<String, String>> = Vec::new();
    for c in 1..=CYCLES {
        s.ok(&format!("SELECT cycle_changes({c});"));
        let line = profile_line(&s.ok("SELECT refresh('st_src');"));
        assert_eq!(line["mode"], "INCR", "{line:?}");
        assert!(
            line["affected"].parse::<u64>().expect("affected") > 200,
            "{line:?}"
        );
        truth.push(line);
    }
    let (_, stderr) = w.stop();
    assert_stream_table_in_sync(&mut s);
    let run = read_json(&json);
    let sum = summary(&run);

    // The shape, exactly: one root, these paths, these counts, nothing abandoned or lost.
    assert_eq!(shape(&run), cycle_shape(CYCLES), "{sum}\n{stderr}");
    let c = &run["counters"];
    for k in [
        "lost_spans",
        "orphan_spans",
        "unmatched_returns",
        "abandoned",
        "open_at_end",
    ] {
        assert_eq!(u(c, k), 0, "counter {k}\n{sum}");
    }
    // Rust phases got the host's safe returns (guarded or RET sites), the server's C functions
    // uretprobes.
    let rust_mode = cxx_default_return_mode();
    for p in run["phases"].as_array().expect("phases") {
        let rust = p["object"]
            .as_str()
            .unwrap_or("")
            .ends_with("pgrx_refresh.so");
        let want = if rust { rust_mode } else { "uretprobe" };
        assert_eq!(p["return_mode"], want, "{p}");
    }

    // Per phase, wprof's corrected total against the sum of the extension's own timers (each
    // phase timed from its first statement to its last, in the same calls): within 5%.
    let mut table =
        String::from("phase            extension ms   wprof corrected ms   raw ms   diff\n");
    let mut worst = 0.0f64;
    for (phase, key) in [
        ("decision", "decision"),
        ("generate_build", "generate+build"),
        ("merge", "merge_exec"),
        ("cleanup", "cleanup_enqueue"),
    ] {
        let want: u64 = truth.iter().map(|l| ns(l, key)).sum();
        let n = at(&run, &["refresh", phase]);
        let corrected = n
            .get("corrected")
            .unwrap_or_else(|| panic!("no corrected figures: was the run calibrated?\n{n}"));
        let got = u(corrected, "total_ns");
        let diff = (got as f64 - want as f64) / want as f64;
        worst = worst.max(diff.abs());
        table.push_str(&format!(
            "{phase:<16} {:>12.3} {:>20.3} {:>8.3} {:>+6.2}%\n",
            want as f64 / 1e6,
            got as f64 / 1e6,
            u(n, "total_ns") as f64 / 1e6,
            diff * 100.0
        ));
    }
    eprintln!("{table}");
    assert!(
        worst <= 0.05,
        "a phase is off by more than 5%:\n{table}\n{sum}"
    );

    // The per-cycle CSV: one row per refresh, the root's columns and each phase's call count;
    // row by row, the MERGE's time is the one the extension measured in that cycle.
    let csv = EventsCsv::read(&csv);
    let (rows, col) = (&csv.rows, |name: &str| csv.col(name));
    assert_eq!(rows.len() as u64, CYCLES, "{}", csv.text);
    for (row, t) in rows.iter().zip(&truth) {
        assert_eq!(row[col("root")], "refresh", "{row:?}");
        for (phase, calls) in [
            ("decision", "1"),
            ("generate_build", "1"),
            ("merge", "1"),
            ("cleanup", "1"),
            ("spi_execute", "6"),
            ("planning", "6"),
            ("executor_run", "6"),
        ] {
            assert_eq!(
                row[col(&format!("{phase}_calls"))],
                calls,
                "{phase}: {row:?}"
            );
        }
        let merge_ns = row[col("merge_us")].parse::<f64>().expect("merge_us") * 1e3;
        let want = ns(t, "merge_exec") as f64;
        assert!(
            (merge_ns - want).abs() <= 0.10 * want + 50_000.0,
            "cycle's merge {merge_ns} ns, the extension said {want} ns: {row:?}"
        );
    }
    drop(pg);
}

#[test]
fn an_error_inside_rust_leaves_the_backend_alive_and_the_tree_consistent() {
    let Some((_g, dir)) = ready() else { return };
    let (pg, mut s) = server_with_extension(&dir.join("legacy"));
    let backend = s.backend_pid;
    let out = tempdir();
    let json = out.path().join("run.json");
    let w = attach_pgrx(backend, &[], &json);
    let mut c = 0;
    let mut good = |s: &mut Session| {
        c += 1;
        s.ok(&format!("SELECT cycle_changes({c});"));
        profile_line(&s.ok("SELECT refresh('st_src');"));
    };
    good(&mut s);
    // PostgreSQL raises the ERROR under SPI (the MERGE sees every row twice); pgrx turns it
    // into a panic that unwinds through execute_merge and execute_differential_refresh.
    s.ok("SELECT cycle_changes(100);");
    let err = s.exec("SELECT refresh('st_src', fail => 'merge');");
    assert!(
        err.iter()
            .any(|l| l.contains("ERROR")
                && l.contains("MERGE command cannot affect row a second time")),
        "{err:?}"
    );
    // The same backend answers, and the next refresh applies the changes left pending.
    assert_eq!(s.ok("SELECT pg_backend_pid();"), vec![backend.to_string()]);
    good(&mut s);
    // Rust raises it (pgrx::error! is a panic) inside build_merge_sql.
    s.ok("SELECT cycle_changes(101);");
    let err = s.exec("SELECT refresh('st_src', fail => 'build');");
    assert!(
        err.iter()
            .any(|l| l.contains("ERROR") && l.contains("build_merge_sql refused")),
        "{err:?}"
    );
    assert_eq!(s.ok("SELECT pg_backend_pid();"), vec![backend.to_string()]);
    good(&mut s);
    let (_, stderr) = w.stop();
    assert_stream_table_in_sync(&mut s);
    let log = pg.server_log();
    assert!(
        !log.contains("terminated by signal") && !log.contains("server process"),
        "a backend died:\n{log}"
    );

    let run = read_json(&json);
    let sum = summary(&run);
    // 5 refreshes, 3 completed; the failing MERGE's frames (C ones left by longjmp, Rust ones
    // by the panic) and the failing build are abandoned, counted, and nothing else is off.
    let mut want = cycle_shape(3);
    let mut set = |path: &str, count: u64, abandoned: u64| {
        want.insert(path.to_string(), (count, abandoned));
    };
    set("refresh", 3, 2);
    set("refresh/decision", 5, 0);
    set("refresh/decision/spi_execute", 15, 0);
    set("refresh/decision/spi_execute/planning", 15, 0);
    set("refresh/decision/spi_execute/executor_run", 15, 0);
    set("refresh/generate_build", 4, 1);
    set("refresh/merge", 3, 1);
    set("refresh/merge/spi_execute", 3, 1);
    set("refresh/merge/spi_execute/planning", 4, 0);
    set("refresh/merge/spi_execute/executor_run", 3, 1);
    assert_eq!(shape(&run), want, "{sum}\n{stderr}");
    let c = &run["counters"];
    assert_eq!(
        (
            u(c, "abandoned"),
            u(c, "unmatched_returns"),
            u(c, "orphan_spans"),
            u(c, "lost_spans"),
            u(c, "open_at_end")
        ),
        (6, 0, 0, 0, 0),
        "{sum}"
    );
}

/// The mangled names of two of the fixture's Rust phase functions in a build (closures
/// inside them, `build_merge_sql::{{closure}}`, left out).
fn rust_phase_symbols(so: &Path) -> Vec<String> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(so).expect("read the .so");
    let file = object::File::parse(&*data).expect("parse the .so");
    file.symbols()
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| {
            let path = wprof::model::symbol::demangle(n);
            path.ends_with("::refresh::merge::execute_merge")
                || path.ends_with("::refresh::codegen::build_merge_sql")
        })
        .collect()
}

#[test]
fn the_same_profile_resolves_and_traces_the_v0_mangled_build() {
    let Some((_g, dir)) = ready() else { return };
    // Two manglings of the same functions: legacy (stable's default, hash suffix) and v0.
    let legacy = rust_phase_symbols(&dir.join("legacy/pgrx_refresh.so"));
    let v0 = rust_phase_symbols(&dir.join("v0/pgrx_refresh.so"));
    assert_eq!(legacy.len(), 2, "{legacy:?}");
    assert_eq!(v0.len(), 2, "{v0:?}");
    assert!(
        legacy
            .iter()
            .all(|n| n.starts_with("_ZN") && n.contains("17h")),
        "{legacy:?}"
    );
    assert!(v0.iter().all(|n| n.starts_with("_R")), "{v0:?}");

    // `wprof probes` against the server binary, the extension found in LD_LIBRARY_PATH (as
    // the loader would): every phase resolves in both builds, the Rust ones with the host's safe
    // returns.
    let rust_mode = cxx_default_return_mode();
    for variant in ["legacy", "v0"] {
        let o = run(wprof()
            .args(["probes", "--target", "pgrx-merge", "--binary"])
            .arg(pg::postgres_binary())
            .env("LD_LIBRARY_PATH", dir.join(variant)));
        assert!(o.status.success(), "{variant}: {}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        let profile = wprof::model::profile::Profile::load("pgrx-merge").expect("pgrx-merge");
        for p in &profile.phases {
            let line = stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(p.name.as_str()))
                .unwrap_or_else(|| panic!("{variant}: no row for {}:\n{stdout}", p.name));
            assert!(line.ends_with("resolved"), "{variant}: {line}");
            if line.contains("pgrx_refresh.so") {
                assert!(line.contains(rust_mode), "{variant}: {line}");
            }
        }
    }

    // And a real run on the v0 build: the same tree.
    let (_pg, mut s) = server_with_extension(&dir.join("v0"));
    let out = tempdir();
    let json = out.path().join("run.json");
    let w = attach_pgrx(s.backend_pid, &[], &json);
    for c in 1..=5 {
        s.ok(&format!("SELECT cycle_changes({c});"));
        profile_line(&s.ok("SELECT refresh('st_src');"));
    }
    let (_, stderr) = w.stop();
    assert_stream_table_in_sync(&mut s);
    let run = read_json(&json);
    assert_eq!(shape(&run), cycle_shape(5), "{}\n{stderr}", summary(&run));
    let merge = run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["name"] == "merge")
        .expect("merge phase");
    assert!(
        merge["object"]
            .as_str()
            .unwrap_or("")
            .ends_with("pgrx_refresh.so")
            && merge["symbols"][0]
                .as_str()
                .is_some_and(|s| s.starts_with("_R")),
        "{merge}"
    );
}

/// pg_trickle itself needs PostgreSQL 18 and cannot be built here: its profile must parse,
/// say so, and carry pg_trickle's names; its patterns name functions, not modules or crates
/// (`*::build_merge_sql`), so they resolve in the fixture (crate pgrx_refresh, an older module
/// layout) under pg_trickle's file name, as they match the released layout
/// (tests/profiles_builtin.rs).
#[test]
fn the_pg_trickle_profile_parses_says_it_is_untested_and_matches_pg_trickles_paths() {
    let p = wprof::model::profile::Profile::load("pg-trickle").expect("pg-trickle parses");
    assert!(p.description.contains("PostgreSQL 18"), "{}", p.description);
    assert_eq!(p.object, "pg_trickle.so");
    let symbols: Vec<&str> = p
        .phases
        .iter()
        .filter_map(|ph| ph.symbol.as_deref())
        .collect();
    for want in [
        "refresh_stream_table_wrapper",
        "*::execute_differential_refresh",
        "*::determine_refresh_action",
        "*::drain_pending_cleanups*",
        "*::cleanup_change_buffers_by_frontier",
        "*::count_pending_changes",
        "*::generate_delta_query",
        "*::generate_delta_query_cached",
        "*::build_merge_sql",
        "SPI_execute",
        "pg_plan_queries",
        "standard_ExecutorRun",
    ] {
        assert!(symbols.contains(&want), "no phase for {want}: {symbols:?}");
    }

    let Some(dir) = (pg::available()).then(built).flatten() else {
        return;
    };
    for variant in ["legacy", "v0"] {
        let lib = tempdir();
        std::fs::copy(
            dir.join(variant).join("pgrx_refresh.so"),
            lib.path().join("pg_trickle.so"),
        )
        .expect("copy");
        let o = run(wprof()
            .args(["probes", "--target", "pg-trickle", "--binary"])
            .arg(pg::postgres_binary())
            .env("LD_LIBRARY_PATH", lib.path()));
        // The fixture has no refresh_stream_table_wrapper, drain_pending_cleanups or cached
        // delta generator: optional phases, so a warning each and exit 0.
        assert!(o.status.success(), "{variant}: {}", text(&o));
        let stdout = String::from_utf8_lossy(&o.stdout);
        for phase in [
            "differential",
            "determine_action",
            "cleanup_by_frontier",
            "count_pending_changes",
            "generate_delta_query",
            "build_merge_sql",
            "spi_execute",
        ] {
            let line = stdout
                .lines()
                .find(|l| l.split_whitespace().next() == Some(phase))
                .unwrap_or_else(|| panic!("{variant}: no row for {phase}:\n{stdout}"));
            assert!(line.ends_with("resolved"), "{variant}: {line}");
        }
    }
}

/// Why RET sites: the same panic through a frame whose return is a uretprobe (forced with
/// `--return uretprobe`) meets the kernel's trampoline instead of a return address, the
/// unwinder gives up and the backend aborts; PostgreSQL then restarts every backend.
#[test]
fn a_forced_uretprobe_on_the_unwound_frames_kills_the_backend() {
    let Some((_g, dir)) = ready() else { return };
    let (pg, mut s) = server_with_extension(&dir.join("legacy"));
    let out = tempdir();
    let json = out.path().join("run.json");
    let w = attach_pgrx(s.backend_pid, &["--return", "uretprobe"], &json);
    s.ok("SELECT cycle_changes(1);");
    profile_line(&s.ok("SELECT refresh('st_src');"));
    s.ok("SELECT cycle_changes(2);");
    let (err, ended) = s.exec_may_end("SELECT refresh('st_src', fail => 'merge');");
    // The traced backend is gone, so the run ends by itself (exit 0, outputs written).
    let (_, stderr) = w.stop();
    assert!(
        ended
            && err
                .iter()
                .any(|l| l.contains("server closed the connection unexpectedly")),
        "{err:?}\n{stderr}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pg.server_log().contains("terminated by signal 6") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = pg.server_log();
    assert!(
        log.contains("terminated by signal 6: Aborted")
            && log.contains("terminating any other active server processes"),
        "{log}"
    );
    // The good refresh before it was traced.
    let run = read_json(&json);
    assert_eq!(u(at(&run, &["refresh"]), "count"), 1, "{}", summary(&run));
}

/// The grouped children named `phase` of the node at `path`: key → (completed, abandoned).
fn statements(run: &Value, path: &[&str], phase: &str) -> BTreeMap<String, (u64, u64)> {
    at(run, path)["children"]
        .as_array()
        .expect("children")
        .iter()
        .filter(|c| c["name"] == phase)
        .map(|c| {
            let key = c["key"]
                .as_str()
                .unwrap_or_else(|| panic!("{phase} under {path:?} has no key: {c}"));
            (key.to_string(), (u(c, "count"), u(c, "abandoned")))
        })
        .collect()
}

/// Each SPI statement and each MERGE statement is a node of its own (`group_by` on the SQL
/// text: a C string for SPI_execute, a Rust `&str` for execute_merge), literals folded: the
/// pending-changes count and the cleanup embed a new frontier every cycle and stay one node
/// each, while the MERGE a failing refresh builds (another statement) gets its own. The same
/// in both aggregation modes, since the grouping happens in BPF.
#[test]
fn statements_group_the_merge_and_spi_phases_literals_folded() {
    let Some((_g, dir)) = ready() else { return };
    let (_pg, mut s) = server_with_extension(&dir.join("legacy"));
    let mut cycle = 0;
    for mode in ["event", "kernel"] {
        let out = tempdir();
        let json = out.path().join("run.json");
        let w = attach_pgrx(s.backend_pid, &["--aggregate", mode], &json);
        // Good cycles, a failing MERGE, a good one (whose first probe finds the failed
        // frames abandoned).
        let mut refresh = |args: &str| {
            cycle += 1;
            s.ok(&format!("SELECT cycle_changes({cycle});"));
            s.exec(&format!("SELECT refresh('st_src'{args});"))
        };
        for _ in 0..GROUPED_CYCLES {
            profile_line(&refresh(""));
        }
        let err = refresh(", fail => 'merge'");
        assert!(err.iter().any(|l| l.contains("ERROR")), "{err:?}");
        profile_line(&refresh(""));
        let (stdout, stderr) = w.stop();
        let run = read_json(&json);
        let sum = summary(&run);
        // Good cycles.
        let n = GROUPED_CYCLES + 1;

        let merges = statements(&run, &["refresh"], "merge");
        let good = r#"MERGE INTO "st_src" AS t USING (WITH __pgt_changes AS (SELECT"#;
        let bad = r#"MERGE INTO "st_src" AS t USING (SELECT * FROM (WITH __pgt_changes AS"#;
        assert_eq!(merges.len(), 2, "{mode}: {merges:?}\n{sum}");
        for (key, want) in [(good, (n, 0)), (bad, (0, 1))] {
            let (_, got) = merges
                .iter()
                .find(|(k, _)| k.starts_with(key))
                .unwrap_or_else(|| panic!("{mode}: no MERGE node {key}…: {merges:?}"));
            assert_eq!(*got, want, "{mode}: {key}");
        }
        assert!(
            merges.keys().all(|k| k.ends_with('…')),
            "{mode}: the statements are longer than the 128 bytes grouped: {merges:?}"
        );

        let decision = statements(&run, &["refresh", "decision"], "spi_execute");
        let pending = r#"SELECT count(*)::bigint, coalesce(max(lsn), ?)::bigint FROM "changes_src" WHERE lsn > ?"#;
        assert_eq!(decision.len(), 3, "{mode}: {decision:?}");
        assert_eq!(
            decision.get(pending),
            Some(&(n + 1, 0)),
            "{mode}: {decision:?}"
        );
        assert!(decision.values().all(|c| *c == (n + 1, 0)), "{decision:?}");

        let cleanup = statements(&run, &["refresh", "cleanup"], "spi_execute");
        let want = BTreeMap::from([
            (
                r#"DELETE FROM "changes_src" WHERE lsn <= ?"#.to_string(),
                (n, 0),
            ),
            (
                "UPDATE pgt_stream_tables SET frontier = ?, refreshed = refreshed + ? WHERE \
                 name = ?"
                    .to_string(),
                (n, 0),
            ),
        ]);
        assert_eq!(cleanup, want, "{mode}\n{sum}");
        // Each statement has its own planning and execution below it.
        let delete = run_node_with_key(&run, r#"DELETE FROM "changes_src" WHERE lsn <= ?"#);
        assert_eq!(u(child(delete, "planning"), "count"), n, "{mode}");
        // The tree shows the statement next to the phase.
        assert!(
            stdout.contains(r#"spi_execute [DELETE FROM "changes_src" WHERE lsn <= ?]"#),
            "{mode}:\n{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains(r#"merge [MERGE INTO "st_src" AS t USING (WITH __pgt_chan…]"#),
            "{mode}:\n{stdout}"
        );
    }
}

/// Cycles of the grouping test, per aggregation mode, before its failing one.
const GROUPED_CYCLES: u64 = 3;

/// The first node of the tree whose key is `key`.
fn run_node_with_key<'a>(run: &'a Value, key: &str) -> &'a Value {
    fn find<'a>(n: &'a Value, key: &str) -> Option<&'a Value> {
        if n["key"] == key {
            return Some(n);
        }
        n["children"].as_array()?.iter().find_map(|c| find(c, key))
    }
    run["tree"]["roots"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|r| find(r, key))
        .unwrap_or_else(|| panic!("no node with key {key}"))
}

/// The child of `n` named `name`.
fn child<'a>(n: &'a Value, name: &str) -> &'a Value {
    n["children"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no child {name} in {n}"))
}

/// A Rust glob that matches several functions (a module's functions and their closures) is
/// refused with every match listed, demangled without its hash and mangled; `--all-matches`
/// takes them all. No BPF needed: `wprof probes` only resolves.
#[test]
fn a_rust_glob_matching_many_functions_lists_them_or_takes_all_with_all_matches() {
    let Some(dir) = built() else { return };
    let out = tempdir();
    let so = dir.join("legacy/pgrx_refresh.so");
    let profile = out.path().join("glob.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"glob\"\nobject = \"{}\"\n[[phase]]\nname = \"codegen\"\nsymbol = \"*::refresh::codegen::*\"\n",
            so.display()
        ),
    )
    .expect("write the profile");
    let probes = |extra: &[&str]| {
        let o = wprof()
            .args(["probes", "--target"])
            .arg(&profile)
            .args(["--binary", "/bin/true"])
            .args(extra)
            .output()
            .expect("run wprof probes");
        let text =
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code(), text)
    };
    let functions = [
        "pgrx_refresh::refresh::codegen::build_merge_sql (_ZN",
        "pgrx_refresh::refresh::codegen::validate_merge_sql (_ZN",
        "pgrx_refresh::refresh::codegen::cleanup_change_buffers_by_frontier (_ZN",
        "pgrx_refresh::refresh::codegen::build_merge_sql::{{closure}} (_ZN",
    ];
    let (code, text) = probes(&[]);
    assert_eq!(code, Some(4), "{text}");
    for f in functions {
        assert!(text.contains(f), "{f} not listed:\n{text}");
    }
    assert!(
        text.contains("matches 7 functions") && text.contains("--all-matches"),
        "{text}"
    );
    let (code, text) = probes(&["--all-matches"]);
    assert_eq!(code, Some(0), "{text}");
    let rows = text.lines().filter(|l| l.starts_with("codegen ")).count();
    assert_eq!(rows, 7, "{text}");
    assert!(
        text.lines()
            .filter(|l| l.starts_with("codegen "))
            .all(|l| l.ends_with("resolved")),
        "{text}"
    );
}
