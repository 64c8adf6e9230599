//! Separate debug info on the `debuginfo-*` fixtures (tests/fixtures/README.md): a stripped
//! binary's static functions resolve only through its debug file (.gnu_debuglink next to it,
//! or the build id under WPROF_DEBUG_DIRS), a function that also has inlined copies is warned
//! about, and a record run counts the static phases exactly (privileged: BPF).

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// Static functions of the fixture: the phase, the wrapper calling `checksum` out of line,
/// and `checksum` (also inlined into hash_inline and verify_record).
const PROFILE: &str = r#"
name = "debuginfo-fixture"
object = "exe"
[[phase]]
name = "store_record"
symbol = "store_record"
[[phase]]
name = "hash_outline"
symbol = "hash_outline"
[[phase]]
name = "checksum"
symbol = "checksum"
"#;

const HINT: &str = "(the object is stripped: only exported functions are visible; install its \
    debug symbols (Debian: its package's -dbgsym, e.g. postgresql-15-dbgsym) or set WPROF_DEBUG_DIRS)";

const WARNING: &str = "wprof: warning: phase 'checksum': checksum also has 2 inlined copies (in ";

fn profile(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("debuginfo.toml");
    std::fs::write(&p, PROFILE).unwrap();
    p
}

/// `wprof probes --target PROFILE --binary BIN`, with WPROF_DEBUG_DIRS set to `dirs` (or unset).
fn probes(profile: &Path, bin: &Path, dirs: Option<&Path>) -> Output {
    let mut cmd = wprof();
    cmd.args(["probes", "--target"])
        .arg(profile)
        .arg("--binary")
        .arg(bin)
        .env_remove("WPROF_DEBUG_DIRS");
    if let Some(d) = dirs {
        cmd.env("WPROF_DEBUG_DIRS", d);
    }
    run(&mut cmd)
}

/// The status column of `phase`'s row in `wprof probes` output.
fn row<'a>(stdout: &'a str, phase: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(phase))
        .unwrap_or_else(|| panic!("no row for {phase} in:\n{stdout}"))
}

#[test]
fn probes_resolve_static_functions_only_with_the_debug_file() {
    let dir = tempdir();
    let prof = profile(dir.path());
    let stripped = fixture("debuginfo-stripped");
    let debug = fixture("debuginfo-stripped.debug");

    // Found by .gnu_debuglink next to the binary (CRC32 checked).
    let out = probes(&prof, &stripped, None);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    for phase in ["store_record", "hash_outline", "checksum"] {
        let r = row(&stdout, phase);
        assert!(
            r.ends_with(&format!("resolved (debuginfo: {})", debug.display())),
            "{r}"
        );
    }

    // The full build names them itself: no provenance note, same offsets.
    let full = probes(&prof, &fixture("debuginfo-full"), None);
    let full_out = String::from_utf8_lossy(&full.stdout).into_owned();
    assert!(full.status.success(), "{}", text(&full));
    for phase in ["store_record", "hash_outline", "checksum"] {
        let (a, b) = (row(&stdout, phase), row(&full_out, phase));
        assert!(b.ends_with("resolved"), "{b}");
        // phase, object, symbol, offset: the offset column agrees.
        let offset = |r: &str| r.split_whitespace().nth(3).unwrap().to_string();
        assert_eq!(offset(a), offset(b), "{a}\n{b}");
    }

    // A copy without its debug file: exit 4, and the error says why and what to do.
    let lone_dir = dir.path().join("lone");
    std::fs::create_dir(&lone_dir).unwrap();
    let lone = lone_dir.join("debuginfo-stripped");
    std::fs::copy(&stripped, &lone).unwrap();
    let out = probes(&prof, &lone, None);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "phase 'store_record': no symbol 'store_record' in {} {HINT}",
        lone.display()
    );
    assert!(stderr.contains(&want), "want {want}\n{}", text(&out));

    // The same copy with WPROF_DEBUG_DIRS pointing at a build-id tree.
    let out = probes(&prof, &lone, Some(&fixture("debugroot")));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", text(&out));
    let r = row(&stdout, "store_record");
    assert!(
        r.contains("resolved (debuginfo: ") && r.contains("/debugroot/.build-id/"),
        "{r}"
    );
}

#[test]
fn probes_warn_about_inlined_copies_once() {
    let dir = tempdir();
    let prof = profile(dir.path());
    for bin in ["debuginfo-stripped", "debuginfo-full"] {
        let out = probes(&prof, &fixture(bin), None);
        assert!(out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("wprof: warning:"))
            .collect();
        assert_eq!(warnings.len(), 1, "{bin}: {}", text(&out));
        let w = warnings[0];
        assert!(
            w.starts_with(WARNING)
                && w.contains("hash_inline")
                && w.contains("verify_record")
                && w.ends_with("that the probe cannot see: calls through them are not counted"),
            "{bin}: {w}"
        );
    }
}

/// A `key=value` field of the fixture's ground-truth line.
fn truth(out: &Output, key: &str) -> u64 {
    truth_field(out, "debuginfo-fixture:", key)
}

#[test]
fn record_counts_static_phases_of_a_stripped_binary_exactly() {
    if !bpf_available() {
        return;
    }
    let _lock = bpf_lock();
    const N: u64 = 2000;
    let dir = tempdir();
    let prof = profile(dir.path());
    let json = dir.path().join("run.json");
    let out = run(wprof()
        .args(["record", "-q", "--target"])
        .arg(&prof)
        .arg("--json")
        .arg(&json)
        .env_remove("WPROF_DEBUG_DIRS")
        .arg("--")
        .arg(fixture("debuginfo-stripped"))
        .args(["--iterations", &N.to_string()]));
    assert!(out.status.success(), "wprof record failed:\n{}", text(&out));
    assert_eq!(truth(&out, "store_record"), N);
    assert_eq!(truth(&out, "checksum_outline"), N);
    assert_eq!(truth(&out, "checksum_calls"), 3 * N);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches(WARNING).count(), 1, "{}", text(&out));

    let runj = read_json(&json);
    let store = node(&runj, &["store_record"]);
    assert_eq!(u(store, "count"), N, "{}", summary(&runj));
    let outline = node(&runj, &["hash_outline"]);
    assert_eq!(u(outline, "count"), N, "{}", summary(&runj));
    // The probe sees the out-of-line calls only: N of the 3N the program makes.
    let checksum = node(&runj, &["hash_outline", "checksum"]);
    assert_eq!(u(checksum, "count"), N, "{}", summary(&runj));
    for n in [store, outline, checksum] {
        assert_eq!(
            u(n, "abandoned") + u(n, "lost") + u(n, "open"),
            0,
            "{}",
            summary(&runj)
        );
    }
}
