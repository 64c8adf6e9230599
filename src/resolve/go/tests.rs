//! Tests of the Go side of resolve: Go binaries recognised, RET sites whatever was asked,
//! entry probes past the stack check, Go's argument registers, `.gopclntab` for stripped
//! builds and the errors when a binary has no symbols at all. On small programs built here
//! and on the real Parquet fixture (tests/fixtures/go-parquet, built by its build.sh).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::model::profile::{Capture, Profile};
use crate::model::Language;
use crate::resolve::*;

/// The fixture's build script (also finds the Go toolchain).
fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go-parquet/build.sh")
}

/// A Go toolchain new enough for the fixture.
fn go() -> Option<PathBuf> {
    crate::testing::go_toolchain()
}

/// True when Go is there; else skips loudly, or fails under WPROF_REQUIRE_BPF=1 (CI installs
/// it: .ci/install.sh).
fn have_go() -> bool {
    crate::testing::require(
        go().is_some(),
        "a Go 1.25+ toolchain (tests/fixtures/go-parquet/build.sh --install-go)",
    )
}

/// The Parquet fixture's builds (target/go-fixtures), built once per test binary.
fn fixture(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/go-fixtures");
        let out = Command::new("bash")
            .arg(build_script())
            .arg(&dir)
            .output()
            .expect("run the Go fixture's build.sh");
        assert!(
            out.status.success(),
            "Go fixture build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .join(name)
}

/// Builds a one-file Go program (standard library only) in `dir`.
fn build_go(dir: &Path, src: &str, flags: &[&str]) -> PathBuf {
    std::fs::write(dir.join("main.go"), src).unwrap();
    let cache = std::env::var("HOME").map_or_else(
        |_| dir.join("cache"),
        |h| Path::new(&h).join(".cache/wprof-go/build"),
    );
    let st = Command::new(go().unwrap())
        .args(["build", "-o", "app"])
        .args(flags)
        .arg("main.go")
        .current_dir(dir)
        .env("GOCACHE", cache)
        .env("GOFLAGS", "-buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .status()
        .unwrap();
    assert!(st.success(), "go build failed");
    dir.join("app")
}

const SMALL: &str = r#"package main

import (
	"fmt"
	"os"
)

type T struct{ n int }

// Write has a frame and calls out: a stack check, then push %rbp.
//
//go:noinline
func (t *T) Write(b []byte, extra, a2, a3, a4, a5, a6, a7 int) int {
	if len(b) > 10 {
		fmt.Fprintln(os.Stderr, "long", len(b))
		return t.n + len(b)
	}
	t.n += len(b) + extra + a2 + a3 + a4 + a5 + a6 + a7
	return t.n
}

// leaf has no frame and calls nothing: no stack check.
//
//go:noinline
func leaf(x int) int { return x*3 + 1 }

// nosplit promises not to grow the stack: no stack check.
//
//go:noinline
//go:nosplit
func nosplit(x int) int { return x ^ 0x55 }

func main() {
	t := &T{}
	fmt.Println(t.Write([]byte("hello"), 1, 2, 3, 4, 5, 6, 7), leaf(3), nosplit(4))
}
"#;

fn profile(text: &str) -> Profile {
    Profile::parse(text, "go-test.toml").unwrap()
}

fn phase<'a>(phases: &'a [ResolvedPhase], name: &str) -> &'a ResolvedPhase {
    phases.iter().find(|p| p.phase.name == name).unwrap()
}

fn target<'a>(phases: &'a [ResolvedPhase], name: &str) -> &'a ResolvedSymbol {
    let p = phase(phases, name);
    assert!(
        matches!(p.status, Status::Resolved),
        "{name}: {:?}",
        p.status
    );
    &p.targets[0]
}

/// The mnemonic of the instruction at `file_offset` of `obj`, as objdump prints it.
fn objdump_at(obj: &Path, address: u64) -> String {
    let out = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(format!("--start-address={address:#x}"))
        .arg(format!("--stop-address={:#x}", address + 1))
        .arg(obj)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .rev()
        .find(|l| l.contains(':') && l.trim_start().starts_with(&format!("{address:x}:")))
        .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        .unwrap_or_default()
}

#[test]
fn go_binary() {
    if !have_go() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let app = build_go(
        dir.path(),
        "package main\n\nimport \"fmt\"\n\n\
        type T struct{ n int }\n\n//go:noinline\nfunc (t *T) Write(b []byte) int {\n\
        \tif len(b) > 10 {\n\t\treturn t.n + len(b)\n\t}\n\tt.n += len(b)\n\treturn t.n\n}\n\n\
        func main() { t := &T{}; fmt.Println(t.Write([]byte(\"hello\"))) }\n",
        &[],
    );
    let prof = profile(
        r#"name = "go"
        [[phase]]
        name = "literal"
        symbol = "main.(*T).Write"
        [[phase]]
        name = "glob"
        symbol = 'main.(\*T).Wr*'
        "#,
    );
    let phases = resolve_profile(&prof, &Scope::Binary(app)).unwrap();
    let t = target(&phases, "literal");
    assert_eq!(t.language, Language::Go);
    assert_eq!(phases[0].return_mode, ReturnMode::RetSites);
    assert!(!t.exits.is_empty() && t.exits.iter().all(|s| s.cost == CostClass::SingleStep));
    assert_eq!(target(&phases, "glob").address, t.address);
}

#[test]
fn go_entries_sit_after_the_stack_check_and_returns_are_ret_sites() {
    if !have_go() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let app = build_go(dir.path(), SMALL, &[]);
    let prof = profile(
        r#"name = "go"
        [[phase]]
        name = "write"
        symbol = 'main.(\*T).Write'
        return = "uretprobe"
        arg = 8
        [[phase]]
        name = "leaf"
        symbol = "main.leaf"
        [[phase]]
        name = "nosplit"
        symbol = "main.nosplit"
        [[phase]]
        name = "by_c_string"
        symbol = "main.leaf"
        group_by = { arg = 0 }
        [[phase]]
        name = "by_go_string"
        symbol = "main.leaf"
        group_by = { arg = 0, type = "str" }
        "#,
    );
    let phases = resolve_profile(&prof, &Scope::Binary(app.clone())).unwrap();
    let syms = symbols::ObjectSymbols::load(&app).unwrap();
    assert!(syms.is_go && syms.has_symtab && !syms.from_pclntab);

    // Write: `cmp 0x10(%r14),%rsp; jbe` (6 bytes) or the `lea`/`cmp`/`jbe` form, then push.
    let w = target(&phases, "write");
    assert_eq!(w.language, Language::Go);
    assert!(
        w.entry_offset == 10 || w.entry_offset == 15,
        "{}",
        w.entry_offset
    );
    assert_eq!(w.entry.cost, CostClass::Emulated);
    assert_eq!(objdump_at(&app, w.address + w.entry_offset), "push   %rbp");
    // The stack check's block calls runtime.morestack_noctxt and jumps back to +0.
    let f = syms.function_at(w.address).unwrap();
    assert_eq!(
        elf::disasm::entry_site(&syms, f, true).unwrap().cost,
        CostClass::SingleStep
    );

    // return = "uretprobe" on Go code: overridden, with a warning that says why.
    let wp = phase(&phases, "write");
    assert_eq!(wp.return_mode, ReturnMode::RetSites);
    assert!(!w.exits.is_empty());
    assert!(
        wp.warnings.iter().any(|m| m.contains("overridden")
            && m.contains("crash Go programs")
            && m.contains("main.(*T).Write")),
        "{:?}",
        wp.warnings
    );
    // arg = 8 (r11) is fine for a Go function.
    assert_eq!(wp.phase.capture(), Some(Capture::Arg(8)));

    // `wprof export --bpftrace` keys Go calls by goroutine and probes past the stack check.
    let bt = crate::export::bpftrace(&prof, &phases).unwrap();
    let entry = format!(
        "uprobe:{}:main.(*T).Write+{} ",
        app.display(),
        w.entry_offset
    );
    assert!(bt.contains(&entry), "{entry}\n{bt}");
    assert!(bt.contains("@start_write[reg(\"r14\")] = nsecs"), "{bt}");
    assert!(
        bt.contains("Go phases: entries past the stack check"),
        "{bt}"
    );
    assert!(!bt.contains("endbr64"), "{bt}");

    // group_by's default, a C string, means nothing in Go: refused with the way out.
    match &phase(&phases, "by_c_string").status {
        Status::Unresolved { reason, .. } => assert!(
            reason.contains("main.leaf is a Go function") && reason.contains("type = \"str\""),
            "{reason}"
        ),
        s => panic!("{s:?}"),
    }
    assert!(matches!(
        phase(&phases, "by_go_string").status,
        Status::Resolved
    ));

    // No stack check: the entry stays at +0.
    for name in ["leaf", "nosplit"] {
        let t = target(&phases, name);
        assert_eq!(t.entry_offset, 0, "{name}");
        assert_eq!(phase(&phases, name).return_mode, ReturnMode::RetSites);
        assert!(phase(&phases, name).warnings.is_empty());
    }
}

#[test]
fn arguments_past_the_sixth_are_refused_for_c_functions() {
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::resolve::testutil::build(
        dir.path(),
        "c",
        "int f(int a){return a+1;}\nint main(void){return f(1);}\n",
        false,
        &["-O1"],
    );
    let prof = profile("name='c'\n[[phase]]\nname='f'\nsymbol='f'\narg=6\n");
    let phases = resolve_profile(&prof, &Scope::Binary(exe)).unwrap();
    match &phase(&phases, "f").status {
        Status::Unresolved { reason, .. } => assert!(
            reason.contains("arg = 6")
                && reason.contains("not a Go function")
                && reason.contains("0-5"),
            "{reason}"
        ),
        s => panic!("{s:?}"),
    }
    // A pointer + length string at 5 reads register 6 too.
    let prof = profile("name='c'\n[[phase]]\nname='f'\nsymbol='f'\ngroup_by={arg=5, type='str'}\n");
    let phases = resolve_profile(&prof, &Scope::Binary(dir.path().join("c"))).unwrap();
    match &phase(&phases, "f").status {
        Status::Unresolved { reason, .. } => assert!(
            reason.contains("group_by arg = 5 (type = \"str\") reads argument register 6"),
            "{reason}"
        ),
        s => panic!("{s:?}"),
    }
}

#[test]
fn stripped_fixture_functions_come_from_gopclntab() {
    if !have_go() {
        return;
    }
    let full = symbols::ObjectSymbols::load(&fixture("goparquet")).unwrap();
    let stripped = symbols::ObjectSymbols::load(&fixture("goparquet-stripped")).unwrap();
    assert!(full.is_go && full.has_symtab && !full.from_pclntab);
    assert!(stripped.is_go && !stripped.has_symtab && stripped.from_pclntab);
    // -s -w changes no code: every Go function is at the same address with the same name
    // (the symbol table adds `.abi0` to assembly functions' names) and the same end, up to
    // the alignment padding the table counts in.
    let by_addr: HashMap<u64, &symbols::Function> =
        full.functions.iter().map(|f| (f.address, f)).collect();
    let mut same = 0;
    for f in &stripped.functions {
        let Some(g) = by_addr.get(&f.address) else {
            panic!(
                "{} at {:#x} is not in the unstripped build",
                f.names[0].mangled, f.address
            );
        };
        let name = &f.names[0].mangled;
        assert!(
            g.names
                .iter()
                .any(|n| &n.mangled == name || n.mangled.strip_suffix(".abi0") == Some(name)),
            "{name} vs {:?}",
            g.names
        );
        assert!(
            f.size >= g.size && f.size < g.size + 64,
            "{name}: {} vs {}",
            f.size,
            g.size
        );
        assert_eq!(f.file_offset, g.file_offset);
        assert_eq!(f.language, Language::Go);
        same += 1;
    }
    assert!(same > 20_000, "only {same} functions");
    // The built-in profile resolves against the stripped build to the same sites.
    let prof = Profile::load("parquet-go").unwrap();
    let a = resolve_profile(&prof, &Scope::Binary(fixture("goparquet"))).unwrap();
    let b = resolve_profile(&prof, &Scope::Binary(fixture("goparquet-stripped"))).unwrap();
    for (pa, pb) in a.iter().zip(&b) {
        assert!(
            matches!(pb.status, Status::Resolved),
            "{}: {:?}",
            pb.phase.name,
            pb.status
        );
        let (ta, tb) = (&pa.targets[0], &pb.targets[0]);
        assert_eq!(ta.entry, tb.entry, "{}", pa.phase.name);
        assert_eq!(ta.exits, tb.exits, "{}", pa.phase.name);
        assert_eq!(ta.demangled, tb.demangled);
    }
    // -trimpath keeps every name.
    let c = resolve_profile(&prof, &Scope::Binary(fixture("goparquet-trimpath"))).unwrap();
    assert!(c.iter().all(|p| matches!(p.status, Status::Resolved)));
}

#[test]
fn a_go_binary_without_any_symbols_says_what_is_missing() {
    if !have_go() {
        return;
    }
    let nosyms = fixture("goparquet-nosyms");
    let syms = symbols::ObjectSymbols::load(&nosyms).unwrap();
    assert!(syms.is_go && !syms.has_symtab && !syms.from_pclntab);
    let prof = Profile::load("parquet-go").unwrap();
    let phases = resolve_profile(&prof, &Scope::Binary(nosyms)).unwrap();
    let err = unresolved_required(&phases, &prof).unwrap().to_string();
    for want in [
        "no symbol '*.(\\*ArrowBackend).WriteBatch'",
        "a Go binary without a symbol table",
        "-ldflags='-s'",
        "no .gopclntab section",
        "rebuild it without -s",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
}

/// `runtime.g.m` and `runtime.m.curg` from the binary's DWARF: where the runtime has them
/// (`m` follows the stack bounds, two guards, `_panic` and `_defer`: 48 bytes in every Go
/// release since 1.17; `curg` moves between releases). No DWARF (`-ldflags=-w`): no layout.
#[test]
fn the_go_runtime_layout_comes_from_the_binarys_dwarf() {
    if !have_go() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let app = build_go(dir.path(), SMALL, &[]);
    let layout = super::layout::go_runtime_layout_at(&app)
        .unwrap()
        .expect("layout");
    assert_eq!(layout.g_m, 48);
    assert!(
        layout.m_curg % 8 == 0 && (64..1024).contains(&layout.m_curg),
        "{layout:?}"
    );
    let bare = tempfile::tempdir().unwrap();
    let app = build_go(bare.path(), SMALL, &["-ldflags=-w"]);
    assert_eq!(super::layout::go_runtime_layout_at(&app).unwrap(), None);
}
