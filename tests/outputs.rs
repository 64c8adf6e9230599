//! Privileged tests of the per-call outputs on real probes: `--events` (CSV) and `--trace`
//! (Chrome trace, validated against docs/chrome-trace.schema.json), and their re-rendering by
//! `wprof report`.

mod common;

use common::*;

/// Validates `doc` against docs/chrome-trace.schema.json with python3's jsonschema. A missing
/// python3 or jsonschema fails the test (Perfetto's trace_processor cannot run offline).
fn validate_trace(doc: &str) {
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/chrome-trace.schema.json");
    if let Err(e) = wprof::testing::validate_json_schema(schema, doc) {
        panic!("the trace does not validate against docs/chrome-trace.schema.json:\n{e}");
    }
}

#[test]
fn events_csv_and_trace_of_a_recorded_run() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let dir = tempdir();
    let (csv_path, trace_path, json_path) = (
        dir.path().join("calls.csv"),
        dir.path().join("trace.json"),
        dir.path().join("run.json"),
    );
    let out = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--events"])
        .arg(&csv_path)
        .arg("--trace")
        .arg(&trace_path)
        .arg("--json")
        .arg(&json_path)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "50", "--recurse-depth", "3"]));
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));

    // The CSV: a header and one row per write_record call, every row as wide as the header.
    let csv = EventsCsv::read(&csv_path);
    let (header, col) = (&csv.header, |name: &str| csv.col(name));
    assert_eq!(header[..5], ["start_us", "pid", "tid", "root", "total_us"]);
    let (total, wr, rc, root) = (
        col("total_us"),
        col("write_record_us"),
        col("recurse_phase_calls"),
        col("root"),
    );
    let rows = &csv.rows;
    assert_eq!(rows.len(), 50, "{}", csv.text);
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.len(), header.len(), "row {i}: {r:?}");
        assert_eq!(r[root], "write_record", "row {i}");
        let t: f64 = r[total].parse().expect("total_us");
        let w: f64 = r[wr].parse().expect("write_record_us");
        assert!(
            t > 0.0 && (t - w).abs() <= 0.001,
            "row {i}: total {t}, write_record {w}"
        );
        assert_eq!(r[rc], "3", "row {i}: recurse_phase_calls");
        for (h, v) in header.iter().zip(r) {
            if h.ends_with("_us") {
                v.parse::<f64>()
                    .unwrap_or_else(|_| panic!("row {i}: {h} = {v:?}"));
                assert_eq!(v.split('.').nth(1).map(str::len), Some(3), "{h} = {v}");
            }
        }
    }

    // The trace: valid against the schema, 50 write_record roots, every child inside a parent.
    let trace_text = std::fs::read_to_string(&trace_path).expect("read the trace");
    validate_trace(&trace_text);
    let trace: serde_json::Value = serde_json::from_str(&trace_text).expect("trace JSON");
    assert_eq!(trace["otherData"]["spans_capped"], false);
    let xs: Vec<&serde_json::Value> = trace["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    let f = |e: &serde_json::Value, k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} in {e}"));
    let depth = |e: &serde_json::Value| e["args"]["depth"].as_u64().expect("depth");
    assert_eq!(
        xs.iter().filter(|e| e["name"] == "write_record").count(),
        50
    );
    assert_eq!(
        xs.iter().filter(|e| e["name"] == "recurse_phase").count(),
        150
    );
    const EPS: f64 = 1e-6;
    for c in xs.iter().filter(|e| depth(e) > 0) {
        let (ts, end) = (f(c, "ts"), f(c, "ts") + f(c, "dur"));
        assert!(
            xs.iter().any(|p| p["tid"] == c["tid"]
                && p["pid"] == c["pid"]
                && depth(p) + 1 == depth(c)
                && f(p, "ts") <= ts + EPS
                && end <= f(p, "ts") + f(p, "dur") + EPS),
            "{c} lies in no event of depth {} on its thread",
            depth(c) - 1
        );
    }
    // Sorted by (pid, tid, ts, -dur): a parent comes before its children.
    for w in xs.windows(2) {
        let key = |e: &serde_json::Value| {
            (
                e["pid"].as_u64().unwrap(),
                e["tid"].as_u64().unwrap(),
                f(e, "ts"),
                -f(e, "dur"),
            )
        };
        assert!(
            key(w[0]) <= key(w[1]),
            "out of order: {} then {}",
            w[0],
            w[1]
        );
    }

    // `report --format csv|trace` re-renders the saved run identically.
    let rep = run(wprof()
        .arg("report")
        .arg(&json_path)
        .args(["--format", "csv"]));
    assert!(rep.status.success(), "{}", text(&rep));
    assert!(
        rep.stdout == csv.text.as_bytes(),
        "report --format csv differs:\n{}",
        text(&rep)
    );
    let rep = run(wprof()
        .arg("report")
        .arg(&json_path)
        .args(["--format", "trace"]));
    assert!(rep.status.success(), "{}", text(&rep));
    assert!(
        rep.stdout == trace_text.as_bytes(),
        "report --format trace differs"
    );
}

/// `go tool pprof -top -sample_index=INDEX`'s rows as name -> (flat, cum), in the unit `unit`
/// given by `-unit` (`ns` for wall time; calls are plain numbers).
fn pprof_top(
    go: &std::path::Path,
    profile: &std::path::Path,
    index: &str,
) -> Vec<(String, f64, f64)> {
    let out = run(std::process::Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            "-nodecount=1000",
            "-nodefraction=0",
        ])
        .args([
            "-edgefraction=0",
            "-unit=ns",
            &format!("-sample_index={index}"),
        ])
        .arg(profile));
    assert!(
        out.status.success(),
        "go tool pprof failed:\n{}",
        text(&out)
    );
    let number = |s: &str| -> f64 {
        let digits: String = s
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("not a number: {s:?}"))
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<(String, f64, f64)> = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 6, "pprof row {l:?}");
            (f[5..].join(" "), number(f[0]), number(f[3]))
        })
        .collect();
    assert!(!rows.is_empty(), "no rows in\n{stdout}");
    rows
}

#[test]
fn pprof_output_lists_the_phases_with_the_trees_totals() {
    if !bpf_available() {
        return;
    }
    let Some(go) = wprof::testing::go_toolchain() else {
        wprof::testing::require(false, "a Go toolchain for `go tool pprof` (.ci/install.sh)");
        return;
    };
    let _lock = bpf_lock();
    let dir = tempdir();
    let (pprof, cpu, json) = (
        dir.path().join("phases.pb.gz"),
        dir.path().join("cpu.pb.gz"),
        dir.path().join("run.json"),
    );
    let out = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--pprof"])
        .arg(&pprof)
        .args(["--cpu-sample", "997", "--cpu-pprof"])
        .arg(&cpu)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", "40"]));
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
    let doc = read_json(&json);
    // `report --format pprof` writes the same bytes from the saved run.
    let again = dir.path().join("again.pb.gz");
    let o = run(wprof()
        .arg("report")
        .arg(&json)
        .args(["--format", "pprof", "-o"])
        .arg(&again));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read(&pprof).unwrap(),
        std::fs::read(&again).unwrap()
    );

    let calls = pprof_top(&go, &pprof, "calls");
    let wall = pprof_top(&go, &pprof, "wall");
    for phase in [
        "write_record",
        "wal_append",
        "wal_sync",
        "persist_block",
        "encode_record",
    ] {
        let want = count_anywhere(&doc, phase);
        let got = calls.iter().find(|r| r.0 == phase).map(|r| r.1);
        assert_eq!(got, Some(want as f64), "{phase} calls: {calls:?}");
    }
    // Cumulative wall time of the root = the tree's corrected total (pprof prints 4
    // significant digits: within 0.1%).
    let root = node(&doc, &["write_record"]);
    let total = root["corrected"]["total_ns"]
        .as_u64()
        .unwrap_or_else(|| u(root, "total_ns")) as f64;
    let cum = wall
        .iter()
        .find(|r| r.0 == "write_record")
        .expect("write_record row")
        .2;
    assert!(
        (cum - total).abs() <= total * 1e-3,
        "write_record cum {cum} ns, tree {total} ns"
    );
    // Self time is a frame of its own per parent.
    assert!(
        wall.iter().any(|r| r.0 == "wal_sync (self)" && r.1 > 0.0),
        "{wall:?}"
    );
}
