//! Tests of resolution through separate debug files and DWARF: a stripped object's static
//! functions named by its debug file, the inlined copies of probed functions, and the hints when
//! no debug file is found.

use super::{by_name, profile, resolved};
use crate::resolve::elf::{disasm, inlined};
use crate::resolve::testutil::{nm_address, objdump_rets, readelf_offset, split_debug};
use crate::resolve::*;

/// The profile used on [`crate::resolve::testutil::SPLIT_SRC`]: its static `store` and `mix`.
const SPLIT_PROFILE: &str = r#"name = "split"
    object = "exe"
    [[phase]]
    name = "store"
    symbol = "store"
    [[phase]]
    name = "mix"
    symbol = "mix"
    "#;

#[test]
fn stripped_object_gets_static_functions_from_its_debug_file() {
    let dir = tempfile::tempdir().unwrap();
    let (full, stripped, debug) = split_debug(dir.path(), "app");
    let plain = symbols::ObjectSymbols::load(&stripped).unwrap();
    assert!(!plain.has_symtab);
    assert!(plain
        .functions
        .iter()
        .all(|f| f.names[0].mangled != "store"));
    let search = debuginfo::Search {
        root: "/".into(),
        extra: Vec::new(),
    };
    let shown = stripped.to_string_lossy().into_owned();
    let syms = symbols::ObjectSymbols::load_with_debug(&stripped, &shown, &search).unwrap();
    assert_eq!(
        syms.debug_file.as_deref(),
        Some(&*debug.to_string_lossy()),
        "{:?}",
        syms.debug_notes
    );
    let store = syms
        .functions
        .iter()
        .find(|f| f.names[0].mangled == "store")
        .expect("store from the debug file");
    assert!(store.from_debuginfo);
    assert_eq!(store.address, nm_address(&full, "store"));
    // Offsets through the stripped object's own segments; code from its bytes.
    assert_eq!(store.file_offset, readelf_offset(&stripped, store.address));
    let exits = disasm::exit_sites(&syms, store).unwrap();
    assert_eq!(exits.len(), objdump_rets(&full, "store"));
    // What the object names itself keeps its names; only the rest comes from the debug file.
    for f in &syms.functions {
        let own = plain.functions.iter().find(|p| p.address == f.address);
        assert_eq!(f.from_debuginfo, own.is_none(), "{:?}", f.names);
    }

    let prof = profile(SPLIT_PROFILE);
    for (obj, provenance) in [(&stripped, Some(debug.to_string_lossy())), (&full, None)] {
        let phases = resolve_profile(&prof, &Scope::Binary(obj.clone())).unwrap();
        let t = resolved(&phases, "store");
        assert_eq!(
            t.debuginfo.as_deref(),
            provenance.as_deref(),
            "{}",
            obj.display()
        );
        assert_eq!(t.address, nm_address(&full, "store"));
        assert_eq!(t.entry.file_offset, readelf_offset(obj, t.address));
        assert!(by_name(&phases, "store").warnings.is_empty());
        // mix: out of line (through a pointer), and inlined into inl_a and inl_b.
        let mix = by_name(&phases, "mix");
        assert_eq!(resolved(&phases, "mix").address, nm_address(&full, "mix"));
        assert_eq!(mix.warnings.len(), 1, "{:?}", mix.warnings);
        let w = &mix.warnings[0];
        assert!(
            w.starts_with("phase 'mix': mix also has 2 inlined copies (in inl_")
                && w.contains("inl_a")
                && w.contains("inl_b")
                && w.ends_with(") that the probe cannot see: calls through them are not counted"),
            "{w}"
        );
    }
}

#[test]
fn inlined_copies_read_compressed_dwarf_and_skip_functions_inlined_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let (full, stripped, _debug) = split_debug(dir.path(), "app");
    let search = debuginfo::Search {
        root: "/".into(),
        extra: Vec::new(),
    };
    let shown = stripped.to_string_lossy().into_owned();
    let syms = symbols::ObjectSymbols::load_with_debug(&stripped, &shown, &search).unwrap();
    let mix = nm_address(&full, "mix");
    let store = nm_address(&full, "store");
    let copies = inlined::inlined_copies(&syms, &[mix, store]).unwrap();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let c = &copies[&mix];
    assert_eq!(c.count, 2);
    let mut callers = c.callers.clone();
    callers.sort();
    assert_eq!(callers, ["inl_a", "inl_b"]);
    // No DWARF at all: nothing to say, no error.
    let bare = symbols::ObjectSymbols::load(&stripped).unwrap();
    assert!(inlined::inlined_copies(&bare, &[mix]).unwrap().is_empty());
}

#[test]
fn no_debug_file_leaves_symbols_unchanged_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let (_full, stripped, debug) = split_debug(dir.path(), "app");
    let lone = dir.path().join("lone");
    std::fs::create_dir(&lone).unwrap();
    let copy = lone.join("app");
    std::fs::copy(&stripped, &copy).unwrap();
    let search = debuginfo::Search {
        root: "/".into(),
        extra: Vec::new(),
    };
    let plain = symbols::ObjectSymbols::load(&copy).unwrap();
    let with =
        symbols::ObjectSymbols::load_with_debug(&copy, &copy.to_string_lossy(), &search).unwrap();
    let names = |s: &symbols::ObjectSymbols| -> Vec<(u64, String, bool)> {
        s.functions
            .iter()
            .map(|f| (f.address, f.names[0].mangled.clone(), f.from_debuginfo))
            .collect()
    };
    assert_eq!(names(&plain), names(&with));
    assert!(with.debug_file.is_none() && with.debug_notes.is_empty());

    let prof = profile(SPLIT_PROFILE);
    let phases = resolve_profile(&prof, &Scope::Binary(copy.clone())).unwrap();
    let canon = std::fs::canonicalize(&copy).unwrap();
    let hint = "(the object is stripped: only exported functions are visible; install its \
        debug symbols (Debian: its package's -dbgsym, e.g. postgresql-15-dbgsym) or set WPROF_DEBUG_DIRS)";
    match &by_name(&phases, "store").status {
        Status::Unresolved { reason, .. } => assert_eq!(
            reason,
            &format!("no symbol 'store' in {} {hint}", canon.display())
        ),
        s => panic!("{s:?}"),
    }
    let err = unresolved_required(&phases, &prof).unwrap();
    assert_eq!(
        crate::error::exit_code(&err.into()),
        crate::error::exit::UNRESOLVED
    );
    // A debug file of the right name but the wrong contents: rejected, and said so.
    let mut data = std::fs::read(&debug).unwrap();
    data.push(0);
    std::fs::write(lone.join("app.debug"), &data).unwrap();
    let phases = resolve_profile(&prof, &Scope::Binary(copy.clone())).unwrap();
    match &by_name(&phases, "store").status {
        Status::Unresolved { reason, .. } => assert!(
            reason.contains("or set WPROF_DEBUG_DIRS; ignored debug file ")
                && reason.contains("app.debug: its CRC32"),
            "{reason}"
        ),
        s => panic!("{s:?}"),
    }
}
