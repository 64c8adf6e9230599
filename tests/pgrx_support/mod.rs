//! The pgrx fixture's helpers for tests/pgrx.rs: its builds, a server with the extension,
//! the extension's own `[PGS_PROFILE]` figures (the truth) and the shapes of wprof's trees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::pg::{self, Pg, Session};
use crate::common::*;
use serde_json::Value;

/// The fixture's source directory.
pub fn fixture_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pgrx_refresh")
}

/// Builds both variants once per test binary (cached under target/pgrx-fixture: seconds when
/// up to date, ~5 minutes cold); None when cargo-pgrx is not installed (build.sh exit 3) and
/// that is allowed to skip.
pub fn built() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pgrx-fixture");
        let out = Command::new("bash")
            .arg(fixture_src().join("build.sh"))
            .arg(&dir)
            .output()
            .expect("run tests/fixtures/pgrx_refresh/build.sh");
        if out.status.code() == Some(3) {
            wprof::testing::require(
                false,
                "cargo-pgrx 0.18.1 (.ci/install.sh installs it under ~/.cache/wprof-pgrx)",
            );
            return None;
        }
        assert!(
            out.status.success(),
            "the pgrx fixture build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(dir)
    })
    .as_deref()
}

/// The skip rule and the lock: BPF, PostgreSQL 15 and the built fixture, or None.
pub fn ready() -> Option<(std::sync::MutexGuard<'static, ()>, &'static Path)> {
    if !(bpf_available() && pg::available()) {
        return None;
    }
    let dir = built()?;
    Some((bpf_lock(), dir))
}

/// A cluster with the extension's functions (from `variant`'s .so) and the fixture's tables,
/// one session that already ran a cycle (the library is loaded, the caches warm).
pub fn server_with_extension(variant: &Path) -> (Pg, Session) {
    let pg = Pg::start();
    let so = pg.install_library(&variant.join("pgrx_refresh.so"));
    let functions = std::fs::read_to_string(variant.join("pgrx_refresh.sql"))
        .expect("read pgrx_refresh.sql")
        .replace("MODULE_PATHNAME", &so.to_string_lossy());
    let schema = std::fs::read_to_string(fixture_src().join("schema.sql")).expect("schema.sql");
    pg.psql(&functions);
    pg.psql(&schema);
    let mut s = pg.session();
    s.ok("SELECT cycle_changes(0);");
    let out = s.ok("SELECT refresh('st_src');");
    profile_line(&out);
    (pg, s)
}

/// `wprof attach --target pgrx-merge --pid PID ARGS --json JSON`, once its probes are live.
pub fn attach_pgrx(pid: u32, args: &[&str], json: &Path) -> Attach {
    let pid = pid.to_string();
    let mut all = vec!["--target", "pgrx-merge", "--pid", &pid];
    all.extend(args);
    Attach::start(&all, json)
}

/// The extension's `[PGS_PROFILE]` line among a statement's output, as key → value (`ms`
/// figures in ns, the rest as they are).
pub fn profile_line(out: &[String]) -> BTreeMap<String, String> {
    let line = out
        .iter()
        .find_map(|l| l.split_once("[PGS_PROFILE] ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no [PGS_PROFILE] line in {out:?}"));
    line.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            let v = match v.strip_suffix("ms") {
                Some(ms) => format!("{:.0}", ms.parse::<f64>().expect("ms figure") * 1e6),
                None => v.to_string(),
            };
            (k.to_string(), v)
        })
        .collect()
}

pub fn ns(line: &BTreeMap<String, String>, key: &str) -> u64 {
    line[key].parse().expect("ns")
}

/// A node by path of phase names from a root, or a panic showing the tree.
pub fn at<'a>(run: &'a Value, path: &[&str]) -> &'a Value {
    node(run, path)
}

/// Every path of the tree (names joined by '/') with its completed and abandoned calls,
/// the statements of a grouped phase added up.
pub fn shape(run: &Value) -> BTreeMap<String, (u64, u64)> {
    fn walk(n: &Value, path: &str, out: &mut BTreeMap<String, (u64, u64)>) {
        let p = if path.is_empty() {
            n["name"].as_str().unwrap_or("?").to_string()
        } else {
            format!("{path}/{}", n["name"].as_str().unwrap_or("?"))
        };
        // Grouped siblings (`group_by`: one node per statement) add up under their phase.
        let e = out.entry(p.clone()).or_insert((0, 0));
        *e = (e.0 + u(n, "count"), e.1 + u(n, "abandoned"));
        for c in n["children"].as_array().into_iter().flatten() {
            walk(c, &p, out);
        }
    }
    let mut out = BTreeMap::new();
    for r in run["tree"]["roots"].as_array().into_iter().flatten() {
        walk(r, "", &mut out);
    }
    out
}

/// The tree N good refresh cycles must give: path → (completed, abandoned). The decision
/// makes 3 SPI statements (the catalog row, the pending changes, the threshold), the cleanup
/// 2 (the DELETE, the frontier), the MERGE one; each is planned and run.
pub fn cycle_shape(n: u64) -> BTreeMap<String, (u64, u64)> {
    let mut want = BTreeMap::new();
    want.insert("refresh".to_string(), (n, 0));
    want.insert("refresh/generate_build".to_string(), (n, 0));
    for (phase, statements) in [("decision", 3), ("merge", 1), ("cleanup", 2)] {
        want.insert(format!("refresh/{phase}"), (n, 0));
        for leaf in [
            "spi_execute",
            "spi_execute/planning",
            "spi_execute/executor_run",
        ] {
            want.insert(format!("refresh/{phase}/{leaf}"), (statements * n, 0));
        }
    }
    want
}

/// The stream table holds exactly the source's rows (the MERGEs were right).
pub fn assert_stream_table_in_sync(s: &mut Session) {
    let diff = s.ok(
        "SELECT (SELECT count(*) FROM (SELECT * FROM src EXCEPT SELECT * FROM st_src) a) \
         + (SELECT count(*) FROM (SELECT * FROM st_src EXCEPT SELECT * FROM src) b);",
    );
    assert_eq!(diff, vec!["0"], "st_src differs from src");
}
