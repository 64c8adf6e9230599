//! Disassembly (iced-x86, 64-bit) of a function's bytes: where and how dearly it can be probed.
//!
//! In: an [`ObjectSymbols`] and one of its [`Function`]s. Out: the entry [`Site`] with the
//! [`CostClass`] of its instruction (NOP -> `Nop`; `push r64` and relative call/jmp/jcc ->
//! `Emulated`; anything else -> `SingleStep`), and the exit sites: every RET (`c3`, `c2 iw`,
//! `rep ret`) and every direct JMP whose target lies outside the function (a tail call). The
//! function's own `.cold` fragments (GCC hot/cold splitting, same stack frame) count as inside:
//! a jump into one is not an exit, and its RETs are exits of the function.
//!
//! A function that starts with `endbr64` (`-fcf-protection`) gets its entry site on the next
//! instruction, at +4 ([`entry_site`]): the kernel single-steps `endbr64` (~5-6 µs a hit on
//! these VMs) but emulates the `push %rbp` that usually follows (~0.6-0.7 µs).

use anyhow::{anyhow, bail, Context};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

use super::symbols::{Function, ObjectSymbols};
use crate::model::CostClass;
use crate::resolve::Site;

/// Longest x86 instruction.
const MAX_INSN: u64 = 15;

/// A run of code: its bytes, virtual address and file offset.
#[derive(Debug, Clone, Copy)]
pub struct Code<'a> {
    /// The instructions' bytes.
    pub bytes: &'a [u8],
    /// Virtual address of `bytes[0]`.
    pub address: u64,
    /// File offset of `bytes[0]`.
    pub file_offset: u64,
}

impl Code<'_> {
    fn contains(&self, addr: u64) -> bool {
        addr >= self.address && addr - self.address < self.bytes.len() as u64
    }
}

/// Cost class of a uprobe on `insn` (facts.md, "What a probe costs here").
pub fn cost_of(insn: &Instruction) -> CostClass {
    if insn.mnemonic() == Mnemonic::Nop {
        return CostClass::Nop;
    }
    let reg = insn.op0_register() as u32;
    let push_r64 = insn.mnemonic() == Mnemonic::Push
        && insn.op0_kind() == OpKind::Register
        && (Register::RAX as u32..=Register::R15 as u32).contains(&reg);
    let relative_branch = insn.op0_kind() == OpKind::NearBranch64
        && (matches!(insn.mnemonic(), Mnemonic::Call | Mnemonic::Jmp) || is_jcc(insn.mnemonic()));
    if push_r64 || relative_branch {
        CostClass::Emulated
    } else {
        CostClass::SingleStep
    }
}

/// A conditional jump (`jcc`; not `loop`/`jrcxz`, which the kernel single-steps).
pub fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Ja | Jae | Jb | Jbe | Je | Jg | Jge | Jl | Jle | Jne | Jno | Jnp | Jns | Jo | Jp | Js
    )
}

/// A direct (relative) JMP.
pub fn is_direct_jmp(insn: &Instruction) -> bool {
    insn.mnemonic() == Mnemonic::Jmp && insn.op0_kind() == OpKind::NearBranch64
}

/// Cost class of the first instruction in `bytes` (SingleStep if it does not decode).
pub fn entry_cost(bytes: &[u8], address: u64) -> CostClass {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        CostClass::SingleStep
    } else {
        cost_of(&insn)
    }
}

/// Why the kernel would refuse a uprobe on the instruction at the start of `bytes`, if it
/// would: x86 uprobes reject a `lock` prefix and the ES/CS/SS/DS segment prefixes (the attach
/// then fails with error 524, ENOTSUPP, naming nothing), and cannot take an undecodable
/// instruction or an `int3` already there.
pub fn unprobeable(bytes: &[u8], address: u64) -> Option<String> {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        return Some("its instruction does not decode".into());
    }
    let why = if insn.has_lock_prefix() {
        "a lock prefix"
    } else if matches!(
        insn.segment_prefix(),
        Register::ES | Register::CS | Register::SS | Register::DS
    ) {
        "a segment prefix"
    } else if insn.mnemonic() == Mnemonic::Int3 {
        "an int3 (a breakpoint already)"
    } else {
        return None;
    };
    let mut text = String::new();
    iced_x86::FastFormatter::new().format(&insn, &mut text);
    Some(format!(
        "its first instruction `{text}` has {why}, which the kernel's uprobes refuse"
    ))
}

/// Exit sites of a function made of `parts` (its body first, then fragments of the same
/// frame): RETs, and direct JMPs to anything outside every part. In file-offset order.
pub fn exits_of(parts: &[Code<'_>]) -> Vec<Site> {
    let mut sites = Vec::new();
    let mut insn = Instruction::default();
    for part in parts {
        let mut decoder = Decoder::with_ip(64, part.bytes, part.address, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            let exit = match insn.mnemonic() {
                Mnemonic::Ret => true,
                _ if is_direct_jmp(&insn) => {
                    let target = insn.near_branch_target();
                    !parts.iter().any(|p| p.contains(target))
                }
                _ => false,
            };
            if exit {
                let file_offset = part.file_offset + (insn.ip() - part.address);
                sites.push(Site {
                    file_offset,
                    cost: cost_of(&insn),
                });
            }
        }
    }
    sites.sort_by_key(|s| s.file_offset);
    sites
}

/// `endbr64`: the first instruction of a function compiled with `-fcf-protection` (Intel
/// CET's marker of an indirect-branch target).
pub const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// The entry site of `f`: its first instruction; or, with `past_endbr` and a function that
/// starts with `endbr64`, the instruction after it (+4) when `after_endbr` finds that safe.
pub fn entry_site(obj: &ObjectSymbols, f: &Function, past_endbr: bool) -> anyhow::Result<Site> {
    // Size 0 (unknown): read one instruction's worth, or what the file has.
    let want = if f.size == 0 {
        MAX_INSN
    } else {
        f.size.min(MAX_INSN)
    };
    let bytes = (1..=want)
        .rev()
        .find_map(|n| obj.bytes(f.file_offset, n))
        .with_context(|| {
            format!(
                "{} has no bytes at file offset {:#x} ({})",
                obj.path.display(),
                f.file_offset,
                f.names[0].demangled
            )
        })?;
    let start = Site {
        file_offset: f.file_offset,
        cost: entry_cost(bytes, f.address),
    };
    if !past_endbr || !bytes.starts_with(&ENDBR64) {
        return Ok(start);
    }
    Ok(after_endbr(obj, f).unwrap_or(start))
}

/// The site right after the leading `endbr64` of `f` (+4), if a probe there sees what a probe
/// on the first instruction sees, once per call; None when that cannot be shown.
///
/// Why +4 is the same place: `endbr64` writes no register, flag or memory (Linux does not
/// enforce IBT in user space: it executes as a NOP), so at +4 the stack pointer and the return
/// address at `[rsp]` are still the caller's, and so are the argument registers. These are what
/// the BPF entry program reads (the frame's stack pointer matches returns and abandoned frames;
/// the return address identifies the call), and where a uretprobe, attached at the same site,
/// swaps the return address. In code built with `-fcf-protection` an indirect branch may only
/// land on an `endbr64`, never on +4, and compilers never jump into another function's body.
///
/// What is checked here, from the function's bytes (body and `.cold` fragments): its size is
/// known and covers the instruction at +4; no direct branch of its own targets +4 (a loop whose
/// head is the first instruction after `endbr64` would fire the entry probe on every
/// iteration); the instruction at +4 is no exit (in `endbr64; ret` or a tail-calling
/// `endbr64; jmp g`, entry and return would share one probe).
///
/// Nothing but `endbr64` is ever stepped over: every other first instruction changes what the
/// entry program reads. After `push %rbp` the stack pointer is 8 lower and `[rsp]` holds the
/// caller's rbp, not the return address; after `sub $N,%rsp` the stack pointer differs; a
/// `mov` may overwrite an argument register a phase captures (`arg = N`).
fn after_endbr(obj: &ObjectSymbols, f: &Function) -> Option<Site> {
    let skip = ENDBR64.len() as u64;
    if f.size <= skip {
        return None;
    }
    let parts = function_code(obj, f).ok()?;
    let target = f.address + skip;
    let next = Decoder::with_ip(
        64,
        &parts[0].bytes[skip as usize..],
        target,
        DecoderOptions::NONE,
    )
    .decode();
    if next.is_invalid() || next.next_ip() > f.address + f.size {
        return None;
    }
    let mut insn = Instruction::default();
    for p in &parts {
        let mut decoder = Decoder::with_ip(64, p.bytes, p.address, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            if insn.op0_kind() == OpKind::NearBranch64 && insn.near_branch_target() == target {
                return None;
            }
        }
    }
    let site = f.file_offset + skip;
    if exits_of(&parts).iter().any(|s| s.file_offset == site) {
        return None;
    }
    Some(Site {
        file_offset: site,
        cost: cost_of(&next),
    })
}

/// The exit sites of `f` (see the module doc). Fails when the size is unknown, or when the
/// bytes are not in the file.
pub fn exit_sites(obj: &ObjectSymbols, f: &Function) -> anyhow::Result<Vec<Site>> {
    let name = &f.names[0].demangled;
    if f.size == 0 {
        bail!("{name} in {}: size unknown, cannot find its RET instructions; use return = \"uretprobe\"",
            obj.path.display());
    }
    let parts = function_code(obj, f).map_err(|(file_offset, size)| {
        anyhow!(
            "{name} in {}: bytes [{file_offset:#x}, +{size:#x}) are not in the file",
            obj.path.display()
        )
    })?;
    Ok(exits_of(&parts))
}

/// The code of `f`: its body, then its `.cold` fragments (code of the same frame, see the
/// module doc); or the first of those ranges the file does not hold, as (file offset, size).
fn function_code<'a>(obj: &'a ObjectSymbols, f: &Function) -> Result<Vec<Code<'a>>, (u64, u64)> {
    let fragments = obj.cold_fragments_of(f).filter(|fr| fr.size > 0);
    std::iter::once((f.file_offset, f.address, f.size))
        .chain(fragments.map(|fr| (fr.file_offset, fr.address, fr.size)))
        .map(|(file_offset, address, size)| {
            let bytes = obj.bytes(file_offset, size).ok_or((file_offset, size))?;
            Ok(Code {
                bytes,
                address,
                file_offset,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::testutil::{build, objdump_rets};

    fn code(bytes: &[u8]) -> Code<'_> {
        Code {
            bytes,
            address: 0x1000,
            file_offset: 0x100,
        }
    }

    #[test]
    fn entry_classes() {
        assert_eq!(entry_cost(&[0x90], 0), CostClass::Nop);
        assert_eq!(
            entry_cost(&[0x0f, 0x1f, 0x44, 0x00, 0x00], 0),
            CostClass::Nop
        );
        assert_eq!(entry_cost(&[0x66, 0x90], 0), CostClass::Nop);
        assert_eq!(entry_cost(&[0x55], 0), CostClass::Emulated); // push %rbp
        assert_eq!(entry_cost(&[0x41, 0x57], 0), CostClass::Emulated); // push %r15
        assert_eq!(entry_cost(&[0xe8, 0, 0, 0, 0], 0), CostClass::Emulated); // call rel32
        assert_eq!(entry_cost(&[0xeb, 0x00], 0), CostClass::Emulated); // jmp rel8
        assert_eq!(entry_cost(&[0x74, 0x00], 0), CostClass::Emulated); // je rel8
        assert_eq!(
            entry_cost(&[0xf3, 0x0f, 0x1e, 0xfa], 0),
            CostClass::SingleStep
        ); // endbr64
        assert_eq!(entry_cost(&[0x48, 0x89, 0xe5], 0), CostClass::SingleStep); // mov %rsp,%rbp
        assert_eq!(
            entry_cost(&[0x48, 0x83, 0xec, 0x08], 0),
            CostClass::SingleStep
        ); // sub
        assert_eq!(
            entry_cost(&[0xff, 0x35, 0, 0, 0, 0], 0),
            CostClass::SingleStep
        ); // push mem
    }

    #[test]
    fn rets_and_tail_calls() {
        // test edi,edi; je +1; ret; rep ret; ret 8; jmp -> outside (tail call); jmp back (inside)
        let bytes = [
            0x85, 0xff, 0x74, 0x01, 0xc3, 0xf3, 0xc3, 0xc2, 0x08, 0x00, 0xe9, 0x00, 0x10, 0x00,
            0x00, 0xeb, 0xef,
        ];
        let sites = exits_of(&[code(&bytes)]);
        let offs: Vec<u64> = sites.iter().map(|s| s.file_offset).collect();
        assert_eq!(offs, vec![0x104, 0x105, 0x107, 0x10a]);
        assert_eq!(sites[0].cost, CostClass::SingleStep);
        assert_eq!(sites[3].cost, CostClass::Emulated);
        // the same jump, once its target is a fragment of the function, is no exit.
        let cold = [0xc3u8];
        let frag = Code {
            bytes: &cold,
            address: 0x1000 + 15 + 0x1000,
            file_offset: 0x5000,
        };
        let offs: Vec<u64> = exits_of(&[code(&bytes), frag])
            .iter()
            .map(|s| s.file_offset)
            .collect();
        assert_eq!(offs, vec![0x104, 0x105, 0x107, 0x5000]);
    }

    #[test]
    fn real_functions_match_objdump() {
        let dir = tempfile::tempdir().unwrap();
        let src = r#"
            int __attribute__((noinline)) many(int x) {
                if (x == 1) return 10;
                if (x == 2) return 20;
                if (x > 100) { volatile int y = x; return y * 7; }
                return x;
            }
            int framed(int x) { return many(x) + 1; }
        "#;
        let cet = build(
            dir.path(),
            "cet.so",
            src,
            false,
            &["-O2", "-shared", "-fPIC", "-fcf-protection=full"],
        );
        let fp = build(
            dir.path(),
            "fp.so",
            src,
            false,
            &[
                "-O0",
                "-shared",
                "-fPIC",
                "-fno-omit-frame-pointer",
                "-fcf-protection=none",
            ],
        );
        for (obj, first) in [(&cet, CostClass::SingleStep), (&fp, CostClass::Emulated)] {
            let syms = ObjectSymbols::load(obj).unwrap();
            for name in ["many", "framed"] {
                let f = syms
                    .functions
                    .iter()
                    .find(|f| f.names[0].mangled == name)
                    .unwrap();
                assert_eq!(
                    entry_site(&syms, f, false).unwrap().cost,
                    first,
                    "{name} in {}",
                    obj.display()
                );
                let exits = exit_sites(&syms, f).unwrap();
                let rets = exits
                    .iter()
                    .filter(|s| s.cost == CostClass::SingleStep)
                    .count();
                assert_eq!(rets, objdump_rets(obj, name), "{name} in {}", obj.display());
                assert!(!exits.is_empty());
            }
        }
    }

    #[test]
    fn size_zero_is_an_error_for_exits() {
        let dir = tempfile::tempdir().unwrap();
        let so = build(
            dir.path(),
            "z.so",
            "int f(void){return 1;}",
            false,
            &["-shared", "-fPIC"],
        );
        let syms = ObjectSymbols::load(&so).unwrap();
        let mut f = syms
            .functions
            .iter()
            .find(|f| f.names[0].mangled == "f")
            .unwrap()
            .clone();
        f.size = 0;
        let e = exit_sites(&syms, &f).unwrap_err().to_string();
        assert!(
            e.contains("size unknown") && e.contains("return = \"uretprobe\""),
            "{e}"
        );
        // Size unknown: an endbr64 would not be stepped over either (nothing to check it by).
        let entry = entry_site(&syms, &f, true).unwrap();
        assert_eq!(entry.file_offset, f.file_offset);
    }

    /// Functions written in assembly, each starting with `endbr64` (but `plain`), built into a
    /// CET executable: where the entry probe goes, and the class it gets there.
    const ENDBR_ASM: &str = r#"
        __asm__(
            ".text\n"
            ".globl framed\n.type framed,@function\nframed:\n"
            "endbr64\npush %rbp\nmov %rsp,%rbp\nmov %edi,%eax\npop %rbp\nret\n.size framed,.-framed\n"
            ".globl nopped\n.type nopped,@function\nnopped:\n"
            "endbr64\nnopl 0x0(%rax,%rax,1)\nmov %edi,%eax\nret\n.size nopped,.-nopped\n"
            ".globl movfirst\n.type movfirst,@function\nmovfirst:\n"
            "endbr64\nmov %edi,%eax\nret\n.size movfirst,.-movfirst\n"
            ".globl loop4\n.type loop4,@function\nloop4:\n"
            "endbr64\n1: dec %edi\njnz 1b\nret\n.size loop4,.-loop4\n"
            ".globl ret4\n.type ret4,@function\nret4:\n"
            "endbr64\nret\n.size ret4,.-ret4\n"
            ".globl tail4\n.type tail4,@function\ntail4:\n"
            "endbr64\njmp framed\n.size tail4,.-tail4\n"
            ".globl lone\n.type lone,@function\nlone:\n"
            "endbr64\n.size lone,.-lone\n"
            ".globl plain\n.type plain,@function\nplain:\n"
            "push %rbp\npop %rbp\nret\n.size plain,.-plain\n");
        int framed(int); int nopped(int); int movfirst(int); int loop4(int); int ret4(void);
        int tail4(int); int plain(void);
        int main(int argc, char **argv) {
            (void)argv;
            return framed(argc) + nopped(argc) + movfirst(argc) + loop4(argc) + ret4()
                + tail4(argc) + plain();
        }
    "#;

    #[test]
    fn endbr64_is_stepped_over_only_where_nothing_else_runs() {
        let dir = tempfile::tempdir().unwrap();
        let exe = build(
            dir.path(),
            "endbr",
            ENDBR_ASM,
            false,
            &["-O2", "-fcf-protection=full"],
        );
        let syms = ObjectSymbols::load(&exe).unwrap();
        let func = |name: &str| {
            syms.functions
                .iter()
                .find(|f| f.names[0].mangled == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        // (function, bytes from its start to the entry site, class there)
        let want = [
            ("framed", 4, CostClass::Emulated),
            ("nopped", 4, CostClass::Nop),
            // Moved, though no cheaper: endbr64 and mov are both single-stepped.
            ("movfirst", 4, CostClass::SingleStep),
            // A loop jumps back to +4: a probe there would fire on every iteration.
            ("loop4", 0, CostClass::SingleStep),
            // +4 is the function's RET / tail call: entry and return would share one probe.
            ("ret4", 0, CostClass::SingleStep),
            ("tail4", 0, CostClass::SingleStep),
            // Nothing after the endbr64.
            ("lone", 0, CostClass::SingleStep),
            // No endbr64: never moved.
            ("plain", 0, CostClass::Emulated),
        ];
        for (name, offset, cost) in want {
            let f = func(name);
            let site = entry_site(&syms, f, true).unwrap();
            assert_eq!(site.file_offset - f.file_offset, offset, "{name}");
            assert_eq!(site.cost, cost, "{name}");
            // WPROF_ENTRY_AT_ENDBR=1: always the first instruction.
            let first = entry_site(&syms, f, false).unwrap();
            assert_eq!(first.file_offset, f.file_offset, "{name}");
            let at_start = if name == "plain" {
                CostClass::Emulated
            } else {
                CostClass::SingleStep
            };
            assert_eq!(first.cost, at_start, "{name}");
        }
    }
}
