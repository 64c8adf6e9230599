//! `wprof check` end to end on synthetic runs (no root needed): verdicts, exit codes, and a
//! one-line message with exit 2 for every bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use wprof::model::Run;
use wprof::model::{CallRow, CallTable};

/// A run of `n` root calls of `write` (20 µs) containing one `tuple_insert` (10 µs) containing
/// one `aux` of `aux_pct`% ± 0.2% of tuple_insert.
fn run(n: usize, aux_pct: f64) -> Run {
    Run {
        calls: CallTable {
            columns: vec!["write".into(), "tuple_insert".into(), "aux".into()],
            rows: (0..n as u64)
                .map(|i| {
                    let noise = ((i * 7919) % 41) as f64 / 100.0 - 0.2; // -0.2..=+0.2 percent
                    let aux = (10_000.0 * (aux_pct + noise) / 100.0) as u64;
                    CallRow {
                        start_ns: 1_000 * i,
                        pid: 1,
                        tid: 1,
                        root: 0,
                        total_ns: 20_000,
                        phase_ns: vec![20_000, 10_000, aux],
                        phase_calls: vec![1, 1, 1],
                    }
                })
                .collect(),
            total_calls: n as u64,
            capped: false,
        },
        ..Run::default()
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn write_run(dir: &Path, name: &str, r: &Run) -> PathBuf {
    write(dir, name, &wprof::model::json::to_json(r).to_string())
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn check(args: &[&Path]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wprof"));
    cmd.arg("check").arg("--hypotheses").arg(args[0]);
    for a in &args[1..] {
        cmd.arg(a);
    }
    let o = cmd.output().unwrap();
    Out {
        code: o.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn hyp(body: &str) -> String {
    format!("[[hypothesis]]\nid = \"H1\"\nclaim = \"aux costs 5-10% of an insert\"\n{body}\n")
}

fn assert_usage(o: &Out, needle: &str) {
    assert_eq!(o.code, 2, "stdout: {}\nstderr: {}", o.stdout, o.stderr);
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(
        o.stderr.contains(needle),
        "{:?} not in {}",
        needle,
        o.stderr
    );
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
}

#[test]
fn true_hypothesis_is_supported() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(200, 7.0));
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"aux\"\nof = \"tuple_insert\"\nshare = \"5%..10%\""),
    );
    let json = d.path().join("v.json");
    let o = Command::new(env!("CARGO_BIN_EXE_wprof"))
        .args(["check", "--json"])
        .arg(&json)
        .arg("--hypotheses")
        .arg(&h)
        .arg(&r)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("SUPPORTED"), "{stdout}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let v = &doc["verdicts"][0];
    assert_eq!(v["verdict"], "SUPPORTED");
    assert_eq!(v["kind"], "share");
    assert_eq!(v["calls"], 200);
    assert!(doc["base"].is_null());
    let m = v["measured"].as_f64().unwrap();
    let (lo, hi) = (
        v["ci_low"].as_f64().unwrap(),
        v["ci_high"].as_f64().unwrap(),
    );
    assert!(lo <= m && m <= hi && (m - 7.0).abs() < 0.1, "{v}");
}

#[test]
fn false_hypothesis_is_refuted() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(200, 7.0));
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"aux\"\nof = \"tuple_insert\"\nshare = \"< 5%\""),
    );
    let o = check(&[&h, &r]);
    assert_eq!(o.code, 3, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("REFUTED"), "{}", o.stdout);
}

#[test]
fn too_few_calls_is_inconclusive() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(5, 7.0));
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"aux\"\nof = \"tuple_insert\"\nshare = \"< 5%\""),
    );
    let o = check(&[&h, &r]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("INCONCLUSIVE"), "{}", o.stdout);
    assert!(
        o.stdout.contains("only 5 root calls; need ≥ 30"),
        "{}",
        o.stdout
    );
}

#[test]
fn delta_against_base() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(200, 7.0));
    let b = write_run(d.path(), "base.json", &run(200, 3.0));
    let up = write(
        d.path(),
        "up.toml",
        &hyp("phase = \"aux\"\nof = \"tuple_insert\"\nshare_delta = \">= +3\""),
    );
    let o = check(&[&up, &r, &b]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("SUPPORTED"), "{}", o.stdout);
    let big = write(
        d.path(),
        "big.toml",
        &hyp("phase = \"aux\"\nmean_delta = \"> +200%\""),
    );
    let o = check(&[&big, &r, &b]);
    assert_eq!(o.code, 3, "{}{}", o.stdout, o.stderr);
    // Without a base: a usage error.
    let o = check(&[&up, &r]);
    assert_usage(&o, "base run");
}

#[test]
fn unknown_phase_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(50, 7.0));
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"auxx\"\nshare = \"< 5%\""),
    );
    let o = check(&[&h, &r]);
    assert_usage(&o, "hypothesis H1: unknown phase \"auxx\"");
    assert!(o.stderr.contains("tuple_insert"), "{}", o.stderr);
}

#[test]
fn unparsable_bound_is_a_usage_error() {
    let d = tempfile::tempdir().unwrap();
    let r = write_run(d.path(), "run.json", &run(50, 7.0));
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"aux\"\nmean_us = \"about 20\""),
    );
    assert_usage(&check(&[&h, &r]), "\"about 20\"");
}

#[test]
fn truncated_and_foreign_json_are_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let full = wprof::model::json::to_json(&run(50, 7.0)).to_string();
    let t = write(d.path(), "trunc.json", &full[..full.len() / 2]);
    let f = write(d.path(), "foreign.json", "{\"foo\":1}");
    let h = write(
        d.path(),
        "h.toml",
        &hyp("phase = \"aux\"\nshare = \"< 5%\""),
    );
    assert_usage(&check(&[&h, &t]), "trunc.json");
    assert_usage(&check(&[&h, &f]), "not a wprof RUN.json");
    assert_usage(&check(&[&h, &d.path().join("missing.json")]), "cannot read");
}
