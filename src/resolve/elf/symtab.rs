//! One ELF symbol table's defined functions (or a Go binary's `.gopclntab` functions), before
//! aliases are folded.
//!
//! In: a symbol table (with its version table for .dynsym), a map from virtual address to file
//! offset, and whether the object is a Go binary. Out: added to a [`Gathered`], the function
//! symbols by address (names with the default version stripped, hidden ones kept as
//! `name@VERSION`), the compiler fragments and clones (`.cold`, `.part.N`, `.isra`...) kept
//! apart, and the GNU indirect functions. [`super::symbols`] folds them into functions.

use std::collections::{BTreeMap, HashSet};

use object::elf;
use object::elf::FileHeader64;
use object::read::elf::{Sym, SymbolTable, VersionTable};
use object::Endianness;

use super::symbols::Fragment;
use crate::resolve::go::pclntab;

/// Name parts marking a compiler-made fragment or clone of a function, never probed as one.
const FRAGMENT_MARKERS: &[&str] = &[
    ".cold",
    ".part.",
    ".isra",
    ".constprop",
    ".localalias",
    ".clone.",
    ".specialized.",
];

/// A symbol before aliases are folded.
pub(super) struct Raw {
    /// The name, default version stripped (a hidden one kept as `@VERSION`).
    pub(super) name: String,
    /// It had a version.
    pub(super) versioned: bool,
    /// It came from .dynsym.
    pub(super) dynamic: bool,
    /// Not a local symbol.
    pub(super) global: bool,
    /// It came from the separate debug file.
    pub(super) from_debug: bool,
    /// Size in bytes (0: unknown).
    pub(super) size: u64,
}

/// Symbols gathered from the tables, before aliases are folded.
#[derive(Default)]
pub(super) struct Gathered {
    /// Function symbols by address.
    pub(super) by_addr: BTreeMap<u64, Vec<Raw>>,
    /// Compiler fragments and clones.
    pub(super) fragments: Vec<Fragment>,
    /// Names of GNU indirect functions.
    pub(super) ifuncs: HashSet<String>,
}

/// How one symbol table is read.
pub(super) struct TableSource<'a, 'd> {
    /// The table.
    pub(super) table: &'a SymbolTable<'d, FileHeader64<Endianness>>,
    /// Its symbol versions (.dynsym's).
    pub(super) versions: Option<&'a VersionTable<'d, FileHeader64<Endianness>>>,
    /// It is .dynsym.
    pub(super) dynamic: bool,
    /// It is the separate debug file's .symtab.
    pub(super) from_debug: bool,
}

/// Adds the defined functions of one symbol table to `acc`; `file_offset` maps a virtual
/// address to its offset in the object through the object's PT_LOAD segments.
pub(super) fn gather(
    source: &TableSource<'_, '_>,
    endian: Endianness,
    is_go: bool,
    file_offset: &dyn Fn(u64) -> Option<u64>,
    acc: &mut Gathered,
) {
    let table = source.table;
    for (index, sym) in table.enumerate() {
        let kind = sym.st_type();
        if (kind != elf::STT_FUNC && kind != elf::STT_GNU_IFUNC)
            || sym.st_shndx(endian) == elf::SHN_UNDEF
            || sym.st_value(endian) == 0
        {
            continue;
        }
        let Ok(raw_name) = table.symbol_name(endian, sym) else {
            continue;
        };
        let raw_name = String::from_utf8_lossy(raw_name);
        // A hidden (non-default) version in .dynsym: a compat symbol new code does not
        // bind to; it keeps its `@VERSION` so that the plain name means the default one.
        let hidden = match (source.versions, source.dynamic) {
            (Some(v), true) => {
                let vi = v.version_index(endian, index);
                let vname = v
                    .version(vi)
                    .ok()
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v.name()));
                vi.is_hidden()
                    .then_some(vname)
                    .flatten()
                    .map(|v| format!("@{v}"))
            }
            _ => None,
        };
        let (name, versioned) = match (raw_name.split_once("@@"), raw_name.contains('@')) {
            (Some((n, _)), _) => (n.to_string(), true),
            (None, true) => (raw_name.to_string(), true),
            (None, false) => match hidden {
                Some(v) => (format!("{raw_name}{v}"), true),
                None => (raw_name.to_string(), false),
            },
        };
        if name.is_empty() {
            continue;
        }
        if kind == elf::STT_GNU_IFUNC {
            acc.ifuncs.insert(name);
            continue;
        }
        let address = sym.st_value(endian);
        let Some(offset) = file_offset(address) else {
            continue;
        };
        let size = sym.st_size(endian);
        if !is_go {
            if let Some(base) = fragment_base(&name) {
                let base = base.to_string();
                acc.fragments.push(Fragment {
                    base,
                    name,
                    address,
                    size,
                    file_offset: offset,
                });
                continue;
            }
        }
        let global = sym.st_bind() != elf::STB_LOCAL;
        acc.by_addr.entry(address).or_default().push(Raw {
            name,
            versioned,
            dynamic: source.dynamic,
            global,
            from_debug: source.from_debug,
            size,
        });
    }
}

/// Adds the functions of a Go binary's `.gopclntab` (its symbol table is gone).
pub(super) fn add_go_functions(
    funcs: &[pclntab::GoFunc],
    file_offset: &dyn Fn(u64) -> Option<u64>,
    acc: &mut Gathered,
) {
    for f in funcs {
        if file_offset(f.start).is_none() || f.name.is_empty() {
            continue;
        }
        acc.by_addr.entry(f.start).or_default().push(Raw {
            // The linker writes `·` (in closures' and generated functions' names) as `.` into
            // the symbol table: the same names whether a binary is stripped or not.
            name: f.name.replace('·', "."),
            versioned: false,
            dynamic: false,
            global: true,
            from_debug: false,
            size: f.end - f.start,
        });
    }
}

/// The name a fragment was split from, or None if `name` is not a fragment.
fn fragment_base(name: &str) -> Option<&str> {
    FRAGMENT_MARKERS
        .iter()
        .filter_map(|m| name.find(m))
        .min()
        .map(|i| &name[..i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_are_kept_apart() {
        assert_eq!(fragment_base("foo.cold"), Some("foo"));
        assert_eq!(fragment_base("foo.part.0"), Some("foo"));
        assert_eq!(fragment_base("_ZN3pax1fEv.isra.0"), Some("_ZN3pax1fEv"));
        assert_eq!(fragment_base("foo"), None);
        assert_eq!(fragment_base("foo.lto_priv.0"), None);
    }
}
