//! In-kernel aggregation (`--aggregate kernel`): BPF keeps per-node summaries and log-linear
//! histograms in maps, wprof reads them once at the end. On the writepath fixture it must give
//! the tree per-event mode gives: the same shape and exact counts, the same medians (within
//! noise), the root's mean and percentiles that match the fixture's own timing of the same calls; and the options
//! that need every call are refused up front.
//!
//! The privileged tests check their capability first (common::bpf_available) and run one at
//! a time (common::bpf_lock).

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// Root calls per run: ~0.3 s of fixture time.
const ITER: u64 = 1_000;

/// The phases of at least 20 µs and their commanded times (self times on the fixture's
/// defaults: write 3, encode 5, persist 1 + compress 20 + flush 100, wal 2 + sync 150).
const LONG_PHASES: &[(&[&str], f64)] = &[
    (&["write_record"], 281.0),
    (&["write_record", "persist_block"], 121.0),
    (&["write_record", "persist_block", "compress_block"], 20.0),
    (&["write_record", "persist_block", "flush_block"], 100.0),
    (&["write_record", "wal_append"], 152.0),
    (&["write_record", "wal_append", "wal_sync"], 150.0),
];

/// `wprof record --target fixture --json DIR/NAME.json [extra] -- writepath ARGS`.
fn record(dir: &Path, name: &str, extra: &[&str], args: &[&str]) -> (Output, serde_json::Value) {
    record_fixture(
        &dir.join(format!("{name}.json")),
        extra,
        "writepath",
        args,
        &[],
    )
}

/// A `key=value` field of the fixture's ground-truth line.
fn truth(out: &Output, key: &str) -> u64 {
    truth_field(out, "fixture:", key)
}

/// Every node of the write path with exactly `calls` calls, nothing lost, abandoned or open,
/// and no other node.
fn assert_shape(run: &serde_json::Value, calls: u64) {
    assert_exact_paths(run, WRITE_PATH, calls);
    for path in WRITE_PATH {
        let n = node(run, path);
        let hist: u64 = n["histogram"]["buckets"]
            .as_array()
            .expect("buckets")
            .iter()
            .map(|b| b[1].as_u64().expect("bucket count"))
            .sum();
        assert_eq!(hist, calls, "{path:?}: every call is in the histogram");
    }
    assert_eq!(
        summary(run).lines().count(),
        WRITE_PATH.len(),
        "{}",
        summary(run)
    );
    assert_eq!(u(&run["counters"], "lost_spans"), 0);
}

/// A node's median, raw or with the probes' time taken out, ns. The cross-run checks compare
/// medians: a mean moves with the few calls a busy host stretches (a vCPU stolen while a probe
/// traps is not off-CPU time to the guest, and the spins cannot absorb it there), and on CI's
/// machine the means of two runs a second apart once differed by 3-4% and stood 5-13% above
/// the commanded times in three pairs of runs while the medians stayed put.
fn p50_ns(n: &serde_json::Value, corrected: bool) -> f64 {
    if corrected && n["corrected"].is_object() {
        u(&n["corrected"], "p50_ns") as f64
    } else {
        u(n, "p50_ns") as f64
    }
}

fn within(what: &str, got: f64, want: f64, tol: f64) -> Result<(), String> {
    if (got - want).abs() <= want * tol {
        Ok(())
    } else {
        Err(format!(
            "{what}: {got:.0}, want {want:.0} ± {:.0}%",
            tol * 100.0
        ))
    }
}

/// The timing checks of one pair of runs (event, kernel of the same command): per-node medians
/// within 2%, corrected medians within 5% of the commanded times; the kernel histogram's p50 and
/// the mean of write_record within 2% of the fixture's own timing of the same calls, its p99
/// within 5% (the fixture's clock also sees the probes' handling outside wprof's window, and
/// a preemption there moves a call into the fixture's tail only: next to a CPU hog, 3 of 3
/// pairs once read 4.5% low).
fn timing(
    event: &serde_json::Value,
    kernel: &serde_json::Value,
    fixture_out: &Output,
) -> Result<(), String> {
    let mut errors = Vec::new();
    for (path, commanded_us) in LONG_PHASES {
        let (e, k) = (node(event, path), node(kernel, path));
        let name = path.join("/");
        // Two runs of the fixture, not the same calls: 3%. A .ci/run saw write_record's p50
        // 2.1% apart three times in a row, the two runs' medians swapping between attempts
        // (292.9 and 299.0 µs); each run's own figures are held to 2% below.
        errors.extend(
            within(
                &format!("{name}: p50, kernel vs event"),
                p50_ns(k, false),
                p50_ns(e, false),
                0.03,
            )
            .err(),
        );
        errors.extend(
            within(
                &format!("{name}: corrected p50, kernel vs commanded"),
                p50_ns(k, true),
                commanded_us * 1e3,
                0.05,
            )
            .err(),
        );
    }
    let w = node(kernel, &["write_record"]);
    for (field, key, tol) in [
        ("p50_ns", "write_p50_ns", 0.02),
        ("p99_ns", "write_p99_ns", 0.05),
    ] {
        errors.extend(
            within(
                &format!("write_record {field} vs the fixture's {key} (same calls)"),
                u(w, field) as f64,
                truth(fixture_out, key) as f64,
                tol,
            )
            .err(),
        );
    }
    errors.extend(
        within(
            "write_record mean vs the fixture's write_mean_ns (same calls)",
            w["mean_ns"].as_f64().expect("mean_ns"),
            truth(fixture_out, "write_mean_ns") as f64,
            0.02,
        )
        .err(),
    );
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("\n"))
    }
}

#[test]
fn kernel_mode_gives_the_per_event_tree_and_times() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let args = ["--iterations", &ITER.to_string()];
    let mut failures = Vec::new();
    // Counts and shape are exact every time; the times get three tries, since a busy 2-core
    // machine can disturb one pair of runs beyond what off-CPU accounting removes.
    for attempt in 1..=3 {
        let (_, event) = record(dir.path(), "event", &["--off-cpu"], &args);
        let (out, kernel) = record(
            dir.path(),
            "kernel",
            &["--off-cpu", "--aggregate", "kernel"],
            &args,
        );
        assert_shape(&event, ITER);
        assert_shape(&kernel, ITER);
        assert_eq!(truth(&out, "writes"), ITER);
        assert_eq!(event["provenance"]["aggregation"], "event");
        assert_eq!(kernel["provenance"]["aggregation"], "kernel");
        assert_eq!(u(&kernel["calls"], "total_calls"), 0, "no call table");
        // Only the node definitions came through the ring buffer, not one call.
        assert_eq!(
            u(&kernel["counters"], "events"),
            WRITE_PATH.len() as u64,
            "{}",
            kernel["counters"]
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("aggregated in the kernel"), "{stdout}");
        match timing(&event, &kernel, &out) {
            Ok(()) => return,
            Err(e) => failures.push(format!("attempt {attempt}:\n{e}")),
        }
    }
    panic!("{}", failures.join("\n"));
}

#[test]
fn kernel_mode_counts_two_threads_exactly_and_out_dir_leaves_per_call_files_out() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let out_dir = dir.path().join("out");
    let (out, run) = record(
        dir.path(),
        "threads",
        &[
            "--aggregate",
            "kernel",
            "--out",
            out_dir.to_str().expect("utf-8"),
        ],
        &["--iterations", "300", "--threads", "2"],
    );
    assert_eq!(truth(&out, "writes"), 600);
    assert_shape(&run, 600);
    let mut files: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("out dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "phases.folded",
            "phases.pb.gz",
            "phases.svg",
            "run.json",
            "tree.txt"
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("no calls.csv or trace.json").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains("--aggregate event"), "{stderr}");
}

#[test]
fn attach_in_kernel_mode_counts_every_call() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let json = dir.path().join("run.json");
    let mut fx = spawn_waiting(&fixture("writepath"), &["--wait", "--iterations", "500"]);
    let w = start_attach_with(&["--aggregate", "kernel"], "fixture", fx.id(), &json, &[]);
    release(&mut fx);
    let f = fx.wait_with_output().expect("fixture");
    assert!(f.status.success(), "{}", text(&f));
    let o = w.wait_with_output().expect("wprof");
    assert!(o.status.success(), "{}", text(&o));
    let run = read_json(&json);
    assert_shape(&run, 500);
    assert_eq!(run["provenance"]["aggregation"], "kernel");
}

/// The outputs that need every call are refused before anything is loaded (no BPF needed):
/// usage error, exit 2, naming `--aggregate event`.
#[test]
fn options_that_need_every_call_are_refused_up_front() {
    let dir = tempdir();
    let file = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--events".into(), file("c.csv")], "--events"),
        (vec!["--trace".into(), file("t.json")], "--trace"),
        (vec!["--per-pid".into()], "--per-pid"),
        (vec!["--skip".into(), "1s".into()], "--skip"),
        (
            vec![
                "--interval".into(),
                "1s".into(),
                "--snapshots".into(),
                file("s.jsonl"),
            ],
            "--interval/--snapshots",
        ),
    ];
    for (extra, named) in &cases {
        for cmd in ["record", "attach"] {
            let mut c = wprof();
            c.args([cmd, "--target", "fixture", "--aggregate", "kernel"])
                .args(extra);
            if cmd == "record" {
                c.args(["--", "/bin/true"]);
            } else {
                c.args(["--pid", "1"]);
            }
            let out = common::run(&mut c);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{cmd} {extra:?}\n{}",
                text(&out)
            );
            assert!(
                stderr.contains(named) && stderr.contains("--aggregate event"),
                "{cmd} {extra:?}: {stderr}"
            );
        }
    }
    // Two at once are named together; without --aggregate kernel they are accepted (here the
    // run then fails later, on the missing command, not with this message).
    let out = common::run(wprof().args([
        "record",
        "--target",
        "fixture",
        "--aggregate",
        "kernel",
        "--per-pid",
        "--skip",
        "1s",
        "--",
        "/bin/true",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains("--per-pid") && stderr.contains("--skip") && stderr.contains("they need"),
        "{stderr}"
    );
    let out = common::run(wprof().args([
        "record",
        "--target",
        "fixture",
        "--per-pid",
        "--",
        "/nonexistent/wprof-kernel-mode-test",
    ]));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("--aggregate kernel cannot"),
        "{}",
        text(&out)
    );
}

/// `--aggregate auto` on a path hot enough (2 threads, every spin 0: ~600,000 calls a second)
/// switches to the kernel after its first second; the calls before and after the switch add
/// up exactly, and the run says it was aggregated in the kernel. With an option that needs
/// every call it stays per event and says why.
#[test]
fn auto_switches_to_the_kernel_on_a_hot_path_and_keeps_every_call() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let mut args = vec!["--iterations", "300000", "--threads", "2"];
    args.extend(ZERO_SPINS);
    let (out, run) = record(dir.path(), "auto", &["--aggregate", "auto"], &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("calls/s: aggregating in the kernel from now on"),
        "{stderr}"
    );
    assert_eq!(run["provenance"]["aggregation"], "kernel");
    assert_exact_paths(&run, WRITE_PATH, 600_000);
    assert!(
        run.get("calls")
            .is_none_or(|c| c["rows"].as_array().is_none_or(Vec::is_empty)),
        "no partial per-call table: {}",
        run["calls"]
    );

    let csv = dir.path().join("calls.csv");
    let csv_arg = csv.display().to_string();
    let (out, run) = record(
        dir.path(),
        "auto-events",
        &["--aggregate", "auto", "--events", &csv_arg],
        &args,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("staying per event (--aggregate auto) because --events"),
        "{stderr}"
    );
    assert_eq!(run["provenance"]["aggregation"], "event");
    let n = u(node(&run, &["write_record"]), "count") + u(node(&run, &["write_record"]), "lost");
    assert_eq!(n, 600_000, "{}", summary(&run));
}
