//! Go's function table (`.gopclntab`): every Go function's start, end and name, for Go
//! binaries without a symbol table (`go build -ldflags='-s -w'`, or `strip`).
//!
//! In: the bytes of an ELF Go executable. Out: [`GoFunc`]s (start and end address, name as
//! the Go runtime prints it, whether it is written in assembly), or why not.
//!
//! The Go runtime needs this table to unwind stacks and collect garbage, so every Go binary
//! keeps it whatever was stripped. Layouts read (`runtime/symtab.go`, `pcHeader` and `_func`):
//! magic `0xfffffff1` (Go 1.20 and later) and `0xfffffff0` (Go 1.18, 1.19), where function
//! entries are 32-bit offsets from the start of the module's text; and `0xfffffffa` (Go 1.16,
//! 1.17), with absolute addresses. Older binaries predate Go's register ABI (1.17), which
//! wprof's Go support relies on, and are refused with that reason.
//!
//! Written by hand: no maintained crate reads this table. Go's own `debug/gosym` is Go; the
//! Rust parsers that exist live inside whole disassemblers or decompilers (smda,
//! rsleigh-decompile) and bring goblin and their own analyses with them, for ~150 lines of
//! format that `object` already gets us the sections for.

use anyhow::{bail, Context};
use object::{Object, ObjectSection};

/// One Go function from the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoFunc {
    /// Name, as the runtime prints it (`main.(*ArrowBackend).WriteBatch`).
    pub name: String,
    /// First instruction's virtual address.
    pub start: u64,
    /// One past its last byte (the next function's start: alignment padding included).
    pub end: u64,
    /// Implemented in assembly (ABI0: the goroutine register r14 is not guaranteed).
    pub asm: bool,
}

/// `FuncFlagAsm` of `internal/abi` (`_func.flag`).
const FUNC_FLAG_ASM: u8 = 1 << 2;

/// Reads the function table of the ELF Go binary `elf`.
pub fn functions(elf: &object::read::elf::ElfFile64<'_>) -> anyhow::Result<Vec<GoFunc>> {
    let sect = elf
        .section_by_name(".gopclntab")
        .context("no .gopclntab section")?;
    let tab = sect
        .data()
        .context(".gopclntab has no contents in the file")?;
    let text_section = elf.section_by_name(".text").map(|s| s.address());
    let text = |hdr_text: u64| -> anyhow::Result<u64> {
        if hdr_text != 0 {
            return Ok(hdr_text);
        }
        if let Some(t) = moduledata_text(elf, sect.address()) {
            return Ok(t);
        }
        text_section.context("no .text section to find the functions' base address")
    };
    parse(tab, text)
}

/// Little-endian u32 / u64 at `off` of `b`.
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off.checked_add(4)?)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off.checked_add(8)?)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
}

/// A NUL-terminated name at `off` of `b`.
fn cstr_at(b: &[u8], off: usize) -> Option<String> {
    let rest = b.get(off..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Parses a whole `.gopclntab`; `text(header_text_start)` gives the module's text base (the
/// header's own field when non-zero, else found elsewhere).
pub fn parse(tab: &[u8], text: impl Fn(u64) -> anyhow::Result<u64>) -> anyhow::Result<Vec<GoFunc>> {
    let magic = u32_at(tab, 0).context(".gopclntab is empty")?;
    let bad = || anyhow::anyhow!(".gopclntab is truncated or malformed");
    if tab.get(7) != Some(&8) {
        bail!(
            ".gopclntab is not a 64-bit table (pointer size {:?})",
            tab.get(7)
        );
    }
    let word = |i: usize| u64_at(tab, 8 + 8 * i).ok_or_else(bad);
    let nfunc = usize::try_from(word(0)?).map_err(|_| bad())?;
    // Fields after nfunc, nfiles: [textStart,] funcnameOffset, cuOffset, filetabOffset,
    // pctabOffset, pclnOffset.
    let (relative, header_text, names_off, pcln_off) = match magic {
        0xffff_fff1 | 0xffff_fff0 => (true, word(2)?, word(3)?, word(7)?),
        0xffff_fffa => (false, 0, word(2)?, word(6)?),
        0xffff_fffb => {
            bail!("its .gopclntab is Go 1.2-1.15's: wprof needs Go 1.17 or later (register ABI)")
        }
        m => bail!(".gopclntab has an unknown magic {m:#x}"),
    };
    let names = tab
        .get(usize::try_from(names_off).map_err(|_| bad())?..)
        .ok_or_else(bad)?;
    let pcln = tab
        .get(usize::try_from(pcln_off).map_err(|_| bad())?..)
        .ok_or_else(bad)?;
    // ftab: nfunc + 1 entries (the last one holds the end of the last function).
    let base = if relative { text(header_text)? } else { 0 };
    let entry_size = if relative { 8 } else { 16 };
    let entry = |i: usize| -> anyhow::Result<(u64, usize)> {
        let off = i * entry_size;
        if relative {
            let pc = u32_at(pcln, off).ok_or_else(bad)? as u64;
            let funcoff = u32_at(pcln, off + 4).ok_or_else(bad)? as usize;
            Ok((base + pc, funcoff))
        } else {
            let pc = u64_at(pcln, off).ok_or_else(bad)?;
            let funcoff = u64_at(pcln, off + 8).ok_or_else(bad)? as usize;
            Ok((pc, funcoff))
        }
    };
    if nfunc > pcln.len() / entry_size {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(nfunc);
    let mut next = entry(0)?;
    for i in 0..nfunc {
        let (start, funcoff) = next;
        next = entry(i + 1)?;
        // _func: entry (u32 offset, or a u64 address before 1.18), nameOff i32, ...
        let name_at = if relative { 4 } else { 8 };
        let name_off = u32_at(pcln, funcoff + name_at).ok_or_else(bad)? as usize;
        let name = cstr_at(names, name_off).ok_or_else(bad)?;
        // flag: after entry, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
        // cuOffset (and startLine from 1.20), funcID.
        let flag_at = match magic {
            0xffff_fff1 => 4 * 10 + 1,
            0xffff_fff0 => 4 * 9 + 1,
            _ => 8 + 4 * 8 + 1,
        };
        let flag = pcln.get(funcoff + flag_at).copied().unwrap_or(0);
        if next.0 < start {
            bail!(".gopclntab's functions are not sorted by address");
        }
        out.push(GoFunc {
            name,
            start,
            end: next.0,
            asm: flag & FUNC_FLAG_ASM != 0,
        });
    }
    Ok(out)
}

/// The module's text base from `runtime.firstmoduledata`, found as the data word that points
/// at the table (moduledata's first field) with `minpc`, `maxpc` and `text` at words 20-22
/// (the layout of Go 1.16 to 1.26). None in a position-independent binary, whose pointers are
/// only relocated at load time.
fn moduledata_text(elf: &object::read::elf::ElfFile64<'_>, pclntab_addr: u64) -> Option<u64> {
    let want = pclntab_addr.to_le_bytes();
    for s in elf.sections() {
        let name = s.name().unwrap_or("");
        if !matches!(name, ".noptrdata" | ".data" | ".data.rel.ro") {
            continue;
        }
        let Ok(d) = s.data() else { continue };
        let mut off = 0;
        while off + 23 * 8 <= d.len() {
            if d[off..off + 8] == want {
                let minpc = u64_at(d, off + 20 * 8)?;
                let maxpc = u64_at(d, off + 21 * 8)?;
                let text = u64_at(d, off + 22 * 8)?;
                if text != 0 && text <= minpc && minpc < maxpc {
                    return Some(text);
                }
            }
            off += 8;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-made Go 1.20+ table: two functions at text+0x10 and text+0x40, ending at +0x80.
    fn table() -> Vec<u8> {
        let mut t = vec![0u8; 0x100];
        t[0..4].copy_from_slice(&0xffff_fff1u32.to_le_bytes());
        t[6] = 1;
        t[7] = 8;
        let put64 =
            |t: &mut Vec<u8>, off: usize, v: u64| t[off..off + 8].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |t: &mut Vec<u8>, off: usize, v: u32| t[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put64(&mut t, 8, 2); // nfunc
        put64(&mut t, 24, 0); // textStart (unused)
        put64(&mut t, 32, 0x60); // funcnameOffset
        put64(&mut t, 64, 0x80); // pclnOffset
        t[0x60..0x60 + 7].copy_from_slice(b"main.a\0");
        t[0x67..0x67 + 7].copy_from_slice(b"main.b\0");
        // ftab at 0x80: (0x10, 0x18), (0x40, 0x48), (0x80, 0)
        for (i, (pc, fo)) in [(0x10u32, 0x18u32), (0x40, 0x48), (0x80, 0)]
            .iter()
            .enumerate()
        {
            put32(&mut t, 0x80 + i * 8, *pc);
            put32(&mut t, 0x84 + i * 8, *fo);
        }
        // _func at pcln+0x18 and pcln+0x48: entryOff, nameOff; the second is assembly.
        put32(&mut t, 0x80 + 0x18, 0x10);
        put32(&mut t, 0x80 + 0x1c, 0);
        put32(&mut t, 0x80 + 0x48, 0x40);
        put32(&mut t, 0x80 + 0x4c, 7);
        t[0x80 + 0x48 + 41] = FUNC_FLAG_ASM;
        t
    }

    #[test]
    fn reads_a_go_1_20_table() {
        let funcs = parse(&table(), |_| Ok(0x40_1000)).unwrap();
        assert_eq!(
            funcs,
            vec![
                GoFunc {
                    name: "main.a".into(),
                    start: 0x40_1010,
                    end: 0x40_1040,
                    asm: false
                },
                GoFunc {
                    name: "main.b".into(),
                    start: 0x40_1040,
                    end: 0x40_1080,
                    asm: true
                },
            ]
        );
    }

    #[test]
    fn bad_tables_are_errors_not_panics() {
        let t = table();
        for n in [0, 4, 8, 30, 0x70, 0x90, 0xa0] {
            assert!(parse(&t[..n], |_| Ok(0)).is_err(), "{n} bytes");
        }
        let mut old = t.clone();
        old[0..4].copy_from_slice(&0xffff_fffbu32.to_le_bytes());
        let e = parse(&old, |_| Ok(0)).unwrap_err().to_string();
        assert!(e.contains("Go 1.17 or later"), "{e}");
        let mut junk = t;
        junk[0..4].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        assert!(parse(&junk, |_| Ok(0))
            .unwrap_err()
            .to_string()
            .contains("magic"));
    }
}
