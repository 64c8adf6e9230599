//! The layers of the crate (docs/design-notes.md, "The layers"): every module imports only
//! from the modules below it. Read from the source: each `crate::MODULE` path in a module's
//! non-test code must name the module itself, a support module or one of its allowed lower
//! modules. A new upward arrow fails here with the file and line that draws it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Used by every layer: errors, reading files as the invoking user, writing outputs.
const SUPPORT: &[&str] = &["error", "privilege", "output_file", "stdout", "testing"];

/// What each module may import besides itself and [`SUPPORT`]. Modules not listed (the
/// commands: `session`, `commands`, `doctor`, `cli_docs`) sit on top and may import anything.
const ALLOWED: &[(&str, &[&str])] = &[
    // The ground floor: the run, the profile, the shared vocabularies.
    ("model", &[]),
    // The stages.
    ("resolve", &["model"]),
    ("symbolize", &["model", "resolve"]),
    ("aggregate", &["model"]),
    ("render", &["model"]),
    ("attach", &["model", "resolve"]),
    ("collect", &["model", "attach", "aggregate"]),
    (
        "probe_cost",
        &["model", "resolve", "attach", "collect", "symbolize"],
    ),
    ("export", &["model", "resolve"]),
    // `--serve`: the exposition and its HTTP listener, fed plain values by the session.
    ("serve", &["model"]),
    // Commands over saved runs, and the command line they are given.
    ("analyze", &["model", "render", "args"]),
    ("args", &["model", "render", "aggregate"]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file of src/ belongs to (`src/render/text.rs` -> `render`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The non-test code of a file: test-only files are skipped, and a file's `#[cfg(test)]`
/// module (always its last item here) is cut off.
fn non_test_code(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_string_lossy();
    if name.ends_with("tests.rs") || name == "testutil.rs" {
        return None;
    }
    let text = std::fs::read_to_string(file).unwrap();
    Some(match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => text[..i].to_string(),
        None => text,
    })
}

/// Every `crate::NAME` in code (not in comments), with its line number.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let code_part = line.split("//").next().unwrap_or("");
        let mut rest = code_part;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let before = rest[..at].chars().last();
            // `wprof_common::...` or `some_crate::` are not this crate.
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') && !name.is_empty() {
                out.push((i + 1, name));
            }
            rest = after;
        }
    }
    out
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, a)| {
            (
                *m,
                a.iter().copied().chain(SUPPORT.iter().copied()).collect(),
            )
        })
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut seen_modules = BTreeSet::new();
    let mut violations = Vec::new();
    for file in &files {
        let module = module_of(&src, file);
        seen_modules.insert(module.clone());
        let Some(rules) = allowed.get(module.as_str()) else {
            continue;
        };
        let Some(code) = non_test_code(file) else {
            continue;
        };
        for (line, target) in crate_paths(&code) {
            if target != module && !rules.contains(target.as_str()) {
                violations.push(format!(
                    "{}:{line}: {module} imports crate::{target}",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    // The table must name real modules, or it checks nothing.
    for (m, _) in ALLOWED {
        assert!(
            seen_modules.contains(*m),
            "ALLOWED names {m}, which src/ does not have"
        );
    }
    assert!(
        violations.is_empty(),
        "imports from a higher layer (see docs/design-notes.md, \"The layers\"):\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_scanner_sees_paths_in_code_and_not_in_comments() {
    let code = "use crate::model::Run;\nlet x = crate::render::write(a); // crate::session\n\
                wprof_common::crate_thing; my_crate::resolve";
    let found: Vec<String> = crate_paths(code).into_iter().map(|(_, n)| n).collect();
    assert_eq!(found, ["model", "render"]);
}
