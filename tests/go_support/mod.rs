//! The Go fixture's helpers for tests/go.rs: its builds, its own timers and counters (the
//! truth), wprof's runs and the sums over a run's tree that the tests compare with them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common::*;

/// The Go fixture's builds, in target/go-fixtures (see tests/fixtures/go-parquet/build.sh).
pub fn go_fixture(name: &str) -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let script = root.join("tests/fixtures/go-parquet/build.sh");
        let go = Command::new("bash")
            .arg(&script)
            .arg("--find-go")
            .output()
            .is_ok_and(|o| o.status.success());
        if !wprof::testing::require(go, "a Go 1.25+ toolchain (.ci/install.sh installs one)") {
            return None;
        }
        let dir = root.join("target/go-fixtures");
        let out = run(Command::new("bash").arg(&script).arg(&dir));
        assert!(
            out.status.success(),
            "Go fixture build failed:\n{}",
            text(&out)
        );
        Some(dir)
    });
    dir.as_ref().map(|d| d.join(name))
}

/// What a tracing test needs: BPF, the built Go fixture `name` (see [`go_fixture`]) and the
/// lock that keeps BPF tests apart; None when the test may skip.
pub fn ready(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, PathBuf)> {
    if !bpf_available() {
        return None;
    }
    let prog = go_fixture(name)?;
    Some((bpf_lock(), prog))
}

/// The fixture's `goparquet: key=value ...` line.
pub fn truth(stdout: &[u8]) -> HashMap<String, u64> {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("goparquet:"))
        .unwrap_or_else(|| panic!("no goparquet line in:\n{stdout}"));
    line.split_whitespace()
        .skip(1)
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_string(), v.parse().expect("integer"))
        })
        .collect()
}

/// The profile's method phases and the fixture's names for them: every lakerunner method the
/// profile probes.
pub const METHODS: &[(&str, &str)] = &[
    ("arrow_write_batch", "arrow_write_batch"),
    ("arrow_flush", "arrow_flush"),
    ("arrow_close", "arrow_close"),
    ("pqgo_write_batch", "parquet_go_write_batch"),
    ("pqgo_buffer_file", "parquet_go_buffer_file"),
    ("pqgo_close", "parquet_go_close"),
    ("pqgo_stream", "parquet_go_stream"),
];

/// What the run says about one phase, summed over every node of it.
#[derive(Default, Debug)]
pub struct PhaseSum {
    pub count: u64,
    pub lost: u64,
    pub abandoned: u64,
    pub open: u64,
    pub raw_ns: u64,
    pub corrected_ns: u64,
    /// The probe time of the calls nested inside this phase's calls (their whole entry +
    /// return cost each), which the fixture's own timer contains.
    pub nested_probe_ns: f64,
    pub rows: u64,
}

pub fn phase_sums(run: &serde_json::Value) -> HashMap<String, PhaseSum> {
    let pair: HashMap<String, f64> = run["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["probe_pair_ns"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    fn nested(n: &serde_json::Value, pair: &HashMap<String, f64>) -> f64 {
        n["children"]
            .as_array()
            .into_iter()
            .flatten()
            // Under a Go phase, `gc_stw` is the stop-the-world time the call sat through: no
            // probe of its own fired inside the call.
            .filter(|c| c["name"] != "gc_stw")
            .map(|c| {
                c["count"].as_u64().unwrap() as f64 * pair[c["name"].as_str().unwrap()]
                    + nested(c, pair)
            })
            .sum()
    }
    fn walk(
        n: &serde_json::Value,
        pair: &HashMap<String, f64>,
        out: &mut HashMap<String, PhaseSum>,
    ) {
        let s = out
            .entry(n["name"].as_str().unwrap().to_string())
            .or_default();
        s.count += u(n, "count");
        s.lost += u(n, "lost");
        s.abandoned += u(n, "abandoned");
        s.open += u(n, "open");
        s.raw_ns += u(n, "total_ns");
        let c = &n["corrected"];
        assert!(
            c.is_object(),
            "no corrected figures (calibration failed?): {n}"
        );
        s.corrected_ns += u(c, "total_ns");
        s.nested_probe_ns += nested(n, pair);
        s.rows += n["units"]["total"].as_u64().unwrap_or(0);
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, pair, out);
        }
    }
    let mut out = HashMap::new();
    for r in run["tree"]["roots"].as_array().expect("roots") {
        walk(r, &pair, &mut out);
    }
    out
}

pub fn phase_counters(run: &serde_json::Value, name: &str) -> (u64, u64, u64) {
    let p = run["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name}"));
    (u(p, "entries"), u(p, "returns"), u(p, "unmatched_returns"))
}

/// Each of the run's `counters` named in `keys` is 0.
pub fn assert_counters_zero(run: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        assert_eq!(u(&run["counters"], k), 0, "counters.{k}\n{}", summary(run));
    }
}

/// Abandoned calls in the Go runtime's GC phases (`gc_*`): a collection on another thread can
/// be inside `startTheWorldWithSema` when the program exits, and that call never returns (CI
/// saw one `gc_stw_end` of 1,034 so, in an attach by pid). None elsewhere: the run's counter
/// is theirs alone, and at most 2. `sums` are the run's [`phase_sums`].
pub fn assert_abandoned_only_by_an_exit_during_gc(
    run: &serde_json::Value,
    sums: &HashMap<String, PhaseSum>,
) {
    let in_gc: u64 = sums
        .iter()
        .filter(|(name, _)| name.starts_with("gc_"))
        .map(|(_, s)| s.abandoned)
        .sum();
    let all = u(&run["counters"], "abandoned");
    assert!(
        all == in_gc && all <= 2,
        "{all} abandoned, {in_gc} of them in GC phases\n{}",
        summary(run)
    );
}

/// Counts exact, nothing lost or unmatched, nothing abandoned but a GC call cut off by the
/// exit ([`assert_abandoned_only_by_an_exit_during_gc`]), every method's time within `tol` of
/// the fixture's own timer (plus `waits_ns` of run-queue waits above it), rows as the fixture counted them: parquet-go's `Write` returns the
/// rows it wrote (one call per row), and no phase counts rows from `WriteBatch`'s batch
/// pointer.
pub fn assert_matches_fixture(
    run: &serde_json::Value,
    t: &HashMap<String, u64>,
    tol: f64,
    waits_ns: f64,
) {
    let sums = phase_sums(run);
    assert_abandoned_only_by_an_exit_during_gc(run, &sums);
    assert_counters_zero(
        run,
        &[
            "lost_spans",
            "lost_node_defs",
            "orphan_spans",
            "unmatched_returns",
            "open_at_end",
            "overflow",
            "no_stack",
        ],
    );
    for (phase, key) in METHODS {
        let calls = t[&format!("{key}_calls")];
        let ns = t[&format!("{key}_ns")] as f64;
        let s = &sums[*phase];
        assert_eq!(s.count, calls, "{phase}: calls\n{}", summary(run));
        assert_eq!((s.lost, s.abandoned, s.open), (0, 0, 0), "{phase}: {s:?}");
        assert_eq!(
            phase_counters(run, phase),
            (calls, calls, 0),
            "{phase}: entries, returns, unmatched"
        );
        // The fixture's timer starts after the entry probe and stops before the return
        // probe, so it holds none of the phase's own probe time but all of its nested
        // phases' (their entries and returns run inside it): corrected + nested probes.
        // wprof may also hold a few waits for the run queue the timer cannot see: a goroutine
        // preempted in its prologue (after the entry probe, before `time.Now()`) or after the
        // deferred stop waits for its turn among the goroutines and the other tests on 2 CPUs.
        // Seen with 32 goroutines: 20 ms on the 208 calls of a 1 ms phase in CI (10%). So the
        // upper bound has `waits_ns` of slack for such runs, the lower bound none.
        let got = s.corrected_ns as f64 + s.nested_probe_ns;
        assert!(
            got >= ns * (1.0 - tol) && got <= ns * (1.0 + tol) + waits_ns,
            "{phase}: wprof {:.1} µs a call (corrected {:.1} + nested probes {:.1}; raw {:.1}), \
             the fixture's timer {:.1} µs, want within {:.0}% (+{:.0} ms of run-queue waits)",
            got / calls as f64 / 1e3,
            s.corrected_ns as f64 / calls as f64 / 1e3,
            s.nested_probe_ns / calls as f64 / 1e3,
            s.raw_ns as f64 / calls as f64 / 1e3,
            ns / calls as f64 / 1e3,
            tol * 100.0,
            waits_ns / 1e6
        );
    }
    let pqgo_rows = t["parquet_go_rows_written"];
    assert_eq!(pqgo_rows, t["parquet_go_write_batch_rows"], "rows taken");
    assert_eq!(
        sums["pqgo_generic_write"].count, pqgo_rows,
        "one Write a row"
    );
    assert_eq!(
        sums["pqgo_generic_write"].rows, pqgo_rows,
        "parquet-go rows (Write's result)"
    );
    for phase in METHODS.iter().map(|m| m.0).chain(["pqarrow_write"]) {
        assert_eq!(sums[phase].rows, 0, "{phase} counts no rows");
    }
}

pub fn record(
    dir: &Path,
    program: &Path,
    extra: &[&str],
    args: &[&str],
) -> (Output, serde_json::Value) {
    let json = dir.join("run.json");
    let out = run(wprof()
        .args(["record", "--target", "parquet-go", "--json"])
        .arg(&json)
        .args(extra)
        .arg("--")
        .arg(program)
        .args(args));
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
    (out.clone(), read_json(&json))
}

/// The per-call table groups spans into root calls by goroutine, not by thread: 32 writer
/// goroutines on 2 CPUs move between threads in the middle of calls (a GC assist, a
/// preemption), and a child's span keyed by thread would land in whatever root call next
/// returned on that thread, possibly the other backend's. So: one row per root call, each
/// backend's rows hold only its own library's calls, and every library call is in a row.
pub fn assert_call_rows_follow_goroutines(csv: &Path, run: &serde_json::Value) {
    let csv = EventsCsv::read(csv);
    let col = |name: &str| csv.col(name);
    let (root, arrow_lib, pqgo_lib) = (
        col("root"),
        col("pqarrow_write_calls"),
        col("pqgo_generic_write_calls"),
    );
    let mut rows: HashMap<String, u64> = HashMap::new();
    let (mut arrow_lib_calls, mut pqgo_lib_calls) = (0u64, 0u64);
    for f in &csv.rows {
        let line = f.join(",");
        let calls = |i: usize| f[i].parse::<u64>().expect("a call count");
        *rows.entry(f[root].to_string()).or_default() += 1;
        // A backend's roots (WriteBatch, Close, which flushes) hold only its library's calls.
        match f[root].as_str() {
            r if r.starts_with("arrow_") => {
                assert_eq!(
                    calls(pqgo_lib),
                    0,
                    "parquet-go calls in an arrow row: {line}"
                );
                arrow_lib_calls += calls(arrow_lib);
            }
            r if r.starts_with("pqgo_") => {
                assert_eq!(
                    calls(arrow_lib),
                    0,
                    "arrow calls in a parquet-go row: {line}"
                );
                pqgo_lib_calls += calls(pqgo_lib);
            }
            _ => {
                assert_eq!(calls(arrow_lib) + calls(pqgo_lib), 0, "{line}");
            }
        }
    }
    let roots = run["tree"]["roots"].as_array().expect("roots");
    for r in roots {
        let name = r["name"].as_str().expect("name");
        assert_eq!(
            rows.get(name).copied().unwrap_or(0),
            u(r, "count"),
            "rows of {name}"
        );
    }
    let sums = phase_sums(run);
    assert_eq!(arrow_lib_calls, sums["pqarrow_write"].count);
    assert_eq!(pqgo_lib_calls, sums["pqgo_generic_write"].count);
}
