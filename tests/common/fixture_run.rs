//! Running wprof on the C fixture (`writepath`, `--target fixture`) and checking its tree.

use std::path::Path;
use std::process::Output;

use super::{fixture, node, read_json, run, summary, text, u, wprof};

/// The C fixture's write path: every node a plain run reaches.
pub const WRITE_PATH: &[&[&str]] = &[
    &["write_record"],
    &["write_record", "encode_record"],
    &["write_record", "persist_block"],
    &["write_record", "persist_block", "compress_block"],
    &["write_record", "persist_block", "flush_block"],
    &["write_record", "wal_append"],
    &["write_record", "wal_append", "wal_sync"],
];

/// Every spin of the C fixture at 0: a write is ~0.4 µs of work and 7 probed calls, so the
/// probes dominate (storms, overhead budgets, cost benchmarks).
/// Short phase times (µs; a 13 µs write of seven nested phases, each called once a write):
/// hot enough that every phase probed costs ~40% of the CPU here. Commanded self times:
/// write 3, encode 1, persist 1, compress 1, flush 2, wal 1, sync 4.
pub const SHORT_SPINS: &[&str] = &[
    "--write-us",
    "3",
    "--encode-us",
    "1",
    "--persist-us",
    "1",
    "--compress-us",
    "1",
    "--flush-us",
    "2",
    "--wal-us",
    "1",
    "--sync-us",
    "4",
];

pub const ZERO_SPINS: &[&str] = &[
    "--write-us",
    "0",
    "--encode-us",
    "0",
    "--persist-us",
    "0",
    "--compress-us",
    "0",
    "--flush-us",
    "0",
    "--wal-us",
    "0",
    "--sync-us",
    "0",
];

/// `wprof record --target fixture --json JSON [extra] -- PROGRAM ARGS` with `env` set for
/// wprof; panics with wprof's output unless it succeeds. Returns the output and the JSON.
pub fn record_fixture(
    json: &Path,
    extra: &[&str],
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Output, serde_json::Value) {
    let mut cmd = wprof();
    cmd.args(["record", "--target", "fixture", "--json"])
        .arg(json)
        .args(extra)
        .arg("--")
        .arg(fixture(program))
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
    let doc = read_json(json);
    (out, doc)
}

/// The `key=value` field `key` of the ground-truth line a fixture prints on stdout, the one
/// starting with `prefix` (e.g. `fixture:`).
pub fn truth_field(out: &Output, prefix: &str, key: &str) -> u64 {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{stdout}"));
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

/// One root; each of `paths` completed exactly `calls` times with nothing lost, abandoned or
/// left open; no unmatched return.
pub fn assert_exact_paths(run: &serde_json::Value, paths: &[&[&str]], calls: u64) {
    assert_eq!(
        run["tree"]["roots"].as_array().map(Vec::len),
        Some(1),
        "{}",
        summary(run)
    );
    for path in paths {
        let n = node(run, path);
        assert_eq!(u(n, "count"), calls, "{path:?}\n{}", summary(run));
        assert_eq!(
            u(n, "abandoned") + u(n, "lost") + u(n, "open"),
            0,
            "{path:?}\n{}",
            summary(run)
        );
    }
    assert_eq!(
        u(&run["counters"], "unmatched_returns"),
        0,
        "{}",
        summary(run)
    );
}
