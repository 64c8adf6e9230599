//! Suggestions for a phase that did not resolve: the nearest names, and why a name that
//! exists in some form cannot be probed.
//!
//! In: an [`ObjectSymbols`] and the phase's pattern. Out: up to N similar names (names
//! containing the pattern first, then by string similarity, strsim's normalized
//! Damerau-Levenshtein and Jaro-Winkler, on the whole name or its last component); or a note
//! that the name is a GNU indirect function or exists only as compiler clones/fragments.

use strsim::{jaro_winkler, normalized_damerau_levenshtein};

use super::elf::symbols::ObjectSymbols;
use super::matcher::unescape;

/// How many clones a note lists.
const LIST_MAX: usize = 10;

/// Up to `max` names of `syms` similar to `pattern`, best first: names containing it first
/// (shortest first), then by string similarity of the whole name or its last component.
pub fn nearest(syms: &ObjectSymbols, pattern: &str, max: usize) -> Vec<String> {
    let mangled = pattern.starts_with("_Z") || pattern.starts_with("_R");
    let names = syms.functions.iter().flat_map(|f| f.names.iter()).map(|n| {
        if mangled {
            n.mangled.as_str()
        } else {
            n.demangled.as_str()
        }
    });
    nearest_names(names, pattern, max)
}

/// Up to `max` of `names` similar to `pattern`, ranked as [`nearest`] ranks symbols (also used
/// for tracepoint names).
pub fn nearest_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
    pattern: &str,
    max: usize,
) -> Vec<String> {
    let query: String = unescape(pattern)
        .chars()
        .filter(|c| !matches!(c, '*' | '?'))
        .collect::<String>()
        .to_lowercase();
    if query.is_empty() {
        return Vec::new();
    }
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_unstable();
    names.dedup();
    let mut scored: Vec<(u8, f64, &str)> = names
        .into_iter()
        .map(|name| {
            let lower = name.to_lowercase();
            let tier = if query.len() >= 3 && lower.contains(&query) {
                0
            } else {
                1
            };
            let last = lower.rsplit(['.', ':', '/']).next().unwrap_or(&lower);
            let sim = |a: &str| {
                0.5 * normalized_damerau_levenshtein(&query, a) + 0.5 * jaro_winkler(&query, a)
            };
            let score = if tier == 0 {
                -(name.len() as f64)
            } else {
                sim(&lower).max(sim(last))
            };
            (tier, score, name)
        })
        .collect();
    scored.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2)));
    scored
        .into_iter()
        .take(max)
        .map(|(_, _, n)| n.to_string())
        .collect()
}

/// Why a name that exists in some form cannot be probed: it is only present as compiler clones
/// or fragments, or it is a GNU indirect function.
pub fn explain_missing(syms: &ObjectSymbols, pattern: &str) -> Option<String> {
    let literal = unescape(pattern);
    if syms.ifuncs.contains(&literal) {
        return Some(format!(
            "'{literal}' is a GNU indirect function (its symbol is the resolver \
            that picks an implementation at load time): probe an implementation instead"
        ));
    }
    let clones: Vec<&str> = syms
        .fragments
        .iter()
        .filter(|f| f.base == literal || crate::model::symbol::demangle(&f.base) == literal)
        .map(|f| f.name.as_str())
        .take(LIST_MAX)
        .collect();
    (!clones.is_empty()).then(|| {
        format!(
            "only compiler fragments or clones of it exist ({}), which are never probed \
            as functions",
            clones.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::matcher::{find, MatchError};
    use crate::resolve::testutil::{build, pax_library};

    #[test]
    fn no_match_suggests_nearest() {
        let dir = tempfile::tempdir().unwrap();
        let syms = pax_library(dir.path());
        match find(&syms, "pax::CCPaxAccessMethod::TupleInsrt", false) {
            Err(MatchError::NoMatch) => {
                let nearest = nearest(&syms, "pax::CCPaxAccessMethod::TupleInsrt", 5);
                assert_eq!(
                    nearest[0], "pax::CCPaxAccessMethod::TupleInsert",
                    "{nearest:?}"
                );
                assert!(nearest.len() <= 5);
            }
            other => panic!("{other:?}"),
        }
        match find(&syms, "TupleInsert", false) {
            Err(MatchError::NoMatch) => {
                let nearest = nearest(&syms, "TupleInsert", 5);
                assert_eq!(
                    nearest[0], "pax::CCPaxAccessMethod::TupleInsert",
                    "{nearest:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            find(&syms, "pax::[", false),
            Err(MatchError::BadPattern(_))
        ));
    }

    #[test]
    fn clones_and_ifuncs_are_explained() {
        let dir = tempfile::tempdir().unwrap();
        let src =
            "static int __attribute__((noinline)) helper(int x, int unused) { return x * 3; }\n\
            int use(int x) { return helper(x, 5) + helper(x + 1, 5); }\n";
        let so = build(
            dir.path(),
            "libclone.so",
            src,
            false,
            &["-O2", "-shared", "-fPIC"],
        );
        let syms = ObjectSymbols::load(&so).unwrap();
        // gcc -O2 only emits `helper.constprop.0` (or `.isra.0`): never a function.
        assert!(syms
            .functions
            .iter()
            .all(|f| f.names.iter().all(|n| !n.mangled.starts_with("helper"))));
        let note = explain_missing(&syms, "helper").unwrap();
        assert!(note.contains("helper."), "{note}");
        assert_eq!(explain_missing(&syms, "use"), None);
    }
}
