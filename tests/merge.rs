//! `wprof merge` end to end: two real runs of the C fixture merge into one whose counts are
//! the sum of theirs, and `report`, `compare` and `check` read the merged file; bad inputs
//! are refused with exit 2 and a message naming the file.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// Records the fixture for `iterations` writes into `dir/NAME.json`.
fn record(dir: &Path, name: &str, iterations: u64) -> (PathBuf, serde_json::Value) {
    let json = dir.join(format!("{name}.json"));
    let it = iterations.to_string();
    let (_, doc) = record_fixture(&json, &["-q"], "writepath", &["--iterations", &it], &[]);
    assert_exact_paths(&doc, WRITE_PATH, iterations);
    (json, doc)
}

/// `wprof merge FILES... -o OUT`, which must succeed; returns stderr (the warnings).
fn merge_ok(files: &[&Path], out: &Path) -> String {
    let o = run(wprof().arg("merge").args(files).arg("-o").arg(out));
    assert!(o.status.success(), "wprof merge failed:\n{}", text(&o));
    assert!(o.stdout.is_empty(), "-o writes the file, not stdout");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `wprof merge ARGS...`, which must fail with exit 2; returns stderr.
fn merge_refused(args: &[&Path]) -> String {
    let o = run(wprof().arg("merge").args(args));
    assert_eq!(o.status.code(), Some(2), "a usage error:\n{}", text(&o));
    assert!(o.stdout.is_empty(), "nothing on stdout:\n{}", text(&o));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const HYPOTHESES: &str = r#"
[[hypothesis]]
id = "flush"
claim = "flush is most of persist (truth: 82.6%)"
phase = "flush_block"
of = "persist_block"
share = "50%..100%"

[[hypothesis]]
id = "one-wal-per-write"
phase = "wal_append"
count_per_call = "== 1"
"#;

#[test]
fn two_recorded_runs_merge_exactly_and_report_compare_and_check_read_the_result() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    let dir = tempdir();
    let d = dir.path();
    let (a, doc_a) = record(d, "a", 40);
    let (b, mut doc_b) = record(d, "b", 60);
    // Both runs were made on this machine; a fleet's come from different hosts. Renaming b's
    // host is what a second machine would have written, and makes the merged run list two
    // hosts (the header, the per-host provenance).
    doc_b["provenance"]["host"] = "host-b".into();
    std::fs::write(&b, serde_json::to_string_pretty(&doc_b).unwrap()).unwrap();
    let host_a = doc_a["provenance"]["host"].as_str().unwrap().to_string();

    let fleet = d.join("fleet.json");
    let warnings = merge_ok(&[&a, &b], &fleet);
    let m = read_json(&fleet);
    // Counts add exactly, node by node, and so do the counters.
    assert_exact_paths(&m, WRITE_PATH, 100);
    for path in WRITE_PATH {
        let (x, y, z) = (node(&doc_a, path), node(&doc_b, path), node(&m, path));
        for f in ["count", "total_ns", "self_ns"] {
            assert_eq!(u(z, f), u(x, f) + u(y, f), "{path:?} {f}");
        }
        let buckets = |n: &serde_json::Value| -> u64 {
            (n["histogram"]["buckets"].as_array().unwrap().iter())
                .map(|b| b[1].as_u64().unwrap())
                .sum()
        };
        assert_eq!(buckets(z), 100, "{path:?}: the histogram holds every call");
        assert!(
            u(z, "max_ns") == u(x, "max_ns").max(u(y, "max_ns")),
            "{path:?} max"
        );
    }
    for f in ["events", "lost_spans", "unmatched_returns", "abandoned"] {
        assert_eq!(
            u(&m["counters"], f),
            u(&doc_a["counters"], f) + u(&doc_b["counters"], f),
            "counters.{f}"
        );
    }
    assert_eq!(u(&m["calls"], "total_calls"), 100);
    assert_eq!(
        u(&m["probe_cost"], "hits"),
        u(&doc_a["probe_cost"], "hits") + u(&doc_b["probe_cost"], "hits")
    );
    // Every host's provenance is kept.
    let p = &m["provenance"];
    assert_eq!(p["host"], format!("2 hosts: {host_a}, host-b").as_str());
    let sources = p["sources"].as_array().expect("provenance.sources");
    assert_eq!(sources.len(), 2);
    assert_eq!(sources[0]["file"], a.display().to_string().as_str());
    assert_eq!(sources[1]["provenance"]["host"], "host-b");
    assert_eq!(
        sources[0]["provenance"]["pids"],
        doc_a["provenance"]["pids"]
    );
    assert!(
        warnings.contains("span logs"),
        "the dropped span logs are said: {warnings}"
    );

    // report: the tree with a header naming both hosts.
    let tree = report_text(&fleet);
    assert!(tree.starts_with("merged run of 2 hosts"), "{tree}");
    assert!(tree.contains("host-b") && tree.contains(&host_a), "{tree}");
    assert!(tree.contains("n=100"), "{tree}");
    // --first and the trace have no meaning over several hosts' clocks; --tail and csv have.
    for no_timeline in [&["--first", "5"][..], &["--format", "trace"]] {
        let o = run(wprof().arg("report").arg(&fleet).args(no_timeline));
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("each host's own clock"),
            "{}",
            text(&o)
        );
    }
    for fine in [
        &["--tail", "p90"][..],
        &["--format", "csv"],
        &["--format", "pprof", "-o"],
    ] {
        let mut cmd = wprof();
        cmd.arg("report").arg(&fleet).args(fine);
        if fine.last() == Some(&"-o") {
            cmd.arg(d.join("fleet.pb.gz"));
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "{fine:?}: {}", text(&o));
    }
    let csv = String::from_utf8_lossy(
        &run(wprof().arg("report").arg(&fleet).args(["--format", "csv"])).stdout,
    )
    .into_owned();
    assert_eq!(
        csv.lines().count(),
        1 + 100,
        "a header and every host's root calls"
    );

    // compare: one host against the fleet.
    let cmp = d.join("cmp.json");
    let o = run(wprof()
        .arg("compare")
        .arg(&a)
        .arg(&fleet)
        .arg("--json")
        .arg(&cmp));
    assert!(o.status.success(), "compare failed:\n{}", text(&o));
    let c = read_json(&cmp);
    assert_eq!(
        (u(&c, "base_root_calls"), u(&c, "new_root_calls")),
        (40, 100)
    );

    // check: the claims hold over the fleet's calls.
    let h = d.join("h.toml");
    std::fs::write(&h, HYPOTHESES).unwrap();
    let verdicts = d.join("v.json");
    let o = run(wprof()
        .args(["check", "--hypotheses"])
        .arg(&h)
        .arg(&fleet)
        .arg("--json")
        .arg(&verdicts));
    assert!(
        o.status.success(),
        "check failed (a refuted claim?):\n{}",
        text(&o)
    );
    let v = read_json(&verdicts);
    let one = (v["verdicts"].as_array().unwrap().iter())
        .find(|x| x["id"] == "one-wal-per-write")
        .expect("verdict");
    assert_eq!(one["verdict"], "SUPPORTED", "{v}");

    // A merged run merges again, and to stdout by default.
    let o = run(wprof().arg("merge").arg(&fleet).arg(&a));
    assert!(o.status.success(), "{}", text(&o));
    let again: serde_json::Value =
        wprof::model::json::parse_deep(&String::from_utf8_lossy(&o.stdout))
            .expect("JSON on stdout");
    assert_exact_paths(&again, WRITE_PATH, 140);
    assert_eq!(
        again["provenance"]["sources"].as_array().map(Vec::len),
        Some(3)
    );

    // A run of another profile is refused, naming both files.
    let mut other = doc_b.clone();
    other["provenance"]["profile_name"] = "pax".into();
    let c = d.join("pax.json");
    std::fs::write(&c, other.to_string()).unwrap();
    let e = merge_refused(&[&a, &c]);
    assert!(
        e.contains(&format!("cannot merge {} and {}", a.display(), c.display())),
        "{e}"
    );
    assert!(
        e.contains("profile 'fixture'") && e.contains("profile 'pax'"),
        "{e}"
    );
}

#[test]
fn missing_malformed_and_single_files_are_usage_errors() {
    let dir = tempdir();
    let (missing, bad, empty) = (
        dir.path().join("nope.json"),
        dir.path().join("bad.json"),
        dir.path().join("empty.json"),
    );
    std::fs::write(&bad, "{\"schema_version\": 1, oops").unwrap();
    std::fs::write(&empty, "").unwrap();
    let e = merge_refused(&[&missing, &bad]);
    assert!(e.contains("cannot read") && e.contains("nope.json"), "{e}");
    let e = merge_refused(&[&bad, &missing]);
    assert!(e.contains("bad.json is not a wprof run"), "{e}");
    let e = merge_refused(&[&empty, &bad]);
    assert!(e.contains("empty.json is not a wprof run"), "{e}");
    let e = merge_refused(&[&bad]);
    assert!(
        e.contains("2 values required") || e.contains("at least"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}
