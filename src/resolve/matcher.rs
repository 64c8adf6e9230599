//! Symbol matching (design.md, "Attach profiles"): a phase's `symbol` pattern -> functions.
//!
//! In: an [`ObjectSymbols`], a pattern and `all_matches`. Out: the matched functions, one per
//! address (aliases count once), or a [`MatchError`]: nothing matched (with the nearest names to
//! suggest), several distinct functions matched (listed), or a malformed glob.
//! Rules: a pattern starting with `_Z` or `_R` is an exact mangled name (a glob on mangled names
//! if it has metacharacters); anything else is compared with the demangled name (no parameters,
//! no Rust hash): exactly first, then as a glob if it has `*`, `?` or `[`. In globs `*` crosses
//! `::` and `/`, `\` escapes `[ ] * ?`, and `{ }` are literal (they occur in C++ and Go names).

use globset::{GlobBuilder, GlobMatcher};

use super::elf::symbols::{Function, ObjectSymbols, SymbolName};

/// How many matches an ambiguity error lists.
const LIST_MAX: usize = 10;

/// One matched function, with the name that matched.
#[derive(Debug, Clone, Copy)]
pub struct Match<'a> {
    /// The function.
    pub function: &'a Function,
    /// Its name that matched (the preferred name when several did).
    pub name: &'a SymbolName,
}

/// Why a pattern did not give exactly the functions to probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchError {
    /// Nothing matched (`suggest::nearest` gives the names to suggest: a search of every
    /// name, so only where they are shown).
    NoMatch,
    /// Several distinct functions matched and the phase does not say `all_matches`.
    Ambiguous {
        /// How many matched.
        count: usize,
        /// The first ones, as `demangled (mangled)`.
        listed: Vec<String>,
    },
    /// The glob does not compile.
    BadPattern(String),
}

/// A compiled pattern.
enum Pattern {
    /// Compared with the mangled names.
    Mangled {
        literal: String,
        glob: Option<GlobMatcher>,
    },
    /// Compared with the demangled names.
    Demangled {
        raw: String,
        literal: String,
        glob: Option<GlobMatcher>,
    },
}

impl Pattern {
    fn compile(pattern: &str) -> Result<Pattern, MatchError> {
        let glob = if has_glob_meta(pattern) {
            Some(compile_glob(pattern)?)
        } else {
            None
        };
        let literal = unescape(pattern);
        if pattern.starts_with("_Z") || pattern.starts_with("_R") {
            Ok(Pattern::Mangled { literal, glob })
        } else {
            Ok(Pattern::Demangled {
                raw: pattern.to_string(),
                literal,
                glob,
            })
        }
    }

    /// Literal (exact) hit on `n`.
    fn exact(&self, n: &SymbolName) -> bool {
        match self {
            Pattern::Mangled { literal, .. } => {
                n.mangled == *literal || crate::model::symbol::strip_suffixes(&n.mangled) == literal
            }
            Pattern::Demangled { raw, literal, .. } => {
                n.demangled == *raw || n.demangled == *literal
            }
        }
    }

    /// Glob hit on `n` (false when the pattern is no glob).
    fn glob(&self, n: &SymbolName) -> bool {
        match self {
            Pattern::Mangled { glob: Some(g), .. } => g.is_match(&n.mangled),
            Pattern::Demangled { glob: Some(g), .. } => g.is_match(&n.demangled),
            _ => false,
        }
    }
}

/// True if `p` has an unescaped `*`, `?` or `[`.
pub fn has_glob_meta(p: &str) -> bool {
    let mut escaped = false;
    for c in p.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// `p` with its backslash escapes resolved (`foo\[abi:cxx11\]` -> `foo[abi:cxx11]`).
pub(crate) fn unescape(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            _ => out.push(c),
        }
    }
    out
}

fn compile_glob(p: &str) -> Result<GlobMatcher, MatchError> {
    // globset reads `{a,b}` as alternatives and `**` as a path wildcard: make both plain.
    let mut g = String::with_capacity(p.len() + 8);
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                g.push('\\');
                g.extend(chars.next());
            }
            '{' | '}' => {
                g.push('\\');
                g.push(c);
            }
            '*' => {
                g.push('*');
                while chars.peek() == Some(&'*') {
                    chars.next();
                }
            }
            _ => g.push(c),
        }
    }
    GlobBuilder::new(&g)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| MatchError::BadPattern(format!("invalid glob '{p}': {e}")))
}

/// The functions of `syms` that `pattern` names: exactly one, or all of them with `all_matches`.
pub fn find<'a>(
    syms: &'a ObjectSymbols,
    pattern: &str,
    all_matches: bool,
) -> Result<Vec<Match<'a>>, MatchError> {
    let compiled = Pattern::compile(pattern)?;
    let collect = |hit: &dyn Fn(&SymbolName) -> bool| -> Vec<Match<'a>> {
        syms.functions
            .iter()
            .filter_map(|f| {
                f.names
                    .iter()
                    .find(|n| hit(n))
                    .map(|name| Match { function: f, name })
            })
            .collect()
    };
    let mut found = collect(&|n| compiled.exact(n));
    if found.is_empty() {
        found = collect(&|n| compiled.glob(n));
    }
    match found.len() {
        0 => Err(MatchError::NoMatch),
        1 => Ok(found),
        _ if all_matches => Ok(found),
        count => Err(MatchError::Ambiguous {
            count,
            listed: found
                .iter()
                .take(LIST_MAX)
                .map(|m| describe(m.name))
                .collect(),
        }),
    }
}

/// Whether `pattern` names a function called `demangled` (demangled, without parameters or
/// Rust hash), exactly or as a glob: the test of a profile against a program's symbol list
/// without the program.
pub fn names(pattern: &str, demangled: &str) -> Result<bool, MatchError> {
    let p = Pattern::compile(pattern)?;
    let n = SymbolName {
        mangled: demangled.to_string(),
        demangled: demangled.to_string(),
    };
    Ok(p.exact(&n) || p.glob(&n))
}

/// `demangled (mangled)`, or just the name when both are the same.
pub fn describe(n: &SymbolName) -> String {
    if n.demangled == n.mangled {
        n.mangled.clone()
    } else {
        format!("{} ({})", n.demangled, n.mangled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::testutil::{build, objdump_rets, pax_library};

    fn cxx_syms() -> (tempfile::TempDir, ObjectSymbols) {
        let dir = tempfile::tempdir().unwrap();
        let syms = pax_library(dir.path());
        (dir, syms)
    }

    fn one(syms: &ObjectSymbols, p: &str) -> String {
        let m = find(syms, p, false).unwrap_or_else(|e| panic!("{p}: {e:?}"));
        assert_eq!(m.len(), 1, "{p}");
        m[0].name.mangled.clone()
    }

    #[test]
    fn cxx_exact_and_globs() {
        let (_d, syms) = cxx_syms();
        let mangled = "_ZN3pax17CCPaxAccessMethod11TupleInsertEP12RelationDataP14TupleTableSlotjiP19BulkInsertStateData";
        assert_eq!(one(&syms, mangled), mangled);
        assert_eq!(one(&syms, "pax::CCPaxAccessMethod::TupleInsert"), mangled);
        assert_eq!(one(&syms, "pax::CCPaxAccessMethod::TupleInsert*"), mangled);
        assert_eq!(one(&syms, "*::TupleIns?rt"), mangled);
        assert_eq!(
            one(&syms, "_ZN3pax17CCPaxAccessMethod11TupleInsert*"),
            mangled
        );
        // [abi:cxx11]: literal, escaped, and glob spellings.
        assert_eq!(one(&syms, "pax::Name[abi:cxx11]"), "_ZN3pax4NameB5cxx11Ev");
        assert_eq!(
            one(&syms, r"pax::Name\[abi:cxx11\]"),
            "_ZN3pax4NameB5cxx11Ev"
        );
        assert_eq!(one(&syms, r"pax::Na*\[abi:*"), "_ZN3pax4NameB5cxx11Ev");
        assert_eq!(
            one(&syms, "pax::Writer<int>::write"),
            "_ZNK3pax6WriterIiE5writeEi"
        );
        // extern "C" plus an alias: one function.
        assert_eq!(find(&syms, "XLogPax*", false).unwrap().len(), 1);
        assert_eq!(
            find(&syms, "XLogPaxAlias", false).unwrap()[0]
                .function
                .names
                .len(),
            2
        );
    }

    #[test]
    fn ambiguity_lists_both_unless_all_matches() {
        let (_d, syms) = cxx_syms();
        match find(&syms, "pax::over", false) {
            Err(MatchError::Ambiguous { count: 2, listed }) => {
                assert!(
                    listed.iter().any(|l| l.contains("_ZN3pax4overEi")),
                    "{listed:?}"
                );
                assert!(
                    listed.iter().any(|l| l.contains("_ZN3pax4overEd")),
                    "{listed:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(find(&syms, "pax::over", true).unwrap().len(), 2);
    }

    #[test]
    fn glob_helpers() {
        assert!(has_glob_meta("a*"));
        assert!(!has_glob_meta(r"a\[b\]"));
        assert_eq!(unescape(r"a\[b\]\*"), "a[b]*");
        // Go generics: a struct type with quotes and backslashes inside brackets and braces.
        let name = r#"pq.(*GenericWriter[go.shape.struct { ID int64 "parquet:\"id\"" }]).Write"#;
        let g =
            compile_glob(r"pq.(\*GenericWriter\[go.shape.struct { ID int64 *}\]).Write").unwrap();
        assert!(g.is_match(name));
        let g = compile_glob("main.(\\*T).*").unwrap();
        assert!(g.is_match("main.(*T).Write") && !g.is_match("main.(*U).Write"));
        assert!(compile_glob("a**b").unwrap().is_match("a::x/y::b"));
    }

    #[test]
    fn cold_fragments_never_match() {
        let dir = tempfile::tempdir().unwrap();
        let src = r#"
            #include <stdio.h>
            __attribute__((cold, noinline)) void report(int x) { fprintf(stderr, "bad %d\n", x); }
            int hot(int x) {
                if (x < 0) { report(x); report(x + 1); return -x * 5; }
                return x * 2;
            }
        "#;
        let so = build(
            dir.path(),
            "libcold.so",
            src,
            false,
            &["-O2", "-shared", "-fPIC"],
        );
        let syms = ObjectSymbols::load(&so).unwrap();
        let all: Vec<&str> = syms
            .functions
            .iter()
            .flat_map(|f| f.names.iter())
            .map(|n| n.mangled.as_str())
            .collect();
        assert!(all.iter().all(|n| !n.contains(".cold")), "{all:?}");
        assert!(
            syms.fragments
                .iter()
                .any(|f| f.name.starts_with("hot.cold")),
            "gcc made no hot.cold: {:?}",
            syms.fragments
        );
        let m = find(&syms, "hot*", false).unwrap();
        assert_eq!(m[0].name.mangled, "hot");
        assert_eq!(syms.cold_fragments_of(m[0].function).count(), 1);
        assert!(crate::resolve::suggest::explain_missing(&syms, "hot").is_some());
        // The RETs of hot.cold are exits of hot; the jump into it is none.
        let exits = crate::resolve::elf::disasm::exit_sites(&syms, m[0].function).unwrap();
        let rets = objdump_rets(&so, "hot") + objdump_rets(&so, "hot.cold");
        assert_eq!(exits.len(), rets, "{exits:?}");
    }
}
