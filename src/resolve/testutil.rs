//! Test helpers shared by the resolve tests: building fixtures with cc/g++, reading
//! addresses and offsets with nm/readelf, and the C++ fixture mimicking PAX's signatures.

use std::path::{Path, PathBuf};
use std::process::Command;

/// True if `path` exists; otherwise skips loudly, or fails when WPROF_REQUIRE_BPF=1.
pub(crate) fn require(path: &str) -> bool {
    crate::testing::require(Path::new(path).exists(), &format!("{path} (postgresql-15)"))
}

/// Compiles `src` (C, or C++ when `cxx`) into a shared object or executable in `dir`.
pub(crate) fn build(dir: &Path, name: &str, src: &str, cxx: bool, flags: &[&str]) -> PathBuf {
    let ext = if cxx { "cc" } else { "c" };
    let source = dir.join(format!("{name}.{ext}"));
    std::fs::write(&source, src).unwrap();
    let out = dir.join(name);
    let compiler = if cxx { "g++" } else { "cc" };
    let st = Command::new(compiler)
        .arg(&source)
        .arg("-o")
        .arg(&out)
        .args(flags)
        .status()
        .unwrap();
    assert!(st.success(), "{compiler} failed on {name}");
    out
}

/// `nm`'s address of a defined symbol.
pub(crate) fn nm_address(obj: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(obj).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            let (a, _, n) = (it.next()?, it.next()?, it.next()?);
            (n == name).then(|| u64::from_str_radix(a, 16).unwrap())
        })
        .unwrap_or_else(|| panic!("nm: no {name} in {}", obj.display()))
}

/// File offset of `addr` computed from `readelf -lW` LOAD lines.
pub(crate) fn readelf_offset(obj: &Path, addr: u64) -> u64 {
    let out = Command::new("readelf")
        .arg("-lW")
        .arg(obj)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for l in text.lines().filter(|l| l.trim_start().starts_with("LOAD")) {
        let f: Vec<u64> = l
            .split_whitespace()
            .skip(1)
            .take(5)
            .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
            .collect();
        let (off, va, filesz) = (f[0], f[1], f[3]);
        if addr >= va && addr < va + filesz {
            return addr - va + off;
        }
    }
    panic!("readelf: {addr:#x} in no LOAD segment");
}

/// RET instructions of `sym` as objdump sees them.
pub(crate) fn objdump_rets(obj: &std::path::Path, sym: &str) -> usize {
    let out = Command::new("objdump")
        .arg("-d")
        .arg(format!("--disassemble={sym}"))
        .arg(obj)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter(|l| {
            l.split('\t').nth(2).is_some_and(|i| {
                i.starts_with("ret") || i.starts_with("repz ret") || i.starts_with("rep ret")
            })
        })
        .count()
}

/// A C++ library with PAX's mangled names, a throwing method, overloads, `[abi:cxx11]`,
/// a template and an aliased `extern "C"` function.
/// Builds CXX_SRC as `dir/libpax.so` (-O2, shared) and reads its symbols.
pub(crate) fn pax_library(dir: &Path) -> crate::resolve::elf::symbols::ObjectSymbols {
    let so = build(
        dir,
        "libpax.so",
        CXX_SRC,
        true,
        &["-O2", "-shared", "-fPIC"],
    );
    crate::resolve::elf::symbols::ObjectSymbols::load(&so).expect("load libpax.so")
}

pub(crate) const CXX_SRC: &str = r#"
    #include <stdexcept>
    #include <string>
    struct RelationData; struct TupleTableSlot; struct BulkInsertStateData;
    namespace pax {
    struct CCPaxAccessMethod {
        static int TupleInsert(RelationData*, TupleTableSlot*, unsigned, int, BulkInsertStateData*);
    };
    int CCPaxAccessMethod::TupleInsert(RelationData* r, TupleTableSlot*, unsigned n, int, BulkInsertStateData*) {
        if (r == nullptr && n == 7) throw std::runtime_error("boom");
        return static_cast<int>(n) + 1;
    }
    int over(int x) { return x + 1; }
    int over(double x) { return static_cast<int>(x) + 2; }
    std::string Name() { return "pax"; }
    template <typename T> struct Writer { T write(T x) const { return x + 1; } };
    template struct Writer<int>;
    }
    extern "C" int XLogPaxInsert(int x) { return x * 2; }
    extern "C" int XLogPaxAlias(int x) __attribute__((alias("XLogPaxInsert")));
"#;

/// A program with a static noinline function (`store`), and a static one (`mix`) inlined into
/// `inl_a` and `inl_b` and also called out of line through a pointer from `outline`.
pub(crate) const SPLIT_SRC: &str = r#"
    static volatile unsigned long sink;
    static unsigned long mix(unsigned long x) { x ^= x >> 13; x *= 0x9e3779b97f4a7c15UL; return x ^ (x >> 29); }
    static unsigned long (*volatile mix_ptr)(unsigned long) = mix;
    static __attribute__((noinline, noclone)) unsigned long inl_a(unsigned long x) { return mix(x) + 1; }
    static __attribute__((noinline, noclone)) unsigned long inl_b(unsigned long x) { return mix(x ^ 7) + 3; }
    static __attribute__((noinline, noclone)) unsigned long outline(unsigned long x) { return mix_ptr(x) + 2; }
    static __attribute__((noinline, noclone)) void store(unsigned long k, unsigned long v) { sink = k * 31 + v; }
    int main(int argc, char **argv) {
        (void)argv;
        for (unsigned long i = 0; i < (unsigned long)argc; i++) store(i, inl_a(i) + inl_b(i) + outline(i));
        return 0;
    }
"#;

/// Runs a command, asserting success.
pub(crate) fn run(cmd: &mut Command) {
    let st = cmd.status().unwrap();
    assert!(st.success(), "{cmd:?} failed");
}

/// The split-debug layout of [`SPLIT_SRC`] built as `dir/name` with `-O2 -g`: returns
/// (the unstripped build, the stripped object with a `.gnu_debuglink`, its debug file
/// `dir/name.debug` with zlib-compressed DWARF).
pub(crate) fn split_debug(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let full = build(
        dir,
        &format!("{name}-full"),
        SPLIT_SRC,
        false,
        &["-O2", "-g", "-Wl,--build-id=sha1"],
    );
    let debug = dir.join(format!("{name}.debug"));
    let stripped = dir.join(name);
    run(Command::new("objcopy")
        .args(["--only-keep-debug", "--compress-debug-sections=zlib"])
        .arg(&full)
        .arg(&debug));
    run(Command::new("objcopy")
        .arg("--strip-all")
        .arg(format!("--add-gnu-debuglink={}", debug.display()))
        .arg(&full)
        .arg(&stripped));
    (full, stripped, debug)
}

/// The GNU build id of `obj`, hex, as readelf prints it.
pub(crate) fn build_id(obj: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(obj).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .unwrap_or_else(|| panic!("no build id in {}", obj.display()))
}
