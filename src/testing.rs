//! Test support shared by the unit and integration tests (not part of the tool's interface).

use std::io::Write;
use std::process::{Command, Stdio};

/// Whether a test that needs `what` (a privilege or a host feature) can run: when it is not
/// `available` the test should return early with a note, except under `WPROF_REQUIRE_BPF=1`
/// (set by `.ci/run`), where this panics, so CI never passes a test that did not run.
pub fn require(available: bool, what: &str) -> bool {
    if !available {
        assert_ne!(
            std::env::var("WPROF_REQUIRE_BPF").as_deref(),
            Ok("1"),
            "WPROF_REQUIRE_BPF=1 but this host lacks {what}"
        );
        eprintln!("note: test not run: no {what} (WPROF_REQUIRE_BPF=1 makes this fatal)");
    }
    available
}

/// A Go toolchain new enough for the Go fixture, as its build script finds it
/// (tests/fixtures/go-parquet/build.sh --find-go; CI installs one: .ci/install.sh). Looked up
/// once per test binary.
pub fn go_toolchain() -> Option<std::path::PathBuf> {
    static GO: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    GO.get_or_init(|| {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/go-parquet/build.sh"
        );
        let out = Command::new("bash")
            .args([script, "--find-go"])
            .output()
            .ok()?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !path.is_empty()).then(|| path.into())
    })
    .clone()
}

const VALIDATE: &str = r#"
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
doc = json.load(sys.stdin)
errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(map(str, e.path)))
for e in errors[:20]:
    print("/" + "/".join(map(str, e.path)) + ": " + e.message)
sys.exit(1 if errors else 0)
"#;

/// Validates the JSON text `doc` against the JSON Schema file `schema` (draft 2020-12) with
/// python3's jsonschema — no maintained Rust crate validates 2020-12 offline here, and Perfetto's
/// trace_processor cannot run offline. Returns the validation errors. Panics when python3 or
/// jsonschema is missing, so a check can never pass silently.
pub fn validate_json_schema(schema: &str, doc: &str) -> Result<(), String> {
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut child = Command::new(python)
        .args(["-c", VALIDATE, schema])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(doc.as_bytes())
            .unwrap_or_else(|e| panic!("write to {python}: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait for {python}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Traceback"),
        "{python} failed (is jsonschema installed?):\n{stderr}"
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
