//! Tests of [`resolve_profile`] and [`unresolved_required`] against real objects: fixtures built
//! here with cc/g++/rustc, this test process itself (by pid), and Debian's stripped postgres.

use std::path::Path;
use std::process::Command;

use super::testutil::{build, nm_address, objdump_rets, readelf_offset, require, CXX_SRC};
use super::*;
use crate::error::WprofError;
use crate::model::profile::Profile;
use crate::model::Language;

const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";

fn profile(text: &str) -> Profile {
    Profile::parse(text, "test.toml").unwrap()
}

fn by_name<'a>(phases: &'a [ResolvedPhase], name: &str) -> &'a ResolvedPhase {
    phases.iter().find(|p| p.phase.name == name).unwrap()
}

fn resolved(phases: &[ResolvedPhase], name: &str) -> ResolvedSymbol {
    let p = by_name(phases, name);
    assert!(
        matches!(p.status, Status::Resolved),
        "{name}: {:?}",
        p.status
    );
    assert_eq!(p.targets.len(), 1, "{name}");
    p.targets[0].clone()
}

#[test]
fn postgres_dynsym_and_nearest() {
    if !require(POSTGRES) {
        return;
    }
    let prof = profile(
        r#"name = "pg"
        [[phase]]
        name = "heap"
        symbol = "heap_insert"
        [[phase]]
        name = "wal"
        symbol = "XLogInsert"
        [[phase]]
        name = "bt"
        symbol = "btinsert"
        [[phase]]
        name = "typo"
        symbol = "heap_insrt"
        [[phase]]
        name = "opt"
        symbol = "no_such_function_at_all"
        optional = true
        [[phase]]
        name = "fsync"
        syscall = "fsync"
        "#,
    );
    let phases = resolve_profile(&prof, &Scope::Binary(POSTGRES.into())).unwrap();
    for (phase, sym) in [
        ("heap", "heap_insert"),
        ("wal", "XLogInsert"),
        ("bt", "btinsert"),
    ] {
        let t = resolved(&phases, phase);
        assert_eq!(t.symbol, sym);
        assert_eq!(t.language, Language::C);
        assert_eq!(t.display_object, POSTGRES);
        assert!(t.build_id.is_some());
        let out = Command::new("nm").args(["-D", POSTGRES]).output().unwrap();
        let nm = String::from_utf8(out.stdout).unwrap();
        let addr = nm
            .lines()
            .find_map(|l| l.strip_suffix(&format!(" T {sym}")))
            .map(|a| u64::from_str_radix(a, 16).unwrap())
            .unwrap();
        assert_eq!(t.address, addr);
        assert_eq!(
            t.entry.file_offset,
            readelf_offset(Path::new(POSTGRES), addr)
        );
        assert!(!t.exits.is_empty(), "{sym} has no exits");
        assert_eq!(by_name(&phases, phase).return_mode, ReturnMode::Uretprobe);
    }
    match &by_name(&phases, "typo").status {
        Status::Unresolved { nearest, .. } => {
            assert!(nearest.iter().any(|n| n == "heap_insert"), "{nearest:?}")
        }
        s => panic!("{s:?}"),
    }
    // An optional phase that is absent gets no search for similar names.
    match &by_name(&phases, "opt").status {
        Status::Unresolved { nearest, .. } => assert!(nearest.is_empty(), "{nearest:?}"),
        s => panic!("{s:?}"),
    }
    // A kernel phase resolves to its syscall's tracepoints (tracefs is mounted by .ci/install.sh).
    let fsync = by_name(&phases, "fsync");
    if crate::testing::require(
        crate::resolve::kernel::tracefs().is_some(),
        "mounted tracefs",
    ) {
        assert!(
            matches!(fsync.status, Status::Resolved),
            "{:?}",
            fsync.status
        );
        let k = fsync.kernel.as_ref().unwrap();
        assert_eq!(k.enter.to_string(), "syscalls:sys_enter_fsync");
    }
    let err = unresolved_required(&phases, &prof).unwrap();
    let text = err.to_string();
    let head = format!(
        "phase 'typo': no symbol 'heap_insrt' in {POSTGRES} (the object is stripped: only \
        exported functions are visible; install its debug symbols (Debian: its package's -dbgsym, e.g. postgresql-15-dbgsym) \
        or set WPROF_DEBUG_DIRS); nearest: heap_insert"
    );
    assert!(text.starts_with(&head), "{text}");
    assert!(
        text.contains("heap_insert") && !text.contains("no_such_function"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(
        crate::error::exit_code(&err.into()),
        crate::error::exit::UNRESOLVED
    );
}

#[test]
fn cxx_library_through_runpath() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    build(d, "libpax.so", CXX_SRC, true, &["-O2", "-shared", "-fPIC"]);
    let main = "extern \"C\" int XLogPaxInsert(int); int main() { return XLogPaxInsert(1) == 3; }";
    let app = build(
        d,
        "app",
        main,
        true,
        &["-L", d.to_str().unwrap(), "-Wl,-rpath,$ORIGIN", "-lpax"],
    );
    let prof = profile(
        r#"name = "pax"
        object = "libpax.so"
        [[phase]]
        name = "mangled"
        symbol = "_ZN3pax17CCPaxAccessMethod11TupleInsertEP12RelationDataP14TupleTableSlotjiP19BulkInsertStateData"
        [[phase]]
        name = "glob"
        symbol = "pax::CCPaxAccessMethod::TupleInsert*"
        [[phase]]
        name = "forced"
        symbol = "pax::CCPaxAccessMethod::TupleInsert"
        return = "uretprobe"
        [[phase]]
        name = "wal"
        symbol = "XLogPaxInsert"
        [[phase]]
        name = "over"
        symbol = "pax::over"
        [[phase]]
        name = "over_all"
        symbol = "pax::over"
        all_matches = true
        [[phase]]
        name = "main"
        object = "exe"
        symbol = "main"
        [[phase]]
        name = "gone"
        object = "libgone.so"
        symbol = "x"
        "#,
    );
    let phases = resolve_profile(&prof, &Scope::Binary(app)).unwrap();
    let m = resolved(&phases, "mangled");
    assert_eq!(m.demangled, "pax::CCPaxAccessMethod::TupleInsert");
    assert_eq!(m.language, Language::Cxx);
    // C++: a guarded uretprobe (the session falls back to RET sites without the guard).
    assert_eq!(by_name(&phases, "mangled").return_mode, ReturnMode::Guarded);
    assert!(!m.exits.is_empty() && m.exits.iter().all(|s| s.file_offset > m.entry.file_offset));
    let so = d.join("libpax.so");
    assert_eq!(
        m.entry.file_offset,
        readelf_offset(&so, nm_address(&so, &m.symbol))
    );
    assert!(
        m.display_object.ends_with("/libpax.so"),
        "{}",
        m.display_object
    );
    assert_eq!(resolved(&phases, "glob").address, m.address);
    assert_eq!(
        by_name(&phases, "forced").return_mode,
        ReturnMode::Uretprobe
    );
    // extern "C" in a C++ library: an exception may unwind through it, so not a plain
    // uretprobe.
    assert_eq!(by_name(&phases, "wal").return_mode, ReturnMode::Guarded);
    match &by_name(&phases, "over").status {
        Status::Unresolved { reason, .. } => {
            assert!(
                reason.contains("matches 2 functions")
                    && reason.contains("_ZN3pax4overEi")
                    && reason.contains("_ZN3pax4overEd"),
                "{reason}"
            );
        }
        s => panic!("{s:?}"),
    }
    assert_eq!(by_name(&phases, "over_all").targets.len(), 2);
    assert_eq!(
        resolved(&phases, "main").display_object,
        std::fs::canonicalize(d.join("app"))
            .unwrap()
            .to_string_lossy()
    );
    let text = unresolved_required(&phases, &prof).unwrap().to_string();
    assert!(
        text.contains("phase 'over': ")
            && text.contains("phase 'gone': cannot find object 'libgone.so'"),
        "{text}"
    );
}

#[test]
fn rust_legacy_and_v0_cdylibs() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lib.rs");
    std::fs::write(&src, "pub mod refresh { #[inline(never)] pub fn decision(x: u64) -> u64 { \
        if x > 3 { panic!(\"boom\") } x * 7 + 1 } }\n\
        #[no_mangle] pub extern \"C\" fn run(x: u64) -> u64 { refresh::decision(std::hint::black_box(x)) }\n").unwrap();
    for mangling in ["legacy", "v0"] {
        let out = dir.path().join(format!("lib{mangling}.so"));
        let st = Command::new("rustc")
            .args([
                "--crate-type",
                "cdylib",
                "--crate-name",
                "refreshx",
                "-O",
                "-Z",
                "unstable-options",
                "-C",
            ])
            .arg(format!("symbol-mangling-version={mangling}"))
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        let prof = profile(&format!(
            "name = \"r\"\nobject = \"{}\"\n[[phase]]\nname = \"decision\"\n\
            symbol = \"refreshx::refresh::decision\"\n",
            out.display()
        ));
        let phases = resolve_profile(&prof, &Scope::Binary(out.clone())).unwrap();
        let t = resolved(&phases, "decision");
        assert_eq!(t.language, Language::Rust, "{mangling}");
        assert!(
            t.symbol
                .starts_with(if mangling == "v0" { "_R" } else { "_ZN" }),
            "{}",
            t.symbol
        );
        assert_eq!(phases[0].return_mode, ReturnMode::Guarded);
        // Found all the same: the fallback when the unwind guard does not load.
        assert!(!t.exits.is_empty());
    }
}

#[test]
fn own_process_by_pid() {
    let pid = std::process::id();
    let prof = profile(
        r#"name = "self"
        object = "libc"
        [[phase]]
        name = "malloc"
        symbol = "malloc"
        [[phase]]
        name = "memcpy"
        symbol = "memcpy"
        "#,
    );
    let phases = resolve_profile(&prof, &Scope::Pids(vec![pid])).unwrap();
    let m = resolved(&phases, "malloc");
    assert!(
        m.object.starts_with(format!("/proc/{pid}/root/")),
        "{}",
        m.object.display()
    );
    assert!(m.display_object.ends_with("/libc.so.6") && m.display_object.starts_with('/'));
    assert_eq!(m.symbol, "malloc", "aliases fold to the preferred name");
    match &by_name(&phases, "memcpy").status {
        Status::Unresolved { reason, .. } => {
            assert!(reason.contains("indirect function"), "{reason}")
        }
        s => panic!("{s:?}"),
    }
}

#[test]
fn scope_errors_and_non_elf() {
    let prof = profile("name = \"x\"\n[[phase]]\nname = \"a\"\nsymbol = \"f\"\n");
    let e = resolve_profile(&prof, &Scope::Pids(vec![999_999])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no process with pid 999999 (is it running? check `ps -p 999999`)"
    );
    assert!(matches!(
        e.downcast_ref::<WprofError>(),
        Some(WprofError::NoProcess(_))
    ));

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("x");
    std::fs::write(&text, "not a binary\n").unwrap();
    let phases = resolve_profile(&prof, &Scope::Binary(text.clone())).unwrap();
    match &phases[0].status {
        Status::Unresolved { reason, .. } => {
            let canon = std::fs::canonicalize(&text).unwrap();
            assert_eq!(reason, &format!("{} is not an ELF object", canon.display()));
        }
        s => panic!("{s:?}"),
    }
}

/// The `writepath` test fixture (tests/fixtures/writepath.c) compiled as
/// tests/fixtures/build.sh compiles `writepath` and `writepath-cet`: `-fcf-protection=full`
/// when `cet`.
fn writepath_fixture(dir: &Path, cet: bool) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/writepath.c");
    let name = if cet { "writepath-cet" } else { "writepath" };
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra"])
        .arg(if cet {
            "-fcf-protection=full"
        } else {
            "-fcf-protection=none"
        })
        .arg(&src)
        .arg("-pthread")
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "gcc failed on {}", src.display());
    out
}

#[test]
fn endbr64_entries_are_probed_at_plus_4_and_exits_stay() {
    let dir = tempfile::tempdir().unwrap();
    let cet = writepath_fixture(dir.path(), true);
    let plain = writepath_fixture(dir.path(), false);
    let prof = Profile::load("fixture").unwrap();
    let moved = resolve_profile_with(&prof, &Scope::Binary(cet.clone()), true).unwrap();
    let kept = resolve_profile_with(&prof, &Scope::Binary(cet.clone()), false).unwrap();
    let classic = resolve_profile_with(&prof, &Scope::Binary(plain.clone()), true).unwrap();
    assert_eq!(moved.len(), 9);
    for ((m, k), c) in moved.iter().zip(&kept).zip(&classic) {
        let name = &m.phase.name;
        let (mt, kt, ct) = (
            resolved(&moved, name),
            resolved(&kept, name),
            resolved(&classic, name),
        );
        // Every phase of the CET build starts `endbr64; push %rbp`: probed at +4, emulated.
        let start = readelf_offset(&cet, nm_address(&cet, &mt.symbol));
        assert_eq!(mt.entry_offset, 4, "{name}");
        assert_eq!(mt.entry.file_offset, start + 4, "{name}");
        assert_eq!(mt.start_file_offset(), start, "{name}");
        assert_eq!(mt.entry.cost, CostClass::Emulated, "{name}");
        assert_eq!(
            crate::model::class_name(mt.entry.cost),
            "emulated",
            "{name}"
        );
        // WPROF_ENTRY_AT_ENDBR=1: on the endbr64, single-stepped.
        assert_eq!(kt.entry_offset, 0, "{name}");
        assert_eq!(kt.entry.file_offset, start, "{name}");
        assert_eq!(kt.entry.cost, CostClass::SingleStep, "{name}");
        // Returns are where they were, in either placement.
        assert_eq!(mt.exits, kt.exits, "{name}");
        assert_eq!(m.return_mode, k.return_mode, "{name}");
        assert_eq!(mt.exits.len(), objdump_rets(&cet, &mt.symbol), "{name}");
        // Without -fcf-protection nothing moves.
        assert_eq!(ct.entry_offset, 0, "{name}");
        assert_eq!(
            ct.entry.file_offset,
            readelf_offset(&plain, nm_address(&plain, &ct.symbol)),
            "{name}"
        );
        assert_eq!(ct.entry.cost, CostClass::Emulated, "{name}");
        assert_eq!(c.return_mode, m.return_mode, "{name}");
    }
    // The fixture's one RET-site phase keeps its RET probes; the others are uretprobes, which
    // share the entry's site.
    assert_eq!(
        by_name(&moved, "recurse_phase").return_mode,
        ReturnMode::RetSites
    );
    assert_eq!(
        by_name(&moved, "write_record").return_mode,
        ReturnMode::Uretprobe
    );
}

mod debug;
