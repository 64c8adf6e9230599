//! USDT probes (SystemTap SDT notes) of one ELF object, and USDT phases resolved against them.
//!
//! In: an object's bytes and a phase's `usdt = ["provider:start", "provider:done", ...]`.
//! Out: the start and done sites as file offsets (what a uprobe wants), each with its
//! semaphore's file offset (the kernel's reference counter: it raises the `short` that
//! `TRACE_*_ENABLED()` guards read while a probe is attached) and its arguments decoded into
//! [`UsdtArg`]s for BPF.
//!
//! The notes are parsed here rather than by a crate: `object` reads ELF notes but not the
//! `stapsdt` payload or its GNU-assembler argument strings, and no maintained Rust crate reads
//! USDT notes for attaching (libbpf does it in C).

use anyhow::{anyhow, bail, Context};
use object::{Object, ObjectSection, ObjectSegment};
use wprof_common::usdt::{USDT_ARG_CONST, USDT_ARG_DEREF, USDT_ARG_REG, USDT_REGISTERS};
use wprof_common::UsdtArg;

use crate::model::CostClass;
use crate::resolve::Site;

/// The ELF note type of a SystemTap probe descriptor.
const NT_STAPSDT: u32 = 3;

/// One USDT probe site of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtNote {
    /// The provider (`postgresql`).
    pub provider: String,
    /// The probe's name (`transaction__start`).
    pub name: String,
    /// The site's virtual address.
    pub address: u64,
    /// The site's offset in the file.
    pub file_offset: u64,
    /// The semaphore's offset in the file; 0 when the probe has none.
    pub semaphore: u64,
    /// The argument specification as written in the note (`-4@%eax 8@-24(%rbp)`).
    pub args: String,
}

impl UsdtNote {
    /// `provider:name`.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }
}

/// A USDT phase's probe sites: where it opens and where it closes.
#[derive(Debug, Clone)]
pub struct UsdtPhase {
    /// The start probe's sites (one probe can be expanded at several places).
    pub starts: Vec<UsdtNote>,
    /// The done probes' sites.
    pub dones: Vec<UsdtNote>,
}

/// Every USDT probe site in the ELF object `data`, in note order (none without a
/// `.note.stapsdt` section).
pub fn notes(data: &[u8]) -> anyhow::Result<Vec<UsdtNote>> {
    let file = object::File::parse(data).context("not an ELF object")?;
    let Some(section) = file.section_by_name(".note.stapsdt") else {
        return Ok(Vec::new());
    };
    let bytes = section.data().context("read .note.stapsdt")?;
    // Prelinking moves `.stapsdt.base`; the notes hold its link-time address.
    let base = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let to_file = |vaddr: u64| -> Option<u64> {
        file.segments().find_map(|seg| {
            let (off, size) = seg.file_range();
            (vaddr >= seg.address() && vaddr < seg.address() + size)
                .then(|| vaddr - seg.address() + off)
        })
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    let word = |b: &[u8], i: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?))
    };
    while at + 12 <= bytes.len() {
        let (Some(namesz), Some(descsz), Some(kind)) =
            (word(bytes, at), word(bytes, at + 4), word(bytes, at + 8))
        else {
            break;
        };
        let name_at = at + 12;
        let desc_at = name_at + (namesz as usize).next_multiple_of(4);
        let next = desc_at + (descsz as usize).next_multiple_of(4);
        if next > bytes.len() {
            bail!("a truncated note in .note.stapsdt at byte {at}");
        }
        let owner = &bytes[name_at..name_at + namesz as usize];
        if kind == NT_STAPSDT && owner.starts_with(b"stapsdt") {
            out.push(parse_note(
                &bytes[desc_at..desc_at + descsz as usize],
                base,
                &to_file,
            )?);
        }
        at = next;
    }
    Ok(out)
}

/// One `stapsdt` descriptor: pc, link-time base, semaphore (8 bytes each), then provider,
/// name and arguments as NUL-terminated strings.
fn parse_note(
    desc: &[u8],
    base: Option<u64>,
    to_file: &dyn Fn(u64) -> Option<u64>,
) -> anyhow::Result<UsdtNote> {
    let addr = |i: usize| -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(
            desc.get(i * 8..i * 8 + 8)
                .ok_or_else(|| anyhow!("a USDT note shorter than its addresses"))?
                .try_into()?,
        ))
    };
    let (mut pc, link_base, mut semaphore) = (addr(0)?, addr(1)?, addr(2)?);
    if let Some(base) = base.filter(|_| link_base != 0) {
        let shift = base.wrapping_sub(link_base);
        pc = pc.wrapping_add(shift);
        if semaphore != 0 {
            semaphore = semaphore.wrapping_add(shift);
        }
    }
    let mut strings = desc[24..].split(|b| *b == 0).map(String::from_utf8_lossy);
    let provider = strings.next().unwrap_or_default().into_owned();
    let name = strings.next().unwrap_or_default().into_owned();
    let args = strings.next().unwrap_or_default().into_owned();
    let file_offset = to_file(pc)
        .ok_or_else(|| anyhow!("USDT probe {provider}:{name} at {pc:#x} is in no segment"))?;
    let semaphore = if semaphore == 0 {
        0
    } else {
        to_file(semaphore).ok_or_else(|| {
            anyhow!(
                "the semaphore of USDT probe {provider}:{name} at {semaphore:#x} is in no segment"
            )
        })?
    };
    Ok(UsdtNote {
        provider,
        name,
        address: pc,
        file_offset,
        semaphore,
        args,
    })
}

/// The sites of a phase's `usdt` list in `notes`: the first name's are the starts, the
/// others' the dones. An error names what is missing and the probes the object has.
pub fn resolve(names: &[String], notes: &[UsdtNote], shown: &str) -> Result<UsdtPhase, String> {
    let sites = |full: &str| -> Vec<UsdtNote> {
        notes
            .iter()
            .filter(|n| n.full_name() == full)
            .cloned()
            .collect()
    };
    let missing: Vec<&String> = names.iter().filter(|n| sites(n).is_empty()).collect();
    if !missing.is_empty() {
        let what = missing
            .iter()
            .map(|m| format!("'{m}'"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(if notes.is_empty() {
            format!(
                "no USDT probe {what} in {shown}: it has no USDT probes (no .note.stapsdt; \
                 built without --enable-dtrace / sdt.h?)"
            )
        } else {
            format!(
                "no USDT probe {what} in {shown} ({} probes there)",
                notes.len()
            )
        });
    }
    Ok(UsdtPhase {
        starts: sites(&names[0]),
        dones: names[1..].iter().flat_map(|n| sites(n)).collect(),
    })
}

/// The nearest probe names to `wanted` among `notes`, best first (for the unresolved message).
pub fn nearest(wanted: &str, notes: &[UsdtNote]) -> Vec<String> {
    let mut names: Vec<String> = notes.iter().map(UsdtNote::full_name).collect();
    names.sort();
    names.dedup();
    let mut scored: Vec<(f64, String)> = names
        .into_iter()
        .map(|n| (strsim::jaro_winkler(wanted, &n), n))
        .filter(|(s, _)| *s > 0.8)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(5).map(|(_, n)| n).collect()
}

/// The probe site as a [`Site`]: a USDT site is a `nop` the kernel emulates (or, built with a
/// recent sdt.h, a 5-byte nop it optimises into a call).
pub fn site(note: &UsdtNote) -> Site {
    Site {
        file_offset: note.file_offset,
        cost: CostClass::Nop,
    }
}

/// Argument `n` (0-based) of a note's argument string.
pub fn argument(args: &str, n: usize) -> anyhow::Result<UsdtArg> {
    let specs: Vec<&str> = args.split_whitespace().collect();
    let Some(spec) = specs.get(n) else {
        bail!(
            "the probe has {} argument{} ({args:?}), no argument {n}",
            specs.len(),
            if specs.len() == 1 { "" } else { "s" }
        );
    };
    parse_arg(spec).with_context(|| format!("argument {n} ({spec:?})"))
}

/// One x86-64 argument spec: `[-]SIZE@OPERAND`, the operand `%reg`, `$imm`, `disp(%reg)` or
/// `(%reg)`. Index forms (`(%rax,%rbx,8)`) and symbols are refused.
pub fn parse_arg(spec: &str) -> anyhow::Result<UsdtArg> {
    let (size, operand) = match spec.split_once('@') {
        Some((s, o)) => {
            let n: i8 = s.parse().with_context(|| format!("bad size {s:?}"))?;
            (n, o)
        }
        // Old notes write no size: 8 bytes, signed.
        None => (-8, spec),
    };
    let width = size.unsigned_abs();
    if ![1, 2, 4, 8].contains(&width) {
        bail!("size {size} is not 1, 2, 4 or 8 bytes");
    }
    let mut arg = UsdtArg {
        size: width,
        signed: u8::from(size < 0),
        ..UsdtArg::default()
    };
    if let Some(imm) = operand.strip_prefix('$') {
        arg.kind = USDT_ARG_CONST;
        arg.value = parse_int(imm)?;
    } else if let Some(reg) = operand.strip_prefix('%') {
        arg.kind = USDT_ARG_REG;
        arg.reg = register(reg)?;
    } else if let Some((disp, rest)) = operand.split_once('(') {
        let reg = rest
            .strip_suffix(')')
            .and_then(|r| r.strip_prefix('%'))
            .ok_or_else(|| anyhow!("unsupported memory operand {operand:?}"))?;
        if reg.contains(',') {
            bail!("indexed memory operands are not supported ({operand:?})");
        }
        arg.kind = USDT_ARG_DEREF;
        arg.reg = register(reg)?;
        if reg == "rip" {
            bail!("rip-relative operands are not supported ({operand:?})");
        }
        arg.value = if disp.is_empty() { 0 } else { parse_int(disp)? };
    } else {
        bail!("unsupported operand {operand:?}");
    }
    Ok(arg)
}

fn parse_int(s: &str) -> anyhow::Result<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let v = match digits.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => digits.parse(),
    }
    .with_context(|| format!("bad number {s:?}"))?;
    Ok(if neg { -v } else { v })
}

/// The index in `USDT_REGISTERS` of a register named in any width (`eax`, `r8d`, `sil`...).
fn register(name: &str) -> anyhow::Result<u8> {
    let full = match name {
        "eax" | "ax" | "al" => "rax",
        "ebx" | "bx" | "bl" => "rbx",
        "ecx" | "cx" | "cl" => "rcx",
        "edx" | "dx" | "dl" => "rdx",
        "esi" | "si" | "sil" => "rsi",
        "edi" | "di" | "dil" => "rdi",
        "ebp" | "bp" | "bpl" => "rbp",
        "esp" | "sp" | "spl" => "rsp",
        n if n.starts_with('r') && n.len() > 2 => n.trim_end_matches(['d', 'w', 'b']),
        n => n,
    };
    USDT_REGISTERS
        .iter()
        .position(|r| *r == full)
        .map(|i| i as u8)
        .ok_or_else(|| anyhow!("unknown register %{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_specs_decode_as_gas_writes_them() {
        let a = parse_arg("-4@%eax").unwrap();
        assert_eq!((a.kind, a.reg, a.size, a.signed), (USDT_ARG_REG, 0, 4, 1));
        let a = parse_arg("8@-24(%rbp)").unwrap();
        assert_eq!(
            (a.kind, a.reg, a.value, a.size),
            (USDT_ARG_DEREF, 6, -24, 8)
        );
        let a = parse_arg("4@60(%rax)").unwrap();
        assert_eq!(
            (a.kind, a.reg, a.value, a.signed),
            (USDT_ARG_DEREF, 0, 60, 0)
        );
        let a = parse_arg("-4@$1").unwrap();
        assert_eq!((a.kind, a.value), (USDT_ARG_CONST, 1));
        let a = parse_arg("8@%r12").unwrap();
        assert_eq!(a.reg, 12);
        assert_eq!(parse_arg("1@%r9b").unwrap().reg, 9);
        assert_eq!(parse_arg("4@(%rdi)").unwrap().value, 0);
        assert!(parse_arg("8@(%rax,%rbx,8)").is_err());
        assert!(parse_arg("3@%eax").is_err());
        assert!(parse_arg("8@%xmm0").is_err());
        assert!(argument("-4@$1", 1).is_err());
    }

    #[test]
    fn debian_postgres_notes_resolve_with_semaphores() {
        let path = "/usr/lib/postgresql/15/bin/postgres";
        let Ok(data) = std::fs::read(path) else {
            assert!(
                std::env::var("WPROF_REQUIRE_BPF").map_or(true, |v| v != "1"),
                "{path} is missing (installed by .ci/install.sh)"
            );
            return;
        };
        let notes = notes(&data).unwrap();
        assert!(notes.len() >= 60, "{} notes", notes.len());
        let start = notes
            .iter()
            .find(|n| n.full_name() == "postgresql:transaction__start")
            .unwrap();
        assert_ne!(start.semaphore, 0);
        // A USDT site is a nop.
        assert_eq!(data[start.file_offset as usize], 0x90);
        let phase = resolve(
            &[
                "postgresql:transaction__start".into(),
                "postgresql:transaction__commit".into(),
                "postgresql:transaction__abort".into(),
            ],
            &notes,
            path,
        )
        .unwrap();
        assert_eq!(phase.dones.len(), 2);
        let err = resolve(&["postgresql:transaction__begin".into()], &notes, path).unwrap_err();
        assert!(
            err.contains("no USDT probe 'postgresql:transaction__begin'"),
            "{err}"
        );
        assert_eq!(
            nearest("postgresql:transaction__begin", &notes)[0],
            "postgresql:transaction__abort"
        );
    }
}
