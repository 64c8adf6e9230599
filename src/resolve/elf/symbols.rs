//! Symbols of one ELF object, read with the `object` crate.
//!
//! In: a path to an x86-64 ELF executable or shared object. Out: an [`ObjectSymbols`] holding
//! every defined function of .symtab and .dynsym (Debian's postgres is stripped: .dynsym only),
//! one [`Function`] per address (aliases folded, the preferred name first, default symbol
//! versions stripped, hidden ones kept as `name@VERSION`), each with its size, file offset
//! (through its PT_LOAD segment), demangled names and language; the compiler fragments (`.cold`,
//! `.part.N`, `.isra`...) kept apart, never as functions; the GNU build id; whether it is a Go
//! binary; and the file bytes for disassembly. Each table is read in `symtab.rs`; the aliases
//! are folded here.
//! With [`ObjectSymbols::load_with_debug`], the .symtab of the object's separate debug file
//! (found by [`debuginfo::Search`]) is folded in too: its static functions become visible, with
//! the same virtual addresses and file offsets taken from the object's own PT_LOAD segments
//! (the debug file has no code: its .text is NOBITS).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use object::elf;
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Endianness, FileKind, Object, ObjectSymbol};

use super::debuginfo;
use super::symtab::{add_go_functions, gather, Gathered, TableSource};
use crate::model::symbol::{demangle, language_of};
use crate::model::Language;
use crate::resolve::go::pclntab;

/// One name of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolName {
    /// The name in the symbol table, default version (`@@GLIBC_2.2.5`) stripped; a hidden
    /// (non-default) version stays (`memcpy@GLIBC_2.2.5`).
    pub mangled: String,
    /// Demangled, without parameter list or Rust hash.
    pub demangled: String,
}

/// A function: one address, possibly several names (aliases).
#[derive(Debug, Clone)]
pub struct Function {
    /// Its names, the preferred one first (dynamic/global, unversioned, fewest leading `_`).
    pub names: Vec<SymbolName>,
    /// Virtual address.
    pub address: u64,
    /// Size in bytes (0: unknown).
    pub size: u64,
    /// Offset in the file.
    pub file_offset: u64,
    /// Language of the preferred name.
    pub language: Language,
    /// Every name came from the separate debug file (a static function of a stripped object).
    pub from_debuginfo: bool,
}

/// A compiler fragment or clone (`foo.cold`, `foo.part.0`, `foo.isra.0`...).
#[derive(Debug, Clone)]
pub struct Fragment {
    /// Full symbol name.
    pub name: String,
    /// The name it was split from (`foo` for `foo.cold.1`).
    pub base: String,
    /// Virtual address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Offset in the file.
    pub file_offset: u64,
}

/// The functions of one object, ready for matching and disassembly.
#[derive(Debug)]
pub struct ObjectSymbols {
    /// The file that was read.
    pub path: PathBuf,
    /// GNU build id, hex.
    pub build_id: Option<String>,
    /// A Go binary: has `.note.go.buildid`, `.go.buildinfo` or `.gopclntab`, or defines
    /// `runtime.main` and `runtime.goexit`.
    pub is_go: bool,
    /// A Go binary's functions came from its `.gopclntab` (it has no .symtab: built with
    /// `-ldflags='-s'` or stripped).
    pub from_pclntab: bool,
    /// Why a Go binary's `.gopclntab` could not be read, when that mattered (no .symtab).
    pub go_note: Option<String>,
    /// Has a .symtab (false when stripped: only exported functions are visible).
    pub has_symtab: bool,
    /// Functions, sorted by address.
    pub functions: Vec<Function>,
    /// Compiler fragments, sorted by address.
    pub fragments: Vec<Fragment>,
    /// Names of GNU indirect functions (the symbol is the resolver, not the function).
    pub ifuncs: Vec<String>,
    /// The separate debug file whose .symtab was folded in, as the target sees it.
    pub debug_file: Option<String>,
    /// Debug files that were found but rejected, and why (see [`debuginfo::Lookup`]).
    pub debug_notes: Vec<String>,
    data: Vec<u8>,
    debug_data: Option<Vec<u8>>,
}

/// Finds an object's debug file, given its build id and debuglink.
type FindDebug<'a> = dyn Fn(Option<&[u8]>, Option<&debuginfo::Link>) -> debuginfo::Lookup + 'a;

impl ObjectSymbols {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> anyhow::Result<ObjectSymbols> {
        let data =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        ObjectSymbols::parse(path, data)
    }

    /// Reads and parses `path` (seen by the target as `target_path`), and folds in the .symtab
    /// of its separate debug file if `search` finds one that matches.
    pub fn load_with_debug(
        path: &Path,
        target_path: &str,
        search: &debuginfo::Search,
    ) -> anyhow::Result<ObjectSymbols> {
        let data =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        ObjectSymbols::parse_with(path, data, &|build_id, link| {
            search.find(path, target_path, build_id, link)
        })
    }

    /// Parses an object already read; `path` names it in errors.
    pub fn parse(path: &Path, data: Vec<u8>) -> anyhow::Result<ObjectSymbols> {
        ObjectSymbols::parse_with(path, data, &|_, _| debuginfo::Lookup::default())
    }

    /// Parses an object already read, asking `find_debug` (given its build id and debuglink)
    /// for its separate debug file.
    fn parse_with(
        path: &Path,
        data: Vec<u8>,
        find_debug: &FindDebug<'_>,
    ) -> anyhow::Result<ObjectSymbols> {
        let shown = path.display();
        match FileKind::parse(&*data) {
            Ok(FileKind::Elf64) => {}
            Ok(FileKind::Elf32) => {
                bail!("{shown} is a 32-bit ELF object; wprof supports x86-64 only")
            }
            _ => bail!("{shown} is not an ELF object"),
        }
        let elf = ElfFile64::<Endianness>::parse(&*data)
            .with_context(|| format!("{shown} is a malformed ELF object"))?;
        let endian = elf.endian();
        let header = elf.elf_header();
        if header.e_machine(endian) != elf::EM_X86_64 {
            bail!(
                "{shown} is an ELF object for machine {}; wprof supports x86-64 only",
                header.e_machine(endian)
            );
        }
        if header.e_type(endian) == elf::ET_REL {
            bail!("{shown} is a relocatable object (.o): probe the linked executable or library");
        }
        let has_symtab = !elf.elf_symbol_table().is_empty();
        let is_go = [".note.go.buildid", ".go.buildinfo", ".gopclntab"]
            .iter()
            .any(|s| elf.section_by_name(s).is_some())
            || defines_go_runtime(&elf);
        let build_id_bytes = elf.build_id().ok().flatten();
        let build_id = build_id_bytes.map(debuginfo::hex);
        // (vaddr, filesz, offset) of the PT_LOAD segments.
        let loads: Vec<(u64, u64, u64)> = elf
            .elf_program_headers()
            .iter()
            .filter(|p| p.p_type(endian) == elf::PT_LOAD)
            .map(|p| (p.p_vaddr(endian), p.p_filesz(endian), p.p_offset(endian)))
            .collect();
        let file_offset = |addr: u64| {
            loads
                .iter()
                .find(|(va, sz, _)| addr >= *va && addr < va + sz)
                .map(|(va, _, off)| addr - va + off)
        };

        let mut gathered = Gathered::default();
        let versions = elf
            .elf_section_table()
            .versions(endian, &*data)
            .ok()
            .flatten();
        for (table, dynamic) in [
            (elf.elf_symbol_table(), false),
            (elf.elf_dynamic_symbol_table(), true),
        ] {
            let source = TableSource {
                table,
                versions: versions.as_ref(),
                dynamic,
                from_debug: false,
            };
            gather(&source, endian, is_go, &file_offset, &mut gathered);
        }
        // Go: the runtime's own function table says which functions are Go (the others are
        // cgo's C), and names them all when the symbol table is gone.
        let mut go_note = None;
        let mut go_starts = None;
        let mut from_pclntab = false;
        if is_go {
            match pclntab::functions(&elf) {
                Ok(funcs) => {
                    if !has_symtab {
                        from_pclntab = true;
                        add_go_functions(&funcs, &file_offset, &mut gathered);
                    }
                    go_starts = Some(funcs.iter().map(|f| f.start).collect::<HashSet<u64>>());
                }
                Err(e) if !has_symtab => go_note = Some(format!("{e:#}")),
                Err(_) => {}
            }
        }
        let lookup = find_debug(build_id_bytes, debuginfo::debuglink(&elf).as_ref());
        let mut debug_notes = lookup.notes;
        let mut debug_file = None;
        let mut debug_data = None;
        if let Some(found) = lookup.file {
            match ElfFile64::<Endianness>::parse(&*found.data) {
                Ok(dbg) if dbg.endian() == endian => {
                    let source = TableSource {
                        table: dbg.elf_symbol_table(),
                        versions: None,
                        dynamic: false,
                        from_debug: true,
                    };
                    gather(&source, endian, is_go, &file_offset, &mut gathered);
                    debug_file = Some(found.shown);
                    debug_data = Some(found.data);
                }
                _ => debug_notes.push(format!(
                    "ignored debug file {}: not a 64-bit ELF object like {shown}",
                    found.shown
                )),
            }
        }
        let Gathered {
            by_addr,
            mut fragments,
            ifuncs,
        } = gathered;

        let mut functions = Vec::with_capacity(by_addr.len());
        for (address, mut raws) in by_addr {
            let from_debuginfo = raws.iter().all(|r| r.from_debug);
            raws.sort_by_key(|r| {
                let underscores = r.name.bytes().take_while(|b| *b == b'_').count();
                (
                    !r.dynamic,
                    r.from_debug,
                    !r.global,
                    r.versioned,
                    underscores,
                    r.name.len(),
                    r.name.clone(),
                )
            });
            let size = raws.iter().map(|r| r.size).max().unwrap_or(0);
            let mut names: Vec<SymbolName> = Vec::new();
            for r in &raws {
                if !names.iter().any(|n| n.mangled == r.name) {
                    names.push(SymbolName {
                        demangled: demangle(&r.name),
                        mangled: r.name.clone(),
                    });
                }
            }
            let mut language = language_of(&names[0].mangled, is_go);
            if language == Language::Go && go_starts.as_ref().is_some_and(|s| !s.contains(&address))
            {
                // In a Go binary but not in Go's function table: cgo's C code.
                language = Language::C;
            }
            let file_offset = file_offset(address).unwrap_or(0);
            functions.push(Function {
                names,
                address,
                size,
                file_offset,
                language,
                from_debuginfo,
            });
        }
        fragments.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
        fragments.dedup_by(|a, b| a.address == b.address && a.name == b.name);
        let mut ifuncs: Vec<String> = ifuncs.into_iter().collect();
        ifuncs.sort();
        Ok(ObjectSymbols {
            path: path.to_path_buf(),
            build_id,
            is_go,
            from_pclntab,
            go_note,
            has_symtab,
            functions,
            fragments,
            ifuncs,
            debug_file,
            debug_notes,
            data,
            debug_data,
        })
    }

    /// The whole object file.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The whole separate debug file, if one was folded in.
    pub fn debug_data(&self) -> Option<&[u8]> {
        self.debug_data.as_deref()
    }

    /// `len` bytes of the file from `file_offset`, if the file holds them all.
    pub fn bytes(&self, file_offset: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(file_offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.data.get(start..end)
    }

    /// The function that starts at `address`, if any.
    pub fn function_at(&self, address: u64) -> Option<&Function> {
        self.functions
            .binary_search_by_key(&address, |f| f.address)
            .ok()
            .map(|i| &self.functions[i])
    }

    /// The `.cold` fragments split off `f` (GCC's hot/cold splitting): code of the same frame.
    pub fn cold_fragments_of<'a>(
        &'a self,
        f: &'a Function,
    ) -> impl Iterator<Item = &'a Fragment> + 'a {
        self.fragments.iter().filter(move |fr| {
            fr.name[fr.base.len()..].starts_with(".cold")
                && f.names.iter().any(|n| n.mangled == fr.base)
        })
    }
}

/// Whether `elf`'s symbol table defines the Go runtime's `runtime.main` and `runtime.goexit`
/// (a Go binary whose Go sections were renamed or dropped).
fn defines_go_runtime(elf: &ElfFile64<'_, Endianness>) -> bool {
    let mut found = [false; 2];
    for sym in elf.symbols() {
        match sym.name() {
            Ok("runtime.main") => found[0] = true,
            Ok("runtime.goexit") | Ok("runtime.goexit.abi0") => found[1] = true,
            _ => {}
        }
        if found == [true, true] {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::testutil::{build, nm_address, readelf_offset};

    const C_SRC: &str = r#"
        int f(int x) { return x * 3 + 1; }
        static int __attribute__((noinline)) hidden_helper(int x) { return x ^ 0x55; }
        int g(int x) __attribute__((alias("f")));
        int call_helper(int x) { return hidden_helper(x) + 2; }
    "#;

    #[test]
    fn c_functions_aliases_and_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let so = build(
            dir.path(),
            "libt.so",
            C_SRC,
            false,
            &["-O1", "-shared", "-fPIC"],
        );
        let syms = ObjectSymbols::load(&so).unwrap();
        assert!(!syms.is_go);
        assert!(syms.build_id.as_deref().is_some_and(|b| b.len() >= 16));
        // f and g share an address: one function, both names.
        let fs: Vec<_> = syms
            .functions
            .iter()
            .filter(|f| f.names.iter().any(|n| n.mangled == "f" || n.mangled == "g"))
            .collect();
        assert_eq!(fs.len(), 1, "{fs:?}");
        let f = fs[0];
        assert_eq!(f.names.len(), 2);
        assert_eq!(f.address, nm_address(&so, "f"));
        assert_eq!(f.file_offset, readelf_offset(&so, f.address));
        assert_eq!(f.language, Language::C);
        assert!(f.size > 0);
        // the static function comes from .symtab.
        let h = syms
            .functions
            .iter()
            .find(|f| f.names[0].mangled == "hidden_helper")
            .unwrap();
        assert_eq!(
            h.file_offset,
            readelf_offset(&so, nm_address(&so, "hidden_helper"))
        );
        assert!(syms.bytes(h.file_offset, h.size).is_some());
        // A non-PIE executable: addresses and file offsets differ.
        let main = format!("{C_SRC}\nint main(void) {{ return f(1); }}\n");
        let exe = build(dir.path(), "t", &main, false, &["-O1", "-no-pie"]);
        let syms = ObjectSymbols::load(&exe).unwrap();
        let f = syms
            .functions
            .iter()
            .find(|f| f.names[0].mangled == "f")
            .unwrap();
        assert_ne!(f.address, f.file_offset);
        assert_eq!(f.file_offset, readelf_offset(&exe, nm_address(&exe, "f")));
    }

    #[test]
    fn not_elf_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x");
        std::fs::write(&p, "just some text\n").unwrap();
        let e = ObjectSymbols::load(&p).unwrap_err().to_string();
        assert_eq!(e, format!("{} is not an ELF object", p.display()));
        let missing = ObjectSymbols::load(&dir.path().join("nope")).unwrap_err();
        assert!(
            format!("{missing:#}").contains("cannot read"),
            "{missing:#}"
        );
    }
}
