//! Test helpers for render: golden-file comparison and the SVG frame reader.

use std::path::PathBuf;

/// Compares `actual` with tests/data/render/`case` line by line, failing at the first
/// differing lines with `file:line`. `WPROF_BLESS=1` rewrites the file instead.
pub fn assert_golden(case: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/render")
        .join(case);
    if std::env::var_os("WPROF_BLESS").is_some_and(|v| v == "1") {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(&path, actual).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with WPROF_BLESS=1 to create it)",
            path.display()
        )
    });
    let (exp, act): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let mut diffs = Vec::new();
    for i in 0..exp.len().max(act.len()) {
        let (e, a) = (exp.get(i), act.get(i));
        if e != a {
            diffs.push(format!(
                "{}:{}:\n  expected: {}\n  actual:   {}",
                path.display(),
                i + 1,
                e.map_or("<end of file>".to_string(), |s| format!("{s:?}")),
                a.map_or("<end of output>".to_string(), |s| format!("{s:?}")),
            ));
        }
    }
    if !diffs.is_empty() {
        let shown = diffs.len().min(10);
        panic!(
            "{} differing line(s), first {shown}:\n{}\n(WPROF_BLESS=1 rewrites the golden file)",
            diffs.len(),
            diffs[..shown].join("\n")
        );
    }
    assert_eq!(
        expected.ends_with('\n'),
        actual.ends_with('\n'),
        "{}: final newline differs",
        path.display()
    );
}

pub use super::svg_frames::{svg_frames, SvgFrame};
