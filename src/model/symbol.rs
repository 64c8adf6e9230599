//! Symbol names: a symbol table name -> the name profiles match against (demangled), and its
//! source language.
//!
//! In: a raw symbol name (version already stripped) and whether its object is a Go binary.
//! Out: the demangled name **without parameter list, return type or Rust hash** (a C name stays
//! as it is; `_ZN3pax17CCPaxAccessMethod11TupleInsertEP12RelationData...` ->
//! `pax::CCPaxAccessMethod::TupleInsert`; `_ZN8refreshx7refresh8decision17h9f15dfbb099b35b9E` ->
//! `refreshx::refresh::decision`), and its [`Language`]. A name that fails to demangle is
//! returned unchanged.

use cpp_demangle::{DemangleOptions, Symbol};

/// Source language of a function, deciding the safe return detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// Plain C name.
    C,
    /// Itanium C++ mangling.
    Cxx,
    /// Rust, legacy or v0 mangling.
    Rust,
    /// Go (object has a Go build id).
    Go,
}

/// Whole-function suffixes that compilers append and that are not part of the source name:
/// LTO privatisation (`foo.lto_priv.0`) and LLVM's ThinLTO promotion (`foo.llvm.1234`).
const NAME_SUFFIXES: &[&str] = &[".lto_priv.", ".llvm."];

/// The source language of a symbol: Go when the object is a Go binary (unless the name is a
/// C++ or Rust mangled name, as in cgo objects), Rust for `_R...` and legacy-hashed `_ZN...17h<hash>E`,
/// C++ for other `_Z...`, C otherwise.
pub fn language_of(name: &str, object_is_go: bool) -> Language {
    let base = strip_suffixes(name);
    let v0 = base.starts_with("_R") && rustc_demangle::try_demangle(base).is_ok();
    if v0 || is_rust_legacy(base) {
        Language::Rust
    } else if base.starts_with("_Z") {
        Language::Cxx
    } else if object_is_go {
        Language::Go
    } else {
        Language::C
    }
}

/// True for a legacy Rust mangled name: `_ZN` ... `17h` + 16 hex digits + `E`.
pub fn is_rust_legacy(name: &str) -> bool {
    let name = strip_suffixes(name);
    let Some(body) = name.strip_prefix("_ZN").and_then(|n| n.strip_suffix('E')) else {
        return false;
    };
    let bytes = body.as_bytes();
    if bytes.len() < 19 {
        return false;
    }
    let (head, hash) = bytes.split_at(bytes.len() - 19);
    !head.is_empty() && hash.starts_with(b"17h") && hash[3..].iter().all(|b| b.is_ascii_hexdigit())
}

/// The demangled name without parameters, return type or Rust hash; unchanged for C and Go
/// names and for anything that does not demangle.
pub fn demangle(name: &str) -> String {
    if let Some((base, version)) = name.split_once('@') {
        return format!("{}@{version}", demangle(base));
    }
    let base = strip_suffixes(name);
    if base.starts_with("_R") || is_rust_legacy(base) {
        if let Ok(d) = rustc_demangle::try_demangle(base) {
            return format!("{d:#}");
        }
    }
    if base.starts_with("_Z") {
        if let Some(d) = demangle_cxx(base) {
            return d;
        }
    }
    base.to_string()
}

/// C++ demangling through cpp_demangle, without parameters, return type or cv-qualifiers.
fn demangle_cxx(name: &str) -> Option<String> {
    // Anything after the first '.' is a clone suffix (`.cold`, `.isra.0`): not part of the name.
    let name = name.split('.').next().unwrap_or(name);
    let sym = Symbol::new(name).ok()?;
    let opts = DemangleOptions::new().no_params().no_return_type();
    let text = sym.demangle_with_options(&opts).ok()?;
    Some(drop_trailing_qualifiers(&text).to_string())
}

/// Removes trailing method qualifiers (`const`, `volatile`, `&`, `&&`, `noexcept`) that
/// cpp_demangle may still print after the name when the parameter list is hidden.
fn drop_trailing_qualifiers(mut s: &str) -> &str {
    loop {
        let t = s.trim_end();
        let next = ["const", "volatile", "noexcept", "&&", "&"]
            .iter()
            .find_map(|q| {
                t.strip_suffix(q)
                    .filter(|r| *q == "&" || *q == "&&" || r.ends_with(' '))
            });
        match next {
            Some(r) if !r.trim_end().is_empty() => s = r,
            _ => return t,
        }
    }
}

/// Cuts compiler suffixes that are not part of the source name (`.lto_priv.N`, `.llvm.N`).
pub fn strip_suffixes(name: &str) -> &str {
    NAME_SUFFIXES
        .iter()
        .filter_map(|s| name.find(s))
        .min()
        .map_or(name, |i| &name[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_names_stay() {
        assert_eq!(demangle("heap_insert"), "heap_insert");
        assert_eq!(language_of("heap_insert", false), Language::C);
        assert_eq!(demangle("foo.lto_priv.0"), "foo");
        assert_eq!(
            demangle("_ZN3pax4NameB5cxx11Ev@V_1.0"),
            "pax::Name[abi:cxx11]@V_1.0"
        );
    }

    #[test]
    fn cxx_without_params() {
        let m = "_ZN3pax17CCPaxAccessMethod11TupleInsertEP12RelationDataP14TupleTableSlotjiP19BulkInsertStateData";
        assert_eq!(demangle(m), "pax::CCPaxAccessMethod::TupleInsert");
        assert_eq!(language_of(m, false), Language::Cxx);
        assert_eq!(
            demangle("_ZN4cbdb31InsertMicroPartitionPlaceHolderEji"),
            "cbdb::InsertMicroPartitionPlaceHolder"
        );
        // const method: qualifier dropped.
        assert_eq!(
            demangle("_ZNK3pax11TableWriter4SizeEv"),
            "pax::TableWriter::Size"
        );
        // template args survive.
        assert_eq!(
            demangle("_ZN3pax6WriterIiE5writeEi"),
            "pax::Writer<int>::write"
        );
        // [abi:cxx11] survives.
        let abi = "_ZN3pax4NameB5cxx11Ev";
        assert_eq!(demangle(abi), "pax::Name[abi:cxx11]");
        // clone suffixes don't leak into the name.
        assert_eq!(
            demangle("_ZN3pax4NameB5cxx11Ev.cold"),
            "pax::Name[abi:cxx11]"
        );
    }

    #[test]
    fn rust_legacy_and_v0() {
        let legacy = "_ZN8refreshx7refresh8decision17h9f15dfbb099b35b9E";
        assert!(is_rust_legacy(legacy));
        assert_eq!(language_of(legacy, false), Language::Rust);
        assert_eq!(demangle(legacy), "refreshx::refresh::decision");
        assert_eq!(
            demangle(&format!("{legacy}.llvm.123456")),
            "refreshx::refresh::decision"
        );
        // v0 with a crate disambiguator: no hash in the output.
        let v0 = "_RNvNtCs1234_8refreshx7refresh8decision";
        assert_eq!(language_of(v0, false), Language::Rust);
        assert_eq!(demangle(v0), "refreshx::refresh::decision");
        assert!(!is_rust_legacy("_ZN3pax6WriterIiE5writeEi"));
    }

    #[test]
    fn go_and_garbage() {
        assert_eq!(language_of("main.(*T).Write", true), Language::Go);
        assert_eq!(demangle("main.(*T).Write"), "main.(*T).Write");
        assert_eq!(demangle("_Znotmangled"), "_Znotmangled");
    }
}
