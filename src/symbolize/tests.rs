//! Symbolizing the test process itself, the kernel, and synthetic mappings.

use std::hint::black_box;
use std::path::PathBuf;

use super::*;

#[inline(never)]
fn marker_inner(x: u64) -> u64 {
    black_box(x).wrapping_mul(31).rotate_left(7) ^ black_box(0x5a5a)
}

#[inline(never)]
fn marker_outer(x: u64) -> u64 {
    let a = marker_inner(black_box(x));
    let b = marker_inner(black_box(a ^ 3));
    a.wrapping_add(b)
}

fn self_maps() -> ProcessMaps {
    ProcessMaps::read(std::process::id()).expect("own maps")
}

/// The frames without inlined `core::` helpers (`black_box`), whose presence depends on
/// where exactly an address falls.
fn without_core(frames: &[String]) -> Vec<&str> {
    frames
        .iter()
        .map(String::as_str)
        .filter(|f| !f.starts_with("core::"))
        .collect()
}

fn fn_addr(f: fn(u64) -> u64) -> u64 {
    f as *const () as usize as u64
}

#[test]
fn own_rust_functions() {
    assert_ne!(marker_outer(1), 0);
    let maps = self_maps();
    let inner = fn_addr(marker_inner);
    let outer = fn_addr(marker_outer);
    let mut sym = StackSymbolizer::new();
    // Innermost first: we are at the entry of marker_inner, called from marker_outer + 8.
    let frames = sym.user_frames(&maps, &[inner, outer + 8]);
    assert_eq!(
        without_core(&frames),
        [
            "wprof::symbolize::tests::marker_outer",
            "wprof::symbolize::tests::marker_inner"
        ]
    );
    // Cached second time round, same answer.
    assert_eq!(sym.user_frames(&maps, &[inner, outer + 8]), frames);
}

#[test]
fn inlined_frames_expand_outer_first() {
    // `black_box` is inlined into marker_inner: some instruction of its first bytes is
    // attributed to it, and then the containing function comes first, the callee after.
    let maps = self_maps();
    let inner = fn_addr(marker_inner);
    let mut sym = StackSymbolizer::new();
    let expanded = (0..48)
        .map(|off| sym.user_frames(&maps, &[inner + off]))
        .find(|frames| frames.len() > 1)
        .expect("an inlined frame in marker_inner");
    assert_eq!(
        expanded,
        [
            "wprof::symbolize::tests::marker_inner",
            "core::hint::black_box::<u64>"
        ]
    );
}

#[test]
fn libc_function() {
    let maps = self_maps();
    let addr = libc::getpid as *const () as usize as u64;
    let mut sym = StackSymbolizer::new();
    let frames = sym.user_frames(&maps, &[addr]);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert!(frames[0].contains("getpid"), "{frames:?}");
}

#[test]
fn unknown_and_special_addresses() {
    let tramp = 0x7fff_ffff_e000;
    let vdso = 0x7ffd_1b1f_0000;
    let lib = 0x7f00_0000_0000;
    let maps = ProcessMaps::from_mappings(
        1,
        vec![
            Mapping {
                start: lib,
                end: lib + 0x10000,
                offset: 0x2000,
                kind: MappingKind::File {
                    path: PathBuf::from("/nonexistent/libfoo.so"),
                    open_path: PathBuf::from("/nonexistent/libfoo.so"),
                    inode: 0,
                },
            },
            Mapping {
                start: vdso,
                end: vdso + 0x2000,
                offset: 0,
                kind: MappingKind::Vdso,
            },
            Mapping {
                start: tramp,
                end: tramp + 0x1000,
                offset: 0,
                kind: MappingKind::Uprobes,
            },
        ],
    );
    let mut sym = StackSymbolizer::new();
    let frames = sym.user_frames(&maps, &[0x10, lib + 0x1234, vdso + 0x10, tramp]);
    assert_eq!(
        frames,
        ["[uprobes]", "[vdso]", "libfoo.so+0x3234", "[unknown]"]
    );
    // A real process snapshot: an address in no mapping.
    assert_eq!(sym.user_frames(&self_maps(), &[0x10]), ["[unknown]"]);
}

/// The address of `name` in kallsyms, `None` when unreadable or zeroed (not root).
fn kallsyms_addr(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let addr = u64::from_str_radix(f.next()?, 16).ok()?;
        let _kind = f.next()?;
        (f.next()? == name && f.next().is_none() && addr != 0).then_some(addr)
    })
}

#[test]
fn kernel_symbol() {
    let schedule = kallsyms_addr("schedule");
    if !crate::testing::require(schedule.is_some(), "kernel addresses in /proc/kallsyms") {
        return;
    }
    let schedule = schedule.unwrap();
    let mut sym = StackSymbolizer::new();
    assert_eq!(sym.kernel_frames(&[schedule]), ["schedule_[k]"]);
    let vfs_write = kallsyms_addr("vfs_write").expect("vfs_write in /proc/kallsyms");
    // Innermost first in, outermost first out; the caller's return address is looked up at
    // addr - 1.
    assert_eq!(
        sym.kernel_frames(&[schedule + 4, vfs_write + 1]),
        ["vfs_write_[k]", "schedule_[k]"]
    );
}

#[test]
fn kernel_without_kallsyms() {
    let mut sym = StackSymbolizer::with_kallsyms("/nonexistent/kallsyms");
    assert_eq!(
        sym.kernel_frames(&[0xffff_ffff_8100_0000, 0xffff_ffff_8100_1000]),
        ["[kernel]", "[kernel]"]
    );
}

#[test]
fn restore_then_symbolize() {
    let mut maps = self_maps();
    let tramp = 0x7fff_ffff_e000;
    maps.merge(ProcessMaps::from_mappings(
        std::process::id(),
        vec![Mapping {
            start: tramp,
            end: tramp + 0x1000,
            offset: 0,
            kind: MappingKind::Uprobes,
        }],
    ));
    let inner = fn_addr(marker_inner);
    let ret = fn_addr(marker_outer) + 8;
    let mut stack = [inner, tramp, tramp];
    assert_eq!(
        restore_uretprobe_returns(&mut stack, &maps, &[ret], true),
        1
    );
    let mut sym = StackSymbolizer::new();
    assert_eq!(
        without_core(&sym.user_frames(&maps, &stack)),
        [
            "[uprobes]",
            "wprof::symbolize::tests::marker_outer",
            "wprof::symbolize::tests::marker_inner"
        ]
    );
}

#[test]
fn frame_name_forms() {
    // C++ without parameter list, Rust without hash, C as is.
    assert_eq!(
        demangle("_ZN4wpfx5Store11write_batchERKSt6vectorIiSaIiEE"),
        "wpfx::Store::write_batch"
    );
    assert_eq!(
        demangle("_ZN8refreshx7refresh8decision17h9f15dfbb099b35b9E"),
        "refreshx::refresh::decision"
    );
    assert_eq!(demangle("heap_insert"), "heap_insert");
}
